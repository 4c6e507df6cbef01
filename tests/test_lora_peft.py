"""LoRA adapter counts held to peft (issue 15): for a tiny model of every covered family that
LoRA trains (dense, MoE, latent attention, SSM and hybrids), built by transformers from its
config (on the meta device: peft wraps it as it would real weights), peft's trainable
parameters under LoraConfig(target_modules=...) equal gpuhours' lora_trainable_params. Where
peft refuses (Mamba's out_proj under "all-linear") or the targets name nothing, gpuhours
refuses too."""

from __future__ import annotations

from typing import Any

import pytest

from gpuhours.errors import FieldError
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.lora import adapted_linears, lora_active_params
from gpuhours.estimate.memory import lora_trainable_params
from peft_count import peft_trainable_params

IDS: dict[str, Any] = dict(eos_token_id=None, bos_token_id=None, pad_token_id=None)
BASE: dict[str, Any] = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                            num_key_value_heads=2, intermediate_size=32, vocab_size=500,
                            head_dim=16, **IDS)
MLA: dict[str, Any] = dict(num_key_value_heads=4, intermediate_size=96, moe_intermediate_size=24,
                           n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=2,
                           kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4,
                           v_head_dim=12, first_k_dense_replace=1, n_group=1, topk_group=1)
MAMBA2: dict[str, Any] = dict(mamba_n_heads=8, mamba_d_head=16, mamba_d_state=16)

CASES: list[tuple[str, dict[str, Any]]] = [
    ("llama", {}),
    ("qwen2", {}),
    ("gemma2", {}),
    ("phi3", {}),
    ("gpt2", dict(n_embd=64, n_layer=2, n_head=4, n_positions=64, vocab_size=500)),
    ("mpt", dict(d_model=64, n_layers=2, n_heads=4, max_seq_len=64, vocab_size=500)),
    ("mixtral", dict(num_local_experts=4, num_experts_per_tok=2)),
    ("qwen2_moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                       shared_expert_intermediate_size=24, mlp_only_layers=[0])),
    ("qwen3_moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                       mlp_only_layers=[1])),
    ("deepseek_v2", {**MLA, "q_lora_rank": None}),
    ("deepseek_v3", {**MLA, "q_lora_rank": 20}),
    ("llama4_text", dict(intermediate_size_mlp=96, num_local_experts=4, num_experts_per_tok=1,
                         interleave_moe_layer_step=2)),
    ("gpt_oss", dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=8)),
    ("glm4_moe", dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                      n_shared_experts=2, first_k_dense_replace=1, use_qk_norm=True,
                      attention_bias=True, n_group=1, topk_group=1)),
    ("olmoe", dict(num_experts=4, num_experts_per_tok=2)),
    ("granitemoe", dict(num_local_experts=4, num_experts_per_tok=2)),
    ("mamba2", dict(num_hidden_layers=2, num_heads=8, head_dim=16, state_size=16, n_groups=2,
                    expand=2)),
    ("falcon_h1", dict(num_hidden_layers=2, intermediate_size=96, mamba_d_ssm=128, **MAMBA2)),
    ("granitemoehybrid", dict(shared_intermediate_size=48, num_local_experts=4,
                              num_experts_per_tok=2, layer_types=["mamba", "attention"] * 2,
                              **MAMBA2)),
    ("granitemoehybrid", dict(shared_intermediate_size=48, num_local_experts=0,
                              layer_types=["mamba", "attention", "mamba", "mamba"], **MAMBA2)),
    ("jamba", dict(num_hidden_layers=6, intermediate_size=96, mamba_d_state=8, mamba_dt_rank=8,
                   num_experts=4, num_experts_per_tok=2, attn_layer_period=3,
                   attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1)),
    ("mamba", dict(num_hidden_layers=2, state_size=8, expand=2)),
    ("phi", dict(num_hidden_layers=2, intermediate_size=96, partial_rotary_factor=0.5)),
    ("starcoder2", dict(intermediate_size=96, use_bias=True)),
    ("gpt_neox", dict(num_hidden_layers=2, intermediate_size=96)),
    ("falcon", dict(num_hidden_layers=2, new_decoder_architecture=True, num_kv_heads=2)),
]

#: what "attention" is as a peft target list in each family (q, k, v, o by their names)
ATTENTION: dict[str, Any] = {
    "phi3": ["qkv_proj", "o_proj"],
    "gpt2": r".*\.attn\.(c_attn|c_proj)",
    "mpt": ["Wqkv", "out_proj"],
    "deepseek_v2": ["q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"],
    "deepseek_v3": ["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"],
    "phi": ["q_proj", "k_proj", "v_proj", "dense"],
    "gpt_neox": ["query_key_value", "dense"],
    "falcon": ["query_key_value", "dense"],
}
QV = ["q_proj", "v_proj"]
#: "qkv": the attention's input projections without the output one (ms-swift's defaults)
QKV: dict[str, Any] = {
    "phi3": ["qkv_proj"],
    "gpt2": r".*\.attn\.c_attn",
    "mpt": ["Wqkv"],
    "deepseek_v2": ["q_proj", "kv_a_proj_with_mqa", "kv_b_proj"],
    "deepseek_v3": ["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"],
    "gpt_neox": ["query_key_value"],
    "falcon": ["query_key_value"],
}


def _peft_count(config: dict[str, Any], targets: Any) -> int | None:
    """peft's trainable parameters on the model transformers builds, or None if peft refuses."""
    return peft_trainable_params(config, targets)


@pytest.mark.parametrize("targets", ["all-linear", "attention", "qkv", "qv"])
@pytest.mark.parametrize(("model_type", "variant"), CASES,
                         ids=[f"{t}-{i}" for i, (t, _) in enumerate(CASES)])
def test_adapter_count_equals_peft(model_type: str, variant: dict[str, Any],
                                   targets: str) -> None:
    base = {} if model_type in ("gpt2", "mpt") else BASE
    if model_type == "falcon":  # FalconConfig derives head_dim (a read-only property)
        base = {k: v for k, v in BASE.items() if k != "head_dim"}
    config = {"model_type": model_type, **base, **IDS, **variant}
    peft_targets = {"all-linear": "all-linear", "qv": QV,
                    "attention": ATTENTION.get(model_type, ["q_proj", "k_proj", "v_proj",
                                                            "o_proj"]),
                    "qkv": QKV.get(model_type, ["q_proj", "k_proj", "v_proj"])}[targets]
    arch = from_hf_config(config, model_type)
    real = _peft_count(config, peft_targets)
    if targets == "qv" and arch.mla is not None:
        # peft adapts q_proj alone (MLA has no v_proj) without a word: gpuhours refuses
        real = None
    if real is None:
        with pytest.raises(FieldError):
            lora_trainable_params(arch, 4, targets)
        return
    assert lora_trainable_params(arch, 4, targets) == real


def test_mixtral_experts_by_hand() -> None:
    """Mixtral, 4 layers, d 64, f 32, 4 experts, top-2, r 4: peft adapts q/k/v/o, the router
    (r (d + E)), the experts' fused gate_up_proj at rank 2r over E experts (2r E (d + 2f)) and
    down_proj at rank r (r E (f + d)); a token passes through 2 of the 4 experts' adapters."""
    config = {"model_type": "mixtral", **BASE, **CASES[6][1]}
    arch = from_hf_config(config, "mixtral")
    attention = 4 * ((64 + 64) + 2 * (64 + 32) + (64 + 64))
    router = 4 * (64 + 4)
    experts = 2 * 4 * 4 * (64 + 64) + 4 * 4 * (32 + 64)
    assert lora_trainable_params(arch, 4, "all-linear") == 4 * (attention + router + experts)
    active = 4 * (attention + router + experts / 2)
    assert lora_active_params(arch, 4, "all-linear") == active
    names = {a.name for a in adapted_linears(arch, "all-linear")}
    assert "experts_gate_up" in names and "mlp_gate" not in names


def test_mamba2_all_linear_refused_as_peft_does() -> None:
    arch = from_hf_config({"model_type": "mamba2", **BASE, **CASES[16][1]}, "m2")
    with pytest.raises(FieldError, match="out_proj"):
        lora_trainable_params(arch, 8, "all-linear")
