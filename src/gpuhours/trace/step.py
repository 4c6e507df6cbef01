"""Run training steps of the real model on fake tensors and collect the storage log and FLOPs.

One step is: forward (with the loss, as the Hugging Face models compute it), backward, the
optimizer step, and `zero_grad(set_to_none=True)`. Two steps are traced by default so that the
optimizer state made by the first exists throughout the second; FLOPs and operator times come
from the last step.
"""

from __future__ import annotations

import contextlib
import resource
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensorMode,
    UnsupportedOperatorException,
)

from gpuhours.errors import FieldError, InputError
from gpuhours.setup import torch_precision
from gpuhours.torchkit.flops import flop_registry
from gpuhours.trace.accounting import StorageLog
from gpuhours.trace.build import BuiltModel, build_fake_model
from gpuhours.trace.location import ModuleLocator
from gpuhours.trace.patches import as_on_gpu
from gpuhours.trace.setup import TraceSetup
from gpuhours.trace.tracker import StorageTracker


@dataclass
class StepTrace:
    """The raw outcome of a trace, before it is summarised."""

    log: StorageLog
    op_calls: Counter[tuple[str, str, str, int, int]]
    built: BuiltModel
    total_params: int
    trainable_params: int
    wall_s: float
    max_rss_bytes: int


def make_optimizer(params: list[torch.nn.Parameter], setup: TraceSetup) -> torch.optim.Optimizer:
    if setup.training.optimizer_impl == "foreach-2.0":
        raise FieldError("optimizer_impl", "foreach-2.0 is torch 2.0's foreach AdamW; a trace "
                         f"runs this machine's torch ({torch.__version__}).",
                         "Give optimizer_impl foreach (the estimate models foreach-2.0).")
    foreach = setup.training.optimizer_impl == "foreach"
    fused = True if setup.training.optimizer_impl == "fused" else None
    if setup.training.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=1e-5, foreach=foreach, fused=fused)
    momentum = 0.9 if setup.training.optimizer == "sgd-momentum" else 0.0
    return torch.optim.SGD(params, lr=1e-5, momentum=momentum, foreach=foreach)


def _root_paths(hf_path: str) -> tuple[str, ...]:
    """The transformers model's own path and its wrappers' (peft): where the loss is computed."""
    parts = hf_path.split(".") if hf_path else []
    return tuple(".".join(parts[:i]) for i in range(len(parts) + 1))


#: what a model raises when it cannot run the setup (shapes that do not fit, an option this
#: architecture lacks): said as the user's error, where it failed, not as a traceback
STEP_FAILURES: tuple[type[Exception], ...] = (RuntimeError, ValueError, TypeError, IndexError,
                                              NotImplementedError)


def tracked_model(model: torch.nn.Module, params: Iterable[torch.nn.Parameter],
                  head_paths: tuple[str, ...] = (), root_paths: tuple[str, ...] = ()
                  ) -> tuple[ModuleLocator, StorageTracker]:
    """A module locator installed on `model` (the caller removes it) and a storage tracker that
    counts FLOPs, with `params` and the model's buffers registered as parameters."""
    locator = ModuleLocator()
    locator.install(model)
    tracker = StorageTracker(locator, head_paths=head_paths, root_paths=root_paths,
                             flop_formulas=flop_registry())
    for p in params:
        tracker.register(p, "parameters")
    for b in model.buffers():
        tracker.register(b, "parameters")
    return locator, tracker


@contextlib.contextmanager
def step_failures_named(where: str, locator: ModuleLocator, tracker: StorageTracker, *,
                        cannot_run_hint: str, failed_hint: str, why: str = "", at: str = "",
                        failures: tuple[type[Exception], ...] = STEP_FAILURES) -> Iterator[None]:
    """A traced step's failure as an InputError of `where`, naming the module (and phase) it
    failed in: an operator the fake-tensor mode cannot run (`why` says more), or the model
    refusing the setup (`failures`; `at` adds to the phase, e.g. " at batch 8")."""
    try:
        yield
    except (UnsupportedOperatorException, DynamicOutputShapeException,
            DataDependentOutputException) as e:
        raise InputError(where, f"the fake-tensor mode cannot run operator {e.func} of this "
                                f"model, in {locator.current() or 'the model'} "
                                f"({type(e).__name__}){why}.", cannot_run_hint) from None
    except failures as e:
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        raise InputError(where, f"the training step failed in {locator.current() or 'the model'} "
                                f"during {tracker.phase}{at}: {type(e).__name__}: {first}",
                         failed_hint) from None


def make_batch(built: BuiltModel, setup: TraceSetup) -> dict[str, torch.Tensor]:
    ids = torch.zeros((setup.training.micro_batch, setup.training.seq_len), dtype=torch.long)
    if built.encoder:
        return {"input_ids": ids, "labels": torch.zeros((setup.training.micro_batch,), dtype=torch.long)}
    return {"input_ids": ids, "labels": ids}


def run_steps(cfg: dict[str, Any], setup: TraceSetup, where: str) -> StepTrace:
    """Build the model of `cfg` on fake tensors and trace `setup.steps` training steps."""
    start = time.perf_counter()
    fake = FakeTensorMode()
    built = build_fake_model(cfg, setup, fake, where)
    model = built.model
    params = list(dict.fromkeys(model.parameters()))  # a tied weight once
    trainable = [p for p in params if p.requires_grad]
    locator, tracker = tracked_model(model, params, (built.head_path,),
                                     _root_paths(built.hf_path))
    with fake:
        batch = make_batch(built, setup)
    for t in batch.values():
        tracker.register(t, "inputs")
    optimizer = make_optimizer(trainable, setup)
    prec = torch_precision(setup.training.precision, setup.training.method)
    named = step_failures_named(
        where, locator, tracker,
        cannot_run_hint="Use `gpuhours estimate` for the analytic figures (basis: formula).",
        failed_hint="Check the config.json and options; `gpuhours estimate` gives the analytic "
                    "figures (basis: formula).")
    try:
        with named, fake, tracker, as_on_gpu(setup.training.flash_attention,
                                              prec.autocast_dtype is not None):
            if setup.steps == 1:
                tracker.count_ops = False
                warm_up_optimizer(optimizer, trainable, tracker)
            for step in range(setup.steps):
                last = step == setup.steps - 1
                tracker.count_ops = last
                if last:  # the peak reported is the last step's: it has the optimizer state
                    tracker.log.reset_peak()
                one_step(model, batch, optimizer, trainable, tracker, step, prec.autocast_dtype,
                         setup.training.grad_accum)
    finally:
        tracker.close()
        locator.remove()
    return StepTrace(
        log=tracker.log, op_calls=tracker.op_calls, built=built,
        total_params=sum(p.numel() for p in params),
        trainable_params=sum(p.numel() for p in trainable),
        wall_s=time.perf_counter() - start,
        max_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    )


def warm_up_optimizer(optimizer: torch.optim.Optimizer, trainable: list[torch.nn.Parameter],
                      tracker: StorageTracker) -> None:
    """An optimizer step on zero gradients: makes the optimizer state a first training step
    would, without its forward and backward."""
    tracker.begin(-1, "optimizer warm-up")
    for p in trainable:
        p.grad = torch.zeros_like(p)
    tracker.mark([p.grad for p in trainable if p.grad is not None], "gradients")
    optimizer.step()
    tracker.mark(_state_tensors(optimizer), "optimizer state")
    optimizer.zero_grad(set_to_none=True)


def _state_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [v for state in optimizer.state.values() for v in state.values()
            if isinstance(v, torch.Tensor)]


def one_step(model: torch.nn.Module, batch: dict[str, torch.Tensor],
             optimizer: torch.optim.Optimizer, trainable: list[torch.nn.Parameter],
             tracker: StorageTracker | None, step: int, autocast_dtype: str | None,
             grad_accum: int = 1) -> None:
    """One training step as the Hugging Face Trainer runs it: `grad_accum` forward and backward
    passes, the optimizer step, zero_grad(set_to_none=True). `tracker` (when given) is told the
    phases and which storages became gradients and optimizer state."""
    for _ in range(grad_accum):
        if tracker:
            tracker.begin(step, "forward")
        amp = (torch.autocast("cpu", dtype=getattr(torch, autocast_dtype)) if autocast_dtype
               else contextlib.nullcontext())
        with amp:
            out = model(**batch)
        loss = out.loss
        del out  # the Trainer keeps only the loss: the logits go before backward
        if tracker:
            tracker.begin(step, "backward")
        loss.backward()
        del loss
        if tracker:
            tracker.mark([p.grad for p in trainable if p.grad is not None], "gradients")
    if tracker:
        tracker.begin(step, "optimizer")
    optimizer.step()
    if tracker:
        tracker.mark(_state_tensors(optimizer), "optimizer state")
        tracker.begin(step, "zero_grad")
    optimizer.zero_grad(set_to_none=True)
