"""Timing real training steps of any model: the engine behind `gpuhours bench` and
`gpuhours.bench.run`.

A run: warm-up steps (untimed: thread pools, kernel selection, torch.compile, optimizer state);
then timed steps until the step time is stable or a cap (StopRule), each step split into data
wait, forward, backward and optimizer by the device's timer; then, outside the timed stage, one
step under torch's FLOP counter and one under the live-storage tracker, so that neither adds to
the timed steps; then, when asked, a few steps under torch.profiler for a Chrome trace.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from gpuhours.bench.config import StopRule
from gpuhours.bench.device import DeviceBackend
from gpuhours.bench.peak import PeakRate
from gpuhours.bench.stats import TimingStats, stop_reason, summarize
from gpuhours.errors import FieldError, InputError
from gpuhours.torchkit.flops import FlopCount, count_flops
from gpuhours.torchkit.formulas import MFU_CONVENTION
from gpuhours.torchkit.module_time import ModuleTimes
from gpuhours.torchkit.ops import count_ops
from gpuhours.torchkit.storage import LiveStorageTracker, MemoryPeak, state_tensors

PHASES = ("data_s", "forward_s", "backward_s", "optimizer_s")


class BenchResult(BaseModel):
    """What one benchmark measured. Every figure's basis is in the `*_basis` fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    setup: dict[str, Any]
    device_kind: str
    device_key: str
    device_name: str
    catalog_gpu: str | None
    timing: TimingStats
    step_times_s: list[float]
    #: medians over the timed steps of each part of the step, seconds
    phases_median_s: dict[str, float]
    timing_basis: str
    first_step_s: float
    tokens_per_step: int | None
    samples_per_step: int | None
    tokens_per_s: float | None
    #: tokens/s at the p90 and p10 step times: the middle 80% of the timed steps
    tokens_per_s_range: tuple[float, float] | None
    samples_per_s: float | None
    flops: FlopCount | None
    model_flops_per_step: float | None
    model_flops_basis: str
    #: device operators of one optimizer step (gpuhours.torchkit.ops.count_ops): with the
    #: step time, the host's cost per operator when the step is host-led
    operators_per_step: int | None = None
    peak: PeakRate | None
    mfu: float | None
    hfu: float | None
    memory: MemoryPeak | None
    peak_memory_bytes: int | None
    peak_memory_basis: str
    allocator: dict[str, int] | None
    #: the host's 1-minute load average before and after the timed steps (None off POSIX): a
    #: rough sign of other processes competing for the CPU
    host_load_1m: tuple[float, float] | None
    final_loss: float | None
    profile_trace: str | None
    #: forward and backward time per top-level module, measured on steps with hooks
    #: (gpuhours.torchkit.module_time); None when not asked for
    module_times: ModuleTimes | None = None
    warnings: list[str]
    environment: dict[str, Any]

    def ledger_results(self) -> dict[str, Any]:
        """The result with the ledger's column names on top (units in the names)."""
        return {
            **self.model_dump(mode="json"),
            "steps_timed": self.timing.n_steps,
            "step_time_median_s": self.timing.median_s,
            "step_time_p90_s": self.timing.p90_s,
            "step_time_cv": self.timing.cv,
            "tokens_per_s": self.tokens_per_s,
            "model_flops_per_step": self.model_flops_per_step,
            "operators_per_step": self.operators_per_step,
            "peak_flops_per_s": self.peak.flops_per_s if self.peak else None,
            "peak_flops_basis": self.peak.basis if self.peak else None,
            "mfu": self.mfu,
            "peak_memory_bytes": self.peak_memory_bytes,
        }


# --- one training step ----------------------------------------------------------------------------


class _NoTimer:
    def mark(self, phase: str) -> None:
        pass


def default_loss(model: Any, batch: Any) -> Any:
    """model(**batch) for a dict, model(*batch) for a tuple or list, model(batch) otherwise; the
    loss is the output's `.loss` or `["loss"]`, or the output itself when it is a scalar."""
    import torch

    if isinstance(batch, Mapping):
        out = model(**batch)
    elif isinstance(batch, tuple | list):
        out = model(*batch)
    else:
        out = model(batch)
    loss = getattr(out, "loss", None)
    if loss is None and isinstance(out, Mapping):
        loss = out.get("loss")
    if loss is None:
        loss = out
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise InputError("loss_fn", "the model's output has no scalar loss (no .loss, no "
                                    "['loss'], not a scalar tensor).",
                         "Pass loss_fn=lambda model, batch: ... returning a scalar tensor.")
    return loss


def to_device(batch: Any, device: str) -> Any:
    """The batch with every tensor moved to `device` (dicts, lists and tuples followed)."""
    import torch

    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, Mapping):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, tuple | list):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def default_tokens(batch: Any) -> int | None:
    """Tokens of a micro-batch: the elements of `input_ids` when the batch is a dict with them."""
    if isinstance(batch, Mapping) and "input_ids" in batch:
        return int(batch["input_ids"].numel())
    return None


def default_samples(batch: Any) -> int | None:
    """Samples of a micro-batch: the first dimension of its first tensor."""
    import torch

    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    values = batch.values() if isinstance(batch, Mapping) else batch
    if isinstance(values, tuple | list) or isinstance(batch, Mapping):
        for v in values:
            n = default_samples(v)
            if n is not None:
                return n
    return None


class Trainer:
    """One optimizer step = grad_accum micro-batches of data, forward, backward, then the update."""

    def __init__(self, model: Any, optimizer: Any, make_batch: Callable[[], Any],
                 loss_fn: Callable[[Any, Any], Any], backend: DeviceBackend, precision: str,
                 grad_accum: int) -> None:
        import torch

        self.model = model
        self.optimizer = optimizer
        self.make_batch = make_batch
        self.loss_fn = loss_fn
        self.backend = backend
        self.grad_accum = grad_accum
        device_type = backend.torch_device.split(":")[0]
        # -amp and -mixed both train under autocast (gpuhours.setup.torch_precision); the
        # weights' dtype was set when the model was built
        autocast = precision.endswith(("-amp", "-mixed"))
        if autocast:
            dtype = torch.bfloat16 if precision.startswith("bf16") else torch.float16
            self._autocast: Callable[[], Any] = lambda: torch.autocast(device_type, dtype=dtype)
        else:
            self._autocast = contextlib.nullcontext
        # fp16 autocast over fp32 weights needs loss scaling; a half-precision LoRA base under
        # fp16-mixed has fp32 adapters, which a scaler serves the same way
        self.scaler = (torch.amp.GradScaler(device_type)
                       if autocast and precision.startswith("fp16") else None)
        self.last_batch: Any = None
        #: told of each backward (gpuhours.torchkit.module_time.ModuleTimer), when set
        self.observer: Any = None

    def step(self, timer: Any = None, before_zero_grad: Callable[[], None] | None = None) -> Any:
        """One optimizer step; `before_zero_grad` is called while the gradients still exist."""
        timer = timer or _NoTimer()
        loss = None
        for _ in range(self.grad_accum):
            batch = to_device(self.make_batch(), self.backend.torch_device)
            self.last_batch = batch
            timer.mark("data_s")
            with self._autocast():
                loss = self.loss_fn(self.model, batch)
                if self.grad_accum > 1:
                    loss = loss / self.grad_accum
            timer.mark("forward_s")
            scaled = self.scaler.scale(loss) if self.scaler else loss
            if self.observer is not None:
                self.observer.before_backward(scaled)
            scaled.backward()
            if self.observer is not None:
                self.observer.after_backward()
            timer.mark("backward_s")
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        if before_zero_grad is not None:
            before_zero_grad()
        self.optimizer.zero_grad(set_to_none=True)
        timer.mark("optimizer_s")
        return loss


def make_optimizer(params: Any, name: str, impl: str, lr: float) -> Any:
    """torch's AdamW or SGD over `params` with the kernel choice `impl`."""
    import torch

    kw: dict[str, Any] = {"lr": lr}
    if impl == "foreach-2.0":
        raise FieldError("optimizer_impl", "foreach-2.0 is torch 2.0's foreach AdamW; a bench "
                         f"runs this machine's torch ({torch.__version__}).",
                         "Give optimizer_impl foreach (the estimate models foreach-2.0).")
    if impl == "fused":
        kw["fused"] = True
    else:
        kw["foreach"] = impl == "foreach"
    if name == "adamw":
        return torch.optim.AdamW(params, **kw)
    if name == "sgd":
        return torch.optim.SGD(params, **kw)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, momentum=0.9, **kw)
    raise FieldError("optimizer", f"expected adamw, sgd or sgd-momentum, got {name!r}.")


# --- the measurement ------------------------------------------------------------------------------


def measure(
    trainer: Trainer,
    backend: DeviceBackend,
    *,
    setup: dict[str, Any],
    rule: StopRule,
    peak: PeakRate | None,
    environment: dict[str, Any],
    counting_trainer: Trainer | None = None,
    tokens_of: Callable[[Any], int | None] = default_tokens,
    samples_of: Callable[[Any], int | None] = default_samples,
    count_step_flops: bool = True,
    set_checkpointing: Callable[[bool], None] | None = None,
    checkpointing: bool = False,
    model_flops_per_step: float | None = None,
    track_memory: bool = True,
    profile_to: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
    time_modules: bool = True,
    module_steps: int = 5,
) -> BenchResult:
    """Warm up, time, count and track one training setup. See the module docstring.

    `counting_trainer` runs the FLOP and memory steps (the eager model when the timed one is
    compiled). `set_checkpointing(False/True)` lets the FLOP count of the model without
    recomputation (MFU) be told from the one with it (HFU). `time_modules`: after the timed
    steps, `module_steps` more (on the eager model) with hooks timing each top-level module."""
    say = progress or (lambda text: None)
    counting = counting_trainer or trainer
    warnings: list[str] = []

    t0 = time.perf_counter()
    trainer.step()
    backend.synchronize()
    first_step_s = time.perf_counter() - t0
    for i in range(1, rule.warmup_steps):
        say(f"warm-up {i + 1}/{rule.warmup_steps}")
        trainer.step()
    backend.synchronize()
    micro_tokens = tokens_of(trainer.last_batch)
    micro_samples = samples_of(trainer.last_batch)

    backend.reset_peak_memory()
    load_before = _load_1m()
    times: list[float] = []
    phase_runs: dict[str, list[float]] = {p: [] for p in PHASES}
    started = time.perf_counter()
    reason = None
    loss = None
    while reason is None:
        timer = backend.timer()
        loss = trainer.step(timer)
        step_s, phases = timer.finish()
        times.append(step_s)
        for p in PHASES:
            phase_runs[p].append(phases.get(p, 0.0))
        reason = stop_reason(times, time.perf_counter() - started, rule)
        say(f"timed step {len(times)}")
    timing = summarize(times, rule, reason)
    load_after = _load_1m()
    host_load = (load_before, load_after) if load_before is not None and load_after is not None \
        else None
    contention = _contention_warning(host_load, backend, environment)
    if contention:
        warnings.append(contention)
    allocator = backend.allocator_peak()
    final_loss = float(loss.detach().float()) if loss is not None else None
    if final_loss is not None and not math.isfinite(final_loss):
        warnings.append(f"the loss was {final_loss} at the last timed step (fp16 overflow or a "
                        "bad learning rate?): the timing stands, the training would not.")
    if not timing.stable:
        warnings.append(f"step time not stable: CV {timing.cv:.1%} over {timing.n_steps} steps "
                        f"(target {rule.target_cv:.0%}; {reason}). The median and the p10-p90 "
                        "range are reported as measured.")
        threads = environment.get("torch_threads")
        if backend.kind == "cpu" and isinstance(threads, int) and threads > 1 and timing.cv > 0.1:
            warnings.append(f"{threads} CPU threads: on a small or shared machine one thread is "
                            "often steadier and not slower (on the 2-core VM gpuhours is built "
                            "on, --threads 1 ran a step in about half the time, CV 1% instead "
                            "of 46%). Try --threads 1.")

    module_times = None
    if time_modules and module_steps > 0:
        say("timing each module")
        module_times = time_each_module(counting, backend, module_steps)
        if counting is not trainer:
            warnings.append("per-module times were measured on the eager model (hooks on a "
                            "compiled model would break its graph)")

    flops = None
    operators: int | None = None
    model_flops = model_flops_per_step
    model_flops_basis = "given by the caller" if model_flops_per_step is not None else ""
    if count_step_flops:
        say("counting FLOPs")
        flops = count_flops(counting.step, MFU_CONVENTION)
        if model_flops is None and not checkpointing:
            model_flops, model_flops_basis = flops.total_flops, flops.basis
        elif model_flops is None and set_checkpointing is not None:
            set_checkpointing(False)
            try:
                model_flops = count_flops(counting.step, MFU_CONVENTION).total_flops
            finally:
                set_checkpointing(True)
            model_flops_basis = flops.basis + "; counted again without checkpointing (no recompute)"
        elif model_flops is None:
            model_flops_basis = ("unknown: the model checkpoints and no way to turn it off was "
                                 "given; HFU only")
        if flops.total_flops == 0:
            warnings.append("torch's FLOP counter counted no FLOPs: MFU not reported.")
            model_flops = None
        say("counting operators")
        operators = sum(count_ops(counting.step).values())

    memory = None
    if track_memory:
        say("tracking memory")
        weights, grads, state = state_tensors(counting.model, counting.optimizer)
        tracker = LiveStorageTracker(backend.torch_device.split(":")[0])
        for t in (*weights, *grads, *state):
            tracker.track(t, preexisting=True)
        held: list[Any] = []
        with tracker:
            # the gradients are freed by zero_grad(set_to_none=True) at the end of the step, and
            # the peak knows storages by identity only while they live: hold them until the split
            counting.step(before_zero_grad=lambda: held.extend(
                state_tensors(counting.model, counting.optimizer)))
        memory = tracker.peak(*held)
        del held

    median = timing.median_s
    tokens = micro_tokens * trainer.grad_accum if micro_tokens else None
    samples = micro_samples * trainer.grad_accum if micro_samples else None
    peak_rate = peak.flops_per_s if peak else None
    profile_path = None
    if profile_to is not None:
        say("profiling")
        profile_path = str(write_profile(trainer, backend, Path(profile_to)))
    if allocator is not None:
        peak_bytes: int | None = allocator.allocated_bytes
        peak_basis = ("measured: torch.cuda.max_memory_allocated over the timed steps (tensors; "
                      "the allocator reserved "
                      f"{allocator.reserved_bytes} bytes)")
    elif memory is not None:
        peak_bytes, peak_basis = memory.peak_bytes, memory.basis
    else:
        peak_bytes, peak_basis = None, "not measured"
    return BenchResult(
        setup=setup, device_kind=backend.kind, device_key=backend.key, device_name=backend.name,
        catalog_gpu=backend.catalog_gpu, timing=timing, step_times_s=times,
        phases_median_s={p: statistics.median(v) for p, v in phase_runs.items()},
        timing_basis=f"measured: {backend.timing_method}; {rule.warmup_steps} warm-up steps "
                     "untimed",
        first_step_s=first_step_s,
        tokens_per_step=tokens, samples_per_step=samples,
        tokens_per_s=tokens / median if tokens else None,
        tokens_per_s_range=(tokens / timing.p90_s, tokens / timing.p10_s) if tokens else None,
        samples_per_s=samples / median if samples else None,
        flops=flops, model_flops_per_step=model_flops, model_flops_basis=model_flops_basis,
        operators_per_step=operators, peak=peak,
        mfu=model_flops / median / peak_rate if model_flops and peak_rate else None,
        hfu=flops.total_flops / median / peak_rate if flops and flops.total_flops and peak_rate
        else None,
        memory=memory, peak_memory_bytes=peak_bytes, peak_memory_basis=peak_basis,
        allocator=None if allocator is None else {
            "max_allocated_bytes": allocator.allocated_bytes,
            "max_reserved_bytes": allocator.reserved_bytes,
            "alloc_retries": allocator.alloc_retries},
        host_load_1m=host_load, final_loss=final_loss, profile_trace=profile_path,
        module_times=module_times, warnings=warnings,
        environment=environment,
    )


def _load_1m() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def _contention_warning(load: tuple[float, float] | None, backend: DeviceBackend,
                        environment: dict[str, Any]) -> str | None:
    """A note when the load average says other processes used CPUs during the timed steps (our
    own process accounts for its torch threads on a CPU, one host thread otherwise)."""
    cpus = environment.get("cpu_count")
    if load is None or not isinstance(cpus, int):
        return None
    ours = environment.get("torch_threads", 1) if backend.kind == "cpu" else 1
    others = max(load) - (ours if isinstance(ours, int) else 1)
    if others < 0.5:
        return None
    return (f"other processes were busy during the timed steps: 1-minute load average "
            f"{load[0]:.1f} before, {load[1]:.1f} after, on {cpus} CPUs (this run uses {ours}); "
            "the step times include that contention.")


def time_each_module(trainer: Trainer, backend: DeviceBackend, steps: int) -> ModuleTimes:
    """Forward and backward time per top-level module over `steps` steps with hooks (after one
    untimed step with them), wall clock with the device synchronised at each boundary."""
    from gpuhours.bench.device import WallTimer
    from gpuhours.torchkit.module_time import OUTSIDE, ModuleTimer, summarize_module_times

    hooks = ModuleTimer(trainer.model, backend.synchronize)
    order = list(dict.fromkeys(label for label, _ in hooks.modules))
    per_step: list[dict[str, tuple[float, float]]] = []
    data: list[float] = []
    optimizer: list[float] = []
    walls: list[float] = []
    trainer.observer = hooks
    try:
        with hooks:
            for i in range(steps + 1):
                timer = WallTimer(backend.synchronize)
                trainer.step(timer)
                step_s, phases = timer.finish()
                fwd, bwd = hooks.take()
                if i == 0:
                    continue  # the hooks' first step: graph walks and hook set-up warm up
                outside_fwd = max(phases.get("forward_s", 0.0) - sum(fwd.values()), 0.0)
                fwd[OUTSIDE] = fwd.get(OUTSIDE, 0.0) + outside_fwd
                labels = [x for x in [*order, OUTSIDE] if x in fwd or x in bwd]
                per_step.append({x: (fwd.get(x, 0.0), bwd.get(x, 0.0)) for x in labels})
                data.append(phases.get("data_s", 0.0))
                optimizer.append(phases.get("optimizer_s", 0.0))
                walls.append(step_s)
    finally:
        trainer.observer = None
    return summarize_module_times(
        per_step, data, optimizer, walls,
        basis=f"measured: forward pre/post hooks on each top-level module and pre-hooks on the "
              f"autograd nodes each one made, the device ({backend.name}) synchronised at every "
              f"module boundary, wall clock (torchkit/module_time.py); median of {steps} steps "
              "after one untimed")


def write_profile(trainer: Trainer, backend: DeviceBackend, path: Path, steps: int = 3) -> Path:
    """Run `steps` steps under torch.profiler and write a Chrome trace to `path` atomically;
    each top-level module's forward and backward are named ranges (`module: NAME`) in it,
    unless the model is compiled (hooks would break its graph)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from gpuhours.torchkit.module_time import ModuleTimer

    activities = [ProfilerActivity.CPU]
    if backend.kind == "cuda":
        activities.append(ProfilerActivity.CUDA)
    path = path.expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FieldError("profile", f"cannot create {path.parent}: {e.strerror}.") from None
    compiled = hasattr(trainer.model, "_orig_mod")
    ranges = (ModuleTimer(trainer.model, lambda: None, ranges=True) if not compiled
              else contextlib.nullcontext())
    with profile(activities=activities) as prof, ranges:
        trainer.observer = ranges if not compiled else None
        try:
            for _ in range(steps):
                with torch.profiler.record_function("gpuhours.train_step"):
                    trainer.step()
                backend.synchronize()
        finally:
            trainer.observer = None
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path.resolve()

