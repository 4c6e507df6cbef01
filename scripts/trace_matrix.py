"""Regenerate docs/trace_accuracy.md: the analytic estimator against the trace (issue 5).

    python scripts/trace_matrix.py            # the matrix and the published measurements
    python scripts/trace_matrix.py --speed    # also: time and resident memory of big traces

Traces run on fake tensors on the CPU; the whole matrix takes a few minutes on a 2-core VM.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuhours_dev.trace_matrix import (
    matrix_setups,
    references,
    render_markdown,
    summary,
    trace_reference,
    trace_row,
)

DOC = Path(__file__).resolve().parent.parent / "docs" / "trace_accuracy.md"

SPEED_CASES = [
    ["--model", "llama-3.1-8b", "--batch", "8", "--seq", "4096", "--precision", "bf16"],
    ["--model", "llama-3.1-8b", "--method", "lora", "--batch", "4", "--seq", "2048",
     "--precision", "bf16", "--checkpointing"],
    ["--model", "llama-2-70b", "--batch", "1", "--seq", "4096", "--precision", "bf16"],
]


def speed() -> None:
    """Each case in a fresh process (its own resident memory): wall time and max RSS."""
    code = ("import resource, sys, time; t = time.perf_counter(); "
            "from typer.testing import CliRunner; from gpuhours.cli import app; "
            "r = CliRunner().invoke(app, ['trace', '--json'] + sys.argv[1:]); "
            "assert r.exit_code == 0, r.output; "
            "print(f'{time.perf_counter() - t:.1f} s, max RSS '"
            "f'{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB')")
    for case in SPEED_CASES:
        out = subprocess.run([sys.executable, "-c", code, *case], capture_output=True,
                             text=True, check=True)
        print(f"gpuhours trace {' '.join(case)}: {out.stdout.strip()} (2 steps, imports included)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--speed", action="store_true", help="also time big traces")
    args = parser.parse_args()
    start = time.perf_counter()
    rows = []
    for s in matrix_setups():
        t = time.perf_counter()
        row = trace_row(s)
        rows.append(row)
        print(f"{row.id}: traced {row.traced_bytes / 2**30:.3f} GiB, analytic "
              f"{row.analytic_bytes / 2**30:.3f} GiB ({row.error:+.1%}), FLOPs ratio "
              f"{row.flops_ratio:.3f} [{time.perf_counter() - t:.1f} s]", flush=True)
    refs = [trace_reference(r) for r in references()]
    run_s = time.perf_counter() - start
    import torch
    import transformers

    env = (f"torch {torch.__version__}, transformers {transformers.__version__}, "
           f"Python {platform.python_version()}, {os.cpu_count()} CPUs")
    text = render_markdown(rows, refs, run_s, env)
    fd, tmp = tempfile.mkstemp(dir=DOC.parent, prefix=".trace_accuracy.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, DOC)  # atomic
    ok, n = summary(rows)
    print(f"{ok}/{n} rows within 5%; {len(refs)} published measurements; {run_s:.0f} s")
    print(f"wrote {DOC}")
    if args.speed:
        speed()


if __name__ == "__main__":
    main()
