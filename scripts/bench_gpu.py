"""Real training steps and HF `generate` decoding on a CUDA GPU, for checking the estimator.

    python scripts/bench_gpu.py run --out DIR [--minutes 8] [--only NAME ...]
    python scripts/bench_gpu.py profile --out DIR [--only NAME ...]
    python scripts/bench_gpu.py report --out DIR        # on any machine, no GPU needed

`run` benchmarks the configurations below (real catalog shapes, random weights) into
DIR/ledger.sqlite with gpuhours' own bench (CUDA events, caching-allocator peak), then times HF
`generate` (prefill apart from decode) into DIR/generate.json. It stops starting new work after
--minutes, so a lease of a GPU is used up to a known point; a configuration that runs out of
memory is recorded as 'does not fit'.

`profile` counts what one training step launches (torch.profiler: CUDA kernels, aten operators,
the GPU's busy time) for the PROFILE configurations into DIR/profile.json, and times the host
cost of one eager operator (a loop of tiny CUDA ops, no synchronisation): the two factors of the
step's host floor.

`report` prints Markdown tables: measured step time, tokens/s and peak tensor memory against the
analytic estimate for the catalog GPU the ledger names (no calibration: the estimate as a user
gets it), and the measured decode step against the hf-generate engine's estimate. docs/bench.md
quotes them with the date and machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

# (name, setup): real shapes from the catalog. Ordered by what they check, cheapest first, so a
# lease that ends early still returns the overhead ladder.
TRAIN: list[tuple[str, dict[str, Any]]] = [
    # the per-micro-batch overhead ladder: tokens per micro-batch from 512 to 16k, full vs LoRA
    *[(f"q05-full-b{b}-s512", dict(model="qwen2.5-0.5b", micro_batch=b, seq_len=512))
      for b in (1, 4, 16)],
    *[(f"q05-lora-b{b}-s512", dict(model="qwen2.5-0.5b", method="lora", micro_batch=b,
                                   seq_len=512)) for b in (1, 4, 16)],
    *[(f"q05-full-b{b}-s2048", dict(model="qwen2.5-0.5b", micro_batch=b, seq_len=2048))
      for b in (1, 4, 8)],
    *[(f"q05-lora-b{b}-s2048", dict(model="qwen2.5-0.5b", method="lora", micro_batch=b,
                                    seq_len=2048)) for b in (1, 4, 8)],
    ("l3b-full-b2-s2048", dict(model="llama-3.2-3b", micro_batch=2, seq_len=2048)),
    ("l3b-full-b2-s2048-ckpt", dict(model="llama-3.2-3b", micro_batch=2, seq_len=2048,
                                    checkpointing=True)),
    ("l3b-lora-b4-s2048", dict(model="llama-3.2-3b", method="lora", micro_batch=4,
                               seq_len=2048)),
    ("l8b-lora-b2-s2048-ckpt", dict(model="llama-3.1-8b", method="lora", micro_batch=2,
                                    seq_len=2048, checkpointing=True)),
    ("q7b-lora-b4-s2048-ckpt", dict(model="qwen2.5-7b", method="lora", micro_batch=4,
                                    seq_len=2048, checkpointing=True)),
    ("m7b-lora-b4-s2048-ckpt", dict(model="mistral-7b", method="lora", micro_batch=4,
                                    seq_len=2048, checkpointing=True)),
    ("l8b-lora-b1-s4096", dict(model="llama-3.1-8b", method="lora", micro_batch=1,
                               seq_len=4096)),
    # what removes host time: pure bf16 (no autocast casts), the fused AdamW, torch.compile
    ("q05-full-b1-s512-bf16", dict(model="qwen2.5-0.5b", micro_batch=1, seq_len=512,
                                   precision="bf16")),
    ("l3b-full-b2-s2048-fused", dict(model="llama-3.2-3b", micro_batch=2, seq_len=2048,
                                     optimizer_impl="fused")),
    ("q05-full-b1-s512-compiled", dict(model="qwen2.5-0.5b", micro_batch=1, seq_len=512,
                                       compiled=True)),
    # 8B full fine-tuning with AdamW in mixed precision needs ~128 GB of state: must not fit
    ("l8b-full-b1-s2048-ckpt", dict(model="llama-3.1-8b", micro_batch=1, seq_len=2048,
                                    checkpointing=True)),
]

# configurations whose step is profiled: the host-bound ones, and one GPU-bound for contrast
PROFILE = ["q05-full-b1-s512", "q05-lora-b1-s512", "q05-full-b8-s2048", "l3b-lora-b4-s2048"]

# (model, batch, prompt tokens, new tokens)
GENERATE: list[tuple[str, int, int, int]] = [
    ("qwen2.5-0.5b", 1, 512, 128), ("qwen2.5-0.5b", 16, 512, 128), ("qwen2.5-0.5b", 64, 512, 128),
    ("llama-3.1-8b", 1, 512, 128), ("llama-3.1-8b", 16, 512, 128), ("llama-3.1-8b", 64, 512, 128),
]


def run(out: Path, minutes: float, only: list[str], device: str = "cuda") -> None:
    from gpuhours.bench.config import BenchSetup, StopRule
    from gpuhours.bench.device import detect
    from gpuhours.bench.environment import collect
    from gpuhours.bench.session import bench_setup
    from gpuhours.track.ledger import Ledger

    deadline = time.monotonic() + minutes * 60
    backend = detect(device)
    env = collect(backend)
    print(json.dumps({k: env.get(k) for k in sorted(env)}, default=str)[:2000], flush=True)
    rule = StopRule(warmup_steps=3, min_steps=8, max_steps=30, max_time_s=8)
    out.mkdir(parents=True, exist_ok=True)
    with Ledger.open(out / "ledger.sqlite") as ledger:
        for name, cfg in TRAIN:
            if only and not any(o in name for o in only):
                continue
            if time.monotonic() > deadline - 90:  # the last 90 s are generate's
                print(f"[skip {name}: past the deadline]", flush=True)
                continue
            t0 = time.monotonic()
            try:
                s = BenchSetup.model_validate(cfg)
                o = bench_setup(s, backend, rule, env, ledger=ledger)
                r = o.result
                print(f"[{name}] {o.status} #{o.ledger_id} {time.monotonic() - t0:.0f}s "
                      + (f"median {r.timing.median_s * 1e3:.1f} ms, peak "
                         f"{r.peak_memory_bytes / 2**30:.2f} GiB" if r else str(o.error)),
                      flush=True)
            except Exception as e:  # one broken configuration must not lose the others
                print(f"[{name}] FAILED {type(e).__name__}: {e}", flush=True)
    if not only or "generate" in only:
        gen = []
        for model, batch, prompt, new in GENERATE:
            if time.monotonic() > deadline:
                print(f"[skip generate {model} b{batch}: past the deadline]", flush=True)
                continue
            try:
                gen.append(time_generate(model, batch, prompt, new, device))
                print(f"[generate] {gen[-1]}", flush=True)
            except Exception as e:
                print(f"[generate {model} b{batch}] FAILED {type(e).__name__}: {e}", flush=True)
        (out / "generate.json").write_text(json.dumps(gen, indent=1))


def time_generate(model_name: str, batch: int, prompt: int, new: int,
                  device: str = "cuda") -> dict[str, Any]:
    """Median wall time of HF generate for `new` tokens and for 1 token (the prefill), bf16,
    random weights, greedy, EOS suppressed so every sequence decodes all `new` tokens."""
    import torch
    import transformers

    from gpuhours.bench.model import hf_config_of
    from gpuhours.resolve import model_config

    cfg, _, _ = model_config(model_name, {})
    hf = hf_config_of(cfg, int(cfg["vocab_size"]))
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with torch.device(device):
        m = transformers.AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16,
                                                          attn_implementation="sdpa")
    m.eval()
    ids = torch.randint(0, hf.vocab_size, (batch, prompt), device=device)
    mask = torch.ones_like(ids)

    def once(n: int) -> float:
        sync()
        t = time.perf_counter()
        with torch.no_grad():
            m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                       do_sample=False, pad_token_id=0)
        sync()
        return time.perf_counter() - t

    once(4)  # warm-up: kernels, allocator
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    full = sorted(once(new) for _ in range(3))[1]
    first = sorted(once(1) for _ in range(3))[1]
    result = {"model": model_name, "batch": batch, "prompt_tokens": prompt, "new_tokens": new,
              "total_s": full, "prefill_s": first,
              "decode_step_s": (full - first) / (new - 1),
              "peak_allocated_bytes": torch.cuda.max_memory_allocated() if device == "cuda" else None,
              "torch": torch.__version__, "transformers": transformers.__version__,
              "device": torch.cuda.get_device_name() if device == "cuda" else device}
    return result


def profile(out: Path, only: list[str], device: str = "cuda") -> None:
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from gpuhours.bench import model as bench_model
    from gpuhours.bench.config import BenchSetup
    from gpuhours.bench.device import detect
    from gpuhours.bench.runner import Trainer, make_optimizer

    backend = detect(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    rows: list[dict[str, Any]] = [op_cost(device)]
    print(rows[0], flush=True)
    setups = dict(TRAIN)
    for name in only or PROFILE:
        s = BenchSetup.model_validate(setups[name])
        built = bench_model.build(s, backend.torch_device)
        params = [p for p in built.model.parameters() if p.requires_grad]
        opt = make_optimizer(params, s.training.optimizer, s.training.optimizer_impl, 1e-5)
        trainer = Trainer(built.model, opt, built.make_batch, lambda m, b: m(**b).loss, backend,
                          s.training.precision, s.training.grad_accum)
        for _ in range(3):
            trainer.step()
        sync()
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        with torch_profile(activities=acts) as prof:
            t = time.perf_counter()
            trainer.step()
            host_s = time.perf_counter() - t
            sync()
            wall_s = time.perf_counter() - t
        events = prof.key_averages()
        kernels = sum(e.count for e in events if e.device_type.name == "CUDA")
        busy_us = sum(e.self_device_time_total for e in events if e.device_type.name == "CUDA")
        aten = sum(e.count for e in events if e.key.startswith("aten::"))
        launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel",
                                                            "cudaLaunchKernelExC"))
        row = {"name": name, "kernels": kernels, "launch_calls": launches, "aten_ops": aten,
               "gpu_busy_s": busy_us / 1e6, "host_s_profiled": host_s, "wall_s_profiled": wall_s,
               "layers": built.arch.num_layers}
        print(row, flush=True)
        rows.append(row)
        del built, opt, trainer, params
        if device == "cuda":
            torch.cuda.empty_cache()
    (out / "profile.json").write_text(json.dumps(rows, indent=1))


def op_cost(device: str) -> dict[str, Any]:
    """Host seconds per eager operator: tiny CUDA ops launched back to back without a
    synchronisation, so the loop runs at the host's dispatch rate; plain and with autograd."""
    import torch

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    x = torch.ones(8, device=device)
    w = torch.ones(8, device=device, requires_grad=True)
    n = 20_000
    out: dict[str, Any] = {"name": "op_cost"}
    for label, fn in (("add", lambda: x + 1), ("mul_autograd", lambda: x * w)):
        for _ in range(1000):
            fn()
        sync()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        out[f"{label}_s"] = (time.perf_counter() - t) / n
        sync()
    return out


def report(out: Path) -> None:
    from gpuhours.estimate.estimator import estimate_training
    from gpuhours.setup import Hardware
    from gpuhours.track.calibration import training_of
    from gpuhours.track.ledger import Ledger

    with Ledger.open(out / "ledger.sqlite") as ledger:
        rows = list(reversed(ledger.measurements()))
        print("| # | model | setup | measured step, median (p10-p90) | tokens/s | MFU | "
              "estimated step | error | peak allocated | estimated tensors | error |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for m in rows:
            t = training_of(m)
            assert t is not None
            gpu = m.environment.get("catalog_gpu") or "h100-sxm"
            est = estimate_training(t, Hardware(gpu=gpu), "bench")
            setup = " ".join(x for x in (t.method, f"b{t.micro_batch}", f"s{t.seq_len}",
                                         "ckpt" if t.checkpointing else "") if x)
            mem = est.memory.tensors_bytes.value
            if m.status != "ok":
                print(f"| {m.id} | {m.model} | {setup} | does not fit ({m.results.get('error', '')[:60]}) "
                      f"| | | {'fits' if est.fits else 'does not fit'} | | | "
                      f"{mem / 2**30:.1f} GiB | |")
                continue
            tm = m.results["timing"]
            med, p10, p90 = tm["median_s"], tm["p10_s"], tm["p90_s"]
            e = est.step_time_s.value
            mfu = m.mfu
            print(f"| {m.id} | {m.model} | {setup} | {med * 1e3:.1f} ms ({p10 * 1e3:.1f}-"
                  f"{p90 * 1e3:.1f}) | {m.tokens_per_s:,.0f} | "
                  f"{'' if mfu is None else f'{mfu:.1%}'} | {e * 1e3:.1f} ms | {e / med - 1:+.0%} | "
                  f"{m.peak_memory_bytes / 2**30:.2f} GiB | {mem / 2**30:.2f} GiB | "
                  f"{mem / m.peak_memory_bytes - 1:+.1%} |")
    gen_file = out / "generate.json"
    if gen_file.exists():
        report_generate(json.loads(gen_file.read_text()))


def report_generate(rows: list[dict[str, Any]]) -> None:
    from gpuhours.api import estimate_generation
    from gpuhours.setup import Generation, Hardware

    print("\n| model | batch | prompt + new | measured prefill | estimated | measured decode step "
          "| estimated | error |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        g = Generation(model=r["model"], batch=r["batch"], prompt_tokens=r["prompt_tokens"],
                       output_tokens=r["new_tokens"], engine="hf-generate")
        e = estimate_generation(g, Hardware(gpu="h100-sxm"))
        step = e.decode_s / r["new_tokens"]
        print(f"| {r['model']} | {r['batch']} | {r['prompt_tokens']} + {r['new_tokens']} | "
              f"{r['prefill_s'] * 1e3:.1f} ms | {e.prefill_s * 1e3:.1f} ms | "
              f"{r['decode_step_s'] * 1e3:.2f} ms | {step * 1e3:.2f} ms | "
              f"{step / r['decode_step_s'] - 1:+.0%} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("action", choices=["run", "profile", "report"])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--minutes", type=float, default=8.0)
    p.add_argument("--only", nargs="*", default=[])
    p.add_argument("--device", default="cuda", help="cuda; cpu only to try the script out")
    a = p.parse_args()
    if a.action == "run":
        run(a.out, a.minutes, a.only, a.device)
    elif a.action == "profile":
        a.out.mkdir(parents=True, exist_ok=True)
        profile(a.out, a.only, a.device)
    else:
        report(a.out)


if __name__ == "__main__":
    sys.exit(main())
