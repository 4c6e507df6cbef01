"""The estimator against published measurements (data/: copied from shared/reference/validation
with each row's source). Used by scripts/validate.py (docs/validation.md) and the tests.

Each published row is mapped to a workload the estimator can express, with what the source
measured (allocated vs reserved memory, tokens/s per GPU, GPU hours) and the setup it states;
rows the estimator cannot express are listed with the reason. Nothing here is tuned per row.
"""

from __future__ import annotations

import csv
import functools
import io
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any

from gpuhours import catalog
from gpuhours.estimate.arch import ModelArch, from_hf_config, standard_shape
from gpuhours.estimate.device_overhead import EAGER_CONTEXT_BYTES
from gpuhours.estimate.estimator import estimate_training
from gpuhours.estimate.memory import training_memory
from gpuhours.resolve import resolve_model
from gpuhours.setup import Hardware, Training

GIB = 2**30


@dataclass(frozen=True)
class Comparison:
    """One published figure beside the estimate of the same setup."""

    kind: str  # "throughput", "gpu_hours", "memory"
    label: str
    measured: float
    predicted: float | None
    unit: str
    measured_what: str
    setup: str
    source: str
    skipped: str | None = None
    #: for throughput rows: measured tokens/s x model FLOPs/token / dense peak
    implied_mfu: float | None = None
    #: fine-tuning rows (finetune.py): the source's short name, the method, the GPU generation
    group: str = ""
    method: str = ""
    generation: str = ""

    @property
    def error(self) -> float | None:
        """predicted / measured - 1."""
        return None if self.predicted is None else self.predicted / self.measured - 1


#: what-ifs in progress (patched_estimate): while one runs, nothing is kept or read back
_patched = 0


@contextmanager
def patched_estimate() -> Iterator[None]:
    """The block runs the estimate patched (a what-if swaps a constant or a function): the
    tables (kept) and the RL cases (rl.py) are built afresh in it and not kept."""
    global _patched
    _patched += 1
    try:
        yield
    finally:
        _patched -= 1


def estimate_patched() -> bool:
    """Whether a what-if (patched_estimate) is running."""
    return _patched > 0


def kept(build: Callable[[], list[Comparison]]) -> Callable[[], list[Comparison]]:
    """A table's comparisons built once a process, a new list each call: validate.py and the
    tests ask for each table several times (minutes in all), and a Comparison is frozen.
    Under a what-if (patched_estimate) built afresh, and not kept."""
    once = functools.lru_cache(maxsize=1)(lambda: tuple(build()))

    @functools.wraps(build)
    def table() -> list[Comparison]:
        return list(build()) if estimate_patched() else list(once())
    return table


def _rows(name: str) -> list[dict[str, str]]:
    text = resources.files("gpuhours_dev.validation").joinpath("data", name).read_text("utf-8")
    # strict: a stray quote in a notes cell is an error here, not a silently garbled row
    return list(csv.DictReader(io.StringIO(text, newline=""), strict=True))


def _llm_foundry_mpt(size: str, seq_len: int) -> ModelArch:
    """The MPT benchmark configs of llm-foundry: learned position embeddings of seq_len and
    biases, on top of the catalog's (ALiBi, bias-free) config; tests/test_catalog.py shows this
    reproduces the table's parameter counts."""
    _, cfg = catalog.model(f"mpt-{size}")
    cfg = {**cfg, "no_bias": False, "max_seq_len": seq_len,
           "attn_config": {**cfg.get("attn_config", {}), "alibi": False}}
    return from_hf_config(cfg, name=f"mpt-{size} (llm-foundry benchmark config)")


def _note(notes: str, key: str) -> str | None:
    m = re.search(rf"{key}=([^;]+)", notes)
    return m.group(1).strip() if m else None


@kept
def throughput_comparisons() -> list[Comparison]:
    out = []
    a100 = catalog.gpu("a100-80gb")
    for r in _rows("throughput.csv"):
        measured = float(r["tokens_per_sec_per_gpu"]) if r["tokens_per_sec_per_gpu"] else None
        label = f"{r['model']} seq {r['seq_len']} x{r['n_gpus']} {r['gpu']}"
        if r["model"].startswith("MPT"):
            out.append(_mpt_row(r, a100, label))
        else:
            out.append(_torchtune_row(r, label, measured))
    return out


def _mpt_row(r: dict[str, str], gpu: Any, label: str) -> Comparison:
    seq = int(r["seq_len"])
    n = int(r["n_gpus"])
    mb = int(r["micro_batch"])
    accum = int(_note(r["notes"], "grad_accum") or 1)
    arch = _llm_foundry_mpt(r["model"].split("-")[1], seq)
    ckpt = r["activation_checkpointing"] == "True"
    t = Training(arch=arch, precision="bf16-mixed", micro_batch=mb, seq_len=seq,
                 grad_accum=accum, checkpointing=ckpt, zero_stage=3)
    # 1600 Gb/s between nodes of 8 GPUs = 25 GB/s per GPU (the table's heading)
    hw = Hardware(gpu=gpu, num_gpus=n, gpus_per_node=8, inter_node_gb_per_s_one_way=25.0)
    e = estimate_training(t, hw, "llm-foundry config")
    setup = (f"FSDP full shard, bf16 mixed, micro-batch {mb} x accumulation {accum}, "
             f"checkpointing {'on' if ckpt else 'off'}")
    measured = float(r["tokens_per_sec_per_gpu"])
    return Comparison("throughput", label, measured, e.tokens_per_s_per_gpu.value,
                      "tokens/s per GPU", "measured tokens/s per GPU", setup, r["source"],
                      implied_mfu=_implied_mfu(e, measured))


def _implied_mfu(e: Any, measured_tokens_per_s: float) -> float:
    """MFU the measurement implies, by our FLOP count and the datasheet peak."""
    return e.mfu.value * measured_tokens_per_s / e.tokens_per_s_per_gpu.value


_TORCHTUNE_MODELS = {"Llama 3.1 8B": "llama-3.1-8b", "Llama 3.2 3B": "llama-3.2-3b"}
_TORCHTUNE_GPUS = {"RTX 4090": "rtx-4090", "RTX A6000": "rtx-a6000", "A100": "a100-80gb"}


def _torchtune_row(r: dict[str, str], label: str, measured: float | None) -> Comparison:
    notes = r["notes"]
    technique = (re.search(r'technique "([^"]+)"', notes) or re.search(r"\(([^)]+)\)", notes))
    tech = technique.group(1) if technique else ""
    label = f"torchtune {r['model']} {tech} on {r['gpu']}"
    base: dict[str, Any] = dict(kind="throughput", label=label, unit="tokens/s per GPU",
                measured_what="tokens/s over one epoch", source=r["source"])
    if measured is None:
        return Comparison(**base, measured=float("nan"), predicted=None, setup="",
                          skipped="tokens/s not stated per GPU for the multi-GPU rows")
    if tech in ("Baseline",):
        return Comparison(**base, measured=measured, predicted=None, setup="",
                          skipped="unpacked dataset: the share of padding is not stated")
    if tech == "Full finetune":
        return Comparison(**base, measured=measured, predicted=None, setup="",
                          skipped="full fine-tuning of 8B on one 24/48 GB card relies on "
                                  "optimizer-in-backward and paged/8-bit states with offload, "
                                  "which the estimator does not model")
    model = _TORCHTUNE_MODELS[r["model"]]
    arch, _ = resolve_model(model)
    gpu = catalog.gpu(_TORCHTUNE_GPUS[r["gpu"]])
    method = {"LoRA": "lora", "QLoRA": "qlora"}.get(tech, "full")
    optimizer = "adamw-8bit" if tech == "+ 8-bit AdamW" else "adamw"
    ckpt = r["activation_checkpointing"] == "True"  # not stated: off
    compiled = "compile" in notes.lower() or tech not in ("+ Packed Dataset",)
    # torchtune's LoRA recipes: rank 8 on attention and MLP projections; its LoRALinear runs
    # peft's eager operators in bf16, fused by torch.compile where compiled (lora_branch)
    branch = ({"lora_branch": "fused" if compiled else "peft-half"} if method != "full"
              else {})
    t = Training.model_validate(dict(
        arch=arch, method=method, precision="bf16", optimizer=optimizer,
        micro_batch=int(r["micro_batch"]), seq_len=int(r["seq_len"]), checkpointing=ckpt,
        lora_rank=8, lora_targets="all-linear", compile=compiled, kv_repeated=True, **branch))
    e = estimate_training(t, Hardware(gpu=gpu), "catalog")
    setup = (f"{method}, bf16, batch {t.micro_batch} x {t.seq_len} packed, checkpointing "
             f"{'on' if ckpt else 'off'}"
             f"{'; torch.compile (estimate/compiled.py)' if compiled else ''}; k and v "
             f"repeated to the query heads (kv_repeated)")
    return Comparison(**base, measured=measured, predicted=e.tokens_per_s_per_gpu.value,
                      setup=setup, implied_mfu=_implied_mfu(e, measured))


@kept
def hopper_comparisons() -> list[Comparison]:
    """Training throughput on H100 (validation/hopper.py): each expressed row in its half of
    the split (group "tune" or "held-out"), the rest with why."""
    from gpuhours_dev.validation.hopper import hopper_rows, predicted_tokens_per_s, split_halves

    rows = hopper_rows(_rows("throughput_h100.csv"))
    tune, _ = split_halves(rows)
    tuned = {id(r) for r in tune}
    out = []
    for r in rows:
        if r.skipped is not None or r.measured is None:
            out.append(Comparison("throughput_hopper", r.label, r.measured or float("nan"), None,
                                  "tokens/s per GPU", "", "", r.source, skipped=r.skipped))
            continue
        assert r.training is not None and r.hardware is not None
        e = estimate_training(r.training, r.hardware, r.training.model_basis)
        predicted = predicted_tokens_per_s(r)
        out.append(Comparison("throughput_hopper", r.label, r.measured, predicted,
                              "tokens/s per GPU", "measured tokens/s per GPU", r.setup, r.source,
                              implied_mfu=_implied_mfu(e, r.measured),
                              group="tune" if id(r) in tuned else "held-out",
                              generation="hopper"))
    return out


@kept
def blackwell_comparisons() -> list[Comparison]:
    """Training throughput on Blackwell (validation/blackwell.py): each expressed row (all held
    out: no constant was set from them), the rest with why."""
    from gpuhours_dev.validation.blackwell import blackwell_rows
    from gpuhours_dev.validation.hopper import predicted_tokens_per_s

    out = []
    for r in blackwell_rows(_rows("throughput_blackwell.csv")):
        if r.skipped is not None or r.measured is None:
            out.append(Comparison("throughput_blackwell", r.label, r.measured or float("nan"),
                                  None, "tokens/s per GPU", "", "", r.source,
                                  skipped=r.skipped, generation="blackwell"))
            continue
        assert r.training is not None and r.hardware is not None
        e = estimate_training(r.training, r.hardware, r.training.model_basis)
        out.append(Comparison("throughput_blackwell", r.label, r.measured,
                              predicted_tokens_per_s(r), "tokens/s per GPU",
                              "measured tokens/s per GPU", r.setup, r.source,
                              implied_mfu=_implied_mfu(e, r.measured), group="held-out",
                              generation="blackwell"))
    return out


# Llama 2 pretraining (Touvron et al. 2023, sec. 2.2 and table 1): 4k context, global batch of
# 4M tokens (1024 sequences), AdamW, bf16, A100-80GB. The paper states neither the GPU count nor
# the parallel layout, so we apply one rule to every size: 512 GPUs (64 nodes of 8, 200 Gb/s per
# GPU), each taking its share of the global batch (2 sequences) in as few micro-batches as fit,
# the lowest ZeRO stage that fits, activation checkpointing only where needed to fit in 80 GB.
_LLAMA2 = {"Llama 2 7B": "llama-2-7b", "Llama 2 13B": "llama-2-13b", "Llama 2 70B": "llama-2-70b"}
LLAMA2_GPUS = 512


def _llama2_setup(arch: ModelArch, gpu: Any) -> tuple[Training, Hardware]:
    hw = Hardware(gpu=gpu, num_gpus=LLAMA2_GPUS, gpus_per_node=8)
    per_gpu = 1024 // LLAMA2_GPUS
    for stage in (1, 2, 3):
        for ckpt in (False, True):
            for mb in range(per_gpu, 0, -1):
                if per_gpu % mb:
                    continue
                t = Training(arch=arch, precision="bf16-mixed", micro_batch=mb, seq_len=4096,
                             grad_accum=per_gpu // mb, checkpointing=ckpt, zero_stage=stage)
                if training_memory(arch, t, hw.num_gpus).total_bytes <= gpu.memory_bytes:
                    return t, hw
    raise AssertionError(f"{arch.name} does not fit")  # pragma: no cover


@kept
def gpu_hours_comparisons() -> list[Comparison]:
    out = []
    gpu = catalog.gpu("a100-80gb")
    for r in _rows("pretraining_gpu_hours.csv"):
        if r["model"] in _LLAMA2:
            arch, basis = resolve_model(_LLAMA2[r["model"]])
        else:
            # 34B was not released; the paper's table 1 gives its shape: d 8192, 48 layers, GQA
            arch = standard_shape(34e9, name="llama-2-34b (standard shape)", hidden_size=8192,
                                  num_layers=48)
            basis = "standard shape, d 8192, 48 layers"
        t, hw = _llama2_setup(arch, gpu)
        tokens = float(r["tokens_billion"]) * 1e9
        e = estimate_training(t, hw, basis, tokens=tokens)
        assert e.totals is not None
        setup = (f"{LLAMA2_GPUS} GPUs, ZeRO-{t.zero_stage}, micro-batch {t.micro_batch} x 4096 x "
                 f"accumulation {t.grad_accum}, checkpointing {'on' if t.checkpointing else 'off'}"
                 f", {tokens / 1e12:g}T tokens")
        out.append(Comparison("gpu_hours", r["model"], float(r["gpu_hours"]),
                              e.totals.gpu_hours.value, "GPU hours",
                              "pretraining GPU time (model card)", setup, r["source"]))
    return out


_PEFT_LORA = re.compile(r"^LORA \(lora/llama-3\.2-3B-rank(\d+)(-rslora|-dora)?\)$")


@kept
def memory_comparisons() -> list[Comparison]:
    """PEFT's method comparison (reserved memory, 99th percentile of steps) and others."""
    out = []
    arch, _ = resolve_model("llama-3.2-3b")  # on an L40S; the device does not enter the peak
    for r in _rows("memory.csv"):
        measured = float(r["peak_memory_gb"]) * GIB
        base: dict[str, Any] = dict(kind="memory", label=f"{r['model']} {r['method'][:48]}", unit="bytes",
                    source=r["source"], measured=measured)
        if "peft" not in r["source"]:
            out.append(_bert_row(r, base))
            continue
        what = "torch memory_reserved, 99th percentile over steps"
        lora = _PEFT_LORA.match(r["method"])
        if r["method"].startswith("FULL FINE-TUNING"):
            t = Training(arch=arch, method="full", precision="bf16", micro_batch=4, seq_len=768)
        elif lora:
            # peft's default LoRA targets for llama are q_proj and v_proj; -dora: use_dora
            # (lora_dropout 0: the base output reused, estimate/dora.py)
            t = Training(arch=arch, method="lora", precision="bf16", micro_batch=4,
                         seq_len=768, lora_rank=int(lora.group(1)), lora_targets="qv",
                         dora=lora.group(2) == "-dora")
        else:
            out.append(Comparison(**base, predicted=None, setup="", measured_what=what,
                                  skipped="a PEFT method other than LoRA"))
            continue
        m = training_memory(arch, t)
        setup = (f"{t.method}{' rank ' + str(t.lora_rank) + ' on q,v' if lora else ''}"
                 f"{' DoRA' if t.dora else ''}, bf16 "
                 f"weights and AdamW states, batch 4 x 768 (the longest batch of the run)")
        out.append(Comparison(**base, predicted=m.reserved_bytes, setup=setup,
                              measured_what=what))
    return out


#: the CUDA context and kernels the transformers guide measured on its V100 (its notes): an
#: eagerly loading stack (PyTorch 1.10, CUDA before 11.7), estimate/device_overhead.py's
#: EAGER_CONTEXT_BYTES, which is this measurement
BERT_GUIDE_CONTEXT_BYTES = EAGER_CONTEXT_BYTES


def _bert_row(r: dict[str, str], base: dict[str, Any]) -> Comparison:
    """transformers' single-GPU training guide: bert-large-uncased sequence classification with
    the Trainer on a V100 16GB, 512 tokens, as nvidia-smi reports (CUDA context included)."""
    method = r["method"]
    what = "nvidia-smi memory used, CUDA context included"
    if "Adafactor" in method:
        return Comparison(**base, predicted=None, setup="", measured_what=what,
                          skipped="Adafactor (factored second moments) is not modelled")
    arch, _ = resolve_model("bert-large-uncased")
    fp16 = "fp16" in method
    t = Training.model_validate(dict(
        arch=arch, precision="fp16-amp" if fp16 else "fp32",
        optimizer="adamw-8bit" if "8-bit Adam" in method else "adamw",
        # January 2022: the Trainer's optimizer was transformers' AdamW, a per-parameter loop
        optimizer_impl="per-parameter",
        micro_batch=int(r["batch"]), seq_len=int(r["seq_len"]),
        grad_accum=4 if "grad accum 4" in method else 1,
        checkpointing="gradient checkpointing" in method, flash_attention=False))
    m = training_memory(arch, t)
    setup = (f"{t.precision}, {t.optimizer}, micro-batch {t.micro_batch} x 512 x accumulation "
             f"{t.grad_accum}, checkpointing {'on' if t.checkpointing else 'off'}, eager "
             f"attention with dropout; plus the 1343 MiB CUDA context the guide measured")
    return Comparison(**base, predicted=m.reserved_bytes + BERT_GUIDE_CONTEXT_BYTES,
                      setup=setup, measured_what=what)


def all_comparisons() -> list[Comparison]:
    from gpuhours_dev.validation.at_scale import plain_comparisons
    from gpuhours_dev.validation.finetune import finetune_comparisons

    return (throughput_comparisons() + hopper_comparisons() + blackwell_comparisons()
            + gpu_hours_comparisons()
            + memory_comparisons() + finetune_comparisons() + plain_comparisons())
