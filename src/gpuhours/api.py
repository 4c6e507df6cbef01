"""The public library API: what the CLI calls, and what a notebook calls.

    from gpuhours import Training, Hardware, estimate_training, fit_training

    t = Training(model="qwen2.5-7b", method="lora", micro_batch=4, seq_len=2048)
    e = estimate_training(t, Hardware(gpu="a100-80gb"), tokens=1e9)
    e.memory.total_bytes.value, e.step_time_s.value, e.totals.gpu_hours.value

Every function takes the setup models of gpuhours.setup and returns pydantic models whose
figures carry their basis. Bad input raises gpuhours.errors.InputError (a FieldError names the
setup fields at fault). `estimate_training`, `fit_training`, `estimate_generation` and
`plan_budget` never import torch; `trace_training` needs the `bench` extra.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuhours.setup import Generation, Hardware, Training

if TYPE_CHECKING:
    from gpuhours.catalog.schema import GpuSpec
    from gpuhours.estimate.estimator import TrainingEstimate
    from gpuhours.estimate.fit import FitResult
    from gpuhours.estimate.generation import GenerationEstimate
    from gpuhours.plan.results import Budget
    from gpuhours.trace.module_result import ModuleTraceResult
    from gpuhours.trace.result import TraceResult
    from gpuhours.track.ledger import Ledger


def price_rows_for(hardware: Hardware, usd_per_gpu_hour: float | None = None) -> list[Any]:
    """The catalog's prices of the GPU, and first the user's own price when given."""
    from gpuhours import catalog

    name = hardware.gpu.name
    rows = catalog.prices(name) if name in {g.name for g in catalog.gpus()} else []
    if usd_per_gpu_hour is not None:
        from datetime import date

        from gpuhours.compare.rank import given_price_rows

        rows = [*given_price_rows([hardware.gpu], [hardware.num_gpus], usd_per_gpu_hour,
                                  date.today()), *rows]
    return rows


def estimate_training(training: Training, hardware: Hardware, *, tokens: float | None = None,
                      steps: float | None = None, examples: float | None = None,
                      epochs: float | None = None, tokens_per_example: float | None = None,
                      packed: bool = False, ledger: Ledger | None = None,
                      usd_per_gpu_hour: float | None = None) -> TrainingEstimate:
    """Memory per GPU, step time and its bottleneck, throughput, MFU, and with an amount of work
    (`tokens`, `steps`, or `examples` x `epochs`) GPU hours, wall clock and cost per provider.
    Examples are padded to the sequence length unless `packed` (then `tokens_per_example`,
    their mean length, sets the tokens).

    `usd_per_gpu_hour`: your own price, costed first (provider 'given') beside the catalog's.
    With a `ledger` of measurements, the assumed efficiency is replaced by that of the nearest
    matching benchmark, and the assumed host cost per operator by the one a host-led benchmark
    on the same device measured (the estimate's bases then name them). The memory verdict is in
    `.memory.fits`; this function does not refuse a setup that does not fit."""
    from gpuhours.estimate.estimator import estimate_training as _estimate

    measured: dict[str, Any] = {}
    if ledger is not None:
        from gpuhours.track.calibration import calibration_kwargs

        measured = calibration_kwargs(ledger, hardware, training)
    return _estimate(training, hardware, tokens=tokens, steps=steps, examples=examples,
                     epochs=epochs, tokens_per_example=tokens_per_example, packed=packed,
                     price_rows=price_rows_for(hardware, usd_per_gpu_hour), **measured)


def fit_training(training: Training, hardware: Hardware, *, effective_batch: int | None = None,
                 headroom: float | None = None, search_layouts: bool = False,
                 fixed_overlaps: tuple[str, ...] = (),
                 megatron_layouts: bool = False, batch_near: int | None = None) -> FitResult:
    """Does `training` fit on `hardware`: the largest micro-batch, the accumulation for an
    effective batch, the fastest configuration that fits, and what would fit when micro-batch 1
    does not as given (estimate/remedies.py: checkpointing, ZeRO, CPU offload of full training,
    LoRA, QLoRA on these GPUs; more or larger catalog GPUs when the method fits on none of these
    without offload). With
    `search_layouts`, the parallel layouts are searched, each with the communication overlaps
    it can run, except those named in `fixed_overlaps` ("tp_comm_overlap",
    "moe_a2a_overlap"), which keep `training`'s value; with `megatron_layouts` a searched
    tensor, pipeline, context or expert layout is costed on Megatron-Core's kernel path (as
    `estimate`'s chooser and `fit` without --kernels cost them). `batch_near`: the global
    batch (sequences per step) the layouts aim at, each making the nearest it can (without an
    effective batch: `gpuhours fit` passes estimate's default for full training)."""
    from gpuhours import catalog
    from gpuhours.errors import FieldError
    from gpuhours.estimate.fit import fit

    if headroom is not None and not 0 <= headroom < 1:
        raise FieldError("headroom", f"expected a fraction in [0, 1), got {headroom!r}.")
    if effective_batch is not None and effective_batch < 1:
        raise FieldError("effective_batch", f"expected a positive integer, got "
                                            f"{effective_batch!r}.")
    _check_overlaps(fixed_overlaps)
    return fit(training, hardware, effective_batch=effective_batch, headroom=headroom,
               bigger_gpus=catalog.gpus(), search_layouts=search_layouts,
               fixed_overlaps=fixed_overlaps, megatron_layouts=megatron_layouts,
               batch_near=batch_near)


#: the communication overlaps a layout search may choose (Training's fields of that name)
OVERLAPS = ("tp_comm_overlap", "moe_a2a_overlap")


def _check_overlaps(fixed_overlaps: Sequence[str]) -> None:
    from gpuhours.errors import FieldError

    unknown = [o for o in fixed_overlaps if o not in OVERLAPS]
    if unknown:
        raise FieldError("fixed_overlaps", f"unknown overlap(s) {', '.join(map(repr, unknown))}; "
                                           f"expected some of {', '.join(OVERLAPS)}.")


def choose_setup(training: Training, hardware: Hardware, *, global_batch: int | None = None,
                 search_layouts: bool = True, keep: Sequence[str] = (),
                 fixed_overlaps: Sequence[str] = (),
                 headroom: float | None = None) -> tuple[Training, str] | None:
    """The setup `estimate` chooses when it is left open ("a 65B model on 2,048 GPUs"): the
    fastest that fits for the global batch (sequences per optimizer step; None: the default
    for the model's size when `training` gives no accumulation), with the sentence saying what
    was chosen and why; None when nothing fits. `keep` names the fields of micro_batch,
    checkpointing and zero_stage held at `training`'s values; with `search_layouts` the
    parallel layouts (tp, pp, cp, ep, virtual stages) are searched when plain data parallelism
    is not clearly compute-bound, and costed on Megatron-Core's kernel path
    (estimate/fit.py chosen_setup). Pass the result to estimate_training."""
    from gpuhours.errors import FieldError
    from gpuhours.estimate.fit import chosen_setup

    if global_batch is not None and global_batch < 1:
        raise FieldError("global_batch", f"expected a positive integer, got {global_batch!r}.")
    bad = [k for k in keep if k not in ("micro_batch", "checkpointing", "zero_stage")]
    if bad:
        raise FieldError("keep", f"expected some of micro_batch, checkpointing, zero_stage; "
                                 f"got {', '.join(map(repr, bad))}.")
    _check_overlaps(fixed_overlaps)
    return chosen_setup(training, hardware, headroom=headroom, search_layouts=search_layouts,
                        global_batch=global_batch, fixed_overlaps=fixed_overlaps, keep=keep)


def estimate_generation(generation: Generation, hardware: Hardware,
                        ledger: Ledger | None = None) -> GenerationEstimate:
    """Prefill and decode time, KV cache, and the batch that fits, on one GPU of `hardware`.
    With a `ledger` holding an HF generate benchmark on that GPU (`bench --workload
    generate`), hf-generate's host costs are scaled to reproduce it."""
    from gpuhours.estimate.generation import estimate_generation as _estimate

    if ledger is not None:
        from gpuhours.track.calibration import find_generation_calibration

        cal = find_generation_calibration(ledger, hardware.gpu, generation)
        if cal is not None:
            from dataclasses import replace

            return replace(_estimate(generation, hardware.gpu, host_scale=cal.host_scale),
                           calibration=cal.basis)
    return _estimate(generation, hardware.gpu)


def plan_budget(plan_file: str | Path, ledger: Ledger | None = None) -> Budget:
    """A plan file's budget, phase by phase (calibrated by `ledger` when given)."""
    from gpuhours.plan.budget import evaluate
    from gpuhours.plan.load import load_plan

    return evaluate(load_plan(plan_file), ledger=ledger)


def trace_training(training: Training, *, steps: int = 2,
                   device: str | None = None) -> TraceResult:
    """Exact memory and FLOPs of `training`'s step of the real model on fake tensors (needs the
    `bench` extra: torch, transformers, peft). `device`: a catalog GPU for the roofline."""
    from gpuhours.resolve import catalog_gpu
    from gpuhours.trace import TraceSetup
    from gpuhours.trace import trace_training as _trace

    spec = catalog_gpu(device, field="device_profile") if device else None
    return _trace(TraceSetup(training=training, steps=steps), spec)


def trace_module(factory: Callable[[], Any], inputs: Sequence[str], gpu: str, *,
                 precision: str = "fp32", **options: Any) -> ModuleTraceResult:
    """Your own `nn.Module` (`factory()` builds it) traced on fake tensors for a GPU you do not
    have, as `gpuhours trace --module` does: memory by part as the batch grows, the largest
    batch that fits `gpu` (a catalog name), FLOPs and bytes per module and a roofline step time
    per module. `inputs`: one 'name=dtype[B,...]' per model input, B the batch (needs the
    `bench` extra)."""
    from gpuhours.trace import trace_module as _trace

    return _trace(factory, inputs, gpu, precision, **options)


def open_ledger(path: str | Path | None = None) -> Ledger | None:
    """The ledger to calibrate from: `path`, $GPUHOURS_LEDGER, or ./.gpuhours/ledger.sqlite,
    when that file exists; None otherwise (estimates stay analytic). A `path` given that does
    not exist is an error."""
    from gpuhours.errors import FieldError
    from gpuhours.track.paths import ledger_path

    found = ledger_path(None if path is None else str(path))
    if not found.exists():
        if path is not None:
            raise FieldError("ledger", f"no ledger at {found}.",
                             "Run `gpuhours bench` first, or leave the ledger out.")
        return None
    from gpuhours.track.ledger import Ledger

    return Ledger.open(found, create=False)


def gpu_spec(name: str, ledger: Ledger | None = None) -> GpuSpec:
    """A catalog GPU by name or alias, or, with a `ledger`, a device measured by `gpuhours
    bench` probes (a CPU, an Apple chip) by its device key."""
    from gpuhours import catalog
    from gpuhours.errors import InputError, UnknownNameError
    from gpuhours.resolve import catalog_gpu

    if ledger is None:
        return catalog_gpu(name)
    try:
        return catalog.gpu(name)
    except UnknownNameError as not_in_catalog:
        from gpuhours.track.calibration import measured_device

        try:
            return measured_device(ledger, name)
        except InputError:
            # the catalog's close names, as without a ledger
            unknown = UnknownNameError("GPU", name, not_in_catalog.close,
                                       "Use a catalog name (gpuhours catalog gpus) or a device "
                                       "key from `gpuhours ledger list`, or give the GPU's "
                                       "figures (--peak-tflops, --memory-gb, "
                                       "--bandwidth-gb-per-s).")
            unknown.fields = ("gpu",)
            raise unknown from None
