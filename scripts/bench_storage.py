"""Benchmark of `gpuhours storage report` on a tree of 100,000 files (issue 7: under 5 s).

    python scripts/bench_storage.py                 # 100,000 files, 1 warm-up + 5 timed runs
    python scripts/bench_storage.py --files 20000 --runs 3 --json

The tree is built in a temporary directory (removed afterwards) and mixes the kinds the report
sorts into: 4 runs of Hugging Face checkpoints (aged an hour, so the retention policy has
something to decide), an image cache in 256 sub-directories, dataset shards, wandb logs and
other files; every file holds 1-64 bytes (the walk's cost is per entry, not per byte).

Measured, after one warm-up run (so the directory entries are in the page cache: the timings
are warm-cache; a cold first walk on a network filesystem is slower and is not measured here):
  (a) `gpuhours storage report DIR --metric eval_loss --json` end to end as a subprocess,
      interpreter start and imports included; target: max < 5 s;
  (b) the library call `storage_report` in this process (scan + retention plan), for where the
      time goes.
Exit code 1 when the target is missed, unless --no-fail.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 5.0


def gpuhours_command() -> list[str]:
    beside = Path(sys.executable).with_name("gpuhours")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("gpuhours")
    return [found] if found else [sys.executable, "-c", "from gpuhours.cli import main; main()"]


def build_tree(root: Path, n_files: int) -> dict[str, int]:
    """Write `n_files` files under `root`; returns the count per kind as built."""
    counts = {"checkpoints": 0, "caches": 0, "datasets": 0, "logs": 0, "other": 0}
    old = time.time() - 3600
    # checkpoints: 4 runs x 50 checkpoints x 10 files (trainer_state.json included)
    n_ckpt = min(2000, n_files // 50)
    per = 10
    runs, per_run = 4, max(n_ckpt // (4 * per), 1)
    for r in range(runs):
        for c in range(per_run):
            step = 100 * (c + 1)
            d = root / "outputs" / f"run{r}" / f"checkpoint-{step}"
            d.mkdir(parents=True)
            state = {"global_step": step, "log_history": [
                {"step": step, "loss": 1.0}, {"step": step, "eval_loss": 2.0 - c / per_run}]}
            (d / "trainer_state.json").write_text(json.dumps(state))
            for i in range(per - 1):
                (d / f"shard-{i}.safetensors").write_bytes(b"w" * (1 + (step + i) % 64))
            counts["checkpoints"] += per
            for p in [d, *d.iterdir()]:
                os.utime(p, (old, old))
    rest = n_files - counts["checkpoints"]
    plan = [("caches", 0.60), ("datasets", 0.30), ("logs", 0.06)]
    quota = {k: int(rest * share) for k, share in plan}
    quota["other"] = rest - sum(quota.values())
    for i in range(quota["caches"]):
        d = root / "image_cache" / f"{i % 256:02x}"
        if i < 256:
            d.mkdir(parents=True)
        (d / f"img-{i}.png").write_bytes(b"i" * (1 + i % 64))
    for i in range(quota["datasets"]):
        d = root / "data" / f"part-{i // 1000:03d}"
        if i % 1000 == 0:
            d.mkdir(parents=True)
        (d / f"shard-{i}.bin").write_bytes(b"t" * (1 + i % 64))
    for i in range(quota["logs"]):
        d = root / "wandb" / f"run-{i // 500}"
        if i % 500 == 0:
            d.mkdir(parents=True)
        (d / f"events-{i}.txt").write_bytes(b"l" * (1 + i % 64))
    for i in range(quota["other"]):
        d = root / "misc" / f"{i // 1000}"
        if i % 1000 == 0:
            d.mkdir(parents=True)
        (d / f"notes-{i}.md").write_bytes(b"o" * (1 + i % 64))
    for k in quota:
        counts[k] += quota[k]
    return counts


def stats(samples: list[float]) -> dict[str, float]:
    return {"runs": len(samples), "min_s": min(samples), "median_s": statistics.median(samples),
            "max_s": max(samples)}


def environment(root: Path) -> dict[str, str]:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    fs = ""
    with contextlib.suppress(OSError):
        fs = subprocess.run(["stat", "-f", "-c", "%T", str(root)], capture_output=True, text=True,
                            check=False).stdout.strip()
    return {"cpu": cpu, "cores": str(os.cpu_count()), "python": platform.python_version(),
            "platform": platform.platform(), "filesystem": fs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-fail", action="store_true")
    args = ap.parse_args()

    from gpuhours.storage.report import storage_report
    from gpuhours.storage.retention import RetentionPolicy

    with tempfile.TemporaryDirectory(prefix="gpuhours-bench-storage-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        built = build_tree(root, args.files)
        build_s = time.perf_counter() - t0
        cmd = [*gpuhours_command(), "storage", "report", str(root), "--metric", "eval_loss",
               "--json"]
        cli: list[float] = []
        report = None
        for i in range(args.runs + 1):
            t = time.perf_counter()
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            if i:  # the first run is the warm-up
                cli.append(time.perf_counter() - t)
            report = json.loads(out.stdout)
        policy = RetentionPolicy(keep_last=3, metric="eval_loss")
        lib: list[float] = []
        for i in range(args.runs + 1):
            t = time.perf_counter()
            storage_report(str(root), policy)
            if i:
                lib.append(time.perf_counter() - t)
        assert report is not None
        result = {
            "files_built": built, "files_reported": report["total_files"],
            "kinds_reported": {k["kind"]: k["files"] for k in report["kinds"]},
            "checkpoints_to_remove": len([d for d in report["retention"]["decisions"]
                                          if d["action"] == "remove"]),
            "build_s": build_s, "cli": stats(cli), "library": stats(lib),
            "target": f"cli max < {TARGET_S} s", "met": max(cli) < TARGET_S,
            "environment": environment(root), "cache": "warm (after one warm-up run)",
        }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        env = result["environment"]
        print(f"storage report on {result['files_reported']:,} files "
              f"({', '.join(f'{k} {v:,}' for k, v in result['kinds_reported'].items() if v)})")
        print(f"  machine: {env['cpu']}, {env['cores']} cores, {env['filesystem']}, "
              f"Python {env['python']}; {result['cache']}")
        for label, s in (("CLI end to end", result["cli"]), ("library storage_report", result["library"])):
            print(f"  {label:<24} n={s['runs']}  min {s['min_s']:.3f}  median {s['median_s']:.3f}  "
                  f"max {s['max_s']:.3f} s")
        print(f"  target {result['target']}: {'met' if result['met'] else 'MISSED'}")
    return 0 if result["met"] or args.no_fail else 1


if __name__ == "__main__":
    sys.exit(main())
