"""The analytic estimator: memory, FLOPs, step time, throughput, GPU hours and cost of a
training setup. Pure Python, no torch; well under a millisecond per call."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from gpuhours.catalog.schema import PriceRow
from gpuhours.errors import FieldError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate import offload as OF
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.assumptions import Assumption
from gpuhours.estimate.figures import Figure, assumed, formula, given
from gpuhours.estimate.flops import training_flops
from gpuhours.estimate.fragmentation import VarlenReserve
from gpuhours.estimate.host import (
    megatron_expert_gemm_calls_per_micro_batch,
    megatron_moe_forward_syncs_per_micro_batch,
    megatron_moe_host_op_weight,
)
from gpuhours.estimate.lora_traffic import lora_branch_of
from gpuhours.estimate.memory import LOAD_PATH_TERM, MemoryBreakdown
from gpuhours.estimate.moe_gemm import (
    recompute_bytes_per_token_layer,
    unfused_expert_bytes_per_token_layer,
)
from gpuhours.estimate.paged_optimizer import paged_overflow_bytes
from gpuhours.estimate.parallel import REFERENCE_NODE, REFERENCE_NODE_OF_GPU, reference_node, stages_text
from gpuhours.estimate.rope import unfused_rope_bytes_per_token_layer
from gpuhours.estimate.step_replay import (
    STEP_REPLAY_TERM,
    STEPS_REPLAYED,
    reserved_training_memory,
)
from gpuhours.estimate.timing import (
    StepTime,
    attention_assumption,
    gemm_efficiency_assumptions,
    gemm_efficiency_basis,
    groups_cross_nodes,
    peak_flops,
    training_step_time,
)
from gpuhours.estimate.track_record import TrackRecord
from gpuhours.estimate.track_record import applies as applies_track_record
from gpuhours.estimate.track_record import load as load_track_record
from gpuhours.estimate.vision_host import vision_host_ops_per_micro_batch
from gpuhours.setup import Hardware, Training, loss_kernel_of


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MemoryReport(_Out):
    """Peak memory per GPU; `total_bytes` is what nvidia-smi would show."""

    weights_bytes: Figure
    gradients_bytes: Figure
    master_weights_bytes: Figure
    optimizer_bytes: Figure
    activations_bytes: Figure
    logits_bytes: Figure
    optimizer_temporaries_bytes: Figure
    #: ZeRO-3/FSDP: unsharded layers, root unit and gradients in flight, beyond the shards
    gathered_bytes: Figure
    tensors_bytes: Figure
    allocator_reserve_bytes: Figure
    cuda_context_bytes: Figure
    total_bytes: Figure
    device_bytes: Figure
    peak_phase: str
    fits: bool
    #: CPU offload (setup.offload): host RAM per GPU for the offloaded state; None without it
    host_bytes: Figure | None = None
    #: the tensors alive at `peak_phase`, by part: they add up to `tensors_bytes` (the parts
    #: above are each at its own peak, which need not be the same moment)
    at_peak_bytes: dict[str, Figure] = {}
    #: the device's software stack (catalog GpuSpec.stack): which tools read these figures
    stack: str = "torch-cuda"


#: the sources of the parts alive at the peak that are not fields of MemoryReport
_PEAK_ONLY_SOURCES = {
    "autocast_weight_copies_bytes": "estimate/memory.py training_memory: torch.autocast's "
                                    "half-precision (or fp8-mixed's fp8) copies of the matmul weights",
    "deepspeed_buckets_bytes": "estimate/memory.py deepspeed_bucket_bytes: DeepSpeed's "
                               "reduce/prefetch buckets",
    "activations_kept_bytes": "estimate/memory.py activation_bytes: tensors saved per layer, "
                              "less the one layer recomputed after the loss",
    "lm_head_backward_bytes": "estimate/memory.py lm_head_backward_bytes: the LM head's "
                              "gradient beside the logits' gradient",
    "no_sync_gradients_bytes": "estimate/fsdp_no_sync.py no_sync_unsharded_grad_bytes: every "
                               "unit's gradient held unsharded under FSDP's no_sync (a LoRA "
                               "unit's over its frozen base too)",
    "recomputed_layer_bytes": "estimate/memory.py training_memory: the one layer recomputed in "
                              "backward (checkpointing), after the loss",
    "dora_norm_bytes": "estimate/dora.py dora_norm_transient_bytes: DoRA's B A product, weight "
                       "copy and their sum inside one adapted linear's forward (peft 0.21)",
    "gathered_gradients_bytes": "estimate/memory.py gathered_unit_grad_bytes: two ZeRO-3/FSDP "
                                "units' unsharded gradients beside a layer's backward",
    "root_unit_gradients_bytes": "estimate/fsdp_root_grad.py fsdp1_root_backward_grad_bytes: "
                                 "FSDP1's root unit (embedding, head) gradient from its views "
                                 "beside the flat gradient made of them, at the end of backward",
    "bnb_dequant_bytes": "estimate/quant.py bnb_dequant_transient_bytes: bitsandbytes' "
                         "half-precision copy of one 4-bit weight at its matmul "
                         "(MatMul4Bit, 0.42-0.43)",
    "gptq_dequant_bytes": "estimate/quant.py gptq_dequant_transient_bytes: auto-gptq's torch "
                          "path unpacking one 4-bit linear (an int32 and an int8 copy, "
                          "qlinear_cuda_old.py) beside the fp16 weights kept",
}


class CostRow(_Out):
    provider: str
    provider_kind: str
    instance: str
    on_demand_usd: float | None
    spot_usd: float | None
    on_demand_usd_per_gpu_hour: float | None
    spot_usd_per_gpu_hour: float | None
    as_of: str
    source: str
    #: whole instances billed (gpuhours.catalog.billing): GPUs per instance, instances, GPUs
    #: paid for (>= the GPUs used) and the GPU hours paid for, which the dollars price
    gpus_per_instance: int = 1
    instances: int = 1
    billed_gpus: int = 1
    billed_gpu_hours: float = 0.0
    #: e.g. "8 GPUs billed for 1 used (one 8-GPU instance)"; "" when every billed GPU is used
    billing: str = ""
    #: what is doubtful about the price row (gpuhours.catalog.price_flags): stale, suspicious
    flags: list[str] = []


class Totals(_Out):
    tokens: Figure
    optimizer_steps: Figure
    gpu_hours: Figure
    wall_clock_hours: Figure
    cost_usd: list[CostRow]
    #: expected restarts, lost work and checkpoint writes (estimate/goodput.py), GPU hours
    downtime_gpu_hours: Figure | None = None
    #: gpu_hours + downtime_gpu_hours: what a published total (wall clock x GPUs) holds
    gpu_hours_with_downtime: Figure | None = None
    #: wall_clock_hours + the job's expected downtime (downtime_gpu_hours / GPUs)
    wall_clock_hours_with_downtime: Figure | None = None
    #: cost_usd prices gpu_hours (the steps); this prices downtime_gpu_hours at the same rows
    #: (empty when there is no downtime or no price)
    downtime_cost_usd: list[CostRow] = []
    #: how published runs of this kind landed against such a prediction (measured, from the
    #: validation table; estimate/track_record.py): full training on 16 or more GPUs only
    track_record: TrackRecord | None = None


class TrainingEstimate(_Out):
    """Everything `gpuhours estimate` reports for a training setup."""

    kind: Literal["training"] = "training"
    model: str
    model_basis: str
    gpu: str
    num_gpus: int
    setup: dict[str, object]
    total_params: Figure
    trainable_params: Figure
    memory: MemoryReport
    model_flops_per_token: Figure
    hardware_flops_per_token: Figure
    step_time_s: Figure
    step_time_breakdown_s: dict[str, Figure]
    bottleneck: str
    #: the largest part of the step as summed (exposed time); the bottleneck names the network
    #: instead when the collectives in all outlast the compute they overlap
    largest_part: str = ""
    tokens_per_step: Figure
    tokens_per_s_per_gpu: Figure
    tokens_per_s: Figure
    mfu: Figure
    hfu: Figure
    gemm_efficiency: Figure
    totals: Totals | None
    warnings: list[str]
    assumptions: list[str]


def beyond_positions_warning(t: Training) -> str | None:
    """The warning on a sequence beyond the positions a rotary model was configured for
    (max_position_embeddings): it trains only with a context extension. None when within them
    (a model of learned positions refuses it instead: setup.py)."""
    arch = t.arch
    if not (arch.max_positions and t.seq_len > arch.max_positions
            and not arch.position_embeddings):
        return None
    return (f"--seq {t.seq_len} is beyond the {arch.max_positions} positions {arch.name} was "
            f"configured for (max_position_embeddings); it needs a context extension (RoPE "
            f"scaling) to train well.")


def reduction_window_warning(t: Training, hw: Hardware, st: StepTime) -> str | None:
    """A warning when the data-parallel reduction is counted as hidden for longer than the
    backward it can run beside. DDP (under no_sync while accumulating), ZeRO-1 (DeepSpeed's and
    Megatron-Core's distributed optimizer) reduce once a step, launched bucket by bucket during
    the last micro-batch's backward (torch DDP's reducer; DeepSpeed stage_1_and_2.py reduces at
    the accumulation boundary; Megatron-Core's register_grad_ready counts a gradient only on the
    last micro-batch), so at most that backward hides it: about 2/3 of one micro-batch's
    compute. The estimate hides assumptions.COMM_OVERLAP of it whatever the accumulation
    (docs/parallelism.md: the window is found and not wired in, with why); None when the
    counted hidden time fits the window, or for ZeRO-2/3 and model-parallel layouts, whose
    collectives run every micro-batch or are costed otherwise."""
    if (hw.num_gpus < 2 or t.zero_stage > 1 or t.tp * t.pp * t.cp * t.ep > 1
            or st.communication_s <= 0):
        return None
    hidden = st.communication_s - st.communication_exposed_s
    window = st.compute_s * (2.0 / 3.0) / t.grad_accum
    longer = hidden - window
    if longer <= 0.05 * st.step_time_s:
        return None
    return (f"the data-parallel gradient reduction ({st.communication_s:.3g} s a step) is "
            f"counted {hidden:.3g} s hidden behind compute ({A.COMM_OVERLAP.name} "
            f"{A.COMM_OVERLAP.value:g}, assumed), but DDP and ZeRO-1 reduce once a step, during "
            f"the last of the {t.grad_accum} micro-batches' backward (about {window:.3g} s): "
            f"hidden only there, the step would take up to {longer:.3g} s more "
            f"({st.step_time_s:.3g} -> {st.step_time_s + longer:.3g} s). Not applied: "
            f"docs/parallelism.md, 'Found, and not wired in'. Fewer, larger micro-batches or a "
            f"faster network shrink it.")


def headroom_warning(total_bytes: float, device_bytes: float) -> str:
    """The warning on a setup that fits the device (the verdict of estimate, plan and fit) but
    with less free than fit's headroom (assumptions.FIT_HEADROOM_FRACTION), the margin fit
    keeps when it chooses a micro-batch."""
    h = A.FIT_HEADROOM_FRACTION.value
    return (f"fits with less than fit's {h:.0%} headroom: {total_bytes / 2**30:.2f} GiB of "
            f"{device_bytes / 2**30:.2f} GiB, above {device_bytes * (1 - h) / 2**30:.2f} GiB. "
            f"The headroom ({A.FIT_HEADROOM_FRACTION.basis}) comes on top of the allocator "
            f"reserve counted here; `gpuhours fit` keeps it when it chooses a micro-batch.")


#: the basis of the device overhead on XLA (TPUs): estimate/memory.py device_overhead_bytes
XLA_OVERHEAD_BASIS = ("none on a TPU: XLA places the compiled step's buffers at compile time "
                      "(no caching allocator, no CUDA context); the TPU runtime's own share is "
                      "not modelled (estimate/memory.py device_overhead_bytes)")


def _memory_report(m: MemoryBreakdown, device_bytes: float, host_source: str = "",
                   varlen: VarlenReserve | None = None, stack: str = "torch-cuda"
                   ) -> MemoryReport:
    """The memory figures. With variable-length samples (`varlen`) the allocator reserve is
    the replay's (estimate/fragmentation.py) and so are reserved and the device total; `fits`
    stays with the live tensors at the longest micro-batch plus the flat reserve (a reserve
    that is only cached blocks is given back under pressure), unless the replay found a
    request that did not fit even with the cache emptied."""
    src = "estimate/memory.py training_memory"
    reserve = assumed(m.allocator_reserve_bytes, "bytes", A.ALLOCATOR_RESERVE_FRACTION.basis)
    load_terms = [x for x in m.setup_terms if x.startswith(LOAD_PATH_TERM)]
    if load_terms:
        reserve = assumed(m.allocator_reserve_bytes, "bytes",
                          f"{A.ALLOCATOR_RESERVE_FRACTION.basis}; plus {load_terms[0]}")
    replayed = [x for x in m.setup_terms if x.startswith(STEP_REPLAY_TERM)]
    if replayed:  # assumed, not formula: a replay resting on the split of a layer's tensors
        how = ("ran out of the card: what it leaves beside the live tensors"
               if "ran out" in replayed[0] else "reserved less allocated")
        reserve = assumed(m.allocator_reserve_bytes, "bytes",
                          f"estimate/step_replay.py: {STEPS_REPLAYED} training steps through the "
                          f"caching "
                          f"allocator's rules, {how} (a model)")
    total = formula(m.total_bytes, "bytes", "tensors + allocator reserve + CUDA context")
    context = assumed(m.cuda_context_bytes, "bytes", A.CUDA_CONTEXT_BYTES.basis)
    if stack == "xla":
        reserve = formula(m.allocator_reserve_bytes, "bytes", XLA_OVERHEAD_BASIS)
        context = formula(m.cuda_context_bytes, "bytes", XLA_OVERHEAD_BASIS)
        total = formula(m.total_bytes, "bytes", "tensors (XLA: no allocator reserve, no CUDA "
                                                "context)")
    fits = m.total_bytes <= device_bytes
    if varlen is not None:
        # assumed, not formula: it rests on the assumed run length (when none is given), the
        # assumed log-normal shape of the lengths, the flat reserve and the layer tensor split
        reserve = assumed(varlen.reserve_bytes, "bytes", varlen.basis)
        total = assumed(m.tensors_bytes + varlen.reserve_bytes + m.cuda_context_bytes, "bytes",
                        "tensors + allocator reserve (replay of variable lengths) + CUDA context")
        fits = fits and not varlen.out_of_memory
    report: dict[str, Any] = dict(
        weights_bytes=formula(m.weights_bytes, "bytes", f"{src}: params x bytes/param / "
                              "(tp x pp, ep, ZeRO-3 shards)"),
        gradients_bytes=formula(m.gradients_bytes, "bytes", f"{src}: trainable x grad bytes"),
        master_weights_bytes=formula(m.master_weights_bytes, "bytes", f"{src}: fp32 master copy"),
        optimizer_bytes=formula(m.optimizer_bytes, "bytes", f"{src}: optimizer moments"),
        activations_bytes=formula(m.activations_bytes, "bytes",
                                  "estimate/memory.py activation_bytes: tensors saved per layer"),
        logits_bytes=formula(m.logits_bytes, "bytes",
                             "estimate/memory.py: the largest at the head, the loss and its "
                             "backward (logits_bytes, loss_backward_bytes, held graph)"),
        optimizer_temporaries_bytes=formula(m.optimizer_temporaries_bytes, "bytes",
                                            "foreach AdamW: one state-sized temporary"),
        gathered_bytes=formula(m.gathered_bytes, "bytes",
                               f"{src}: ZeRO-3/FSDP root unit + 2 gathered layers (full "
                               "fine-tuning: and their gradients, beside a layer's backward; "
                               "gathered_working_bytes)"),
        tensors_bytes=formula(m.tensors_bytes, "bytes", f"{src}: peak of live tensors"),
        allocator_reserve_bytes=reserve,
        cuda_context_bytes=context,
        total_bytes=total,
        device_bytes=Figure(value=device_bytes, unit="bytes", basis="catalog",
                            source="accelerator catalog memory_gb"),
        peak_phase=m.peak_phase,
        fits=fits,
        host_bytes=formula(m.host_bytes, "bytes", host_source) if host_source else None,
        stack=stack,
    )
    # each part alive at the peak with its field's source (or its own, for the parts that
    # only the peak names)
    at_peak = {key: formula(value, "bytes", report[key].source if key in report
                            else _PEAK_ONLY_SOURCES[key]) for key, value in m.peak_parts}
    return MemoryReport(**report, at_peak_bytes=at_peak)


def _attention_span_note(t: Training) -> str:
    """What the attention term spans when sequences pack documents that attend apart."""
    if t.document_tokens is None:
        return ""
    return (f" over packed documents of {t.document_tokens:,} tokens (each attends within "
            f"itself, not across the {t.seq_len:,}-token sequence; all documents taken as that "
            "long)")


def _host_source(t: Training, hw: Hardware, mem: MemoryBreakdown) -> str:
    """The basis of the host RAM figure (empty without offload): per GPU and per node."""
    if t.offload == "none" and t.checkpoint_offload and t.checkpointing:
        return ("estimate/unsloth.py offloaded_checkpoint_host_bytes: every block's input in "
                "pinned host memory (checkpoint_offload: Unsloth's offloaded checkpointing)")
    node = min(hw.gpus_per_node, hw.num_gpus)
    if t.offload == "none":
        if not t.activation_offload:
            return ""
        return (f"estimate/activation_offload.py offloaded_bytes: the checkpointed layer "
                f"inputs and the final norm's fp32 input of one micro-batch, pinned "
                f"(activation_offload); x {node} GPUs = {node * mem.host_bytes / 2**30:,.1f} "
                f"GiB of host RAM per node")
    what = "fp32 master weights, moments and fp32 gradients" + (
        " and the weights" if t.offload == "optimizer+params" else "") + (
        ", DeepSpeed's gradient accumulation buffer" if OF.host_accumulation_bytes_per_param(
            zero_stage=t.zero_stage, zero3_engine=t.zero3_engine, grad_accum=t.grad_accum,
            grad_bytes=1.0) else "")
    also = (" with the activation offload's pinned layer inputs "
            "(estimate/activation_offload.py)" if t.activation_offload else "")
    return (f"estimate/offload.py host_bytes_per_gpu{also}: the GPU's ZeRO partition of the {what} "
            f"(offload {t.offload}); x {node} GPUs = {node * mem.host_bytes / 2**30:,.0f} GiB "
            f"of host RAM per node, pinned staging buffers not counted")


#: the largest amount of work an estimate takes, and why: each far beyond any real run (the
#: largest published pretraining runs are ~3.6e13 tokens, Qwen3; Llama 3 405B took ~1.2e6
#: optimizer steps), so that a typo (1e30 tokens) is refused instead of priced at $1e26. The
#: plan's limit on any number (plan/load.py MAX_NUMBER) is the same 1e15.
AMOUNT_MAX: dict[str, tuple[float, str]] = {
    "tokens": (1e15, "tokens (the largest published training runs are ~4e13)"),
    "steps": (1e12, "optimizer steps (the largest published runs take ~1e6)"),
    "examples": (1e15, "examples (no data set is near it)"),
    "epochs": (1e6, "epochs"),
    "tokens_per_example": (1e7, "tokens per example (a plan's longest sequence is 1e7)"),
}


def training_amount(
    t: Training,
    hw: Hardware,
    tokens: float | None = None,
    steps: float | None = None,
    examples: float | None = None,
    epochs: float | None = None,
    tokens_per_example: float | None = None,
    packed: bool = False,
) -> tuple[float, float, str] | None:
    """(tokens, optimizer steps, basis) of the work, from exactly one way of stating it.

    Padded (the default): each example fills one sequence slot of seq_len tokens, so
    steps = examples x epochs / effective batch (effective batch = micro-batch x accumulation x
    GPUs); accumulation changes the number of optimizer steps, not the compute per example.
    Packed: examples of `tokens_per_example` tokens (mean) are concatenated into full
    sequences, so tokens = examples x epochs x tokens_per_example and
    steps = tokens / tokens per step.
    """
    if (tokens_per_example is not None or packed) and examples is None:
        raise FieldError(("tokens_per_example", "packed"), "a mean example length and packing "
                         "describe examples: give the number of examples too.")
    if packed and t.seq_len_mean is not None:
        # packed micro-batches are all seq_len long: there are no varied lengths to replay
        raise FieldError(("packed", "seq_len_mean"), "packed examples fill sequences of "
                         "seq_len tokens, so every micro-batch has the same length: a "
                         "distribution of sample lengths does not apply.",
                         "Leave out seq_len_mean (and seq_len_std), or do not pack.")
    if tokens_per_example is not None and (not math.isfinite(tokens_per_example)
                                           or tokens_per_example <= 0):
        raise FieldError("tokens_per_example", f"expected a positive number of tokens, got "
                                               f"{tokens_per_example!r}.")
    given_ways = [x is not None for x in (tokens, steps, examples)]
    if sum(given_ways) == 0:
        if epochs is not None:
            raise FieldError("epochs", "epochs need a number of examples (the dataset size).")
        return None
    if sum(given_ways) > 1:
        raise FieldError(("tokens", "steps", "examples"), "give only one of them.")
    # each data-parallel replica (tp x pp x cp GPUs) takes its own micro-batches
    replicas = hw.num_gpus // (t.tp * t.pp * t.cp)
    tokens_per_step = t.tokens_per_micro_batch * t.grad_accum * replicas
    effective_batch = t.micro_batch * t.grad_accum * replicas
    for name, value in (("tokens", tokens), ("steps", steps), ("examples", examples),
                        ("epochs", epochs)):
        if value is not None and (not math.isfinite(value) or value <= 0):
            raise FieldError(name, f"expected a positive number, got {value!r}.")
        limit, why = AMOUNT_MAX[name]
        if value is not None and value > limit:
            raise FieldError(name, f"{value:g} is more than {limit:g} {why}: refused as a "
                                   f"typo rather than priced.")
    if tokens_per_example is not None and tokens_per_example > AMOUNT_MAX["tokens_per_example"][0]:
        limit, why = AMOUNT_MAX["tokens_per_example"]
        raise FieldError("tokens_per_example", f"{tokens_per_example:g} is more than {limit:g} "
                                               f"{why}.")
    if steps is not None and steps != math.floor(steps):
        raise FieldError("steps", f"expected a whole number of optimizer steps, got {steps:g}.")
    if examples is not None and examples < 1:
        raise FieldError("examples", f"expected at least one example, got {examples!r}.")
    if tokens is not None:
        n_steps = math.ceil(tokens / tokens_per_step)
        return (n_steps * tokens_per_step, n_steps,
                f"tokens given ({tokens:.4g}); steps = ceil(tokens / {tokens_per_step} tokens "
                f"per step)")
    if steps is not None:
        n_steps = math.ceil(steps)
        return n_steps * tokens_per_step, n_steps, "steps given; tokens = steps x tokens per step"
    assert examples is not None
    n_epochs = epochs if epochs is not None else 1.0
    if packed:
        per_example = tokens_per_example if tokens_per_example is not None else t.seq_len
        packed_tokens = examples * n_epochs * per_example
        n_steps = math.ceil(packed_tokens / tokens_per_step)
        mean = (f"{per_example:g} tokens (mean)" if tokens_per_example is not None else
                f"{per_example:g} tokens ({PACKED_MEAN_ASSUMED})")
        basis = (f"packed: {examples:g} examples x {mean} x "
                 f"{n_epochs:g} epochs = {packed_tokens:.4g} tokens in sequences of "
                 f"{t.seq_len}; steps = ceil(tokens / {tokens_per_step} tokens per step)")
        return n_steps * tokens_per_step, n_steps, basis
    # with variable lengths and longer samples dropped (ms-swift's truncation_strategy
    # 'delete'), only the kept share of the examples trains
    kept = 1.0
    if t.seq_len_mean is not None and t.long_samples == "drop":
        from gpuhours.estimate.lengths import LengthDistribution

        kept = LengthDistribution(t.seq_len_mean, t.seq_len_std, t.seq_len,
                                  t.long_samples).kept_fraction()
    n_steps = math.ceil(examples * kept * n_epochs / effective_batch)
    kept_text = (f" x {kept:.1%} kept (the log-normal's share of samples at most {t.seq_len} "
                 f"tokens; longer ones dropped)" if kept < 1.0 else "")
    basis = (f"steps = ceil({examples:g} examples{kept_text} x {n_epochs:g} epochs / effective "
             f"batch {effective_batch}); each example padded to seq_len {t.seq_len}")
    if tokens_per_example is not None and tokens_per_example < t.seq_len:
        basis += (f" ({100 * (1 - tokens_per_example / t.seq_len):.0f}% of it padding at a "
                  f"mean of {tokens_per_example:g} tokens: packing would save that)")
    elif tokens_per_example is not None and tokens_per_example > t.seq_len:
        basis += (f"; a mean of {tokens_per_example:g} tokens is cut to {t.seq_len} "
                  f"(truncation: {truncated_share(tokens_per_example, t.seq_len):.0%} of the "
                  f"tokens dropped)")
    return n_steps * tokens_per_step, n_steps, basis


#: the share of work beyond what was asked that whole optimizer steps may add before the
#: estimate says so: a reporting threshold, not physics
WHOLE_STEPS_WARN_FRACTION = 0.10


def whole_steps_warning(t: Training, hw: Hardware, amount: tuple[float, float, str],
                        tokens: float | None, examples: float | None, epochs: float | None,
                        tokens_per_example: float | None, packed: bool) -> str:
    """A warning when the run's whole optimizer steps (training_amount's ceil) hold more than
    WHOLE_STEPS_WARN_FRACTION beyond the work asked (--tokens, or examples x epochs): the
    global batch is large beside the work, and the GPU hours price the steps; "" otherwise, and
    for a number of steps given (the steps are the work)."""
    n_tokens, n_steps, _ = amount
    n_epochs = epochs if epochs is not None else 1.0
    if tokens is not None:
        asked, made, unit = tokens, n_tokens, "tokens"
    elif examples is not None and packed:
        per = tokens_per_example if tokens_per_example is not None else t.seq_len
        asked, made, unit = examples * n_epochs * per, n_tokens, "tokens"
    elif examples is not None:
        batch = t.micro_batch * t.grad_accum * (hw.num_gpus // (t.tp * t.pp * t.cp))
        asked, made, unit = examples * n_epochs, n_steps * batch, "sequences"
    else:
        return ""
    if made <= asked * (1 + WHOLE_STEPS_WARN_FRACTION):
        return ""
    return (f"whole optimizer steps: {n_steps:,.0f} step{'s' if n_steps != 1 else ''} of "
            f"{made / n_steps:,.0f} {unit} make {made:.4g} {unit}, {made / asked:,.3g}x the "
            f"{asked:.4g} asked; the GPU hours price the steps. The global batch is large "
            f"beside the work: a smaller one (--global-batch, --batch, --grad-accum) or more "
            f"work.")


#: the basis of a packed run's example length when no mean was given: an assumption, named
PACKED_MEAN_ASSUMED = "assumed: no tokens_per_example given, each example taken as a full sequence"


def amount_basis_kind(tokens: float | None, n_tokens: float, packed: bool,
                      tokens_per_example: float | None) -> Literal["input", "formula", "assumed"]:
    """How the run's token count was obtained: "input" only when it is the --tokens given
    (ceil to whole steps can add a few); "assumed" when packed examples had no mean length (each
    taken as seq_len tokens, PACKED_MEAN_ASSUMED); else "formula" (steps x tokens per step,
    examples x epochs x length)."""
    if tokens is not None:
        return "input" if n_tokens == tokens else "formula"
    if packed and tokens_per_example is None:
        return "assumed"
    return "formula"


def truncated_share(tokens_per_example: float, seq_len: int) -> float:
    """The share of an example's tokens dropped when it is cut to `seq_len` (a trainer's
    truncation to max_length, as TRL's SFTTrainer and HF tokenizers do unpacked): 1 -
    seq_len / mean length; 0 when examples fit. Assumes every example has the mean length
    (a longer tail drops more)."""
    return max(0.0, 1 - seq_len / tokens_per_example)


def cost_rows(gpu_hours: float, price_rows: list[PriceRow], num_gpus: int = 1,
              gpus_per_node: int = 8) -> list[CostRow]:
    """Dollars for `gpu_hours` used on `num_gpus` GPUs at each provider's row, whole instances
    billed (gpuhours.catalog.billing: ceil(GPUs / GPUs per instance) instances, so one GPU on
    an 8-GPU-only instance pays 8), cheapest on-demand total first; each row's doubts flagged
    (stale, spot = on-demand, marked in the catalog's notes, small instances joined over the
    network for a job the estimate places on one node)."""
    from datetime import date

    from gpuhours.catalog.billing import bill, spans_network_flag
    from gpuhours.catalog.price_flags import price_flags

    today = date.today()
    out = []
    for p in price_rows:
        od, spot = p.on_demand_usd_per_gpu_hour, p.spot_usd_per_gpu_hour
        b = bill(num_gpus, p.gpus_per_instance)
        billed_h = b.billed_gpu_hours(gpu_hours)
        flags = [f.text for f in price_flags(p, today)]
        if b.spans_network(gpus_per_node):
            flags.append(spans_network_flag(b))
        out.append(CostRow(
            provider=p.provider, provider_kind=p.provider_kind, instance=p.instance,
            on_demand_usd=None if od is None else billed_h * od,
            spot_usd=None if spot is None else billed_h * spot,
            on_demand_usd_per_gpu_hour=od, spot_usd_per_gpu_hour=spot,
            as_of=p.as_of.isoformat(), source=p.source,
            gpus_per_instance=p.gpus_per_instance, instances=b.instances,
            billed_gpus=b.billed_gpus, billed_gpu_hours=billed_h, billing=b.note, flags=flags,
        ))
    return sorted(out, key=lambda r: (r.on_demand_usd is None, r.on_demand_usd or 0.0,
                                      r.spot_usd or math.inf))


#: how an overlapped collective's exposed time is counted (estimate/parallel.py)
OVERLAP_BASIS = {
    "tensor-parallel collectives": " (--tp-comm-overlap: the first of tp chunks, what the "
    "matmuls cannot cover, and the SMs it takes while hidden; parallel.overlapped_exposed_s)",
    "expert all-to-all": " (--moe-a2a-overlap: the micro-batches without a partner, what the "
    "other micro-batch's compute cannot cover, and the SMs it takes while hidden; "
    "parallel.overlapped_exposed_s)",
}


def _downtime(t: Training, hw: Hardware, productive_s: float, step_time_s: float
              ) -> tuple[Figure, list[Assumption]]:
    """Expected downtime of the run in GPU hours (estimate/goodput.py), with its basis, and
    the assumptions it used."""
    from gpuhours.estimate import goodput as G
    from gpuhours.storage.budget import checkpoint_bytes_for

    rate = hw.interruptions_per_gpu_hour
    used = [G.RESTART_S, G.STORAGE_WRITE_GB_PER_S_PER_GPU]
    if rate is None:
        rate = G.INTERRUPTIONS_PER_GPU_HOUR.value
        used.insert(0, G.INTERRUPTIONS_PER_GPU_HOUR)
    if rate == 0:
        return given(0.0, "GPU h", "no interruptions (interruptions_per_gpu_hour 0)"), []
    ckpt = checkpoint_bytes_for(t, with_optimizer=True).value
    d = G.expected_downtime(productive_s, hw.num_gpus, ckpt, rate, step_time_s,
                            rate_is_default=hw.interruptions_per_gpu_hour is None)
    # short enough to stay in a wide table's basis column; the rate's, the restart's and the
    # storage's sources are in the assumptions list (or the rate was given)
    given_rate = ", given" if hw.interruptions_per_gpu_hour is not None else ""
    tau_min = d.checkpoint_interval_s / 60
    tau_text = f"{tau_min:,.0f}" if tau_min >= 10 else f"{tau_min:.2g}"
    source = (f"estimate/goodput.py: {d.interruptions:.3g} interruptions ({rate:.3g}/GPU-h"
              f"{given_rate}) x (restart {G.RESTART_S.value / 60:g} min + half the checkpoint "
              f"interval {tau_text} min) + {d.checkpoints:,.0f} "
              f"checkpoint writes; goodput {d.goodput:.1%}")
    return assumed(d.downtime_s * hw.num_gpus / 3600, "GPU h", source), used


def _with_downtime(value: float, unit: str, what: str, down: Figure) -> Figure:
    """A total with the expected downtime in it: assumed when the downtime is (goodput.py's
    rates), else a formula (no interruptions: the steps alone)."""
    return (assumed(value, unit, f"{what} (estimate/goodput.py, assumed rates)")
            if down.basis == "assumed" else formula(value, unit, f"{what} (none: rate 0)"))


def estimate_training(
    t: Training,
    hw: Hardware,
    model_basis: str | None = None,
    tokens: float | None = None,
    steps: float | None = None,
    examples: float | None = None,
    epochs: float | None = None,
    price_rows: list[PriceRow] | None = None,
    tokens_per_example: float | None = None,
    packed: bool = False,
    efficiency_scale: float = 1.0,
    efficiency_basis: str | None = None,
    host_us_per_op: float | None = None,
    host_basis: str | None = None,
) -> TrainingEstimate:
    """Estimate one training setup on `hw`. See DESIGN.md "Physics to get right".

    `model_basis` says where the shape came from (default: the Training's own).
    `host_us_per_op` (with `host_basis`): a measured host cost per operator (the ledger's),
    used unless `hw` gives one."""
    if host_us_per_op is not None and hw.host_us_per_op is None:
        hw = hw.model_copy(update={"host_us_per_op": host_us_per_op})
    else:
        host_basis = None
    model_basis = t.model_basis if model_basis is None else model_basis
    arch = t.arch
    if arch.encoder and t.method != "full":
        raise FieldError("method", "LoRA on encoder models is not modelled yet; use full.")
    flops = training_flops(t)  # images and their vision tower included (issue 15)
    mem = reserved_training_memory(t, hw.num_gpus, hw.gpu.stack, hw.gpu.memory_bytes)
    st: StepTime = training_step_time(arch, t, hw, flops, mem.trainable_params,
                                      efficiency_scale)
    # tokens of one optimizer step per GPU: a model replica's, shared by its tp x pp x cp GPUs
    mp = t.tp * t.pp * t.cp
    tokens_per_step_gpu = t.tokens_per_micro_batch * t.grad_accum / mp
    tps_gpu = tokens_per_step_gpu / st.step_time_s
    peak = peak_flops(hw.gpu, t.precision)
    mfu = tps_gpu * flops.model_flops_per_token / peak
    hfu = tps_gpu * flops.hardware_flops_per_token / peak
    gemm = A.gemm_efficiency_entry(hw.gpu.generation, hw.gpu.compute_capability)
    eff_source = efficiency_basis or (
        f"{gemm_efficiency_basis(hw.gpu)} x width factor "
        f"d/(d+{A.GEMM_HALF_WIDTH.value:g}) ({gemm.basis})")
    if t.precision == "fp8-mixed":
        fp8 = A.fp8_gemm_efficiency_entry(hw.gpu.generation, hw.gpu.compute_capability)
        eff_source += (f"; the layers' fp8 GEMMs: {fp8.name} {fp8.value} x the width factor "
                       f"of the fp8 peak ({fp8.basis}); MFU against the fp8 peak")
    step_src = "estimate/timing.py roofline"
    # a vision tower's operators are counted too (estimate/vision_host.py)
    tower_ops = ("; the vision tower's: estimate/vision_host.py"
                 if vision_host_ops_per_micro_batch(t) else "")
    if t.cuda_graph_scope is not None:  # the regions replayed as CUDA graphs, one launch each
        tower_ops = f"; CUDA graphs {','.join(t.cuda_graph_scope)}{tower_ops}"
    if t.kernels == "megatron" and arch.is_moe:  # the router's and dispatcher's own host cost
        tower_ops = (f"; Megatron-Core's MoE router and dispatcher operators at "
                     f"{megatron_moe_host_op_weight():.2f} eager operators each "
                     f"(host.megatron_moe_host_op_weight){tower_ops}")
    breakdown = {
        "matmul_s": formula(st.matmul_s, "s", f"{step_src}: matmul FLOPs / (peak x GEMM efficiency)"
                            + _expert_gemm_note(arch, st)),
        "attention_s": formula(st.attention_s, "s",
                               f"{step_src}: attention FLOPs / (peak x attention efficiency)"),
        "memory_bound_s": formula(st.memory_bound_s, "s",
                                  f"{step_src}: elementwise + logits bytes / bandwidth"
                                  + ("; MoE token permutation, weighting, combine and router "
                                     "logits (estimate/moe_gemm.py routing_bytes_per_token_layer)"
                                     if arch.is_moe else "") + (
                                      f"; LoRA branch {lora_branch_of(t)} (estimate/"
                                      "lora_traffic.py)" if t.method != "full" else "")
                                  + _eager_pieces_note(arch, t)),
        "host_s": Figure(value=st.host_s, unit="s", basis="measured", source=(
            f"{step_src}: operators counted for the {t.kernels} path (estimate/host.py"
            f"{tower_ops}) x {hw.host_us_per_op:.3g} us ({host_basis})"))
        if host_basis else formula(st.host_s, "s", f"{step_src}: 0 on a TPU: XLA runs the "
                                   "step as one compiled program (estimate/timing.py "
                                   "eager_host_dispatch)")
        if hw.gpu.stack == "xla" else formula(st.host_s, "s", f"{step_src}: operators counted for the "
            f"{t.kernels} path (estimate/host.py{tower_ops}) x " + (
            f"{hw.host_us_per_op:g} us (given: host_us_per_op)" if hw.host_us_per_op is not None
            else f"{A.HOST_S_PER_OP.value * 1e6:g} us ({A.HOST_S_PER_OP.name}, assumed)"
            + (f" x {hw.gpu.host_op_time_ratio:g} for {hw.gpu.name}'s host CPU (catalog "
               "host_op_time_ratio)" if hw.gpu.host_op_time_ratio else ""))),
        "host_exposed_s": formula(st.host_exposed_s, "s",
                                  f"{step_src}: all of it: CUDA_LAUNCH_BLOCKING, each launch "
                                  "waits for its kernel (cuda_launch_blocking)"
                                  if t.cuda_launch_blocking else
                                  f"{step_src}: (host^p + GPU^p)^(1/p) - GPU, "
                                  f"p = {A.HOST_GPU_OVERLAP_P.value:g}"
                                  + ("; the vision tower's apart (estimate/timing.py "
                                     "host_gpu_combined_s)" if tower_ops else "")
                                  + ("; the forward apart from the backward, its MoE "
                                     "dispatcher waiting on the host in every MoE layer, plus "
                                     "one host operator a wait (estimate/timing.py "
                                     "host_gpu_combined_s, estimate/host.py "
                                     "MEGATRON_MOE_FORWARD_SYNCS)"
                                     if megatron_moe_forward_syncs_per_micro_batch(arch, t)
                                     else "")),
        "optimizer_s": formula(st.optimizer_s, "s", f"{step_src}: {t.optimizer} "
                               f"({t.optimizer_impl}) counted bytes per parameter / bandwidth"
                               + ("; + its host operators: CUDA_LAUNCH_BLOCKING"
                                  if t.cuda_launch_blocking else "")),
        "communication_s": formula(st.communication_s, "s",
                                   f"{step_src}: ring collective volume / {st.link} bandwidth"
                                   + ("; DeepSpeed's PipelineEngine: all-reduce of the "
                                      "gradients + ZeRO-1's all-gather (estimate/"
                                      "pipe_engine.py)" if t.deepspeed_pipe_engine else "")
                                   + (f" ({hw.gpu.host_staged_gb_per_s_two_way:g} GB/s both ways "
                                      f"in the catalog: {hw.gpu.name} peer_to_peer_source)"
                                      if "staged" in st.link else "")),
        "communication_exposed_s": formula(st.communication_exposed_s, "s", (
            "communication not hidden: all of it, " + (
                "CUDA_LAUNCH_BLOCKING (each launch waits for its kernel)"
                if t.cuda_launch_blocking else "DeepSpeed's PipelineEngine reduces after the "
                "last backward (estimate/pipe_engine.py)"))
            if t.cuda_launch_blocking or t.deepspeed_pipe_engine else ((
                "communication not hidden: each layer's ZeRO-3 traffic behind at most one "
                "layer's compute (estimate/parallel.py fsdp_exposed_s"
                + ("; adapter units: behind down_proj's forward and k and q's input gradients "
                   "only, fsdp_adapter_unit_windows" if t.fsdp_adapter_units else "")
                + ("; with tp/pp/cp/ep: the data-parallel ranks' traffic of the GPU's share of "
                   "its stage's layers, timing.py _layout_data_parallel"
                   if st.collectives else "")
                + ") and " if t.zero_stage >= 3 else "communication not hidden: ")
                # the overlap's source is in the assumptions list; a shorter basis keeps the
                # table whole on a wide terminal
                + f"at most {A.COMM_OVERLAP.value:g} of it hidden ({A.COMM_OVERLAP.name}, "
                "assumed)")),
    }
    off = st.offload
    if off is not None:
        breakdown["optimizer_s"] = formula(st.optimizer_s, "s", (
            f"estimate/offload.py: CPU Adam on the host {off.cpu_adam_s:.3g} s (the node's "
            f"partitions / {OF.HOST_ADAM_PARAMS_PER_S_PER_NODE.value:.3g} parameters/s, "
            f"measured elsewhere) + updated weights up {off.params_up_s:.3g} s + PCIe not hidden "
            f"{off.pcie_exposed_s:.3g} s (of {off.pcie_overlapped_s:.3g} s of gradient and "
            f"weight copies)" + ("" if t.offload_copies == "pinned" else
                                 f"; {t.offload_copies} copies "
                                 f"{OF.PAGEABLE_COPY_SLOWDOWN.value:g}x slower (DeepSpeed PR "
                                 "#5301)")))
    if st.checkpoint_copy_s:
        breakdown["checkpoint_copy_s"] = formula(
            st.checkpoint_copy_s, "s", "estimate/unsloth.py: every block's input to the host "
            "and back per micro-batch (2 L N d bytes) / the host link (estimate/offload.py), "
            "on the compute stream: not hidden")
    if st.collectives:
        breakdown["pipeline_bubble_s"] = formula(
            st.pipeline_bubble_s, "s", f"estimate/parallel.py: stage time x (pp - 1)/(v m), "
            f"pp {t.pp}, v {t.virtual_stages}, m {t.grad_accum} micro-batches (Narayanan et al. "
            f"2021){stages_text(arch, t.pp)}"
            + ("; the slowest stage (the LM head and loss on the last) sets the step time, the "
               "fullest the memory per GPU" if stages_text(arch, t.pp) else ""))
        for c in st.collectives[:-1]:  # the last, data-parallel, is communication_s above
            key = c.name.replace("-", "_").replace(" ", "_")
            breakdown[f"{key}_s"] = formula(c.seconds, "s", f"estimate/parallel.py: {c.name} "
                                            f"volume / {c.link} bandwidth")
            how = OVERLAP_BASIS.get(c.name, "") if (
                (c.name == "expert all-to-all" and t.moe_a2a_overlap)
                or (c.name == "tensor-parallel collectives" and t.tp_comm_overlap)) else ""
            if t.cuda_launch_blocking:
                how = ": CUDA_LAUNCH_BLOCKING, each launch waits for its kernel"
            breakdown[f"{key}_exposed_s"] = formula(c.exposed_s, "s", f"{c.name} not hidden "
                                                    f"behind compute{how}")
    totals = None
    used_downtime: list[Assumption] = []
    amount = training_amount(t, hw, tokens, steps, examples, epochs, tokens_per_example, packed)
    if amount is not None:
        n_tokens, n_steps, amount_basis = amount
        wall_s = n_steps * st.step_time_s
        gpu_hours = wall_s * hw.num_gpus / 3600
        down, down_used = _downtime(t, hw, wall_s, st.step_time_s)
        totals = Totals(
            tokens=Figure(value=n_tokens, unit="tokens", source=amount_basis,
                          basis=amount_basis_kind(tokens, n_tokens, packed, tokens_per_example)),
            optimizer_steps=formula(n_steps, "steps", amount_basis),
            gpu_hours=formula(gpu_hours, "GPU h", "steps x step time x GPUs / 3600"),
            wall_clock_hours=formula(wall_s / 3600, "h", f"steps x step time on {hw.num_gpus} GPUs"),
            cost_usd=cost_rows(gpu_hours, price_rows or [], hw.num_gpus, hw.gpus_per_node),
            downtime_gpu_hours=down,
            # assumed, not formula: the downtime in it rests on assumed rates (goodput.py)
            gpu_hours_with_downtime=_with_downtime(
                gpu_hours + down.value, "GPU h", "GPU hours of the steps + expected downtime", down),
            wall_clock_hours_with_downtime=_with_downtime(
                (wall_s + down.value * 3600 / hw.num_gpus) / 3600, "h",
                f"wall clock of the steps + expected downtime / {hw.num_gpus} GPUs", down),
            downtime_cost_usd=cost_rows(down.value, price_rows or [], hw.num_gpus, hw.gpus_per_node)
            if down.value > 0 else [],
            track_record=load_track_record() if applies_track_record(t.method, hw.num_gpus, True)
            else None,
        )
        used_downtime = down_used
    warnings = []
    if amount is not None:
        over = whole_steps_warning(t, hw, amount, tokens, examples, epochs,
                                   tokens_per_example, packed)
        if over:
            warnings.append(over)
    from gpuhours.estimate.flops import images_note

    images = images_note(t)  # a vision-language setup's images and its tower (issue 15)
    beyond = beyond_positions_warning(t)
    if beyond is not None:
        warnings.append(beyond)
    if examples is not None and packed and tokens_per_example is None:
        warnings.append(f"packed examples without a mean length (--tokens-per-example, a "
                        f"plan's tokens_per_example): each is taken as a full {t.seq_len}-token "
                        f"sequence (assumed), so the run's tokens and steps are those of "
                        f"unpacked examples; give the dataset's mean tokens per example.")
    if (examples is not None and not packed and tokens_per_example is not None
            and tokens_per_example > t.seq_len):
        n_ep = epochs if epochs is not None else 1.0
        given_tokens = examples * n_ep * tokens_per_example
        dropped = given_tokens * truncated_share(tokens_per_example, t.seq_len)
        warnings.append(f"examples of {tokens_per_example:g} tokens (mean) are longer than "
                        f"--seq {t.seq_len}: unpacked, each is cut to {t.seq_len} tokens, so at "
                        f"least {dropped:.3g} of the {given_tokens:.3g} tokens given are "
                        f"dropped ({truncated_share(tokens_per_example, t.seq_len):.0%} at the "
                        f"mean length; a spread of lengths drops more). Raise --seq, or pack "
                        f"(--packed), to train on all of them.")
    if hw.num_nodes > 1 and (hw.num_gpus - hw.gpus_per_node) % (mp * t.ep) == 0:
        # does the last node pay for itself? the same setup on one node fewer
        fewer = hw.model_copy(update={"num_gpus": hw.num_gpus - hw.gpus_per_node})
        mem_f = reserved_training_memory(t, fewer.num_gpus, hw.gpu.stack,
                                         hw.gpu.memory_bytes)
        st_f = training_step_time(arch, t, fewer, flops, mem_f.trainable_params,
                                  efficiency_scale)
        total_now = tokens_per_step_gpu * hw.num_gpus / st.step_time_s
        total_fewer = tokens_per_step_gpu * fewer.num_gpus / st_f.step_time_s
        if mem_f.total_bytes <= hw.gpu.memory_bytes and total_fewer >= total_now:
            warnings.append(
                f"the last node makes the run slower: {hw.num_gpus} GPUs train "
                f"{total_now:,.0f} tokens/s, {fewer.num_gpus} GPUs {total_fewer:,.0f} "
                f"(the collectives over the network, {hw.inter_node_gb_per_s_one_way:g} GB/s "
                f"per GPU, grow faster than the compute shrinks); use fewer nodes, a larger "
                f"micro-batch or accumulation, or ZeRO below 3.")
    load_bytes = mem.total_params * 2.0  # the checkpoint in bf16/fp16, as it is loaded
    if t.zero_stage >= 3 and hw.num_gpus > 1 and load_bytes > hw.gpu.memory_bytes:
        warnings.append(f"loading: the whole model is {load_bytes / 2**30:.0f} GiB in bf16, more "
                        f"than one {hw.gpu.name}; shard it as it loads (FSDP with meta-device "
                        f"init or accelerate's fsdp_cpu_ram_efficient_loading, DeepSpeed "
                        f"zero.Init): a framework that loads it onto every GPU first runs out "
                        f"of memory before the first step.")
    node = reference_node(hw.gpu.generation, hw.gpu.name) if hw.num_nodes > 1 else None
    if node is not None and hw.gpus_per_node < node.gpus_per_node:
        # a rack-scale NVLink domain (GB200 NVL72) modelled as nodes of a few GPUs
        warnings.append(f"{hw.gpu.name} is modelled in nodes of {hw.gpus_per_node} GPUs on "
                        f"{hw.inter_node_gb_per_s_one_way:g} GB/s per GPU between them; it "
                        f"comes in {node.name} racks: {node.within_node}, and "
                        f"{node.inter_node_gb_per_s_one_way:g} GB/s per GPU between racks "
                        f"({node.source}). Give --node {node.name} (a plan's hardware.node) "
                        f"or your cluster's --gpus-per-node and --inter-node-gb-per-s.")
    elif node is not None and (hw.inter_node_gb_per_s_one_way
                               < node.inter_node_gb_per_s_one_way):
        node_name = (REFERENCE_NODE_OF_GPU.get(hw.gpu.name)
                     or REFERENCE_NODE[hw.gpu.generation])
        # the default network is a DGX A100's; a newer node usually has more
        warnings.append(f"the network between nodes is taken as "
                        f"{hw.inter_node_gb_per_s_one_way:g} GB/s per GPU one way; a "
                        f"{node_name} has "
                        f"{node.inter_node_gb_per_s_one_way:g} ({node.network}; "
                        f"{node.source}): give your cluster's (--node, --inter-node-gb-per-s, a "
                        f"plan's hardware.node or inter_node_gb_per_s_one_way).")
    if t.tp > 1 and groups_cross_nodes(hw.num_gpus, hw.gpus_per_node, t.tp):
        # Megatron-Core's guidance and this tool's help put tensor parallelism within a node
        warnings.append(f"tensor parallelism {t.tp} across nodes of {hw.gpus_per_node} GPUs: "
                        + ("each group is wider than a node" if t.tp > hw.gpus_per_node else
                           f"{t.tp} does not divide {hw.gpus_per_node}, so some groups reach "
                           f"over two nodes")
                        + f", and the step waits on their all-reduces over the "
                          f"{hw.inter_node_gb_per_s_one_way:g} GB/s network (a tensor-parallel "
                          f"group usually stays within a node's NVLink: a tp dividing "
                          f"{hw.gpus_per_node}).")
    if t.arch.is_moe and t.tp > 1:
        # Megatron-Core's default expert_tensor_parallel_size is tp (arguments.py); every MoE
        # recipe of Megatron-Bridge sets 1 (recipes/, 73 assignments @067f987d), as modelled
        warnings.append(f"the routed experts are taken whole on each expert-parallel rank "
                        f"(expert tensor parallelism 1, as Megatron-Bridge's MoE recipes set "
                        f"it), not split over tp {t.tp}; Megatron-LM's own default splits "
                        f"them over tp (expert_tensor_parallel_size = tp), which is not "
                        f"modelled: with it each GPU would hold 1/{t.tp} of its experts' "
                        f"weights.")
    over_window = reduction_window_warning(t, hw, st)
    if over_window:
        warnings.append(over_window)
    if st.pipeline_bubble_s > 0.25 * st.step_time_s:
        # (p - 1)/(v m) of the ideal step idles (Narayanan et al. 2021 sec. 2.2): with few
        # micro-batches a step most stages wait
        warnings.append(f"the pipeline bubble is {st.pipeline_bubble_s / st.step_time_s:.0%} "
                        f"of the step ({st.pipeline_bubble_s:,.3g} s of {st.step_time_s:,.3g} "
                        f"s): {t.pp} stages run {t.grad_accum} micro-batch"
                        f"{'es' if t.grad_accum != 1 else ''} a step, and the bubble is "
                        f"(pp - 1)/(v x micro-batches) of the ideal step; more micro-batches "
                        f"(--grad-accum), fewer stages or --virtual-stages shrink it.")
    varlen = None
    if t.seq_len_mean is not None and hw.gpu.stack == "xla":
        warnings.append("variable-length samples on a TPU: XLA compiles a program for each "
                        "new input shape, so runs pad to a few fixed lengths; the estimate "
                        f"takes every micro-batch at --seq {t.seq_len} and adds no allocator "
                        "replay (a caching allocator's, which XLA does not have).")
    elif t.seq_len_mean is not None:
        from gpuhours.estimate.fragmentation import (
            REPLAY_MICRO_BATCHES,
            replay_micro_batches,
            varlen_reserve,
        )

        # the run's micro-batches per GPU when its amount is given, else the assumed count;
        # bounded in layer passes for time (the basis says where the replay stopped)
        run = (math.ceil(n_steps) * t.grad_accum if amount is not None
               else REPLAY_MICRO_BATCHES)
        varlen = varlen_reserve(t, mem, hw.gpu.memory_bytes - mem.cuda_context_bytes,
                                micro_batches=replay_micro_batches(arch.num_layers, run),
                                run_micro_batches=run)
        warnings.append("variable-length samples: the live tensors and the step time are "
                        f"taken at the longest micro-batch (--seq {t.seq_len}); the allocator "
                        "reserve is a replay of the caching allocator (a model, not a "
                        "measurement), so max_memory_reserved and nvidia-smi read above the "
                        "live tensors while the card has room.")
        if varlen.out_of_memory:
            warnings.append("the allocator replay ran out of memory: a request of a longer "
                            "micro-batch found no cached block and no room for a new segment "
                            "even with the cache emptied (fragmentation; expandable_segments "
                            "avoids it).")
    if t.recompute_modules:
        # the time side is modelled (estimate/moe_gemm.py); what the recomputed modules no
        # longer keep is not taken off the saved activations, so memory reads high
        warnings.append(f"selective recomputation ({', '.join(t.recompute_modules)}): its "
                        "recomputation is timed, but the activations it frees are still "
                        "counted, so memory is an upper bound.")
    if not mem.total_bytes <= hw.gpu.memory_bytes:
        warnings.append(f"does not fit: {mem.total_bytes / 2**30:.1f} GiB per GPU needed, "
                        f"{hw.gpu.memory_bytes / 2**30:.1f} GiB on {hw.gpu.name}.")
    elif mem.total_bytes > hw.gpu.memory_bytes * (1 - A.FIT_HEADROOM_FRACTION.value):
        warnings.append(headroom_warning(mem.total_bytes, hw.gpu.memory_bytes))
    overflow = paged_overflow_bytes(mem.paged_optimizer_bytes, hw.gpu.memory_bytes,
                                    mem.total_bytes)
    if overflow > 0:
        warnings.append(f"paged optimizer: {overflow / 2**30:.1f} of its "
                        f"{mem.paged_optimizer_bytes / 2**30:.1f} GiB of moments do not fit "
                        f"beside the rest on {hw.gpu.name}; the driver pages them over PCIe "
                        "every step, which the step time does not count.")
    used = [
        *gemm_efficiency_assumptions(hw.gpu),
        A.GEMM_HALF_WIDTH, A.ATTENTION_EFFICIENCY_RATIO, A.BANDWIDTH_EFFICIENCY, A.ELEMENTWISE_PASSES,
        A.LOSS_KERNEL_LOGITS_TRAFFIC[loss_kernel_of(t)],
    ]
    if hw.gpu.stack != "xla":  # a TPU has no eager dispatch, CUDA context or caching allocator
        used += [A.HOST_S_PER_OP, A.HOST_GPU_OVERLAP_P, A.CUDA_CONTEXT_BYTES,
                 A.ALLOCATOR_RESERVE_FRACTION]
    else:
        warnings.append("TPU: modelled as an XLA-compiled step (JAX jit or PyTorch/XLA): no "
                        "per-operator host dispatch, CUDA context or caching-allocator "
                        "reserve. The saved tensors and the memory-bound traffic are counted "
                        "as PyTorch eager's; XLA's fusion and rematerialisation can lower both "
                        "(not modelled).")
    if loss_kernel_of(t) == "chunked":
        used.append(A.CHUNKED_CE_CHUNKS)
    if arch.is_moe:
        used += [A.GROUPED_GEMM_K_HALF_DEPTH, A.GEMM_ROOFLINE_P]
        if megatron_expert_gemm_calls_per_micro_batch(arch, t):
            used.append(A.CUBLASLT_GEMM_HOST_S)
        if t.kernels == "megatron" and hw.gpu.stack != "xla":
            used += [A.MEGATRON_MOE_HOST_OP_RATIO, A.CUDA_LAUNCH_HOST_S]
    attention = attention_assumption(hw.gpu, t.fused_attention)
    if attention is not None:
        used.append(attention)
    if t.precision == "fp8-mixed":
        used += [A.fp8_gemm_efficiency_entry(hw.gpu.generation,
                                             hw.gpu.compute_capability),
                 A.FP8_CAST_BYTES_PER_ELEMENT, A.FP8_WEIGHT_COPY_BYTES]
    if t.offload != "none":
        used += [OF.HOST_LINK_GB_PER_S_ONE_WAY_BY_GENERATION[hw.gpu.generation],
                 OF.PCIE_COPY_EFFICIENCY, OF.HOST_ADAM_PARAMS_PER_S_PER_NODE,
                 OF.GRAD_BUCKET_ELEMENTS]
        if t.offload_copies != "pinned":
            used.append(OF.PAGEABLE_COPY_SLOWDOWN)
    if hw.num_gpus > 1:
        used += [A.COLLECTIVE_EFFICIENCY, A.COMM_OVERLAP]
    if st.collectives:
        used.append(A.MODEL_PARALLEL_COMM_OVERLAP)
    if t.tp_comm_overlap or t.moe_a2a_overlap:
        used.append(A.OVERLAP_COMM_SM_SHARE)
    if varlen is not None:
        used.append(A.SAMPLE_LENGTHS_LOGNORMAL)
        if amount is None:
            used.append(A.REPLAY_MICRO_BATCHES)
    used += used_downtime
    return TrainingEstimate(
        model=arch.name,
        model_basis=model_basis,
        gpu=hw.gpu.name,
        num_gpus=hw.num_gpus,
        # the loss kernel modelled: the setup's default resolved (setup.loss_kernel_of)
        setup={**t.model_dump(exclude={"arch"}), "loss_kernel": loss_kernel_of(t)},
        total_params=formula(mem.total_params, "params", "estimate/params.py count_params"),
        trainable_params=formula(mem.trainable_params, "params",
                                 "all parameters" if t.method == "full"
                                 else f"LoRA rank {t.lora_rank} on {t.lora_targets}"),
        memory=_memory_report(mem, hw.gpu.memory_bytes, _host_source(t, hw, mem), varlen,
                              hw.gpu.stack),
        model_flops_per_token=formula(flops.model_flops_per_token, "FLOP/token",
                                      "estimate/flops.py: 6N (4N LoRA) + causal attention"
                                      + _attention_span_note(t)),
        hardware_flops_per_token=formula(flops.hardware_flops_per_token, "FLOP/token",
                                         "model FLOPs + recomputation"),
        step_time_s=formula(st.step_time_s, "s", f"{step_src}; efficiency: {eff_source}"),
        step_time_breakdown_s=breakdown,
        bottleneck=st.bottleneck,
        largest_part=st.largest_part,
        tokens_per_step=formula(tokens_per_step_gpu * hw.num_gpus, "tokens",
                                "micro-batch x seq x accumulation x data-parallel replicas"),
        tokens_per_s_per_gpu=formula(tps_gpu, "tokens/s", "tokens per step per GPU / step time"),
        tokens_per_s=formula(tps_gpu * hw.num_gpus, "tokens/s", "per GPU x GPUs"),
        mfu=formula(mfu, "fraction", "tokens/s x model FLOPs/token / dense peak"),
        hfu=formula(hfu, "fraction", "tokens/s x hardware FLOPs/token / dense peak"),
        gemm_efficiency=Figure(value=st.gemm_efficiency, unit="fraction of peak",
                               basis="measured" if efficiency_basis else "assumed",
                               source=eff_source),
        totals=totals,
        warnings=warnings,
        assumptions=[f"{a.name} = {a.value:g} {a.unit}: {a.basis}" for a in used]
        + list(mem.setup_terms)
        + ([images] if images else []),
    )


def _eager_pieces_note(arch: ModelArch, t: Training) -> str:
    """The memory-bound source's note on the megatron path's eager pieces that run for this
    setup (estimate/rope.py, estimate/moe_gemm.py), or ""."""
    parts = []
    if unfused_rope_bytes_per_token_layer(arch, t.kernels, 2.0, False):
        parts.append("the eager rotary TE's fused one refuses for YaRN (estimate/rope.py)")
    if unfused_expert_bytes_per_token_layer(arch, t.kernels, 2.0, False, t.moe_fused_mlp):
        parts.append("the unfused expert MLP's clamp and fc2 bias (estimate/moe_gemm.py)")
    if recompute_bytes_per_token_layer(arch, t.kernels, 2.0, t.recompute_modules,
                                       t.moe_fused_mlp):
        parts.append(f"selective recomputation {','.join(t.recompute_modules or ())}")
    return "".join(f"; {p}" for p in parts)


def _expert_gemm_note(arch: ModelArch, st: StepTime) -> str:
    """The routed experts' share of the matmul time's basis: what their small GEMMs add."""
    if not arch.is_moe:
        return ""
    return (f"; the routed experts' GEMMs of tokens-per-expert rows add "
            f"{st.expert_gemm_s:.3g} s per step before the layout's split (tile, wave and K-depth "
            f"losses of their shapes: estimate/moe_gemm.py, constants from DeepGEMM's H800 table)")
