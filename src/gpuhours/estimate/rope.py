"""Rotary embedding on the megatron path when Transformer Engine's fused kernel is not taken
(issues 14 and 16).

Megatron-Core applies rotary embedding to q and k with Transformer Engine's fused kernel when
apply_rope_fusion is set (Megatron-Bridge's performance recipes set it: perf_recipes/_common.py
_benchmark_common), except where that kernel cannot: a YaRN attention factor ("mscale") other
than 1 (NVIDIA/Megatron-LM@2a75ac12, the commit Megatron-Bridge@067f987d pins,
megatron/core/models/common/embeddings/rope_utils.py apply_rotary_pos_emb, lines 303-308:
"mscale=... is not supported by TE's fused RoPE. Using unfused implementation."). The attention
passes the model's concentration factor on every call (transformer/attention.py lines
1500-1523), so a YaRN model whose factor is not 1 (gpt-oss: factor 32, no mscale given, 1.3466;
ModelArch.rope_attention_factor) runs the eager _apply_rotary_pos_emb_bshd on q and on k of
every layer. Latent attention (MLA) takes its own rotary path and is not counted here.
"""

from __future__ import annotations

from gpuhours.estimate.arch import ModelArch

#: elements of the activation dtype read + written per element of q and of k by the eager
#: rotary (rope_utils.py _apply_rotary_pos_emb_bshd and _rotate_half, rotary_interleaved off),
#: (forward, backward). Forward: _rotate_half's neg of one half (read 1/2, write 1/2) and cat
#: (read 1, write 1); t * cos and rotated * sin (read 1, write 1 each; cos and sin are per
#: position, broadcast over batch and heads); their sum (read 2, write 1); the closing cat with
#: the empty pass-through part (read 1, write 1): 12. Backward: the two products' gradients
#: (read 1, write 1 each), the neg's (1) and the chunk's cat (2), the sum of the two paths into
#: t (read 2, write 1), the empty pass-through slice's gradient as zeros (write 1) added in
#: (read 2, write 1): 14. tests/test_rope.py counts them on real tensors.
EAGER_ROPE_ELEMENTS = (12, 14)
#: the fused kernel's own passes it replaces: read and write q (k) forward, and the gradient
#: backward, which the layer's generic elementwise passes stand for
FUSED_ROPE_ELEMENTS = (2, 2)


def eager_rope_runs(arch: ModelArch, kernels: str) -> bool:
    """Megatron-Core takes the eager rotary over TE's fused one: the megatron path, attention
    without latent compression, a YaRN attention factor other than 1 (module docstring)."""
    return kernels == "megatron" and arch.mla is None and arch.rope_attention_factor != 1.0


def unfused_rope_bytes_per_token_layer(arch: ModelArch, kernels: str, activation_bytes: float,
                                       recompute: bool) -> float:
    """Bytes of memory traffic per token and attention layer the eager rotary adds over the
    fused kernel on q (heads x head_dim) and k (kv heads x head_dim): EAGER_ROPE_ELEMENTS less
    FUSED_ROPE_ELEMENTS, the forward twice under full recomputation. 0 off the megatron path,
    for latent attention, or without a YaRN attention factor other than 1. A partial rotary's
    pass-through part is counted as turned (an upper bound; gpt-oss turns all)."""
    if not eager_rope_runs(arch, kernels):
        return 0.0
    forwards = 2 if recompute else 1
    fwd = EAGER_ROPE_ELEMENTS[0] - FUSED_ROPE_ELEMENTS[0]
    bwd = EAGER_ROPE_ELEMENTS[1] - FUSED_ROPE_ELEMENTS[1]
    return (forwards * fwd + bwd) * (arch.q_dim + arch.kv_dim) * activation_bytes
