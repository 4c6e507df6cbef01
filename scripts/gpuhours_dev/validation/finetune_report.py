"""docs/validation.md's fine-tuning sections: finetune_runs.csv by source, method and GPU
generation, every compared row, and every row not compared with the reason."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Iterable

from gpuhours_dev.validation import GIB, Comparison

FT_TOLERANCE = {"ft_memory": 0.10, "ft_throughput": 0.20}
FT_TITLES = {
    "ft_memory": "Fine-tuning memory (finetune_runs.csv)",
    "ft_throughput": "Fine-tuning throughput (finetune_runs.csv)",
}
SUMMARY_TITLES = {
    "ft_memory": "Fine-tuning memory per GPU (finetune_runs.csv; goal: 80% within 10%)",
    "ft_throughput": "Fine-tuning throughput, tokens/s per GPU (finetune_runs.csv; goal: 90% "
                     "within 20% on every GPU generation)",
    "ft_fits": "Fine-tuning runs that ran, predicted to fit (finetune_runs.csv; goal: under 2% "
               "refused)",
}

MEMORY_INTRO = (
    "Every row of `scripts/gpuhours_dev/validation/data/finetune_runs.csv` (517 published runs, "
    "each with its source; its README says how each source measures) is mapped to a setup by "
    "`scripts/gpuhours_dev/validation/finetune.py`: the model by catalog name or alias, the "
    "method, LoRA rank and targets, batch, sequence, accumulation, checkpointing, precision, "
    "optimizer, GPU and parallelism. A row that cannot be expressed keeps its reason (listed "
    "below); each assumption made for a row is in its setup text. Like is compared with like: "
    "a torch allocated (or active) peak with the estimate's live tensors "
    "(`MemoryBreakdown.tensors_bytes`), a torch reserved peak with tensors plus the allocator "
    "reserve (`reserved_bytes`), an nvidia-smi reading with reserved plus the CUDA context "
    "(`total_bytes`); a figure of unstated type with `reserved_bytes`. GB is 10^9 bytes and "
    "GiB 2^30, per each row's unit note. Rows used: those with a memory figure whose setup is "
    "expressible. Error = predicted / measured - 1; tolerance 10%.")
FITS_INTRO = (
    "A configuration that ran must not be predicted not to fit: for every expressible row "
    "that ran (it has a measured figure, or it is a capacity limit that fit) on a GPU whose "
    "memory is known, the estimate's device total (`total_bytes`: tensors, allocator reserve, "
    "CUDA context) is held to the GPU's memory, as the estimator's own `fits` does. A GPU "
    "named by its size only (\"48GB GPU\", \"GPU with 12 GB VRAM\") is taken as that many "
    "10^9 bytes.")
THROUGHPUT_INTRO = (
    "Tokens/s per GPU, compared only where the source's tokens are the tokens computed: "
    "packed sequences (xtuner, torchtune's packed rows), padding to a fixed length (Qwen), "
    "dummy full-length samples (Answer.AI, 1024 samples x context / run time). Rows with "
    "variable-length samples (samples/s, or tokens that exclude padding) are skipped with the "
    "reason. The estimate is uncalibrated (the efficiency defaults of "
    "`src/gpuhours/estimate/assumptions.py`). Tolerance 20%; the goal is per GPU generation.")

#: what remains off, per source, and the likely mechanism (read from the rows below)
REMAINS: dict[str, str] = {
    "litgpt config_hub": (
        "LoRA rows on an A10G sit within a few percent of torch's allocated peak. The "
        "bnb.nf4 QLoRA rows read about a quarter above the estimate: litgpt's "
        "BitsandbytesPrecision keeps the 16-bit embedding and LM head, and bitsandbytes "
        "dequantises each 4-bit weight to bf16 in the forward and again in the backward; the "
        "estimate counts only the packed 4-bit weights and no dequantisation buffer. The "
        "llama-3.2-3b full row (#30) reads 16.5 GB allocated, below its bf16 weights, "
        "gradients and AdamW moments alone (8 bytes x 3.2B = 25.7 GB): the config measured is "
        "not the one read at the table's commit (an optimizer other than AdamW, or a "
        "different trainable set); it is the one run that ran and is predicted not to fit."),
    "litgpt resource tables": (
        "Single-GPU LoRA rows are within 3%; the bnb.nf4 rows read 18-20% above the "
        "estimate (the dequantised bf16 copies, as for config_hub). The FSDP rows (2 and 4 "
        "A100s, October 2023 lit-gpt) read twice the estimate or more: the estimate shards "
        "the frozen base over the GPUs (ZeRO-3), but FSDP with `use_orig_params` and "
        "per-block wrapping all-gathers a whole block's flat parameters and keeps the "
        "unsharded frozen weights of the forward alive for backward (no resharding for "
        "frozen parameters in that version). Not modelled."),
    "torchtune": (
        "The README table's \"Peak Memory per GPU\" type is not stated; two rows of one "
        "config (Llama 3.1 8B LoRA, #324 on a 4090 and #325 on an A6000) read 16.2 and 30.3 "
        "GiB, so the figure follows the card (reserved memory grows into free memory), and "
        "the same estimate misses one by +42% and the other by -24%. In the optimization-flags "
        "table (active bytes, A100) the unpacked baseline (#330) is padded per batch to the "
        "longest sample, not to 4096: the estimate at 4096 is double. The packed row without "
        "compile (#331) reads 11% above the estimate, and compile then lowers memory (#332, "
        "not modelled). The QLoRA row of the README (#326) and the 70B LoRA row (#328) are "
        "above the estimate's reserved figure."),
    "PEFT": (
        "Full fine-tuning is within 1%; LoRA on q,v reads about 10% below the estimate "
        "(99th percentile of reserved memory per step over variable-length batches, so the "
        "longest batch of 768 tokens, which the estimate assumes, is rarely reached). 58 of "
        "63 rows are other PEFT methods and are not modelled."),
    "Answer.AI": (
        "FSDP LoRA and QLoRA on two 24 GB cards: the QLoRA rows read about 20% above the "
        "estimate's reserved memory and the LoRA rows 0-21%. Likely: bitsandbytes' "
        "dequantised bf16 weights per layer (QLoRA), FSDP's all-gathered full block (the "
        "estimate shards weights as if always sharded), and the reserved-not-allocated cache "
        "of a tightly packed 24 GB card (the batch sizes were pushed to fill the card). "
        "Memory of the 70B rows is not stated; the CPU-offload rows are not modelled."),
    "LLaMA-Factory (via Unsloth)": (
        "Within 7% except the HF QLoRA row (#452, 9 GB measured vs 7.0 GB predicted); "
        "figures are whole GB of unstated type, quoted second-hand, with LoRA targets and "
        "checkpointing assumed (in the setup text)."),
    "axolotl": (
        "Only one row has a catalog model (Llama-2-7B QLoRA, \"about 17 GB\"): the estimate "
        "is a third lower. The figure is approximate, of unstated type, with sample packing "
        "(several sequences per row: the estimate's flash attention handles them as one) "
        "and a config read at HEAD, later than the measurement. Most axolotl rows are models "
        "not in the catalog."),
    "Qwen": (
        "No row compared: Qwen-1 (1.8B/7B/14B/72B) is not in the catalog; the Int4 rows are "
        "GPTQ bases and the LoRA (emb) rows train the embeddings and LM head. Adding Qwen-1 "
        "configs to the catalog would open 39 rows (memory of unstated type; throughput "
        "padded to the maximum length, so comparable)."),
    "ms-swift": (
        "No row compared: every model of the sweeps (qwen-chat, yi, chatglm3, baichuan2, "
        "openbuddy) is outside the catalog, and the one Llama-3 row uses Unsloth. Speeds "
        "are samples/s of variable-length samples, not comparable without token counts."),
    "xtuner": (
        "Throughput only. Llama-2-7B at 8k (sequence parallel 1) is within 20%; at 32k the "
        "estimate is 30% slow (the attention-kernel efficiency at long sequences is set from "
        "the MPT rows, and xtuner's reported TFLOPs at 32k are higher than at 8k). Llama-2-"
        "70B on 32 GPUs reads 37% below the estimate: the DeepSpeed ZeRO stage is not "
        "stated (ZeRO-3 assumed) and inter-node traffic of a 70B model is the likely gap. "
        "Sequence-parallel rows are not modelled."),
    "Unsloth docs (capacity)": (
        "Capacity limits, not peaks: the HF + FA2 rows (QLoRA r32, batch 1, the longest "
        "context that fit) are fits checks only. The Unsloth rows rely on Unsloth's kernels "
        "and offloaded checkpointing and are not modelled."),
}
THROUGHPUT_REMAINS = (
    "The largest throughput misses are FSDP over PCIe on consumer cards at small batches "
    "(Answer.AI, 2x RTX 3090/4090 without NVLink, micro-batch 1 at 512-2048 tokens): the "
    "estimate is up to several times faster than measured. Each step all-gathers the "
    "frozen bf16 base (13 GB for Llama-2-7B; a quarter of that for QLoRA, whose rows miss "
    "less) over PCIe in forward and again in backward under reentrant checkpointing; "
    "the estimate takes the collective to overlap with compute and costs one all-gather. "
    "At larger batches the same rows fall within 20%. The 70B QLoRA rows on A100-40GB and "
    "H100 are 13-67% fast: bitsandbytes' dequantisation (memory-bound, per layer, forward, "
    "recompute and backward) is not in the step time. torchtune's rows ran with "
    "torch.compile (not modelled); the LoRA rows on a 4090 and an A6000 read 35-56% above "
    "the estimate, the full and LoRA rows on an A100 within 17%.")


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def _stats(rows: list[Comparison], tol: float) -> tuple[int, int, int, str, str]:
    """(compared, within tol, within 2 tol, median error, worst)."""
    errs = [c.error for c in rows if c.error is not None]
    if not errs:
        return 0, 0, 0, "-", "-"
    worst = max(rows, key=lambda c: abs(c.error or 0.0))
    return (len(errs), sum(abs(e) <= tol for e in errs), sum(abs(e) <= 0.20 for e in errs),
            _pct(statistics.median(errs)),
            f"{_pct(worst.error or 0.0)} ({worst.label.split(' ')[0]})")


def _group_table(rows: list[Comparison], key: Callable[[Comparison], str], what: str,
                 tol: float) -> list[str]:
    groups: dict[str, list[Comparison]] = {}
    for c in rows:
        groups.setdefault(key(c), []).append(c)
    out = [f"| {what} | rows | with a figure | compared | within {100 * tol:.0f}% | within 20% "
           f"| median error | worst |", "|---|---|---|---|---|---|---|---|"]
    for name, cs in sorted(groups.items()):
        n, ok, ok20, med, worst = _stats(cs, tol)
        figures = sum(not math.isnan(c.measured) for c in cs)
        out.append(f"| {name} | {len(cs)} | {figures} | {n} | {ok} | {ok20} | {med} | {worst} |")
    return out


def _value(c: Comparison, v: float | None) -> str:
    if v is None or math.isnan(v):
        return "-"
    return f"{v / GIB:.2f} GiB" if c.unit == "bytes" else f"{v:,.0f}"


def _row_table(rows: Iterable[Comparison], tol: float) -> list[str]:
    out = ["| row | source | setup as estimated | measured | predicted | error | what was "
           "measured |", "|---|---|---|---|---|---|---|"]
    for c in rows:
        if c.error is None:
            continue
        flag = "" if abs(c.error) <= tol else " **(miss)**"
        out.append(f"| {c.label} | {c.group} | {c.setup} | {_value(c, c.measured)} | "
                   f"{_value(c, c.predicted)} | {_pct(c.error)}{flag} | {c.measured_what} |")
    return out


def _skipped(rows: list[Comparison]) -> list[str]:
    by_reason: dict[str, list[str]] = {}
    for c in rows:
        if c.skipped:
            # PEFT's many methods read as one reason, the method named in the row list
            reason = re.sub(r" \(.*\)$", "", c.skipped) if c.skipped.startswith(
                "PEFT method other than LoRA") else c.skipped
            by_reason.setdefault(reason, []).append(c.label.split(" ")[0])
    return [f"- {reason} ({len(ids)} rows): {', '.join(ids)}"
            for reason, ids in sorted(by_reason.items(), key=lambda kv: -len(kv[1]))]


def _by_kind(comparisons: list[Comparison], kind: str) -> list[Comparison]:
    return [c for c in comparisons if c.kind == kind]


def fits_summary(comparisons: list[Comparison]) -> tuple[int, int]:
    """(rows that ran and are predicted to fit, rows that ran and were checked)."""
    rows = [c for c in _by_kind(comparisons, "ft_fits") if c.error is not None]
    return sum((c.error or 0.0) <= 0 for c in rows), len(rows)


def render_finetune(comparisons: list[Comparison]) -> list[str]:
    mem = _by_kind(comparisons, "ft_memory")
    fits = _by_kind(comparisons, "ft_fits")
    tp = _by_kind(comparisons, "ft_throughput")
    tol_m, tol_t = FT_TOLERANCE["ft_memory"], FT_TOLERANCE["ft_throughput"]
    lines = ["", f"## {FT_TITLES['ft_memory']}", "", MEMORY_INTRO, "", "By source:", ""]
    lines += _group_table(mem, lambda c: c.group, "source", tol_m)
    lines += ["", "By method (expressed rows):", ""]
    lines += _group_table([c for c in mem if c.error is not None], lambda c: c.method,
                          "method", tol_m)
    ok, n = fits_summary(comparisons)
    refused = [c for c in fits if c.error is not None and c.error > 0]
    lines += ["", "### Runs that ran, predicted not to fit", "", FITS_INTRO, "",
              f"Checked: {n} rows; predicted to fit: {ok}; refused: {len(refused)} "
              f"({100 * len(refused) / max(n, 1):.1f}%).", ""]
    lines += [f"- {c.label} ({c.group}): {c.predicted / GIB:.1f} GiB predicted on "
              f"{c.measured_what} ({c.measured / GIB:.1f} GiB); {c.setup}"
              for c in refused if c.predicted is not None]
    lines += ["", "### What remains off, and why", ""]
    lines += [f"- **{src}**: {text}" for src, text in REMAINS.items()]
    lines += ["", "### Every compared row", ""] + _row_table(mem, tol_m)
    lines += ["", "Not compared (memory):", ""] + _skipped(mem)
    lines += ["", "Not checked (fits):", ""] + _skipped(fits)
    lines += ["", f"## {FT_TITLES['ft_throughput']}", "", THROUGHPUT_INTRO, "",
              "By GPU generation:", ""]
    lines += _group_table([c for c in tp if c.error is not None], lambda c: c.generation,
                          "generation", tol_t)
    lines += ["", "By source:", ""] + _group_table(tp, lambda c: c.group, "source", tol_t)
    lines += ["", "By method (expressed rows):", ""]
    lines += _group_table([c for c in tp if c.error is not None], lambda c: c.method,
                          "method", tol_t)
    lines += ["", "What remains off, and why: " + THROUGHPUT_REMAINS, "",
              "### Every compared row", ""] + _row_table(tp, tol_t)
    lines += ["", "Not compared (throughput):", ""] + _skipped(tp)
    sources = sorted({c.source for c in mem})
    lines += ["", "### Fine-tuning sources", ""] + [f"- {s}" for s in sources]
    return lines
