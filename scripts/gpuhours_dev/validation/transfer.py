"""Cross-device transfer (gpuhours.track.transfer) against steps measured on the other device.

    python -m gpuhours_dev.validation.transfer run      (from scripts/; a few minutes on a quiet 2-core VM)
    python -m gpuhours_dev.validation.transfer report   (prints a Markdown table)

The only two devices this machine has are its CPU with one torch thread and with two: different
devices to gpuhours (device keys `cpu-...-1t` and `-2t`, each with its own measured matmul rate
and bandwidth). `run` benchmarks the same setups of a small Qwen2.5 shape on both
into data/transfer/ledger.sqlite; `report` carries each 1-thread measurement to the 2-thread
device, for its own setup and for the other setups, and sets the result beside the 2-thread
measurement, which the transfer never sees. Nothing here is fitted.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data" / "transfer"
LEDGER = DATA / "ledger.sqlite"
# a Qwen2.5 shape small enough for a few seconds a step on one thread (the real 0.5B's 152k
# vocabulary makes its logits most of the step)
MODEL = ["--model", "qwen2.5-0.5b", "--set", "num_hidden_layers=4", "--set", "hidden_size=512",
         "--set", "intermediate_size=1536", "--set", "num_attention_heads=8",
         "--set", "num_key_value_heads=2", "--set", "vocab_size=8192", "--precision", "fp32"]
SETUPS = [["--method", "full", "--batch", "1", "--seq", "256"],
          ["--method", "full", "--batch", "4", "--seq", "256"],
          ["--method", "lora", "--batch", "4", "--seq", "256"]]


def run() -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    for threads in ("1", "2"):
        for setup in SETUPS:
            cmd = [sys.executable, "-m", "gpuhours.cli", "bench", *MODEL, *setup, "--threads",
                   threads, "--max-steps", "8", "--ledger", str(LEDGER)]
            print(" ".join(cmd[3:]), flush=True)
            subprocess.run(cmd, check=True)


def report() -> str:
    from gpuhours.setup import Hardware
    from gpuhours.track.calibration import measured_device, training_of
    from gpuhours.track.ledger import Ledger
    from gpuhours.track.transfer import transfer_step

    with Ledger.open(LEDGER, create=False) as book:
        rows = [m for m in book.measurements(status="ok") if m.kind == "bench"]
        devices = {m.device_key: measured_device(book, m.device_key) for m in rows}
    one = [m for m in rows if m.device_key.endswith("-1t")]
    two = [m for m in rows if m.device_key.endswith("-2t")]
    lines = ["| measured on 1 thread | carried to 2 threads, setup | transferred (range) | "
             "analytic | measured on 2 threads | transferred vs measured |",
             "|---|---|---:|---:|---:|---:|"]
    for src in one:
        ts = training_of(src)
        assert ts is not None and src.step_time_median_s
        for dst in two:
            td = training_of(dst)
            assert td is not None and dst.step_time_median_s
            x = transfer_step(src.step_time_median_s, ts, Hardware(gpu=devices[src.device_key]),
                              td, Hardware(gpu=devices[dst.device_key]))
            err = x.step_s / dst.step_time_median_s - 1
            lines.append(
                f"| #{src.id} {ts.method} b{ts.micro_batch}: {src.step_time_median_s:.3f} s | "
                f"#{dst.id} {td.method} b{td.micro_batch} | {x.step_s:.3f} s "
                f"({x.low_s:.3f}-{x.high_s:.3f}) | {x.analytic_step_s:.3f} s | "
                f"{dst.step_time_median_s:.3f} s | {err:+.0%} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["run"]:
        run()
    elif sys.argv[1:] == ["report"]:
        print(report())
    else:
        raise SystemExit(__doc__)
