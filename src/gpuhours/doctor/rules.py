"""The doctor's rules over a tracked run's step records: each returns a Finding (or None) with
the evidence (measured numbers), the fix, and what the fix is worth over the whole planned run.

Conventions:
- per-step figures are means over the steady steps (the first step, which includes warm-up, is
  left out when there are at least MIN_STEPS_STEADY steps); means, not medians, because saves and
  evaluations are periodic and their totals are what costs;
- "saved over the planned run" = saving per step x planned steps x GPUs / 3600 GPU hours; each
  finding is against the run as measured: savings overlap and do not simply add;
- every saving says its basis: measured (the numbers of this run or of bench-data), formula
  (the estimator), or assumed (named).
No torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from gpuhours.errors import FieldError, InputError
from gpuhours.estimate.figures import Figure
from gpuhours.track.runs import StepRecord

#: fewer recorded steps than this: the doctor refuses to judge (too few to tell a rate)
MIN_STEPS = 5
#: with fewer steps than this, findings are marked low-confidence
LOW_CONFIDENCE_STEPS = 20
MIN_STEPS_STEADY = 8
#: a share of step time under which a rule stays silent (assumption: below it, the fix is not
#: worth the change; 3% of a 38-hour run is about an hour)
MIN_SHARE = 0.03
#: checkpoint and evaluation overheads are bounded to this share of wall time by the fix
#: (assumption: a common target; the interval it gives is printed, so it can be changed)
TARGET_OVERHEAD_SHARE = 0.02
#: padding below this share is left alone (assumption)
MIN_PADDING_SHARE = 0.05


class Finding(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rule: Literal["input-bound", "padding", "checkpoint", "evaluation", "memory-unused",
                  "low-efficiency"]
    title: str
    evidence: list[str]
    fix: str
    #: the setting the fix changes, machine-readable (e.g. {"num_workers": 1})
    change: dict[str, Any] = {}
    #: per optimizer step, seconds: how much the fix saves (basis and source inside)
    saved_s_per_step: Figure
    gpu_hours_saved: Figure
    usd_saved: Figure | None
    confidence: Literal["normal", "low"]


@dataclass(frozen=True)
class RunView:
    """What the rules look at: step records, the planned length, the setup and the price."""

    source: str
    steps: list[StepRecord]
    planned_steps: int
    planned_basis: str
    config: dict[str, Any] = field(default_factory=dict)
    device_kind: str = "cpu"
    device_name: str = ""
    num_gpus: int = 1
    usd_per_gpu_hour: float | None = None
    price_basis: str = ""
    status: str = "finished"

    @property
    def steady(self) -> list[StepRecord]:
        return self.steps[1:] if len(self.steps) >= MIN_STEPS_STEADY else self.steps

    @property
    def confidence(self) -> Literal["normal", "low"]:
        return "low" if len(self.steps) < LOW_CONFIDENCE_STEPS or self.status != "finished" \
            else "normal"


def check_enough(view: RunView) -> None:
    if len(view.steps) < MIN_STEPS:
        raise InputError(view.source, f"has {len(view.steps)} recorded step(s); at least "
                                      f"{MIN_STEPS} are needed to judge where the time goes.",
                         "Track the run for longer (steps are written every flush_every steps "
                         "and at the end).")


def mean_of(values: Sequence[float]) -> float:
    """The arithmetic mean; 0.0 for no values."""
    return sum(values) / len(values) if values else 0.0


def finding_worth(view: RunView, rule: Any, title: str, evidence: list[str], fix: str,
                  saved_s: float, basis: str, source: str, change: dict[str, Any] | None = None
                  ) -> Finding:
    """A finding that saves `saved_s` seconds per step, in GPU hours and dollars over the
    planned run (saved s/step x planned steps x GPUs / 3600; x the price per GPU-hour)."""
    hours = max(0.0, saved_s) * view.planned_steps * view.num_gpus / 3600
    usd = None
    if view.usd_per_gpu_hour is not None:
        usd = Figure(value=hours * view.usd_per_gpu_hour, unit="USD", basis="formula",
                     source=f"GPU hours x {view.usd_per_gpu_hour:g} USD/GPU-h ({view.price_basis})")
    return Finding(
        rule=rule, title=title, evidence=evidence, fix=fix, change=change or {},
        saved_s_per_step=Figure(value=saved_s, unit="s/step", basis=basis, source=source),  # type: ignore[arg-type]
        gpu_hours_saved=Figure(value=hours, unit="GPU h", basis=basis,  # type: ignore[arg-type]
                               source=f"saved s/step x {view.planned_steps} planned steps "
                                      f"({view.planned_basis}) x {view.num_gpus} GPU(s) / 3600"),
        usd_saved=usd, confidence=view.confidence)


# --- rules ---------------------------------------------------------------------------------------


def input_bound(view: RunView, loader_rates: list[dict[str, Any]] | None = None,
                cpu_cores: int | None = None) -> Finding | None:
    """The step waits for its batch. With num_workers = 0 the measured wait is the whole time
    to load a batch (L); with n workers loading in parallel with the step, a step takes
    max(rest, L / n) (rest = the step without the wait), so the saving is
    wait - max(0, L/n - rest). n: the fewest workers that hide the load, capped by the CPU cores
    left beside the training threads. With bench-data rates, L/n is replaced by the measured
    micro_batch / samples_per_s at that worker count."""
    steady = view.steady
    wait = mean_of([s.data_wait_s for s in steady])
    wall = mean_of([s.wall_s for s in steady])
    if wall <= 0 or wait / wall < MIN_SHARE:
        return None
    rest = wall - wait
    workers_now = int(view.config.get("num_workers") or 0)
    evidence = [f"waiting for the next batch: {wait:.3f} s of a {wall:.3f} s step "
                f"({wait / wall:.0%}), mean of {len(steady)} steps (measured)",
                f"the rest of the step: {rest:.3f} s (measured); num_workers={workers_now}"]
    if loader_rates:
        micro_batch = int(view.config.get("micro_batch") or 0)
        if micro_batch <= 0:
            raise FieldError("bench_data", "the run's config has no micro_batch, which is "
                                             "needed to turn samples/s into a batch time.")
        best = min(loader_rates, key=lambda r: (max(0.0, micro_batch / r["samples_per_s"] - rest),
                                                r["num_workers"]))
        batch_s = micro_batch / best["samples_per_s"]
        residual = max(0.0, batch_s - rest)
        saved = wait - residual
        evidence.append(f"bench-data: num_workers={best['num_workers']} delivers "
                        f"{best['samples_per_s']:.1f} samples/s = {batch_s:.3f} s per batch "
                        f"(measured)")
        fix = (f"num_workers={best['num_workers']} (measured by bench-data), with the data "
               f"pre-tokenised and on a local disk if it is not already")
        return finding_worth(view, "input-bound", "The step waits for data", evidence, fix, saved,
                      "formula", "saved = this run's measured wait - (batch time at bench-data's "
                      "measured loader rate - the step's measured rest)",
                      {"num_workers": int(best["num_workers"])})
    if workers_now > 0:
        saved = wait
        fix = ("pre-tokenise the dataset once (datasets.map(..., num_proc) and save_to_disk), "
               "keep it on a local disk, and measure the loader with `gpuhours bench-data` to "
               "choose num_workers")
        return finding_worth(view, "input-bound", "The step waits for data", evidence, fix, saved,
                      "assumed", "assumed: after the fix the loader keeps up (wait -> 0); "
                                 "run bench-data for a measured figure")
    cores = cpu_cores or int(view.config.get("cpu_cores") or 0) or 2
    threads = int(view.config.get("threads") or 1) if view.device_kind == "cpu" else 1
    spare = max(1, cores - threads)
    load = wait  # with num_workers=0 the wait is the whole load time of a batch
    n = max(1, min(spare, math.ceil(load / rest) if rest > 0 else spare))
    residual = max(0.0, load / n - rest)
    saved = wait - residual
    evidence.append(f"with num_workers=0 the wait is the whole load time of a batch; "
                    f"{cores} CPU cores, {threads} used by the training step")
    fix = (f"load batches in parallel with the step: DataLoader(num_workers={n}, "
           f"persistent_workers=True, prefetch_factor=2); better still, pre-tokenise once")
    # a formula over measured inputs: how n workers overlap the step is a model, not measured
    return finding_worth(view, "input-bound", "The step waits for data", evidence, fix, saved,
                  "formula", f"measured wait and rest of step; step after = max(rest, load/"
                             f"{n}) with {n} worker(s) (the overlap is the model)",
                  {"num_workers": n})


def padding(view: RunView) -> Finding | None:
    """Padding computed as if it were data. Packing sequences (or bucketing by length) computes
    only the real tokens: the same data takes (1 - p) of the steps at the same shape, p = the
    measured padding share. Saved per step of the current run: p x (compute + optimizer + save +
    evaluation), those scale with the number of steps; the data wait is per example and is
    assumed unchanged. Compute per step at a fixed shape is taken as fixed (the padded positions
    cost the same as real ones in dense attention and matmuls)."""
    steady = [s for s in view.steady if s.tokens_computed]
    if not steady:
        return None
    real = sum(s.tokens_real or 0 for s in steady)
    computed = sum(s.tokens_computed or 0 for s in steady)
    p = 1 - real / computed
    if p < MIN_PADDING_SHARE:
        return None
    per_step = mean_of([s.compute_s + s.optimizer_s + s.save_s + s.eval_s for s in view.steady])
    saved = p * per_step
    seq = view.config.get("seq_len")
    evidence = [f"{p:.0%} of the computed token positions are padding: {real:,} real of "
                f"{computed:,} over {len(steady)} steps (measured from attention masks)",
                f"compute + optimizer + save + eval per step: {per_step:.3f} s (measured)"]
    fix = (f"pack the tokenised examples into full sequences{f' of {seq} tokens' if seq else ''} "
           "(or bucket by length and pad to the batch's longest): the same data in "
           f"{1 - p:.0%} of the steps")
    # a formula over measured inputs: that the steps scale with the real tokens is the model
    return finding_worth(view, "padding", "Padding is computed as if it were data", evidence, fix,
                  saved, "formula", "measured padding share x measured per-step work "
                                    "(steps scale with real tokens after packing)",
                  {"packing": True})


def _periodic(view: RunView, attr: str, rule: Literal["checkpoint", "evaluation"],
              title: str) -> Finding | None:
    steady = view.steady
    events = [getattr(s, attr) for s in view.steps if getattr(s, attr) > 0]
    total = sum(getattr(s, attr) for s in steady)
    wall_total = sum(s.wall_s for s in steady)
    if not events or wall_total <= 0 or total / wall_total < MIN_SHARE:
        return None
    mean_event = mean_of(events)
    base_step = (wall_total - total) / len(steady)
    every_now = len(view.steps) / len(events)
    count_now = math.floor(view.planned_steps / every_now)
    every_new = max(math.ceil(every_now) + 1,
                    math.ceil(mean_event / (TARGET_OVERHEAD_SHARE * base_step)))
    count_new = math.floor(view.planned_steps / every_new)
    saved_total = (count_now - count_new) * mean_event
    saved = saved_total / view.planned_steps
    evidence = [f"{len(events)} {rule}s in {len(view.steps)} steps (one every {every_now:.1f} "
                f"steps), {mean_event:.3f} s each: {total / wall_total:.0%} of wall time "
                f"(measured)"]
    if rule == "checkpoint":
        written = [s.save_bytes for s in view.steps if s.save_s > 0 and s.save_bytes]
        if written:
            mb_s = mean_of(written) / mean_event / 1e6
            evidence.append(f"{mean_of(written) / 1e6:,.1f} MB written per save, {mb_s:,.0f} "
                            f"MB/s (measured)")
        fix = (f"save every {every_new} steps instead of every {every_now:.0f} (save_steps="
               f"{every_new}): at most {TARGET_OVERHEAD_SHARE:.0%} of the time goes to saving; "
               f"a failure then loses at most {every_new} steps "
               f"({every_new * base_step / 60:.1f} min)")
    else:
        fix = (f"evaluate every {every_new} steps instead of every {every_now:.0f} (eval_steps="
               f"{every_new}), or on a fixed subset of the evaluation set: at most "
               f"{TARGET_OVERHEAD_SHARE:.0%} of the time")
    return finding_worth(view, rule, title, evidence, fix, saved, "formula",
                  f"({count_now} - {count_new} events over the planned run) x measured "
                  f"{mean_event:.3f} s each / planned steps",
                  {"save_steps" if rule == "checkpoint" else "eval_steps": every_new})


def checkpoint(view: RunView) -> Finding | None:
    """Checkpoint saves: a longer interval bounds their share of wall time to
    TARGET_OVERHEAD_SHARE. Saving = (saves now - saves after) x the measured time of one save."""
    return _periodic(view, "save_s", "checkpoint", "Checkpoints are saved too often")


def evaluation(view: RunView) -> Finding | None:
    """Evaluation inside training, as `checkpoint`."""
    return _periodic(view, "eval_s", "evaluation", "Evaluation takes a large share")
