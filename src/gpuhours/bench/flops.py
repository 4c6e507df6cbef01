"""FLOPs of a real training step, counted by torch's FlopCounterMode, with formulas for the CPU
attention kernels that torch leaves out.

torch 2.13's FlopCounterMode has formulas for the CUDA SDPA kernels (flash, memory-efficient,
cuDNN) but none for `aten._scaled_dot_product_flash_attention_for_cpu` and its backward, which
transformers' "sdpa" attention calls on a CPU: without the formulas below attention counts as
zero (shared/TORCH_NOTES.md). The formulas follow torch's own convention for the CUDA kernels:
matmul FLOPs only (one multiply-add = 2), over the full S_q x S_k score matrix whatever the
causal mask (the kernels' work is not halved in the count), grouped-query attention counted with
the query heads (the kernel broadcasts key/value heads).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict


def sdpa_forward_flops(query_shape: tuple[int, ...], key_shape: tuple[int, ...],
                       value_shape: tuple[int, ...]) -> int:
    """Forward: scores = Q K^T (2 B H S_q S_k D) and out = P V (2 B H S_q S_k D_v).

    = 4 B H S_q S_k D when D_v = D."""
    b, h, s_q, d = query_shape[-4:]
    s_k = key_shape[-2]
    d_v = value_shape[-1]
    return 2 * b * h * s_q * s_k * d + 2 * b * h * s_q * s_k * d_v


def sdpa_backward_flops(query_shape: tuple[int, ...], key_shape: tuple[int, ...],
                        value_shape: tuple[int, ...]) -> int:
    """Backward of a flash kernel: it recomputes the scores (Q K^T, 2 B H S_q S_k D), then
    dP = dO V^T (2 B H S_q S_k D_v), dV = P^T dO (2 B H S_q S_k D_v), dQ = dS K (2 B H S_q S_k D)
    and dK = dS^T Q (2 B H S_q S_k D): 10 B H S_q S_k D when D_v = D, 2.5 x the forward."""
    b, h, s_q, d = query_shape[-4:]
    s_k = key_shape[-2]
    d_v = value_shape[-1]
    return 2 * b * h * s_q * s_k * (3 * d + 2 * d_v)


def cpu_flash_forward_flops(query_shape: Any, key_shape: Any, value_shape: Any, *args: Any,
                       out_shape: Any = None, **kwargs: Any) -> int:
    return sdpa_forward_flops(tuple(query_shape), tuple(key_shape), tuple(value_shape))


def cpu_flash_backward_flops(grad_out_shape: Any, query_shape: Any, key_shape: Any, value_shape: Any,
                        *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    return sdpa_backward_flops(tuple(query_shape), tuple(key_shape), tuple(value_shape))


def extra_flop_formulas() -> dict[Any, Callable[..., int]]:
    """aten overload packet -> formula over input shapes, for FlopCounterMode(custom_mapping=)."""
    import torch

    aten = torch.ops.aten
    formulas: dict[Any, Callable[..., int]] = {}
    if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu"):
        formulas[aten._scaled_dot_product_flash_attention_for_cpu] = cpu_flash_forward_flops
    if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu_backward"):
        formulas[aten._scaled_dot_product_flash_attention_for_cpu_backward] = cpu_flash_backward_flops
    return formulas


class FlopCount(BaseModel):
    """FLOPs of one optimizer step, counted by FlopCounterMode."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    total_flops: float
    by_op: dict[str, float]
    basis: str


def count_flops(step: Callable[[], object]) -> FlopCount:
    """Run `step` once under FlopCounterMode with the CPU attention formulas registered."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False, custom_mapping=extra_flop_formulas())
    with counter:
        step()
    by_op = {str(op): float(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}
    return FlopCount(
        total_flops=float(counter.get_total_flops()), by_op=by_op,
        basis="counted: torch.utils.flop_counter.FlopCounterMode over one real optimizer step "
              "(matmuls and attention; attention over the full S x S, as torch counts it; "
              "formulas for the CPU flash-attention kernels from gpuhours.bench.flops)")
