"""`gpuhours.bench.run`: benchmark your own model's training step from Python.

    import gpuhours.bench

    def make_batch():
        ids = torch.randint(0, 32000, (8, 1024))
        return {"input_ids": ids, "labels": ids}

    result = gpuhours.bench.run(model, make_batch, optimizer="adamw", precision="bf16-amp")
    print(result.tokens_per_s, result.mfu, result.peak_memory_bytes)

The step is the usual one: for each of `grad_accum` micro-batches, `make_batch()` (timed as data
wait, moved to the device), forward and loss (`loss_fn(model, batch)`, by default the output's
`.loss`), backward; then `optimizer.step()` and `zero_grad(set_to_none=True)`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuhours.bench.config import StopRule
from gpuhours.bench.runner import BenchResult
from gpuhours.errors import InputError


def run(
    model: Any,
    make_batch: Callable[[], Any],
    optimizer: Any = "adamw",
    *,
    loss_fn: Callable[[Any, Any], Any] | None = None,
    device: str = "auto",
    precision: str = "fp32",
    grad_accum: int = 1,
    compile: bool = False,
    learning_rate: float = 1e-4,
    optimizer_impl: str = "foreach",
    warmup_steps: int = 3,
    min_steps: int = 5,
    max_steps: int = 50,
    target_cv: float = 0.02,
    max_time_s: float = 60.0,
    tokens_of: Callable[[Any], int | None] | None = None,
    model_flops_per_step: float | None = None,
    checkpointing: bool = False,
    set_checkpointing: Callable[[bool], None] | None = None,
    peak_tflops: float | None = None,
    count_flops: bool = True,
    track_memory: bool = True,
    profile_to: str | Path | None = None,
    ledger: str | Path | None = None,
    name: str = "custom",
) -> BenchResult:
    """Measure real training steps of `model` on this machine.

    - `optimizer`: a torch optimizer over the model's parameters, or 'adamw', 'sgd',
      'sgd-momentum' (built over the parameters that require grad, with `learning_rate` and
      `optimizer_impl` foreach / fused / per-parameter).
    - `precision`: 'fp32' (as the model is), 'bf16' (the model is cast to bfloat16),
      'bf16-amp' / 'fp16-amp' (torch.autocast; fp16 adds a GradScaler).
    - `device`: 'auto' (CUDA, then MPS, then CPU), 'cuda', 'mps' or 'cpu'; the model is moved there.
    - Stop rule: `warmup_steps` untimed, then timed steps until the CV of the step time is below
      `target_cv` (after `min_steps`) or `max_steps` / `max_time_s`.
    - `tokens_of(batch)`: tokens in a micro-batch (default: `batch['input_ids'].numel()`).
    - MFU needs the model FLOPs of a step: counted by torch's FLOP counter; when the model uses
      gradient checkpointing pass `checkpointing=True` and either `set_checkpointing(on)` (to
      count once without recomputation) or `model_flops_per_step`.
    - `peak_tflops`: the device peak for MFU; default the catalog's for a known GPU, else a
      measured matmul probe.
    - `ledger`: a ledger path to store the measurement in (none by default).
    - `profile_to`: write a Chrome trace of three steps there.

    Returns a BenchResult; `.warnings` says what could not be measured or was not stable.
    Running out of memory raises torch.OutOfMemoryError as usual.
    """
    import torch

    from gpuhours.bench.device import detect
    from gpuhours.bench.environment import collect
    from gpuhours.bench.peak import resolve_peak
    from gpuhours.bench.runner import Trainer, default_loss, default_tokens, make_optimizer, measure
    from gpuhours.track.ledger import Ledger, ledger_path

    if precision not in ("fp32", "bf16", "bf16-amp", "fp16-amp"):
        raise InputError("precision", f"expected fp32, bf16, bf16-amp or fp16-amp, got "
                                      f"{precision!r}.")
    if not isinstance(grad_accum, int) or grad_accum < 1:
        raise InputError("grad_accum", f"expected a positive integer, got {grad_accum!r}.")
    rule = StopRule(warmup_steps=warmup_steps, min_steps=min_steps, max_steps=max_steps,
                    target_cv=target_cv, max_time_s=max_time_s)
    backend = detect(device)
    model.to(backend.torch_device)
    if precision == "bf16":
        model.to(torch.bfloat16)
    model.train()
    if isinstance(optimizer, str):
        params = [p for p in model.parameters() if p.requires_grad]
        opt = make_optimizer(params, optimizer, optimizer_impl, learning_rate)
        optimizer_name = f"{optimizer}/{optimizer_impl}"
    else:
        opt = optimizer
        optimizer_name = type(optimizer).__name__
    loss = loss_fn or default_loss
    eager = Trainer(model, opt, make_batch, loss, backend, precision, grad_accum)
    timed = Trainer(torch.compile(model), opt, make_batch, loss, backend, precision,
                    grad_accum) if compile else eager
    environment = collect(backend)
    store = Ledger.open(ledger_path(ledger)) if ledger is not None else None
    try:
        peak = resolve_peak(backend, precision, store, environment, peak_tflops)
        setup = {"model": name, "precision": precision, "grad_accum": grad_accum,
                 "compiled": compile, "checkpointing": checkpointing, "optimizer": optimizer_name,
                 "api": "gpuhours.bench.run"}
        result = measure(timed, backend, setup=setup, rule=rule, peak=peak,
                         environment=environment, counting_trainer=eager,
                         tokens_of=tokens_of or default_tokens, count_step_flops=count_flops,
                         set_checkpointing=set_checkpointing, checkpointing=checkpointing,
                         model_flops_per_step=model_flops_per_step, track_memory=track_memory,
                         profile_to=profile_to)
        if store is not None:
            samples, tokens = result.samples_per_step, result.tokens_per_step
            setup["micro_batch"] = samples // grad_accum if samples else None
            setup["seq_len"] = tokens // samples if tokens and samples else None
            store.add_measurement(
                kind="bench-api", status="ok", device_kind=backend.kind, device_key=backend.key,
                device_name=backend.name, model=name, setup=setup, model_config={},
                environment=environment, results=result.ledger_results(),
                probe_ids=[peak.probe_id] if peak.probe_id is not None else [])
        return result
    finally:
        if store is not None:
            store.close()
