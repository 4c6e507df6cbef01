"""A benchmark of `gpuhours bench --per-module`'s timer on a lopsided model: do its parts add up
to the step as measured without hooks, and does the heavy module come out heavy?

    python scripts/bench_module_times.py [--steps 5] [--threads 1]

A frozen encoder fed by the batch, a trainable trunk of four 512-wide linears and a 512 -> 1
head (the trunk does ~2,000x the head's FLOPs). Prints each module's forward and backward time
(bench/runner.py time_each_module), the ratio of their sum to the median plain step, and the
trunk's time over the head's. These are wall-clock figures of this machine, so they live here,
not in the unit tests (tests/test_module_time.py checks the timer's structure).
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--threads", type=int)
    args = p.parse_args()

    import torch
    from torch import nn

    from gpuhours.bench.device import detect
    from gpuhours.bench.runner import Trainer, make_optimizer, time_each_module

    if args.threads:
        torch.set_num_threads(args.threads)

    class Lopsided(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.Linear(64, 512)
            self.encoder.requires_grad_(False)
            self.trunk = nn.Sequential(*(nn.Linear(512, 512) for _ in range(4)))
            self.head = nn.Linear(512, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(torch.relu(self.trunk(self.encoder(x))))

    torch.manual_seed(0)
    model = Lopsided()
    backend = detect("cpu")
    trainable = [q for q in model.parameters() if q.requires_grad]
    trainer = Trainer(model, make_optimizer(trainable, "adamw", "foreach", 1e-4),
                      lambda: torch.randn(64, 64), lambda m, b: m(b).mean(), backend, "fp32", 1)
    for _ in range(2):
        trainer.step()
    plain = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        trainer.step()
        plain.append(time.perf_counter() - t0)
    times = time_each_module(trainer, backend, steps=args.steps)
    for r in times.rows:
        fwd = "-" if r.forward_s is None else f"{r.forward_s * 1e3:.3f} ms"
        bwd = "-" if r.backward_s is None else f"{r.backward_s * 1e3:.3f} ms"
        print(f"{r.component:26} total {r.total_s * 1e3:8.3f} ms  (forward {fwd}, backward "
              f"{bwd})  share {r.share:6.1%}")
    by = {r.component: r for r in times.rows}
    print(f"parts / plain step (median): {times.total_s / statistics.median(plain):.2f} "
          "(1 = the hooks cost nothing)")
    print(f"trunk / head: {by['trunk'].total_s / by['head'].total_s:.1f}x "
          "(~2,000x the FLOPs; small matmuls run far below that ratio)")


if __name__ == "__main__":
    main()
