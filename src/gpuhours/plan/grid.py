"""Experiment grids (seed 004): each experiment estimated, then scheduled on K GPUs.

Scheduling is longest-processing-time-first list scheduling (Graham 1969): sort by duration,
give each experiment to the GPUs that free up first. Its makespan is within 4/3 of the optimum;
dividing total hours by K (what the seeds did) is only a lower bound.
"""

from __future__ import annotations

import heapq
from typing import Any

from gpuhours.errors import InputError
from gpuhours.plan.phases import (
    Context,
    _check_fits,
    _estimate,
    _result,
    _training_basis,
    merged,
    training_setup,
)
from gpuhours.plan.results import GridRow, GridSchedule, PhaseResult
from gpuhours.plan.schema import GridPhase


def makespan_hours(durations_hours: list[float], gpus_each: list[int], slots: int) -> float:
    """LPT list schedule of jobs (duration, GPUs needed) on `slots` GPUs; hours to finish all."""
    jobs = sorted(zip(durations_hours, gpus_each, strict=True), reverse=True)
    free = [0.0] * slots  # when each GPU frees up (a min-heap)
    heapq.heapify(free)
    end = 0.0
    for duration, need in jobs:
        if need > slots:
            raise ValueError(f"an experiment needs {need} GPUs; the schedule has {slots}")
        taken = [heapq.heappop(free) for _ in range(need)]
        start = max(taken)  # a multi-GPU job waits until all its GPUs are free
        finish = start + duration
        for _ in range(need):
            heapq.heappush(free, finish)
        end = max(end, finish)
    return end


def grid_phase(ctx: Context, phase: GridPhase) -> tuple[PhaseResult, GridSchedule]:
    rows: list[GridRow] = []
    durations: list[float] = []
    needs: list[int] = []
    warnings: list[str] = []
    bottlenecks: dict[str, float] = {}
    first_estimate = None
    for exp in phase.experiments:
        if exp.eval_only_hours is not None:
            rows.append(GridRow(name=exp.name, priority=exp.priority,
                                gpu_hours=exp.eval_only_hours, basis="assumed: as stated"))
            durations.append(exp.eval_only_hours)
            needs.append(1)
            continue
        s = merged(ctx, phase, exp.overrides)
        s.setdefault("gpus", 1)
        t, hw, model_basis = training_setup(ctx, phase, s)
        if hw.num_gpus > phase.schedule_gpus:
            raise InputError(f"{ctx.path}, phase {phase.name!r}, experiment {exp.name!r}",
                             f"needs {hw.num_gpus} GPUs; schedule_gpus is {phase.schedule_gpus}.")
        e = _estimate(ctx, t, hw, model_basis, steps=exp.steps, tokens=exp.tokens)
        _check_fits(ctx, phase, e)
        assert e.totals is not None
        first_estimate = first_estimate or e
        hours = e.totals.gpu_hours.value
        rows.append(GridRow(name=exp.name, priority=exp.priority, gpu_hours=hours,
                            basis=f"formula: {e.totals.optimizer_steps.value:,.0f} steps x "
                                  f"{e.step_time_s.value:.3g} s"))
        durations.append(hours / hw.num_gpus)
        needs.append(hw.num_gpus)
        bottlenecks[e.bottleneck] = bottlenecks.get(e.bottleneck, 0.0) + hours
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
             _training_basis(first_estimate) + " (per experiment)")
    details: dict[str, Any] = {"experiments": len(rows), "makespan_hours": span,
                               "reduced_gpu_hours": reduced}
    if first_estimate is not None:
        details["tokens_per_s_per_gpu"] = first_estimate.tokens_per_s_per_gpu.value
    result = _result(ctx, phase, phase.schedule_gpus, total, bottleneck, basis, formula,
                     {"experiments": len(rows), "schedule_gpus": phase.schedule_gpus},
                     warnings, details, first_estimate)
    # a grid's wall clock is its makespan, not its GPU hours over its GPUs
    factor = result.gpu_hours_per_run / total if total else 1.0
    return result.model_copy(update={"wall_hours_per_run": span * factor}), schedule
