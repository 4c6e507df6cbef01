"""The FLOP registry of bench and trace: torch.utils.flop_counter's formulas plus the operators it
counts as zero, and `count_flops` of one training step.

torch 2.13's FlopCounterMode has formulas for matmuls and the CUDA attention kernels, but none for
- the CPU flash-attention kernel (`aten._scaled_dot_product_flash_attention_for_cpu` and its
  backward), which transformers' "sdpa" attention runs on a CPU (shared/TORCH_NOTES.md);
- our CUDA-like attention operator `gpuhours::flash_attention` (torchkit/flash_attention.py);
- `aten._grouped_mm`, the grouped GEMM of MoE experts (transformers' "grouped_mm" experts), and
  transformers' grouped-matmul fallback operators: without them an MoE's experts count as zero,
  about two thirds of a small Mixtral's FLOPs.

Attention is counted in one of two conventions (torchkit/formulas.py): "torch" (full S x S,
five matmuls backward: what FlopCounterMode gives for its own kernels, used by the trace) or
"mfu" (causal half, backward = 2 x forward: gpuhours' convention for MFU and HFU, as
gpuhours.estimate counts). Under "mfu" our formulas replace torch's for the SDPA-level CUDA
kernels too. Kernels reached only below SDPA (`aten._flash_attention_forward`,
`aten._efficient_attention_forward`, varlen and flex attention) keep torch's formulas in both:
models built through transformers' "sdpa" attention do not call them directly.

torch is imported inside the functions: importing this module stays light.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from gpuhours.torchkit.formulas import (
    CONVENTION_TEXT,
    Convention,
    attention_backward_flops,
    attention_forward_flops,
    grouped_mm_backward_flops,
    grouped_mm_flops,
)

Formula = Callable[..., int]

#: SDPA-level attention kernels: (forward, backward) aten operator names, SDPA layout
#: (B, H, S, D), with `is_causal` among their arguments
_ATEN_ATTENTION = (
    ("_scaled_dot_product_flash_attention_for_cpu",
     "_scaled_dot_product_flash_attention_for_cpu_backward"),
    ("_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward"),
    ("_scaled_dot_product_efficient_attention",
     "_scaled_dot_product_efficient_attention_backward"),
    ("_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward"),
)


def cuda_attention_ops() -> tuple[Any, ...]:
    """CUDA attention kernels whose formulas torch's registry must already have (tests check)."""
    import torch

    aten = torch.ops.aten
    return (aten._scaled_dot_product_flash_attention,
            aten._scaled_dot_product_flash_attention_backward,
            aten._scaled_dot_product_efficient_attention,
            aten._scaled_dot_product_efficient_attention_backward,
            aten._flash_attention_forward, aten._flash_attention_backward,
            aten._efficient_attention_forward, aten._efficient_attention_backward)


def _attention_formula(op: Any, backward: bool, convention: Convention) -> Formula:
    """A shape formula for an attention operator (FlopCounterMode's calling form once shapes
    replace tensors), reading query, key, value and is_causal by their names in the operator's
    schema, so that one formula serves kernels whose arguments sit in different places."""
    arguments = op.default._schema.arguments
    names = [a.name for a in arguments]
    causal_default = next((bool(a.default_value) for a in arguments if a.name == "is_causal"),
                          False)

    def formula(*args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        bound = {**dict(zip(names, args, strict=False)), **kwargs}
        q, k, v = (tuple(bound[n]) for n in ("query", "key", "value"))
        is_causal = bool(bound.get("is_causal", causal_default))
        count = attention_backward_flops if backward else attention_forward_flops
        return count(q, k, v, is_causal, convention)

    formula.__name__ = f"{'backward' if backward else 'forward'}_{convention}_attention_flops"
    return formula


def _grouped_mm(a: Any, b: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    return grouped_mm_flops(tuple(a), tuple(b))


def _grouped_mm_fallback_backward(a: Any, b: Any, *args: Any, out_shape: Any = None,
                                  **kwargs: Any) -> int:
    return grouped_mm_backward_flops(tuple(a), tuple(b))


def _attention_ops() -> list[tuple[Any, Any]]:
    """(forward, backward) operator packets of the SDPA-level kernels this torch build has, and
    of our CUDA-like operator."""
    import torch

    from gpuhours.torchkit import flash_attention

    aten = torch.ops.aten
    pairs = [(getattr(aten, f), getattr(aten, b)) for f, b in _ATEN_ATTENTION
             if hasattr(aten, f) and hasattr(aten, b)]
    return [*pairs, (flash_attention.FORWARD_OP, flash_attention.BACKWARD_OP)]


def _moe_ops() -> dict[Any, Formula]:
    """Grouped GEMMs: torch's, and transformers' fallback operators (defined when its MoE
    integration has been imported, i.e. once an MoE model was built; looked up by name)."""
    import torch

    out: dict[Any, Formula] = {torch.ops.aten._grouped_mm: _grouped_mm}
    ops = torch.ops.transformers
    if hasattr(ops, "grouped_mm_fallback") and hasattr(ops, "grouped_mm_fallback_backward"):
        out[ops.grouped_mm_fallback] = _grouped_mm
        out[ops.grouped_mm_fallback_backward] = _grouped_mm_fallback_backward
    return out


def custom_mapping(convention: Convention = "torch") -> dict[Any, Formula]:
    """Our formulas, for `FlopCounterMode(custom_mapping=...)` (which wraps them itself): the
    operators torch has no formula for, and under "mfu" also the attention kernels it has (its
    formulas count the full S x S)."""
    from torch.utils import flop_counter

    attention: dict[Any, Formula] = {}
    for fwd, bwd in _attention_ops():
        attention[fwd] = _attention_formula(fwd, False, convention)
        attention[bwd] = _attention_formula(bwd, True, convention)
    lacking = {op: f for op, f in {**attention, **_moe_ops()}.items()
               if op not in flop_counter.flop_registry}
    return {**attention, **lacking} if convention == "mfu" else lacking


def flop_registry(convention: Convention = "torch") -> dict[Any, Formula]:
    """torch's registry with ours added, in the form FlopCounterMode calls it
    (`formula(*args, out_val=out, **kwargs)`, tensors as given): for a dispatch mode of one's own
    such as the trace's tracker."""
    from torch.utils import flop_counter

    ours = {op: flop_counter.shape_wrapper(f) for op, f in custom_mapping(convention).items()}
    return {**flop_counter.flop_registry, **ours}


class FlopCount(BaseModel):
    """FLOPs of one optimizer step, counted by FlopCounterMode with our formulas."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    total_flops: float
    #: FLOPs by operator (torch's operator names)
    by_op: dict[str, float]
    #: how attention is counted (torchkit/formulas.py): "mfu" is gpuhours' MFU/HFU convention
    convention: Convention
    basis: str


def count_flops(step: Callable[[], object], convention: Convention = "torch") -> FlopCount:
    """Run `step` once under FlopCounterMode with our formulas registered; attention counted in
    `convention` ("torch" by default: what FlopCounterMode counts for its own kernels; "mfu" for
    MFU and HFU)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False, custom_mapping=custom_mapping(convention))
    with counter:
        step()
    by_op = {str(op): float(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}
    return FlopCount(
        total_flops=float(counter.get_total_flops()), by_op=by_op, convention=convention,
        basis="counted: torch.utils.flop_counter.FlopCounterMode over one optimizer step, with "
              "gpuhours.torchkit.flops' formulas for what it lacks (CPU attention kernels, "
              f"grouped GEMMs of MoE experts); {CONVENTION_TEXT[convention]}")
