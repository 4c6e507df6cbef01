"""Parameter counts from the architecture (elements, not bytes).

Checked against the published counts of every catalog model and against
`sum(p.numel())` of the model transformers builds from the same config (tests/test_params.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuhours.estimate.blocks import mixed_param_fields
from gpuhours.estimate.vision import vision_params

if TYPE_CHECKING:  # arch counts an uncovered config through this module: no import back
    from gpuhours.estimate.arch import ModelArch


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts of one model, by part. `*_matmul` parts are weights of matrix multiplies."""

    embedding: int
    lm_head: int
    attention_per_layer: int
    mlp_per_layer: int
    mlp_active_per_layer: int
    norms_per_layer: int
    final_norm: int
    #: outside the blocks and not matmul'd: bert's pooler and token types; for a model_type the
    #: analytic model does not cover, the (small, either sign) difference between the count
    #: transformers builds and the generic shape's (ModelArch.params_basis says so)
    extra: int
    num_layers: int

    @property
    def total(self) -> int:
        """All parameters, tied embeddings counted once."""
        blocks = self.num_layers * (
            self.attention_per_layer + self.mlp_per_layer + self.norms_per_layer
        )
        return (self.embedding + self.lm_head + blocks + self.layers_remainder + self.final_norm
                + self.extra + self.vision)

    @property
    def matmul_active(self) -> int:
        """Weights one token passes through in matrix multiplies, the LM head included.

        Embedding lookups, norms and biases are left out (no multiply-accumulate per weight);
        for an MoE only the routed experts of one token count. The LM head counts even when
        tied: the logits are a real (d x vocab) matmul.
        """
        return (self.num_layers * self.matmul_per_layer + self.matmul_remainder
                + self.lm_head_matmul)

    #: matmul weights of one layer that one token passes through (attention + active MLP)
    matmul_per_layer: int = 0
    lm_head_matmul: int = 0
    #: the vision tower of a vision-language model (estimate/vision.py vision_params): in the
    #: total, not in matmul_active (its FLOPs are per image, estimate/vision.py)
    vision: int = 0
    #: models whose layers differ (estimate/blocks.py): the per-layer fields are means rounded
    #: down, and these the rest of the blocks' sum and of the matmul weights, so totals are exact
    layers_remainder: int = 0
    matmul_remainder: int = 0


def attention_params(arch: ModelArch, weights_only: bool = False) -> int:
    """q, k, v, o projections (+ biases, + Qwen3 q/k norms) of one layer."""
    d = arch.hidden_size
    weights = d * arch.q_dim + 2 * d * arch.kv_dim + arch.q_dim * d
    if weights_only:
        return weights
    biases = (arch.q_dim + 2 * arch.kv_dim if arch.qkv_bias else 0) + (d if arch.out_bias else 0)
    # per-head q/k norms: RMSNorm (Qwen3) head_dim each, LayerNorm (Phi's qk_layernorm) 2 x
    qk_norm = (2 if arch.norm_bias else 1) * 2 * arch.head_dim if arch.qk_norm else 0
    return weights + biases + qk_norm


def _ffn_params(d: int, ffn: int, gated: bool, bias: bool) -> int:
    """One MLP: gate, up, down (gated, SwiGLU) or up, down (GELU)."""
    mats = 3 if gated else 2
    biases = ((2 * ffn if gated else ffn) + d) if bias else 0
    return mats * d * ffn + biases


def mlp_params(arch: ModelArch, active_only: bool = False, weights_only: bool = False) -> int:
    """The MLP of one layer; for an MoE the router, the experts (all, or the routed top-k)
    and any shared expert (Qwen-MoE style, with its sigmoid gate)."""
    d = arch.hidden_size
    bias = arch.mlp_bias and not weights_only
    if not arch.is_moe:
        return _ffn_params(d, arch.intermediate_size, arch.gated_mlp, bias)
    experts = arch.experts_per_token if active_only else arch.num_experts
    routed = experts * _ffn_params(d, arch.moe_intermediate_size, arch.gated_mlp, bias)
    router = d * arch.num_experts
    shared = 0
    if arch.shared_expert_intermediate_size:
        shared = _ffn_params(d, arch.shared_expert_intermediate_size, arch.gated_mlp, False) + d
    return routed + router + shared


def norm_params(arch: ModelArch) -> int:
    """Parameters of one normalisation layer: RMSNorm d, LayerNorm 2d."""
    return 2 * arch.hidden_size if arch.norm_bias else arch.hidden_size


# fit evaluates thousands of setups of one architecture (a frozen, hashable dataclass): the
# counts are the same for each
@functools.lru_cache(maxsize=256)
def count_params(arch: ModelArch) -> ParamCounts:
    """Parameter counts by part for `arch`."""
    if arch.mixed:  # latent attention, dense and MoE layers mixed: estimate/blocks.py
        return ParamCounts(**mixed_param_fields(arch))
    d = arch.hidden_size
    embedding = arch.vocab_size * d + arch.position_embeddings * d
    head_matmul = 0 if arch.encoder else arch.vocab_size * d
    lm_head = 0 if (arch.tie_embeddings or arch.encoder) else arch.vocab_size * d
    # BERT: post-norm blocks, no final norm; its pooler ([CLS] token only) is in `extra`.
    final_norm = 0 if arch.encoder else norm_params(arch)
    return ParamCounts(
        embedding=embedding,
        lm_head=lm_head,
        attention_per_layer=attention_params(arch),
        mlp_per_layer=mlp_params(arch),
        mlp_active_per_layer=mlp_params(arch, active_only=True),
        norms_per_layer=arch.norms_per_block * norm_params(arch),
        final_norm=final_norm,
        extra=arch.extra_params,
        num_layers=arch.num_layers,
        matmul_per_layer=attention_params(arch, weights_only=True)
        + mlp_params(arch, active_only=True, weights_only=True),
        lm_head_matmul=head_matmul,
        vision=vision_params(arch.vision) if arch.vision is not None else 0,
    )
