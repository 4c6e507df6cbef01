"""State-space models and hybrids (issue 15): Mamba-2, Falcon-H1, Granite 4 (granitemoehybrid) and
Jamba (Mamba-1 mixers) counted exactly against transformers, their scan FLOPs, recurrent state
and KV cache by hand.

Hand numbers use transformers' Mamba2Config defaults (Mamba-Codestral-7B's shape): hidden 4,096,
64 layers, 128 heads of 64, state 128, 8 groups, conv 4, chunk 256, expand 2 (inner 8,192,
conv_dim 8,192 + 2 x 8 x 128 = 10,240).
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuhours.errors import FieldError
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.flops import (
    attention_forward_flops_per_token,
    generation_flops_per_token,
    lora_params_per_layer,
)
from gpuhours.estimate.generation import (
    kv_bytes_per_token_per_gpu,
    kv_cache_bytes_per_token,
    state_bytes_per_sequence_per_gpu,
)
from gpuhours.estimate.params import count_params
from gpuhours.estimate.ssm import hybrid_layer_bytes

MAMBA2: dict[str, Any] = dict(model_type="mamba2", hidden_size=4096, num_hidden_layers=64,
                              num_heads=128, head_dim=64, state_size=128, n_groups=8,
                              conv_kernel=4, chunk_size=256, expand=2, vocab_size=32768)

NONE_IDS = dict(eos_token_id=None, bos_token_id=None, pad_token_id=None)
SMALL = [
    ("mamba2", dict(hidden_size=64, num_hidden_layers=3, num_heads=8, head_dim=16, state_size=16,
                    n_groups=2, vocab_size=500, expand=2)),
    ("mamba2", dict(hidden_size=64, num_hidden_layers=3, num_heads=8, head_dim=16, state_size=16,
                    n_groups=2, vocab_size=500, expand=2, use_bias=True, use_conv_bias=False,
                    tie_word_embeddings=True)),
    ("falcon_h1", dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                       num_key_value_heads=2, intermediate_size=96, vocab_size=500,
                       mamba_d_ssm=128, mamba_n_heads=8, mamba_d_head=16, mamba_d_state=16,
                       mamba_n_groups=2)),
    ("falcon_h1", dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                       num_key_value_heads=2, intermediate_size=96, vocab_size=500,
                       mamba_d_ssm=None, mamba_n_heads=8, mamba_d_state=16, mamba_rms_norm=True,
                       projectors_bias=True, mamba_proj_bias=True, attention_bias=True,
                       mlp_bias=True)),
    ("granitemoehybrid", dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                              num_key_value_heads=2, intermediate_size=32,
                              shared_intermediate_size=48, vocab_size=500, num_local_experts=4,
                              num_experts_per_tok=2, mamba_n_heads=8, mamba_d_head=16,
                              mamba_d_state=16,
                              layer_types=["linear_attention", "attention", "linear_attention",
                                           "attention"])),
    ("jamba", dict(hidden_size=64, num_hidden_layers=6, num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=96, vocab_size=500, mamba_d_state=8,
                   mamba_dt_rank=8, num_experts=4, num_experts_per_tok=2, attn_layer_period=3,
                   attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1)),
    ("jamba", dict(hidden_size=64, num_hidden_layers=6, num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=96, vocab_size=500, mamba_d_state=8,
                   num_experts=1, num_experts_per_tok=1, attn_layer_period=2, attn_layer_offset=0,
                   mamba_proj_bias=True, mamba_conv_bias=False, tie_word_embeddings=True)),
    ("granitemoehybrid", dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                              num_key_value_heads=2, intermediate_size=32,
                              shared_intermediate_size=48, vocab_size=500, num_local_experts=0,
                              num_experts_per_tok=2, mamba_n_heads=8, mamba_d_head=16,
                              mamba_d_state=16, layer_types=["mamba", "attention", "mamba",
                                                             "mamba"])),
]


@pytest.mark.parametrize(("model_type", "variant"), SMALL)
def test_small_variants_are_exact(model_type: str, variant: dict[str, Any]) -> None:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    config = {"model_type": model_type, **NONE_IDS, **variant}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**config))
    real = sum(p.numel() for p in model.parameters())
    assert count_params(from_hf_config(config, model_type)).total == real


def test_mamba2_parameters_by_hand() -> None:
    """Per mixer: in_proj 4096 x (8192 + 10240 + 128), out_proj 8192 x 4096, conv 10240 x 4
    and its bias, dt_bias, A_log and D (128 each), the gated norm (8192); one RMSNorm per block;
    the embedding and the untied head 32768 x 4096; the final norm."""
    mixer = 4096 * 18560 + 8192 * 4096 + 10240 * 5 + 3 * 128 + 8192
    counts = count_params(from_hf_config(MAMBA2, "m2"))
    assert counts.total == 64 * (mixer + 4096) + 2 * 32768 * 4096 + 4096
    assert counts.matmul_active == 64 * (4096 * 18560 + 8192 * 4096) + 32768 * 4096


def test_mamba2_scan_flops_and_state_by_hand() -> None:
    """SSD per token and layer, 2 x (G Q N + H (Q P + 2 N P)) + 2 conv_dim K =
    2 x (8 x 256 x 128 + 128 x (256 x 64 + 2 x 128 x 64)) + 2 x 10240 x 4 = 8,994,816 FLOPs; a
    decode step 4 H P N + 2 conv_dim K = 4,276,224. The state per sequence: 64 x (128 x 64 x 128
    + 10240 x 3) = 69,074,944 elements, 138,149,888 bytes in bf16 whatever the length; no KV."""
    arch = from_hf_config(MAMBA2, "m2")
    assert arch.ssm is not None
    assert arch.ssm.scan_flops_per_token == 8_994_816
    assert arch.ssm.decode_flops_per_token == 4_276_224
    # no attention: the "attention" part of training is the scans alone, whatever the length
    assert attention_forward_flops_per_token(arch, 4096) == 64 * 8_994_816
    assert attention_forward_flops_per_token(arch, 512) == 64 * 8_994_816
    matmul = count_params(arch).matmul_active
    assert generation_flops_per_token(arch, 100_000) == 2 * matmul + 64 * 4_276_224
    assert kv_cache_bytes_per_token(arch, 2.0) == 0
    assert state_bytes_per_sequence_per_gpu(arch, 2.0, 1) == 138_149_888
    assert state_bytes_per_sequence_per_gpu(arch, 2.0, 4) == 138_149_888 / 4


def test_falcon_h1_keeps_kv_and_state() -> None:
    """Falcon-H1 (FalconH1Config defaults): attention and a mixer in all 32 layers. KV per
    token 2 x 32 x 8 x 128 x 2 = 131,072 B; state per sequence 32 x (128 x 8 x 256 + (1024 +
    2 x 256) x 3) x 2 bytes."""
    transformers = pytest.importorskip("transformers")
    arch = from_hf_config(transformers.AutoConfig.for_model("falcon_h1").to_dict(), "h1")
    assert (arch.attention_layer_count, arch.ssm_layers) == (32, 32)
    assert kv_cache_bytes_per_token(arch, 2.0) == 131_072
    assert state_bytes_per_sequence_per_gpu(arch, 2.0, 1) == 32 * (128 * 8 * 256 + 1536 * 3) * 2


def test_granite_hybrid_kv_only_on_attention_layers() -> None:
    variant = SMALL[4][1]
    assert SMALL[4][0] == "granitemoehybrid"
    arch = from_hf_config({"model_type": "granitemoehybrid", **variant}, "g4")
    assert (arch.attention_layer_count, arch.ssm_layers) == (2, 2)
    # 2 attention layers x 2 KV heads x 16 (64 / 4) x K and V x 2 bytes
    assert kv_bytes_per_token_per_gpu(arch, 2.0, 1) == 2 * 2 * 2 * 16 * 2
    # 4 query heads x 16 per attention layer, 2 of 4 layers
    assert arch.score_flops_per_key == 4 * 64 * 2


def test_mamba2_activations_and_lora() -> None:
    """No attention and no MLP: the mixer's saved in_proj output a (inner + conv_dim + heads),
    and under full fine-tuning the in_proj and out_proj inputs a (d + inner). LoRA: peft
    refuses out_proj and there is no attention, so every target list is refused."""
    arch = from_hf_config(MAMBA2, "m2")
    assert hybrid_layer_bytes(arch, 1e9, 1e9, 2, full=True) == 2 * (18560 + 4096 + 8192)
    assert hybrid_layer_bytes(arch, 1e9, 1e9, 2, full=False) == 2 * 18560
    # peft refuses LoRA on a Mamba-2 LM's out_proj, so "all-linear" is refused (estimate/lora.py)
    with pytest.raises(FieldError, match="out_proj"):
        lora_params_per_layer(arch, 8, "all-linear")
    with pytest.raises(FieldError, match="no attention layers"):
        lora_params_per_layer(arch, 8, "qv")


def test_jamba_layers_kv_and_state_by_hand() -> None:
    """Jamba (JambaConfig defaults, Jamba-v0.1's shape): 32 layers, attention where i % 8 == 4
    (4 layers), MoE where i % 2 == 1 (16 layers). KV per token 2 x 4 x 8 x 128 x 2 = 16,384 B,
    an eighth of what reading every layer as attention gives; the Mamba-1 state per sequence
    28 x (8192 x 16 + 8192 x 3) elements = 8,716,288 B in bf16; a scan step 7 x 8192 x 16 +
    2 x 8192 x 4 FLOPs per layer."""
    transformers = pytest.importorskip("transformers")
    arch = from_hf_config(transformers.AutoConfig.for_model("jamba").to_dict(), "jamba")
    assert arch.ssm is not None
    assert (arch.attention_layer_count, arch.ssm_layers, arch.moe_layers) == (4, 28, 16)
    assert kv_cache_bytes_per_token(arch, 2.0) == 16_384
    assert state_bytes_per_sequence_per_gpu(arch, 2.0, 1) == 8_716_288
    assert arch.ssm.decode_flops_per_token == 7 * 8192 * 16 + 2 * 8192 * 4
    # LoRA all-linear on a mixer: in_proj 4096 -> 16384, x_proj 8192 -> 256 + 32, dt_proj
    # 256 -> 8192, out_proj 8192 -> 4096
    assert sum(a + b for a, b in arch.ssm.linears(4096)) == (4096 + 16384 + 8192 + 288
                                                               + 256 + 8192 + 8192 + 4096)


def test_falcon_mamba_is_read_as_the_mamba_1_model_it_is() -> None:
    # transformers' FalconMambaMixer is Mamba-1 with weightless RMS norms on B, C and the time
    # step: a user's real config (model_type falcon_mamba) was refused while the validation's
    # copy of it, rewritten to model_type mamba, was estimated. Counted against transformers.
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    config = {"model_type": "falcon_mamba", **NONE_IDS, "hidden_size": 64,
              "num_hidden_layers": 3, "state_size": 8, "expand": 2, "conv_kernel": 4,
              "time_step_rank": 8, "vocab_size": 500, "use_bias": False,
              "use_conv_bias": True, "tie_word_embeddings": False}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**config))
    real = sum(p.numel() for p in model.parameters())
    arch = from_hf_config(config, "falcon_mamba")
    assert count_params(arch).total == real
    assert arch.ssm is not None and arch.attention_layers == 0
    assert count_params(from_hf_config({**config, "model_type": "mamba"}, "m")).total == real
