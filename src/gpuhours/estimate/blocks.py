"""Parameter counts of models whose layers are not all alike (elements, not bytes).

estimate/params.py counts a model as num_layers copies of one block. This module counts the
models that break that (ModelArch.mixed): multi-head latent attention (DeepSeek-V2/V3), MoE
models whose first layers are dense (DeepSeek's first_k_dense_replace), shared experts without a
gate, the MoE families' own parts, and Mamba-2 mixers in place of or beside attention. It sums
each part over the layers and gives estimate/params.py's ParamCounts the per-layer means rounded
down, with the remainder carried so that `total` and `matmul_active` stay exact. Each formula
follows the module transformers builds (cited per function); the totals are held to
`sum(p.numel())` of that model by tests/test_catalog_models.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuhours.estimate.vision import vision_params

if TYPE_CHECKING:
    from gpuhours.estimate.arch import ModelArch


def _ffn(d: int, ffn: int, gated: bool, bias: bool) -> int:
    """One MLP: gate, up, down (gated) or up, down, with their biases (as estimate/params.py;
    this module does not import it, which imports this one)."""
    return (3 if gated else 2) * d * ffn + (((2 * ffn if gated else ffn) + d) if bias else 0)


def routed_expert_params(arch: ModelArch) -> int:
    """Weights (and biases, where the experts have them: gpt-oss, or an MLP with biases) of the
    routed experts of every MoE layer; 0 for a dense model. Routers, shared experts and dense
    layers are not in it: every token goes through those."""
    if not arch.is_moe:
        return 0
    bias = arch.mlp_bias or arch.expert_bias
    per_expert = _ffn(arch.hidden_size, arch.moe_intermediate_size, arch.gated_mlp, bias)
    return arch.moe_layers * arch.num_experts * per_expert


def _norm(arch: ModelArch) -> int:
    return 2 * arch.hidden_size if arch.norm_bias else arch.hidden_size


def _grouped_query_attention(arch: ModelArch, weights_only: bool) -> int:
    """q, k, v, o (+ biases, + per-head q/k RMSNorms), as estimate/params.attention_params;
    gated attention (Qwen3-Next, Qwen3.5) makes q_proj twice as wide (the query and its output
    gate, biased with the query)."""
    d = arch.hidden_size
    gate = arch.q_dim if arch.attention_output_gate else 0
    weights = 2 * d * arch.q_dim + 2 * d * arch.kv_dim + d * gate
    if weights_only:
        return weights
    biases = ((arch.q_dim + gate + 2 * arch.kv_dim if arch.qkv_bias else 0)
              + (d if arch.out_bias else 0))
    qk_norm = 0
    if arch.qk_norm:  # per head (Qwen3, GLM-4-MoE), or over the whole projections (OLMoE)
        qk_norm = arch.q_dim + arch.kv_dim if arch.qk_norm_full else 2 * arch.head_dim
    sinks = arch.num_heads if arch.attention_sinks else 0  # gpt-oss: a logit per head
    return weights + biases + qk_norm + sinks


def latent_attention_params(arch: ModelArch, weights_only: bool = False) -> int:
    """One MLA layer (transformers' DeepseekV3Attention): q_a (d x r_q, bias with
    attention_bias), its RMSNorm (r_q), q_b (r_q x H (nope + rope)) -- or q_proj (d x H (nope +
    rope)) without q_lora_rank --, kv_a_proj_with_mqa (d x (r_kv + rope), bias with
    attention_bias), its RMSNorm on the latent (r_kv), kv_b (r_kv x H (nope + v)), o (H v x d,
    bias with attention_bias). `weights_only` leaves out the biases and norms (no matmul)."""
    m = arch.mla
    assert m is not None
    d, h = arch.hidden_size, arch.num_heads
    q_width = h * m.qk_head_dim
    if m.q_lora_rank:
        q = d * m.q_lora_rank + m.q_lora_rank * q_width
        q_extra = (m.q_lora_rank if arch.out_bias else 0) + m.q_lora_rank  # bias, RMSNorm
    else:
        q, q_extra = d * q_width, 0
    kv_a = m.kv_lora_rank + m.qk_rope_head_dim
    kv = d * kv_a + m.kv_lora_rank * h * (m.qk_nope_head_dim + m.v_head_dim)
    kv_extra = (kv_a if arch.out_bias else 0) + m.kv_lora_rank  # bias, RMSNorm on the latent
    o = h * m.v_head_dim * d
    o_extra = d if arch.out_bias else 0
    weights = q + kv + o
    return weights if weights_only else weights + q_extra + kv_extra + o_extra


def _attention(arch: ModelArch, weights_only: bool = False) -> int:
    if arch.mla is not None:
        return latent_attention_params(arch, weights_only)
    return _grouped_query_attention(arch, weights_only)


def _moe_mlp(arch: ModelArch, active_only: bool, weights_only: bool) -> int:
    """One MoE layer: the routed experts (all, or the top-k of one token), the router (d x E;
    gpt-oss adds a bias of E) and the shared expert (an MLP gated as the experts are; plus its
    d -> 1 sigmoid gate in Qwen-MoE). transformers stores the experts as 3-D parameters
    (gate_up_proj, down_proj), without biases but in gpt-oss (2 f + d per expert)."""
    d = arch.hidden_size
    experts = arch.experts_per_token if active_only else arch.num_experts
    expert_bias = arch.expert_bias and not weights_only  # gpt-oss's biased experts
    routed = experts * _ffn(d, arch.moe_intermediate_size, arch.gated_mlp, expert_bias)
    router = d * arch.num_experts + (arch.num_experts if arch.router_bias and not weights_only
                                     else 0)
    shared = 0
    if arch.shared_expert_intermediate_size:
        bias = arch.mlp_bias and not weights_only  # DeepSeek-V2's shared MLP honours mlp_bias
        # gated as the experts are (Nemotron-H's shared expert is a plain MLP, as its experts)
        shared = _ffn(d, arch.shared_expert_intermediate_size, arch.gated_mlp, bias)
        shared += d if arch.shared_expert_gate else 0
    return routed + router + shared


@dataclass(frozen=True)
class LayerSums:
    """Each part summed over all layers, in parameters."""

    attention: int
    mlp: int
    mlp_active: int
    norms: int
    #: matmul weights one token passes through (attention + dense MLP or routed experts)
    matmul_active: int


def layer_sums(arch: ModelArch) -> LayerSums:
    """The blocks' parameters summed over the layers: `moe_layers` with experts, the others
    (`dense_mlp_layers`, or all of a dense model) a dense MLP of intermediate_size, but
    `mlp_free_layers` with none; attention on `attention_layer_count` layers and a Mamba-2
    mixer or a Gated DeltaNet on `ssm_layers` (counted with the attention: the token
    mixers)."""
    d = arch.hidden_size
    layers, moe = arch.num_layers, arch.moe_layers
    dense = layers - moe - arch.mlp_free_layers
    attention_layers = layers if arch.mla is not None else arch.attention_layer_count
    dense_mlp = _ffn(d, arch.intermediate_size, arch.gated_mlp, arch.mlp_bias)
    dense_w = _ffn(d, arch.intermediate_size, arch.gated_mlp, False)
    mlp = dense * dense_mlp
    mlp_active = dense * dense_mlp
    matmul = attention_layers * _attention(arch, weights_only=True) + dense * dense_w
    ssm = 0
    if arch.ssm is not None:  # Mamba-2 mixers: in_proj and out_proj are the matmuls
        ssm = arch.ssm_layers * arch.ssm.params(d)
        matmul += arch.ssm_layers * arch.ssm.params(d, weights_only=True)
    if moe:
        mlp += moe * _moe_mlp(arch, active_only=False, weights_only=False)
        mlp_active += moe * _moe_mlp(arch, active_only=True, weights_only=False)
        matmul += moe * _moe_mlp(arch, active_only=True, weights_only=True)
    return LayerSums(
        attention=attention_layers * _attention(arch) + ssm,
        mlp=mlp,
        mlp_active=mlp_active,
        norms=layers * arch.norms_per_block * _norm(arch),
        matmul_active=matmul,
    )


def mixed_param_fields(arch: ModelArch) -> dict[str, Any]:
    """The fields of estimate/params.ParamCounts for a mixed model: per-layer fields are means
    over the layers rounded down (what per-layer consumers such as ZeRO-3's gathered unit need,
    to within one parameter); `layers_remainder` and `matmul_remainder` carry the rest so that
    the totals are exact."""
    d = arch.hidden_size
    s = layer_sums(arch)
    n = arch.num_layers
    attn, mlp, mlp_active, norms = s.attention // n, s.mlp // n, s.mlp_active // n, s.norms // n
    matmul = s.matmul_active // n
    return dict(
        embedding=arch.vocab_size * d + arch.position_embeddings * d,
        lm_head=0 if arch.tie_embeddings else arch.vocab_size * d,
        attention_per_layer=attn,
        mlp_per_layer=mlp,
        mlp_active_per_layer=mlp_active,
        norms_per_layer=norms,
        final_norm=_norm(arch),
        extra=arch.extra_params,
        num_layers=n,
        matmul_per_layer=matmul,
        lm_head_matmul=arch.vocab_size * d,
        vision=vision_params(arch.vision) if arch.vision is not None else 0,
        layers_remainder=s.attention + s.mlp + s.norms - n * (attn + mlp + norms),
        matmul_remainder=s.matmul_active - n * matmul,
    )
