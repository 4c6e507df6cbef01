"""Training throughput on H100 (docs/validation.md): every H100 row of
shared/reference/validation/throughput.csv (data/throughput_h100.csv), expressed with the row's
stated layout (estimate/parallel.py) and matmul precision, or listed with the reason it is not.

The Hopper efficiencies of assumptions.py (bf16 and fp8) were set from the *tuning* half of the
expressed rows only; the *held-out* half checks them. The split (`split_halves`) is by
configuration, not by row: rows that repeat one setup (Megatron-Bridge republishes the same
layout in each container release) fall in the same half, so a held-out row is never a re-run of
a tuned one. The split is frozen in the data: each expressed row's `split` column (tune or
held-out) says its half, so adding rows moves no configuration. It was filled on 2026-11-23
with the assignment the constants were fitted on (configurations sorted by model, precision,
method, sequence, GPUs, layout, micro-batch, alternating tune / held out within each matmul
precision); a configuration no row assigns (a row added later) is held out.
`fit_hopper` is the fit that set the constants.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from gpuhours import catalog
from gpuhours.errors import FieldError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.estimator import estimate_training
from gpuhours.estimate.parallel import reference_node
from gpuhours.resolve import resolve_model
from gpuhours.setup import Hardware, Training
from gpuhours_dev.validation import patched_estimate
from gpuhours_dev.validation.recipe_graphs import (
    recipe_graph_scope,
    recipe_op_fuser,
    recipe_recompute,
)

#: the catalog model of each source's model name (Megatron-Bridge, NeMo, NeMo Automodel)
H100_MODELS = {
    "Llama3 8B": "llama-3-8b", "Llama 3 8B": "llama-3-8b", "LLAMA3_8B": "llama-3-8b",
    "LLAMA3-8B": "llama-3-8b", "Llama3 70B": "llama-3-70b", "Llama 3 70B": "llama-3-70b",
    "LLAMA3_70B": "llama-3-70b", "LLAMA3-70B": "llama-3-70b", "Llama3 70B 2-node": "llama-3-70b",
    "LLAMA2-7B": "llama-2-7b", "LLAMA2-13B": "llama-2-13b", "LLAMA2-70B": "llama-2-70b",
    "Qwen2.5 7B": "qwen2.5-7b", "Qwen2.5 32B": "qwen2.5-32b", "Qwen2.5 32B 2-node": "qwen2.5-32b",
    "Qwen3_30B_a3B": "qwen3-30b-a3b", "Qwen3 MoE 30B": "qwen3-30b-a3b",
    "LLAMA3.1_405B": "llama-3.1-405b", "Qwen3_235B_a22B": "qwen3-235b-a22b",
    "GPT OSS 120B": "gpt-oss-120b", "GPT-OSS 120B": "gpt-oss-120b", "GPT-OSS 20B": "gpt-oss-20b",
    "DeepSeek V3 671B": "deepseek-v3",
}
_KEYS = ("TP", "PP", "CP", "EP", "VP", "GA", "FSDP", "DP", "LBS")

#: NeMo's GPT-3 benchmark models (hidden size, layers), from the NeMo-Framework-Launcher configs
#: launcher_scripts/conf/training/gpt3/{5b,20b,175b}.yaml (commit 056a90e): heads of 128,
#: FFN 4h with GeLU, biases, LayerNorm, learned positions of 2048, the GPT-2 BPE vocabulary
#: (50,257) padded to a multiple of 128 (make_vocab_size_divisible_by), tied to the embedding.
NEMO_GPT3 = {"GPT3-5B": (4096, 24), "GPT3-20B": (6144, 44), "GPT3-175B": (12288, 96)}


def nemo_gpt3(name: str) -> ModelArch:
    """The GPT-3 of NeMo's performance table, as its launcher config defines it."""
    hidden, layers = NEMO_GPT3[name]
    return ModelArch(name=f"nemo-{name.lower()}", model_type="gpt2", hidden_size=hidden,
                     num_layers=layers, num_heads=hidden // 128, num_kv_heads=hidden // 128,
                     head_dim=128, intermediate_size=4 * hidden, vocab_size=50304,
                     tie_embeddings=True, gated_mlp=False, position_embeddings=2048,
                     qkv_bias=True, out_bias=True, mlp_bias=True, norm_bias=True)


def _layout_numbers(notes: str) -> dict[str, int]:
    """The layout a row's notes state: TP=, PP=, CP=, EP=, VP=, GA=, FSDP=, DP=, LBS=."""
    return {k: int(m.group(1)) for k in _KEYS if (m := re.search(rf"\b{k}=(\d+)", notes))}


def matmul_precision(r: dict[str, str]) -> str | None:
    """The precision the row's matmuls ran in: "fp8-mixed" for Transformer Engine fp8 (delayed
    "FP8", current scaling "FP8-CS", "FP8 (hybrid)") and torchao float8 linears, "bf16-mixed"
    for BF16, None when the source does not say."""
    p = r["precision"].lower()
    if "fp8" in p or "float8" in p:
        return "fp8-mixed"
    return "bf16-mixed" if p == "bf16" else None


@dataclass(frozen=True)
class HopperRow:
    """One H100 row: the setup it is estimated with, or why it is not expressed."""

    label: str
    source: str
    measured: float | None
    training: Training | None
    hardware: Hardware | None
    setup: str
    skipped: str | None
    #: configuration key: rows with equal keys are one setup measured more than once
    config_key: tuple[Any, ...] = ()
    #: the data's frozen half: "tune", "held-out" or "" (not assigned: held out)
    split: str = ""


def _skip(r: dict[str, str], nums: dict[str, int]) -> str | None:
    if matmul_precision(r) is None:
        return "matmul precision not stated"
    if r["gpu"] != "H100-80GB":
        if r["gpu"].startswith("H100-9"):
            return ("a power-capped 94-96 GB HBM2e H100 (no datasheet of its clocks or peak; "
                    "its source says its MFU is understated against the SXM peak)")
        return "the H100 part is not stated"
    if not r["tokens_per_sec_per_gpu"]:
        return "tokens/s per GPU not stated (TFLOP/s per GPU only, in the source's FLOP count)"
    if not r["n_gpus"] or not r["micro_batch"]:
        return "GPU count or micro-batch not stated"
    if "tokendrop" in r["model"]:
        return "MoE token dropping (capacity factor): not modelled"
    if r["model"] not in H100_MODELS and r["model"] not in NEMO_GPT3:
        return "model not in the catalog"
    if "Automodel" in r["source"] and nums.get("TP", 1) > 1:
        # expressed, these four LoRA rows come out 25-54% fast and, GEMM-bound in the estimate,
        # would pull the bf16 fit to 0.48: a mechanism outside the GEMMs, left out of both
        return ("tensor parallelism through PyTorch DTensor (NeMo Automodel): its per-operator "
                "sharding propagation on the host and its collectives per linear are not "
                "modelled (costed as Megatron's tensor parallelism, these LoRA rows come out "
                "25-54% fast, so they are neither compared nor used for the fit)")
    return None


def fused_attention(source: str, notes: str) -> bool:
    """Whether a row's stack runs cuDNN's fused attention: Megatron-LM, Megatron-Bridge and NeMo
    (Megatron-Core) train through Transformer Engine, whose attention on Hopper is cuDNN's; NeMo
    Automodel says its kernels per row ("TE + triton": Transformer Engine's attention;
    "TorchSDPA", "FlexAttn": PyTorch's). The others (torchtitan: PyTorch SDPA; OLMo-core:
    flash-attn 2; Meta: not stated) are taken at SDPA's FlashAttention-2 rate."""
    if "TorchSDPA" in notes or "FlexAttn" in notes:
        return False
    return "Megatron" in source or "NeMo" in source


def megatron_core(source: str) -> bool:
    """Whether a row's stack is Megatron-Core with Transformer Engine's layers (kernel path
    `megatron`, estimate/host.py): Megatron-LM, Megatron-Bridge and NeMo's performance tables
    (NeMo 1 and 2 build their GPT from Megatron-Core's TE spec). NeMo Automodel runs
    transformers' modelling in PyTorch ("PyTorch backend"): the eager path."""
    return "Automodel" not in source and ("Megatron" in source or "NeMo" in source)


def lora_adapters(source: str) -> tuple[int, str, str]:
    """(rank, lora_targets, how the setup column says it) of a LoRA row, from its stack's default:
    Megatron-Bridge 26.06's performance preset (llama3_70b_peft_config @ 63b08b39: dim 16,
    target_modules ['linear_qkv'] only, "Override target_modules to only apply LoRA to QKV",
    overriding peft/lora.py's four targets and dim 32; read for finetune_runs_added.csv's
    Megatron-Bridge rows), which gpuhours' targets cannot name alone: "attention", qkv and
    proj, one adapter a layer more than ran; NeMo 24.07's
    (examples/nlp/language_modeling/tuning/conf/megatron_gpt_finetuning_config.yaml@0078023:
    adapter_dim 32, target_modules ['attention_qkv'] only, which gpuhours' targets cannot name
    alone: "attention", qkv and proj, one adapter a layer more than ran); NeMo Automodel does not
    state them: rank 8 on every linear (the rank moves the estimate by under 1%)."""
    if "Megatron-Bridge" in source:
        return 16, "attention", "r16 qkv + proj (Megatron-Bridge 26.06 preset: qkv only)"
    if "NeMo" in source and "Automodel" not in source:
        return 32, "attention", "r32 qkv + proj (NeMo default qkv only; assumed)"
    return 8, "all-linear", "r8 all-linear (assumed)"


def megatron_loss_kernel(source: str, method: str) -> str:
    """The cross-entropy a row's stack runs (setup.LossKernel). Megatron-Bridge's performance
    scripts set cross_entropy_fusion_impl "te" (scripts/performance, since NVIDIA-NeMo/
    Megatron-Bridge@568b3a3e, 2025-08, before 25.09) with GPTModelProvider's
    cross_entropy_loss_fusion True: Transformer Engine's kernel, but for LoRA, whose recipe
    turns the fusion off (llama3_70b_peft_config @ 63b08b39). Megatron-LM and NeMo run
    Megatron-Core's vocab-parallel cross-entropy, fused (NeMo 2's GPTConfig default) or not
    (Megatron-LM's default): the same tensors either way. Other stacks: transformers' (hf)."""
    if not megatron_core(source):
        return "hf"
    return "te" if "Megatron-Bridge" in source and method == "full" else "megatron"


def hopper_rows(rows: list[dict[str, str]]) -> list[HopperRow]:
    """Each H100 row as a setup of the estimator with the layout its source states, or why not.

    Megatron-Bridge and NeMo (Megatron-Core) keep bf16 weights with an fp32 distributed
    optimizer (ZeRO-1 over the data-parallel ranks: their recipes' default); NeMo Automodel's
    FSDP=N is FSDP2 over N ranks (ZeRO-3). Gradient accumulation is the global batch over
    micro-batch x data-parallel ranks when the row does not state GA. DGX-H100 nodes: 8 GPUs,
    400 Gb/s NDR per GPU (catalog node dgx-h100). Checkpointing is not stated
    by these tables: off. LoRA adapters: `lora_adapters`. Attention: `fused_attention`; the
    host's operators: `megatron_core`.
    """
    gpu = catalog.gpu("h100-sxm")
    node = reference_node("hopper")
    assert node is not None
    net = node.inter_node_gb_per_s_one_way
    out = []
    for r in rows:
        label = (f"{r['model']} {r['precision'] or '?'} seq {r['seq_len']} x{r['n_gpus'] or '?'}"
                 + ("" if r["gpu"] == "H100-80GB" else f" {r['gpu'].split(' (')[0]}"))
        nums = _layout_numbers(r["notes"])
        out.append(stated_layout_row(
            r, label, _skip(r, nums),
            lambda n: Hardware(gpu=gpu, num_gpus=n, gpus_per_node=8,
                               inter_node_gb_per_s_one_way=net)))
    return out


def stated_layout_row(r: dict[str, str], label: str, skipped: str | None,
                      hardware: Callable[[int], Hardware],
                      models: dict[str, str] | None = None) -> HopperRow:
    """One published throughput row as a setup of the estimator with the layout its notes state
    (`_layout_numbers`), or why not (`skipped`, or the estimator's refusal); `hardware` gives
    the system of n GPUs the row ran on, `models` the catalog model of each source's model name
    (H100_MODELS unless given). What is assumed is said in `hopper_rows`."""
    models = H100_MODELS if models is None else models
    measured = float(r["tokens_per_sec_per_gpu"]) if r["tokens_per_sec_per_gpu"] else None
    nums = _layout_numbers(r["notes"])
    if skipped is not None:
        return HopperRow(label, r["source"], measured, None, None, "", skipped)
    assert measured is not None
    n, mb, seq = int(r["n_gpus"]), int(r["micro_batch"]), int(r["seq_len"])
    tp, pp, cp, ep = (nums.get(k, 1) for k in ("TP", "PP", "CP", "EP"))
    vp = nums.get("VP", 1)
    dp = n // (tp * pp * cp)
    fsdp = nums.get("FSDP", 0) > 1
    # micro-batches per step: the global batch over micro-batch x data-parallel ranks, which
    # the tokens/s were computed from; a stated GA only where the global batch is not given.
    # They differ where a source's GA counts something else: NeMo Automodel's GA counts
    # local batches (LBS=8 of pipeline micro-batches of 1: DeepSeek V3 GA=4 is 32 of them),
    # and Megatron-Bridge 25.11's GPT-OSS 120B row states GA=2 where 512 / (4 x 16) is 8.
    accum = (max(int(r["global_batch"]) // (mb * dp), 1) if r["global_batch"]
             else nums.get("GA", 1))
    notes = r["notes"]
    method = "lora" if "LoRA" in notes else "full"
    precision = matmul_precision(r)
    rank, targets, lora_setup = lora_adapters(r["source"])
    kernels = "megatron" if megatron_core(r["source"]) else "eager"
    loss = megatron_loss_kernel(r["source"], method)
    # NeMo Automodel's "kernels: TE + triton": its LoRA runs as Triton kernels, the branch's
    # elementwise work fused (Training.lora_branch); Megatron's adapters are fused by default
    triton_lora = method == "lora" and "triton" in notes
    branch = {"lora_branch": "fused"} if triton_lora else {}
    if r["model"] in NEMO_GPT3:
        arch = nemo_gpt3(r["model"])
        basis = "NeMo-Framework-Launcher conf/training/gpt3 (validation/hopper.py)"
    else:
        arch, basis = resolve_model(models[r["model"]])
    # the sizes the row states, to match its recipe's (an unstated VP or EP is not compared).
    # Every Megatron-Bridge table (performance-summary.md and -archive.md at 067f987d, 25.09
    # to 26.08) has a VP and an EP column, "n/a" where the run had none (the data leaves n/a
    # out): there an absent VP or EP states 1, so that a row run without virtual stages does
    # not take the graphs of a later recipe that interleaves (Qwen3-235B-A22B on 256 B200:
    # VP n/a in 26.02-26.04.01, VP 3 with full-iteration graphs in the 067f987d recipe)
    states_all = megatron_bridge_table(r["source"])
    stated = {"tensor": tp, "pipeline": pp, "context": cp, "micro": mb,
              **{name: nums.get(k, 1) for k, name in (("EP", "expert"), ("VP", "vp"))
                 if k in nums or states_all},
              **({"global": int(r["global_batch"])} if r["global_batch"] else {})}
    scope, graphs = (row_graph_scope(r, models, method, stated) if kernels == "megatron"
                     else (None, ""))
    fuser = (kernels == "megatron" and arch.is_moe
             and row_op_fuser(r, models, method, stated))
    recompute, recompute_note = (row_recompute(r, models, method, stated)
                                 if kernels == "megatron" else (None, ""))
    try:
        t = Training.model_validate(dict(
            arch=arch, model_basis=basis, method=method, precision=precision,
            micro_batch=mb, seq_len=seq, grad_accum=accum, lora_rank=rank,
            lora_targets=targets, kernels=kernels, loss_kernel=loss, **branch,
            cuda_graph_scope=scope, moe_fused_mlp=fuser, recompute_modules=recompute,
            zero_stage=3 if fsdp else (1 if dp > 1 else 0), tp=tp, pp=pp, cp=cp, ep=ep,
            virtual_stages=vp, fused_attention=fused_attention(r["source"], notes)))
    except FieldError as e:  # the stated layout is one the estimator does not express
        return HopperRow(label, r["source"], measured, None, None, "",
                         f"layout refused by the estimator: {e.message}")
    hw = hardware(n)
    layout = " ".join(f"{k.lower()} {v}" for k, v in (("TP", tp), ("PP", pp), ("CP", cp),
                                                      ("EP", ep), ("VP", vp)) if v > 1)
    setup = (f"{method}{' ' + lora_setup if method == 'lora' else ''}, {kernels} kernels, "
             f"{precision}, {layout + ', ' if layout else ''}dp {dp}"
             f"{' FSDP' if fsdp else ' ZeRO-1' if dp > 1 else ''}, micro-batch {mb} x {seq} "
             f"x {accum}{'; ' + graphs if graphs else ''}"
             f"{'; experts through the op fuser (the recipe sets it)' if fuser else ''}"
             f"{'; ' + recompute_note if recompute_note else ''}")
    model = arch.name if r["model"] in NEMO_GPT3 else models[r["model"]]
    key = (model, precision, method, seq, n, tp, pp, cp, ep, vp, mb, accum, fsdp)
    return HopperRow(label, r["source"], measured, t, hw, setup, None, key, r.get("split", ""))


def megatron_bridge_table(source: str) -> bool:
    """Whether a row comes from Megatron-Bridge's performance summaries, whose tables state
    every layout size (VP and EP "n/a" where not used)."""
    return "Megatron-Bridge" in source and "performance-summary" in source


def row_graph_scope(r: dict[str, str], models: dict[str, str], method: str,
                    layout: dict[str, int]) -> tuple[tuple[str, ...] | None, str]:
    """(Training.cuda_graph_scope, what the setup column says) of a megatron-path row: a
    Megatron-Bridge row's recipe's (recipe_graphs.recipe_graph_scope: the row's model, system,
    GPU count and precision; LoRA rows the peft recipe); NeMo's and Megatron-LM's rows are not
    read from a recipe and stay ungraphed."""
    if "Megatron-Bridge" not in r["source"]:
        return None, "CUDA graphs not read (not a Megatron-Bridge recipe): left ungraphed"
    gpu = "h100" if r["gpu"].startswith("H100") else r["gpu"].lower()
    return recipe_graph_scope(models.get(r["model"], r["model"]), gpu, int(r["n_gpus"]),
                              r["precision"], "peft" if method == "lora" else "pretrain",
                              layout)


def row_op_fuser(r: dict[str, str], models: dict[str, str], method: str,
                 layout: dict[str, int]) -> bool:
    """Training.moe_fused_mlp of a megatron-path MoE row: its Megatron-Bridge recipe's op
    fuser (recipe_graphs.recipe_op_fuser, matched as row_graph_scope matches); other sources'
    rows run Megatron-Core's default, the unfused grouped MLP."""
    if "Megatron-Bridge" not in r["source"]:
        return False
    gpu = "h100" if r["gpu"].startswith("H100") else r["gpu"].lower()
    return recipe_op_fuser(models.get(r["model"], r["model"]), gpu, int(r["n_gpus"]),
                           r["precision"], "peft" if method == "lora" else "pretrain", layout)


def row_recompute(r: dict[str, str], models: dict[str, str], method: str,
                  layout: dict[str, int]) -> tuple[tuple[str, ...] | None, str]:
    """(Training.recompute_modules, what the setup column says) of a megatron-path row: its
    Megatron-Bridge recipe's selective recomputation (recipe_graphs.recipe_recompute, matched
    as row_graph_scope matches); other sources' rows: none."""
    if "Megatron-Bridge" not in r["source"]:
        return None, ""
    gpu = "h100" if r["gpu"].startswith("H100") else r["gpu"].lower()
    return recipe_recompute(models.get(r["model"], r["model"]), gpu, int(r["n_gpus"]),
                            r["precision"], "peft" if method == "lora" else "pretrain", layout)


# --- the split and the fit -------------------------------------------------------------------

def split_halves(rows: list[HopperRow]) -> tuple[list[HopperRow], list[HopperRow]]:
    """(tuning, held-out) of the expressed rows, as the data's `split` column freezes them: a
    configuration goes where its rows say (they must agree), every row of it with it, and a
    configuration none of whose rows is assigned is held out, so that adding rows never moves a
    configuration between halves."""
    expressed = [r for r in rows if r.skipped is None]
    stated: dict[tuple[Any, ...], set[str]] = {}
    for r in expressed:
        if r.split not in ("", "tune", "held-out"):
            raise ValueError(f"{r.label}: split {r.split!r}, expected tune, held-out or empty")
        if r.split:
            stated.setdefault(r.config_key, set()).add(r.split)
    for key, halves in stated.items():
        if len(halves) > 1:
            raise ValueError(f"configuration {key} is split both ways: {sorted(halves)}")
    tune_keys = {key for key, halves in stated.items() if halves == {"tune"}}
    tune = [r for r in expressed if r.config_key in tune_keys]
    held = [r for r in expressed if r.config_key not in tune_keys]
    return tune, held


def predicted_tokens_per_s(row: HopperRow) -> float:
    assert row.training is not None and row.hardware is not None
    return estimate_training(row.training, row.hardware, row.training.model_basis)\
        .tokens_per_s_per_gpu.value


@contextmanager
def hopper_efficiency(name: str, value: float) -> Iterator[None]:
    """Temporarily set the Hopper entry of GEMM_EFFICIENCY_BY_GENERATION (name "bf16") or of
    FP8_GEMM_EFFICIENCY_BY_GENERATION (name "fp8"): for the fit only."""
    table = A.GEMM_EFFICIENCY_BY_GENERATION if name == "bf16" else \
        A.FP8_GEMM_EFFICIENCY_BY_GENERATION
    old = table["hopper"]
    table["hopper"] = replace(old, value=value)
    try:
        with patched_estimate():  # nothing kept from or for the unpatched estimate
            yield
    finally:
        table["hopper"] = old


def rms_log_error(rows: list[HopperRow], predict: Callable[[HopperRow], float]) -> float:
    """Root mean square over configurations of log(predicted / measured), each configuration's
    error the mean over its rows (a setup its source re-measured in five releases counts once)."""
    by_config: dict[tuple[Any, ...], list[float]] = {}
    predicted: dict[tuple[Any, ...], float] = {}
    for r in rows:
        if r.config_key not in predicted:
            predicted[r.config_key] = predict(r)
        by_config.setdefault(r.config_key, []).append(
            math.log(predicted[r.config_key] / (r.measured or math.nan)))
    errs = [sum(v) / len(v) for v in by_config.values()]
    return math.sqrt(sum(e * e for e in errs) / len(errs))


def _best(rows: list[HopperRow], name: str, grid: tuple[float, ...]) -> float:
    scores = {}
    for value in grid:
        with hopper_efficiency(name, value):
            scores[value] = rms_log_error(rows, predicted_tokens_per_s)
    return min(scores, key=lambda v: scores[v])


#: the efficiencies the fit tries: 0.40, 0.41, ... 0.80 of the dense peak. 0.80 is the most a
#: large GEMM reaches in public H100 SXM sweeps (bf16 ~750-800 of 989 TFLOPS; fp8 ~1300-1500 of
#: 1979); a fit that ends on it says the rows are slower for reasons outside the GEMMs.
FIT_GRID = tuple(i / 100 for i in range(40, 81))


def gemm_bound(row: HopperRow) -> bool:
    """Whether the estimate's largest part of the row's step is its matmul compute (under the
    constants of assumptions.py): only there does a GEMM efficiency govern the prediction. A row
    bound by communication or the host says nothing about the GEMMs, and fitting it would make
    the efficiency pay for another mechanism's error."""
    assert row.training is not None and row.hardware is not None
    e = estimate_training(row.training, row.hardware, row.training.model_basis)
    # the largest part as summed, not the label that names the network when the collectives in
    # all outlast the compute they mostly hide behind (timing.network_bottleneck)
    return e.largest_part == "matmul compute"


def fit_hopper(tune: list[HopperRow], grid: tuple[float, ...] = FIT_GRID) -> dict[str, float]:
    """The Hopper GEMM efficiencies that minimise the rms log error on the tuning rows that are
    GEMM-bound (`gemm_bound`) and dense: an MoE's expert GEMMs are grouped GEMMs of a few hundred
    to a few thousand tokens per expert, behind routing and token permutation the estimate does
    not cost (docs/validation.md), so its rows would charge those to the dense GEMMs' rate.
    bf16 on the bf16 rows, then fp8 on the fp8 rows with bf16 at its fitted value (their
    attention and LM head run in bf16). A grid of 0.01 steps; nothing else is varied
    (rms_log_error: each configuration counts once)."""
    bound = [r for r in tune if gemm_bound(r) and r.training is not None
             and not r.training.arch.is_moe]
    bf16 = [r for r in bound if r.config_key[1] == "bf16-mixed"]
    fp8 = [r for r in bound if r.config_key[1] == "fp8-mixed"]
    out = {"bf16": _best(bf16, "bf16", grid)}
    with hopper_efficiency("bf16", out["bf16"]):
        out["fp8"] = _best(fp8, "fp8", grid)
    return out
