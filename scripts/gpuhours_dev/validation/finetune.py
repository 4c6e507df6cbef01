"""The estimator against the published fine-tuning runs of data/finetune_runs.csv (517, the shared
reference copy, kept byte-identical) and data/finetune_runs_added.csv (rows collected later, numbered
on from 518; all held out: no figure is set from them) (issue 14).

Each row is mapped to a `Training` and, where the GPU is named, a `Hardware`, by rules per
column (`map_row`): the model by exact catalog name or alias (a table below, never a substring),
the method, LoRA rank and targets, batch, sequence, accumulation, checkpointing, precision,
optimizer, GPU and parallelism. A row whose setup the estimator cannot express keeps the reason;
every assumption made for a row is written into its setup text. Nothing is tuned per row.

Three comparisons per row (`finetune_comparisons`):
- memory per GPU, like with like: a torch allocated (or "active") peak against the estimate's
  live tensors (`MemoryBreakdown.tensors_bytes`), a torch reserved peak against tensors plus the
  allocator reserve (`reserved_bytes`), an nvidia-smi figure against reserved plus what sits
  outside the allocator for the row's stated stack (`row_stack`, estimate/device_overhead.py;
  the estimator's default stack, `total_bytes`, where none is stated); a figure whose type the
  source does not state against `reserved_bytes` (said so in the row; Qwen's as a device-level
  reading). GB = 10^9 bytes and GiB = 2^30 per the row's unit note.
- fits: a configuration that ran must not be predicted as not fitting (`total_bytes` above the
  GPU's memory, the estimator's own `fits`).
- throughput, tokens/s per GPU, only where the source's tokens are the tokens computed (packed
  sequences, padding to a fixed length, or dummy full-length samples); else skipped with why.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

from gpuhours.catalog.schema import GpuSpec
from gpuhours.errors import FieldError
from gpuhours.estimate.device_overhead import (
    SoftwareStack,
    device_level_bytes,
    device_overhead,
)
from gpuhours.estimate.estimator import estimate_training
from gpuhours.estimate.load_cache import load_path_reserve_bytes
from gpuhours.estimate.memory import MemoryBreakdown, training_memory
from gpuhours.estimate.paged_optimizer import paged_resident_bytes
from gpuhours.estimate.step_replay import reserved_training_memory
from gpuhours.resolve import resolve_gpu, resolve_model
from gpuhours.setup import Hardware, Training, loss_kernel_of
from gpuhours_dev.validation.recipe_graphs import recipe_graph_scope

from . import Comparison, _rows, kept

GIB = 2**30
GB = 10**9
DATA = "finetune_runs.csv"
#: rows collected after the shared reference file, same columns, numbered after its last row
#: (data/finetune_runs_added_README.md)
DATA_ADDED = "finetune_runs_added.csv"


def finetune_rows() -> list[dict[str, str]]:
    """Every row: finetune_runs.csv's, then finetune_runs_added.csv's (row N is item N - 1)."""
    return _rows(DATA) + _rows(DATA_ADDED)

#: short name of each source, by the start of its `source` column
SOURCES: tuple[tuple[str, str], ...] = (
    ("Lightning-AI/litgpt config_hub", "litgpt config_hub"),
    ("Lightning-AI/litgpt tutorials/resource-tables", "litgpt resource tables"),
    ("QwenLM/Qwen", "Qwen"),
    ("modelscope/ms-swift", "ms-swift"),
    ("InternLM/xtuner", "xtuner"),
    ("pytorch/torchtune", "torchtune"),
    ("huggingface/peft", "PEFT"),
    ("AnswerDotAI/fsdp_qlora", "Answer.AI"),
    ("axolotl-ai-cloud/axolotl", "axolotl"),
    ("unslothai/unsloth", "Unsloth README"),
    ("hiyouga/LLaMA-Factory", "LLaMA-Factory (via Unsloth)"),
    ("https://unsloth.ai/docs", "Unsloth docs (capacity)"),
    ("huggingface/blog", "HF blog"),
    ("Scicom-AI-Enterprise-Organization/small-ablation README.md (study how-fast-5090)",
     "Scicom how-fast-5090"),
    ("Scicom-AI-Enterprise-Organization/small-ablation simple-throughput-multigpus",
     "Scicom simple-throughput"),
    ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md", "Megatron-Bridge"),
    ("NVIDIA/dgxc-benchmarking ft_llama3", "DGXC NeMo"),
)
#: the sources whose runs are Megatron-Core with Transformer Engine's layers, each row stating its
#: TP, PP, CP, VP and data-parallel sizes (`_megatron_row`)
MEGATRON_SOURCES = frozenset({"Megatron-Bridge", "DGXC NeMo"})

#: the row's model name -> (catalog name, assumption when the name is not the catalog model's)
MODELS: dict[str, tuple[str, str]] = {
    "Llama-2-7b": ("llama-2-7b", ""), "llama-2-7b": ("llama-2-7b", ""),
    "Llama-2-7B": ("llama-2-7b", ""), "LLaMA2-7B": ("llama-2-7b", ""),
    "Llama2-7B": ("llama-2-7b", ""), "NousResearch/Llama-2-7b-hf": ("llama-2-7b", ""),
    "Llama-2-13b": ("llama-2-13b", ""),
    "Llama-2-70B": ("llama-2-70b", ""), "Llama2-70B": ("llama-2-70b", ""),
    "meta-llama/Llama-2-70b-chat-hf": ("llama-2-70b", ""),
    "llama-3-8b": ("llama-3-8b", ""), "llama3-8b-instruct": ("llama-3-8b", ""),
    "llama-3.1-8b": ("llama-3.1-8b", ""), "Llama 3.1 8B": ("llama-3.1-8b", ""),
    "Llama 3.1 8B Instruct": ("llama-3.1-8b", ""),
    "llama-3.2-3b": ("llama-3.2-3b", ""), "Llama 3.2 3B": ("llama-3.2-3b", ""),
    "meta-llama/Llama-3.2-3B": ("llama-3.2-3b", ""),
    "mistral-7b": ("mistral-7b", ""),
    "mistral-7b-v0.2": ("mistral-7b", "Mistral-7B v0.2 has v0.1's shape (the catalog's)"),
    "Mistral-7B-v0.2 base": ("mistral-7b", "Mistral-7B v0.2 has v0.1's shape (the catalog's)"),
    "Mistral 7B (Slim Orca)": ("mistral-7b", ""),
    "Llama 3.1 70B": ("llama-3-70b", "Llama 3.1 70B has Llama 3 70B's shape (the catalog's)"),
    "Llama 3.3 70B Instruct": ("llama-3-70b",
                               "Llama 3.3 70B has Llama 3 70B's shape (the catalog's)"),
    # Qwen-1 (QwenLM/Qwen's README, ms-swift's benchmark): the -Chat and GPTQ -Int4 checkpoints
    # have the base model's architecture; the quantisation is the setup's base_quant
    "Qwen-1.8B": ("qwen-1.8b", ""), "Qwen-7B": ("qwen-7b", ""), "Qwen-14B": ("qwen-14b", ""),
    "Qwen-72B": ("qwen-72b", ""),
    "Qwen-1.8B-Chat-Int4": ("qwen-1.8b", "Qwen-1.8B-Chat-Int4 has Qwen-1.8B's shape"),
    "Qwen-7B-Chat-Int4": ("qwen-7b", "Qwen-7B-Chat-Int4 has Qwen-7B's shape"),
    "Qwen-14B-Chat-Int4": ("qwen-14b", "Qwen-14B-Chat-Int4 has Qwen-14B's shape"),
    "Qwen-72B-Chat-Int4": ("qwen-72b", "Qwen-72B-Chat-Int4 has Qwen-72B's shape"),
    "qwen-1_8b-chat": ("qwen-1.8b", ""), "qwen-7b-chat": ("qwen-7b", ""),
    "qwen-14b-chat": ("qwen-14b", ""), "qwen-72b-chat": ("qwen-72b", ""),
    # Qwen3 base checkpoints (Scicom small-ablation): the -Base model has the catalog model's shape
    "Qwen/Qwen3-0.6B-Base": ("qwen3-0.6b", "Qwen3-0.6B-Base has Qwen3-0.6B's shape"),
    "Qwen/Qwen3-1.7B-Base": ("qwen3-1.7b", "Qwen3-1.7B-Base has Qwen3-1.7B's shape"),
    # Megatron-Bridge's performance tables (recipe llama3.py: hf_path meta-llama/Meta-Llama-3-70B)
    "LLAMA3_70B": ("llama-3-70b", ""),
    # NVIDIA dgxc-benchmarking's NeMo recipes (HF_MODEL_URI meta-llama/Meta-Llama-3-8B, -70B)
    "Meta-Llama-3-8B": ("llama-3-8b", ""), "Meta-Llama-3-70B": ("llama-3-70b", ""),
    # axolotl's examples: re-uploads of the catalog models (same config, other repositories)
    "NousResearch/Meta-Llama-3.1-8B": ("llama-3.1-8b",
                                       "NousResearch's re-upload of Meta-Llama-3.1-8B"),
    "NousResearch/Meta-Llama-3-8B": ("llama-3-8b", "NousResearch's re-upload of Meta-Llama-3-8B"),
    "casperhansen/llama-3-70b-fp16": ("llama-3-70b",
                                      "an fp16 re-upload of Meta-Llama-3-70B"),
    "axolotl-ai-co/gpt-oss-120b-dequantized": (
        "gpt-oss-120b", "gpt-oss-120b with its MXFP4 experts dequantised to bf16 (the training "
                        "model the catalog's count describes)"),
}

#: the row's GPU text -> (catalog name, assumption)
GPUS: dict[str, tuple[str, str]] = {
    "A10G (24GB)": ("a10g", ""),
    "A100-SXM4-40GB": ("a100-40gb", ""), "A100 40GB": ("a100-40gb", ""),
    "A100 40GB SMX": ("a100-40gb", ""),
    "A100-SXM4-80G": ("a100-80gb", ""), "A100-SXM4-80GB": ("a100-80gb", ""),
    "A100 80GB (2 nodes x 8, NVLink intra-node, EFA inter-node)": ("a100-80gb", ""),
    "A100 (memory size not stated)": ("a100-80gb", "A100 size not stated: 80 GB SXM assumed"),
    "NVIDIA L40S": ("l40s", ""),
    "RTX 4090 (24GB)": ("rtx-4090", ""),
    "2x RTX 4090 (24GB, PCIe4 x16, no NVLink, 400W peak)": ("rtx-4090", ""),
    "2x RTX 3090 (24GB, no NVLink, power-limited 280W)": (
        "rtx-3090", "power-limited to 280 W: not modelled (catalog 350 W part)"),
    "RTX A6000 (48GB)": ("rtx-a6000", ""),
    "H100 80GB SXM": ("h100-sxm", ""),
    "H100 SXM": ("h100-sxm", ""),
    "H100 (variant not stated)": ("h100-sxm", "H100 variant not stated: SXM assumed"),
    "H200": ("h200", ""), "L40S": ("l40s", ""), "RTX 5090": ("rtx-5090", ""),
    "GB200 (DGX-GB200)": ("gb200", ""),
    "H100 (DGX Cloud recipe; 80 GB, variant not stated)": (
        "h100-sxm", "H100 variant not stated: SXM assumed (DGX Cloud benchmarking recipes)"),
}
#: "48GB GPU", "GPU with 12 GB VRAM": a size only, used for the fits check, never for time
_GPU_SIZE = re.compile(r"^(?:GPU with )?(\d+) ?GB (?:VRAM|GPUs?)")

#: methods of the rows that the estimator cannot express, with why
METHOD_SKIPS: dict[str, str] = {
    "full (GaLore)": "GaLore (low-rank optimizer state) not modelled",
    "full (LISA)": "LISA (layerwise sampled full fine-tuning) not modelled",
    "not stated": "method not stated",
}


@dataclass(frozen=True)
class Mapped:
    """One row as the estimator sees it: the setup, or why it cannot be expressed."""

    #: 1-based data row: finetune_runs.csv's (the CSV line number minus one), then
    #: finetune_runs_added.csv's numbered on (518 is its first)
    row: int
    source: str
    citation: str
    label: str
    method: str
    training: Training | None
    gpu: GpuSpec | None  # None: not named (memory is still compared)
    gpu_is_size_only: bool
    num_gpus: int
    setup: str
    skipped: str | None
    #: variable-length samples: the micro-batches of the run, replayed through the allocator
    #: model for the reserved figure (estimate/fragmentation.py); None: fixed lengths
    replay_micro_batches: int | None = None
    #: GPUs that share one NVLink/NVSwitch domain (Hardware.gpus_per_node): 8 (an HGX/DGX
    #: node) unless the row's system says otherwise (`MEGATRON_SYSTEMS`)
    gpus_per_node: int = 8
    #: network between nodes per GPU, one direction, GB/s (Hardware's default where None)
    inter_node_gb_per_s_one_way: float | None = None
    #: PCIe lanes per GPU where the source says the slots are narrower than x16
    #: (Hardware.pcie_lanes; None: x16, the catalog's figures)
    pcie_lanes: int | None = None


def source_name(citation: str) -> str:
    for start, name in SOURCES:
        if citation.startswith(start):
            return name
    raise ValueError(f"unknown source {citation[:60]!r}")  # pragma: no cover


#: the method text of LoRA with peft's modules_to_save=["wte", "lm_head"] (Qwen's "LoRA (emb)")
LORA_EMB = "lora (+ trainable wte/lm_head)"
#: the method texts of peft's DoRA (use_dora=True: setup.dora, estimate/dora.py): the PEFT
#: method comparison's and ms-swift's tuners table's
DORA = ("lora (DoRA)", "dora")


#: PEFT methods beside LoRA (setup.peft_method, estimate/peft_methods.py): the PEFT method
#: comparison's method texts, each with its setup from the experiment's adapter_config.json
#: (huggingface/peft method_comparison/MetaMathQA/experiments/<experiment>/, at the commits
#: named) where the row's notes do not state it: rank and targets as the rows give them
PEFT_METHODS = {"ia3": "ia3", "loha": "loha", "lokr": "lokr", "vera": "vera",
                "prompt_tuning": "prompt_tuning", "prefix_tuning": "prefix_tuning"}
#: experiment -> (setup fields, where from)
_PEFT_EXPERIMENTS: dict[str, tuple[dict[str, Any], str]] = {
    "ia3/llama-3.2-3B-default": ({"ia3_targets": "k-v-down"}, "IA3 on peft's llama targets "
                                 "k_proj, v_proj, down_proj (the row's targets)"),
    "ia3/llama-3.2-3B-lr_0.001": ({"ia3_targets": "k-v-down"}, "IA3 on peft's llama targets "
                                  "k_proj, v_proj, down_proj (the row's targets)"),
    "ia3/llama-3.2-3B-all-attn-5k-lr0.005": (
        {"ia3_targets": "all-linear"}, "IA3 on all seven linears, feedforward gate/up/down "
        "(adapter_config.json @ 7285473c)"),
    "prompt_tuning/llama-3.2-3B-default": (
        {"peft_virtual_tokens": 200}, "200 virtual tokens (prompt_tuning/llama-3.2-3B-lr_0.001 "
        "adapter_config.json @ 1948110c, the same num_virtual_tokens; 614,400 trainable = 200 "
        "x 3072)"),
    "prompt_tuning/llama-3.2-3B-lr_0.001": (
        {"peft_virtual_tokens": 200}, "200 virtual tokens (adapter_config.json @ 1948110c)"),
    "prompt_tuning/llama-3.2-3B-sample_vocab-lr_0.001": (
        {"peft_virtual_tokens": 200}, "200 virtual tokens (adapter_config.json @ 94043349)"),
    "prefixtuning/llama-3.2-3B-lr_0.001": (
        {"peft_virtual_tokens": 200}, "200 virtual tokens, no projection (adapter_config.json "
        "@ d9e56aa7)"),
    "prefixtuning/llama-3.2-3B-lr_0.005_zero_init": (
        {"peft_virtual_tokens": 200}, "200 virtual tokens (adapter_config.json @ da87a2a6)"),
    "prefixtuning/llama-3.2-3B-tokens50-init_prefix-lr_0.005": (
        {"peft_virtual_tokens": 50}, "50 virtual tokens (adapter_config.json @ c6fb3164)"),
    "lokr/llama-3.2-3B-rank32-factor4-lr0.003": (
        {"lokr_decompose_factor": 4}, "LoKr decompose_factor 4, decompose_both false "
        "(adapter_config.json @ 63a21ad1)"),
    "loha/llama-3.2-3B-rank32": ({}, "LoHa"),
    "vera/llama-3.2-3B-default": ({}, "VeRA (its A and B shared, frozen)"),
}
#: PEFT's MetaMathQA runs (method_comparison/MetaMathQA @ 5d602fdb): the training samples'
#: tokens (input_ids per sample: the template "Question: {query} Think step by step.\nAnswer:"
#: and the response, Llama-3.2's tokenizer, cut at max_seq_length). Mean: the row's "train total
#: tokens" (4,198,051) over its samples (20,000), less the EOS run.py adds to each (run.py
#: `total_tokens.append(sum(tokens_per_sample) + len(tokens_per_sample))`). Standard
#: deviation: SET FROM ONE RUN'S MEAN READING, the reference LoRA run's
#: (results/lora--llama-3.2-3B-rank32.json, row #377: train_info.accelerator_memory_reserved_avg,
#: 14,397,338,969 B, a figure no row compares): the spread at which this bucket model with the
#: estimate at every step's padded batch (`peft_mean_reading_bytes`) reads that mean, solved by
#: `python -m gpuhours_dev.validation.peft_spread` (69.6 tokens). Row #377 is thus tuned and
#: reported apart (TUNED_MEMORY_ROWS); the other runs' mean readings and every other row's
#: 99th-percentile figure are held out (tests/test_peft_lengths.py). The lengths themselves
#: (MetaMathQA through data.py's 1,300-character filter) are not in the published results
PEFT_SAMPLE_TOKENS_STD = 69.6
#: the spread the logged 250-step windows give (the 20 windows' mean tokens of
#: results/lora--llama-3.2-3B-rank32.json spread 2.99 tokens, x sqrt(1000 samples)), which
#: assumes the dataset's order mixes lengths independently (90% chi-square interval 72-130):
#: with what run.py holds (`_peft_held_output`) it puts the 99th-percentile batch at the
#: 768-token cap and reads the runs' mean readings 3-8% high; kept for the report
PEFT_WINDOW_TOKENS_STD = 94.7
#: the experiment whose mean reading sets PEFT_SAMPLE_TOKENS_STD, and its row
PEFT_SPREAD_EXPERIMENT = "lora--llama-3.2-3B-rank32.json"
PEFT_SPREAD_ROW = 377
_PEFT_TOKENS = re.compile(r"train total tokens=(\d+) over (\d+) samples")
#: run.py / utils.py @ 5d602fdb: BucketIterator takes batch_size x BUCKET_FACTOR (20) samples
#: in dataset order, sorts them longest first and yields batches padded to their longest
#: (tokenizer.pad); empty_cache() every ACCELERATOR_EMPTY_CACHE_SCHEDULE (10) steps
PEFT_BUCKET_BATCHES = 20
PEFT_EMPTY_CACHE_STEPS = 10


def peft_percentile_batch_tokens(mean: float, std: float, batch: int, cap: int,
                                 percentile: float = 99.0) -> tuple[int, float]:
    """(Padded tokens of the batch behind the benchmark's percentile reading, the sample-length
    quantile that batch's length sits at) for PEFT's MetaMathQA runs.

    The reading per step is memory_reserved() after the optimizer step (run.py @ 5d602fdb):
    the caching allocator keeps what a step reserved until empty_cache() every 10 steps. Each
    bucket of 20 batches starts right after an empty_cache() (20 is a multiple of 10) with its
    longest batch, padded to the longest of the bucket's 80 samples, so the 10 readings of the
    bucket's first half hold at least that batch's reserve and the second half's are of
    batches padded to the bucket's 41st longest. The top (100 - percentile)% of readings are
    thus the first halves of the top (100 - percentile) x 20 / 10 % of buckets: the bucket
    maximum at that quantile, which for independent samples is the sample quantile
    q_bucket^(1 / 80). Lengths: a log-normal of the mean and spread (estimate/lengths.py's
    shape), cut at `cap` (tokenize_with_answer truncates at model_max_length)."""
    q_bucket = 1 - (100 - percentile) / 100 * PEFT_BUCKET_BATCHES / PEFT_EMPTY_CACHE_STEPS
    q_sample = q_bucket ** (1 / (PEFT_BUCKET_BATCHES * batch))
    sigma2 = math.log1p((std / mean) ** 2)
    mu = math.log(mean) - sigma2 / 2
    tokens = math.exp(mu + math.sqrt(sigma2) * NormalDist().inv_cdf(q_sample))
    return min(cap, round(tokens)), q_sample


def _peft_batch_tokens(r: dict[str, str], seq: int, batch: int) -> tuple[int, str]:
    """(Sequence length to estimate at, note) of a PEFT MetaMathQA row: the padded batch behind
    its 99th-percentile reading (peft_percentile_batch_tokens); the row's cap where the row
    does not state its tokens."""
    m = _PEFT_TOKENS.search(r["notes"])
    if m is None or "padded to longest in batch" not in r["notes"]:
        return seq, ""
    mean = (int(m.group(1)) - int(m.group(2))) / int(m.group(2))
    tokens, q = peft_percentile_batch_tokens(mean, PEFT_SAMPLE_TOKENS_STD, batch, seq)
    where = (f"beyond it, so at the {seq}-token cap (truncation's bound)" if tokens == seq
             else f"{tokens} tokens")
    return tokens, (f"99th-percentile reading: memory_reserved() after a bucket's longest "
                    f"batch, kept until the next empty_cache() (run.py: 20-batch buckets "
                    f"sorted longest first, empty_cache every 10 steps), that batch padded "
                    f"to the {q:.4%} quantile of samples of {mean:.1f} +- "
                    f"{PEFT_SAMPLE_TOKENS_STD:g} tokens (log-normal, the spread set from "
                    f"#{PEFT_SPREAD_ROW}'s mean reading): {where}")


def peft_mean_reading_bytes(m: Mapped, mean: float, std: float, cap: int) -> float:
    """A PEFT MetaMathQA run's mean reading (train_info.accelerator_memory_reserved_avg) as
    run.py takes it: 20,000 samples (estimate/lengths.py's seeded log-normal of `mean` and
    `std`, cut at the row's `cap`, its max_seq_length) in buckets of 80 sorted longest first,
    batches of 4 padded to their longest, each step's reading the largest reserve since the
    last empty_cache (every 10 steps), a step's reserve the estimate's at its padded length
    (rounded up to 16 tokens: a few dozen estimates)."""
    from gpuhours.estimate.lengths import LengthDistribution

    t = m.training
    assert t is not None
    lengths = LengthDistribution(mean, std, cap, "truncate").sample(20_000)
    size = PEFT_BUCKET_BATCHES * t.micro_batch
    cache: dict[int, float] = {}

    def reserve(tokens: int) -> float:
        tokens = min(cap, -(-tokens // 16) * 16)
        if tokens not in cache:
            cache[tokens] = _predicted_memory(
                "reserved", t.model_copy(update={"seq_len": tokens}), 1, m.gpu)
        return cache[tokens]

    readings, held = [], 0.0
    for step in range(1, len(lengths) // t.micro_batch + 1):
        first = (step - 1) // PEFT_BUCKET_BATCHES * size
        bucket = sorted(lengths[first:first + size], reverse=True)
        k = (step - 1) % PEFT_BUCKET_BATCHES
        held = max(held, reserve(bucket[t.micro_batch * k]))
        readings.append(held)
        if step % PEFT_EMPTY_CACHE_STEPS == 0:
            held = 0.0
    return sum(readings) / len(readings)


def _peft_held_output(r: dict[str, str], arch: Any) -> tuple[dict[str, Any], list[str]]:
    """(setup fields, notes) of what PEFT's MetaMathQA loop keeps beyond the step's own
    tensors (run.py @ 5d602fdb, transformers 5.13.1 as the results record): `outputs =
    model(**batch)` is held through `loss.backward()` and the optimizer step, with the LM
    head's bf16 logits and, with no checkpointing (use_gc False), the DynamicCache that a
    training forward returns (use_cache=True); batches are padded to their longest
    (tokenizer.pad) and the attention mask passed, so transformers 5's SDPA on CUDA gets a
    mask, no enable_gqa (integrations/sdpa_attention.py use_gqa_in_sdpa): k and v repeated,
    and each layer's kernel keeps the mask as an additive bias (estimate/kv_repeat.py).
    Checked held out by the runs' allocated memory after the step (train_info.metrics
    "mem allocated avg", no row's figure): tests/test_peft_held_output.py."""
    gc = "use_gc=True" in r["notes"]
    fields: dict[str, Any] = {"held_logits": "half", "held_kv_cache": not gc,
                              "padding_mask": True,
                              "kv_repeated": arch.num_kv_heads < arch.num_heads}
    notes = ["run.py holds the model's output through backward and the step: its bf16 logits"
             + ("" if gc else " and the KV cache a training forward returns (use_cache)")
             + "; batches padded to their longest, mask passed: transformers 5's SDPA keeps "
             "a bias copy per layer" + (" and repeats k and v (no enable_gqa with a mask on "
                                        "CUDA)" if fields["kv_repeated"] else "")]
    return fields, notes


_PEFT_EXPERIMENT = re.compile(r"experiment (\S+);")
_PEFT_SIZE = re.compile(r'method-specific size params \{"r": (\d+)\}')


def _peft_method(r: dict[str, str]) -> tuple[dict[str, Any], str, str | None]:
    """(setup fields, note, why not expressible) of a PEFT-method row (PEFT_METHODS)."""
    method = PEFT_METHODS[r["method"]]
    m = _PEFT_EXPERIMENT.search(r["notes"])
    known = _PEFT_EXPERIMENTS.get(m.group(1)) if m else None
    if known is None:
        return {}, "", f"PEFT method {method}: experiment's setup not recorded"
    fields, note = dict(known[0]), known[1]
    fields["peft_method"] = method
    if method in ("loha", "lokr", "vera"):
        size = _PEFT_SIZE.search(r["notes"])
        if size is None:
            return {}, "", f"PEFT method {method}: rank not stated"
        fields["lora_rank"] = int(size.group(1))
    return fields, f"{note} (estimate/peft_methods.py)", None


def _base_quant(r: dict[str, str]) -> str:
    """The 4-bit base of a qlora row: a GPTQ or AWQ checkpoint, torchao's NF4 (torchtune), else
    bitsandbytes NF4, without double quantisation for litgpt's --quantize bnb.nf4 (bnb.nf4-dq
    turns it on)."""
    quant = r["quant"].lower()
    if quant == "bitsandbytes 8-bit":  # transformers' load_in_8bit: LLM.int8 Linear8bitLt
        return "int8-bnb"
    if "torchao" in quant or "torchtune nf4" in quant:
        return "nf4-torchao"
    if quant.startswith("bnb.nf4") and not quant.startswith("bnb.nf4-dq"):
        return "nf4-nodq"
    return "gptq-int4" if "gptq" in quant else "awq-int4" if "awq" in quant else "nf4"


def _method(r: dict[str, str]) -> tuple[str | None, str | None]:
    """(full/lora/qlora, why not expressible)."""
    m, quant = r["method"], r["quant"].lower()
    if m in METHOD_SKIPS:
        return None, METHOD_SKIPS[m]
    if m.startswith("PEFT fine-tune"):
        return None, "vendor table: LoRA/QLoRA settings, batch and sequence length not stated"
    if m == "lora (8-bit base)" and "bitsandbytes 8-bit" in quant:
        return "qlora", None  # LoRA on bitsandbytes' int8 base (base_quant int8-bnb)
    base = m.removesuffix(" (Hugging Face + FA2)").removesuffix(" (Unsloth)").removesuffix(
        " (unsloth)")
    base = {LORA_EMB: "lora", "gptq-lora": "lora", **dict.fromkeys(DORA, "lora"),
            **dict.fromkeys(PEFT_METHODS, "lora")}.get(base, base)
    if base not in ("full", "lora", "qlora"):
        return None, f"PEFT method other than LoRA ({m})"
    if "aqlm" in quant:
        return None, "quantised base other than 4-bit NF4, GPTQ or AWQ (AQLM 2-bit)"
    if "gptq" in quant or "awq" in quant:
        if "int8" in quant or "8-bit" in quant:
            return None, "quantised base other than 4-bit NF4, GPTQ or AWQ (GPTQ int8)"
        return "qlora", None
    if "quantiz" in quant:
        return None, "GaLore with weight quantisation not modelled"
    if "nf4" in quant or "4-bit" in quant or "int4 (bnb)" in quant:
        return "qlora", None
    if "8-bit" in quant or "int8" in quant:
        return None, "quantised base other than bnb 4-bit (int8)"
    return base, None


_ALL_LINEAR = {"q", "k", "v", "o", "gate", "up", "down"}
#: ms-swift's default LoRA targets ("swift DEFAULT target modules for this model type") of the
#: model types whose architecture the catalog has: register_model(..., LoRATM.llama2) for
#: yi-6b-chat, yi-34b-chat and openbuddy-zephyr-7b-chat, LoRATM.llama2 = ['q_proj', 'k_proj',
#: 'v_proj'] (swift/llm/utils/model.py @ ec63f250, Jan 2024, the benchmark's ms-swift)
_SWIFT_DEFAULT_TARGETS = {m: "q_proj,k_proj,v_proj"
                          for m in ("yi-6b-chat", "yi-34b-chat", "openbuddy-zephyr-7b-chat")}


#: how each source's DoRA runs (estimate/dora.py dora_base_matmul_of: reused without dropout)
_DORA_NOTES = {
    "PEFT": "DoRA as peft 0.19 runs it (lora_dropout 0 in the experiment's adapter_config.json "
            "@ 5d602fdb): the base output reused",
    "ms-swift": "DoRA through peft (swift's LoRA passes use_dora): a peft of April 2024, "
                "before 0.14, recomputes the base matmul (dora_base_matmul recompute)",
}
#: the sources whose peft recomputes DoRA's base matmul whatever the dropout (peft before 0.14)
_DORA_RECOMPUTE = frozenset({"ms-swift"})


def _lm_head_adapted(r: dict[str, str]) -> bool:
    """The row's targets name the LM head (litgpt's lora_head: "lm_head" in target_modules)."""
    head = re.split(r" \(|;", r["target_modules"])[0]
    return "lm_head" in (x.strip() for x in re.split(r",| \+ ", head))
_NAMES = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o", "output_proj": "o",
          "attn out proj": "o", "gate_proj": "gate", "up_proj": "up", "down_proj": "down",
          "q": "q", "k": "k", "v": "v", "o": "o", "gate": "gate", "up": "up", "down": "down",
          "mlp": "gate,up,down", "MLP": "gate,up,down", "lm_head": "lm_head",
          # Qwen-1 (modeling_qwen.py): c_attn is q, k and v fused; peft's suffix match puts
          # "c_proj" on both attn.c_proj (o) and mlp.c_proj (down); w2 is the gate, w1 the up
          "c_attn": "q,k,v", "c_proj": "o,down", "w1": "up", "w2": "gate"}


def _targets(r: dict[str, str], source: str) -> tuple[str | None, str, str | None]:
    """(lora_targets, assumption, why not expressible) from `target_modules`; an LM head among
    them is `_lm_head_adapted` (the setup's lora_lm_head)."""
    text = r["target_modules"]
    if text.startswith("swift DEFAULT"):
        text = _SWIFT_DEFAULT_TARGETS.get(r["model"], text)
    if not text:
        if source == "LLaMA-Factory (via Unsloth)":
            return "qv", "targets not stated: LLaMA-Factory's default then, q_proj,v_proj, " \
                         "assumed", None
        return None, "", "LoRA targets not stated"
    if "lora_target_linear=true" in text or text.startswith("ALL"):
        return "all-linear", "", None
    if text == "self_attn":
        return "attention", "", None
    head = re.split(r" \(|;", text)[0]
    parts = re.split(r",| \+ ", head)
    names: set[str] = set()
    for p in (x.strip() for x in parts):
        if p not in _NAMES:
            return None, "", f"LoRA targets not expressible ({head})"
        names |= set(_NAMES[p].split(","))
    note = ""
    names.discard("lm_head")
    if names == {"q", "v"}:
        return "qv", note, None
    if names == {"q", "k", "v", "o"}:
        return "attention", note, None
    if names == {"gate", "up", "down"}:
        return "mlp", note, None
    if names == _ALL_LINEAR:
        return "all-linear", note, None
    missing = _ALL_LINEAR - names
    if names >= {"q", "v", "gate", "up", "down"} and len(missing) == 1:
        extra = f"targets lack {missing.pop()}_proj: modelled as all-linear (one adapter more)"
        return "all-linear", "; ".join(x for x in (note, extra) if x), None
    if names == {"q", "k", "v"}:
        return "qkv", note, None
    return None, "", f"LoRA targets not expressible ({head})"


def _litgpt_repeats_kv(source: str, arch: Any) -> bool:
    """litgpt's CausalSelfAttention copies k and v to the query heads in training (k.expand
    then reshape, before the rotary cat and SDPA, which saves the copies): at 00af8b0d
    (model.py, config_hub) whenever the query groups are fewer than the heads; lit-gpt at
    8641822 (lit_gpt/model.py, the resource tables) only for grouped-query attention, not
    for one group (multi-query). Multi-head attention has nothing to repeat."""
    if arch.num_kv_heads == arch.num_heads:
        return False
    if source == "litgpt config_hub":
        return True
    return source == "litgpt resource tables" and arch.num_kv_heads != 1


def _litgpt_fused_qv(source: str, model: str, targets: str) -> tuple[str, str]:
    """(lora_targets, note) for litgpt's q,v LoRA on a model whose attention fuses q, k and v in
    one matrix (Falcon, GPT-NeoX): litgpt's LoRAQKVLinear (litgpt @ 00af8b0d lora.py; lit-gpt @
    8641822) adapts q and v inside the fused linear (enable_lora [q, -, v]: one dropout on the
    input, lora_A of 2r rows, lora_B of q + kv rows, r (2d + q + kv) parameters), which peft
    cannot do (no q_proj and v_proj there), so the estimator takes "qv" as q_proj and v_proj only.
    It is modelled as the fused qkv and o adapters ("attention"): r (q + 2 kv + 2d + q) parameters,
    one adapter more (o) on the same layer inputs. Other rows pass through."""
    if source not in ("litgpt config_hub", "litgpt resource tables") or targets != "qv":
        return targets, ""
    from gpuhours.estimate.lora import FUSED_QKV_TYPES

    if resolve_model(model)[0].model_type not in FUSED_QKV_TYPES:
        return targets, ""
    return "attention", ("litgpt's LoRAQKVLinear adapts q and v inside the fused qkv (one "
                         "dropout, lora_A of 2r rows): modelled as the fused qkv and o adapters "
                         "(one adapter more)")


def _optimizer(r: dict[str, str]) -> tuple[dict[str, Any], str, str | None]:
    """(Training fields, assumption, why not expressible); a bitsandbytes paged AdamW (the
    row's optimizer names it paged) with optimizer_paged (estimate/paged_optimizer.py)."""
    fields, note, why = _optimizer_fields(r)
    if "paged" in r["optimizer"].lower() and fields.get("optimizer") in ("adamw", "adamw-8bit"):
        fields = {**fields, "optimizer_paged": True}
        note = "; ".join(x for x in (note, "bitsandbytes' paged moments in CUDA managed memory, "
                                     "outside torch's allocator (optimizer_paged)") if x)
    return fields, note, why


def _optimizer_fields(r: dict[str, str]) -> tuple[dict[str, Any], str, str | None]:
    """(Training fields, assumption, why not expressible)."""
    o = r["optimizer"]
    low = o.lower()
    if "optimizer_in_bwd" in low or "fused into backward" in low:
        # torchtune's optimizer_in_bwd: one optimizer per parameter, stepped by its
        # post-accumulate-grad hook (estimate/optim_in_backward.py); the optimizer itself is
        # read from the rest of the text
        rest = re.sub(r"\s*(with optimizer_in_bwd=true \(config\)|fused into backward "
                      r"\(optimizer_in_bwd\))", "", o, flags=re.IGNORECASE)
        fields, note, why = _optimizer_fields({**r, "optimizer": rest})
        return ({**fields, "optimizer_in_backward": True},
                "; ".join(x for x in (note, "optimizer step in backward (optimizer_in_bwd)")
                          if x), why)
    if "lora-fa" in low:
        return {}, "", "LoRA-FA optimizer not modelled"
    if "4bit" in low:
        return {}, "", "4-bit optimizer states not modelled"
    if "cpu_offload" in low:  # torchtune's fsdp_cpu_offload=True: FSDP's CPUOffload (_offload)
        return {"optimizer": "adamw"}, "", None
    if low.startswith("adamw (implied"):  # torchtune's flags table: 8-bit comes in later rows
        return {"optimizer": "adamw"}, "", None
    if "8bit" in low or "8-bit" in low:
        return {"optimizer": "adamw-8bit"}, "", None
    if "pagedadamw" in low or "paged_adamw_32bit" in low:
        return ({"optimizer": "adamw", "optimizer_impl": "fused"},
                "bitsandbytes paged AdamW: fp32 states, one kernel (no foreach temporaries); "
                "with half adapters the moments are counted as torch AdamW's in the adapters' "
                "bf16, where bitsandbytes keeps fp32 (about 50 MB on these rows, not counted)",
                None)
    if "fused" in low:
        return {"optimizer": "adamw", "optimizer_impl": "fused"}, "", None
    if "adamw" in low or "adam" in low:
        return {"optimizer": "adamw"}, "", None
    return ({"optimizer": "adamw"}, "optimizer not stated: torch AdamW (foreach) assumed, "
            "the Trainer's default", None)


def _precision(r: dict[str, str]) -> tuple[str, str]:
    """(our precision, assumption). "bf16-true", bf16 weights with the Trainer's bf16 flag,
    torchtune's dtype=bf16: bf16 weights and states (a LoRA adapter stays fp32 in peft)."""
    p = r["precision"].lower()
    if "mixed (see notes)" in p:  # xtuner: AmpOptimWrapper float16 under DeepSpeed
        return "fp16-mixed", "DeepSpeed fp16 (AmpOptimWrapper float16): fp16 weights, fp32 master"
    if "bf16 mixed" in p:
        return "bf16-mixed", ""
    if p.startswith("fp16"):
        return "fp16", ""
    if "bf16" in p or "bfloat16" in p:
        return "bf16", ""
    if p == "16-bit" or p == "4-bit base weights":
        return "bf16", "16-bit compute: bf16 weights assumed"
    return "bf16", "precision not stated: bf16 weights assumed"


def _checkpointing(r: dict[str, str], source: str) -> tuple[bool | None, str, str | None]:
    """(activation checkpointing, assumption, why not expressible)."""
    g = r["grad_checkpointing"]
    if g.startswith("True"):
        return True, "", None
    if g.startswith("False"):
        return False, "", None
    if g == "offload":
        return None, "", "activation offload to CPU not modelled"
    if source == "LLaMA-Factory (via Unsloth)":
        return True, "checkpointing not stated: on assumed (LLaMA-Factory's default)", None
    return True, "checkpointing not stated: on assumed", None


def _offload(r: dict[str, str]) -> str:
    """FSDP's CPUOffload(offload_params=True) (Answer.AI's "FSDP CPU offload of params",
    torchtune's fsdp_cpu_offload=True) keeps the weights, their gradients and the optimizer
    step on the host: offload optimizer+params; "" for none."""
    if "CPU offload of params" in r["parallelism"] or "fsdp_cpu_offload=True" in r["optimizer"]:
        return "optimizer+params"
    return ""


def _parallel(r: dict[str, str], n: int) -> tuple[int, str, str | None]:
    """(ZeRO stage, assumption, why not expressible)."""
    p = r["parallelism"]
    if "offload" in p.lower() and "offload_params=False" not in p and not _offload(r):
        return 0, "", "CPU offload not modelled"
    if re.search(r"sequence parallel (size )?([2-9]|\d\d)", p):
        return 0, "", "sequence parallelism not modelled"
    if n == 1:
        return 0, "", None
    if "NO_SHARD" in p or p.startswith("DDP"):
        return 0, "", None
    if "FSDP" in p or "ZeRO-3" in p:
        return 3, "", None
    if "ZeRO stage not stated" in p and r["source"].startswith("InternLM/xtuner"):
        return 3, "DeepSpeed ZeRO stage not stated: ZeRO-3 assumed", None
    if "finetune_lora_ds.sh" in p and "ZeRO stage not stated" in p:
        return 2, "ZeRO stage not stated: finetune_lora_ds.sh's ds_config_zero2.json assumed", None
    return 0, "", "multi-GPU layout not stated"


def _zero3_engine(r: dict[str, str], source: str, method: str,
                  n: int = 1) -> tuple[str, str]:
    """(Training.zero3_engine, note): DeepSpeed's engine where the row runs ZeRO-3 through
    DeepSpeed: the Qwen README's full fine-tuning (finetune_ds.sh @ 2df8e8ac passes
    ds_config_zero3.json, on one GPU too) and the rows that state DeepSpeed ZeRO-3, and
    xtuner's ZeRO-3 (its runs are DeepSpeed's)."""
    p = r["parallelism"]
    if source == "Qwen" and method == "full":
        return "deepspeed", ("finetune_ds.sh's ds_config_zero3.json: DeepSpeed ZeRO-3 "
                             "(module hooks" + ("; one GPU: no gathers)" if n == 1 else ")"))
    if "DeepSpeed ZeRO-3" in p or ("ZeRO stage not stated" in p
                                   and r["source"].startswith("InternLM/xtuner")):
        return "deepspeed", "DeepSpeed's ZeRO-3 engine (module hooks)"
    return "fsdp", ""


#: torchtune's optimization-flags rows state what each cumulative row has switched on
_TORCHTUNE_STATE = re.compile(r"state: packed=(\w+), compile=(\w+), chunked CE=(\w+), "
                              r"activation offloading=(\w+)")


#: the loss of each torchtune config a row names (its notes: "recipes/configs/<config> at
#: <commit>"), read from that config at that commit (pytorch/torchtune). The llama3_1 configs at
#: 30b8519e8 (the README's "Memory and training speed" table) set `loss: _component_:
#: torchtune.modules.loss.CEWithChunkedOutputLoss` (the model then returns its logits in bf16,
#: in chunks), except 405B_qlora.yaml, which sets torch.nn.CrossEntropyLoss (TransformerDecoder
#: returns `output.float()`: transformers' fp32 upcast, "hf")
TORCHTUNE_CONFIG_LOSS: dict[tuple[str, str], str] = {
    ("llama3_1/8B_full_single_device.yaml", "30b8519e8"): "chunked",
    ("llama3_1/8B_lora_single_device.yaml", "30b8519e8"): "chunked",
    ("llama3_1/8B_qlora_single_device.yaml", "30b8519e8"): "chunked",
    ("llama3_1/70B_full.yaml", "30b8519e8"): "chunked",
    ("llama3_1/70B_lora.yaml", "30b8519e8"): "chunked",
    ("llama3_1/405B_qlora.yaml", "30b8519e8"): "hf",
}
#: the torchtune configs of the rows (at the commit they name) that shard the token embedding
#: and the LM head as FSDP units of their own: `custom_sharded_layers: ['tok_embeddings',
#: 'output']` (read in each config at 30b8519e8; 70B_lora.yaml and the single-device configs
#: set none, 405B_qlora.yaml neither)
TORCHTUNE_EMBEDDING_UNITS = frozenset({("llama3_1/70B_full.yaml", "30b8519e8")})
_TORCHTUNE_CONFIG = re.compile(r"recipes/configs/(\S+\.yaml) (?:at|@) (\w+)")


#: the torchtune configs (at the commit each row names) whose optimizer is torch.optim.AdamW
#: with `fused: True`, read in each config: the llama3_1 LoRA, QLoRA, 70B and 405B configs at
#: 30b8519e8 (the full single-device config runs bitsandbytes' PagedAdamW8bit instead), and
#: llama3_2/3B_lora_single_device.yaml and 3B_qlora_single_device.yaml at 1814feb17, which the
#: flags table's LoRA and QLoRA rows run (its command to reproduce the QLoRA row overrides
#: `optimizer._component_=torch.optim.AdamW` only: `fused: True` stays). The flags table's
#: full rows override the same key on 3B_full_single_device.yaml, which sets no `fused`:
#: torch's default, foreach
TORCHTUNE_FUSED_ADAMW = frozenset({
    ("llama3_1/8B_lora_single_device.yaml", "30b8519e8"),
    ("llama3_1/8B_qlora_single_device.yaml", "30b8519e8"),
    ("llama3_1/70B_full.yaml", "30b8519e8"),
    ("llama3_1/70B_lora.yaml", "30b8519e8"),
    ("llama3_1/405B_qlora.yaml", "30b8519e8"),
    ("llama3_2/3B_lora_single_device.yaml", "1814feb17"),
    ("llama3_2/3B_qlora_single_device.yaml", "1814feb17"),
})
_TORCHTUNE_FLAGS_LORA = re.compile(r"(llama3_2/3B_)\(q\)(lora_single_device\.yaml) at (\w+)")


def torchtune_fused_adamw(r: dict[str, str], method: str) -> bool:
    """The row's torchtune config sets torch.optim.AdamW with fused: True
    (TORCHTUNE_FUSED_ADAMW): the config its notes name, or for the flags table's LoRA and
    QLoRA rows the one its targets name ("llama3_2/3B_(q)lora_single_device.yaml")."""
    m = _TORCHTUNE_CONFIG.search(r["notes"])
    if m:
        return (m.group(1), m.group(2)) in TORCHTUNE_FUSED_ADAMW
    flags = _TORCHTUNE_FLAGS_LORA.search(r["target_modules"])
    if not flags or method not in ("lora", "qlora"):
        return False
    config = f"{flags.group(1)}{'q' if method == 'qlora' else ''}{flags.group(2)}"
    return (config, flags.group(3)) in TORCHTUNE_FUSED_ADAMW


def _torchtune_loss(r: dict[str, str]) -> tuple[str | None, str]:
    """(loss kernel, note) of a torchtune row whose config is in TORCHTUNE_CONFIG_LOSS, else
    (None, "")."""
    m = _TORCHTUNE_CONFIG.search(r["notes"])
    if not m or (m.group(1), m.group(2)) not in TORCHTUNE_CONFIG_LOSS:
        return None, ""
    kernel = TORCHTUNE_CONFIG_LOSS[(m.group(1), m.group(2))]
    what = ("CEWithChunkedOutputLoss" if kernel == "chunked"
            else "torch.nn.CrossEntropyLoss on fp32 logits")
    return kernel, f"loss from {m.group(1)} at {m.group(2)}: {what}"


#: axolotl's plugin that replaces the loss with Apple's Cut Cross-Entropy (the row's notes list
#: the config's plugins): the logits never materialise (loss_kernel "cut-ce")
_AXOLOTL_CCE = "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"
#: axolotl configs (at 067b021c, the README's commit) that set `activation_offloading: true`:
#: TRL's OffloadActivations moves the tensors saved for backward (under checkpointing, the
#: layer inputs) to the host. Not modelled: those inputs are counted on the GPU (an upper bound)
AXOLOTL_ACTIVATION_OFFLOAD = frozenset({
    "examples/gpt-oss/gpt-oss-20b-sft-lora-singlegpu.yaml",
    "examples/gpt-oss/gpt-oss-20b-fft-fsdp2.yaml",
})
_AXOLOTL_CONFIG = re.compile(r"config (\S+\.yaml)")


def _axolotl_notes(r: dict[str, str], source: str) -> tuple[str | None, str]:
    """(loss kernel, note) of an axolotl row: cut-ce where its config loads the Cut
    Cross-Entropy plugin; the note says where the config offloads activations."""
    if source != "axolotl":
        return None, ""
    config = _AXOLOTL_CONFIG.search(r["notes"])
    offload = ("activation_offloading: true in the config: not modelled (the checkpointed layer "
               "inputs are counted on the GPU, an upper bound)"
               if config and config.group(1) in AXOLOTL_ACTIVATION_OFFLOAD else "")
    if _AXOLOTL_CCE in r["notes"]:
        return "cut-ce", "; ".join(x for x in ("CutCrossEntropyPlugin: Cut Cross-Entropy loss",
                                               offload) if x)
    return None, offload


#: a training script that computes its loss with Apple's Cut Cross-Entropy itself (the row's notes
#: name the call, as read in the script: Scicom small-ablation train.py @ 0c7398b)
_CCE_CALL = "cut_cross_entropy.linear_cross_entropy"
#: ... or with Liger's fused linear cross-entropy (Scicom small-ablation train.py @ 9d56463: its
#: model's forward calls LigerFusedLinearCrossEntropyLoss on the last hidden state)
_FLCE_CALL = "LigerFusedLinearCrossEntropyLoss"
#: Liger's RoPE, SwiGLU and RMSNorm kernels patched in (apply_liger_kernel_to_*, all three set
#: True, as the rows' notes read the script: Scicom small-ablation train.py @ 9d56463 calls
#: apply_liger_kernel_to_qwen3(rope=True, swiglu=True, rms_norm=True, ...) at import, before
#: the model is built, so the class-wide patch reaches the per-head q/k norms too):
#: Training.liger_kernels (estimate/liger.py)
_LIGER_PATCH = "apply_liger_kernel_to_"
#: packed rows whose documents attend only within themselves (flash-attn varlen over cu_seq_lens)
_VARLEN = "cu_seq_lens"
#: a script run with transformers' attn_implementation "flash_attention_3" (Scicom small-ablation
#: simple-throughput-multigpus h100.sh and h200.sh @ 9d56463 pass --attn_implementation
#: flash_attention_3; install.sh installs the flash_attn_3 wheel): FlashAttention-3's Hopper
#: kernels (warp-specialised, softmax overlapped with the matmuls), Training.fused_attention,
#: where the same script's l40s.sh (no flag: train.py's default flash_attention_2) runs FA2
_FA3 = "attention flash_attention_3"


def _script_notes(r: dict[str, str]) -> tuple[str | None, str]:
    """(loss kernel, note) of a row whose notes state what its training script runs: cut-ce where
    the script calls Cut Cross-Entropy, fused-linear where it calls Liger's fused linear
    cross-entropy; the note says what the estimate does not model (attention within packed
    documents) and where Liger's fused RoPE, SwiGLU and RMSNorm are patched in (map_row sets
    liger_kernels where _LIGER_PATCH is in the notes)."""
    notes = []
    kernel = None
    if _CCE_CALL in r["notes"]:
        kernel = "cut-ce"
        notes.append("the script's loss is Cut Cross-Entropy (linear_cross_entropy): the logits "
                     "never materialise")
    elif _FLCE_CALL in r["notes"]:
        kernel = "fused-linear"
        notes.append("the script's loss is Liger's fused linear cross-entropy: the logits never "
                     "materialise")
    if _LIGER_PATCH in r["notes"]:
        notes.append("Liger's RoPE, SwiGLU and RMSNorm kernels patched in before the model "
                     "is built (liger_kernels classes: what they save, move and issue, "
                     "estimate/liger.py)")
    if _VARLEN in r["notes"]:
        notes.append("packed rows, attention within each document (varlen): attention counted over "
                     "the whole row (an upper bound on its work)")
    if _FA3 in r["notes"]:
        notes.append("attn_implementation flash_attention_3: FlashAttention-3's kernels "
                     "(fused_attention)")
    return kernel, "; ".join(notes)


#: what Unsloth's code runs for each source that ran it (estimate/unsloth.py has the code read)
UNSLOTH_STACKS: dict[str, str] = {
    "Unsloth docs (capacity)": (
        "Unsloth of Dec 2024 (unsloth d9ed4bef, unsloth-zoo 9c643b66; the Llama 3.3 release "
        "the table comes from): its LoRA Functions on q/k/v, o and the MLP; offloaded "
        "gradient checkpointing (the docs: 'our gradient checkpointing algorithm', "
        "use_gradient_checkpointing=\"unsloth\"); Cut Cross-Entropy above 1,024 tokens "
        "(llama.py: bsz*q_len > 1024 and cut_cross_entropy, an unsloth-zoo dependency)"),
    "ms-swift": (
        "ms-swift c23b853c7 (2024-04-26, which added the unsloth row) calls Unsloth's "
        "get_peft_model with use_gradient_checkpointing=True (checkpoints on the GPU) and its "
        "lora_dropout_p default 0.05, so Unsloth (4a885399) patches no LoRA group (fast "
        "patching needs dropout 0): peft's adapters in Unsloth's layer; tuner_params '' are "
        "ms-swift's defaults, rank 8 on DEFAULT targets, q/k/v for llama (4.7186M trainable "
        "parameters = 32 x 8 x 18,432); tuner.json's use_loss_scale (issue 14): swift's "
        "compute_loss pops the labels, so Unsloth's CausalLM_fast_forward (llama.py @ "
        "4a885399) returns the bf16 logits and computes no fused loss, and swift's "
        "compute_scaled_loss takes accelerate's fp32 copy (swift/trainers/trainers.py @ "
        "c23b853c7): the tuners rows' hf tensors, not Unsloth's cross-entropy. Lengths vary "
        "but are not replayed: ms-swift's token counts are Qwen's tokenizer's, and Llama 3's "
        "run dropped 13.8% of 89,100 samples above 2048 tokens (76,839 kept) where Qwen's "
        "dropped 1.7%"),
    "LLaMA-Factory (via Unsloth)": (
        "LLaMA-Factory 6faf9c35a (2023-12-23) requires unsloth==2023.12 and calls its "
        "get_peft_model (ef70177a): checkpointing on (use_gradient_checkpointing=True), "
        "dropout 0 (2023.12 refuses any other), the LoRA Functions only on fully adapted "
        "groups (none for q,v), Unsloth's Triton cross-entropy"),
}


def unsloth_stack(r: dict[str, str], source: str) -> tuple[dict[str, Any], str]:
    """(Training fields, note) of a row that ran Unsloth ({}, "" otherwise): kernels unsloth,
    with what its caller's code chose (UNSLOTH_STACKS)."""
    if "unsloth" not in r["method"].lower() and "Method=Unsloth" not in r["notes"]:
        return {}, ""
    fields: dict[str, Any] = {"kernels": "unsloth", "checkpointing": True,
                              "loss_kernel": "unsloth-ce"}
    if source == "Unsloth docs (capacity)":
        tokens = int(r["seq_len"] or 0) * int(r["per_device_batch"] or 1)
        fields |= {"checkpoint_offload": True,
                   "loss_kernel": "cut-ce" if tokens > 1024 else "unsloth-ce"}
    elif source == "ms-swift":
        fields["lora_dropout"] = 0.05
        if "Tuners-style table" in r["notes"]:  # use_loss_scale: labels popped (see the note)
            fields["loss_kernel"] = "hf"
        if "tuner_params ''" in r["notes"] and not r["lora_r"]:
            fields |= {"lora_rank": 8, "target_modules": "q,k,v"}
    elif source == "LLaMA-Factory (via Unsloth)":
        fields["lora_dropout"] = 0.0
    return fields, UNSLOTH_STACKS.get(source, "")


def _int(text: str) -> int | None:
    return int(text) if text.strip() else None


#: ms-swift's bitsandbytes rows of the cls-fudan-news tables (run at 97e4d198b, 2024-01-02):
#: get_model_tokenizer_qwen sets the config's bf16 flag but passes torch_dtype=None to
#: from_pretrained (swift/llm/utils/model.py, from 232a22b32 of 2023-12-23 until f52dfd35c
#: "fix bnb qwen bug" of 2024-01-06 passed it for bitsandbytes); transformers of the time
#: replaces None with float16 for a bitsandbytes model, casts each unquantised tensor to it and
#: puts it on the GPU as it is (integrations/bitsandbytes.py set_module_quantized_tensor_to_device:
#: `value.to(device)`, no cast back to the module's bf16), while the Trainer runs bf16 autocast
_SWIFT_FP16_HEAD = (
    "ms-swift at 97e4d198b loads the bitsandbytes model with torch_dtype None, so transformers "
    "loads the unquantised weights in the fp16 it forces, under the Trainer's bf16 autocast: "
    "autocast's bf16 copy of the LM head kept for its backward (head_weight_cast)")


def map_row(i: int, r: dict[str, str]) -> Mapped:
    """The setup of data row `i` (1-based), or the reason it cannot be expressed."""
    source = source_name(r["source"])
    label = f"#{i} {r['model']} {r['method']}"
    n = _int(r["n_gpus"]) or 1
    base: dict[str, Any] = dict(row=i, source=source, citation=r["source"], label=label,
                                num_gpus=n)
    notes: list[str] = []

    def skip(why: str, method: str = r["method"]) -> Mapped:
        return Mapped(**base, method=method, training=None, gpu=None, gpu_is_size_only=False,
                      setup="", skipped=why)

    if source == "HF blog":
        return skip("time approximate (~13.5 h, kept in notes only); no memory figure")
    if source in MEGATRON_SOURCES:
        return _megatron_row(base, r)
    method, why = _method(r)
    if method is None:
        return skip(why or "method not expressible")
    checkpoint = _litgpt_checkpoint(source, r)
    if checkpoint is not None:
        model, model_note = checkpoint
    elif r["model"] in MODELS:
        model, model_note = MODELS[r["model"]]
    else:  # a catalog name, alias or Hugging Face id as the row writes it
        entry = _catalog_entry(r["model"])
        if entry is None:
            return skip(f"model not in catalog ({r['model']})", method)
        model, model_note = entry, ""
    notes.append(model_note)
    if not r["seq_len"] or not r["per_device_batch"]:
        return skip("sequence length or batch not stated", method)
    stage, par_note, why = _parallel(r, n)
    if why:
        return skip(why, method)
    notes.append(par_note)
    engine, engine_note = _zero3_engine(r, source, method, n)
    if engine == "deepspeed":
        stage = 3
    notes.append(engine_note)
    opt, opt_note, why = _optimizer(r)
    if why:
        return skip(why, method)
    notes.append(opt_note)
    ckpt, ckpt_note, why = _checkpointing(r, source)
    if why or ckpt is None:
        return skip(why or "checkpointing", method)
    notes.append(ckpt_note)
    precision, prec_note = _precision(r)
    notes.append(prec_note)
    deepspeed = "deepspeed" in r["parallelism"].lower()
    if method == "full" and precision in ("bf16", "fp16"):
        precision, ds_note = _deepspeed_precision(r, source, precision)
        notes.append(ds_note)
        deepspeed = deepspeed or "DeepSpeed" in ds_note
    stack, stack_note = unsloth_stack(r, source)
    notes.append(stack_note)
    lora: dict[str, Any] = {}
    if method != "full" and "-bdlora" in r["source"]:
        # PEFT's method_comparison experiment "...-bdlora": block-diagonal LoRA factors (8.43M
        # trainable parameters at rank 14 where plain LoRA has 13.25M), not peft's LoRA
        return skip("BD-LoRA (block-diagonal LoRA factors) not modelled", method)
    if method != "full" and stack.get("lora_rank"):  # stated by ms-swift's defaults
        r = {**r, "lora_r": str(stack.pop("lora_rank")),
             "target_modules": str(stack.pop("target_modules"))}
    peft_fields: dict[str, Any] = {}
    if method != "full" and r["method"] in PEFT_METHODS:
        peft_fields, peft_note, why = _peft_method(r)
        if why:
            return skip(why, method)
        notes.append(peft_note)
        r = {**r, "lora_r": str(peft_fields.pop("lora_rank", 16)),
             "target_modules": r["target_modules"] if peft_fields["peft_method"] in (
                 "loha", "lokr", "vera") else "q_proj,v_proj"}  # targets unused by the others
    if method != "full":
        targets, t_note, why = _targets(r, source)
        if why or targets is None:
            return skip(why or "targets", method)
        targets, fused_note = _litgpt_fused_qv(source, model, targets)
        notes.append(fused_note)
        if not r["lora_r"]:
            return skip("LoRA rank not stated", method)
        lora = {"lora_rank": int(r["lora_r"]), "lora_targets": targets,
                "lora_trainable_embeddings": r["method"] == LORA_EMB,
                "lora_lm_head": _lm_head_adapted(r), "dora": r["method"] in DORA,
                **peft_fields}
        if lora["dora"]:
            notes.append(_DORA_NOTES[source])
            if source in _DORA_RECOMPUTE:
                lora["dora_base_matmul"] = "recompute"
        dropout, dropout_note = _lora_dropout(r, source)
        if "lora_dropout" in stack:
            dropout, dropout_note = stack.pop("lora_dropout"), ""
        lora["lora_dropout"] = dropout
        branch = _LORA_BRANCH.get("compiled" if _compiled(r) else source)
        if branch:
            lora["lora_branch"] = branch[0]
            notes.append(branch[1])
        notes.append(t_note)
        notes.append(dropout_note)
        if method == "qlora":
            lora["base_quant"] = _base_quant(r)
            no_upcast = _NO_KBIT_UPCAST.get(source)
            if no_upcast:
                lora["kbit_upcast"] = False
                notes.append(no_upcast)
            if (source == "ms-swift" and lora["base_quant"] == "nf4"
                    and "Tuners-style table" not in r["notes"]):
                lora["head_weight_cast"] = True
                notes.append(_SWIFT_FP16_HEAD)
            lightning = _LIGHTNING_BNB.get(source)
            if lightning and lora["base_quant"] in ("nf4", "nf4-nodq"):
                lora["bnb_saved_input"], why = lightning
                lora["lm_head_4bit"] = True
                notes.append(why)
        if "torchao" in r["quant"] or "torchtune NF4" in r["quant"]:
            notes.append("torchao NF4 (torchtune): its LinearNF4 keeps no input for backward")
    state = _TORCHTUNE_STATE.search(r["notes"])
    act_offload = bool(state and state.group(4) == "True")
    if act_offload:
        notes.append("torchtune's OffloadActivations: the checkpointed layer inputs in pinned "
                     "host memory (activation_offload)")
    loss_kernel = "chunked" if state and state.group(3) == "True" else "hf"
    if source in ("litgpt config_hub", "litgpt resource tables"):
        # litgpt's finetune scripts (finetune/lora.py and full.py @ 00af8b0d; lit-gpt @
        # 8641822): the model runs wrapped by Lightning Fabric, whose precision plugin casts
        # its output to fp32 (wrappers.py _FabricModule.forward -> convert_output, Lightning
        # @ 71aed751 and 2.4.0), and utils.chunked_cross_entropy runs F.cross_entropy by 128
        # positions on those fp32 logits, held by the loop through backward
        loss_kernel = "chunked-fabric"
        notes.append("litgpt's loss under Lightning Fabric: the head's bf16 output cast to "
                     "fp32 by Fabric's convert_output, cross-entropy by 128 positions on it "
                     "(lm_head_chunk_size=128 in the LoRA scripts, the whole head in full.py; "
                     "chunked_cross_entropy)")
    for config_loss, loss_note in (_torchtune_loss(r), _axolotl_notes(r, source), _script_notes(r)):
        loss_kernel = config_loss or loss_kernel
        notes.append(loss_note)
    if deepspeed and resolve_model(model)[0].model_type == "qwen":
        # DeepSpeed's fp16/bf16 engine casts the model and runs no torch.autocast, and Qwen-1's
        # loss is CrossEntropyLoss on the half-precision logits (no .float())
        loss_kernel = "half"
        notes.append("Qwen-1's loss on half-precision logits under DeepSpeed (no autocast)")
    elif source == "ms-swift" and "Tuners-style table" in r["notes"]:
        # tuner.json's use_loss_scale: swift's compute_loss pops the labels (Qwen-1 computes no
        # loss) and compute_scaled_loss runs CrossEntropyLoss(reduction='none') outside
        # autocast on accelerate's fp32 copy of the logits (swift/trainers/trainers.py @
        # 254122ca1): the half logits, their fp32 copy, an fp32 log-softmax: hf's tensors
        notes.append("use_loss_scale: swift's compute_scaled_loss on accelerate's fp32 copy of "
                     "the logits, outside autocast (hf's tensors; its boolean-mask copy of "
                     "the labelled positions left out)")
    elif (resolve_model(model)[0].model_type == "qwen" and precision in ("bf16", "fp16")
          and loss_kernel == "hf"):
        # transformers' Trainer with its bf16/fp16 flag: accelerate wraps the forward in
        # autocast and convert_outputs_to_fp32, and Qwen-1's own loss takes the half-precision
        # logits (modeling_qwen.py: no .float()): setup.LossKernel half-amp
        loss_kernel = "half-amp"
        notes.append("Qwen-1's loss on its half-precision logits inside accelerate's autocast "
                     "(log-softmax in half, nll_loss's fp32 cast) and accelerate's fp32 copy "
                     "of the returned logits (loss kernel half-amp)")
    buckets, bucket_note = _deepspeed_buckets(r, source)
    notes.append(bucket_note)
    kernels = "eager"
    if resolve_model(model)[0].model_type == "qwen" and "flash attention" in r["notes"].lower():
        # Qwen-1's remote code calls flash-attn itself, with its fused rotary and RMSNorm
        # (modeling_qwen.py; estimate/host.py counts that path's operators)
        kernels = "flash-attn"
        notes.append("Qwen-1's code with flash-attn: fused rotary and RMSNorm")
    attention, attention_note = _swift_no_flash(r, source, model)
    notes.append(attention_note)
    accum = _int(r["grad_accum"])
    if accum is None:
        accum = 1
        notes.append("gradient accumulation not stated: 1 assumed")
    gpu, gpu_size_only, gpu_note = _gpu(r["gpu"])
    notes.append(gpu_note)
    lengths, replay, length_note = _swift_lengths(r, source, int(r["seq_len"]),
                                                  int(r["per_device_batch"]))
    notes.append(length_note)
    seq = int(r["seq_len"])
    if source == "PEFT":
        seq, seq_note = _peft_batch_tokens(r, seq, int(r["per_device_batch"]))
        notes.append(seq_note)
    swift_fp32 = source == "ms-swift" and "Tuners-style table" in r["notes"]
    if swift_fp32:
        notes.append("ms-swift's tuners table (added 2024-04-11): its lora_dtype default was "
                     "'fp32' from 2024-01-04 (e848ec062) to 2024-04-29 (2accb9bbe): fp32 "
                     "adapters")
    peft_fp32 = _peft_before_0_7(r, source) if method == "lora" else None
    notes.append(peft_fp32 or "")
    if (method != "full" and source in _HALF_ADAPTERS and precision in ("bf16", "fp16")
            and not deepspeed and not swift_fp32 and not peft_fp32
            and (method == "lora" or source in _HALF_QLORA_ADAPTERS)):
        lora["lora_adapter_dtype"] = "half"
        notes.append(_HALF_ADAPTERS[source])
    if source == "Qwen" and engine == "deepspeed" and opt == {"optimizer": "adamw"}:
        # ds_config_zero3.json's "optimizer": {"type": "AdamW"} block: the engine builds
        # DeepSpeed's FusedAdam (engine.py _configure_basic_optimizer @ v0.12.3), no foreach
        opt = {**opt, "optimizer_impl": "fused"}
        notes.append("ds_config_zero3.json's optimizer block: DeepSpeed's FusedAdam "
                     "(engine._configure_basic_optimizer), stepping one 1e9-element sub "
                     "group at a time (sub_group_size; estimate/deepspeed_step.py)")
    if (source == "torchtune" and opt == {"optimizer": "adamw"} and not _offload(r)
            and torchtune_fused_adamw(r, method)):
        opt = {**opt, "optimizer_impl": "fused"}
        notes.append("the config's torch.optim.AdamW sets fused: True (one kernel, no "
                     "foreach temporaries)")
    if source in _TORCH_2_0 and not deepspeed and opt == {"optimizer": "adamw"}:
        opt = {**opt, "optimizer_impl": "foreach-2.0"}
        notes.append(_TORCH_2_0[source])
    held = "fp32" if source == "Answer.AI" else "none"
    if held != "none":
        notes.append("train.py holds the model's output, its fp32 logits (transformers of "
                     "early 2024: logits.float() in the model), through loss.backward()")
    offload = _offload(r)
    if offload:
        notes.append("FSDP CPUOffload(offload_params=True): weights, gradients and the "
                     "optimizer step on the host (offload optimizer+params)")
    # fsdp_qlora train.py (@ 05ed9f2, fsdp_main; low_memory True by default): rank 0 loads to
    # the CPU (QLoRA quantised on the GPU, then empty_cache), FSDP copies, broadcasts
    # (sync_module_states), flattens and shards each unit; 'ddp' is the same with NO_SHARD.
    # Not with CPUOffload(offload_params=True), whose shards go back to the host: not modelled
    load_path = "fsdp-flatten" if source == "Answer.AI" and not offload else "from-pretrained"
    if load_path != "from-pretrained":
        notes.append("train.py's loading (low_memory: rank 0 on the CPU, FSDP copies, "
                     "broadcasts, flattens and shards each unit): the freed copies stay "
                     "cached, replayed (load_path fsdp-flatten)")
    # litgpt's loops (litgpt @ 00af8b0d finetune/full.py and lora.py; lit-gpt @ 8641822
    # finetune/lora.py) run each accumulating micro-batch under fabric.no_backward_sync, which
    # Lightning's FSDPStrategy makes FSDP.no_sync() (use_orig_params=True by default): every
    # Block unit keeps its whole unsharded gradient, frozen base included for LoRA
    no_sync = (source in ("litgpt config_hub", "litgpt resource tables") and stage == 3
               and accum > 1 and n > 1 and method != "qlora")  # qlora: not modelled
    if no_sync:
        notes.append("litgpt's loop accumulates under fabric.no_backward_sync, FSDP.no_sync() "
                     "with use_orig_params (Lightning's default): each Block unit's gradient "
                     "held unsharded through the micro-batches, over its frozen base too for "
                     "LoRA (fsdp_grad_accum no-sync)")
    # fsdp_qlora train.py (@ 05ed9f2 and the Feb-Mar 2024 commits the benchmarks ran) wraps
    # peft's model with a lambda policy on each leaf with a trainable weight: every lora_A and
    # lora_B Linear its own FSDP unit inside its layer's, with limit_all_gathers=True
    # (estimate/parallel.py, the note above fsdp_adapter_unit_collectives)
    adapter_units = source == "Answer.AI" and stage == 3 and method != "full"
    # torchtune's recipes shard with FSDP2 (torchtune/training/_distributed.py shard_model @
    # 30b8519e8: fully_shard per layer and on the root, CPUOffloadPolicy for fsdp_cpu_offload);
    # the others run FSDP1 (Answer.AI's FullyShardedDataParallel, Lightning's FSDPStrategy)
    fsdp_api = "fsdp2" if source == "torchtune" else "fsdp1"
    config = _TORCHTUNE_CONFIG.search(r["notes"])
    embedding_units = (source == "torchtune" and stage == 3 and config is not None
                       and (config.group(1), config.group(2)) in TORCHTUNE_EMBEDDING_UNITS)
    if embedding_units:
        notes.append("the config's custom_sharded_layers ['tok_embeddings', 'output']: the "
                     "embedding and the head FSDP units of their own (fsdp_embedding_units)")
    if adapter_units:
        notes.append("train.py wraps each lora_A and lora_B as an FSDP unit of its own "
                     "(lambda_auto_wrap_policy on trainable leaves) under limit_all_gathers: "
                     "FSDP's rate limiter hides none of the layers' gathers "
                     "(fsdp_adapter_units)")
    # Answer.AI's 3090 rig: "an older motherboard and slow PCI lanes" (benchmarks_03_2024.md,
    # against the 4090 workstation's "full PCIe v4 x16 lanes"); the catalog's host-staged
    # figure for the card was measured on x16 PCIe 4.0 slots. Two cards on a consumer CPU's 16
    # lanes run x8 each (the same rate as x16 PCIe 3.0): assumed, the lanes are not stated
    lanes = 8 if source == "Answer.AI" and "RTX 3090" in r["gpu"] else None
    if lanes:
        notes.append("the rig's 'older motherboard and slow PCI lanes' (benchmarks_03_2024.md): "
                     "two cards on a consumer CPU's 16 lanes, x8 each, assumed (pcie_lanes 8; "
                     "the catalog's 16.5 GB/s host-staged figure is for x16 PCIe 4.0 slots)")
    arch, _ = resolve_model(model)
    if source in ("litgpt config_hub", "litgpt resource tables") and arch.tie_embeddings:
        # litgpt @ 00af8b0d ties nothing (model.py: lm_head is its own nn.Linear), and
        # convert_hf_checkpoint.py copies the embedding into lm_head.weight when the checkpoint
        # has none: a tied model runs with an untied copy of its head
        arch = dataclasses.replace(arch, tie_embeddings=False)
        notes.append("litgpt's model has no tied embeddings: the LM head is its own copy of "
                     "the embedding (convert_hf_checkpoint.py)")
    if source in ("litgpt config_hub", "litgpt resource tables") and arch.activation_extra_saved:
        # litgpt @ 00af8b0d model.py GptNeoxMLP (phi's MLP there; lit-gpt @ 8641822 the same):
        # torch.nn.functional.gelu(x, approximate="tanh"), torch's native kernel, which keeps
        # only its input, where transformers' NewGELUActivation (gelu_new) is a Python composite
        arch = dataclasses.replace(arch, activation_extra_saved=0)
        notes.append("litgpt's MLP calls torch's native F.gelu(approximate='tanh'): no "
                     "composite GELU intermediates")
    if _compiled(r):
        notes.append("torch.compile (the row's notes): compiled layers and loss "
                     "(estimate/compiled.py)")
    # torchtune's MultiHeadAttention (at 30b8519e8 and 1814feb17) expands k and v to the query
    # heads before SDPA, which saves the copies (estimate/kv_repeat.py)
    kv_repeated = source == "torchtune"
    if kv_repeated:
        notes.append("torchtune's attention repeats k and v to the query heads before SDPA "
                     "(kv_repeated)")
    elif _litgpt_repeats_kv(source, arch):
        kv_repeated = True
        notes.append("litgpt's attention expands k and v to the query heads and reshapes "
                     "them (copies) before SDPA (kv_repeated)")
    held_output: dict[str, Any] = {}
    if source == "PEFT" and "padded to longest in batch" in r["notes"]:
        held_output, held_notes = _peft_held_output(r, arch)
        kv_repeated = kv_repeated or held_output.pop("kv_repeated")
        notes.extend(held_notes)
    # Unsloth's stack sets its own kernels, checkpointing and loss (unsloth_stack)
    kernels = stack.pop("kernels", kernels)
    ckpt = stack.pop("checkpointing", ckpt)
    loss_kernel = stack.pop("loss_kernel", loss_kernel)
    micro_batch, mb_note = run_micro_batch(r, source)
    notes.append(mb_note)
    per_node = QWEN_MULTINODE_GPUS_PER_NODE if qwen_multinode(r, source) else 8
    if qwen_multinode(r, source):
        notes.append(f"{n // per_node} servers x {per_node} GPUs (the README); the network "
                     "between them not stated: Hardware's default")
    try:
        t = Training.model_validate(dict(
            arch=arch, model=model, method=method, precision=precision, compile=_compiled(r),
            kv_repeated=kv_repeated, activation_offload=act_offload,
            fused_attention=_FA3 in r["notes"],
            liger_kernels="classes" if _LIGER_PATCH in r["notes"] else "none",
            micro_batch=micro_batch, seq_len=seq,
            grad_accum=accum, checkpointing=ckpt, zero_stage=stage, loss_kernel=loss_kernel,
            **stack,
            offload=offload or "none", deepspeed_reduce_bucket=buckets,
            held_logits=held_output.pop("held_logits", held), **held_output,
            deepspeed_overlap_comm=True if buckets else None,
            kernels=kernels, zero3_engine=engine, load_path=load_path, **attention,
            fsdp_grad_accum="no-sync" if no_sync else "reduce-scatter",
            fsdp_adapter_units=adapter_units, fsdp_api=fsdp_api,
            fsdp_embedding_units=embedding_units, **lengths, **opt,
            **lora))
    except FieldError as e:
        return skip(f"the estimator refuses the setup: {e}", method)
    setup = _describe(t, n, gpu, gpu_size_only) + "".join(f"; {x}" for x in notes if x)
    return Mapped(**base, method=method, training=t, gpu=gpu, gpu_is_size_only=gpu_size_only,
                  setup=setup, skipped=None, replay_micro_batches=replay, pcie_lanes=lanes,
                  gpus_per_node=per_node)


#: the systems of the Megatron-Core rows: (GPUs of one NVLink domain, catalog node whose network
#: joins them or None, what it is). DGX-GB200 is the GB200 NVL72 rack: 72 Blackwell GPUs on one
#: NVLink 5 switch fabric (NVIDIA GB200 NVL72 product page: "72 Blackwell GPUs ... a single
#: NVLink domain"); the rows use at most 32. dgxc-benchmarking runs 8 H100 a node
#: (RUN_CONF_GPUS_PER_NODE 8), its network not stated: the DGX H100's (catalog node dgx-h100)
MEGATRON_SYSTEMS: dict[str, tuple[int, str | None, str]] = {
    "GB200 (DGX-GB200)": (72, None, "DGX-GB200: GB200 NVL72, 72 GPUs in one NVLink 5 domain"),
    "H100 (DGX Cloud recipe; 80 GB, variant not stated)": (
        8, "dgx-h100", "8 GPUs a node; network between nodes not stated: the DGX H100's "
                       "(catalog node dgx-h100, 400 Gb/s per GPU) assumed"),
}
_LAYOUT = re.compile(r"\b(TP|PP|CP|VP|DP)=(\d+)")
#: Megatron-Core's LoRA target names (megatron/bridge/peft/lora.py) in gpuhours' terms
_MEGATRON_TARGETS = {"linear_qkv": "q,k,v", "linear_proj": "o", "linear_fc1": "gate,up",
                     "linear_fc2": "down"}


def _megatron_row(base: dict[str, Any], r: dict[str, str]) -> Mapped:
    """A row of a Megatron-Core stack (Megatron-Bridge's performance tables, NeMo 2's recipes
    run by dgxc-benchmarking; Transformer Engine's layers): its stated TP (with sequence
    parallelism), PP, CP, VP and data-parallel size, the distributed optimizer where the row
    states it (fp32 main params and moments sharded over the data-parallel ranks: ZeRO-1),
    Transformer Engine's tensor-parallel communication overlap where stated, recomputation as
    stated (none in these recipes), cuDNN's fused attention, Megatron's fused LoRA adapters;
    "FP8" and "MXFP8" (block-scaled) run the decoder linears' GEMMs in fp8: fp8-mixed, the block
    scaling's own cost not modelled. The layout in the row is the one its preset or script sets
    (the row's source names it)."""
    method = r["method"]
    n = int(r["n_gpus"])
    notes: list[str] = []

    def skip(why: str) -> Mapped:
        return Mapped(**base, method=method, training=None, gpu=None, gpu_is_size_only=False,
                      setup="", skipped=why)

    if r["gpu"] not in GPUS or r["gpu"] not in MEGATRON_SYSTEMS:
        return skip(f"GPU not in catalog ({r['gpu']})")
    model, model_note = MODELS[r["model"]]
    layout = {k: int(v) for k, v in _LAYOUT.findall(r["parallelism"])}
    tp, pp, cp, vp = (layout.get(k, 1) for k in ("TP", "PP", "CP", "VP"))
    dp = n // (tp * pp * cp)
    if layout.get("DP", dp) != dp:
        return skip(f"layout does not multiply out to {n} GPUs ({r['parallelism']})")
    precision = "fp8-mixed" if "fp8" in r["precision"].lower() else "bf16-mixed"
    distributed = ("distributed optimizer" in r["parallelism"]
                   and "no distributed optimizer" not in r["parallelism"])
    overlap = tp > 1 and "tp_comm_overlap True" in r["parallelism"]
    if precision == "fp8-mixed":
        # Megatron-Bridge's bf16_with_fp8_current_scaling_mixed and bf16_with_mxfp8_mixed
        # (src/megatron/bridge/training/mixed_precision.py @ 63b08b39) and NeMo 2's
        # bf16_with_fp8_mixed (nemo/collections/llm/recipes/precision/mixed_precision.py:
        # fp8_params / fp8_param_gather True) build the layers' weights as fp8 tensors
        notes.append("fp8 weights (fp8_param_gather: the recipe's fp8 precision config)")
    if r["precision"].startswith("MXFP8"):
        notes.append("MXFP8: block-scaled fp8 GEMMs costed at the fp8 rate (the scaling's own "
                     "work not modelled)")
    lora: dict[str, Any] = {}
    if method == "lora":
        head = r["target_modules"].split(" (")[0]
        names = set(",".join(_MEGATRON_TARGETS[x.strip()] for x in head.split(",")).split(","))
        if names == {"q", "k", "v"}:
            targets = "attention"
            notes.append("LoRA on linear_qkv only: modelled as q,k,v,o (one adapter more, on "
                         "the output projection: about 0.03% of a layer's weights)")
        elif names == _ALL_LINEAR:
            targets = "all-linear"
        else:  # pragma: no cover - no such row
            return skip(f"LoRA targets not expressible ({head})")
        lora = {"lora_rank": int(r["lora_r"]), "lora_targets": targets}
    # Megatron-Core's optimizer "adam" is Transformer Engine's (else apex's) FusedAdam, a
    # multi-tensor kernel that updates in place (megatron/core/optimizer/__init__.py at
    # NVIDIA/Megatron-LM@b997545c, the commit dgxc-benchmarking's setup.sh checks out, and at
    # d98e8a64): no foreach temporaries
    notes.append("Megatron-Core's Adam: Transformer Engine's FusedAdam (fused, in place)")
    loss, loss_note = _megatron_loss_kernel(r["source"], method)
    notes.append(loss_note)
    mb = int(r["per_device_batch"])
    scope, graphs = _megatron_graphs(r, model, method, {
        "tensor": tp, "pipeline": pp, "context": cp, "vp": vp, "micro": mb,
        "global": mb * int(r["grad_accum"]) * dp})
    notes.append(graphs)
    gpus_per_node, node, system = MEGATRON_SYSTEMS[r["gpu"]]
    net = None
    if node is not None:
        from gpuhours import catalog

        net = catalog.node(node).inter_node_gb_per_s_one_way
    notes.append(system)
    gpu, _, gpu_note = _gpu(r["gpu"])
    notes.append(gpu_note)
    notes.append(model_note)
    arch, basis = resolve_model(model)
    try:
        t = Training.model_validate(dict(
            arch=arch, model=model, model_basis=basis, method=method, precision=precision,
            micro_batch=int(r["per_device_batch"]), seq_len=int(r["seq_len"]),
            grad_accum=int(r["grad_accum"]), checkpointing=r["grad_checkpointing"]
            .startswith("True"), kernels="megatron", fused_attention=True,
            zero_stage=1 if dp > 1 and distributed else 0, tp=tp, pp=pp, cp=cp,
            virtual_stages=vp, tp_comm_overlap=overlap, optimizer="adamw",
            optimizer_impl="fused", loss_kernel=loss, fp8_params=precision == "fp8-mixed",
            cuda_graph_scope=scope, **lora))
    except FieldError as e:
        return skip(f"the estimator refuses the setup: {e}")
    where = (f"{n} x {gpu.name if gpu else r['gpu']}, tp {tp} pp {pp} cp {cp} vp {vp} dp {dp}"
             f"{' (distributed optimizer: ZeRO-1)' if t.zero_stage else ''}"
             f"{', tp-comm overlap' if overlap else ''}")
    desc = (f"{method}{f' r{t.lora_rank} {t.lora_targets}' if method == 'lora' else ''}, "
            f"megatron kernels, {precision}, micro-batch {t.micro_batch} x {t.seq_len} x "
            f"accumulation {t.grad_accum}, checkpointing {'on' if t.checkpointing else 'off'}, "
            f"{where}")
    setup = desc + "".join(f"; {x}" for x in notes if x)
    return Mapped(**base, method=method, training=t, gpu=gpu, gpu_is_size_only=False,
                  setup=setup, skipped=None, gpus_per_node=gpus_per_node,
                  inter_node_gb_per_s_one_way=net)


def _megatron_graphs(r: dict[str, str], model: str, method: str, layout: dict[str, int]
                     ) -> tuple[tuple[str, ...] | None, str]:
    """(Training.cuda_graph_scope, the setup's note) of a Megatron-Core row: Megatron-Bridge's
    from its recipe at 067f987d (recipe_graphs.recipe_graph_scope: llama3_70b_sft_32gpu_gb200_*
    and llama3_70b_peft_8gpu_gb200_*, cuda_graph_impl transformer_engine with scope mlp; the
    26.06 presets the rows name, LLAMA3_70B_{SFT,LORA}_CONFIG_GB200_* in scripts/performance/
    configs/llama/llama3_workload_base_configs.py @ 63b08b397, set the same); dgxc-benchmarking's
    NeMo 2 rows are not read from a recipe and stay ungraphed."""
    if "Megatron-Bridge" not in r["source"]:
        return None, "CUDA graphs not read (not a Megatron-Bridge recipe): left ungraphed"
    precision = r["precision"].split(" (")[0]
    return recipe_graph_scope(model, r["gpu"].split(" (")[0].lower(), int(r["n_gpus"]),
                              precision, "peft" if method == "lora" else "sft", layout)


def _megatron_loss_kernel(citation: str, method: str) -> tuple[str, str]:
    """The cross-entropy a Megatron row's stack runs (setup.LossKernel), with why.

    Megatron-Bridge 26.06 (NVIDIA-NeMo/Megatron-Bridge@63b08b39): the SFT recipe
    (recipes/llama/llama3.py llama3_70b_sft_config) sets cross_entropy_loss_fusion True and the
    performance scripts' common overrides (scripts/performance/utils/overrides.py
    _set_common_perf_overrides) cross_entropy_fusion_impl "te": Transformer Engine's kernel;
    the PEFT recipe (llama3_70b_peft_config) sets the fusion off: Megatron-Core's vocab-parallel
    cross-entropy. dgxc-benchmarking's NeMo 2: GPTConfig's cross_entropy_loss_fusion True
    (nemo/collections/llm/gpt/model/base.py), Megatron-Core @ b997545c's
    fused_vocab_parallel_cross_entropy, which keeps the same tensors as the unfused one."""
    if "Megatron-Bridge" in citation and method == "full":
        return "te", ("loss: Transformer Engine's cross-entropy (Megatron-Bridge's SFT recipe "
                      "and performance overrides)")
    if "Megatron-Bridge" in citation:
        return "megatron", ("loss: Megatron-Core's vocab-parallel cross-entropy (the PEFT "
                            "recipe turns the fusion off)")
    return "megatron", ("loss: Megatron-Core's fused vocab-parallel cross-entropy (NeMo 2's "
                        "cross_entropy_loss_fusion default)")


#: how the LoRA branch runs (Training.lora_branch), by source, where not its default (peft's
#: eager operators with fp32 adapters unless DeepSpeed or FSDP casts the model), with why;
#: "compiled": any row run with torch.compile
_LORA_BRANCH = {
    "Answer.AI": ("peft-half", "adapters in bf16: fsdp_qlora train.py (@ 05ed9f2) wraps peft's "
                  "model in FSDP with use_orig_params=False ('ddp' is NO_SHARD), whose flat "
                  "parameters hold one dtype, and peft of early 2024 (0.6-0.11) casts the "
                  "adapters to the base weight's dtype"),
    "torchtune": ("peft-half", "torchtune's own LoRALinear in the model's bf16: peft's eager "
                  "operators without the cast"),
    "compiled": ("fused", "LoRA branch costed fused: torch.compile fuses its elementwise "
                 "operators"),
}


def _compiled(r: dict[str, str]) -> bool:
    """The row ran under torch.compile, as its notes say: torchtune's README tables ("torch.compile
    enabled", the optimization-flags rows' "compile=True" state), axolotl's torch_compile=True,
    the Scicom script's --torch-compile."""
    notes = r["notes"]
    return ("compile=True" in notes or "torch.compile enabled" in notes
            or "torch_compile=True" in notes)


def _swift_no_flash(r: dict[str, str], source: str, model: str
                    ) -> tuple[dict[str, Any], str]:
    """(Training fields, note) of an ms-swift row run with flash_attn=False (the Batch Size
    table's "Use Flash Attn & Gradient Checkpointing" section): swift passes use_flash_attn to
    Qwen-1's config (swift/llm/utils/model.py @ ec63f250 get_model_tokenizer_qwen:
    model_config.use_flash_attn = use_flash_attn), and Qwen-1's attention then calls torch's
    scaled_dot_product_attention with its additive mask expanded to S x S (modeling_qwen.py of
    Dec 2023, as ms-swift @ cb89d9191 carries it: QWenAttention.forward, `not
    self.use_cache_quantization and SUPPORT_TORCH2`). The rows ran torch 2.1.1, whose flash
    kernel takes no mask: the math fallback keeps softmax's output in bf16, the
    memory-efficient kernel the mask expanded to every head and padded to 16 columns
    (attention.cpp preprocess_mask / pad_bias): 2 bytes per score either way
    (Training.eager_attention sdpa-mask)."""
    if (source != "ms-swift" or "flash_attn=False" not in r["notes"]
            or resolve_model(model)[0].model_type != "qwen"):
        return {}, ""
    return ({"flash_attention": False, "eager_attention": "sdpa-mask"},
            "flash_attn=False: Qwen-1's SDPA call with its additive mask on torch 2.1.1 "
            "(no flash kernel takes a mask): the scores kept once in bf16 per layer "
            "(eager_attention sdpa-mask)")


#: ms-swift's benchmark (scripts/benchmark/test_memory_time/run_single.py @ ec63f250):
#: train_dataset_sample = 1000 "# save time", the whole dataset (-1) when max_length <= 2048;
#: one epoch (SftArguments num_train_epochs 1). The dataset, cls-fudan-news-zh, has 4000 training
#: samples (the dataset card of swift/zh_cls_fudan-news: train num_rows 4000)
SWIFT_DATASET_SAMPLES = 4000
SWIFT_SAMPLE_CAP = 1000
_SWIFT_TOKENS = re.compile(r"tokens/sample ([0-9.]+)\+-([0-9.]+)")


def _swift_lengths(r: dict[str, str], source: str, seq: int, batch: int
                   ) -> tuple[dict[str, Any], int | None, str]:
    """(Training fields, micro-batches of the run, note) for a row whose samples vary in
    length: ms-swift's, whose notes state the dataset's tokens per sample (mean +- standard
    deviation) and truncation_strategy 'delete' (longer samples dropped). The run's
    micro-batches: the samples taken (run_single.py) that are not dropped, as the log-normal of
    that mean and spread puts them, over the batch."""
    if source == "ms-swift" and "Tuners-style table" in r["notes"]:
        return _swift_tuner_lengths(r, seq, batch)
    m = _SWIFT_TOKENS.search(r["notes"])
    if source != "ms-swift" or m is None or "truncation_strategy default 'delete'" not in r["notes"]:
        return {}, None, ""
    from gpuhours.estimate.lengths import LengthDistribution

    mean, std = float(m.group(1)), float(m.group(2))
    taken = SWIFT_DATASET_SAMPLES if seq <= 2048 else SWIFT_SAMPLE_CAP
    kept = LengthDistribution(mean, std, seq).kept_fraction()
    micro_batches = max(1, round(taken * kept / batch))
    note = (f"samples of {mean:g} +- {std:g} tokens (log-normal), longer than {seq} dropped: "
            f"reserved from an allocator replay of the run's {micro_batches} micro-batches "
            f"({taken} samples taken, {kept:.1%} kept; ms-swift's run_single.py); live tensors "
            f"at a full-length micro-batch")
    return ({"seq_len_mean": mean, "seq_len_std": std, "long_samples": "drop"},
            micro_batches, note)


#: ms-swift's tuners table (scripts/benchmark/config/tuner.json @ cdb169b78): dataset ms-agent
#: with train_dataset_mix_ratio 2.0 of train_dataset_mix_ds, default ['ms-bench'] (swift/llm/
#: utils/argument.py @ 254122ca1, 2024-04-11: handle_dataset_mixture adds int(len(train) x
#: ratio) ms-bench samples); dataset_test_ratio 0.01 of ms-agent's 30000 samples held out;
#: max_length 2048, truncation_strategy default 'delete'; packing off unless the row says so.
#: Tokens per sample (mean, standard deviation) as ms-swift's docs state them
#: (docs/source_en/LLM/Supported-models-datasets.md @ 254122ca1, made by
#: scripts/utils/run_dataset_info.py with qwen-7b-chat's tokenizer and template)
SWIFT_MS_AGENT_TOKENS = (647.7, 217.1)
SWIFT_MS_BENCH_TOKENS = (345.0, 441.3)
SWIFT_MS_AGENT_TRAIN = 30000 * (1 - 0.01)
_SWIFT_MIX = re.compile(r"dataset ms-agent \(ms-bench mix ratio ([0-9.]+)\)")
_SWIFT_SAMPLES = re.compile(r"speed cell '[0-9.]+\(([0-9]+) samples/")
_SWIFT_EPOCHS = re.compile(r"epoch=([0-9]+)")


def swift_mix_tokens(ratio: float) -> tuple[float, float]:
    """(Mean, standard deviation) of tokens per sample of ms-agent mixed with `ratio` times
    as many ms-bench samples: the two sets' moments combined (law of total variance)."""
    (ma, sa), (mb, sb) = SWIFT_MS_AGENT_TOKENS, SWIFT_MS_BENCH_TOKENS
    wa, wb = 1 / (1 + ratio), ratio / (1 + ratio)
    mean = wa * ma + wb * mb
    var = wa * (sa**2 + ma**2) + wb * (sb**2 + mb**2) - mean**2
    return mean, var**0.5


def _swift_tuner_lengths(r: dict[str, str], seq: int, batch: int
                         ) -> tuple[dict[str, Any], int | None, str]:
    """The tuners table's rows on qwen-7b-chat without packing: ms-agent + ms-bench lengths
    (their moments combined, one log-normal: an assumption, the mixture has two modes),
    longer than max_length dropped; the run's micro-batches from the speed cell's samples
    (len(train_dataset), swift/llm/sft.py get_time_info) x the epochs, replayed up to the
    estimate's own bound (fragmentation.replay_micro_batches: a bound on time)."""
    from gpuhours.estimate.fragmentation import replay_micro_batches

    notes = r["notes"]
    mix, samples = _SWIFT_MIX.search(notes), _SWIFT_SAMPLES.search(notes)
    epochs = _SWIFT_EPOCHS.search(notes)
    if (r["model"] != "qwen-7b-chat" or "packing=True" in notes or mix is None
            or samples is None or epochs is None):
        return {}, None, ""
    mean, std = swift_mix_tokens(float(mix.group(1)))
    run = int(samples.group(1)) * int(epochs.group(1)) // batch
    layers = resolve_model("qwen-7b")[0].num_layers  # the row model's catalog name
    replayed = replay_micro_batches(layers, run)
    note = (f"ms-agent + {float(mix.group(1)):g}x ms-bench samples, {mean:.0f} +- {std:.0f} "
            f"tokens (ms-swift's dataset table, moments combined; one log-normal), longer than "
            f"{seq} dropped: reserved from an allocator replay of {replayed} of the run's "
            f"{run} micro-batches (the estimate's bound on replay time; the whole run's would "
            f"reserve more); live tensors at a full-length micro-batch")
    return ({"seq_len_mean": round(mean, 1), "seq_len_std": round(std, 1),
             "long_samples": "drop"}, replayed, note)


#: sources whose QLoRA does not run peft's prepare_model_for_kbit_training (the unquantised
#: weights and the residual stream stay in half precision), with what they run instead
_NO_KBIT_UPCAST = {
    "litgpt config_hub": "litgpt's own LoRA on Lightning's BitsandbytesPrecision (no peft): "
                         "unquantised weights in bf16",
    "litgpt resource tables": "lit-gpt's own LoRA on Lightning's BitsandbytesPrecision (no "
                              "peft): unquantised weights in bf16",
    "Answer.AI": "fsdp_qlora train.py loads its own Linear4bit model (no peft k-bit "
                 "preparation): unquantised weights in bf16",
    "LLaMA-Factory (via Unsloth)": "LLaMA-Factory of Dec 2023 (79f301a2, model/utils.py "
                                   "prepare_model_for_training): no peft k-bit preparation, "
                                   "layernorm upcast off by default: unquantised weights in bf16",
    "torchtune": "torchtune (no peft): unquantised weights in bf16",
    "ms-swift": "ms-swift of Jan 2024 (97e4d198b, ec63f250: swift/llm/sft.py loads the 4-bit "
                "model and calls its own prepare_model, never peft's "
                "prepare_model_for_kbit_training): unquantised weights in half "
                "precision",
}

_LIGHTNING_HEAD = ("Lightning's BitsandbytesPrecision makes the LM head 4-bit too (quantised "
                   "from fp16: a dequantised fp16 copy and its bf16 cast at each head matmul)")
#: sources that run QLoRA on Lightning's BitsandbytesPrecision with bitsandbytes before 0.43.2
#: under a loop that holds the previous micro-batch's graph (setup.bnb_saved_input, and
#: lm_head_4bit), with why: lit-gpt of 2023 keeps `loss` a tensor (held up to the next loss),
#: litgpt of 2024 turns it into a float each iteration (log_interval 1) and `logits` alone
#: holds the graph through the next forward (a reviewer's read of both loops)
_LIGHTNING_BNB = {
    "litgpt config_hub": (
        "held-output", "bitsandbytes 0.42.0 (litgpt's pyproject pin at 00af8b0d) keeps each "
        "4-bit linear's input as a ctx attribute, and finetune/lora.py keeps `logits` into the "
        "next micro-batch (its `loss` becomes a float at log_interval 1): the previous "
        "micro-batch's inputs and logits are alive through the next forward; " + _LIGHTNING_HEAD),
    # lit-gpt @ 8641822 finetune/lora.py: get_batch(..., longest_seq_ix if iter_num == 0)
    # puts the longest sample in the first micro-batch, which sets the peak; no earlier
    # micro-batch is held then
    "litgpt resource tables": (
        "step", "bitsandbytes of 2023 keeps each 4-bit linear's input as a ctx attribute, and "
        "lit-gpt's finetune/lora.py (@ 8641822) keeps `logits` and `loss` tensors into the next "
        "micro-batch, but the micro-batch that sets the peak is the first (get_batch forces "
        "the longest sample into iteration 0), when no earlier one is held: the inputs "
        "counted for its own backward only (bnb_saved_input step; a later micro-batch holds "
        "the previous one's inputs beside a shorter random batch, not modelled); "
        + _LIGHTNING_HEAD),
}

#: sources whose LoRA adapters are in the half-precision base's dtype (setup.lora_adapter_dtype
#: "half"), with why; elsewhere peft's fp32 adapters (from v0.12). Rows under DeepSpeed keep
#: fp32: its engine casts the module to half and keeps fp32 master weights and moments, the
#: fp32 adapters' byte count
_HALF_ADAPTERS = {
    "Answer.AI": "peft of March 2024 (before v0.12): update_layer put the adapters in the "
                 "base's dtype, bf16 with the 4-bit weights stored in bf16 (train.py)",
    "torchtune": "torchtune's LoRALinear is built in the model's bf16 (training."
                 "set_default_dtype)",
    "ms-swift": "ms-swift's benchmark tables of Dec 2023-Jan 2024 ran peft 0.6-0.7 (before "
                "v0.12; its later requirements, framework.txt @ cdb169b78, pin >=0.11,<0.12) "
                "and left the adapters' dtype to peft (swift/llm/tuner.py): adapters in the "
                "base's bf16",
    "litgpt config_hub": "litgpt's LoRA parameters are made in bf16-true's dtype "
                         "(fabric.init_module)",
    "litgpt resource tables": "lit-gpt's LoRA parameters are made in bf16-true's dtype "
                              "(fabric.init_module)",
}

#: Qwen's README table, by model: the commit that published the figures the rows read, and its
#: date (git log -S of each figure in QwenLM/Qwen README.md): 7B and 14B on 2023-10-11
#: (e6f2a7a, remeasured with flash-attn 2 and split into LoRA / LoRA (emb) after b5fad3d's
#: first table of 2023-10-07), 1.8B and 72B on 2023-11-30 (e8e1596)
_QWEN_FIGURES_PUBLISHED = {"Qwen-7B": ("e6f2a7a", "2023-10-11"),
                           "Qwen-14B": ("e6f2a7a", "2023-10-11"),
                           "Qwen-1.8B": ("e8e1596", "2023-11-30"),
                           "Qwen-72B": ("e8e1596", "2023-11-30")}

#: peft v0.7.0's release (the v0.7.0 tag in huggingface/peft): before it, a LoRA layer was
#: built as a new module whose adapters were fp32 nn.Linear modules moved to the base weight's
#: device only. v0.5.0 (src/peft/tuners/lora.py: update_layer `self.to(self.weight.device)`,
#: _replace_module `module.to(child.weight.device)`); v0.6.x (tuners/lora/layer.py: Linear
#: runs nn.Module's __init__, so update_layer finds no `weight` to take the dtype of, and
#: model.py _replace_module moves by device). v0.7.0 wraps the base layer (`base_layer`), whose
#: weight's dtype update_layer then takes: half adapters on a half base
PEFT_0_7_RELEASED = "2023-12-06"


def _peft_before_0_7(r: dict[str, str], source: str) -> str | None:
    """Why the row's LoRA adapters are fp32 (peft before 0.7), or None. Qwen's README of
    October-November 2023 installs peft unpinned (`pip install peft deepspeed` @ b5fad3d and
    e8e1596; "peft<0.8.0" only from d40742b, 2024-02-01), so the peft of the figures' date is
    taken: an assumption, the README names no version."""
    if source != "Qwen":
        return None
    size = re.match(r"Qwen-[0-9.]+B", r["model"])
    commit, date = _QWEN_FIGURES_PUBLISHED.get(size.group(0) if size else "", ("", ""))
    if not date or date >= PEFT_0_7_RELEASED:
        return None
    return (f"figures published {date} ({commit}), before peft 0.7.0 ({PEFT_0_7_RELEASED}; the "
            "README installs peft unpinned): fp32 adapters (peft 0.5-0.6 build each adapter "
            "fp32 and move it by device only)")


#: sources whose stated stack runs torch 2.0's foreach AdamW where no DeepSpeed engine steps
#: (setup optimizer_impl foreach-2.0: two state-sized sets of temporaries, estimate/
#: adamw_temporaries.py), with why
_TORCH_2_0 = {
    "Qwen": "PyTorch 2.0 (the README: \"we use CUDA 11.8 and Pytorch 2.0\"): the Trainer's "
            "adamw_torch is torch 2.0's foreach AdamW, two state-sized temporaries at once "
            "(foreach-2.0; pytorch#104898 made it one in 2.1)",
}

#: of those, the sources whose QLoRA adapters are half too: peft up to 0.11 cast an adapter to
#: its base layer's dtype only when that is a float (update_layer: "weight.dtype.
#: is_floating_point"), and a bitsandbytes 4-bit layer stores uint8 (a GPTQ one int32), so peft's
#: QLoRA adapters stayed fp32 there, except where the 4-bit storage is bf16 (Answer.AI's
#: bnb_4bit_quant_storage for FSDP); litgpt's and torchtune's own LoRA are bf16 either way
_HALF_QLORA_ADAPTERS = frozenset({"Answer.AI", "torchtune", "litgpt config_hub",
                                  "litgpt resource tables"})

_DROPOUT = re.compile(r"(?:lora_dropout=|dropout )([0-9.]+)")


def _lora_dropout(r: dict[str, str], source: str) -> tuple[float, str]:
    """(LoRA dropout, assumption): as the row's notes state it (ms-swift's and litgpt's
    lora_dropout, Answer.AI's train.py default), Qwen's finetune.py default (LoraArguments
    lora_dropout 0.05, which its scripts keep), else 0 (peft's default), said so."""
    m = _DROPOUT.search(r["notes"])
    if m:
        return float(m.group(1)), ""
    if source == "Qwen":
        return 0.05, "LoRA dropout 0.05 (Qwen's finetune.py default)"
    return 0.0, "LoRA dropout not stated: none counted (peft's default)"


#: Qwen's finetune/ds_config_zero2.json @ 2df8e8ac: "reduce_bucket_size": 2e8,
#: "overlap_comm": true, "contiguous_gradients": true (the config its QLoRA single-GPU script
#: and, ZeRO stage not stated, its finetune_lora_ds.sh pass)
QWEN_ZERO2_REDUCE_BUCKET = 200_000_000


#: the checkpoint a litgpt config_hub config fine-tunes (its checkpoint_dir, in the row's notes)
_LITGPT_CHECKPOINT = re.compile(r"checkpoint checkpoints/([^\s;]+)")


def _litgpt_checkpoint(source: str, r: dict[str, str]) -> tuple[str, str] | None:
    """(catalog name, note) of the checkpoint a litgpt config_hub row's config names
    (checkpoint_dir), where the catalog has it and the table's model column names another: the
    README table @ 00af8b0d labels the gemma2-2b/lora.yaml and gemma2b/qlora.yaml runs
    "gemma-2b", and both configs fine-tune checkpoints/google/gemma-2-2b. None otherwise."""
    if source != "litgpt config_hub":
        return None
    m = _LITGPT_CHECKPOINT.search(r["notes"])
    name = _catalog_entry(m.group(1)) if m else None
    shown = MODELS[r["model"]][0] if r["model"] in MODELS else _catalog_entry(r["model"])
    if name is None or name == shown:
        return None
    return name, (f"the config fine-tunes {m.group(1) if m else ''} (its checkpoint_dir; the "
                  f"table's model column says {r['model']})")


def _catalog_entry(name: str) -> str | None:
    """The catalog's name for `name` (a name, alias or Hugging Face id, as catalog.model reads
    it), or None when the catalog has no such model."""
    from gpuhours import catalog
    from gpuhours.errors import InputError

    try:
        entry, _ = catalog.model(name)
    except InputError:
        return None
    return entry.name if entry is not None else None


#: The per-GPU micro-batch of the Qwen README's "LoRA (multinode)" rows (#146-#151; Qwen-7B,
#: 2 servers x 2 A100-SXM4-80G, added by 35023b6, 2023-12-27). The README states no batch for
#: them beyond "the rest of configurations are the same as other Qwen-7B experiments" (batch 1
#: 'uniformly'), and names finetune/finetune_lora_ds.sh, which at that commit passes
#: --per_device_train_batch_size 2 (so do finetune_lora_single_gpu.sh and the others since
#: b5fad3d; only finetune_ds.sh passes 1). Read as 2, the script's value, on the rows' own
#: memory, a figure the throughput comparison does not use: the README's memory summed over
#: the 4 GPUs, divided by 4, grows by 20.2 GB from 256 to 8192 tokens, where the estimate's
#: device reading at batch 2 grows by 20.6 GB and at batch 1 by 12.7 (the single-GPU Qwen-7B
#: LoRA rows, batch 1 as stated: 16.5 measured, 19.6 estimated). At 1 the step, 1.74-2.1 times
#: the single-GPU step at each length, has no mechanism in the estimate: the ZeRO-2 traffic of
#: the adapters' gradients is fixed per micro-batch, and the measured gap grows with the tokens
#: (0.9 s a step at 256 tokens, 16.1 s at 8192). `python -m gpuhours_dev.validation.qwen_multinode`
#: prints the check. Set to 1 to compare the rows as the README's text states them.
QWEN_MULTINODE_MICRO_BATCH = 2
#: GPUs per server of those rows: "two servers, each containing two A100-SXM4-80G GPUs"
#: (README @ 35023b6); the network between them is not stated (Hardware's default assumed)
QWEN_MULTINODE_GPUS_PER_NODE = 2


def qwen_multinode(r: dict[str, str], source: str) -> bool:
    """Whether the row is one of the Qwen README's "LoRA (multinode)" rows."""
    return source == "Qwen" and r["parallelism"].startswith("multi-node: 2 nodes x 2 GPUs")


def run_micro_batch(r: dict[str, str], source: str) -> tuple[int, str]:
    """(sequences per micro-batch per GPU as run, note): the row's, but for the Qwen multinode
    rows (QWEN_MULTINODE_MICRO_BATCH, the script's)."""
    if qwen_multinode(r, source) and QWEN_MULTINODE_MICRO_BATCH != int(r["per_device_batch"]):
        return QWEN_MULTINODE_MICRO_BATCH, (
            f"micro-batch {QWEN_MULTINODE_MICRO_BATCH} per GPU: finetune_lora_ds.sh's "
            "--per_device_train_batch_size (@35023b6), read on the rows' summed memory (the "
            "README: 'the same as other Qwen-7B experiments', batch 1)")
    return int(r["per_device_batch"]), ""


def _deepspeed_buckets(r: dict[str, str], source: str) -> tuple[int, str]:
    """(DeepSpeed ZeRO-1/2 reduce_bucket_size in elements, note): the rows that run Qwen's
    ds_config_zero2.json; 0 for the rest (their ZeRO-1/2 configuration is not stated, or they
    do not run DeepSpeed ZeRO-1/2). The config sets overlap_comm (true), taken as stated."""
    p = r["parallelism"]
    if source == "Qwen" and ("DeepSpeed ZeRO-2 config" in p or "finetune_lora_ds.sh" in p):
        return (QWEN_ZERO2_REDUCE_BUCKET, "DeepSpeed ZeRO-2 (Qwen's ds_config_zero2.json): "
                "two 2e8-element gradient buckets (overlap_comm)")
    return 0, ""


def _deepspeed_precision(r: dict[str, str], source: str, precision: str) -> tuple[str, str]:
    """Full fine-tuning through DeepSpeed keeps fp32 master weights and moments beside the
    half-precision weights (its bf16/fp16 optimizer): -mixed. Qwen's README runs full
    fine-tuning with finetune_ds.sh, its one full-parameter script (DeepSpeed ZeRO-3)."""
    said = "deepspeed" in r["parallelism"].lower() or "finetune_ds.sh" in r["parallelism"]
    if said:
        return f"{precision}-mixed", "DeepSpeed: fp32 master weights and moments"
    if source == "Qwen":
        return (f"{precision}-mixed", "Qwen's full fine-tuning script is finetune_ds.sh "
                "(DeepSpeed): fp32 master weights and moments assumed")
    return precision, ""


def _gpu(text: str) -> tuple[GpuSpec | None, bool, str]:
    """(GPU, size only, assumption). A GPU named by its size only keeps that size for the fits
    check (a size in GB taken as 10^9 bytes) and is never used for time."""
    if text in GPUS:
        name, note = GPUS[text]
        return resolve_gpu(name), False, note
    m = _GPU_SIZE.match(text)
    if m:
        size = float(m.group(1))
        spec = resolve_gpu("a100-80gb", memory_gb=size)
        return (spec, True, f"GPU named by size only ({m.group(1)} GB = 10^9 bytes each; "
                            f"fits check only)")
    return None, False, ""


def _describe(t: Training, n: int, gpu: GpuSpec | None, size_only: bool) -> str:
    parts: list[str] = [t.method]
    if t.method != "full":
        parts.append(f"r{t.lora_rank} {t.lora_targets}")
    if t.lora_trainable_embeddings:
        parts.append("trainable embeddings and LM head (modules_to_save)")
    if t.lora_lm_head:
        parts.append("an adapter on the LM head")
    if t.method == "qlora":
        parts.append(f"{t.base_quant} base")
    parts += [t.precision, f"micro-batch {t.micro_batch} x {t.seq_len}"]
    if t.grad_accum > 1:
        parts.append(f"x accumulation {t.grad_accum}")
    parts.append("checkpointing " + ("on" if t.checkpointing else "off")
                 + (" (offloaded to the host)" if t.checkpoint_offload else ""))
    if t.kernels == "unsloth":
        parts.append("Unsloth's kernels")
    if t.liger_kernels != "none":
        parts.append(f"Liger's RMSNorm, RoPE and SwiGLU kernels ({t.liger_kernels})")
    opt = t.optimizer + ("" if t.optimizer_impl == "foreach" else f" ({t.optimizer_impl})")
    parts.append(opt)
    if loss_kernel_of(t) != "hf":
        parts.append(f"{loss_kernel_of(t)} cross-entropy")
    where = f"{n} x {gpu.name}" if gpu is not None and not size_only else f"{n} GPU(s)"
    parts.append(where + (f", ZeRO-{t.zero_stage}/FSDP" if t.zero_stage else ""))
    return ", ".join(parts)


def mapped_rows() -> list[Mapped]:
    return [map_row(i, r) for i, r in enumerate(finetune_rows(), start=1)]


# What each source measured ------------------------------------------------------------------
@dataclass(frozen=True)
class MemoryFigure:
    bytes: float
    #: "allocated", "reserved", "device" (nvidia-smi) or "unstated" (compared with reserved)
    kind: str
    what: str


#: Qwen's README (2df8e8ac, "Profiling of Memory and Speed") gives "memory (GB)" without saying
#: what was read. Over its rows the figure sits a near-constant 1.2-2.9 GiB above the estimate's
#: reserved bytes whatever the model (1.8B-72B), method or length: the shape of a device-level
#: reading (the CUDA context, library handles and workspaces outside torch's allocator), so
#: the rows are compared as one: reserved + what estimate/device_overhead.py gives for the
#: stack the README states (qwen_stack). No part of it is fitted on these rows: a source's own
#: offset would make the comparison come out, not the estimate users get
_QWEN = "QwenLM/Qwen README.md"

#: torchtune's README table "Memory and training speed" (added 30b8519e8, 2024-09-24) heads its
#: column "Peak Memory per GPU" without saying which of the three figures its recipes log
#: (training/memory.py get_memory_stats at 30b8519e8: peak_memory_active, from
#: memory_stats()["active_bytes.all.peak"], peak_memory_alloc and peak_memory_reserved; all
#: three in GiB). Read as the active peak, torch's allocated bytes plus blocks freed but still
#: awaiting a stream (estimate: allocated), for two reasons from the source, none fitted:
#: (1) the project's next table in the same README (1814feb17, "Optimization flags")
#: heads the same kind of column "Peak Memory Active (GiB)"; (2) two of its rows sit at or below
#: the tensors their stated setup must hold at the loss, so no allocator reserve can be on top:
#: #326 (QLoRA, 7.4 GiB) against the NF4 base (5.35), the 32 checkpointed layer inputs (32 x
#: 4096 tokens x 4096 x 2 bytes = 1.0) and the chunks' bf16 logits (4096 x 128,256 x 2 bytes =
#: 0.98), 7.33 GiB; #324 (LoRA, 16.2) against 14.96 + 1.0 + 0.98 = 16.94, below even that (so
#: that row departs from its stated setup whichever figure it is). The earlier table of Feb 2024
#: (e802c057d) said "GPU peak memory reserved"; it is another table, by others, of other runs
_TORCHTUNE_SPEED_TABLE = "pytorch/torchtune README.md 'Memory and training speed'"


def qwen_stack(t: Training) -> SoftwareStack:
    """The software Qwen's README profiled on: "we use CUDA 11.8 and Pytorch 2.0. Flash
    attention 2 is applied" (2df8e8ac, "Profiling of Memory and Speed"); the rows run with
    DeepSpeed (finetune_qlora_single_gpu.sh and finetune_ds.sh pass --deepspeed, on one GPU
    too) initialise an NCCL process group of one rank; finetune_lora_single_gpu.sh runs plain
    `python finetune.py` (no process group)."""
    deepspeed = t.deepspeed_reduce_bucket > 0 or t.zero3_engine == "deepspeed"
    return SoftwareStack(name="Qwen's README: CUDA 11.8, PyTorch 2.0, flash-attn 2"
                              + (", DeepSpeed (one rank)" if deepspeed else ""),
                         torch_version=(2, 0), cuda_version=(11, 8),
                         distributed="nccl" if deepspeed else "none", world_size=1,
                         extensions=("flash-attn 2",) + (("DeepSpeed ops",) if deepspeed else ()))


def stack_summary(stack: SoftwareStack) -> str:
    """One line: the stack, how its kernels load, what sits outside the allocator."""
    d = device_overhead(stack)
    nccl = (", NCCL on one rank: no buffers" if stack.distributed == "nccl"
            and stack.world_size <= 1 else "")
    return (f"{stack.name}: {d.module_loading} module loading{nccl}; outside torch's "
            f"allocator {d.total_bytes / 2**30:.2f} GiB (estimate/device_overhead.py)")


def eager_context_sensitivity(context_bytes: float) -> tuple[int, int, float]:
    """(rows, within 10%, median error) of Qwen's device-level rows were their stack loading
    eagerly with a context of `context_bytes` (a driver before R515, which an 11.8 runtime runs
    on): a what-if for the prose, not the comparison (the README states no driver; its CUDA and
    torch load lazily)."""
    import statistics

    errors = []
    for m, r in zip(mapped_rows(), finetune_rows(), strict=True):
        fig = memory_figure(r)
        t = m.training
        if m.source != "Qwen" or m.skipped or t is None or fig is None or fig.kind != "device":
            continue
        eager = _predicted_memory("reserved", t, m.num_gpus, m.gpu, m.replay_micro_batches)
        errors.append((eager + context_bytes) / fig.bytes - 1)
    return (len(errors), sum(abs(e) <= 0.10 for e in errors),
            statistics.median(errors) if errors else float("nan"))


def row_stack(r: dict[str, str], t: Training) -> SoftwareStack | None:
    """The stack a device-level row states, or None (the estimator's default stack)."""
    return qwen_stack(t) if r["source"].startswith(_QWEN) else None


def _raw_figure(r: dict[str, str]) -> tuple[float, str] | None:
    """(bytes, unit name) of the row's memory figure, as the row writes it."""
    note = r["mem_unit_note"]
    value = r["peak_mem_alloc_gb"] or r["peak_mem_reserved_gb"]
    if not value:
        return None
    unit = GIB if ("GiB" in note or "2^30" in note or note.startswith("'G' per GPU")) else GB
    return float(value) * unit, "GiB" if unit == GIB else "GB"


def memory_figure(r: dict[str, str]) -> MemoryFigure | None:
    """The row's peak memory per GPU in bytes, with what it is (README: "How each source
    defines its numbers")."""
    note = r["mem_unit_note"]
    raw = _raw_figure(r)
    if raw is None:
        return None
    value_bytes, unit_name = raw
    if r["source"].startswith(_QWEN) and "not stated" in note:
        return MemoryFigure(value_bytes, "device",
                            f"type not stated; compared as a device-level reading (reserved + "
                            f"the stack's overhead outside the allocator, estimate/"
                            f"device_overhead.py), {unit_name}")
    if r["source"].startswith(_TORCHTUNE_SPEED_TABLE) and "README does not say which" in note:
        return MemoryFigure(value_bytes, "allocated",
                            f"not stated; read as torchtune's peak_memory_active (the active "
                            f"peak, compared with allocated: _TORCHTUNE_SPEED_TABLE), {unit_name}")
    value = r["peak_mem_alloc_gb"] or r["peak_mem_reserved_gb"]
    unit = GIB if unit_name == "GiB" else GB
    if r["peak_mem_alloc_gb"]:
        return MemoryFigure(float(value) * unit, "allocated",
                            f"torch allocated/active peak, {unit_name}")
    if "max_memory_reserved" in note or "memory_reserved()" in note:
        pct = "99th percentile of steps, " if "99th" in note else ""
        return MemoryFigure(float(value) * unit, "reserved",
                            f"torch reserved peak, {pct}{unit_name}")
    if "nvidia-smi" in note and "not stated" not in note:
        return MemoryFigure(float(value) * unit, "device", f"nvidia-smi, {unit_name}")
    return MemoryFigure(float(value) * unit, "unstated",
                        f"type not stated (compared with reserved), {unit_name}")


#: the host's seconds per eager operator, per source whose runs share one machine (all else: the
#: default, assumptions.HOST_S_PER_OP): (us per operator, basis). Fitted by
#: `python scripts/host_overhead.py qwen` (docs/bench.md, "The host floor")
HOST_US_PER_OP = {
    "Qwen": (20.5, "host 20.5 us per operator (fitted: the Qwen-1.8B LoRA rows #101-103, "
                   "#107-109)"),
}
#: the rows those figures were fitted to (tuned, not held out)
HOST_FIT_ROWS = frozenset({101, 102, 103, 107, 108, 109})
#: the rows assumptions.ZERO3_OPS_PER_MODULE_FETCH was fitted to (`python scripts/
#: host_overhead.py zero3`): Qwen-1.8B full fine-tuning under DeepSpeed ZeRO-3, 256-1024 tokens
ZERO3_FIT_ROWS = frozenset({119, 120, 121})
#: the rows assumptions.FLASH_ATTN2_EFFICIENCY_BY_GENERATION["ampere"] was fitted to (`python
#: scripts/host_overhead.py flash`): Qwen-1.8B LoRA and LoRA (emb) at 8192 tokens
FLASH_FIT_ROWS = frozenset({106, 112})
#: every throughput row that set a figure: left out of the held-out accuracy
TUNED_THROUGHPUT_ROWS = HOST_FIT_ROWS | ZERO3_FIT_ROWS | FLASH_FIT_ROWS
#: the memory rows of a run that set a figure (PEFT_SAMPLE_TOKENS_STD, from that run's mean
#: reading): left out of the held-out accuracy, reported apart
TUNED_MEMORY_ROWS = frozenset({PEFT_SPREAD_ROW})


#: sources whose tokens/s count the tokens computed, with how
_TOKENS_COMPUTED = {
    "xtuner": "tokens/s per GPU (TGS), packed to max length",
    "Answer.AI": "1024 dummy full-length samples x context / run time",
    "Qwen": "padded to model_max_length: 8 x GPUs x seq / s per step",
    "torchtune": "tokens/s over an epoch, packed",
    "Scicom how-fast-5090": "one epoch of 13,298 packed 4096-token rows / the run's minutes",
    "Scicom simple-throughput": "packed 4096-token rows: tokens seen over a step's time (W&B "
                                "average, rounded)",
    "Megatron-Bridge": "SQuAD packed to 4096-token rows: the table's tokens/s per GPU",
    "DGXC NeMo": "SQuAD packed and padded to 4096-token rows: 4096 x GBS / step time",
}
_TOKENS_SKIP = {
    "PEFT": "unpacked batches padded to the longest: the computed (padded) tokens are not "
            "stated (tokens/s counts unpadded tokens)",
    "ms-swift": "samples/s of variable-length samples (mean 3234 tokens): tokens not stated",
    "litgpt config_hub": "runtime includes validation; variable-length samples",
    "litgpt resource tables": "variable-length Alpaca batches: tokens per step not stated",
    "LLaMA-Factory (via Unsloth)": "variable-length samples (cutoff 1024): padding not stated",
}


def throughput_figure(r: dict[str, str], source: str) -> tuple[float | None, str]:
    """(measured tokens/s per GPU, why not) of the row."""
    if not r["tokens_per_s_total"]:
        return None, "no tokens/s figure"
    if source in _TOKENS_SKIP:
        return None, _TOKENS_SKIP[source]
    if source not in _TOKENS_COMPUTED:
        return None, "tokens/s basis not known"  # pragma: no cover
    if "packed=False" in r["notes"]:
        return None, "unpacked dataset: padding per batch not stated"
    # the source's figure counts its stated batch; a row read as running another
    # (run_micro_batch) computed that many more tokens in the same step
    ran_batch = run_micro_batch(r, source)[0] / int(r["per_device_batch"] or 1)
    return ran_batch * float(r["tokens_per_s_total"]) / (_int(r["n_gpus"]) or 1), ""


def ran(r: dict[str, str]) -> bool:
    """The run completed: it has a measured figure, or it is a capacity limit that fit."""
    if "OOM" in r["notes"] and not (r["peak_mem_alloc_gb"] or r["peak_mem_reserved_gb"]):
        return False
    return bool(r["peak_mem_alloc_gb"] or r["peak_mem_reserved_gb"] or r["tokens_per_s_total"]
                or r["samples_per_s"] or r["step_time_s"] or r["train_runtime_s"]
                or "capacity limit" in r["notes"])


# Comparisons ----------------------------------------------------------------------------------
#: reserved_training_memory per setup: a row's memory comparison, its fits check and its
#: out-of-memory check ask for the same setup on the same card, and each call replays the
#: allocator over three training steps (estimate/step_replay.py)
_RESERVED: dict[tuple[str, int, float | None], MemoryBreakdown] = {}


def _reserved_memory(t: Training, n: int, gpu_memory_bytes: float | None) -> MemoryBreakdown:
    key = (t.model_dump_json(), n, gpu_memory_bytes)
    if key not in _RESERVED:
        _RESERVED[key] = reserved_training_memory(t, n, gpu_memory_bytes=gpu_memory_bytes)
    return _RESERVED[key]


def _predicted_memory(kind: str, t: Training, n: int, gpu: GpuSpec | None = None,
                      replay_micro_batches: int | None = None,
                      stack: SoftwareStack | None = None) -> float:
    """The estimate's figure of the kind the row measured; a device-level one with the row's
    stated stack's overhead outside the allocator (`stack`; None: the estimator's default).
    The allocator reserve of a fixed-length run is the step replay's where it applies
    (estimate/step_replay.py)."""
    m = _reserved_memory(t, n, None if gpu is None else gpu.memory_bytes)
    if kind == "allocated":
        return m.tensors_bytes
    reserve = m.allocator_reserve_bytes
    if replay_micro_batches is not None and t.seq_len_mean is not None:
        reserve = _replayed_reserve(t, n, gpu, replay_micro_batches)
    if kind == "device":
        outside = m.cuda_context_bytes if stack is None else device_level_bytes(stack)
        device = m.tensors_bytes + reserve + outside
        # a paged optimizer's managed memory is on the device as far as the GPU has room
        return device + (m.paged_optimizer_bytes if gpu is None else paged_resident_bytes(
            m.paged_optimizer_bytes, gpu.memory_bytes, device))
    return m.tensors_bytes + reserve


def device_reading_bytes(t: Training, n: int, gpu: GpuSpec | None) -> float:
    """The estimate's device-level reading per GPU for a Qwen README setup (reserved + the
    README's stack's overhead outside the allocator), as the Qwen memory rows are compared."""
    return _predicted_memory("device", t, n, gpu, None, qwen_stack(t))


#: The replays' results (bytes of allocator reserve), written by `python scripts/validate.py`:
#: a run's replay takes seconds (thousands of micro-batches through trace/allocator.py), the
#: ms-swift rows' together minutes. Keyed by the setup, the model's shape as resolved from the
#: catalog (a catalog edit changes it), the GPU count, the capacity, the micro-batches and a
#: hash of the code the replay and its memory model run (`replay_code_hash`): a change to any
#: of it makes every key new, and tests/test_fragmentation.py then asks for a regeneration
REPLAY_CACHE = Path(__file__).with_name("replays.json")
_replays: dict[str, float] | None = None
_used: dict[str, float] = {}


def replay_code_files() -> list[Path]:
    """Every module of src/gpuhours/estimate/ (the memory model the replay's sizes come from
    and the replay itself), the setup model and the allocator."""
    import gpuhours

    root = Path(gpuhours.__file__).parent
    return sorted([*(root / "estimate").rglob("*.py"), root / "setup.py",
                   root / "trace" / "allocator.py"])


def replay_code_hash() -> str:
    digest = hashlib.sha256()
    for path in replay_code_files():
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def replay_key(t: Training, n: int, cap: float | None, micro_batches: int) -> str:
    """The setup's choices that differ from their defaults (a setup field added later, at its
    default, keeps the key), a hash of the model's resolved shape (`t.arch`), the GPUs,
    capacity, micro-batches and the code's hash. The loss kernel is keyed as it runs
    (setup.loss_kernel_of: hf given or by default is the same setup)."""
    fields = Training.model_fields
    choices = {k: v for k, v in t.choices().items()
               if k != "loss_kernel" and (k not in fields or v != fields[k].default)}
    if loss_kernel_of(t) != "hf":
        choices["loss_kernel"] = loss_kernel_of(t)
    shape = hashlib.sha256(repr(t.arch).encode()).hexdigest()[:16]
    return json.dumps([choices, shape, n, cap, micro_batches, replay_code_hash()],
                      sort_keys=True)


def cached_replays() -> dict[str, float]:
    global _replays
    if _replays is None:
        _replays = json.loads(REPLAY_CACHE.read_text()) if REPLAY_CACHE.exists() else {}
    return _replays


def _replayed_reserve(t: Training, n: int, gpu: GpuSpec | None, micro_batches: int) -> float:
    """The allocator reserve of a variable-length run (estimate/fragmentation.py), capped by
    the GPU's memory less the CUDA context: from REPLAY_CACHE, else replayed (and kept for
    `save_replays`)."""
    from gpuhours.estimate.fragmentation import varlen_reserve

    m = training_memory(t.arch, t, n, load_path_reserve_bytes(t, n))
    cap = None if gpu is None else gpu.memory_bytes - m.cuda_context_bytes
    key = replay_key(t, n, cap, micro_batches)
    if key not in _used:
        cached = cached_replays().get(key)
        _used[key] = cached if cached is not None else varlen_reserve(
            t, m, cap, micro_batches=micro_batches).reserve_bytes
    return _used[key]


def save_replays() -> None:
    """Write the replays this process used (only those: stale keys go) to REPLAY_CACHE."""
    from gpuhours.files import atomic_write_text

    atomic_write_text(REPLAY_CACHE, json.dumps(dict(sorted(_used.items())), indent=0) + "\n")


@kept
def finetune_comparisons() -> list[Comparison]:
    """Three Comparisons per row: ft_memory, ft_throughput and ft_fits (each compared or
    skipped with the reason). ft_fits: measured = the GPU's memory, predicted = the estimate's
    device total (`total_bytes`); predicted above measured = refused. And ft_oom for each
    expressible row reported out of memory (the same two figures: it should not fit)."""
    out: list[Comparison] = []
    for m, r in zip(mapped_rows(), finetune_rows(), strict=True):
        out += _row_comparisons(m, r)
    return out


def above_peak(t: Training, gpu: GpuSpec, tokens_per_s_per_gpu: float) -> str | None:
    """Why a measured speed cannot come from the setup as stated, or None: its matmul work
    alone (the stated setup's matmul FLOPs per token, recomputation included) at the measured
    tokens/s per GPU (the run's tokens over all its GPUs) above the GPU's dense peak for the
    precision. No kernel runs above the peak, so such a row tests the setup's description,
    not the estimate (issue 14: the A6000 row of torchtune's table)."""
    from gpuhours.estimate.flops import training_flops
    from gpuhours.estimate.timing import peak_flops

    # tokens/s per GPU is the run's tokens over all its GPUs, so each GPU's share of the matmul
    # work is per-token FLOPs x that rate whatever the layout; fp8 rows against the fp8 peak
    per_token = training_flops(t).matmul_flops_per_token
    peak = peak_flops(gpu, t.precision)
    share = tokens_per_s_per_gpu * per_token / peak
    if share <= 1.0:
        return None
    return (f"the measured speed needs {share:.2f}x {gpu.name}'s dense peak in matmul FLOPs "
            f"alone for the setup as stated ({per_token / 1e9:.1f} GFLOP per token, "
            f"recomputation included): not the setup that ran, or counted differently")


def _row_comparisons(m: Mapped, r: dict[str, str]) -> list[Comparison]:
    tags: dict[str, Any] = dict(source=m.citation, group=m.source, method=m.method,
                                setup=m.setup)
    t = m.training
    nan = float("nan")
    out = []
    fig = memory_figure(r)
    mem_skip = m.skipped or (None if fig is not None else "no memory figure")
    if mem_skip is None and "packed=False" in r["notes"]:
        # torchtune's baseline pads each batch to its longest sample (Alpaca: far below the
        # 4096 cap), and the longest batch is not stated
        mem_skip = "unpacked, padded per batch: the longest batch is not stated (seq is a cap)"
    if t is None or fig is None or mem_skip:
        out.append(Comparison("ft_memory", m.label, fig.bytes if fig else nan, None, "bytes",
                              fig.what if fig else "", skipped=mem_skip, **tags))
    else:
        stack = row_stack(r, t) if fig.kind == "device" else None
        setup = m.setup + (f"; {stack_summary(stack)}" if stack else "")
        setup += ("; this row's run set the sample-length spread (its mean reading: "
                  "PEFT_SAMPLE_TOKENS_STD)" if m.row in TUNED_MEMORY_ROWS else "")
        out.append(Comparison("ft_memory", m.label, fig.bytes,
                              _predicted_memory(fig.kind, t, m.num_gpus, m.gpu,
                                                m.replay_micro_batches, stack),
                              "bytes", fig.what, **{**tags, "setup": setup}))
    # fits
    ran_ok = ran(r)
    fit_skip = m.skipped or (None if ran_ok else "did not run (OOM or no result)")
    no_gpu = f"GPU not in catalog ({r['gpu']})" if r["gpu"] else "GPU not stated"
    if fit_skip is None and (m.gpu is None):
        fit_skip = no_gpu
    if fit_skip or t is None or m.gpu is None:
        out.append(Comparison("ft_fits", m.label, nan, None, "bytes", "", skipped=fit_skip,
                              **tags))
    else:
        total = _reserved_memory(t, m.num_gpus, m.gpu.memory_bytes).total_bytes
        out.append(Comparison("ft_fits", m.label, float(m.gpu.memory_bytes), total, "bytes",
                              f"{m.gpu.name} memory", generation=m.gpu.generation, **tags))
    if not ran_ok and t is not None and m.gpu is not None and "OOM" in r["notes"]:
        # the converse check, for the runs reported out of memory
        total = _reserved_memory(t, m.num_gpus, m.gpu.memory_bytes).total_bytes
        out.append(Comparison("ft_oom", m.label, float(m.gpu.memory_bytes), total, "bytes",
                              f"{m.gpu.name} memory", generation=m.gpu.generation, **tags))
    # throughput
    measured, why = throughput_figure(r, m.source)
    tp_skip = m.skipped or (why or None)
    if tp_skip is None and (m.gpu is None or m.gpu_is_size_only):
        tp_skip = no_gpu if m.gpu is None else "GPU named by its memory size only"
    estimate = None
    host_us, host_note = HOST_US_PER_OP.get(m.source, (None, ""))
    if tp_skip is None and t is not None and m.gpu is not None and measured is not None:
        try:
            tp_skip = above_peak(t, m.gpu, measured)
            if tp_skip is None:
                net = ({} if m.inter_node_gb_per_s_one_way is None
                       else {"inter_node_gb_per_s_one_way": m.inter_node_gb_per_s_one_way})
                hw = Hardware(gpu=m.gpu, num_gpus=m.num_gpus, host_us_per_op=host_us,
                              gpus_per_node=m.gpus_per_node, pcie_lanes=m.pcie_lanes, **net)
                estimate = estimate_training(t, hw, "catalog")
        except FieldError as refused:  # the catalog lacks a rate the setup needs (a bf16 rate)
            tp_skip = f"the estimator refuses the setup on this GPU: {refused}"
    if tp_skip or t is None or m.gpu is None or measured is None or estimate is None:
        out.append(Comparison("ft_throughput", m.label, measured or nan, None,
                              "tokens/s per GPU", "", skipped=tp_skip, **tags))
    else:
        e = estimate
        what = _TOKENS_COMPUTED[m.source]
        if run_micro_batch(r, m.source)[0] != int(r["per_device_batch"] or 1):
            what += (f", x {run_micro_batch(r, m.source)[0]} sequences per micro-batch "
                     "as run (the source's figure counts 1)")
        setup = m.setup
        setup += f"; {host_note}" if host_note else ""
        setup += "; this row tuned the host figure" if m.row in HOST_FIT_ROWS else ""
        setup += ("; this row tuned the ZeRO-3 hook figure (assumptions."
                  "ZERO3_OPS_PER_MODULE_FETCH)" if m.row in ZERO3_FIT_ROWS else "")
        setup += ("; this row tuned the flash-attn attention rate (assumptions."
                  "FLASH_ATTN2_EFFICIENCY_BY_GENERATION)" if m.row in FLASH_FIT_ROWS else "")
        out.append(Comparison("ft_throughput", m.label, measured, e.tokens_per_s_per_gpu.value,
                              "tokens/s per GPU", what, generation=m.gpu.generation,
                              **{**tags, "setup": setup}))
    return out
