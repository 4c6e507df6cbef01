"""Experiment grids (seed 004): each experiment estimated, then scheduled on K GPUs.

Scheduling is longest-processing-time-first list scheduling (Graham 1969): sort by duration,
give each experiment to the GPUs that free up first. Its makespan is within 4/3 of the optimum;
dividing total hours by K (what the seeds did) is only a lower bound.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from gpuhours.errors import InputError
from gpuhours.estimate.estimator import TrainingEstimate, training_amount
from gpuhours.plan.phases import (
    Context,
    check_fits,
    estimate_phase,
    merged,
    phase_result,
    training_basis,
    training_setup,
)
from gpuhours.plan.results import GridRow, GridSchedule, PhaseResult
from gpuhours.plan.schema import Experiment, GridPhase, TrainingSettings
from gpuhours.setup import Hardware, Training
from gpuhours.yamlio import gc_paused


def makespan_hours(durations_hours: list[float], gpus_each: list[int], slots: int) -> float:
    """LPT list schedule of jobs (duration, GPUs needed) on `slots` GPUs; hours to finish all.

    GPUs that free up at the same time are one heap entry (time, count): a job of k GPUs takes
    entries until it has k and puts back one, so the heap holds at most jobs + 1 entries and a
    job costs O(log jobs) amortised, whatever `slots` and k are."""
    jobs = sorted(zip(durations_hours, gpus_each, strict=True), reverse=True)
    free: list[tuple[float, int]] = [(0.0, slots)]  # (when, how many GPUs free up then)
    end = 0.0
    for duration, need in jobs:
        if need > slots:
            raise ValueError(f"an experiment needs {need} GPUs; the schedule has {slots}")
        start, taken = 0.0, 0
        while taken < need:
            start, count = heapq.heappop(free)  # the latest taken: the job waits for all its GPUs
            use = min(count, need - taken)
            taken += use
            if count > use:
                heapq.heappush(free, (start, count - use))
        finish = start + duration
        heapq.heappush(free, (finish, need))
        end = max(end, finish)
    return end


@dataclass(frozen=True)
class _Setup:
    """One distinct setup of a grid: its estimator inputs and per-step figures."""

    training: Training
    hardware: Hardware
    estimate: TrainingEstimate
    gpu_hours_per_step: float


def _setup(ctx: Context, phase: GridPhase, shared: GridPhase,
           exp: Experiment) -> _Setup:
    s = merged(ctx, shared, exp.overrides)
    s.setdefault("gpus", 1)
    try:
        t, hw, model_basis = training_setup(ctx, phase, s)
        if hw.num_gpus > phase.schedule_gpus:
            raise InputError(f"{ctx.path}, phase {phase.name!r}",
                             f"needs {hw.num_gpus} GPUs; schedule_gpus is "
                             f"{phase.schedule_gpus}.")
        # one optimizer step: the estimator's GPU hours are steps x step time x GPUs / 3600
        e = estimate_phase(ctx, t, hw, model_basis, steps=1)
        check_fits(ctx, phase, e)
    except InputError as err:
        raise InputError(f"{err.where}, experiment {exp.name!r}", err.message, err.hint) from None
    assert e.totals is not None
    return _Setup(t, hw, e, e.totals.gpu_hours.value / e.totals.optimizer_steps.value)


def _setup_key(overrides: TrainingSettings | None) -> Hashable:
    """Equal overrides, equal setup: the frozen model itself (hashed by its fields), or its
    JSON when a field holds a list."""
    try:
        hash(overrides)
    except TypeError:
        assert overrides is not None
        return json.dumps(overrides.model_dump(mode="json", exclude_none=True), sort_keys=True)
    return overrides


@dataclass
class _Rows:
    """A grid's experiments, estimated: a row each, and what the schedule needs."""

    rows: list[GridRow] = field(default_factory=list)
    durations: list[float] = field(default_factory=list)  # hours on the GPUs it takes
    needs: list[int] = field(default_factory=list)  # GPUs
    bottlenecks: dict[str, float] = field(default_factory=dict)  # GPU hours bound by each
    first_estimate: TrainingEstimate | None = None


def _experiment_rows(ctx: Context, phase: GridPhase) -> _Rows:
    """Every experiment's GPU hours, in time linear in their number: the estimator runs once
    per distinct setup (the phase's settings with an experiment's overrides), and an
    experiment's hours are its optimizer steps (the estimator's `training_amount`) x that
    setup's GPU hours per step."""
    out = _Rows()
    # the phase's settings without its experiments: merged() dumps each layer, and dumping the
    # whole grid once per experiment made a grid's time grow with the square of its size
    shared = phase.model_copy(update={"experiments": []})
    setups: dict[Hashable, _Setup] = {}
    with gc_paused():  # 100,000 rows: collection passes over them cost more than making them
        for exp in phase.experiments:
            if exp.eval_only_hours is not None:
                out.rows.append(GridRow(name=exp.name, priority=exp.priority,
                                        gpu_hours=exp.eval_only_hours,
                                        basis="assumed: as stated"))
                out.durations.append(exp.eval_only_hours)
                out.needs.append(1)
                continue
            key = _setup_key(exp.overrides)
            setup = setups.get(key)
            if setup is None:
                setup = setups[key] = _setup(ctx, phase, shared, exp)
            e, hw = setup.estimate, setup.hardware
            amount = training_amount(setup.training, hw, tokens=exp.tokens, steps=exp.steps)
            assert amount is not None
            steps = amount[1]
            out.first_estimate = out.first_estimate or e
            hours = steps * setup.gpu_hours_per_step
            out.rows.append(GridRow(name=exp.name, priority=exp.priority, gpu_hours=hours,
                                    basis=f"formula: {steps:,.0f} steps x "
                                          f"{e.step_time_s.value:.3g} s", steps=steps))
            out.durations.append(hours / hw.num_gpus)
            out.needs.append(hw.num_gpus)
            out.bottlenecks[e.bottleneck] = out.bottlenecks.get(e.bottleneck, 0.0) + hours
    return out


def grid_phase(ctx: Context, phase: GridPhase) -> tuple[PhaseResult, GridSchedule]:
    """Each experiment's GPU hours, and the grid's schedule on `schedule_gpus`."""
    estimated = _experiment_rows(ctx, phase)
    rows, durations, needs = estimated.rows, estimated.durations, estimated.needs
    bottlenecks, first_estimate = estimated.bottlenecks, estimated.first_estimate
    warnings: list[str] = []
    total = sum(r.gpu_hours for r in rows)
    span = makespan_hours(durations, needs, phase.schedule_gpus)
    keep = [i for i, r in enumerate(rows) if r.priority <= phase.essential_priority]
    reduced = sum(rows[i].gpu_hours for i in keep)
    reduced_span = makespan_hours([durations[i] for i in keep], [needs[i] for i in keep],
                                  phase.schedule_gpus) if keep else 0.0
    schedule = GridSchedule(
        rows=rows, schedule_gpus=phase.schedule_gpus, makespan_hours=span,
        days=span / phase.hours_per_day, hours_per_day=phase.hours_per_day,
        reduced_priority=phase.essential_priority, reduced_gpu_hours=reduced,
        reduced_makespan_hours=reduced_span, reduced_days=reduced_span / phase.hours_per_day)
    bottleneck = max(bottlenecks, key=lambda k: bottlenecks[k]) if bottlenecks else "as stated"
    formula = (f"sum of {len(rows)} experiments; makespan {span:,.1f} h on "
               f"{phase.schedule_gpus} GPU(s) (longest first), {schedule.days:,.1f} days at "
               f"{phase.hours_per_day:g} h/day")
    basis = ("formula: as stated (evaluation only)" if first_estimate is None else
             training_basis(first_estimate) + " (per experiment)")
    details: dict[str, Any] = {"experiments": len(rows), "makespan_hours": span,
                               "reduced_gpu_hours": reduced}
    if first_estimate is not None:
        details["tokens_per_s_per_gpu"] = first_estimate.tokens_per_s_per_gpu.value
    result = phase_result(ctx, phase, phase.schedule_gpus, total, bottleneck, basis, formula,
                     {"experiments": len(rows), "schedule_gpus": phase.schedule_gpus},
                     warnings, details, first_estimate)
    # a grid's wall clock is its makespan, not its GPU hours over its GPUs
    factor = result.gpu_hours_per_run / total if total else 1.0
    return result.model_copy(update={"wall_hours_per_run": span * factor}), schedule
