"""FLOP formulas per operator: torch.utils.flop_counter's, plus the ones it lacks.

torch 2.13's FlopCounterMode has formulas for matmuls and for the CUDA attention kernels
(`_scaled_dot_product_flash_attention`, `_efficient_attention`, cudnn, and their backwards), but
none for the CPU flash-attention kernel that a trace on CPU tensors runs, for our CUDA-like
attention operator (trace/attention.py), for `_grouped_mm` (the MoE experts) or transformers'
grouped-matmul fallback: it counts them as zero. We add those, built on torch's own attention counts
(`sdpa_flop_count`, `sdpa_backward_flop_count`: 2 x 2 x S_q x S_k x head_dim per head forward,
five such matmuls backward: the kernel recomputes the scores before the four gradient matmuls).
Like torch's, they count the full S x S score matrix, causal mask or not (shared/TORCH_NOTES.md);
gpuhours.estimate.flops counts the causal half and a backward of twice the forward.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils import flop_counter

# one set of attention formulas for bench and trace (bench/flops.py has the arithmetic)
from gpuhours.bench.flops import cpu_flash_backward_flops, cpu_flash_forward_flops
from gpuhours.trace import attention

aten = torch.ops.aten


def _grouped_mm(a: Any, b: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """aten._grouped_mm, FLOPs. The offsets split one dimension into groups (the split is data;
    only the total matters): forward (tokens x k) @ (groups x k x n) is 2 x tokens x k x n;
    the weight gradient (k x tokens) @ (tokens x n) -> (groups x k x n) is 2 x k x tokens x n;
    a batched (g x m x k) @ (g x k x n) is 2 x g x m x k x n."""
    if len(a) == 2 and len(b) == 3:
        return 2 * a[0] * a[1] * b[2]
    if len(a) == 2 and len(b) == 2:
        return 2 * a[0] * a[1] * b[1]
    if len(a) == 3:
        return 2 * a[0] * a[1] * a[2] * b[-1]
    return 0


def _grouped_mm_fallback_backward(a: Any, b: Any, offs: Any, grad: Any, *args: Any,
                                  out_shape: Any = None, **kwargs: Any) -> int:
    """transformers' fallback backward: input and weight gradients, 2 x 2 x tokens x k x n."""
    return 4 * a[0] * a[1] * b[2]


#: our additions, keyed like torch's registry (by OpOverloadPacket)
EXTRA_FORMULAS: dict[Any, Callable[..., int]] = {
    aten._scaled_dot_product_flash_attention_for_cpu: cpu_flash_forward_flops,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: cpu_flash_backward_flops,
    aten._grouped_mm: _grouped_mm,
    attention.FORWARD_OP: cpu_flash_forward_flops,
    attention.BACKWARD_OP: cpu_flash_backward_flops,
}


def _transformers_formulas() -> dict[Any, Callable[..., int]]:
    """transformers' MoE fallback operators (registered when its MoE module is imported)."""
    ops = getattr(torch.ops, "transformers", None)
    out: dict[Any, Callable[..., int]] = {}
    if ops is not None and hasattr(ops, "grouped_mm_fallback"):
        out[ops.grouped_mm_fallback] = _grouped_mm
        out[ops.grouped_mm_fallback_backward] = _grouped_mm_fallback_backward
    return out

#: CUDA attention kernels that torch's registry must already cover (checked in tests)
CUDA_ATTENTION_OPS = (
    aten._scaled_dot_product_flash_attention,
    aten._scaled_dot_product_flash_attention_backward,
    aten._scaled_dot_product_efficient_attention,
    aten._scaled_dot_product_efficient_attention_backward,
    aten._flash_attention_forward,
    aten._flash_attention_backward,
    aten._efficient_attention_forward,
    aten._efficient_attention_backward,
)


def flop_registry() -> dict[Any, Callable[..., int]]:
    """torch's formulas with ours added, in the form FlopCounterMode calls them
    (`formula(*args, out_val=out, **kwargs)`). Ours only where torch has none."""
    ours = {**EXTRA_FORMULAS, **_transformers_formulas()}
    missing = {k: flop_counter.shape_wrapper(v) for k, v in ours.items()
               if k not in flop_counter.flop_registry}
    return {**flop_counter.flop_registry, **missing}


def custom_mapping() -> dict[Any, Callable[..., int]]:
    """Our formulas for `FlopCounterMode(custom_mapping=...)` (it wraps them itself)."""
    ours = {**EXTRA_FORMULAS, **_transformers_formulas()}
    return {k: v for k, v in ours.items() if k not in flop_counter.flop_registry}
