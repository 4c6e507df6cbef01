"""Experiment grids in time linear in their size (issue 12): no timing here (see
scripts/bench_grid.py), but the work that grew with the square of the size, or with the number of
GPUs, is counted, and the figures are held to the per-experiment estimates they replace.
"""

from __future__ import annotations

import heapq
import math
import random
from pathlib import Path

import pytest
import yaml

from gpuhours.estimate import estimator
from gpuhours.plan import phases as plan_phases
from gpuhours.plan.budget import evaluate
from gpuhours.plan.grid import makespan_hours
from gpuhours.plan.load import parse_plan
from gpuhours.plan.phases import Context, merged, training_setup
from gpuhours.plan.schema import GridPhase

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "qwen2-0.5b-experiments.yaml"
RANKS = (4, 8, 16)


def grid_text(n: int) -> str:
    plan = yaml.safe_load(EXAMPLE.read_text())
    grid = plan["phases"][0]
    grid["schedule_gpus"] = 4
    grid["experiments"] = [
        {"name": f"eval-{i}", "eval_only_hours": 0.17} if i % 10 == 0 else
        {"name": f"run-{i}", "steps": 1_000 + 7 * i, "priority": 1 + i % 3,
         "overrides": {"lora_rank": RANKS[i % 3]}}
        for i in range(n)]
    return yaml.safe_dump(plan, sort_keys=False)


def test_the_estimator_runs_once_per_distinct_setup_not_once_per_experiment(monkeypatch):
    calls = []
    real = plan_phases.estimate_training

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(plan_phases, "estimate_training", counting)
    b = evaluate(parse_plan(grid_text(600), "grid.yaml"))
    assert len(b.grids["experiments"].rows) == 600
    assert len(calls) == len(RANKS)


def test_an_experiment_costs_what_its_own_estimate_says():
    loaded = parse_plan(grid_text(40), "grid.yaml")
    b = evaluate(loaded)
    phase = loaded.plan.phases[0]
    assert isinstance(phase, GridPhase)
    from gpuhours import catalog

    ctx = Context(plan=loaded.plan, gpu=catalog.gpu(loaded.plan.hardware.gpu), lines={})
    rows = {r.name: r for r in b.grids["experiments"].rows}
    for exp in phase.experiments:
        if exp.eval_only_hours is not None:
            assert rows[exp.name].gpu_hours == exp.eval_only_hours
            continue
        s = merged(ctx, phase, exp.overrides)
        s.setdefault("gpus", 1)
        t, hw, basis = training_setup(ctx, phase, s)
        e = estimator.estimate_training(t, hw, basis, steps=exp.steps)
        assert e.totals is not None
        assert rows[exp.name].gpu_hours == pytest.approx(e.totals.gpu_hours.value, rel=1e-12)
        assert rows[exp.name].basis == (f"formula: {e.totals.optimizer_steps.value:,.0f} steps x "
                                        f"{e.step_time_s.value:.3g} s")


def test_merged_settings_never_serialise_the_experiments(monkeypatch):
    """merged() dumps each layer it is given; given the grid phase itself, it dumped every
    experiment once per experiment (the square of the grid's size)."""
    dumped = []
    real = GridPhase.model_dump

    def counting(self, *args, **kwargs):
        dumped.append(len(self.experiments))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(GridPhase, "model_dump", counting)
    evaluate(parse_plan(grid_text(300), "grid.yaml"))
    # one full dump is the phase's digest; the settings are read from a copy without experiments
    assert sum(dumped) <= 300


def _makespan_per_gpu(durations: list[float], gpus: list[int], slots: int) -> float:
    """The schedule as first written: one heap entry per GPU."""
    free = [0.0] * slots
    end = 0.0
    for duration, need in sorted(zip(durations, gpus, strict=True), reverse=True):
        taken = [heapq.heappop(free) for _ in range(need)]
        finish = max(taken) + duration
        for _ in range(need):
            heapq.heappush(free, finish)
        end = max(end, finish)
    return end


def test_the_grouped_schedule_is_the_per_gpu_schedule():
    rng = random.Random(12)
    for _ in range(300):
        slots = rng.randint(1, 16)
        n = rng.randint(1, 60)
        durations = [rng.choice([1.0, 2.0, 0.5, rng.random() * 10]) for _ in range(n)]
        gpus = [rng.randint(1, slots) for _ in range(n)]
        assert makespan_hours(durations, gpus, slots) == pytest.approx(
            _makespan_per_gpu(durations, gpus, slots), rel=1e-12)


def test_the_schedule_does_not_grow_with_the_number_of_gpus():
    # one heap entry per GPU was a list of a billion floats here
    assert makespan_hours([3.0, 2.0, 1.0], [1, 1, 1], 10**9) == 3.0
    assert makespan_hours([1.0] * 1000, [10**6] * 1000, 10**6) == pytest.approx(1000.0)
    assert math.isclose(makespan_hours([2.0, 1.0, 1.0], [2, 1, 1], 2), 3.0)
