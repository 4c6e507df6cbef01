"""Benchmark of experiment grids: does a grid plan's time grow linearly with its size?

Issue 12: a grid of 10,000 experiments took 36 s and 50,000 over 5 minutes (the time grew with
the square of the size); the target is 100,000 experiments in under 5 s. A benchmark, not a test
(no timing in the unit tests, where a loaded CI machine would make them flaky).

The plan is seed 004's (examples/qwen2-0.5b-experiments.yaml: Qwen2-0.5B, LoRA, one RTX 4090)
with its experiments replaced by N generated ones: every tenth evaluation-only, the others with
a step count of their own (no two alike, so no cache of equal inputs flatters the figure), four
LoRA ranks as overrides, priorities 1-3, scheduled on 8 GPUs.

    python scripts/bench_grid.py                 # 1k, 10k, 100k experiments
    python scripts/bench_grid.py --sizes 1000 10000 --runs 5 --no-fail

Measured, for each size, after one discarded warm-up run: min / median / max over the timed runs of
  (a) the grid: `evaluate()` of the loaded plan (estimates, rows, schedule, the budget);
      target: median < 5 s at 100,000 experiments (issue 12)
  (b) the whole plan in process: reading the YAML (load_plan) + (a); no target, shown so that
      the share of YAML parsing is visible
  (c) growth: median (a) at the largest size over the size before, divided by the size ratio;
      1.0 is linear; target: < 1.5
CPU seconds (process time) are printed beside wall seconds: on a busy machine wall time counts
other processes' work. Exit code 1 when a target is missed, unless --no-fail.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from gpuhours.plan.budget import evaluate
from gpuhours.plan.load import load_plan

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "qwen2-0.5b-experiments.yaml"
TARGET_S = 5.0
TARGET_SIZE = 100_000
MAX_GROWTH = 1.5
RANKS = (4, 8, 16, 32)


def grid_plan(n: int) -> str:
    """Seed 004's plan with `n` generated experiments (flow style, one per line)."""
    plan = yaml.safe_load(EXAMPLE.read_text())
    grid = next(p for p in plan["phases"] if p["kind"] == "grid")
    grid["schedule_gpus"] = 8
    grid["experiments"] = []
    head = yaml.safe_dump(plan, sort_keys=False).rstrip("\n")
    assert head.endswith("experiments: []")
    lines = [head.removesuffix(" []")]
    for i in range(n):
        priority = 1 + i % 3
        if i % 10 == 0:
            lines.append(f"  - {{name: eval-{i}, eval_only_hours: 0.17, priority: {priority}}}")
        else:
            lines.append(f"  - {{name: run-{i}, steps: {1_000 + i}, priority: {priority}, "
                         f"overrides: {{lora_rank: {RANKS[i % len(RANKS)]}}}}}")
    return "\n".join(lines) + "\n"


def timed(func: Callable[[], object], runs: int) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds) of `runs` calls after one discarded warm-up call."""
    func()
    wall, cpu = [], []
    for _ in range(runs):
        w, c = time.perf_counter(), time.process_time()
        func()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return wall, cpu


def spread(xs: list[float]) -> str:
    return f"{min(xs):7.2f} {statistics.median(xs):7.2f} {max(xs):7.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--runs", type=int, default=3, help="timed runs per size")
    parser.add_argument("--no-fail", action="store_true")
    args = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.platform()}, "
          f"{os.cpu_count()} CPU(s), {platform.processor() or platform.machine()}")
    if hasattr(os, "getloadavg"):
        print("load average at start: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"{'experiments':>11} {'step':<22} {'wall s: min  median     max':>27} "
          f"{'CPU s: min  median     max':>27}")
    medians: dict[int, float] = {}
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            path = Path(tmp) / f"grid-{n}.yaml"
            path.write_text(grid_plan(n))
            loaded = load_plan(path)
            rows = len(evaluate(loaded).grids["experiments"].rows)
            assert rows == n, (rows, n)
            wall, cpu = timed(lambda loaded=loaded: evaluate(loaded), args.runs)  # type: ignore[misc]
            medians[n] = statistics.median(wall)
            verdict = ""
            if n == TARGET_SIZE:
                ok = medians[n] < TARGET_S
                failed |= not ok
                verdict = f"  target < {TARGET_S:g} s: {'met' if ok else 'MISSED'}"
            print(f"{n:>11,} {'(a) grid: evaluate':<22} {spread(wall):>27} {spread(cpu):>27}"
                  f"{verdict}")
            wall, cpu = timed(lambda path=path: evaluate(load_plan(path)),  # type: ignore[misc]
                              max(1, args.runs - 1))
            print(f"{n:>11,} {'(b) load + evaluate':<22} {spread(wall):>27} {spread(cpu):>27}"
                  f"  ({path.stat().st_size / 1e6:.1f} MB of YAML)")
    sizes = sorted(medians)
    if len(sizes) >= 2:
        small, large = sizes[-2], sizes[-1]
        growth = (medians[large] / medians[small]) / (large / small)
        ok = growth < MAX_GROWTH
        failed |= not ok
        print(f"(c) growth {small:,} -> {large:,}: time x{medians[large] / medians[small]:.1f} for "
              f"size x{large / small:g}, {growth:.2f} of linear; target < {MAX_GROWTH:g}: "
              f"{'met' if ok else 'MISSED'}")
    return 1 if failed and not args.no_fail else 0


if __name__ == "__main__":
    sys.exit(main())
