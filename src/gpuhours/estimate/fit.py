"""What fits: the largest micro-batch with headroom, the accumulation for a target effective
batch, the fastest configuration that fits, and what else would fit (estimate/remedies.py)."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, field_serializer

from gpuhours.catalog.schema import GpuSpec
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.candidate import Candidate, evaluate, figure_json
from gpuhours.estimate.flops import training_flops
from gpuhours.estimate.parallel import stages_text, tp_split_problem
from gpuhours.estimate.params import count_params
from gpuhours.estimate.pipe_engine import runnable_zero_stages
from gpuhours.estimate.remedies import branch_change_text, what_would_fit
from gpuhours.estimate.step_replay import reserved_training_memory
from gpuhours.estimate.timing import TP_OVERLAP_GENERATIONS, groups_cross_nodes, training_step_time
from gpuhours.setup import Hardware, Training, default_grad_accum

MAX_MICRO_BATCH = 512
#: the most virtual stages a pipeline rank the chooser tries: a search bound, not physics (each
#: one more halves less of the bubble and adds pipeline sends; Megatron-LM's MoE guide: "a
#: value in the middle often gives the best trade-off")
MAX_VIRTUAL_STAGES = 8


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FitResult(_Out):
    """The answer of `gpuhours fit`. Memory limit = device memory x (1 - headroom): the
    largest micro-batch, the fastest setup and the remedies keep the headroom; the verdict on
    the setup as given is `estimate`'s (its peak within the device's memory)."""

    requested: Candidate
    headroom_fraction: float
    #: the device's memory (catalog; nvidia-smi's usable MiB where known), bytes
    device_memory_bytes: float = 0.0
    #: the setup as given fits the device's memory: `estimate`'s and `plan`'s verdict, without
    #: the headroom (requested.fits keeps it). estimate's allocator replay of variable-length
    #: samples is not run here
    requested_fits_device: bool = False
    #: the verdict (exit code 0, else 1): the setup as given fits the device's memory, or a
    #: setup of the same model and method on the same GPUs fits within the headroom (the
    #: largest micro-batch, or the fastest: other micro-batch, checkpointing, ZeRO stage and,
    #: when searched, parallel layout). A remedy that changes the method or the hardware does
    #: not count: it answers another question
    fits: bool = False
    largest_micro_batch: int | None
    grad_accum_for_effective_batch: int | None
    effective_batch: int | None
    #: the micro-batch that, with grad_accum_for_effective_batch, makes exactly the effective
    #: batch on the layout as given: the largest that fits and divides it (micro-batch x
    #: accumulation x data-parallel ranks = effective batch, the accumulation a multiple of pp
    #: on the interleaved schedule); None when no whole split exists or the note says more
    micro_batch_for_effective_batch: int | None = None
    #: "" when the layout as given makes the effective batch exactly; else why not, the
    #: nearest batches it makes, and what the fastest row makes (the batch on another layout,
    #: or the nearest batch a setup that fits makes: fit's verdict is memory, not the batch)
    effective_batch_note: str = ""
    fastest: Candidate | None
    alternatives: list[Candidate]
    candidates_evaluated: int
    #: share of a long run's wall clock spent on steps at the fastest setup (else the one as
    #: given, when it fits): restarts, lost work and checkpoint writes at the interruption rate
    #: (Hardware.interruptions_per_gpu_hour; estimate/goodput.py); independent of the run's
    #: length. None when nothing fits, or when the default rate means the job never finishes
    expected_goodput: float | None = None
    #: where expected_goodput comes from (rate, its source, checkpoint interval), or why none
    goodput_basis: str = ""

    @field_serializer("headroom_fraction", when_used="json")
    def _headroom_figure(self, value: float) -> dict[str, Any]:
        default = A.FIT_HEADROOM_FRACTION
        if value == default.value:
            return figure_json(value, "fraction of device memory", "assumed",
                               f"default of --headroom: {default.basis}")
        return figure_json(value, "fraction of device memory", "input", "--headroom")

    @field_serializer("device_memory_bytes", when_used="json")
    def _device_memory_figure(self, value: float) -> dict[str, Any]:
        return figure_json(value, "bytes", "catalog", "the accelerator catalog's memory of the "
                           "GPU (or --memory-gb): what the setup as given is held to")

    @field_serializer("expected_goodput", when_used="json")
    def _goodput_figure(self, value: float | None) -> dict[str, Any] | None:
        # the restart and checkpoint terms are assumed (estimate/goodput.py)
        return None if value is None else figure_json(
            value, "fraction of wall clock", "assumed", self.goodput_basis)


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


def batch_step(t: Training, num_gpus: int) -> tuple[int, int]:
    """(data-parallel ranks, the step between the batches t's layout makes at micro-batch 1):
    the ranks (GPUs / (tp x pp x cp)), times pp on the interleaved schedule, which runs the
    micro-batches in groups of pp (Megatron-LM requires the accumulation to be a multiple)."""
    ranks = max(1, num_gpus // (t.tp * t.pp * t.cp))
    return ranks, ranks * (t.pp if t.virtual_stages > 1 else 1)


def nearest_batches(effective_batch: int, step: int) -> list[int]:
    """The batches nearest `effective_batch` that a layout of this step makes (multiples of it,
    one step at least): the one below (when there is one) and the one above."""
    below = effective_batch // step * step
    return [b for b in (below, below + step) if b > 0]


def ranks_text(t: Training, num_gpus: int) -> str:
    """The data-parallel ranks of t's layout on `num_gpus`, said with the GPUs they come from:
    "64 data-parallel ranks" or "8 data-parallel ranks (64 GPUs / tp 8)"."""
    ranks, step = batch_step(t, num_gpus)
    split = [f"{k} {getattr(t, k)}" for k in ("tp", "pp", "cp") if getattr(t, k) > 1]
    text = f"{ranks} data-parallel rank{'s' if ranks > 1 else ''}"
    if split:
        text += f" ({num_gpus} GPUs / {' x '.join(split)})"
    if step != ranks:
        text += f", in groups of pp {t.pp} on the interleaved schedule"
    return text


def _split_effective_batch(t: Training, num_gpus: int, effective_batch: int, largest: int
                           ) -> tuple[int | None, int | None]:
    """(micro-batch, accumulation) of the layout as given: the largest micro-batch up to
    `largest` that makes exactly `effective_batch` on its data-parallel ranks (micro-batch x
    accumulation x ranks, the accumulation a multiple of pp on the interleaved schedule);
    (None, None) when it cannot (why, and the nearest: _batch_note)."""
    ranks, step = batch_step(t, num_gpus)
    group = step // ranks
    if effective_batch % step:
        return None, None
    per_rank = effective_batch // ranks
    mb = max(d for d in range(1, max(1, min(per_rank, largest)) + 1)
             if per_rank % d == 0 and (per_rank // d) % group == 0)
    return mb, per_rank // mb


def unreachable_text(t: Training, num_gpus: int, effective_batch: int) -> str:
    """Why t's layout on `num_gpus` cannot make `effective_batch` sequences a step, and the
    nearest batches it makes."""
    _, step = batch_step(t, num_gpus)
    near = " or ".join(str(b) for b in nearest_batches(effective_batch, step))
    return (f"an effective batch of {effective_batch} cannot be made on "
            f"{ranks_text(t, num_gpus)}: micro-batch x accumulation x ranks cannot equal it; "
            f"nearest: {near}")


def _largest_micro_batch(t: Training, hw: Hardware, headroom: float) -> tuple[int | None, int]:
    """Largest micro-batch that fits (memory grows monotonically with it): binary search."""
    evaluated = 0

    def fits(mb: int) -> bool:
        nonlocal evaluated
        evaluated += 1
        return evaluate(t.model_copy(update={"micro_batch": mb}), hw, headroom, "").fits

    if not fits(1):
        return None, evaluated
    lo, hi = 1, MAX_MICRO_BATCH
    if fits(hi):
        return hi, evaluated
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo, evaluated


#: the sequence the does-not-fit verdict tries at micro-batch 1 (tokens): its activations are
#: small beside any model's state
SHORT_SEQ_TOKENS = 128


def setting_at_fault(t: Training, hw: Hardware) -> str:
    """The setup field to change when `t` does not fit `hw`'s memory: `micro_batch` when
    micro-batch 1 at this sequence fits; `seq_len` when micro-batch 1 fits only at a short
    sequence (SHORT_SEQ_TOKENS); `zero_stage` when ZeRO-3 (with checkpointing if need be) fits
    at micro-batch 1 on several GPUs; `checkpointing` when turning it on fits; else `method`:
    the model's state (weights, gradients,
    optimizer, their temporaries and gathers) does not fit whatever the batch, so the method,
    sharding or GPU count must change. Memory only, the device's whole memory (estimate's
    verdict, not fit's headroom)."""
    one = t.model_copy(update={"micro_batch": 1})
    if t.micro_batch > 1 and evaluate(one, hw, 0.0, "", speed_if_too_big=False).fits:
        return "micro_batch"
    short = one.model_copy(update={"seq_len": min(t.seq_len, SHORT_SEQ_TOKENS)})
    if t.seq_len > SHORT_SEQ_TOKENS and evaluate(short, hw, 0.0, "",
                                                 speed_if_too_big=False).fits:
        return "seq_len"
    # the state does not fit at any batch: the sharding or the recomputation the setup left
    # out, before the method
    if hw.num_gpus > 1 and t.zero_stage < 3 and t.offload == "none" and (
            3 in runnable_zero_stages(t, hw.num_gpus)):
        for ckpt in dict.fromkeys((t.checkpointing, True)):
            sharded = one.model_copy(update={"zero_stage": 3, "checkpointing": ckpt})
            if evaluate(sharded, hw, 0.0, "", speed_if_too_big=False).fits:
                return "zero_stage"
    if not t.checkpointing and evaluate(one.model_copy(update={"checkpointing": True}), hw,
                                        0.0, "", speed_if_too_big=False).fits:
        return "checkpointing"
    return "method"


def candidate_layouts(t: Training, hw: Hardware) -> list[dict[str, int]]:
    """The parallel layouts the chooser tries for full training on several GPUs: tensor
    parallelism in powers of two within a node (dividing the heads, KV heads and MLP width:
    parallel.tp_split_problem), pipeline stages dividing
    the layers, context parallelism for sequences of 16K tokens and more, expert parallelism
    in powers of two dividing the experts; each product dividing the GPUs (parallel.layout_of).
    Pipeline stages need not divide the layers (uneven stages, parallel.stage_layers). Plain
    1F1B here; fit tries the interleaved schedule on the best setup of each pipelined layout
    (interleave_options)."""
    given = {"tp": t.tp, "pp": t.pp, "cp": t.cp, "ep": t.ep,
             "virtual_stages": t.virtual_stages}
    if t.method != "full" or hw.num_gpus == 1:
        return [given]
    arch, n = t.arch, hw.num_gpus
    powers = [2 ** k for k in range(12)]
    # only sizes that split every width Megatron-Core divides (heads, KV heads, MLP)
    tps = [x for x in powers if x <= min(hw.gpus_per_node, n) and not tp_split_problem(arch, x)
           and not groups_cross_nodes(n, hw.gpus_per_node, x)]
    # any stage count up to one layer a stage: uneven stages (parallel.stage_layers) are
    # Megatron-Core's --decoder-first/last-pipeline-num-layers
    pps = [x for x in range(1, min(arch.num_layers, 64) + 1) if n % x == 0]
    # the 2021 Megatron-LM code had no context parallelism (setup.check_kernel_path)
    cps = ([x for x in powers if x <= 8] if t.seq_len >= 16384 and t.kernels != "megatron-2021"
           else [1])
    eps = [x for x in powers if arch.is_moe and arch.num_experts % x == 0 and x <= 64] or [1]
    out = []
    for tp in tps:
        for pp in pps:
            for cp in cps:
                mp = tp * pp * cp
                # a context-parallel group may span nodes (Llama 3's 128K stage: TP 8 x CP 16,
                # Llama Team 2024 sec. 3.3.2): its KV ring is then priced on the network
                # (timing.py: span tp x cp), within a node where tp x cp fits one
                if n % mp or (cp > 1 and t.seq_len % (2 * cp)) or (
                        tp * cp > hw.gpus_per_node and (tp * cp) % hw.gpus_per_node):
                    continue
                for ep in eps:
                    if (tp * cp * (n // mp)) % ep == 0:
                        out.append({"tp": tp, "pp": pp, "cp": cp, "ep": ep,
                                    "virtual_stages": 1})
    return out


def interleave_options(arch: ModelArch, pp: int) -> list[int]:
    """Virtual stages (model chunks per pipeline rank) of the interleaved schedule the chooser
    tries for `pp` stages: each v from 2 to MAX_VIRTUAL_STAGES dividing the layers per stage,
    where pp divides the layers (Megatron-Core: "the legal values of vpp_size are all common
    divisors of num_layers/pp_size", NVIDIA/Megatron-LM megatron/core/transformer/moe/
    README.md; uneven stages are modelled for plain 1F1B only). The bubble falls as 1/v, the
    pipeline sends grow as v (estimate/parallel.py)."""
    if pp == 1 or arch.num_layers % pp:
        return []
    return [v for v in range(2, MAX_VIRTUAL_STAGES + 1) if (arch.num_layers // pp) % v == 0]


def _layout_label(c: Candidate | Training, arch: ModelArch | None = None,
                  data_parallel: int | None = None) -> str:
    """The layout in words ("tp 4, pp 2, ..., data parallel 64, TP overlap (...)"), "" for
    plain data parallelism. `data_parallel`: for a Training (a Candidate carries its own)."""
    parts = [f"{k} {getattr(c, k)}" for k in ("tp", "pp", "cp", "ep") if getattr(c, k) > 1]
    if arch is not None and c.pp > 1:
        parts[[p.startswith("pp ") for p in parts].index(True)] += stages_text(arch, c.pp)
    if c.virtual_stages > 1:
        parts[[p.startswith("pp ") for p in parts].index(True)] += (
            f", interleaved: {c.virtual_stages} virtual stages a rank")
    if not parts:
        return ""
    dp = c.data_parallel if isinstance(c, Candidate) else data_parallel
    return ", ".join(parts + [f"data parallel {dp}"] + overlap_labels(c))


def setup_label(t: Training, num_gpus: int) -> str:
    """The setup in the chooser's words, without its reasons: "micro-batch 1, checkpointing
    off, ZeRO 1, tp 4, ..., data parallel 64, 16 micro-batches per step" (chosen_setup's
    sentence begins with it; compare prints it for each GPU and count)."""
    layout = _layout_label(t, t.arch, num_gpus // (t.tp * t.pp * t.cp))
    tail = (f", {layout}, {t.grad_accum} micro-batches per step" if layout
            else f", accumulation {t.grad_accum}")
    return (f"micro-batch {t.micro_batch}, checkpointing {'on' if t.checkpointing else 'off'}, "
            f"ZeRO {t.zero_stage}{tail}")


def overlap_labels(c: Candidate | Training) -> list[str]:
    """The overlaps a setup runs, each with the framework option that runs it."""
    return [text for on, text in (
        (c.tp_comm_overlap, "TP overlap (Megatron-Core --tp-comm-overlap)"),
        (c.moe_a2a_overlap, "expert all-to-all overlap (Megatron-Core "
                            "--overlap-moe-expert-parallel-comm)")) if on]


def overlaps_allowed(t: Training, hw: Hardware, layout: dict[str, int], checkpointing: bool
                     ) -> tuple[bool, bool]:
    """(tensor-parallel overlap, expert all-to-all overlap) the chooser may turn on: only as a
    mainstream framework runs them. --tp-comm-overlap: tensor parallelism within a node of
    Hopper or later GPUs (Transformer Engine's userbuffers need CUDA multicast); it only
    hides time, so it is on wherever it may be. --overlap-moe-expert-parallel-comm: expert
    parallelism, no full recomputation, no pipeline or the interleaved schedule
    (Megatron-Core's combined 1F1B); it holds one more micro-batch's activations, so it is
    tried on and off."""
    tp_ok = layout["tp"] > 1 and hw.gpu.generation in TP_OVERLAP_GENERATIONS
    a2a_ok = (layout["ep"] > 1 and not checkpointing
              and (layout["pp"] == 1 or layout["virtual_stages"] > 1))
    return tp_ok, a2a_ok


def fit(t: Training, hw: Hardware, effective_batch: int | None = None,
        headroom: float | None = None, bigger_gpus: Iterable[GpuSpec] = (),
        search_layouts: bool = False, batch_near: int | None = None,
        fixed_overlaps: Collection[str] = (), remedies: bool = True,
        keep: Collection[str] = (), megatron_layouts: bool = False) -> FitResult:
    """Answer: does `t` fit on `hw`, how large a micro-batch fits, what is fastest, and what
    would fit when nothing does. Every candidate's memory comes from training_memory.

    `search_layouts`: try tensor, pipeline, context and expert parallel layouts too
    (candidate_layouts), each with the overlaps overlaps_allowed permits, except those named in
    `fixed_overlaps` ("tp_comm_overlap", "moe_a2a_overlap": the user's choice), which keep
    t's value (a layout that cannot run an overlap asked for is left out). Without an
    effective batch each layout keeps the global batch of its
    micro-batch in the layout as given: a replica of tp pp cp GPUs runs proportionally more
    micro-batches per step (a layout given keeps its accumulation).

    `batch_near` (sequences per optimizer step, instead of an exact `effective_batch`): each
    layout aims at the multiple of its data-parallel ranks nearest to it (one sequence per rank
    at least); layouts with more ranks than `batch_near` are left out when any layout has no
    more (so the batch stays within half a rank-step of the target).

    `remedies`: when not even micro-batch 1 fits as given, list what would
    (estimate/remedies.py); the setup chooser, which needs only the fastest, leaves them out.

    `keep`: setup fields the sweep holds at t's value ("micro_batch", "checkpointing",
    "zero_stage": the user's choices), the rest chosen. `megatron_layouts`: a tensor, pipeline,
    context or expert parallel layout is costed on the megatron kernel path (kernels
    "megatron", with its vocab-parallel loss), the code that runs such layouts (Megatron-Core);
    plain data parallelism keeps t's kernels."""
    headroom = A.FIT_HEADROOM_FRACTION.value if headroom is None else headroom
    requested = evaluate(t, hw, headroom, "as given")
    largest, evaluated = _largest_micro_batch(t, hw, headroom)

    # Sweep layout x micro-batch x checkpointing x ZeRO stage for the fastest that fits.
    layouts = candidate_layouts(t, hw) if search_layouts else [
        {"tp": t.tp, "pp": t.pp, "cp": t.cp, "ep": t.ep, "virtual_stages": t.virtual_stages}]
    given = {"tp": t.tp, "pp": t.pp, "cp": t.cp, "ep": t.ep, "virtual_stages": t.virtual_stages}
    fastest: Candidate | None = None
    some_within = batch_near is not None and any(
        hw.num_gpus // (x["tp"] * x["pp"] * x["cp"]) <= batch_near for x in layouts)
    for layout in layouts:
        mp = layout["tp"] * layout["pp"] * layout["cp"]
        replicas = hw.num_gpus // mp
        tl = (t.model_copy(update={"kernels": "megatron"})
              if megatron_layouts and mp * layout["ep"] > 1 else t)
        layout_batch = effective_batch
        if batch_near is not None:
            if replicas > batch_near and some_within:
                continue
            # a multiple of the ranks (of ranks x pp on the interleaved schedule: batch_step)
            step = replicas * (layout["pp"] if layout["virtual_stages"] > 1 else 1)
            layout_batch = max(1, round(batch_near / step)) * step
        # without an effective batch: the layout as given keeps its micro-batches per step (one
        # without a layout, as this sweep always did); a searched layout keeps the given global
        # batch, its replicas running proportionally more micro-batches
        given_mp = t.tp * t.pp * t.cp
        open_accum = (1 if layout == given and given_mp == 1 else t.grad_accum
                      if layout == given else max(1, t.grad_accum * mp // given_mp))
        # QLoRA too: its 4-bit layers shard under FSDP or ZeRO-3 with bnb_4bit_quant_storage in
        # the compute dtype (the Answer.AI / HF FSDP-QLoRA recipe; memory.gathered_working_bytes)
        # DeepSpeed's PipelineEngine refuses ZeRO-2 and 3, and with bf16 runs BF16_Optimizer,
        # ZeRO-1's sharding whatever the config (estimate/pipe_engine.py)
        stages = runnable_zero_stages(t, replicas)
        if "zero_stage" in keep:
            stages = [s for s in stages if s == t.zero_stage]
        ckpts = (t.checkpointing,) if "checkpointing" in keep else (False, True)
        # a searched layout tries micro-batches 1, 2, 4, ... and the largest that fits
        # (bisected); the layout as given tries every micro-batch
        sampled = search_layouts and layout != given
        settings = [(ckpt, stage, overlap) for ckpt in ckpts for stage in stages
                    for overlap in _overlap_options(t, hw, layout, ckpt, search_layouts,
                                                    fixed_overlaps)]
        layout_best: Candidate | None = None
        for ckpt, stage, overlap in settings:

            def trial(mb: int, replicas: int = replicas, open_accum: int = open_accum,
                      ckpt: bool = ckpt, effective_batch: int | None = layout_batch,
                      stage: int = stage, layout: dict[str, int] = layout,
                      overlap: dict[str, bool] = overlap,
                      tl: Training = tl) -> Candidate | str | None:
                """A candidate; None: fits but cannot make the batch; "stop": too big."""
                if effective_batch is not None and mb * replicas > effective_batch:
                    return "stop"  # a larger micro-batch overshoots on every replica
                mb_accum = (_accum_for(effective_batch, mb, replicas)
                            if effective_batch is not None else open_accum)
                if (mb_accum is not None and layout["virtual_stages"] > 1
                        and mb_accum % layout["pp"]):
                    mb_accum = None  # the interleaved schedule runs groups of pp micro-batches
                base = tl.model_copy(update={"micro_batch": mb, "checkpointing": ckpt,
                                            "zero_stage": stage, **layout, **overlap})
                if mb_accum is None:
                    # this micro-batch cannot make the effective batch exactly; a larger
                    # one may (memory still decides where the sweep stops)
                    return None if evaluate(base, hw, headroom, "", False).fits else "stop"
                c = evaluate(base.model_copy(update={"grad_accum": mb_accum}),
                              hw, headroom, f"micro-batch {mb}, checkpointing "
                              f"{'on' if ckpt else 'off'}, ZeRO {stage}", False)
                return c if c.fits else "stop"  # memory only grows with the micro-batch

            tried: list[Candidate | str | None] = []
            if "micro_batch" in keep:
                tried.append(trial(t.micro_batch))
            elif not sampled:
                for mb in range(1, MAX_MICRO_BATCH + 1):
                    tried.append(trial(mb))
                    if tried[-1] == "stop":
                        break
            else:
                lo, hi = 0, MAX_MICRO_BATCH + 1
                mb = 1
                while mb <= MAX_MICRO_BATCH:
                    tried.append(trial(mb))
                    if tried[-1] == "stop":
                        hi = mb
                        break
                    lo, mb = mb, mb * 2
                while lo and hi - lo > 1:  # bisect for the largest that fits
                    mid = (lo + hi) // 2
                    tried.append(trial(mid))
                    lo, hi = (lo, mid) if tried[-1] == "stop" else (mid, hi)
            evaluated += len(tried)
            for c in tried:
                if not isinstance(c, Candidate):
                    continue
                if layout_best is None or c.tokens_per_s_per_gpu > layout_best.tokens_per_s_per_gpu:
                    layout_best = c
        # the PipelineEngine runs plain 1F1B only (pipe/schedule.py TrainSchedule)
        if sampled and layout_best is not None and not t.deepspeed_pipe_engine:
            more = _interleaved(tl, hw, headroom, layout, layout_best, fixed_overlaps)
            evaluated += len(more)  # every trial, as the sweep above counts its own
            layout_best = max([layout_best, *(c for c in more if c.fits)],
                              key=lambda c: c.tokens_per_s_per_gpu)
        if layout_best is not None and (
                fastest is None or layout_best.tokens_per_s_per_gpu > fastest.tokens_per_s_per_gpu):
            fastest = layout_best
    if fastest is not None and _layout_label(fastest):
        fastest = fastest.model_copy(update={"change": f"{fastest.change}, "
                                                       f"{_layout_label(fastest, t.arch)}"})

    if fastest is not None:
        branch = branch_change_text(t, t.model_copy(update={"zero_stage": fastest.zero_stage}))
        if branch:
            fastest = fastest.model_copy(update={"change": f"{fastest.change}, {branch}"})
    if fastest is None and effective_batch is not None and batch_near is None:
        # no setup that fits makes this batch on these GPUs (the layouts' ranks do not divide
        # it; fit's note says so): the fastest setup at the nearest batch one makes, said in
        # its row. Not a verdict: the batch is not memory (issue 16)
        near = fit(t, hw, None, headroom, (), search_layouts, batch_near=effective_batch,
                   fixed_overlaps=fixed_overlaps, remedies=False, keep=keep,
                   megatron_layouts=megatron_layouts)
        evaluated += near.candidates_evaluated
        if near.fastest is not None:
            f = near.fastest
            made = f.micro_batch * f.grad_accum * f.data_parallel
            fastest = f.model_copy(update={"change": f"{f.change}, effective batch {made} (the "
                                                     f"nearest these GPUs make; not "
                                                     f"{effective_batch})"})
    alternatives: list[Candidate] = []
    if largest is None and remedies:
        alternatives, remedies_evaluated = what_would_fit(
            t, hw, headroom, bigger_gpus, same_method_fits=fastest is not None,
            effective_batch=effective_batch)
        evaluated += remedies_evaluated
    fits_device = requested.memory_total_bytes <= hw.gpu.memory_bytes
    accum: int | None = None
    split_mb: int | None = None
    note = ""
    if effective_batch is not None:
        note = _batch_note(t, hw, effective_batch, fastest)
        if largest is not None and not note:
            split_mb, accum = _split_effective_batch(t, hw.num_gpus, effective_batch, largest)
    goodput, goodput_basis = _goodput(t, hw, fastest or (requested if requested.fits else None))
    return FitResult(
        requested=requested, headroom_fraction=headroom, largest_micro_batch=largest,
        device_memory_bytes=hw.gpu.memory_bytes, requested_fits_device=fits_device,
        fits=fits_device or largest is not None or fastest is not None,
        grad_accum_for_effective_batch=accum, effective_batch=effective_batch,
        micro_batch_for_effective_batch=split_mb, effective_batch_note=note,
        fastest=fastest, alternatives=alternatives, candidates_evaluated=evaluated,
        expected_goodput=goodput, goodput_basis=goodput_basis,
    )


def _batch_note(t: Training, hw: Hardware, effective_batch: int, fastest: Candidate | None
                ) -> str:
    """FitResult.effective_batch_note: "" when the layout as given makes `effective_batch`
    exactly; else why not and the nearest batches it makes, with what the fastest row makes
    (the same batch on another layout, or the nearest one a setup that fits makes)."""
    made = (None if fastest is None
            else fastest.micro_batch * fastest.grad_accum * fastest.data_parallel)
    _, step = batch_step(t, hw.num_gpus)
    if effective_batch % step == 0:
        if made is None or made == effective_batch:
            return ""
        return (f"no setup that fits makes an effective batch of {effective_batch} exactly; "
                f"the fastest row makes {made}")
    note = "as given, " + unreachable_text(t, hw.num_gpus, effective_batch)
    if made == effective_batch:
        assert fastest is not None
        return note + (f"; the fastest row makes it exactly on another layout "
                       f"({_layout_label(fastest) or 'data parallel'})")
    if made is not None:
        return note + f"; the fastest row makes {made}"
    return note


def _goodput(t: Training, hw: Hardware, best: Candidate | None) -> tuple[float | None, str]:
    """expected_goodput and goodput_basis of FitResult for the setup `best`: the expected
    downtime of estimate/goodput.py as a share of the wall clock (the steps' time cancels:
    W = P (1 + C / tau) / (1 - (R + tau / 2) / M), so P / W holds no P)."""
    from gpuhours.errors import FieldError
    from gpuhours.estimate import goodput as G
    from gpuhours.storage.budget import checkpoint_bytes_for

    if best is None or best.tokens_per_s_per_gpu <= 0:
        return None, "no setup fits"
    rate = hw.interruptions_per_gpu_hour
    default = rate is None
    if rate is None:
        rate = G.INTERRUPTIONS_PER_GPU_HOUR.value
    if rate == 0:
        return 1.0, "no interruptions (interruptions_per_gpu_hour 0)"
    # the step of the whole job: every data-parallel replica's micro-batches, at the setup's
    # tokens/s per GPU
    step_tokens = best.micro_batch * best.grad_accum * best.data_parallel * t.seq_len
    step_s = step_tokens / (best.tokens_per_s_per_gpu * best.num_gpus)
    ckpt = checkpoint_bytes_for(t, with_optimizer=True).value
    try:
        d = G.expected_downtime(3600.0, hw.num_gpus, ckpt, rate, step_s, rate_is_default=default)
    except FieldError as err:
        if not default:
            raise  # the user's own rate: the error names the option
        return None, err.message
    whose = ("the Llama 3 paper's 16K-H100 run, assumed" if default else "given")
    return d.goodput, (
        f"estimate/goodput.py: {rate:.3g} interruptions per GPU-hour ({whose}) on "
        f"{hw.num_gpus:,} GPU{'s' if hw.num_gpus > 1 else ''}, one every "
        f"{d.mtbf_s / 3600:,.1f} h; each a "
        f"{G.RESTART_S.value / 60:g}-min restart (assumed) and half the "
        f"{d.checkpoint_interval_s / 60:,.3g}-min Young checkpoint interval, plus the "
        f"checkpoint writes ({d.checkpoint_write_s:,.3g} s each)")


def _interleaved(t: Training, hw: Hardware, headroom: float, layout: dict[str, int],
                 best: Candidate, fixed: Collection[str]) -> list[Candidate]:
    """The best 1F1B setup of a pipelined layout run on the interleaved schedule instead
    (interleave_options), with the same micro-batch, accumulation, checkpointing and ZeRO
    stage, each overlap permitted: every one tried (the caller keeps those that fit and
    counts them all). Megatron-LM runs the micro-batches in
    groups of pp, so the accumulation must be a multiple of pp (none is tried otherwise: the
    batch stays the one asked for). A refinement, not a sweep: an interleaved setup that only
    a different micro-batch would make fastest is not found."""
    pp = layout["pp"]
    if best.grad_accum % pp:
        return []
    out = []
    for v in interleave_options(t.arch, pp):
        chunked = {**layout, "virtual_stages": v}
        for overlap in _overlap_options(t, hw, chunked, best.checkpointing, True, fixed):
            c = evaluate(t.model_copy(update={
                "micro_batch": best.micro_batch, "grad_accum": best.grad_accum,
                "checkpointing": best.checkpointing, "zero_stage": best.zero_stage,
                **chunked, **overlap}), hw, headroom, best.change, False)
            out.append(c)
    return out


def _overlap_options(t: Training, hw: Hardware, layout: dict[str, int], ckpt: bool,
                     search: bool, fixed: Collection[str] = ()) -> list[dict[str, bool]]:
    """The overlap settings a sweep tries for a layout: as given without a search; with one,
    those overlaps_allowed permits (the all-to-all overlap on and off), an overlap named in
    `fixed` kept as t has it (none for a layout that cannot run an overlap asked for)."""
    if t.deepspeed_pipe_engine:
        # DeepSpeed's engine runs neither Megatron-Core overlap (setup.py refuses them with it)
        return [{"tp_comm_overlap": False, "moe_a2a_overlap": False}]
    if not search:
        keep = {"tp_comm_overlap": t.tp_comm_overlap, "moe_a2a_overlap": t.moe_a2a_overlap}
        if keep["moe_a2a_overlap"] and ckpt:
            return []  # combined 1F1B does not run with full recomputation
        return [keep]
    tp_ok, a2a_ok = overlaps_allowed(t, hw, layout, ckpt)
    tp_options, a2a_options = [tp_ok], ([True, False] if a2a_ok else [False])
    for name, ok in (("tp_comm_overlap", tp_ok), ("moe_a2a_overlap", a2a_ok)):
        if name in fixed:
            if getattr(t, name) and not ok:
                return []
            if name == "tp_comm_overlap":
                tp_options = [t.tp_comm_overlap]
            else:
                a2a_options = [t.moe_a2a_overlap]
    return [{"tp_comm_overlap": tp, "moe_a2a_overlap": a2a}
            for tp in tp_options for a2a in a2a_options]


#: the share of a step's GPU compute its collectives (hidden or not) may take before the step
#: counts as not clearly compute-bound and the chooser compares parallel layouts: a search
#: bound, not physics. Beyond half, the step time hangs on how much of the traffic overlap
#: hides, the least certain part of the model (docs/parallelism.md), and a layout that moves
#: less may win
NOT_COMPUTE_BOUND_SHARE = 0.5


def _as_training(t: Training, c: Candidate) -> Training:
    return t.model_copy(update={"micro_batch": c.micro_batch, "grad_accum": c.grad_accum,
                                "checkpointing": c.checkpointing, "zero_stage": c.zero_stage,
                                "tp": c.tp, "pp": c.pp, "cp": c.cp, "ep": c.ep,
                                "virtual_stages": c.virtual_stages,
                                "tp_comm_overlap": c.tp_comm_overlap,
                                "moe_a2a_overlap": c.moe_a2a_overlap})


def communication_share(t: Training, hw: Hardware, c: Candidate) -> tuple[float, float, str]:
    """(collective seconds per step, hidden or not; GPU compute seconds; the bottleneck) of
    the candidate's step (timing.training_step_time)."""
    chosen = _as_training(t, c)
    mem = reserved_training_memory(chosen, hw.num_gpus, hw.gpu.stack,
                                   hw.gpu.memory_bytes)
    st = training_step_time(chosen.arch, chosen, hw, training_flops(chosen),
                            mem.trainable_params)
    comm = sum(x.seconds for x in st.collectives) if st.collectives else st.communication_s
    return comm, st.compute_s, st.bottleneck


def plain_fits_one_gpu(t: Training, hw: Hardware) -> bool:
    """Whether micro-batch 1 of `t` without a layout fits one GPU of `hw` with ZeRO-1 over its
    GPUs (fit's headroom): a model data parallelism alone can train."""
    one = t.model_copy(update={"micro_batch": 1, "grad_accum": 1, "tp": 1, "pp": 1, "cp": 1,
                               "ep": 1, "virtual_stages": 1,
                               "zero_stage": 1 if hw.num_gpus > 1 else 0})
    return evaluate(one, hw, A.FIT_HEADROOM_FRACTION.value, "", speed_if_too_big=False).fits


def default_global_batch(t: Training) -> tuple[int, str]:
    """Sequences per optimizer step when the question gives none: the tokens per step of the
    model's size class (A.DEFAULT_GLOBAL_BATCH_TOKENS, by total parameters, from published
    pretraining recipes) over the sequence length, rounded, at least 1; with its basis."""
    params = count_params(t.arch).total
    bound = min(b for b in A.DEFAULT_GLOBAL_BATCH_TOKENS if params < b)
    rule = A.DEFAULT_GLOBAL_BATCH_TOKENS[bound]
    sequences = max(1, round(rule.value / t.seq_len))
    return sequences, (f"the default for a {params / 1e9:.3g}B-parameter model, "
                       f"{rule.value / 2**20:g}M tokens per step ({rule.basis})")


def megatron_path_open(t: Training, kernels_open: bool = True) -> bool:
    """Whether a searched tensor, pipeline, context or expert layout of `t` is costed on
    Megatron-Core's kernel path (the code that runs such layouts): when the kernels were left
    open and `t` has nothing that path does not model (DeepSpeed's ZeRO-3 hooks, Liger's
    patches, LoRA dropout: setup.py _check_megatron)."""
    return (kernels_open and t.kernels == "eager" and t.zero3_engine == "fsdp"
            and t.liger_kernels == "none" and t.lora_dropout == 0 and t.method == "full")


def batch_left_open(t: Training, num_gpus: int, nothing_of_batch_given: bool,
                    pretraining: bool) -> bool:
    """Whether the chooser answers even where the defaults fit: a full pretraining question
    (tokens, not examples) on several GPUs that gives nothing of the batch (micro-batch,
    accumulation, checkpointing, ZeRO): micro-batch 1 with no accumulation is a global batch of
    one sequence a GPU, which nobody chose. A fine-tuning question (examples), or one GPU,
    keeps the trainers' defaults. Shared by estimate, plan and compare."""
    return nothing_of_batch_given and pretraining and t.method == "full" and num_gpus > 1


def layout_on_megatron(t: Training, kernels_open: bool) -> tuple[Training, str]:
    """A tensor, pipeline, context or expert layout given with the kernels left open runs on
    Megatron-Core's kernel path, as the chooser costs the layouts it picks (fit.py
    megatron_path_open: unless the setup has what that path does not model); with the note
    saying so. Unchanged otherwise."""
    if max(t.tp, t.pp, t.cp, t.ep) == 1 or not megatron_path_open(t, kernels_open):
        return t, ""
    return t.model_copy(update={"kernels": "megatron"}), (
        "kernels megatron: the layout given (tp/pp/cp/ep) is costed on Megatron-Core's kernel "
        "path (Transformer Engine's fused layers, vocab-parallel loss), the code that runs "
        "it; give --kernels to choose another.")


def chosen_setup(t: Training, hw: Hardware, headroom: float | None = None,
                 search_layouts: bool = False, global_batch: int | None = None,
                 fixed_overlaps: Collection[str] = (), keep: Collection[str] = (),
                 kernels_open: bool = True) -> tuple[Training, str] | None:
    """The fastest setup of the same model and method that fits (micro-batch, checkpointing,
    ZeRO stage, accumulation chosen, and with `search_layouts` the parallel layout; everything
    else as given), with a sentence saying what was chosen and why; None when none fits. For a
    question that leaves the setup open: "a 65B model on 2,048 GPUs". `keep`: the fields of
    micro_batch, checkpointing and zero_stage the user gave, held at t's values (a partial
    setup: the rest is chosen).

    The global batch (sequences per optimizer step): `global_batch`, else, for full training
    when `t` gives no accumulation (grad_accum 1), default_global_batch (read from pretraining
    recipes); each setup takes the multiple of its data-parallel ranks nearest to it (fit's
    batch_near). With an accumulation given, or for LoRA/QLoRA, the setups keep the
    accumulation (the batch then follows the micro-batch chosen).

    Plain data parallelism (ZeRO/FSDP, which any framework runs) is kept when a setup of it
    fits, its ranks do not outnumber the target batch and its step is clearly compute-bound
    (its collectives, hidden or not, under NOT_COMPUTE_BOUND_SHARE of its compute,
    and its bottleneck no collective); the fastest
    tensor/pipeline/context/expert layout is chosen otherwise, each layout costed on the
    kernel path that runs it (Megatron-Core's, kernels megatron) unless `kernels_open` is
    False (the user gave --kernels: t's are kept). Policy, not physics:
    the analytic model puts tensor parallelism ahead of ZeRO for the Llama 2 runs, yet lands
    under their published GPU hours with it (docs/validation.md, "Pretraining at scale")."""
    basis = "given"
    target = global_batch
    if (target is None and t.grad_accum == default_grad_accum(t.pp, t.virtual_stages)
            and t.method == "full"):
        target, basis = default_global_batch(t)
    replicas = hw.num_gpus // (t.tp * t.pp * t.cp)
    # a global batch the user gives is reached exactly where a setup that fits makes it (as
    # fit's --effective-batch; fit falls back to the nearest); a default one is aimed at
    exact = basis == "given" and target is not None
    aim: dict[str, Any] = {"effective_batch": target} if exact else {"batch_near": target}

    def off(c: Candidate | None) -> bool:
        return exact and c is not None and c.micro_batch * c.grad_accum * c.data_parallel != target

    result = None
    if target is None or replicas <= target or not search_layouts:
        result = fit(t, hw, headroom=headroom, remedies=False, keep=keep, **aim)
    plain = result.fastest if result is not None else None
    searched = ""  # why the layouts were searched, or why plain data parallelism was kept
    search = False
    batch_only = False  # searched only because plain data parallelism misses a given batch
    if search_layouts and t.method == "full" and hw.num_gpus > 1:
        search = True
        if result is None:
            searched = (f"plain data parallelism's {replicas} ranks outnumber the target "
                        f"batch, so parallel layouts were searched")
        elif plain is None:
            searched = "no plain data-parallel setup fits, so parallel layouts were searched"
        else:
            comm, compute, bottleneck = communication_share(t, hw, plain)
            if " over " in bottleneck or comm >= NOT_COMPUTE_BOUND_SHARE * compute:
                searched = (f"plain data parallelism is not compute-bound (its collectives "
                            f"take {comm:,.3g} s a step, hidden or not, beside {compute:,.3g} "
                            f"s of compute), so parallel layouts were searched")
            elif off(plain):
                batch_only = True
                searched = (f"plain data parallelism cannot make the given batch of {target} "
                            f"exactly, so parallel layouts were searched")
            else:
                search = False
                searched = (f"plain data parallelism kept: its step is compute-bound "
                            f"(collectives {comm:,.3g} s beside {compute:,.3g} s of compute; "
                            f"layouts are searched from {NOT_COMPUTE_BOUND_SHARE:.0%})")
    megatron = megatron_path_open(t, kernels_open)
    if search:
        layouts = fit(t, hw, headroom=headroom, search_layouts=True,
                      fixed_overlaps=fixed_overlaps, remedies=False, keep=keep,
                      megatron_layouts=megatron, **aim)
        # plain data parallelism at the nearest batch stays when it was searched past only for
        # the batch and no layout makes the batch exactly either
        if not (batch_only and off(layouts.fastest)):
            result = layouts
    best = result.fastest if result is not None else None
    if result is None or best is None:
        return None
    parallel = best.tp * best.pp * best.cp * best.ep > 1
    keep_accum = target is None and best.tp * best.pp * best.cp == 1
    chosen = t.model_copy(update={"micro_batch": best.micro_batch,
                                  "checkpointing": best.checkpointing,
                                  "zero_stage": best.zero_stage,
                                  "grad_accum": t.grad_accum if keep_accum else best.grad_accum,
                                  "tp": best.tp, "pp": best.pp, "cp": best.cp, "ep": best.ep,
                                  "virtual_stages": best.virtual_stages,
                                  "tp_comm_overlap": best.tp_comm_overlap,
                                  "moe_a2a_overlap": best.moe_a2a_overlap})
    if megatron and parallel and search_layouts:
        chosen = chosen.model_copy(update={"kernels": "megatron"})
    batch = ""
    if target is not None:
        made = best.micro_batch * chosen.grad_accum * best.data_parallel
        batch = (f"; global batch {made} sequences of {t.seq_len} "
                 f"({made * t.seq_len / 1e6:.2f}M tokens) for a target of {target}: {basis}")
        if exact and made != target:
            batch += (f" (no setup that fits makes {target} exactly on these GPUs: micro-batch "
                      f"x accumulation x data-parallel ranks; {made} is the nearest)")
    kept = [f"{name} {value}" for name, field, value in (
        ("micro-batch", "micro_batch", t.micro_batch),
        ("checkpointing", "checkpointing", "on" if t.checkpointing else "off"),
        ("ZeRO", "zero_stage", t.zero_stage)) if field in keep]
    defaults_too_big = not evaluate(t, hw, 0.0, "", speed_if_too_big=False).fits
    if (basis != "given" and target is not None and best.tp * best.pp * best.cp > 1
            and plain_fits_one_gpu(t, hw) and hw.num_gpus > target):
        # the recipes' batch for this size was set on fewer GPUs: making it on these splits
        # layers that one GPU holds, only to give every rank a sequence
        batch += (f"; the default batch has fewer sequences than the {hw.num_gpus} GPUs, so "
                  f"the layers of a model one GPU holds are split only to make it (MFU falls "
                  f"with the split): --global-batch {hw.num_gpus} (one sequence a GPU) or "
                  f"fewer GPUs would use them better")
    kernel_note = ""
    if chosen.kernels == "megatron" and t.kernels != "megatron":
        kernel_note = ("; costed on Megatron-Core's kernel path (kernels megatron: Transformer "
                       "Engine's fused layers, vocab-parallel loss), the code that runs this "
                       "layout")
    why = (f"setup chosen by gpuhours: {setup_label(chosen, hw.num_gpus)} (the fastest of "
           f"{result.candidates_evaluated} configurations that fit with "
           f"{result.headroom_fraction:.0%} headroom"
           + (f", keeping the given {', '.join(kept)}" if kept else "")
           + f"{'' if basis == 'given' or not defaults_too_big else '; the defaults did not fit'}{batch}"
           + (f"; {searched}" if searched else "") + f"{kernel_note}).")
    return chosen, why
