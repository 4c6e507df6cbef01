"""A user's own nn.Module on fake tensors: one training step at a given batch, traced.

The factory is called under `torch.device("meta")` (no weights made; a factory that cannot run
there, e.g. one that loads a file, runs on the CPU instead), then every parameter and buffer is
swapped for an empty fake tensor (trace/build.py `_materialise`, which keeps tied weights tied).
A step is what a plain PyTorch training loop does:

    with autocast(fp16 or bf16, for -mixed / -amp):  out = model(*inputs, **named_inputs)
    loss = out.loss, out["loss"], a scalar output, or else the mean of each floating output
    (loss x scale).backward()                      # fp16: torch.amp.GradScaler's scaled loss
    unscale the gradients and check them for inf   # fp16: the scaler's pass over the gradients
    AdamW.step(); zero_grad(set_to_none=True)

Parameters stay fp32 under -mixed / -amp (the fp32 master weights a GradScaler run keeps), and
autocast makes the half-precision activations and weight copies. Pure bf16 / fp16 cast the
model. The optimizer state is made first by an optimizer step on zero gradients (as in
trace/step.py with one step), so that the traced step has it throughout.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from gpuhours.bench.module_spec import InputSpec, make_inputs
from gpuhours.errors import FieldError, InputError
from gpuhours.torchkit.loss import loss_of
from gpuhours.trace.accounting import StorageLog
from gpuhours.trace.attention import cuda_like_dropout, cuda_like_sdpa
from gpuhours.trace.autocast import cuda_fp32_policy
from gpuhours.trace.build import materialise as _materialise
from gpuhours.trace.step import STEP_FAILURES, step_failures_named, tracked_model, warm_up_optimizer

#: precisions of a plain PyTorch loop: fp32; autocast over fp32 weights (-mixed and -amp are
#: the same thing here: fp16 adds a GradScaler); the whole model cast to half
PRECISIONS = ("fp32", "bf16-mixed", "fp16-mixed", "bf16-amp", "fp16-amp", "bf16", "fp16")

#: the loss scale a GradScaler starts with (torch.amp.GradScaler init_scale): its value does
#: not matter to a trace, only that the loss is multiplied and the gradients unscaled
_INIT_SCALE = 2.0**16


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise FieldError("precision", f"expected one of {', '.join(PRECISIONS)}, got "
                                      f"{precision!r}.")


def autocast_dtype(precision: str) -> torch.dtype | None:
    if precision.endswith(("-mixed", "-amp")):
        return torch.float16 if precision.startswith("fp16") else torch.bfloat16
    return None


def param_dtype(precision: str) -> torch.dtype:
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)


@dataclass
class FakeModule:
    """The user's model on fake tensors, with what a step needs."""

    model: torch.nn.Module
    fake: FakeTensorMode
    params: list[torch.nn.Parameter]
    trainable: list[torch.nn.Parameter]
    #: (name, parameters, trainable parameters) of each child of the model
    children: list[tuple[str, int, int]]
    built_on: str


def build_fake_module(factory: Callable[[], Any], spec: str, precision: str) -> FakeModule:
    """Build the model of `factory` on fake tensors in `precision`'s parameter dtype."""
    check_precision(precision)
    built_on = "meta"
    try:
        model = _build(factory, spec, "meta")
    except InputError:
        # e.g. a factory that loads weights from a file: build it for real, then fake it
        model = _build(factory, spec, None)
        built_on = "cpu"
    fake = FakeTensorMode()
    if param_dtype(precision) != torch.float32:
        model.to(param_dtype(precision))
    _materialise(model, fake)
    model.train()
    params = list(dict.fromkeys(model.parameters()))
    children = []
    for name, child in model.named_children():
        ps = list(dict.fromkeys(child.parameters()))
        children.append((name, sum(p.numel() for p in ps),
                         sum(p.numel() for p in ps if p.requires_grad)))
    trainable = [p for p in params if p.requires_grad]
    if not trainable:
        raise InputError(spec, "the model has no parameter that requires grad: nothing to train.")
    return FakeModule(model=model, fake=fake, params=params, trainable=trainable,
                      children=children, built_on=built_on)


def _build(factory: Callable[[], Any], spec: str, device: str | None) -> torch.nn.Module:
    """`factory()` under `torch.device(device)` when given; an InputError if it fails or
    makes no nn.Module."""
    try:
        with torch.device(device) if device else contextlib.nullcontext():
            model = factory()
    except InputError:
        raise
    except Exception as e:  # the user's code raised: say so, without our traceback
        raise InputError(spec, f"building the model failed: {type(e).__name__}: "
                               f"{str(e).strip()[:300]}.") from None
    if not isinstance(model, torch.nn.Module):
        raise InputError(spec, f"the factory returned a {type(model).__name__}, not a torch "
                               "nn.Module.")
    return model


@dataclass
class BatchTrace:
    log: StorageLog
    #: (top-level module, op, phase, dtype, flops, bytes, reduction length) -> calls
    module_calls: Counter[tuple[str, str, str, str, int, int, int]]


@contextlib.contextmanager
def _as_on_gpu(autocast: bool) -> Iterator[None]:
    """CUDA's dropout mask and attention kernel, and CUDA autocast's fp32 operators (the
    transformers patches of trace/patches.py are not needed for a plain module)."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(cuda_like_dropout())
        stack.enter_context(cuda_like_sdpa())
        if autocast:
            stack.enter_context(cuda_fp32_policy())
        yield


def make_optimizer(trainable: list[torch.nn.Parameter], impl: str) -> torch.optim.Optimizer:
    if impl not in ("foreach", "fused", "per-parameter"):
        raise FieldError("optimizer_impl", f"expected foreach, fused or per-parameter, got "
                                           f"{impl!r}.")
    return torch.optim.AdamW(trainable, lr=1e-4, foreach=impl == "foreach",
                             fused=True if impl == "fused" else None)


def trace_batch(fm: FakeModule, specs: Sequence[InputSpec], batch: int, precision: str,
                optimizer_impl: str, spec: str) -> BatchTrace:
    """One training step of `fm` at `batch`, on fake tensors, with the optimizer state made
    beforehand; every allocation, free, FLOP and byte of the step recorded."""
    model = fm.model
    locator, tracker = tracked_model(model, fm.params)
    with fm.fake:
        kwargs = make_inputs(specs, batch)
    for t in kwargs.values():
        tracker.register(t, "inputs")
    optimizer = make_optimizer(fm.trainable, optimizer_impl)
    amp = autocast_dtype(precision)
    scaler = precision.startswith("fp16") and amp is not None
    # a shape error in the user's forward is reported below, once; the fake-tensor mode would
    # also log it with its own traceback
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    level = fake_log.level
    fake_log.setLevel(logging.CRITICAL)
    named = step_failures_named(
        spec, locator, tracker, why=": its shapes depend on tensor values", at=f" at batch {batch}",
        cannot_run_hint="`gpuhours bench --module` measures it on this machine instead.",
        failed_hint="Check --input (names, dtypes and shapes the model's forward takes) and "
                    "--precision.", failures=(*STEP_FAILURES, AttributeError))
    try:
        with named, fm.fake, tracker, _as_on_gpu(amp is not None):
            tracker.count_ops = False
            warm_up_optimizer(optimizer, fm.trainable, tracker)
            tracker.count_ops = tracker.count_modules = True
            tracker.log.reset_peak()
            tracker.begin(0, "forward")
            with torch.autocast("cpu", dtype=amp) if amp else contextlib.nullcontext():
                out = model(**kwargs)
            loss = loss_of(out)
            del out
            if scaler:
                loss = loss * _INIT_SCALE
            tracker.begin(0, "backward")
            loss.backward()
            del loss
            grads = [p.grad for p in fm.trainable if p.grad is not None]
            tracker.mark(grads, "gradients")
            tracker.begin(0, "optimizer")
            if scaler:
                found_inf = torch.zeros(1)
                inv_scale = torch.full((1,), 1.0 / _INIT_SCALE)
                torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
                del found_inf, inv_scale
            del grads
            optimizer.step()
            tracker.begin(0, "zero_grad")
            optimizer.zero_grad(set_to_none=True)
    finally:
        fake_log.setLevel(level)
        tracker.close()
        locator.remove()
        for p in fm.trainable:  # the next batch starts without gradients
            p.grad = None
    return BatchTrace(log=tracker.log, module_calls=tracker.module_calls)
