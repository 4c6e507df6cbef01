"""The doctor's estimator-based rules and the options table: what the analytic model says this
model should take on this GPU, on one GPU optimised, and with DDP / ZeRO-2 / ZeRO-3 (FSDP) on 2,
4 and 8 GPUs. Needs the run's model config and a catalog GPU; no torch."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_serializer

from gpuhours import catalog
from gpuhours.catalog.schema import GpuSpec
from gpuhours.doctor.rules import Finding, RunView, finding_worth, mean_of
from gpuhours.errors import InputError
from gpuhours.estimate.arch import ModelArch, from_hf_config
from gpuhours.estimate.estimator import TrainingEstimate, estimate_training
from gpuhours.estimate.fit import divisor_at_most, fit
from gpuhours.setup import Hardware, Training

#: measured step below this fraction of the estimator's speed: "far below" (assumption: the
#: estimator's efficiencies are typical, not best-case; half of it is clearly low)
LOW_EFFICIENCY_RATIO = 0.5
#: a larger micro-batch is suggested when at least this many times the current one fits
MEMORY_HEADROOM_FACTOR = 2


def training_of(view: RunView, arch: ModelArch) -> Training:
    """The run's setup as the estimator's Training."""
    cfg = view.config
    for key in ("micro_batch", "seq_len"):
        if not cfg.get(key):
            raise InputError(view.source, f"the run's config has no {key}; the estimator needs "
                                          "it.", "Pass config={'micro_batch': ..., 'seq_len': "
                                                 "...} to the tracker.")
    precision = cfg.get("precision") or ("bf16-amp" if cfg.get("bf16") else "fp32")
    return Training.model_validate(dict(
        arch=arch, method=cfg.get("method") or "full", precision=precision,
        micro_batch=int(cfg["micro_batch"]), seq_len=int(cfg["seq_len"]),
        grad_accum=int(cfg.get("grad_accum") or 1), checkpointing=bool(cfg.get("checkpointing")),
        flash_attention=bool(cfg.get("flash_attention", True))))


def arch_of(view: RunView) -> ModelArch | None:
    cfg = view.config.get("model_config")
    if not isinstance(cfg, dict):
        return None
    try:
        return from_hf_config(cfg, name=str(cfg.get("model_type") or "tracked model"),
                              where=f"{view.source} model_config")
    except InputError:
        return None  # a model type the estimator refuses: efficiency is not judged


def low_efficiency(view: RunView, t: Training, gpu: GpuSpec) -> Finding | None:
    """Compute + optimizer per step measured far slower than the estimator's step time for this
    model, batch and GPU. Saving: measured - estimated (formula)."""
    hw = Hardware(gpu=gpu)
    measured = mean_of([s.compute_s + s.optimizer_s for s in view.steady])
    return low_efficiency_vs(view, measured, "forward + backward + optimizer",
                             estimate_training(t, hw, "tracked run"), hw)


def low_efficiency_vs(view: RunView, measured_s: float, measured_what: str,
                      est: TrainingEstimate, hw: Hardware, evidence: list[str] | None = None
                      ) -> Finding | None:
    """The low-efficiency rule: `measured_s` (seconds per optimizer step, measured, of what
    `measured_what` names) against the estimator's step time `est` on `hw`. A finding when the
    measured speed is below LOW_EFFICIENCY_RATIO of the estimator's; saving: measured -
    estimated per step (formula). `evidence`: more lines, after the comparison."""
    expected = est.step_time_s.value
    if measured_s <= 0 or expected / measured_s >= LOW_EFFICIENCY_RATIO:
        return None
    where = hw.gpu.name if hw.num_gpus == 1 else f"{hw.num_gpus} x {hw.gpu.name}"
    lines = [f"{measured_what}: {measured_s:.3f} s per step (measured)",
             f"the estimator expects {expected:.3f} s on {where} for this model and batch "
             f"(MFU {est.mfu.value:.0%}; formula, estimate/timing.py)",
             f"measured speed is {expected / measured_s:.0%} of that", *(evidence or [])]
    fix = ("check in this order: bf16 autocast (bf16=True), flash/SDPA attention "
           "(attn_implementation='sdpa'), a fused optimizer (optim='adamw_torch_fused'), "
           "torch.compile; then bench the fixed step with `gpuhours bench`")
    return finding_worth(view, "low-efficiency", "Far slower than this GPU runs this model",
                         lines, fix, measured_s - expected, "formula",
                         "measured step - estimator's step time (estimate_training)")


def memory_unused(view: RunView, t: Training, gpu: GpuSpec) -> Finding | None:
    """The CUDA allocator's peak leaves room for a micro-batch at least MEMORY_HEADROOM_FACTOR
    times larger (fit), and the estimator says it is faster per token: saving = measured
    compute x (1 - tokens/s now / tokens/s larger), the effective batch kept by fewer
    accumulation steps."""
    peaks = [s.peak_memory_bytes for s in view.steps
             if s.peak_memory_bytes and s.memory_basis == "cuda-max-allocated"]
    if not peaks:
        return None
    hw = Hardware(gpu=gpu)
    result = fit(t, hw)
    largest = result.largest_micro_batch
    if largest is None or largest < MEMORY_HEADROOM_FACTOR * t.micro_batch:
        return None
    effective = t.micro_batch * t.grad_accum
    new_mb = min(largest, effective) if effective >= MEMORY_HEADROOM_FACTOR * t.micro_batch \
        else largest
    bigger = t.model_copy(update={"micro_batch": new_mb,
                                  "grad_accum": max(1, effective // new_mb)})
    tps_now = estimate_training(t, hw, "run").tokens_per_s_per_gpu.value
    tps_new = estimate_training(bigger, hw, "run").tokens_per_s_per_gpu.value
    if tps_new <= tps_now * 1.02:
        return None
    measured = mean_of([s.compute_s + s.optimizer_s for s in view.steady])
    saved = measured * (1 - tps_now / tps_new)
    evidence = [f"peak allocated {max(peaks) / 2**30:.1f} GiB of {gpu.memory_gb:g} GB "
                f"(measured, CUDA allocator)",
                f"micro-batch up to {largest} fits (fit, with its headroom); at {new_mb} the "
                f"estimator gives {tps_new / tps_now:.2f}x the tokens/s (formula)"]
    fix = (f"micro-batch {new_mb} with grad_accum {bigger.grad_accum} (same effective batch "
           f"{effective})")
    return finding_worth(view, "memory-unused", "Memory is left unused", evidence, fix, saved,
                  "formula", "measured compute x (1 - estimated tokens/s ratio)")


class OptionRow(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    option: str
    num_gpus: int
    #: the GPU type of the row (the run's, or another catalog GPU's)
    gpu: str = ""
    micro_batch: int
    grad_accum: int
    fits: bool
    wall_hours: float
    gpu_hours: float
    usd: float | None
    communication_exposed_share: float
    basis: str

    # in --json each quantity is a figure, {value, unit, basis, source}, like the other commands'
    @field_serializer("wall_hours", "gpu_hours", when_used="json")
    def _hours_figure(self, value: float, info: Any) -> dict[str, Any]:
        from gpuhours.estimate.candidate import figure_json

        unit = "h" if info.field_name == "wall_hours" else "GPU h"
        return figure_json(value, unit, "formula", "the run's planned work at this row's "
                           "estimated step time (estimate_training)")

    @field_serializer("usd", when_used="json")
    def _usd_figure(self, value: float | None) -> dict[str, Any] | None:
        from gpuhours.estimate.candidate import figure_json

        return None if value is None else figure_json(
            value, "USD", "formula", "gpu_hours x USD per GPU-hour (" + (
                self.basis.split("; price: ", 1)[1] if "; price: " in self.basis
                else "the run's price") + ")")

    @field_serializer("communication_exposed_share", when_used="json")
    def _comm_figure(self, value: float) -> dict[str, Any]:
        from gpuhours.estimate.candidate import figure_json

        return figure_json(value, "fraction of step time", "formula", "estimate_training: "
                           "exposed communication / step time (assumed overlap)")


def options_table(view: RunView, t: Training, gpu: GpuSpec,
                  usd_per_gpu_hour: float | None, catalog_price: bool = False) -> list[OptionRow]:
    """The same work (planned steps x tokens per step of the run) in each setup: the run's own
    setup on its GPUs (view.num_gpus), one GPU optimised (fit's fastest), DDP / ZeRO-2 / ZeRO-3
    on 2, 4, 8 GPUs. The effective batch is kept: grad_accum = effective batch / (micro-batch x
    GPUs). Dollars at `usd_per_gpu_hour` per GPU used, or with `catalog_price` at the catalog's
    cheapest on-demand whole instances for each row's GPU count (catalog.billing)."""
    effective = t.micro_batch * t.grad_accum * view.num_gpus
    tokens = view.planned_steps * effective * t.seq_len
    rows: list[OptionRow] = []

    def add(label: str, tt: Training, n: int, on: GpuSpec = gpu) -> None:
        price, price_basis = usd_per_gpu_hour, ""
        if catalog_price or on.name != gpu.name:
            from gpuhours.catalog.billing import catalog_price_per_used_gpu_hour

            found = catalog_price_per_used_gpu_hour(on.name, n)
            price, price_basis = (None, "; no catalog price") if found is None else (
                found[0], f"; price: {found[1]}")
        hw = Hardware(gpu=on, num_gpus=n)
        est = estimate_training(tt, hw, "run", tokens=tokens)
        assert est.totals is not None
        comm = est.step_time_breakdown_s["communication_exposed_s"].value / est.step_time_s.value
        gh = est.totals.gpu_hours.value
        rows.append(OptionRow(
            option=label, num_gpus=n, gpu=on.name, micro_batch=tt.micro_batch,
            grad_accum=tt.grad_accum, fits=est.memory.fits,
            wall_hours=est.totals.wall_clock_hours.value, gpu_hours=gh,
            usd=None if price is None else gh * price, communication_exposed_share=comm,
            basis="formula: estimate_training (roofline, ring collectives, assumed overlap)"
                  + price_basis))

    add("as run (estimate)", t, view.num_gpus)
    best = fit(t, Hardware(gpu=gpu), effective_batch=effective).fastest
    best_mb = t.micro_batch
    if best is not None:
        best_mb = divisor_at_most(effective, best.micro_batch)
        add("optimised, 1 GPU", t.model_copy(update={
            "micro_batch": best_mb, "grad_accum": effective // best_mb,
            "checkpointing": best.checkpointing}), 1)
    for n in (2, 4, 8):
        if effective % n:
            continue  # the effective batch cannot be split over n GPUs
        for label, stage in (("DDP", 0), ("FSDP grad-op / ZeRO-2", 2),
                             ("FSDP full shard / ZeRO-3", 3)):
            hw = Hardware(gpu=gpu, num_gpus=n)
            r = fit(t.model_copy(update={"zero_stage": stage}), hw, effective_batch=effective)
            mb = divisor_at_most(effective // n, min(best_mb, r.largest_micro_batch or 1))
            accum = effective // (mb * n)
            add(f"{label}, {n} GPUs", t.model_copy(update={
                "zero_stage": stage, "micro_batch": mb, "grad_accum": accum}), n)
    for name in OTHER_GPUS:
        other = catalog.gpu(name)
        if other.name == gpu.name:
            continue
        found = fit(t, Hardware(gpu=other), effective_batch=effective).fastest
        if found is None:
            continue  # does not fit on one of these: `gpuhours compare` ranks more counts
        mb = divisor_at_most(effective, found.micro_batch)
        add(f"optimised, 1 x {other.name}", t.model_copy(update={
            "micro_batch": mb, "grad_accum": effective // mb,
            "checkpointing": found.checkpointing}), 1, other)
    return rows


#: other GPU types the options table prices the run on (one GPU each, optimised); `gpuhours
#: compare` ranks every type, count and provider
OTHER_GPUS = ("rtx-4090", "l40s", "a100-80gb", "h100-sxm", "h200")


def physics_findings(view: RunView, gpu: GpuSpec | None) -> tuple[list[Finding], list[str]]:
    """The estimator-based findings, and notes on what could not be judged and why."""
    notes: list[str] = []
    arch = arch_of(view)
    if arch is None:
        notes.append("efficiency and unused memory were not judged: the run has no model "
                     "config (the HF callback records model.config; in a plain loop pass "
                     "config={'model_config': model.config.to_dict(), ...}).")
        return [], notes
    if gpu is None:
        notes.append("efficiency and unused memory were not judged: they need a catalog GPU "
                     f"(this run: {view.device_kind}, {view.device_name}); pass --gpu NAME for "
                     "a GPU run.")
        return [], notes
    if view.device_kind != "cuda":
        notes.append(f"efficiency and unused memory were not judged: the run was on "
                     f"{view.device_kind} ({view.device_name}), memory measured as process RSS; "
                     f"--gpu {gpu.name} is used for the options table only.")
        return [], notes
    t = training_of(view, arch)
    found = [f for f in (low_efficiency(view, t, gpu), memory_unused(view, t, gpu)) if f]
    return found, notes
