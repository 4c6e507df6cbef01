"""What fits: the largest micro-batch with headroom, the accumulation for a target effective
batch, the fastest configuration that fits, and, when nothing fits, what would."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from gpuhours.catalog.schema import GpuSpec
from gpuhours.errors import InputError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.flops import training_flops_per_token
from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.timing import training_step_time
from gpuhours.setup import Hardware, Training

MAX_MICRO_BATCH = 512


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Candidate(_Out):
    """One configuration that was evaluated."""

    change: str
    micro_batch: int
    grad_accum: int
    checkpointing: bool
    method: str
    zero_stage: int
    num_gpus: int
    gpu: str
    memory_total_bytes: float
    memory_limit_bytes: float
    fits: bool
    tokens_per_s_per_gpu: float


class FitResult(_Out):
    """The answer of `gpuhours fit`. Memory limit = device memory x (1 - headroom)."""

    requested: Candidate
    headroom_fraction: float
    largest_micro_batch: int | None
    grad_accum_for_effective_batch: int | None
    effective_batch: int | None
    #: the micro-batch that, with grad_accum_for_effective_batch and the GPUs, makes exactly
    #: the effective batch: the largest that fits and divides it (micro-batch x accumulation
    #: x GPUs = effective batch); None when no whole split exists
    micro_batch_for_effective_batch: int | None = None
    #: why the effective batch cannot be reached exactly, and what is nearest; "" when it is
    effective_batch_note: str = ""
    fastest: Candidate | None
    alternatives: list[Candidate]
    candidates_evaluated: int


def _evaluate(t: Training, hw: Hardware, headroom: float, change: str) -> Candidate:
    mem = training_memory(t.arch, t, hw.num_gpus)
    limit = hw.gpu.memory_bytes * (1 - headroom)
    flops = training_flops_per_token(t.arch, t.seq_len, t.method, t.lora_rank, t.lora_targets,
                                     t.checkpointing, t.loss_kernel)
    st = training_step_time(t.arch, t, hw, flops, mem.trainable_params)
    return Candidate(
        change=change, micro_batch=t.micro_batch, grad_accum=t.grad_accum,
        checkpointing=t.checkpointing, method=t.method, zero_stage=t.zero_stage,
        num_gpus=hw.num_gpus, gpu=hw.gpu.name, memory_total_bytes=mem.total_bytes,
        memory_limit_bytes=limit, fits=mem.total_bytes <= limit,
        tokens_per_s_per_gpu=t.tokens_per_micro_batch * t.grad_accum / st.step_time_s,
    )


def _accum_for(effective_batch: int | None, micro_batch: int, num_gpus: int) -> int | None:
    """Accumulation steps for exactly `effective_batch` sequences per optimizer step; None
    when micro_batch x GPUs does not divide it."""
    if effective_batch is None:
        return 1
    per_pass = micro_batch * num_gpus
    if effective_batch % per_pass:
        return None
    return effective_batch // per_pass


def divisor_at_most(total: int, cap: int) -> int:
    """The largest divisor of `total` not above `cap` (a micro-batch that keeps an effective
    batch whole)."""
    return max(d for d in range(1, max(1, min(total, cap)) + 1) if total % d == 0)


def _split_effective_batch(effective_batch: int, largest: int, num_gpus: int
                           ) -> tuple[int | None, int | None, str]:
    """(micro-batch, accumulation, note): the largest micro-batch up to `largest` that makes
    exactly `effective_batch` with `num_gpus`; otherwise the nearest reachable batches."""
    if effective_batch % num_gpus == 0:
        mb = divisor_at_most(effective_batch // num_gpus, largest)
        return mb, effective_batch // (mb * num_gpus), ""
    below = effective_batch // num_gpus * num_gpus
    above = below + num_gpus
    near = " or ".join(str(b) for b in (below, above) if b > 0)
    return None, None, (f"an effective batch of {effective_batch} cannot be split over "
                        f"{num_gpus} GPUs (micro-batch x accumulation x GPUs); nearest: {near}")


def _largest_micro_batch(t: Training, hw: Hardware, headroom: float) -> tuple[int | None, int]:
    """Largest micro-batch that fits (memory grows monotonically with it): binary search."""
    evaluated = 0

    def fits(mb: int) -> bool:
        nonlocal evaluated
        evaluated += 1
        return _evaluate(t.model_copy(update={"micro_batch": mb}), hw, headroom, "").fits

    if not fits(1):
        return None, evaluated
    lo, hi = 1, MAX_MICRO_BATCH
    if fits(hi):
        return hi, evaluated
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo, evaluated


def fit(t: Training, hw: Hardware, effective_batch: int | None = None,
        headroom: float | None = None, bigger_gpus: Iterable[GpuSpec] = ()) -> FitResult:
    """Answer: does `t` fit on `hw`, how large a micro-batch fits, what is fastest, and what
    would fit when nothing does. Every candidate's memory comes from training_memory."""
    headroom = A.FIT_HEADROOM_FRACTION.value if headroom is None else headroom
    requested = _evaluate(t, hw, headroom, "as given")
    largest, evaluated = _largest_micro_batch(t, hw, headroom)

    # Sweep micro-batch x checkpointing x ZeRO stage for the fastest configuration that fits.
    stages = [0, 1, 2, 3] if hw.num_gpus > 1 else [0]
    if t.method == "qlora":
        stages = [0]
    fastest: Candidate | None = None
    for ckpt in (False, True):
        for stage in stages:
            for mb in range(1, MAX_MICRO_BATCH + 1):
                mb_accum = _accum_for(effective_batch, mb, hw.num_gpus)
                if mb_accum is None:
                    # this micro-batch cannot make the effective batch exactly; a larger one
                    # may (memory still decides where the sweep stops)
                    if not _evaluate(t.model_copy(update={"micro_batch": mb,
                                                          "checkpointing": ckpt,
                                                          "zero_stage": stage}),
                                     hw, headroom, "").fits:
                        break
                    continue
                c = _evaluate(t.model_copy(update={"micro_batch": mb, "checkpointing": ckpt,
                                                   "zero_stage": stage, "grad_accum": mb_accum}),
                              hw, headroom, f"micro-batch {mb}, checkpointing "
                              f"{'on' if ckpt else 'off'}, ZeRO {stage}")
                evaluated += 1
                if not c.fits:
                    break  # memory only grows with the micro-batch
                if fastest is None or c.tokens_per_s_per_gpu > fastest.tokens_per_s_per_gpu:
                    fastest = c

    alternatives: list[Candidate] = []
    if largest is None:
        alternatives = _what_would_fit(t, hw, headroom, bigger_gpus)
        evaluated += len(alternatives)
    accum: int | None = None
    split_mb: int | None = None
    note = ""
    if effective_batch is not None and largest is not None:
        split_mb, accum, note = _split_effective_batch(effective_batch, largest, hw.num_gpus)
    return FitResult(
        requested=requested, headroom_fraction=headroom, largest_micro_batch=largest,
        grad_accum_for_effective_batch=accum, effective_batch=effective_batch,
        micro_batch_for_effective_batch=split_mb, effective_batch_note=note,
        fastest=fastest, alternatives=alternatives, candidates_evaluated=evaluated,
    )


def _what_would_fit(t: Training, hw: Hardware, headroom: float,
                    bigger_gpus: Iterable[GpuSpec]) -> list[Candidate]:
    """One change at a time at micro-batch 1 (checkpointing on from the second), ZeRO-3 up to
    the first GPU count that fits, and the three smallest larger GPUs that fit."""
    base = t.model_copy(update={"micro_batch": 1})
    tries: list[tuple[str, Training, Hardware]] = [
        ("gradient checkpointing", base.model_copy(update={"checkpointing": True}), hw),
    ]
    if t.method == "full":
        tries.append(("LoRA (rank 16, all linear layers)",
                      base.model_copy(update={"method": "lora", "checkpointing": True}), hw))
    if t.method != "qlora" and t.precision != "fp32":
        tries.append(("QLoRA (4-bit base)",
                      base.model_copy(update={"method": "qlora", "checkpointing": True,
                                              "zero_stage": 0}), hw))
    if t.method != "qlora" and hw.num_gpus > 1:
        for stage in range(t.zero_stage + 1, 4):
            tries.append((f"ZeRO-{stage} over the {hw.num_gpus} GPUs",
                          base.model_copy(update={"zero_stage": stage}), hw))
    if t.method != "qlora":
        for n in (2, 4, 8, 16, 32, 64, 128, 256, 512):
            if n > hw.num_gpus:
                tries.append((f"ZeRO-3 over {n} GPUs",
                              base.model_copy(update={"zero_stage": 3, "checkpointing": True}),
                              hw.model_copy(update={"num_gpus": n})))
    out = []
    for change, tt, hh in tries:
        out.append(_evaluate(tt, hh, headroom, change))
    # ZeRO-3 over more GPUs: only up to the first GPU count that fits
    more_gpus = [c for c in out if c.num_gpus > hw.num_gpus]
    first_fit = next((c.num_gpus for c in more_gpus if c.fits), None)
    out = [c for c in out if c not in more_gpus or first_fit is None or c.num_gpus <= first_fit]
    # a larger GPU, as given otherwise (with checkpointing): the three smallest that fit
    larger = []
    for gpu in sorted(bigger_gpus, key=lambda g: g.memory_gb):
        if gpu.memory_gb <= hw.gpu.memory_gb:
            continue
        try:
            c = _evaluate(base.model_copy(update={"checkpointing": True}),
                          hw.model_copy(update={"gpu": gpu}), headroom,
                          f"a larger GPU: {gpu.name} ({gpu.memory_gb:g} GB)")
        except InputError:
            continue  # a GPU without this precision
        if c.fits:
            larger.append(c)
        if len(larger) == 3:
            break
    return out + larger


def chosen_setup(t: Training, hw: Hardware, headroom: float | None = None
                 ) -> tuple[Training, str] | None:
    """The fastest setup of the same model and method that fits (micro-batch, checkpointing,
    ZeRO stage chosen; everything else as given), with a sentence saying what was chosen; None
    when none fits. For a question that leaves the setup open: "a 65B model on 2,048 GPUs"."""
    result = fit(t, hw, headroom=headroom)
    best = result.fastest
    if best is None:
        return None
    chosen = t.model_copy(update={"micro_batch": best.micro_batch,
                                  "checkpointing": best.checkpointing,
                                  "zero_stage": best.zero_stage, "grad_accum": t.grad_accum})
    why = (f"setup chosen by gpuhours: micro-batch {best.micro_batch}, checkpointing "
           f"{'on' if best.checkpointing else 'off'}, ZeRO {best.zero_stage} (the fastest of "
           f"{result.candidates_evaluated} configurations that fit with "
           f"{result.headroom_fraction:.0%} headroom; the defaults did not fit). Give --batch, "
           f"--checkpointing or --zero to choose yourself.")
    return chosen, why
