"""What would fit when the setup as given does not, even at micro-batch 1: the rows `fit` lists
under its fastest setup, each at micro-batch 1, in the order that gives up least first.

1. gradient checkpointing, on the GPUs given (when it is off);
2. each higher ZeRO stage over the GPUs given (more than one data-parallel rank);
3. CPU offload on the GPUs given (full training, none given; not on a TPU): offload_optimizer
   with ZeRO 1-3, or offload_param too with ZeRO 3 (DeepSpeed; one GPU included: ZeRO-Offload);
4. LoRA (full training given) and 5. QLoRA (not in fp32, not QLoRA already), on the GPUs given;
6. only when no setup of the method as given fits on the GPUs given without offload: more
   GPUs (2, 4, 8, ..., up to the first count that fits) and the three smallest larger catalog
   GPUs that fit.

A row is its change combined with what a user could add on the same GPUs: checkpointing
(as given, or on) and, from row 4 on, the ZeRO stage the data-parallel ranks allow (any
stage with more than one rank, 0 on one). Of those combinations the row shows the fastest that
fits, else the one needing the least memory (how far it is from fitting). Its label names every
change from the setup as given (changes_text), the LoRA branch a ZeRO-3 engine brings with it
included (estimate/lora_traffic.lora_branch_of): a row changes only what it says.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuhours.catalog.schema import GpuSpec
from gpuhours.errors import InputError
from gpuhours.estimate.candidate import Candidate, evaluate, tokens_per_s_per_gpu
from gpuhours.estimate.lora_traffic import lora_branch_of
from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.pipe_engine import runnable_zero_stages
from gpuhours.estimate.timing import QLORA_VENDORS
from gpuhours.setup import Hardware, Training

#: the GPU counts tried beyond the GPUs given: a search bound, not physics
MORE_GPU_COUNTS = (2, 4, 8, 16, 32, 64, 128, 256, 512)

#: one remedy: (the changed setup, the changed hardware) variants, of which one row is shown
Variants = list[tuple[Training, Hardware]]

_TARGETS_TEXT = {"all-linear": "all linear layers", "attention": "attention projections",
                 "qkv": "q, k and v projections", "qv": "q and v projections",
                 "mlp": "MLP projections"}


def method_text(t: Training) -> str:
    """How a row names LoRA or QLoRA: rank and targets as the setup holds them."""
    targets = _TARGETS_TEXT[t.lora_targets]
    if t.method == "qlora":
        bits = "8-bit" if t.base_quant == "int8-bnb" else "4-bit"
        return f"QLoRA ({t.base_quant} {bits} base, rank {t.lora_rank}, {targets})"
    return f"LoRA (rank {t.lora_rank}, {targets})"


def branch_change_text(t: Training, changed: Training) -> str:
    """The LoRA branch `changed` runs when it is not the one the setup as given would run with
    the same method ("" when the same, or for full training): a ZeRO-3 engine (DeepSpeed's, or
    FSDP's flat parameters) casts peft's fp32 adapters to half (estimate/lora_traffic.py)."""
    if changed.method == "full":
        return ""
    before = lora_branch_of(t.model_copy(update={"method": changed.method}))
    after = lora_branch_of(changed)
    if before == after:
        return ""
    why = ("a ZeRO-3/FSDP engine casts the adapters to half" if after == "peft-half"
           else "no ZeRO-3/FSDP engine casts the adapters")
    return f"LoRA branch {after} ({why}; {before} as given)"


def changes_text(t: Training, hw: Hardware, changed: Training, changed_hw: Hardware) -> str:
    """Every change from the setup as given (`t` on `hw`) to `changed` on `changed_hw`, the
    micro-batch apart (every row is at 1: the table's column says so), joined by " + "."""
    parts = []
    if changed.method != t.method:
        parts.append(method_text(changed))
    if changed_hw.gpu.name != hw.gpu.name:
        parts.append(f"a larger GPU: {changed_hw.gpu.name} ({changed_hw.gpu.memory_gb:g} GB)")
    stage = changed.zero_stage
    if changed_hw.num_gpus != hw.num_gpus:
        parts.append(f"ZeRO-{stage} over {changed_hw.num_gpus} GPUs" if stage
                     else f"{changed_hw.num_gpus} GPUs (ZeRO 0)")
    elif stage != t.zero_stage:
        parts.append(f"ZeRO-{stage} over the {hw.num_gpus} GPUs" if stage
                     else f"ZeRO 0 (ZeRO-{t.zero_stage} as given)")
    if changed.offload != t.offload:
        parts.append({"optimizer": "CPU offload of the optimizer (DeepSpeed offload_optimizer)",
                      "optimizer+params": "CPU offload of the optimizer and weights (DeepSpeed "
                                          "offload_optimizer + offload_param)",
                      "none": "no CPU offload"}[changed.offload])
    if changed.checkpointing != t.checkpointing:
        parts.append("gradient checkpointing" if changed.checkpointing else "checkpointing off")
    branch = branch_change_text(t, changed)
    if branch:
        parts.append(branch)
    return " + ".join(parts)


def _setup(t: Training, **update: object) -> Training | None:
    """`t` with `update`, validated as a setup (None when it cannot run, e.g. QLoRA with
    tensor parallelism or LoRA on a Mamba model's mixers)."""
    try:
        return Training.model_validate({**dict(t), **update})
    except InputError:
        return None


def _stages(t: Training, num_gpus: int) -> list[int]:
    """ZeRO stages a data-parallel group of this size can run (pipe_engine.runnable_zero_stages:
    any with more than one rank; DeepSpeed's PipelineEngine's own rule)."""
    return runnable_zero_stages(t, num_gpus // (t.tp * t.pp * t.cp))


def _combined(t: Training, hw: Hardware, stages: Iterable[int], **update: object) -> Variants:
    """`update` applied to `t` at micro-batch 1, with checkpointing as given and on, at each of
    `stages`, on `hw`."""
    out = []
    for stage in stages:
        for ckpt in sorted({t.checkpointing, True}):
            s = _setup(t, micro_batch=1, checkpointing=ckpt, zero_stage=stage, **update)
            if s is not None:
                out.append((s, hw))
    return out


def _with_batch(s: Training, h: Hardware, effective_batch: int | None
                ) -> tuple[Training, str]:
    """(`s` with the accumulation that makes `effective_batch` sequences a step at its
    micro-batch on `h`'s data-parallel ranks, the accumulation a multiple of pp on the
    interleaved schedule; where the ranks cannot make it, the nearest batch they make, as
    fit's own fallback rounds (the nearest multiple, one a rank at least), and the words that
    say so in the row ("" when exact or without a batch))."""
    if effective_batch is None:
        return s, ""
    ranks = max(1, h.num_gpus // (s.tp * s.pp * s.cp))
    step = s.micro_batch * ranks * (s.pp if s.virtual_stages > 1 else 1)
    made = max(1, round(effective_batch / step)) * step
    accum = made // (s.micro_batch * ranks)
    note = ("" if made == effective_batch else
            f"effective batch {made} (the nearest {ranks} data-parallel "
            f"rank{'s' if ranks > 1 else ''} make; not {effective_batch})")
    return s.model_copy(update={"grad_accum": accum}), note


def _row(t: Training, hw: Hardware, headroom: float, variants: Variants,
         effective_batch: int | None = None) -> tuple[Candidate | None, int]:
    """(the row of a remedy: the fastest variant that fits, else the one needing the least
    memory, labelled by changes_text; how many configurations were evaluated or ruled out).
    Each variant runs the accumulation `effective_batch` needs on its GPUs (_with_batch).

    A variant's speed does not depend on its memory, only whether it fits does (and that can
    take a replay of the allocator: step_replay.py). So the speeds come first (_speeds), and
    the memory of the variants is evaluated fastest first (ties in the variants' order, as
    max() keeps the first), up to the first that fits: the row. The slower ones cannot be
    the row and are not evaluated; they count as evaluated, as the ruling out is (their
    memory and speed raise no error: _speeds). A variant whose speed raised is evaluated in
    full first: it counts only where it does not fit, and is the row only where none fits.
    Where none fits, every variant was evaluated, and the row is the one needing the least
    memory, as before."""
    batched = [(_with_batch(s, h, effective_batch), h) for s, h in variants]
    setups = [(s, h) for (s, _), h in batched]
    said = [note for (_, note), _ in batched]

    def label(i: int) -> str:
        return " + ".join(x for x in (changes_text(t, hw, *setups[i]), said[i]) if x)

    speeds = _speeds(setups)
    known = sorted((i for i, v in enumerate(speeds) if v is not None),
                   key=lambda i: (-(speeds[i] or 0.0), i))
    unknown = [i for i, v in enumerate(speeds) if v is None]
    done: dict[int, Candidate] = {}
    for i in unknown + known:
        s, h = setups[i]
        try:
            c = evaluate(s, h, headroom, "", speed_if_too_big=False)
        except InputError:
            continue  # a change this model or GPU cannot take (a precision it lacks)
        done[i] = c
        # a variant whose speed raised in _speeds yet fits in evaluate would compete for the
        # row (not expected: both take the same trainable parameters): then no early answer
        if c.fits and i in known and not any(done[u].fits for u in unknown if u in done):
            not_evaluated = len(known) - known.index(i) - 1
            return (c.model_copy(update={"change": label(i)}),
                    len(done) + not_evaluated)
    tried = [(done[i], i) for i in sorted(done)]
    if not tried:
        return None, 0
    fitting = [x for x in tried if x[0].fits]
    if fitting:  # only where a variant fitted that the early answer had to pass over
        c, i = max(fitting, key=lambda x: x[0].tokens_per_s_per_gpu)
    else:
        _, i = min(tried, key=lambda x: x[0].memory_total_bytes)
        try:
            c = evaluate(*setups[i], headroom, "")  # its speed too, for the table
        except InputError:
            return None, len(tried)  # a GPU without this precision's matmul rate
    return c.model_copy(update={"change": label(i)}), len(tried)


def _speeds(setups: Variants) -> list[float | None]:
    """Each setup's tokens/s per GPU as `evaluate` gives it (candidate.tokens_per_s_per_gpu
    over training_memory's trainable parameters, no allocator replay); None where the memory
    or the speed raises an InputError (a change this model or GPU cannot take)."""
    out: list[float | None] = []
    for s, h in setups:
        try:
            m = training_memory(s.arch, s, h.num_gpus, 0.0, h.gpu.stack)
            out.append(tokens_per_s_per_gpu(s, h, m.trainable_params))
        except InputError:
            out.append(None)
    return out


def what_would_fit(t: Training, hw: Hardware, headroom: float, bigger_gpus: Iterable[GpuSpec],
                   same_method_fits: bool, effective_batch: int | None = None
                   ) -> tuple[list[Candidate], int]:
    """(the remedy rows in the module docstring's order, the configurations evaluated).
    `same_method_fits`: some setup of the method as given fits on the GPUs given (fit's
    fastest): then no row of more or larger GPUs is needed. `effective_batch`: sequences per
    optimizer step, each row's accumulation made to reach it (micro-batch 1 x accumulation x
    its data-parallel ranks)."""
    remedies: list[Variants] = []
    if not t.checkpointing:
        ckpt = _setup(t, micro_batch=1, checkpointing=True)
        remedies.append([] if ckpt is None else [(ckpt, hw)])
    if len(_stages(t, hw.num_gpus)) > 1:
        remedies += [_combined(t, hw, [stage]) for stage in range(t.zero_stage + 1, 4)]
    if t.method == "full" and t.offload == "none" and hw.gpu.stack == "torch-cuda":
        # the full method kept on these GPUs: optimizer state (and weights) in host memory,
        # paid for in PCIe traffic and a host Adam step (estimate/offload.py)
        remedies.append(
            _combined(t, hw, range(max(1, t.zero_stage), 4), offload="optimizer")
            + _combined(t, hw, [3], offload="optimizer+params"))
    if t.method == "full":
        remedies.append(_combined(t, hw, _stages(t, hw.num_gpus), method="lora"))
    if t.method != "qlora" and t.precision != "fp32" and hw.gpu.vendor in QLORA_VENDORS:
        remedies.append(_combined(t, hw, _stages(t, hw.num_gpus), method="qlora"))
    rows: list[Candidate] = []
    evaluated = 0
    for variants in remedies:
        row, n = _row(t, hw, headroom, variants, effective_batch)
        evaluated += n
        if row is not None:
            rows.append(row)
    # more GPUs are shown unless the method fits here as given, offload aside (which is slow)
    if same_method_fits or any(r.fits and r.method == t.method and r.offload == t.offload
                               for r in rows):
        return rows, evaluated
    for n_gpus in (n for n in MORE_GPU_COUNTS if n > hw.num_gpus):
        more = hw.model_copy(update={"num_gpus": n_gpus})
        row, n = _row(t, hw, headroom, _combined(t, more, _stages(t, n_gpus)), effective_batch)
        evaluated += n
        if row is not None:
            rows.append(row)
            if row.fits:
                break  # only up to the first GPU count that fits
    larger = 0
    for gpu in sorted(bigger_gpus, key=lambda g: g.memory_gb):
        if gpu.memory_gb <= hw.gpu.memory_gb:
            continue
        if gpu.stack != hw.gpu.stack:
            # a TPU is not a larger GPU for a PyTorch CUDA/ROCm run, nor the reverse: the
            # training code, kernels and memory tools change with the stack (GpuSpec.stack)
            continue
        if t.method == "qlora" and gpu.vendor not in QLORA_VENDORS:
            continue  # 4-bit bases (bitsandbytes, GPTQ, torchao NF4) run CUDA or ROCm kernels
        bigger = hw.model_copy(update={"gpu": gpu})
        row, n = _row(t, hw, headroom, _combined(t, bigger, _stages(t, hw.num_gpus)),
                      effective_batch)
        evaluated += n
        if row is not None and row.fits:
            rows.append(row)
            larger += 1
            if larger == 3:
                break
    return rows, evaluated
