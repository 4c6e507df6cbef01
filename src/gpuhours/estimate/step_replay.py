"""Reserved memory of a fixed-length run: the caching allocator replayed over training steps.

torch reports two peaks: `max_memory_allocated` (live tensors, what estimate/memory.py counts)
and `max_memory_reserved` (the allocator's segments), and most published fine-tuning figures
are the second. The gap is the caching allocator's: it keeps every freed block, reuses one
only for a request that fits in it (best fit; split only when more than 1 MiB is left in the
large pool) and takes a new segment when none fits (trace/allocator.py, the rules of
c10/cuda/CUDACachingAllocator.cpp). Which requests find a block depends on the order of the
step's allocations and frees, so the gap is replayed here rather than taken as a flat share
(assumptions.ALLOCATOR_RESERVE_FRACTION, which the estimate keeps where this replay does not
apply: `replay_applies`).

The sequence, from the estimate's own per-layer accounting (memory.py's totals,
fragmentation.py's per-micro-batch tensors), in program order:

- before the first step, the resident state, one tensor per layer and one for the rest
  (`fragmentation.step_tensor_bytes`: for full fine-tuning the token embedding and the LM head
  are tensors of their own): weights, master weights, autocast copies, DeepSpeed buckets; for
  load_path fsdp-flatten instead Answer.AI's loading and FSDP wrap (estimate/load_cache.py:
  the copies, broadcast buckets and flat parameters freed and left cached), after which
  train.py resets the peak statistics (torch.cuda.reset_peak_memory_stats);
- each step: the micro-batches (at most two: a fixed-length run's later micro-batches repeat
  the second's requests on the same cache), each a forward and backward in program order
  (`fragmentation.replay_micro_batch`: per layer the kept tensors or the checkpointed input,
  the loss's working set, backward layer by layer). In the first micro-batch of a step the
  gradients are made in backward, a layer's after its backward (autograd accumulates into a
  fresh `.grad` the first time: torch/csrc/autograd/functions/accumulate_grad.h), the
  embedding's last; a later micro-batch accumulates into them in place;
- the optimizer step: in the first step torch's AdamW makes its state then (lazy
  `_init_group`, torch/optim/adamw.py: exp_avg and exp_avg_sq per parameter, in parameter
  order), so the moments land in blocks the step's activations freed; then the foreach
  temporaries (`torch._foreach_sqrt` over the second moments: one state-sized set, two in
  torch 2.0, each a list of parameter-shaped tensors, made and freed: estimate/
  adamw_temporaries.py) where memory.py counts them;
- `zero_grad(set_to_none=True)` (the Trainer's and train.py's) frees the gradients, which the
  next step's backward makes again.

Full fine-tuning under DeepSpeed's ZeRO-3 engine makes its state its own way instead
(estimate/deepspeed_replay.py: the optimizer's set-up before the first step, each gradient a
transient copied into a flat buffer that stays, its step one sub group at a time).

STEPS_REPLAYED steps are replayed: the first lays the state out in the activations' freed
blocks, the second and third run on that layout (reserved memory only grows, so later steps
of a fixed-length run add nothing once a step repeats the one before; a step that begins with
the allocator layout the step before began with would repeat it exactly, so it and the later
ones are not run: `run_steps`). The reserve added to
the live-tensor peak (memory.py's `tensors_bytes`) is the replay's reserved peak less its
allocated peak, over the window the source measures (after the wrap for fsdp-flatten, the whole
run otherwise).

Not modelled (so the replay reads low where they matter): the many tensors inside a layer
(the replay's layer is `layer_tensor_widths`' few tensors, and a layer's parameters are one
tensor), attention and cuBLAS workspaces, the backward's own temporaries beyond the input
gradient, several CUDA streams (FSDP's gathers are on their own stream, whose blocks the
default stream never reuses: load_cache.py keeps them apart), NCCL's buffers.

Checked against a real step: tests/test_step_replay.py records the allocations and frees of
a tiny Llama's real CPU training step (a TorchDispatchMode over every operator) and compares
its sizes, lifetimes and replayed reserve with this sequence's. No constant here was set
from a published figure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from gpuhours.estimate.adamw_temporaries import adamw_temporary_sets
from gpuhours.estimate.deepspeed_replay import (
    Zero3Layout,
    zero3_gradients,
    zero3_layout,
    zero3_replayed,
    zero3_setup,
    zero3_step,
)
from gpuhours.estimate.fragmentation import (
    ReplaySizes,
    replay_micro_batch,
    replay_sizes,
    step_tensor_bytes,
)
from gpuhours.estimate.load_cache import (
    fsdp_units,
    layer_linears,
    load_path_reserve_bytes,
    quant_state_bytes,
    wrap_units,
)
from gpuhours.estimate.lora import lm_head_adapter_params
from gpuhours.estimate.memory import (
    LOAD_PATH_TERM,
    LORA_ADAPTED,
    MemoryBreakdown,
    adapter_state_bytes,
    deepspeed_bucket_bytes,
    embedding_copy_params,
    embedding_copy_state_bytes,
    lora_trainable_params,
    training_memory,
)
from gpuhours.estimate.parallel import layout_of
from gpuhours.estimate.params import count_params
from gpuhours.setup import Training
from gpuhours.trace.allocator import Allocator, Block, OutOfMemory

#: training steps replayed: the first makes the optimizer state, the later ones run on it
STEPS_REPLAYED = 3
#: the name of the setup term that says where the reserve came from
STEP_REPLAY_TERM = "allocator_reserve (step replay)"


def replay_applies(t: Training, num_gpus: int, stack: str = "torch-cuda") -> str | None:
    """Why the step replay does not apply to this setup (the flat reserve is kept), or None.
    It models PyTorch's caching allocator (not XLA's), fixed lengths (variable lengths have
    their own replay, fragmentation.py), dense decoders whose layer it knows, one GPU's whole
    model (no tensor/pipeline/context/expert parallel layout) and state on the GPU (no CPU
    offload)."""
    if stack != "torch-cuda":
        return "not PyTorch's caching allocator"
    if t.seq_len_mean is not None:
        return "variable lengths: replayed over the run (fragmentation.py)"
    if not t.arch.plain_dense_decoder:
        return "not a dense decoder: the replay's layer is a dense decoder's"
    if not layout_of(t.tp, t.pp, t.cp, t.ep, t.virtual_stages, num_gpus, t.arch).trivial:
        return "a model-parallel layout is not replayed"
    if t.offload != "none" and not fsdp_params_offload(t):
        return "CPU offload other than FSDP1's CPUOffload(offload_params=True) is not replayed"
    return None


def fsdp_params_offload(t: Training) -> bool:
    """FSDP1's CPUOffload(offload_params=True): offload optimizer+params run by FSDP1 (FSDP2's
    offload, fully_shard's CPUOffloadPolicy, stages its copies differently: not replayed)."""
    return (t.offload == "optimizer+params" and t.zero_stage == 3 and t.zero3_engine == "fsdp"
            and t.fsdp_api == "fsdp1")


@dataclass(frozen=True)
class StepReplay:
    """The replay's peaks over the measured window, bytes."""

    reserved_bytes: int
    allocated_bytes: int
    #: reserved on FSDP's unshard stream (its own segments), in `reserved_bytes`
    unshard_stream_bytes: int
    steps: int
    #: a request did not fit in the capacity even with the cache emptied
    out_of_memory: bool = False
    #: the segment that request needed (0 when none failed)
    failed_segment_bytes: int = 0
    #: reserved on FSDP's pre-unshard stream (CPU offload's host-to-GPU shard copies, freed
    #: before the peak), in `reserved_bytes` only: no live tensor
    pre_unshard_stream_bytes: int = 0

    @property
    def reserve_bytes(self) -> int:
        """Reserved less allocated: what the allocator holds beyond the live tensors."""
        return max(self.reserved_bytes - self.allocated_bytes, 0)


def _resident(al: Allocator, t: Training, m: MemoryBreakdown) -> None:
    """The state loaded before the first step, per layer (module docstring)."""
    for total in (m.weights_bytes, m.master_weights_bytes, m.autocast_weight_copies_bytes,
                  float(deepspeed_bucket_bytes(t))):
        if total > 0:
            for b in step_tensor_bytes(t, total):
                al.malloc(b)


def _fsdp_load(al: Allocator, t: Training, num_gpus: int) -> int:
    """Answer.AI's loading and FSDP wrap (load_cache.py), then the gathers of a step on the
    unshard stream: a root and two layers (load_cache._step). Returns that stream's reserve."""
    world = num_gpus if t.zero_stage == 3 else 1
    for s in quant_state_bytes(t):
        al.malloc(s)
    units = fsdp_units(t)
    wrap_units(al, units, world)
    if world == 1:
        return 0
    root = next(sum(u.tensor_bytes) for u in units if u.name == "root")
    layer = next(sum(u.tensor_bytes) for u in units if u.name == "layer0")
    stream = Allocator()
    for size in (root, layer, layer):
        stream.malloc(size)
    return stream.reserved


def _fsdp_offload_load(al: Allocator, t: Training, num_gpus: int) -> tuple[int, int]:
    """FSDP1 with CPUOffload(offload_params=True): the GPU's resident state and the two side
    streams of a step. Returns (the unshard stream's reserve, the pre-unshard stream's).

    - resident: bitsandbytes' quantisation state of each 4-bit linear (QLoRA), which is no
      parameter and stays on the GPU (quant.bnb_quant_state_bytes); the flat parameters, the
      sharded gradients and AdamW's state are on the host;
    - the unshard stream: the gathered root unit and two gathered layers, as for the GPU-resident
      path (`_fsdp_load`);
    - the pre-unshard stream: FlatParamHandle.pre_unshard copies each unit's host shard to
      the GPU (`flat_param_to(self.device, non_blocking=True)`) under
      `stream(pre_unshard_stream)` (torch/distributed/fsdp/_runtime_utils.py `_unshard`;
      `_init_streams`: "Stream for pre-unshard logic, namely allocations and writes for CPU
      offloading (H2D copy)"), and the copy is freed once its all-gather has read it
      (`_all_gather_flat_param` records it on the unshard stream). Its blocks belong to that
      stream's segments, which no other stream reuses: the segments that two copies in flight
      take (the root's shard and a layer's: the rate limiter lets two gathers run ahead) stay
      reserved and hold no live tensor at the step's peak. Read in torch 2.13's FSDP1
      (_flat_param.py pre_unshard, _all_gather_flat_param; _init_utils.py moves each shard to
      the host after `shard()`), assumed the same in the torch 2.2 of the benchmarks.
    The wrap's own transients (each unit copied to the GPU, flattened, sharded, then moved to
    the host) are not replayed here: the from-pretrained path."""
    for s in quant_state_bytes(t):
        al.malloc(s)
    world = num_gpus if t.zero_stage == 3 else 1
    units = fsdp_units(t)
    root = next(sum(u.tensor_bytes) for u in units if u.name == "root")
    layer = next(sum(u.tensor_bytes) for u in units if u.name == "layer0")
    unshard, pre = Allocator(), Allocator()
    for size in (root, layer, layer):
        unshard.malloc(size)
    copies = [pre.malloc(-(-root // world)), pre.malloc(-(-layer // world))]
    pre.free(copies[0])
    pre.malloc(-(-layer // world))
    return unshard.reserved, pre.reserved


def micro_batch(al: Allocator, s: ReplaySizes, layers: int, checkpointing: bool,
                after_layer_backward: Callable[[int], None] | None = None) -> None:
    """One forward and backward in program order: fragmentation.replay_micro_batch's, with the
    checkpointed forward run as torch.no_grad runs it (torch/utils/checkpoint.py): each
    operator's output freed once the next has used it, the layer's tensors made and freed one
    at a time beside the layer's input, which is kept (the real tiny Llama's forward holds two
    or three small ones at once: tests/test_step_replay.py). In backward the recomputed layer
    keeps them all (the recompute runs with grad). `after_layer_backward` as there."""
    replay_micro_batch(al, s, layers, checkpointing, no_grad_forward=True,
                       after_layer_backward=after_layer_backward)


def trainable_numels(t: Training) -> tuple[list[int], list[list[int]]]:
    """The trainable parameters as torch holds them, elements: (those outside the layers,
    per layer the layer's), each a tensor of its own. Full fine-tuning: the token embedding, the
    untied LM head and the final norm, and per layer each linear (load_cache.layer_linears) and
    norm; LoRA: per layer each adapted linear's lora_A (rank x fan-in) and lora_B (fan-out x
    rank), and whatever else trains (an LM head adapter, embedding copies) as one tensor.
    Under ZeRO (DeepSpeed's flat partitions, FSDP's flat parameters) with full fine-tuning:
    one flat tensor per layer and one for the rest, as `fragmentation.step_tensor_bytes`.
    Biases are left out (a few thousand elements a layer)."""
    arch = t.arch
    c = count_params(arch)
    lin = layer_linears(arch)
    if t.method == "full":
        if t.zero_stage > 0:
            per_layer = c.attention_per_layer + c.mlp_per_layer + c.norms_per_layer
            return [c.total - per_layer * arch.num_layers], [[per_layer]] * arch.num_layers
        token_table = arch.vocab_size * arch.hidden_size if c.embedding else 0
        root = [p for p in (token_table, c.lm_head, c.final_norm) if p > 0]
        layer = [a * b for _, a, b in lin] + [arch.hidden_size] * arch.norms_per_block
        return root, [layer] * arch.num_layers
    tensors, adapters = _lora_tensors(t)
    return [n for n, _ in tensors], [adapters] * arch.num_layers


def _lora_tensors(t: Training) -> tuple[list[tuple[int, bool]], list[int]]:
    """LoRA's trainable tensors outside the layers as (elements, is an embedding copy), and
    one layer's adapters' elements (`trainable_numels`)."""
    arch = t.arch
    c = count_params(arch)
    r = t.lora_rank
    layer = [n for name, a, b in layer_linears(arch) if name in LORA_ADAPTED[t.lora_targets]
             for n in (r * a, r * b)]
    rest = lora_trainable_params(arch, t.lora_rank, t.lora_targets) - sum(layer) * arch.num_layers
    if t.lora_lm_head:
        rest += lm_head_adapter_params(arch, t.lora_rank)
    # peft's modules_to_save copies are modules of their own: the token embedding's first in
    # parameter order, the untied LM head's last
    copies = embedding_copy_params(c, t)
    token = min(arch.vocab_size * arch.hidden_size, c.embedding) if copies else 0
    head = c.lm_head if copies else 0
    rest += copies - token - head
    return [(n, copy) for n, copy in ((token, True), (rest, False), (head, True)) if n > 0], layer


StatePart = Literal["weights", "grads", "optimizer"]


def trainable_shares(t: Training, part: StatePart) -> tuple[list[float], list[list[float]]]:
    """Each trainable tensor's share of a state part (its gradient, its AdamW moments, its
    optimizer temporaries, which have the parameter's dtype: `weights`), in `trainable_numels`'
    order: its elements times that part's bytes per element for the tensor's kind. One dtype
    throughout (full fine-tuning; LoRA without embedding copies, or copies of the adapters'
    dtype): the elements. LoRA's embedding copies have the frozen weights' dtype
    (memory.embedding_copy_state_bytes: 2 bytes in bf16) and its adapters their own
    (memory.adapter_state_bytes: 4 for peft's fp32 adapters), so a gradient of the 151,936 x
    2,048 copy is 622 MB, not the all-parameter average per element."""
    root, per_layer = trainable_numels(t)
    copies = t.method != "full" and embedding_copy_params(count_params(t.arch), t) > 0
    if not copies:
        return [float(n) for n in root], [[float(n) for n in x] for x in per_layer]
    adapter = getattr(adapter_state_bytes(t), part)
    copy = getattr(embedding_copy_state_bytes(t), part)
    tensors, layer = _lora_tensors(t)
    return ([n * (copy if is_copy else adapter) for n, is_copy in tensors],
            [[n * adapter for n in layer]] * t.arch.num_layers)


def _bytes_of(shares: list[float], total_share: float, total_bytes: float) -> list[int]:
    return [round(total_bytes * n / total_share) for n in shares]


def run_steps(al: Allocator, t: Training, m: MemoryBreakdown, steps: int = STEPS_REPLAYED,
              on_phase: Callable[[int, str], None] | None = None,
              zero3: Zero3Layout | None = None) -> None:
    """`steps` training steps through `al` after the resident state (module docstring).
    `on_phase(step, phase)`, when given, is told where each phase begins ("forward": the
    micro-batches, forward and backward; "optimizer"; "zero_grad"), as a traced step's log is.
    `zero3`: DeepSpeed ZeRO-3's layout, whose steps are its own (estimate/deepspeed_replay.py)."""

    def begin(step: int, phase: str) -> None:
        if on_phase is not None:
            on_phase(step, phase)

    layers = t.arch.num_layers
    if zero3 is not None:
        _run_zero3_steps(al, t, zero3, steps, begin, every_step=on_phase is not None)
        return
    root, per_layer = trainable_numels(t)
    if sum(root) + sum(sum(x) for x in per_layer) <= 0:
        return

    def sized(total_bytes: float, part: StatePart) -> tuple[list[int], list[list[int]]]:
        if total_bytes <= 0:
            return [], [[] for _ in range(layers)]
        shares, layer_shares = trainable_shares(t, part)
        total = sum(shares) + sum(sum(x) for x in layer_shares)
        return (_bytes_of(shares, total, total_bytes),
                [_bytes_of(x, total, total_bytes) for x in layer_shares])

    root_grads, layer_grads = sized(m.gradients_bytes, "grads")
    # torch's AdamW: two moments per parameter, each half the optimizer state
    root_moments, layer_moments = sized(m.optimizer_bytes / 2, "optimizer")
    # torch's foreach AdamW: each set of temporaries is a list of parameter-shaped tensors,
    # made set after set (estimate/adamw_temporaries.py)
    temp_sets = max(adamw_temporary_sets(t.optimizer, t.optimizer_impl), 1)
    root_temps, layer_temps = sized(m.optimizer_temporaries_bytes / temp_sets, "weights")
    # in parameter order: the embedding, the layers, then the final norm and the head
    moments = root_moments[:1] + [b for x in layer_moments for b in x] + root_moments[1:]
    temps = root_temps[:1] + [b for x in layer_temps for b in x] + root_temps[1:]
    sizes = replay_sizes(t, t.seq_len)
    made: list[Block] = []

    def make_grad(i: int) -> None:
        # the LM head's (and the final norm's) at the loss's backward (i == layers), a layer's
        # after its backward, the embedding's last (i == -1)
        if i == layers:
            made.extend(al.malloc(b) for b in root_grads[1:])
        elif i >= 0:
            made.extend(al.malloc(b) for b in layer_grads[i])
        else:
            made.extend(al.malloc(b) for b in root_grads[:1])

    layout_before: tuple[object, ...] | None = None
    for step in range(steps):
        if step >= 1 and on_phase is None:
            # steps after the first make the same requests (the moments are made once); a
            # step that began with the allocator's layout the step before began with repeats
            # that step exactly (Allocator.free_layout: the resident state and the moments
            # stay allocated), ends with the layout it began with and leaves the peaks as they
            # are, and so do all the steps after it: they are not run again
            layout = al.free_layout()
            if layout == layout_before:
                break
            layout_before = layout
        begin(step, "forward")
        for micro in range(min(t.grad_accum, 2)):
            hook = make_grad if micro == 0 and m.gradients_bytes > 0 else None
            micro_batch(al, sizes, layers, t.checkpointing, hook)
        begin(step, "optimizer")
        if step == 0:  # AdamW's lazy state: exp_avg and exp_avg_sq per parameter, in order
            for size in moments:
                al.malloc(size)
                al.malloc(size)
        for block in [al.malloc(x) for _ in range(temp_sets) for x in temps]:
            al.free(block)
        begin(step, "zero_grad")
        for block in made:  # zero_grad(set_to_none=True)
            al.free(block)
        made.clear()


def _run_zero3_steps(al: Allocator, t: Training, z: Zero3Layout, steps: int,
                     begin: Callable[[int, str], None], every_step: bool) -> None:
    """DeepSpeed ZeRO-3's steps (estimate/deepspeed_replay.py): the micro-batches with each
    gradient a transient copied into the flat partition, then its sub-group step; its state
    was made at set-up and the gradients stay in their flat buffer (no zero_grad frees)."""
    sizes = replay_sizes(t, t.seq_len)
    layout_before: tuple[object, ...] | None = None
    for step in range(steps):
        if step >= 1 and not every_step:  # a step that begins as the one before repeats it
            layout = al.free_layout()
            if layout == layout_before:
                break
            layout_before = layout
        begin(step, "forward")
        for _ in range(min(t.grad_accum, 2)):
            micro_batch(al, sizes, t.arch.num_layers, t.checkpointing,
                        lambda i: zero3_gradients(al, z, i))
        begin(step, "optimizer")
        zero3_step(al, z)


def replay_step(t: Training, m: MemoryBreakdown, num_gpus: int,
                steps: int = STEPS_REPLAYED, capacity_bytes: float | None = None) -> StepReplay:
    """The resident state (or the FSDP load path), then `steps` steps: the peaks over what
    the source measures (module docstring). `m`: training_memory of the same setup.
    `capacity_bytes`: what cudaMalloc can hand out (the card's memory less the CUDA context;
    None: unbounded). With it, a new segment that does not fit first makes the allocator free
    its wholly free cached segments (trace/allocator.py, release_cached_blocks), so a run near
    the card's memory reserves less than the same run on a larger card; a request that still
    does not fit is out of memory."""
    al = Allocator(capacity_bytes)
    stream = pre = 0
    zero3: Zero3Layout | None = None
    try:
        if t.load_path == "fsdp-flatten":
            stream = _fsdp_load(al, t, num_gpus)
            if capacity_bytes is not None:  # the unshard stream's segments are held too
                al.capacity_bytes = capacity_bytes - stream
            al.peak_reserved, al.peak_allocated = al.reserved, al.allocated  # reset_peak_...
        elif fsdp_params_offload(t):
            stream, pre = _fsdp_offload_load(al, t, num_gpus)
            if capacity_bytes is not None:  # both side streams' segments are held too
                al.capacity_bytes = capacity_bytes - stream - pre
        elif zero3_replayed(t):
            zero3 = zero3_layout(t, m, num_gpus)
            zero3_setup(al, zero3)
        else:
            _resident(al, t, m)
        run_steps(al, t, m, steps, zero3=zero3)
    except OutOfMemory as e:
        return StepReplay(reserved_bytes=al.peak_reserved + stream + pre,
                          allocated_bytes=al.peak_allocated + stream,
                          unshard_stream_bytes=stream, steps=steps, out_of_memory=True,
                          failed_segment_bytes=e.segment_bytes, pre_unshard_stream_bytes=pre)
    return StepReplay(reserved_bytes=al.peak_reserved + stream + pre,
                      allocated_bytes=al.peak_allocated + stream,
                      unshard_stream_bytes=stream, steps=steps, pre_unshard_stream_bytes=pre)


#: replays already run in this process, by setup, breakdown, GPUs and capacity: the chooser
#: reaches the same candidate from several searches, and a replay is the dearest part of one
_REPLAYS: dict[tuple[str, MemoryBreakdown, int, float | None], StepReplay] = {}
_REPLAYS_KEPT = 4096


def _replayed(t: Training, m: MemoryBreakdown, num_gpus: int,
              capacity_bytes: float | None) -> StepReplay:
    """replay_step of STEPS_REPLAYED steps, kept (a pure function of its arguments)."""
    key = (repr(t), m, num_gpus, capacity_bytes)
    r = _REPLAYS.get(key)
    if r is None:
        if len(_REPLAYS) >= _REPLAYS_KEPT:
            _REPLAYS.clear()
        r = _REPLAYS[key] = replay_step(t, m, num_gpus, capacity_bytes=capacity_bytes)
    return r


def reserved_training_memory(t: Training, num_gpus: int = 1, stack: str = "torch-cuda",
                             gpu_memory_bytes: float | None = None) -> MemoryBreakdown:
    """training_memory with the allocator reserve from the step replay where it applies
    (`replay_applies`), else with the flat reserve and the load path's replay (load_cache.py)
    as before. The setup terms say which. `gpu_memory_bytes`: the card's memory, whose part
    the CUDA context leaves is the replay's capacity (`replay_step`); None: unbounded.
    Where the replay runs out of memory with live tensors that fit (its cached segments split
    so that a request finds no room even after the cache is emptied) the reserve is what the
    card has left beside the live tensors, as for variable lengths (fragmentation.py): the
    total is the card's memory, and whether such a run fails is not modelled (the basis
    says so)."""
    why_not = replay_applies(t, num_gpus, stack)
    if why_not is not None:
        return training_memory(t.arch, t, num_gpus, load_path_reserve_bytes(t, num_gpus), stack)
    m = training_memory(t.arch, t, num_gpus, 0.0, stack)
    cap = None if gpu_memory_bytes is None else gpu_memory_bytes - m.cuda_context_bytes
    r = _replayed(t, m, num_gpus, cap)
    load = " after FSDP's wrap (load_cache.py)" if t.load_path == "fsdp-flatten" else ""
    reserve = float(r.reserve_bytes)
    where = ("; bounded by the card's memory less the CUDA context" if cap is not None
             else "")
    if r.out_of_memory and cap is not None:
        reserve = max(cap - m.tensors_bytes, 0.0)
        where = ("; the replay ran out of the card's memory less the CUDA context (a segment "
                 "found no room after the cache was emptied): the reserve is what the card "
                 "leaves beside the live tensors, and whether the run fails is not modelled")
    term = (f"{STEP_REPLAY_TERM} = {reserve / 2**30:.2f} GiB: reserved less allocated "
            f"of {r.steps} training steps{load} replayed through the caching allocator's rules "
            f"(estimate/step_replay.py, a model: not measured), in place of the flat "
            f"allocator_reserve_fraction{where}")
    return dataclasses.replace(m, allocator_reserve_bytes=reserve,
                               setup_terms=tuple(x for x in m.setup_terms
                                                 if not x.startswith(LOAD_PATH_TERM)) + (term,))
