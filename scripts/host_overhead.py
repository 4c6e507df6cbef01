"""The host floor of an eager step: count its device operators, then fit one host cost per
operator to the host-bound steps of the H100 run and test it on the others.

    python scripts/host_overhead.py count            # operator counts per layer (CPU, seconds)
    python scripts/host_overhead.py fit              # + the fit and the held-out check
    python scripts/host_overhead.py qwen             # the Qwen README host: fit, held out
    python scripts/host_overhead.py zero3            # DeepSpeed ZeRO-3's module hooks
    python scripts/host_overhead.py flash            # the flash-attn kernels' rate on an A100

`count` builds each model family twice, with 2 and 4 layers at a tiny width (operator counts
depend on the structure, not the width), runs one training step of bench's own trainer under
gpuhours.torchkit.ops.count_ops and prints operators per layer (the difference of the two,
halved) and per step (the rest: embedding, LM head, loss, optimizer) for forward, backward and
the optimizer; and operators per decode step of HF `generate` (the difference of two lengths).

`fit` divides the measured step time of ONE host-bound configuration of the H100 run
(scripts/gpuhours_dev/validation/data/h100_2026-11-23, ledger row 1: Qwen2.5-0.5B full
fine-tuning, one 512-token sequence) by its counted operators, and predicts with that host cost
per operator the other host-bound rows (LoRA has a third more operators per layer) and HF
generate's decode steps, which it never saw.

`qwen` fits the Qwen README's A100 host (Qwen-1's code with flash-attn, estimate/host.py's
flash-attn path): one host cost per operator, the value in 15-40 us (steps of 0.5) with the
least rms relative error of tokens/s over the host-bound Qwen-1.8B LoRA rows (#101-103,
#107-109: 256-1024 tokens, where the measured step barely grows with the tokens), and prints
every other Qwen row with it, held out (scripts/gpuhours_dev/validation/finetune.py
HOST_US_PER_OP takes the value).

`zero3` fits DeepSpeed ZeRO-3's host cost per module fetched and released
(assumptions.ZERO3_OPS_PER_MODULE_FETCH, in operators at the row's host figure: 20.5 us for the
Qwen README host) to the host-bound Qwen-1.8B full fine-tuning rows (#119-121, one A100,
finetune_ds.sh's ds_config_zero3.json), and prints every other ZeRO-3 row, held out.

`flash` fits the rate of the flash-attn package's kernels per causal FLOP on an A100
(assumptions.FLASH_ATTN2_EFFICIENCY_BY_GENERATION) to the Qwen-1.8B LoRA rows at 8192 tokens
(#106, #112), where attention is the largest share of the step, and prints every other
flash-attn row, held out.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "gpuhours_dev/validation/data/h100_2026-11-23"
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 256}


def step_counts(model: str, layers: int, method: str = "full", checkpointing: bool = False,
                precision: str = "bf16-mixed", optimizer_impl: str = "foreach"
                ) -> dict[str, int]:
    """Operators of one training step (the second: optimizer state exists), by phase."""
    import torch

    from gpuhours.bench import model as bench_model
    from gpuhours.bench.config import BenchSetup
    from gpuhours.bench.runner import make_optimizer
    from gpuhours.setup import torch_precision
    from gpuhours.torchkit.ops import count_ops

    over = {**TINY, "num_hidden_layers": layers}
    if model.startswith("llama"):
        over["head_dim"] = 16
    s = BenchSetup.model_validate(dict(model=model, config_overrides=over, method=method,
                                       checkpointing=checkpointing, precision=precision,
                                       optimizer_impl=optimizer_impl, micro_batch=1, seq_len=16))
    built = bench_model.build(s, "cpu")
    params = [p for p in built.model.parameters() if p.requires_grad]
    opt = make_optimizer(params, "adamw", optimizer_impl, 1e-5)
    tp = torch_precision(precision, method)
    amp = tp.autocast_dtype

    def fwd() -> Any:
        if amp:
            with torch.autocast("cpu", dtype=getattr(torch, amp)):
                return built.model(**built.make_batch()).loss
        return built.model(**built.make_batch()).loss

    for _ in range(2):
        fwd().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    out: dict[str, Any] = {}
    holder: dict[str, Any] = {}
    out["forward"] = sum(count_ops(lambda: holder.__setitem__("loss", fwd())).values())
    out["backward"] = sum(count_ops(lambda: holder["loss"].backward()).values())
    out["optimizer"] = sum(count_ops(opt.step).values())
    return out


def decode_counts(model: str, layers: int) -> float:
    """Operators per decode step of HF generate (bf16, greedy): the difference of 12 and 4 new
    tokens, over 8."""
    import torch
    import transformers

    from gpuhours.bench.model import hf_config_of
    from gpuhours.resolve import model_config
    from gpuhours.torchkit.ops import count_ops

    cfg, _, _ = model_config(model, {**TINY, "num_hidden_layers": layers,
                                     **({"head_dim": 16} if model.startswith("llama") else {})})
    hf = hf_config_of(cfg, TINY["vocab_size"])
    m = transformers.AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16,
                                                      attn_implementation="sdpa").eval()
    ids = torch.randint(0, TINY["vocab_size"], (1, 16))

    def gen(n: int) -> int:
        with torch.no_grad():
            return sum(count_ops(lambda: m.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                min_new_tokens=n, do_sample=False, pad_token_id=0)).values())

    return (gen(12) - gen(4)) / 8


def per_layer(model: str, **kw: Any) -> dict[str, dict[str, float]]:
    a, b = step_counts(model, 2, **kw), step_counts(model, 4, **kw)
    return {phase: {"per_layer": (b[phase] - a[phase]) / 2,
                    "per_step": a[phase] - 2 * (b[phase] - a[phase]) / 2} for phase in a}


def count() -> dict[str, Any]:
    import warnings

    warnings.filterwarnings("ignore")
    table: dict[str, Any] = {}
    for model in ("qwen2.5-0.5b", "llama-3.2-3b"):
        for method in ("full", "lora"):
            for ckpt in (False, True):
                key = f"{model} {method}{' ckpt' if ckpt else ''}"
                table[key] = per_layer(model, method=method, checkpointing=ckpt)
        d2, d4 = decode_counts(model, 2), decode_counts(model, 4)
        table[f"{model} decode"] = {"per_layer": (d4 - d2) / 2, "per_step": d2 - (d4 - d2)}
    for key, phases in table.items():
        print(f"{key:28s} " + "  ".join(
            f"{ph}: {v['per_layer']:.0f}/layer + {v['per_step']:.0f}" for ph, v in
            (phases.items() if "decode" not in key else [("decode", phases)])))
    return table


def fit(table: dict[str, Any]) -> None:
    db = sqlite3.connect(DATA / "ledger.sqlite")
    rows = {}
    for id_, setup, median in db.execute(
            "select id, setup_json, step_time_median_s from measurements where status='ok'"):
        rows[id_] = (json.loads(setup), median)
    layers = {"qwen2.5-0.5b": 24, "llama-3.2-3b": 28, "llama-3.1-8b": 32}

    def ops(setup: dict[str, Any]) -> float:
        fam = "qwen2.5-0.5b" if setup["model"].startswith("qwen") else "llama-3.2-3b"
        c = table[f"{fam} {setup['method']}{' ckpt' if setup.get('checkpointing') else ''}"]
        n = layers[setup["model"]]
        return sum(v["per_layer"] * n + v["per_step"] for v in c.values())

    s_per_op = rows[1][1] / ops(rows[1][0])
    print(f"\nfitted on ledger row 1 alone: {rows[1][1] * 1e3:.1f} ms / {ops(rows[1][0]):.0f} "
          f"operators = {s_per_op * 1e6:.1f} us per operator\n")
    print("| # | setup | operators | host floor | measured step | floor / measured |")
    print("|---|---|---|---|---|---|")
    for id_, (setup, median) in rows.items():
        n = ops(setup)
        print(f"| {id_} | {setup['model']} {setup['method']} b{setup['micro_batch']} "
              f"s{setup['seq_len']} | {n:.0f} | {n * s_per_op * 1e3:.1f} ms | "
              f"{median * 1e3:.1f} ms | {n * s_per_op / median:.2f} |")
    gen = json.loads((DATA / "generate.json").read_text())
    print("\n| HF generate | decode operators/step | host floor | measured step | ratio |")
    print("|---|---|---|---|---|")
    for r in gen:
        fam = "qwen2.5-0.5b" if r["model"].startswith("qwen") else "llama-3.2-3b"
        c = table[f"{fam} decode"]
        n = c["per_layer"] * layers[r["model"]] + c["per_step"]
        print(f"| {r['model']} b{r['batch']} | {n:.0f} | {n * s_per_op * 1e3:.1f} ms | "
              f"{r['decode_step_s'] * 1e3:.1f} ms | {n * s_per_op / r['decode_step_s']:.2f} |")


def qwen() -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from gpuhours.estimate.estimator import estimate_training
    from gpuhours.setup import Hardware
    from gpuhours_dev.validation import finetune as F

    rows = []
    for m, r in zip(F.mapped_rows(), F.finetune_rows(), strict=True):
        measured, _ = F.throughput_figure(r, m.source)
        if (m.source == "Qwen" and m.training is not None and m.gpu is not None
                and measured is not None):
            rows.append((m, measured))

    def errors(us: float) -> dict[int, float]:
        return {m.row: estimate_training(m.training, Hardware(
            gpu=m.gpu, num_gpus=m.num_gpus, host_us_per_op=us), "catalog"
        ).tokens_per_s_per_gpu.value / measured - 1 for m, measured in rows}

    def rms(us: float) -> float:
        e = errors(us)
        return float(sum(e[i] ** 2 for i in F.HOST_FIT_ROWS) / len(F.HOST_FIT_ROWS)) ** 0.5

    best = min((15 + 0.5 * i for i in range(51)), key=rms)
    print(f"fitted on rows {sorted(F.HOST_FIT_ROWS)}: {best:g} us per operator "
          f"(rms error {rms(best):.1%}); finetune.py uses {F.HOST_US_PER_OP['Qwen'][0]:g}")
    e = errors(best)
    # the rows of the ZeRO-3 hook fit (`zero3`) are tuned too: left out
    held = [(m, e[m.row]) for m, _ in rows if m.row not in F.TUNED_THROUGHPUT_ROWS]
    within = sum(abs(x) <= 0.2 for _, x in held)
    print(f"held out: {within} of {len(held)} Qwen rows within 20%")
    for m, x in held:
        print(f"  {m.label:48s} {x:+7.1%}  {m.training.kernels if m.training else ''}")


def zero3() -> None:
    """Fit assumptions.ZERO3_OPS_PER_MODULE_FETCH (DeepSpeed ZeRO-3's host cost per module
    fetched and released, in operators at the row's host figure) to finetune.ZERO3_FIT_ROWS,
    the least rms error on a 0.5 grid from 0 to 30; print every other ZeRO-3 row, held out."""
    import dataclasses
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from gpuhours.estimate import assumptions as A
    from gpuhours_dev.validation import finetune as F

    rows = []
    for m, r in zip(F.mapped_rows(), F.finetune_rows(), strict=True):
        measured, _ = F.throughput_figure(r, m.source)
        t = m.training
        if (t is not None and t.zero_stage == 3 and t.zero3_engine == "deepspeed"
                and m.gpu is not None and measured is not None):
            rows.append((m, measured))
    original = A.ZERO3_OPS_PER_MODULE_FETCH

    def errors(ops: float) -> dict[int, float]:
        A.ZERO3_OPS_PER_MODULE_FETCH = dataclasses.replace(original, value=ops)
        try:
            return _row_errors(rows)
        finally:
            A.ZERO3_OPS_PER_MODULE_FETCH = original

    def rms(ops: float) -> float:
        e = errors(ops)
        return float(sum(e[i] ** 2 for i in F.ZERO3_FIT_ROWS) / len(F.ZERO3_FIT_ROWS)) ** 0.5

    best = min((0.5 * i for i in range(61)), key=rms)
    print(f"fitted on rows {sorted(F.ZERO3_FIT_ROWS)}: {best:g} operators per module fetch "
          f"(rms error {rms(best):.1%}); assumptions.py uses {original.value:g}")
    before, after = errors(0.0), errors(best)
    held = [m for m, _ in rows if m.row not in F.ZERO3_FIT_ROWS]
    within = sum(abs(after[m.row]) <= 0.2 for m in held)
    print(f"held out: {within} of {len(held)} ZeRO-3 rows within 20% "
          f"(without the hooks: {sum(abs(before[m.row]) <= 0.2 for m in held)})")
    for m in held:
        print(f"  {m.label:48s} {before[m.row]:+7.1%} -> {after[m.row]:+7.1%}")



def _row_errors(rows: list[Any]) -> dict[int, float]:
    """predicted / measured - 1 of each (mapped row, measured tokens/s) with the row's source's
    host figure, at the assumptions as they stand when called."""
    from gpuhours.estimate.estimator import estimate_training
    from gpuhours.setup import Hardware
    from gpuhours_dev.validation import finetune as F

    return {m.row: estimate_training(m.training, Hardware(
        gpu=m.gpu, num_gpus=m.num_gpus,
        host_us_per_op=F.HOST_US_PER_OP.get(m.source, (None, ""))[0]), "catalog"
    ).tokens_per_s_per_gpu.value / measured - 1 for m, measured in rows}

def flash_fit() -> tuple[float, dict[int, float], dict[int, float], list[Any]]:
    """Fit assumptions.FLASH_ATTN2_EFFICIENCY_BY_GENERATION["ampere"] (the flash-attn package's
    kernels per causal FLOP on an A100) to finetune.FLASH_FIT_ROWS, the least rms error on a 0.01
    grid from 0.20 to 0.70, with the Qwen host figure. Returns (the value, each flash-attn row's
    error with it, the same with the rate it replaces, ATTENTION_EFFICIENCY_RATIO x the GEMM
    efficiency, and the rows)."""
    import dataclasses
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from gpuhours.estimate import assumptions as A
    from gpuhours_dev.validation import finetune as F

    rows = []
    for m, r in zip(F.mapped_rows(), F.finetune_rows(), strict=True):
        measured, _ = F.throughput_figure(r, m.source)
        t = m.training
        if (t is not None and t.kernels == "flash-attn" and m.gpu is not None
                and m.gpu.generation == "ampere" and measured is not None):
            rows.append((m, measured))
    table = A.FLASH_ATTN2_EFFICIENCY_BY_GENERATION
    original = table["ampere"]

    def errors(value: float | None, only: frozenset[int] | None = None) -> dict[int, float]:
        if value is None:  # the rate it replaces
            del table["ampere"]
        else:
            table["ampere"] = dataclasses.replace(original, value=value)
        try:
            return _row_errors([(m, x) for m, x in rows if only is None or m.row in only])
        finally:
            table["ampere"] = original

    def rms(value: float) -> float:
        # the grid's 51 values score the fitted rows only; the held-out rows are estimated twice
        e = errors(value, frozenset(F.FLASH_FIT_ROWS))
        return float(sum(e[i] ** 2 for i in F.FLASH_FIT_ROWS) / len(F.FLASH_FIT_ROWS)) ** 0.5

    best = min((round(0.20 + 0.01 * i, 2) for i in range(51)), key=rms)
    return best, errors(best), errors(None), [m for m, _ in rows]


def flash() -> None:
    """Print flash_fit's value and every other flash-attn row, held out."""
    from gpuhours.estimate import assumptions as A
    from gpuhours_dev.validation import finetune as F

    best, after, before, rows = flash_fit()
    fit_rms = (sum(after[i] ** 2 for i in F.FLASH_FIT_ROWS) / len(F.FLASH_FIT_ROWS)) ** 0.5
    print(f"fitted on rows {sorted(F.FLASH_FIT_ROWS)}: {best:g} of the dense bf16 peak per causal "
          f"FLOP (rms error {fit_rms:.1%}); assumptions.py uses "
          f"{A.FLASH_ATTN2_EFFICIENCY_BY_GENERATION['ampere'].value:g}")
    held = [m for m in rows if m.row not in F.TUNED_THROUGHPUT_ROWS]
    print(f"held out: {sum(abs(after[m.row]) <= 0.2 for m in held)} of {len(held)} flash-attn "
          f"rows within 20% (at the ratio's rate: {sum(abs(before[m.row]) <= 0.2 for m in held)}"
          f"); within 10%: {sum(abs(after[m.row]) <= 0.1 for m in held)} "
          f"({sum(abs(before[m.row]) <= 0.1 for m in held)})")
    for m in held:
        print(f"  {m.label:48s} {m.training.seq_len:5d} {before[m.row]:+7.1%} -> "
              f"{after[m.row]:+7.1%}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("action", choices=["count", "fit", "qwen", "zero3", "flash"])
    a = p.parse_args()
    if a.action == "flash":
        flash()
        return
    if a.action == "qwen":
        qwen()
        return
    if a.action == "zero3":
        zero3()
        return
    table = count()
    if a.action == "fit":
        fit(table)


if __name__ == "__main__":
    main()
