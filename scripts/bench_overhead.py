"""A benchmark of the benchmark: what `gpuhours bench`'s instrumentation adds to a step.

    python scripts/bench_overhead.py --threads 1 [--rounds 12] [--block 4]

The same model, optimizer and batches run two ways, in alternating blocks so that drift of the
machine hits both alike: a plain loop (forward, loss, backward, step, zero_grad, timed as a
whole) and gpuhours' timed step (Trainer.step with the device's phase timer, the batch moved to
the device, the stop rule evaluated after each step: everything `measure` does per timed step).
The FLOP count, the memory tracker and the profiler run outside the timed steps and are not part
of this. Prints both medians, their ratio, and an A/A comparison (plain vs plain) that shows
how small a difference this machine can resolve.
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--threads", type=int)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--block", type=int, default=4)
    args = p.parse_args()

    import torch

    from gpuhours.bench.config import BenchSetup, StopRule
    from gpuhours.bench.device import detect
    from gpuhours.bench.model import build
    from gpuhours.bench.runner import Trainer, make_optimizer
    from gpuhours.bench.stats import stop_reason

    if args.threads:
        torch.set_num_threads(args.threads)
    setup = BenchSetup(model="qwen2-0.5b", precision="fp32", micro_batch=4, seq_len=256,
                       config_overrides={
        "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 672, "vocab_size": 16384})
    backend = detect("auto")
    built = build(setup, backend.torch_device)
    model = built.model
    opt = make_optimizer(list(model.parameters()), "adamw", "foreach", 1e-4)
    trainer = Trainer(model, opt, built.make_batch, lambda m, b: m(**b).loss, backend, "fp32", 1)
    rule = StopRule(max_steps=10_000, max_time_s=1e9)

    def plain() -> float:
        backend.synchronize()
        t0 = time.perf_counter()
        batch = built.make_batch()
        loss = model(**{k: v.to(backend.torch_device) for k, v in batch.items()}).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        backend.synchronize()
        return time.perf_counter() - t0

    instrumented_times: list[float] = []

    def instrumented() -> float:
        t0 = time.perf_counter()
        timer = backend.timer()
        trainer.step(timer)
        step_s, _ = timer.finish()
        instrumented_times.append(step_s)
        stop_reason(instrumented_times, 0.0, rule)
        backend.synchronize()
        return time.perf_counter() - t0  # wall time, so the timer's own cost is included

    for _ in range(3):
        plain()
    a, b, a2 = [], [], []
    for _ in range(args.rounds):
        a += [plain() for _ in range(args.block)]
        b += [instrumented() for _ in range(args.block)]
        a2 += [plain() for _ in range(args.block)]

    def desc(xs: list[float]) -> str:
        q = statistics.quantiles(xs, n=10)
        return f"median {statistics.median(xs) * 1e3:.1f} ms (p10-p90 {q[0] * 1e3:.1f}-{q[-1] * 1e3:.1f})"

    plain_all = a + a2
    print(f"device: {backend.name}; model {setup.label()} {setup.config_overrides}")
    print(f"plain loop          {desc(plain_all)} over {len(plain_all)} steps")
    print(f"gpuhours timed step {desc(b)} over {len(b)} steps (wall time around it)")
    ratio = statistics.median(b) / statistics.median(plain_all) - 1
    aa = statistics.median(a2) / statistics.median(a) - 1
    print(f"overhead: {ratio:+.2%} of the plain step (median vs median)")
    print(f"A/A resolution: the plain loop's two halves differ by {aa:+.2%}")


if __name__ == "__main__":
    main()
