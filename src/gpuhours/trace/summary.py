"""`trace_training`: trace a setup and report it (peak, breakdown, allocator model, FLOPs,
roofline, the analytic figures beside). Imports torch (through trace/step.py)."""

from __future__ import annotations

from collections import Counter

from gpuhours.catalog.schema import GpuSpec
from gpuhours.setup import torch_precision
from gpuhours.trace import accounting, allocator
from gpuhours.trace.compare import analytic_memory, analytic_step_flops, analytic_training
from gpuhours.trace.result import (
    AllocatorOut,
    AnalyticMemoryOut,
    FlopsOut,
    PeakPlace,
    PhasePeakOut,
    TraceFigure,
    TraceResult,
    traced,
)
from gpuhours.trace.roofline import roofline
from gpuhours.trace.setup import TraceSetup

_SRC = "live tensor storage of the step on fake tensors (trace/tracker.py)"
_FLOP_SRC = "torch's flop counter formulas (+ gpuhours.torchkit.flops) over every operator of the step"


def _display(module: str, hf_path: str, phase: str, model_class: str) -> str:
    """A module path relative to the transformers model; the top level is where the loss is."""
    if phase.startswith("optimizer") or phase == "zero_grad":
        return "optimizer (outside the model)"
    prefix = hf_path + "." if hf_path else ""
    if module == hf_path or (hf_path and hf_path.startswith(module + ".")) or module == "":
        return f"{model_class} (top level: loss)"
    return module[len(prefix):] if module.startswith(prefix) else module


def trace_training(setup: TraceSetup, device: GpuSpec | None = None) -> TraceResult:
    """Trace `setup` on fake tensors and report it; with `device`, add a roofline time."""
    from gpuhours.resolve import model_config
    from gpuhours.trace.step import run_steps

    t = setup.training
    assert t.model is not None  # TraceSetup checks it
    arch, basis = t.arch, t.model_basis
    training = analytic_training(setup)
    cfg, name, _ = model_config(t.model, t.config_overrides)
    where = t.model if basis.startswith("config.json") else f"catalog model {name}"
    st = run_steps(cfg, setup, where)
    log = st.log
    b = accounting.breakdown(log)
    built = st.built
    model_class = type(built.hf_model).__name__

    def place(p: accounting.Place | None) -> PeakPlace | None:
        if p is None:
            return None
        return PeakPlace(step=p.step + 1, phase=p.phase, op=p.op,
                         module=_display(p.module, built.hf_path, p.phase, model_class))

    peak_place = place(log.peak_place) or PeakPlace(step=setup.steps, phase="start of the step",
                                                    module="", op="-")
    alloc = allocator.replay(log)
    alloc_src = "PyTorch's CUDA caching allocator rules (trace/allocator.py) over the trace"
    phase_flops: Counter[str] = Counter()
    for (_op, phase, _dtype, flops, _bytes), calls in st.op_calls.items():
        phase_flops[phase] += flops * calls
    total_flops = float(sum(phase_flops.values()))
    causal, full = analytic_step_flops(setup)
    mem = analytic_memory(setup)
    prec = torch_precision(setup.training.precision, setup.training.method)
    notes = list(built.notes) + ([prec.note] if prec.note else [])
    return TraceResult(
        model=arch.name,
        model_basis=basis,
        setup={**t.choices(), "steps": setup.steps},
        precision_as_traced=prec.analytic_precision,
        notes=notes,
        total_params=traced(st.total_params, "params", "sum of numel over the model's parameters"),
        trainable_params=traced(st.trainable_params, "params",
                                "parameters with requires_grad after LoRA"),
        peak_bytes=traced(log.peak_bytes, "bytes", _SRC),
        peak_where=peak_place,
        at_peak_bytes={k: traced(v, "bytes", f"{_SRC}, at the peak")
                       for k, v in b.at_peak_bytes.items()},
        max_over_step_bytes={k: traced(v, "bytes", f"{_SRC}, this part's own maximum")
                             for k, v in b.max_over_step_bytes.items()},
        phase_peaks=[PhasePeakOut(step=p.step + 1, phase=p.phase,
                                  peak_bytes=traced(p.peak_bytes, "bytes", _SRC),
                                  where=place(p.place)) for p in b.phase_peaks],
        persistent_bytes=traced(b.end_bytes, "bytes", f"{_SRC}, after the step"),
        allocator=AllocatorOut(
            peak_allocated_bytes=TraceFigure(value=alloc.peak_allocated_bytes, unit="bytes",
                                             basis="model of the allocator",
                                             source=f"{alloc_src}: rounded blocks"),
            peak_reserved_bytes=TraceFigure(value=alloc.peak_reserved_bytes, unit="bytes",
                                            basis="model of the allocator",
                                            source=f"{alloc_src}: segments"),
            reserved_at_tensor_peak_bytes=TraceFigure(
                value=alloc.reserved_at_tensor_peak_bytes, unit="bytes",
                basis="model of the allocator", source=alloc_src),
            segments=alloc.segments,
            note="what torch.cuda.max_memory_allocated / max_memory_reserved would show for "
                 "these allocations with default allocator settings; the CUDA context and "
                 "library workspaces come on top"),
        flops=FlopsOut(
            traced_flops=traced(total_flops, "FLOP", _FLOP_SRC),
            by_phase_flops={k: traced(v, "FLOP", _FLOP_SRC) for k, v in phase_flops.items()
                            if v},
            analytic_flops=TraceFigure(value=causal, unit="FLOP", basis="formula",
                                       source="estimate/flops.py hardware FLOPs x tokens"),
            analytic_full_attention_flops=TraceFigure(
                value=full, unit="FLOP", basis="formula",
                source="the same, attention over the full S x S"),
            ratio=total_flops / full if full else 0.0,
            convention="torch's flop counter counts the full S x S attention, causal or not, "
                       "and five attention matmuls in backward (the flash kernel recomputes "
                       "the scores); gpuhours.estimate counts the causal half and four. The "
                       "ratio sets the trace beside the formula with full S x S. With "
                       "checkpointing the formula also recomputes the LM head, which "
                       "transformers does not."),
        analytic_memory=AnalyticMemoryOut(
            tensors_bytes=TraceFigure(value=mem.tensors_bytes, unit="bytes", basis="formula",
                                      source="estimate/memory.py training_memory"),
            precision=training.precision,
            error=mem.tensors_bytes / log.peak_bytes - 1.0 if log.peak_bytes else 0.0,
            phase=mem.peak_phase),
        roofline=roofline(st.op_calls, device, arch.hidden_size) if device else None,
        trace_wall_s=st.wall_s,
        max_rss_bytes=float(st.max_rss_bytes),
    )
