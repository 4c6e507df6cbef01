"""`gpuhours fit --trace`: confirm the analytic answer with a trace of the chosen setup.

The trace gives the exact peak of live tensors; the allocator model turns it into what the
caching allocator would reserve; the CUDA context (an assumption, estimate/assumptions.py) comes
on top, as in the analytic total. The verdict compares that with the same limit `fit` used.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from gpuhours.catalog.schema import GpuSpec
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.memory import training_memory
from gpuhours.setup import Training
from gpuhours.trace.result import TraceFigure, TraceResult
from gpuhours.trace.setup import TraceSetup


class FitConfirmation(BaseModel):
    """The analytic memory of one setup beside its trace, against the device limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: str
    micro_batch: int
    analytic_tensors_bytes: TraceFigure
    analytic_total_bytes: TraceFigure
    traced_peak_bytes: TraceFigure
    reserved_bytes: TraceFigure
    cuda_context_bytes: TraceFigure
    total_bytes: TraceFigure
    limit_bytes: TraceFigure
    fits_by_trace: bool
    fits_by_formula: bool
    #: analytic tensors / traced peak - 1
    error: float
    verdict: str
    notes: list[str]
    trace: TraceResult


def confirm_fit(training: Training, gpu: GpuSpec,
                headroom_fraction: float | None = None) -> FitConfirmation:
    """Trace `training` (the configuration `fit` chose) and set it against `gpu`'s memory less
    the headroom `fit` used (default: assumptions.FIT_HEADROOM_FRACTION)."""
    from gpuhours.trace.summary import trace_training

    headroom = A.FIT_HEADROOM_FRACTION.value if headroom_fraction is None else headroom_fraction
    # one process: the trace cannot shard (ZeRO) and runs two micro-batches at most, since the
    # gradients that persist between micro-batches are the same from the second on
    setup = TraceSetup(training=training.model_copy(
        update={"grad_accum": min(training.grad_accum, 2)}), steps=1)
    r = trace_training(setup)
    mem = training_memory(training.arch, training)
    context = A.CUDA_CONTEXT_BYTES.value
    reserved = r.allocator.peak_reserved_bytes.value
    total = reserved + context
    limit = gpu.memory_bytes * (1 - headroom)
    fits = total <= limit
    notes = list(r.notes)
    if training.grad_accum > 2:
        notes.append(f"traced with 2 micro-batches per step, not {training.grad_accum}: the "
                     "gradients persisting between micro-batches are the same from the second on.")
    word = "fits" if fits else "does not fit"
    agree = "agrees with" if fits == (mem.total_bytes <= limit) else "contradicts"
    verdict = (f"By the trace it {word}: {total / 2**30:,.2f} GiB of {limit / 2**30:,.2f} GiB; "
               f"this {agree} the analytic answer ({mem.total_bytes / 2**30:,.2f} GiB).")
    return FitConfirmation(
        gpu=gpu.name, micro_batch=training.micro_batch,
        analytic_tensors_bytes=TraceFigure(value=mem.tensors_bytes, unit="bytes", basis="formula",
                                           source="estimate/memory.py training_memory"),
        analytic_total_bytes=TraceFigure(value=mem.total_bytes, unit="bytes", basis="formula",
                                         source="tensors + assumed reserve + CUDA context"),
        traced_peak_bytes=r.peak_bytes,
        reserved_bytes=r.allocator.peak_reserved_bytes,
        cuda_context_bytes=TraceFigure(value=context, unit="bytes", basis="assumed",
                                       source=A.CUDA_CONTEXT_BYTES.basis),
        total_bytes=TraceFigure(value=total, unit="bytes", basis="model of the allocator",
                                source="reserved (allocator model over the trace) + CUDA "
                                       "context (assumed)"),
        limit_bytes=TraceFigure(value=limit, unit="bytes", basis="catalog",
                                source=f"{gpu.name} memory x (1 - {headroom:g} headroom)"),
        fits_by_trace=fits, fits_by_formula=mem.total_bytes <= limit,
        error=mem.tensors_bytes / r.peak_bytes.value - 1 if r.peak_bytes.value else 0.0,
        verdict=verdict, notes=notes, trace=r)
