"""What a trace reports. Every number is a `TraceFigure` whose basis says where it came from:

- "trace": counted on the fake-tensor run of the real model (exact for the tensors torch makes);
- "model of the allocator": our replay of the CUDA caching allocator's rules (trace/allocator.py);
- "roofline model": traced FLOPs and bytes over a device's datasheet peaks (trace/roofline.py);
- "formula": the analytic estimator (gpuhours.estimate), for comparison;
- "assumed" (the CUDA context, estimate/assumptions.py), "catalog" (a device's memory).
No torch here: results can be built, serialised and rendered without it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

TraceBasis = Literal["trace", "model of the allocator", "roofline model", "formula", "assumed",
                     "catalog", "measured"]


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TraceFigure(_Out):
    value: float
    unit: str
    basis: TraceBasis
    source: str


def traced(value: float, unit: str, source: str) -> TraceFigure:
    return TraceFigure(value=value, unit=unit, basis="trace", source=source)


class PeakPlace(_Out):
    """When the peak happened: step (1-based), phase, module path, operator."""

    step: int
    phase: str
    module: str
    op: str


class PhasePeakOut(_Out):
    step: int
    phase: str
    peak_bytes: TraceFigure
    where: PeakPlace | None


class AllocatorOut(_Out):
    peak_allocated_bytes: TraceFigure
    peak_reserved_bytes: TraceFigure
    reserved_at_tensor_peak_bytes: TraceFigure
    segments: int
    note: str


class FlopsOut(_Out):
    """FLOPs of one training step (the last traced), total and by phase."""

    traced_flops: TraceFigure
    by_phase_flops: dict[str, TraceFigure]
    #: the analytic hardware FLOPs of the step (with recomputation), causal attention halved
    analytic_flops: TraceFigure
    #: the same formula with attention over the full S x S, the flop counter's convention
    analytic_full_attention_flops: TraceFigure
    #: traced / analytic_full_attention_flops
    ratio: float
    convention: str


class OpTime(_Out):
    op: str
    calls: int
    flops: float
    bytes: float
    time_s: float
    bound: Literal["compute", "memory"]


class RooflineOut(_Out):
    device: str
    #: every operator at the datasheet peak FLOP/s of its dtype or the datasheet bandwidth,
    #: whichever takes longer; summed: a lower bound on the step time
    peak_time_s: TraceFigure
    #: the same at the analytic model's assumed efficiencies (GEMM efficiency, bandwidth
    #: efficiency): comparable with `gpuhours estimate`'s step time
    assumed_efficiency_time_s: TraceFigure
    compute_bound_s: float
    memory_bound_s: float
    operators: int
    top_ops: list[OpTime]
    note: str


class AnalyticMemoryOut(_Out):
    """The analytic estimator's peak of live tensors for the traced setup, and its error."""

    tensors_bytes: TraceFigure
    precision: str
    #: analytic / traced - 1
    error: float
    phase: str


class TraceResult(_Out):
    """Everything `gpuhours trace` reports for one training setup."""

    model: str
    model_basis: str
    setup: dict[str, object]
    precision_as_traced: str
    notes: list[str]
    total_params: TraceFigure
    trainable_params: TraceFigure
    peak_bytes: TraceFigure
    peak_where: PeakPlace
    at_peak_bytes: dict[str, TraceFigure]
    max_over_step_bytes: dict[str, TraceFigure]
    phase_peaks: list[PhasePeakOut]
    persistent_bytes: TraceFigure
    allocator: AllocatorOut
    flops: FlopsOut
    analytic_memory: AnalyticMemoryOut | None
    roofline: RooflineOut | None
    trace_wall_s: float
    max_rss_bytes: float
