"""FLOPs of attention and grouped matmuls from tensor shapes: pure arithmetic, no torch.

One multiply-add = 2 FLOPs. Attention shapes are in SDPA's layout: query (B, H, S_q, D), key
(B, H_kv, S_k, D), value (B, H_kv, S_k, D_v); grouped-query attention is counted with the query
heads (the kernels broadcast the key/value heads, so the work is that of H heads).

Attention-score FLOPs (QK^T, PV and their gradients) have two conventions:

- **"mfu"**, gpuhours' convention for MFU and HFU everywhere (`estimate`, `plan`, `bench`):
  under a causal mask only the (query, key) pairs the mask keeps are counted, S(S+1)/2 of them
  for S_q = S_k = S (a mean context of (S+1)/2 keys, exactly as gpuhours.estimate.flops counts
  it; FlashAttention-style kernels skip the masked blocks); the backward is twice the forward,
  four matmuls (dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q). A flash kernel's recomputation
  of the scores in its backward is an implementation detail left out, as the estimator leaves it
  out; recomputation by activation checkpointing is counted where it runs (HFU, not MFU).
- **"torch"**, the convention of torch.utils.flop_counter for its CUDA attention kernels: the full
  S_q x S_k whatever the mask, and a backward of five matmuls (the scores recomputed, then the four
  gradients), 2.5 x the forward. The trace's per-operator count uses it, so that the trace
  matches FlopCounterMode; trace/compare.py `analytic_step_flops` gives the estimator's figure in
  both conventions to set beside it.

A kernel told of the mask only as an explicit mask tensor (not `is_causal`) is counted over the
full S_q x S_k in both: the mask's contents are data, unknown under fake tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

Convention = Literal["mfu", "torch"]

#: the convention gpuhours reports MFU and HFU in (see the module docstring)
MFU_CONVENTION: Convention = "mfu"

#: what each convention counts, for the basis texts of reported figures
CONVENTION_TEXT: dict[Convention, str] = {
    "mfu": "gpuhours' MFU convention: attention scores over the causal half under a causal "
           "mask (S(S+1)/2 pairs, as gpuhours.estimate counts them), backward = 2 x forward",
    "torch": "torch's flop-counter convention: attention scores over the full S x S, causal or "
             "not, backward = 5 score-sized matmuls (the flash kernel recomputes the scores)",
}

Shape = Sequence[int]


def score_pairs(s_q: int, s_k: int, causal: bool) -> int:
    """(query, key) pairs whose scores are computed, per batch row and head.

    Full: S_q x S_k. Causal, with torch's `is_causal` alignment (query i sees keys 0..i, the
    top-left triangle): sum over i < S_q of min(i + 1, S_k), = S(S+1)/2 when S_q = S_k = S."""
    if not causal:
        return s_q * s_k
    if s_q <= s_k:
        return s_q * (s_q + 1) // 2
    return s_k * (s_k + 1) // 2 + (s_q - s_k) * s_k


def sdpa_forward_flops(query_shape: Shape, key_shape: Shape, value_shape: Shape,
                       causal: bool = False) -> int:
    """Forward FLOPs: scores = Q K^T (2 B H pairs D) and out = P V (2 B H pairs D_v).

    = 4 B H S_q S_k D over the full matrix when D_v = D (causal=False)."""
    b, h, s_q, d = query_shape[-4:]
    s_k = key_shape[-2]
    d_v = value_shape[-1]
    return 2 * b * h * score_pairs(s_q, s_k, causal) * (d + d_v)


def sdpa_backward_flops(query_shape: Shape, key_shape: Shape, value_shape: Shape,
                        causal: bool = False, recompute_scores: bool = True) -> int:
    """Backward FLOPs: dP = dO V^T and dV = P^T dO (2 B H pairs D_v each), dQ = dS K and
    dK = dS^T Q (2 B H pairs D each), plus, when `recompute_scores`, Q K^T again (2 B H pairs D)
    as a flash kernel does.

    = 10 B H S_q S_k D with the defaults (full matrix, recomputed scores, D_v = D): 2.5 x the
    forward, torch's count; 2 x the forward without the recomputation."""
    b, h, s_q, d = query_shape[-4:]
    s_k = key_shape[-2]
    d_v = value_shape[-1]
    per_pair = 2 * d + 2 * d_v + (d if recompute_scores else 0)
    return 2 * b * h * score_pairs(s_q, s_k, causal) * per_pair


def attention_forward_flops(query_shape: Shape, key_shape: Shape, value_shape: Shape,
                            is_causal: bool, convention: Convention) -> int:
    """Forward FLOPs of an attention kernel call in `convention` (module docstring)."""
    causal = is_causal and convention == "mfu"
    return sdpa_forward_flops(query_shape, key_shape, value_shape, causal=causal)


def attention_backward_flops(query_shape: Shape, key_shape: Shape, value_shape: Shape,
                             is_causal: bool, convention: Convention) -> int:
    """Backward FLOPs of an attention kernel call in `convention` (module docstring)."""
    causal = is_causal and convention == "mfu"
    return sdpa_backward_flops(query_shape, key_shape, value_shape, causal=causal,
                               recompute_scores=convention == "torch")


def grouped_mm_flops(a_shape: Shape, b_shape: Shape) -> int:
    """FLOPs of torch's grouped matmul (`aten._grouped_mm`, MoE experts), one per layout. The
    offsets split one dimension into groups; the split is data, and only the total matters:

    - (M_total, K) @ (G, K, N), tokens sorted by expert: 2 M_total K N (the experts' forward and
      the input gradient);
    - (M, K_total) @ (K_total, N) -> (G, M, N), K split: 2 M K_total N (the weight gradient);
    - (G, M, K) @ (K, N_total) -> (M, N_total), N split: 2 M K N_total;
    - (G, M, K) @ (G, K, N), no offsets: a batched matmul, 2 G M K N."""
    if len(a_shape) == 2 and len(b_shape) == 3:
        return 2 * a_shape[0] * a_shape[1] * b_shape[2]
    if len(a_shape) == 2 and len(b_shape) == 2:
        return 2 * a_shape[0] * a_shape[1] * b_shape[1]
    if len(a_shape) == 3 and len(b_shape) == 2:
        return 2 * a_shape[1] * a_shape[2] * b_shape[1]
    if len(a_shape) == 3 and len(b_shape) == 3:
        return 2 * a_shape[0] * a_shape[1] * a_shape[2] * b_shape[2]
    raise ValueError(f"grouped matmul of shapes {tuple(a_shape)} and {tuple(b_shape)}: expected "
                     "2-D or 3-D operands")


def grouped_mm_backward_flops(input_shape: Shape, weight_shape: Shape) -> int:
    """Input and weight gradients of (M, K) @ (G, K, N) (transformers' grouped-matmul fallback
    backward, one operator): 2 M N K each, 4 M K N in all."""
    return 2 * grouped_mm_flops(input_shape, weight_shape)
