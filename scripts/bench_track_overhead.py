"""What gpuhours.track adds to a training step: the same loop with and without the tracker.

The loop is a real (tiny) CPU training step, whose time is the denominator; the tracker's own
work per step (perf_counter calls, token counting from the attention mask, getrusage, a list
append, and every 10 s (or 1000 steps) one SQLite transaction) is also timed directly, over many
steps of an empty loop, so that the share does not hide in the step's noise. Prints the share.

    python scripts/bench_track_overhead.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

from gpuhours.track import track_run


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                                torch.nn.Linear(1024, 256))
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(64, 256)
    batch = {"input_ids": torch.zeros(64, 256, dtype=torch.long),
             "attention_mask": torch.ones(64, 256, dtype=torch.long)}
    loader = [batch] * 200

    def step() -> None:
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()

    for _ in range(20):
        step()
    plain = []
    for _ in range(200):
        t = time.perf_counter()
        step()
        plain.append(time.perf_counter() - t)
    step_s = statistics.median(plain)

    ledger = Path(tempfile.mkdtemp()) / "ledger.sqlite"
    n = 5000
    with track_run(project="bench", phase="overhead", ledger=ledger) as run:
        t0 = time.perf_counter()
        for _b in run.batches([batch] * n):
            with run.compute():
                pass
            with run.optimizer():
                pass
        per_step = (time.perf_counter() - t0) / n
    tracked = []
    with track_run(project="bench", phase="tracked", ledger=ledger) as run:
        for _b in run.batches(loader):
            t = time.perf_counter()
            with run.compute():
                loss = model(x).pow(2).mean()
                loss.backward()
            with run.optimizer():
                opt.step()
                opt.zero_grad()
            tracked.append(time.perf_counter() - t)
    print(f"plain step: median {step_s * 1e3:.2f} ms (p10-p90 "
          f"{sorted(plain)[20] * 1e3:.2f}-{sorted(plain)[180] * 1e3:.2f} ms), measured")
    print(f"tracker's own cost: {per_step * 1e6:.1f} us per step (mean over {n} empty steps, "
          f"flushes to SQLite every 10 s included), measured")
    print(f"overhead: {per_step / step_s:.3%} of this {step_s * 1e3:.1f} ms step; "
          f"tracked step median {statistics.median(tracked) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
