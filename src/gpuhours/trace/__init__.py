"""Exact memory and FLOPs of a model's training step on fake tensors (torch).

    from gpuhours import Training
    from gpuhours.trace import TraceSetup, trace_training
    r = trace_training(TraceSetup(training=Training(
        model="qwen2.5-7b", method="lora", micro_batch=4, seq_len=2048, precision="bf16",
        checkpointing=True)))
    r.peak_bytes.value, r.peak_where, r.allocator.peak_reserved_bytes, r.flops.ratio

    from gpuhours.trace import trace_module            # your own nn.Module (issue 17)
    m = trace_module(build, ["images=float32[B,3,224,224]"], "t4", "fp16-mixed")
    m.largest_batch, m.headroom_bytes, [(r.module, r.time_s) for r in m.roofline.rows]

The real model is built by transformers from its config.json (no weights are downloaded), LoRA
applied with peft, and training steps run under torch's FakeTensorMode on the CPU: tensors have
shapes and dtypes but no storage. Our dispatch-level tracker (trace/tracker.py) counts every
storage's bytes from allocation to free. Importing this package does not import torch; the
functions below do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from gpuhours.catalog.schema import GpuSpec
    from gpuhours.setup import Training
    from gpuhours.trace.confirm import FitConfirmation
    from gpuhours.trace.module_result import ModuleTraceResult
    from gpuhours.trace.result import TraceResult
    from gpuhours.trace.setup import TraceSetup


def __getattr__(name: str) -> Any:
    # TraceResult and TraceSetup load on first use (PEP 562): `gpuhours` commands that never
    # trace do not pay for their modules
    if name == "TraceResult":
        from gpuhours.trace.result import TraceResult

        return TraceResult
    if name == "TraceSetup":
        from gpuhours.trace.setup import TraceSetup

        return TraceSetup
    raise AttributeError(f"module 'gpuhours.trace' has no attribute {name!r}")

__all__ = ["TraceResult", "TraceSetup", "confirm_fit", "trace_module", "trace_training"]


def trace_training(setup: TraceSetup, device: GpuSpec | None = None) -> TraceResult:
    """Trace one training setup; see gpuhours.trace.summary.trace_training."""
    from gpuhours.trace.summary import trace_training as run

    return run(setup, device)


def trace_module(factory: Callable[[], Any], inputs: Sequence[str], gpu: GpuSpec | str,
                 precision: str = "fp32", **options: Any) -> ModuleTraceResult:
    """Your own nn.Module (`factory()`) on a GPU you lack; see
    gpuhours.trace.module_trace.trace_module."""
    from gpuhours.trace.module_trace import trace_module as run

    return run(factory, inputs, gpu, precision, **options)


def confirm_fit(training: Training, gpu: GpuSpec,
                headroom_fraction: float | None = None) -> FitConfirmation:
    """Check the analytic answer of `gpuhours fit` with a trace; see gpuhours.trace.confirm."""
    from gpuhours.trace.confirm import confirm_fit as run

    return run(training, gpu, headroom_fraction)
