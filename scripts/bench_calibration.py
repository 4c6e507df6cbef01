"""Measured vs estimated on this CPU: small Qwen2- and Llama-shaped models, before and after
calibration, step time and peak tensor memory. Prints a Markdown table (docs/bench.md has one).

    python scripts/bench_calibration.py --threads 1 [--ledger runs.sqlite] [--quick]

Each configuration is benchmarked (gpuhours.bench.session.bench_setup) into a ledger. Then, for
each row, the analytic estimate on this CPU (its peaks from the ledger's matmul and copy probes)
is calibrated from the nearest *other* matching measurement (leave-one-out: a row never
calibrates itself), and compared with the measured median step time and peak tensor bytes.

With --repeat, every configuration is benchmarked a second time, and each second run is
predicted by the estimate calibrated from the first runs only (the same setup measured earlier):
does a calibrated estimate predict a new measurement of the same setup within its spread?
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

QWEN = {"model": "qwen2-0.5b"}      # qwen2: tied embeddings, q/k/v biases, GQA
LLAMA = {"model": "llama-3.2-3b"}   # llama: untied... shrunk below by --set overrides


def shape(base: dict, d: int, layers: int, heads: int, kv: int, vocab: int = 16384) -> dict:
    over = {"hidden_size": d, "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv, "intermediate_size": int(d * 8 / 3 // 16 * 16),
            "vocab_size": vocab, "tie_word_embeddings": base["model"] == "qwen2-0.5b"}
    if base["model"] != "qwen2-0.5b":
        over["head_dim"] = d // heads
    return {"model": base["model"], "config_overrides": over}


CONFIGS = [
    # (shape, setup) -- pairs that share method and checkpointing so each has a neighbour
    (shape(QWEN, 256, 4, 4, 2), dict(micro_batch=4, seq_len=256)),
    (shape(QWEN, 256, 4, 4, 2), dict(micro_batch=8, seq_len=256)),
    (shape(QWEN, 384, 4, 6, 2), dict(micro_batch=4, seq_len=256)),
    (shape(QWEN, 256, 8, 4, 2), dict(micro_batch=2, seq_len=512)),
    (shape(QWEN, 256, 4, 4, 2), dict(micro_batch=4, seq_len=256, method="lora")),
    (shape(QWEN, 384, 4, 6, 2), dict(micro_batch=4, seq_len=256, method="lora")),
    (shape(QWEN, 256, 4, 4, 2), dict(micro_batch=4, seq_len=256, checkpointing=True)),
    (shape(QWEN, 384, 4, 6, 2), dict(micro_batch=4, seq_len=256, checkpointing=True)),
    (shape(LLAMA, 256, 4, 4, 4), dict(micro_batch=4, seq_len=256)),
    (shape(LLAMA, 512, 4, 8, 4), dict(micro_batch=2, seq_len=256)),
    (shape(LLAMA, 256, 4, 4, 4), dict(micro_batch=4, seq_len=256, method="lora",
                                      checkpointing=True)),
    (shape(LLAMA, 384, 6, 6, 2), dict(micro_batch=2, seq_len=512, method="lora",
                                      checkpointing=True)),
]


def run(ledger_file: Path, threads: int | None, quick: bool, repeat: bool) -> None:
    import torch

    from gpuhours.bench.config import BenchSetup, StopRule
    from gpuhours.bench.device import detect
    from gpuhours.bench.environment import collect
    from gpuhours.bench.session import bench_setup
    from gpuhours.track.ledger import Ledger

    if threads:
        torch.set_num_threads(threads)
    backend = detect("cpu")
    env = collect(backend)
    rule = StopRule(warmup_steps=2, min_steps=5, max_steps=10 if quick else 30,
                    max_time_s=8 if quick else 25)
    configs = CONFIGS[:8] if quick else CONFIGS
    ids: list[int] = []
    with Ledger.open(ledger_file) as ledger:
        for run_no in (1, 2) if repeat else (1,):
            for i, (model, setup) in enumerate(configs, 1):
                s = BenchSetup.model_validate({**model, "precision": "fp32", **setup})
                print(f"[run {run_no}, {i}/{len(configs)}] {s.label()} {s.training.config_overrides}",
                      file=sys.stderr, flush=True)
                outcome = bench_setup(s, backend, rule, env, ledger=ledger)
                assert outcome.ledger_id is not None
                ids.append(outcome.ledger_id)
    report(ledger_file, backend.key, ids[len(configs)] if repeat else None)


def report(ledger_file: Path, device_key: str, second_run_from: int | None = None) -> None:
    from gpuhours.estimate.estimator import estimate_training
    from gpuhours.setup import Hardware
    from gpuhours.track.calibration import find_calibration, measured_device, training_of
    from gpuhours.track.ledger import Ledger

    with Ledger.open(ledger_file) as ledger:
        spec = measured_device(ledger, device_key)
        hw = Hardware(gpu=spec)
        rows = list(reversed(ledger.measurements(device_key=device_key, status="ok")))
        second = [m for m in rows if second_run_from is not None and m.id >= second_run_from]
        rows = [m for m in rows if m not in second]
        print(f"device: {spec.full_name}; peaks {spec.source}\n")
        print("| # | model (d, layers, heads/kv) | setup | measured step, median (p10-p90) | "
              "analytic | calibrated (from) | calibrated error | in p10-p90 | "
              "measured peak tensors | estimated | memory error |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        errors, mem_errors, inside = [], [], 0
        for m in rows:
            t = training_of(m)
            assert t is not None
            a = t.arch
            analytic = estimate_training(t, hw, "bench").step_time_s.value
            cal = find_calibration(ledger, hw, t, device_key=device_key,
                                   exclude_ids=[m.id, *(x.id for x in second)])
            timing = m.results["timing"]
            med, p10, p90 = timing["median_s"], timing["p10_s"], timing["p90_s"]
            est_mem = estimate_training(t, hw, "bench").memory.tensors_bytes.value
            mem_err = est_mem / m.peak_memory_bytes - 1 if m.peak_memory_bytes else float("nan")
            mem_errors.append(abs(mem_err))
            if cal is None:
                cal_text, err_text, in_text = "no match", "-", "-"
            else:
                calibrated = estimate_training(t, hw, "bench", **cal.estimator_kwargs())
                c = calibrated.step_time_s.value
                err = c / med - 1
                errors.append(abs(err))
                ok = p10 <= c <= p90
                inside += ok
                cal_text = f"{c:.3f} s (#{cal.ledger_id}, x{cal.efficiency_scale:.2f})"
                err_text, in_text = f"{err:+.1%}", "yes" if ok else "no"
            setup = " ".join(x for x in (t.method, t.precision, f"b{t.micro_batch}",
                                         f"s{t.seq_len}", "ckpt" if t.checkpointing else "") if x)
            print(f"| {m.id} | {m.setup['model']} ({a.hidden_size}, {a.num_layers}, "
                  f"{a.num_heads}/{a.num_kv_heads}) | {setup} | {med:.3f} s ({p10:.3f}-{p90:.3f}) "
                  f"| {analytic:.3f} s | {cal_text} | {err_text} | {in_text} | "
                  f"{m.peak_memory_bytes / 2**20:.1f} MiB | {est_mem / 2**20:.1f} MiB | "
                  f"{mem_err:+.1%} |")
        if errors:
            print(f"\ncalibrated step time: {len(errors)} rows calibrated, worst error "
                  f"{max(errors):.1%}, {sum(e <= 0.15 for e in errors)}/{len(errors)} within "
                  f"15%, {inside}/{len(errors)} inside the measured p10-p90 range")
        print(f"memory: worst error {max(mem_errors):.1%}, "
              f"{sum(e <= 0.15 for e in mem_errors)}/{len(mem_errors)} within 15%")
        if second:
            repeat_table(ledger, hw, device_key, second, [m.id for m in second])


def repeat_table(ledger: Any, hw: Any, device_key: str, second: list[Any],
                 second_ids: list[int]) -> None:
    """Second runs predicted from the first runs only."""
    from gpuhours.estimate.estimator import estimate_training
    from gpuhours.track.calibration import find_calibration, training_of

    print("\nSecond runs, predicted by the estimate calibrated from the first runs:\n")
    print("| # | setup | run 2 measured, median (p10-p90) | tokens/s (p10-p90) | calibrated "
          "(from) | predicted tokens/s | error | in p10-p90 |")
    print("|---|---|---|---|---|---|---|---|")
    inside, errors = 0, []
    for m in second:
        t = training_of(m)
        assert t is not None
        cal = find_calibration(ledger, hw, t, device_key=device_key, exclude_ids=second_ids)
        timing = m.results["timing"]
        med, p10, p90 = timing["median_s"], timing["p10_s"], timing["p90_s"]
        lo, hi = m.results["tokens_per_s_range"]
        setup = (f"{m.setup['model']} d{t.arch.hidden_size} L{t.arch.num_layers} {t.method} "
                 f"b{t.micro_batch} s{t.seq_len}{' ckpt' if t.checkpointing else ''}")
        if cal is None:
            print(f"| {m.id} | {setup} | {med:.3f} s | - | no match | - | - | - |")
            continue
        e = estimate_training(t, hw, "bench", **cal.estimator_kwargs())
        tps = e.tokens_per_s.value
        err = tps / m.tokens_per_s - 1
        errors.append(abs(err))
        ok = lo <= tps <= hi
        inside += ok
        print(f"| {m.id} | {setup} | {med:.3f} s ({p10:.3f}-{p90:.3f}) | {m.tokens_per_s:,.0f} "
              f"({lo:,.0f}-{hi:,.0f}) | #{cal.ledger_id} x{cal.efficiency_scale:.2f} | "
              f"{tps:,.0f} | {err:+.1%} | {'yes' if ok else 'no'} |")
    if errors:
        print(f"\nsecond runs: worst error {max(errors):.1%}, "
              f"{sum(e <= 0.15 for e in errors)}/{len(errors)} within 15%, {inside}/{len(errors)} "
              "inside the run's own p10-p90 tokens/s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--ledger", type=Path, help="ledger file (default: a temporary one)")
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument("--quick", action="store_true", help="8 configurations, fewer steps")
    p.add_argument("--repeat", action="store_true",
                   help="bench every configuration twice; predict the second runs")
    p.add_argument("--second-run-from", type=int, metavar="ID",
                   help="with --report-only: rows from this id on are second runs")
    p.add_argument("--report-only", metavar="DEVICE_KEY",
                   help="only print the table for the rows already in --ledger")
    args = p.parse_args()
    if args.report_only:
        report(args.ledger, args.report_only, args.second_run_from)
        return
    with tempfile.TemporaryDirectory() as tmp:
        run(args.ledger or Path(tmp) / "ledger.sqlite", args.threads, args.quick, args.repeat)


if __name__ == "__main__":
    main()
