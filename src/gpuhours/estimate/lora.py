"""Which linear layers LoRA adapts, and its adapter parameters (elements), as peft adapts them.

gpuhours' `lora_targets` name peft target lists: "all-linear" is peft's own shorthand (every
nn.Linear / Conv1D module but the LM head); "attention" is the attention block's projections
(q, k, v, o; a fused qkv and o; multi-head latent attention's five); "qkv" the same without o
(ms-swift's defaults for Qwen-1, c_attn, and for llama-type models, q_proj, k_proj, v_proj);
"qv" is q_proj and v_proj.
One adapted linear of fan-in a and fan-out b holds r (a + b) parameters (A is r x a, B is b x r).

What "all-linear" finds depends on how transformers builds each family; facts checked with
transformers 5.23 and peft 0.21.2 on tiny models of every covered type (tests/test_lora_peft.py):
- Routed experts stored as 3-D parameters (every covered MoE family in transformers 5) are not
  nn.Linear and are not adapted, nor are routers that are custom modules (gpt-oss, Granite MoE,
  Jamba, Qwen2-MoE): only attention, dense MLPs and shared experts are.
- Llama 4's router is an nn.Linear (Llama4Router): adapted, r (d + E).
- peft converts "all-linear" back to transformers 4's names for the families whose checkpoint
  conversion follows Mixtral's or Qwen2-MoE's (peft utils/transformers_weight_conversion.py,
  _MOE_TARGET_MODULE_MAPPING; PEFT_FUSED_EXPERT_TYPES below): the router's weight and the
  experts' 3-D parameters become target_parameters (the fused gate_up_proj with rank 2r, the
  two projections it fuses: 2r E (d + 2f); down_proj r E (f + d)), and the Linear modules named
  gate_proj, up_proj, down_proj (dense MLPs, shared experts) are dropped from the targets.
- Mamba mixers: in_proj and out_proj (Mamba-1: x_proj and dt_proj too); but peft refuses
  out_proj in the model types of its Mamba list (mamba, mamba2, falcon_h1: tuners_utils.py
  _check_lora_target_modules_mamba), so "all-linear" raises there and is refused here too.
- Fused projections count once: phi3's qkv_proj and gate_up_proj, GPT-2's c_attn, MPT's Wqkv,
  Granite 4's shared_mlp.input_linear, GPT-NeoX's query_key_value, Falcon's query_key_value.
A vision-language model's tower is not adapted (LLaMA-Factory's default freezes it and targets
the language model; peft's bare "all-linear" would adapt the tower's linears too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuhours.errors import FieldError
from gpuhours.estimate.lora_mlp import mlp_only_linears

if TYPE_CHECKING:
    from gpuhours.estimate.arch import ModelArch

#: model types whose "all-linear" peft 0.21 converts to the router and the experts' 3-D
#: parameters (transformers' _MODEL_TO_CONVERSION_PATTERN maps them to mixtral or qwen2_moe,
#: and peft's _MOE_TARGET_MODULE_MAPPING has those two; qwen2_moe itself is not in the map)
PEFT_FUSED_EXPERT_TYPES = frozenset({"mixtral", "qwen3_moe", "olmoe", "deepseek_v2",
                                     "deepseek_v3", "glm4_moe"})
#: model types whose router is an nn.Linear (and so in "all-linear") without that conversion
LINEAR_ROUTER_TYPES = frozenset({"llama4_text", "llama4"})
#: peft refuses LoRA on out_proj (and conv1d) in these model types (tuners_utils.py)
PEFT_MAMBA_TYPES = frozenset({"mamba", "mamba2", "falcon_h1", "falcon_mamba", "nemotron_h"})
#: q, k and v in one matrix (d -> q + 2 kv); Qwen-1 (qwen, remote code: QWenAttention's c_attn)
FUSED_QKV_TYPES = frozenset({"phi3", "gpt2", "mpt", "gpt_neox", "falcon", "qwen"})
#: the gated MLP's gate and up in one matrix (d -> 2 f)
FUSED_GATE_UP_TYPES = frozenset({"phi3", "granitemoehybrid"})


@dataclass(frozen=True)
class Adapted:
    """One kind of adapted linear: `copies` of them in the model, each r x rank_factor x
    `width` parameters (width = fan-in + fan-out); `active` of the copies on one token's path."""

    name: str
    width: int
    copies: int
    active: float
    rank_factor: int = 1

    def params(self, rank: int) -> int:
        return rank * self.rank_factor * self.width * self.copies

    def active_params(self, rank: int) -> float:
        return rank * self.rank_factor * self.width * self.active


def _attention(arch: ModelArch, targets: str) -> list[tuple[str, int]]:
    """(name, width) of the attention linears of one attention layer that `targets` adapts."""
    d, q, kv = arch.hidden_size, arch.q_dim, arch.kv_dim
    m = arch.mla
    if m is not None:
        if targets == "qv":
            raise FieldError("lora_targets", f"{arch.name} has multi-head latent attention, "
                             "which has no q_proj and v_proj to adapt.",
                             "Use lora_targets 'attention' or 'all-linear'.")
        h = arch.num_heads
        qs = ([("q_a_proj", d + m.q_lora_rank), ("q_b_proj", m.q_lora_rank + h * m.qk_head_dim)]
              if m.q_lora_rank else [("q_proj", d + h * m.qk_head_dim)])
        mla = qs + [("kv_a_proj_with_mqa", d + m.kv_lora_rank + m.qk_rope_head_dim),
                    ("kv_b_proj", m.kv_lora_rank + h * (m.qk_nope_head_dim + m.v_head_dim))]
        # qkv: the q and kv projections without o_proj
        return mla if targets == "qkv" else mla + [("o_proj", h * m.v_head_dim + d)]
    if _text_type(arch) in FUSED_QKV_TYPES:
        if targets == "qv":
            raise FieldError("lora_targets", f"{arch.name} ({arch.model_type}) fuses q, k and v "
                             "into one matrix: there is no q_proj and v_proj to adapt alone.",
                             "Use lora_targets 'attention' or 'all-linear'.")
        return [("qkv", d + q + 2 * kv)] + ([] if targets == "qkv" else [("o", q + d)])
    # gated attention (Qwen3-Next, Qwen3.5): q_proj also makes the output gate (2 q wide)
    q_out = 2 * q if arch.attention_output_gate else q
    if targets == "qv":
        return [("q_proj", d + q_out), ("v_proj", d + kv)]
    qkv = [("q_proj", d + q_out), ("k_proj", d + kv), ("v_proj", d + kv)]
    return qkv if targets == "qkv" else qkv + [("o_proj", q + d)]


def _mlp(d: int, f: int, gated: bool, fused: bool) -> list[tuple[str, int]]:
    if not gated:
        return [("up", d + f), ("down", f + d)]
    if fused:
        return [("gate_up", d + 2 * f), ("down", f + d)]
    return [("gate", d + f), ("up", d + f), ("down", f + d)]


def _text_type(arch: ModelArch) -> str:
    return {"llama4": "llama4_text"}.get(arch.model_type, arch.model_type)


def adapted_linears(arch: ModelArch, targets: str) -> list[Adapted]:
    """Every kind of linear layer LoRA adapts in `arch` under `targets` (see the module
    docstring), with how many the model has and how many one token passes through.
    Raises FieldError where peft would refuse the targets or they name nothing."""
    kind = _text_type(arch)
    if targets == "all-linear" and kind in PEFT_MAMBA_TYPES:
        raise FieldError("lora_targets", f"peft refuses LoRA on the Mamba mixers' out_proj in "
                         f"{kind} models, so 'all-linear' cannot be applied to {arch.name}.",
                         "Use lora_targets 'attention' where the model has attention layers "
                         "(Falcon-H1); a target list without out_proj is not modelled.")
    if targets == "mlp":  # the dense MLP projections only (estimate/lora_mlp.py)
        return [Adapted(name, width, copies, copies) for name, width, copies in mlp_only_linears(
            arch, _mlp(arch.hidden_size, arch.intermediate_size, arch.gated_mlp,
                       kind in FUSED_GATE_UP_TYPES))]
    layers = arch.num_layers
    attention_layers = layers if arch.mla is not None else arch.attention_layer_count
    if attention_layers == 0 and targets != "all-linear":
        raise FieldError("lora_targets", f"{arch.name} has no attention layers to adapt.",
                         "Use lora_targets 'all-linear' (the mixers' in_proj and out_proj).")
    out = [Adapted(name, width, attention_layers, attention_layers)
           for name, width in _attention(arch, targets)]
    if targets != "all-linear":
        return out
    d = arch.hidden_size
    if arch.ssm is not None:
        mixers = arch.ssm_layers
        out += [Adapted(f"mixer{i}", a + b, mixers, mixers)
                for i, (a, b) in enumerate(arch.ssm.linears(d))]
    converted = kind in PEFT_FUSED_EXPERT_TYPES
    fused = kind in FUSED_GATE_UP_TYPES
    moe = arch.moe_layers
    dense = layers - moe - arch.mlp_free_layers
    if dense and not converted:  # peft drops the gate/up/down_proj modules of converted types
        out += [Adapted(f"mlp_{name}", width, dense, dense)
                for name, width in _mlp(d, arch.intermediate_size, arch.gated_mlp, fused)]
    if not moe:
        return out
    e, k, f = arch.num_experts, arch.experts_per_token, arch.moe_intermediate_size
    if converted or kind in LINEAR_ROUTER_TYPES:
        out.append(Adapted("router", d + e, moe, moe))
    if converted:  # the experts' 3-D parameters: rank r x E per parameter
        share = moe * k / e
        up = (d + 2 * f) if arch.gated_mlp else (d + f)
        out += [Adapted("experts_gate_up", up, moe * e, share * e,
                        rank_factor=2 if arch.gated_mlp else 1),
                Adapted("experts_down", f + d, moe * e, share * e)]
        return out
    shared = arch.shared_expert_intermediate_size
    if shared:
        out += [Adapted(f"shared_{name}", width, moe, moe)
                for name, width in _mlp(d, shared, arch.gated_mlp, fused)]
        if arch.shared_expert_gate:  # Qwen2-MoE's d -> 1 sigmoid gate is an nn.Linear
            out.append(Adapted("shared_expert_gate", d + 1, moe, moe))
    return out


def lora_params(arch: ModelArch, rank: int, targets: str) -> int:
    """LoRA adapter parameters of the whole model (A and B of every adapted linear)."""
    return sum(a.params(rank) for a in adapted_linears(arch, targets))


def fused_adapter_names(arch: ModelArch, names: set[str] | frozenset[str]) -> set[str]:
    """The adapted linears by input: where the model fuses q, k and v into one matrix (phi3's
    qkv_proj, GPT-2's c_attn, ...) peft adapts it once, "qkv", with one input and one dropout;
    where it fuses the gated MLP's gate and up (phi3's gate_up_proj), "gate_up". Other names
    pass through."""
    out = set(names)
    kind = _text_type(arch)
    if kind in FUSED_QKV_TYPES and out & {"q", "k", "v"}:
        out = (out - {"q", "k", "v"}) | {"qkv"}
    if kind in FUSED_GATE_UP_TYPES and out & {"gate", "up"}:
        out = (out - {"gate", "up"}) | {"gate_up"}
    return out


def lm_head_adapter_params(arch: ModelArch, rank: int) -> int:
    """Parameters of a LoRA adapter on the LM head (peft target_modules with "lm_head", litgpt's
    lora_head): one adapted linear of fan-in d and fan-out vocab, r (d + vocab). A tied head is
    adapted all the same (peft wraps the lm_head Linear; the adapter is its own)."""
    return rank * (arch.hidden_size + arch.vocab_size)


def lora_active_params(arch: ModelArch, rank: int, targets: str) -> float:
    """Adapter parameters one token's matmuls pass through, over the whole model: the routed
    experts' adapters in the proportion top-k / E (assumed: peft's ParamWrapper folds the
    experts' deltas into their weights; its per-step cost of forming them is left out)."""
    return sum(a.active_params(rank) for a in adapted_linears(arch, targets))
