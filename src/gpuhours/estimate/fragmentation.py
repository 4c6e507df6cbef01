"""Reserved memory over a run of variable-length micro-batches: the caching allocator replayed.

With samples of different lengths each micro-batch asks the allocator for tensors of other
sizes. PyTorch's caching allocator keeps every freed block and reuses one only when it is at
least as large as the request (best fit); a longer micro-batch than any before finds no cached
block and takes a new segment from cudaMalloc, and the cache is emptied only when cudaMalloc
would fail (trace/allocator.py, from c10/cuda/CUDACachingAllocator.cpp; its Note [Expandable
Segments] describes this pattern). So `torch.cuda.max_memory_reserved` grows past the peak of
live tensors while the card has room, and stays near the card's memory when it has none.

The model here (no torch): the tensors of each micro-batch as the analytic memory model counts
them (estimate/memory.py), for that micro-batch's tokens, allocated and freed in program order
and replayed through `trace.allocator.Allocator` with the card's memory as its capacity:

- state that lives through the run (weights, optimizer state, master weights, gradients kept
  across accumulation, autocast copies, ZeRO-3 working set, DeepSpeed buckets): allocated once,
  in one tensor per layer;
- forward, layer by layer: with checkpointing each layer's input is kept (tokens x hidden x
  the residual stream's bytes) and the layer's own tensors (`layer_tensor_widths`) are made and
  freed; without it the layer's tensors are kept;
- the loss working set (for transformers' loss, the tensors of `memory.logits_bytes` and
  `memory.loss_backward_bytes` one by one: the logits, their fp32 upcast, log-softmax's output;
  its gradient and the input gradient; the gradient cast back to the logits' dtype), and
  autocast's copy of a head stored in the other half dtype from the head's forward to its
  backward (head_weight_cast);
- a GPTQ base on auto-gptq's torch path: each linear unpacked at its matmul (`dequant_linear`:
  int32 and int8 copies, then the fp16 weight), the fp16 weights freed after their matmuls in
  checkpointing's no-grad pass and kept with the layer's tensors where the forward records;
- backward, last layer first: the recomputed layer (checkpointing), the gradient of the
  layer's input (tokens x hidden x activation bytes) replacing the one before, the layer's
  tensors and input freed;
- every `grad_accum` micro-batches the optimizer step: gradients (when not kept across
  accumulation) and the foreach temporaries, one tensor per layer each, made and freed.

Lengths are drawn from `LengthDistribution` (a log-normal matched to the dataset's mean and
spread; deterministic seed); a micro-batch of b samples is padded to its longest (the HF data
collators' padding=longest). The reserved figure is the replay's peak, plus the flat reserve
of assumptions.ALLOCATOR_RESERVE_FRACTION for what the replay does not see (the many small
tensors of a real step, rounded to 512 bytes and 2 MiB segments, and workspaces): the two are
different mechanisms, added. Not modelled: the shapes inside attention kernels and the
backward's own temporaries beyond the input gradient, several CUDA streams, the allocated peak
itself (taken at the longest micro-batch, `seq_len`, as for fixed lengths), zero_grad's
set_to_none (the gradients kept across accumulation are freed at each step and made again in
the next backward; here they stay).

What sets the reserve (issue 14; tests/test_fragmentation_records.py): a micro-batch longer
than every one before (a record) finds no cached block for its vocabulary-wide loss tensors and
takes a new segment for each that is live at once (three for transformers' loss on half
logits: log-softmax's fp32 output, its gradient and the input's gradient), unless it is longer
by less than a 2 MiB segment's rounding; the segments of earlier records stay cached. The
count of records is that of the order of the samples (about ln(micro-batches) + 0.58 for a
random order), so the reserve depends on the order: the replay draws one (`seed`), and
scripts/gpuhours_dev/validation/swift_orders.py shows the spread over others. The optimizer
step's per-parameter temporaries free blocks of the token embedding's and LM head's size in
full fine-tuning (`step_tensor_bytes`), which later loss tensors up to that size reuse.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from gpuhours.estimate import assumptions as A
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.lengths import SEED, LengthDistribution
from gpuhours.estimate.memory import (
    ACTIVATION_BYTES,
    LORA_ADAPTED,
    MemoryBreakdown,
    activation_bytes,
    deepspeed_bucket_bytes,
    gptq_layer_weights_in_order,
    gptq_saved_weight_bytes_per_layer,
    head_weight_cast_bytes,
    held_logits_bytes,
    kbit_upcast_active,
    logits_bytes,
    loss_backward_bytes,
    residual_bytes,
)
from gpuhours.estimate.params import count_params
from gpuhours.estimate.unsloth import outside_bytes_per_token
from gpuhours.setup import Training, loss_kernel_of
from gpuhours.trace.allocator import Allocator, Block, OutOfMemory

#: micro-batches replayed when the run's length is not given (`estimate` without --steps,
#: --tokens, --examples or --epochs): the assumption A.REPLAY_MICRO_BATCHES; the replay's
#: basis says how many were replayed
REPLAY_MICRO_BATCHES = int(A.REPLAY_MICRO_BATCHES.value)
#: the most layer passes (micro-batches x layers) `estimate` replays: the replay's time goes
#: with them (about 1.2 s per 8192 on one core of a 2-core CPU VM: 458k allocator calls took
#: 35 s for an 80-layer model over 2000 micro-batches). A bound on time, not on accuracy: the
#: reserve grows fast over the first micro-batches and slowly after, and the basis says where
#: the replay stopped
MAX_REPLAY_LAYER_PASSES = 16384


def replay_micro_batches(layers: int, run_micro_batches: int | None) -> int:
    """Micro-batches `estimate` replays: the run's (per GPU) when its length is given, else the
    assumed REPLAY_MICRO_BATCHES, at most MAX_REPLAY_LAYER_PASSES // layers (at least 1)."""
    run = run_micro_batches if run_micro_batches is not None else REPLAY_MICRO_BATCHES
    return max(1, min(run, MAX_REPLAY_LAYER_PASSES // max(layers, 1)))


def distribution_of(t: Training) -> LengthDistribution | None:
    """The setup's length distribution; None when every sample is `seq_len` tokens long."""
    if t.seq_len_mean is None:
        return None
    return LengthDistribution(t.seq_len_mean, t.seq_len_std, t.seq_len, t.long_samples)


def layer_tensor_widths(arch: ModelArch, per_token_layer_bytes: float, a: int) -> list[float]:
    """The per-token bytes of each tensor a layer keeps for backward, summing to
    `per_token_layer_bytes` (the analytic count): the MLP's inner tensors first (gate and up
    outputs and the activation's output, f x a each for a gated MLP; one for a plain one), then
    d x 4 tensors (the fp32 copies of the norms and LoRA adapters' inputs), then what is left.
    A split by the layer's real widths, not each tensor of the module: an assumption."""
    f = arch.moe_intermediate_size if arch.is_moe else arch.intermediate_size
    left = per_token_layer_bytes
    out: list[float] = []
    for _ in range(3 if arch.gated_mlp else 1):
        if left >= f * a:
            out.append(float(f * a))
            left -= f * a
    d4 = 4.0 * arch.hidden_size
    while left >= d4:
        out.append(d4)
        left -= d4
    if left > 0:
        out.append(left)
    return out


def step_tensor_bytes(t: Training, total_bytes: float) -> list[int]:
    """The tensors, bytes, of a set of `total_bytes` made per parameter at the optimizer step
    (the gradients when not kept across accumulation, the foreach temporaries). torch's default
    AdamW (torch/optim/adamw.py, _multi_tensor_adamw) runs `torch._foreach_*` over the list of
    parameters: each temporary has its parameter's shape. For full fine-tuning without ZeRO
    the token embedding and the untied LM head are tensors of their own (vocabulary x hidden, the
    largest blocks the step frees: a later vocabulary-wide loss tensor of up to that size
    fits in them), the rest one tensor per layer (a layer's parameters together: an
    assumption). Otherwise (adapters: tiny; ZeRO: DeepSpeed's flat partitions) one tensor per
    layer plus one, as the state is allocated."""
    arch = t.arch
    chunks = arch.num_layers + 1
    if t.method != "full" or t.zero_stage > 0:
        return [int(total_bytes / chunks)] * chunks
    c = count_params(arch)
    token_table = arch.vocab_size * arch.hidden_size if c.embedding else 0
    vocab_parts = [p for p in (token_table, c.lm_head) if p > 0]
    rest = c.total - sum(vocab_parts)
    per_param = total_bytes / c.total
    out = [round(per_param * p) for p in vocab_parts]
    return out + [round(per_param * rest / arch.num_layers)] * arch.num_layers


@dataclass(frozen=True)
class ReplaySizes:
    """Tensor sizes of one micro-batch, bytes."""

    layer_input: int  # kept per layer under checkpointing
    layer: tuple[int, ...]  # the layer's tensors
    outside: int  # final norm's input, the LM head's input
    #: the loss's forward tensors, in order
    loss_fwd: tuple[int, ...]
    #: at the loss's backward: how many of the first forward tensors are freed before the
    #: backward tensors are made; the rest are freed after them
    loss_freed_first: int
    loss_bwd: tuple[int, ...]
    head: int  # the logits' gradient in the logits dtype
    held: int
    grad: int  # the gradient flowing from layer to layer
    #: the loss's allocations and frees in program order, where the forward/backward lists
    #: above cannot say it (half-amp, half): a positive entry allocates that many bytes, -k frees
    #: the k-th block the program allocated (1-based); the blocks left at its end are freed
    #: with `head`. Empty: the lists above
    loss_program: tuple[int, ...] = ()
    #: autocast's copy of an LM head stored in the other half dtype (head_weight_cast), made
    #: at the head's forward and freed after its backward; 0: none
    head_cast: int = 0
    #: a GPTQ base on auto-gptq's torch path: the weights (in x out) of the layer's linears in
    #: program order (memory.gptq_layer_weights_in_order), each unpacked at its matmul
    #: (`dequant_linear`); empty: none
    gptq_weights: tuple[int, ...] = ()


def replay_sizes(t: Training, tokens_per_seq: int) -> ReplaySizes:
    arch = t.arch
    tl = t.model_copy(update={"seq_len": tokens_per_seq})
    n = tl.tokens_per_micro_batch
    a = ACTIVATION_BYTES[t.precision]
    act = activation_bytes(arch, tl)
    widths = layer_tensor_widths(arch, act.per_token_per_layer, a)
    res = 4 if kbit_upcast_active(t) else residual_bytes(t.precision)
    head_trains = t.method == "full" or t.lora_trainable_embeddings
    v = arch.vocab_size
    fwd: tuple[int, ...]
    bwd: tuple[int, ...]
    kernel = loss_kernel_of(t)
    program: tuple[int, ...] = ()
    if kernel == "half-amp":
        fwd, freed_first, bwd = (), 0, ()
        program = half_amp_loss_program(n, t.micro_batch, v, a)
    elif kernel == "half":
        fwd, freed_first, bwd = (), 0, ()
        program = half_loss_program(n, t.micro_batch, v, a)
    elif kernel == "hf" and a < 4:
        # logits (a), the fp32 upcast (4), log-softmax's fp32 output (4); backward frees the
        # first two and makes the fp32 gradient of the output and of its input (4 + 4)
        fwd, freed_first, bwd = (n * v * a, n * v * 4, n * v * 4), 2, (n * v * 4, n * v * 4)
    elif kernel == "verl-logprobs":
        # the logits live from the head through their in-place gradient (held below); the
        # temperature's backward makes the new gradient (head) beside them
        fwd, freed_first, bwd = (n * 12,), 1, (n * 8,)
    else:  # the kernel's working sets as one tensor each (memory.py)
        fwd, freed_first = (int(logits_bytes(arch, tl)),), 1
        bwd = (int(loss_backward_bytes(arch, tl)),)
    return ReplaySizes(
        # offloaded checkpoints (estimate/unsloth.py) wait on the host, not in the allocator
        layer_input=0 if t.checkpoint_offload else n * arch.hidden_size * res,
        layer=tuple(int(n * w) for w in widths),
        outside=(n * arch.hidden_size * (4 + (a if head_trains else 0)) if t.kernels != "unsloth"
                 else round(n * outside_bytes_per_token(arch, LORA_ADAPTED[t.lora_targets],
                                                        a, t.lora_dropout))),
        loss_fwd=tuple(int(x) for x in fwd),
        loss_freed_first=freed_first,
        loss_bwd=tuple(int(x) for x in bwd),
        head=n * v * a if kernel in ("hf", "verl-logprobs", "megatron", "te") else 0,
        held=n * v * a if kernel == "verl-logprobs" else int(held_logits_bytes(arch, tl)),
        grad=n * arch.hidden_size * a,
        loss_program=program,
        head_cast=int(head_weight_cast_bytes(arch, t)),
        gptq_weights=(tuple(gptq_layer_weights_in_order(arch))
                      if gptq_saved_weight_bytes_per_layer(arch, tl) else ()),
    )


def dequant_linear(al: Allocator, weights: int) -> Block:
    """auto-gptq's torch path unpacking one 4-bit linear of `weights` (in x out) in its order
    (qlinear_cuda_old.py, AutoGPTQ v0.4.2; quant.GPTQ_DEQUANT_STEPS): the int32 shift result
    (4 bytes a weight) and its int8 cast (1), the int32 freed; `weight - zeros` (int8, 1) and
    the fp16 product (2), then the difference and the int8 weight freed. Returns the fp16
    weight's block, which the matmul keeps for backward under grad (the caller frees it)."""
    wide = al.malloc(4 * weights)
    narrow = al.malloc(weights)
    al.free(wide)
    diff = al.malloc(weights)
    half = al.malloc(2 * weights)
    al.free(diff)
    al.free(narrow)
    return half


class _Program:
    """A loss program being written: allocations by name, frees by name (ReplaySizes.
    loss_program's encoding)."""

    def __init__(self) -> None:
        self.ops: list[int] = []
        self._made: list[str] = []

    def malloc(self, name: str, size: int) -> None:
        self.ops.append(size)
        self._made.append(name)

    def free(self, name: str) -> None:
        self.ops.append(-(self._made.index(name) + 1))


def half_loss_program(tokens: int, micro_batch: int, vocab: int, a: int) -> tuple[int, ...]:
    """The half loss's allocations and frees in program order (ReplaySizes.loss_program): a
    model's own CrossEntropyLoss on its half-precision logits with no autocast (Qwen-1's
    modeling_qwen.py under DeepSpeed's bf16/fp16 engine). N = `tokens`, N' = N less one
    position per sequence, V = `vocab`, a = the half dtype's bytes. Forward: the head's logits
    A (N V a); at micro-batch > 1 the contiguous copy of the shifted logits B (N' V a; at 1 the
    slice is contiguous already and `.contiguous()` returns it); log-softmax's output C (N' V a,
    saved; log_softmax saves its output, not its input); B freed as the model's forward returns,
    A when compute_loss returns the loss alone. Backward: nll_loss's zero-filled input gradient
    D (N' V a); log-softmax's input gradient E (N' V a), then D and C freed (the node's saved
    output goes once it has run); the slice's zero-filled gradient F (N V a), E freed; F is
    the LM head's incoming gradient (freed with `head`). Its peaks are memory.py's
    `logits_bytes` and `loss_backward_bytes` (C + D + E), checked on real CPU tensors in
    tests/test_half_loss.py."""
    full, shifted = tokens * vocab, (tokens - micro_batch) * vocab
    p = _Program()
    p.malloc("A", full * a)
    if micro_batch > 1:
        p.malloc("B", shifted * a)
    p.malloc("C", shifted * a)
    if micro_batch > 1:
        p.free("B")
    p.free("A")
    p.malloc("D", shifted * a)
    p.malloc("E", shifted * a)
    p.free("D")
    p.free("C")
    p.malloc("F", full * a)
    p.free("E")
    return tuple(p.ops)


def half_amp_loss_program(tokens: int, micro_batch: int, vocab: int, a: int
                          ) -> tuple[int, ...]:
    """The half-amp loss's allocations and frees in program order (ReplaySizes.loss_program;
    memory.py `logits_bytes` says where each comes from). N = `tokens`, N' = N less one
    position per sequence (the shifted logits), V = `vocab`, a = the half dtype's bytes:
    forward: the head's logits A (N V a); at micro-batch > 1 the contiguous copy of the
    shifted logits B (N' V a; at 1 the slice is already contiguous); log-softmax's half output
    C (N' V a, saved); nll_loss's fp32 cast D (N' V 4, saved); B freed as the model's forward
    returns; accelerate's fp32 copy E (N V 4), then A dropped; E dropped when compute_loss
    returns. Backward: nll_loss's fp32 input gradient F (N' V 4), D freed; its cast to half G
    (N' V a), F freed; log-softmax's input gradient H (N' V a), G and C freed; the slice's
    zero-filled gradient I (N V a), H freed; I is the LM head's incoming gradient (freed with
    `head`)."""
    full, shifted = tokens * vocab, (tokens - micro_batch) * vocab
    p = _Program()
    p.malloc("A", full * a)
    if micro_batch > 1:
        p.malloc("B", shifted * a)
    p.malloc("C", shifted * a)
    p.malloc("D", shifted * 4)
    if micro_batch > 1:
        p.free("B")
    p.malloc("E", full * 4)
    p.free("A")
    p.free("E")
    p.malloc("F", shifted * 4)
    p.free("D")
    p.malloc("G", shifted * a)
    p.free("F")
    p.malloc("H", shifted * a)
    p.free("G")
    p.free("C")
    p.malloc("I", full * a)
    p.free("H")
    return tuple(p.ops)


def replay_micro_batch(al: Allocator, s: ReplaySizes, layers: int, checkpointing: bool,
                       no_grad_forward: bool = False,
                       after_layer_backward: Callable[[int], None] | None = None) -> None:
    """One forward and backward through the allocator, in program order. The checkpointed
    forward's tensors of a layer are made together and freed together, or with
    `no_grad_forward` one at a time (torch.no_grad frees each operator's output once the next
    has used it: estimate/step_replay.py). `after_layer_backward(i)` runs where autograd makes
    gradients: with i = layers once the loss's backward has made the hidden states' gradient
    (the LM head's), with i after layer i's backward, with -1 at the end (the embedding's)."""
    def made(i: int) -> None:
        if after_layer_backward is not None:
            after_layer_backward(i)

    inputs, kept = [], []
    for _ in range(layers):
        if checkpointing:
            inputs.append(al.malloc(s.layer_input))
            for w in s.gptq_weights:  # no grad: each fp16 weight freed after its matmul
                al.free(dequant_linear(al, w))
            if no_grad_forward:
                for x in s.layer:
                    al.malloc_and_free(x)
            else:
                for b in [al.malloc(x) for x in s.layer]:
                    al.free(b)
        else:
            weights = [dequant_linear(al, w) for w in s.gptq_weights]
            kept.append(weights + [al.malloc(x) for x in s.layer])
    outside = al.malloc(s.outside)
    held = [al.malloc(s.held)] if s.held else []
    cast = [al.malloc(s.head_cast)] if s.head_cast else []
    if s.loss_program:
        blocks: list[Block | None] = []
        for op in s.loss_program:
            if op > 0:
                blocks.append(al.malloc(op))
            else:
                block = blocks[-op - 1]
                if block is not None:
                    al.free(block)
                blocks[-op - 1] = None
        head = [b for b in blocks if b is not None]
    else:
        fwd = [al.malloc(x) for x in s.loss_fwd if x]
        for b in fwd[:s.loss_freed_first]:
            al.free(b)
        bwd = [al.malloc(x) for x in s.loss_bwd if x]
        # the forward's rest and all but the last backward tensor go; the last (the logits'
        # input gradient) stays until its cast to the logits dtype, for the LM head, is made
        for b in fwd[s.loss_freed_first:] + bwd[:-1]:
            al.free(b)
        head = [al.malloc(s.head)] if s.head else []
        for b in bwd[-1:]:
            al.free(b)
    grad = al.malloc(s.grad)
    made(layers)
    for b in head + held + cast:
        al.free(b)
    for i in reversed(range(layers)):
        layer = ([dequant_linear(al, w) for w in s.gptq_weights] + [al.malloc(x) for x in s.layer]
                 if checkpointing else kept[i])
        g = al.malloc(s.grad)
        al.free(grad)
        grad = g
        for b in layer:
            al.free(b)
        if checkpointing:
            al.free(inputs[i])
        made(i)
    al.free(grad)
    made(-1)
    al.free(outside)


@dataclass(frozen=True)
class VarlenReserve:
    """The replay's outcome, bytes: reserved peak (capped by the card), allocated peak, and
    whether a request did not fit even with the cache emptied."""

    reserved_bytes: float
    allocated_bytes: float
    #: the reserve to add to the analytic live-tensor peak: reserved - allocated of the replay
    #: plus the flat reserve (module docstring)
    reserve_bytes: float
    micro_batches: int
    mean_tokens: float
    longest_tokens: int
    releases: int
    out_of_memory: bool
    basis: str


def varlen_reserve(t: Training, m: MemoryBreakdown, capacity_bytes: float | None,
                   micro_batches: int = REPLAY_MICRO_BATCHES, seed: int = SEED,
                   run_micro_batches: int | None = None) -> VarlenReserve:
    """Replay `micro_batches` micro-batches of lengths drawn from the setup's distribution
    (`distribution_of`) through the allocator with `capacity_bytes` (the card's memory less
    the CUDA context; None: unbounded). `m` is the analytic memory of the setup at its
    longest length (training_memory), whose state terms are the replay's static part.
    `run_micro_batches`: the run's own count, when the replay stopped short of it (said in the
    basis)."""
    dist = distribution_of(t)
    if dist is None:
        raise ValueError("a setup with fixed lengths has no variable-length replay")
    arch = t.arch
    rng = random.Random(seed)
    draws = dist.sample(micro_batches * t.micro_batch, seed=rng.randrange(2**31))
    # each micro-batch padded to its longest sample
    lengths = [max(draws[i * t.micro_batch:(i + 1) * t.micro_batch])
               for i in range(micro_batches)]
    al = Allocator(capacity_bytes)
    persisting = m.gradients_bytes if t.grad_accum > 1 else 0.0
    static = (m.weights_bytes + m.master_weights_bytes + m.optimizer_bytes + persisting
              + m.autocast_weight_copies_bytes + m.gathered_bytes + deepspeed_bucket_bytes(t))
    chunks = arch.num_layers + 1
    oom = False
    step_tensors = [b for x in ((m.gradients_bytes - persisting), m.optimizer_temporaries_bytes)
                    if x > 0 for b in step_tensor_bytes(t, x)]
    try:
        for _ in range(chunks):
            al.malloc(int(static / chunks))
        sizes: dict[int, ReplaySizes] = {}
        for i, length in enumerate(lengths):
            if length not in sizes:
                sizes[length] = replay_sizes(t, length)
            replay_micro_batch(al, sizes[length], arch.num_layers, t.checkpointing)
            if (i + 1) % t.grad_accum == 0 and step_tensors:
                made = [al.malloc(x) for x in step_tensors]
                for b in made:
                    al.free(b)
    except OutOfMemory:
        oom = True
    flat = m.tensors_bytes * A.ALLOCATOR_RESERVE_FRACTION.value
    excess = max(al.peak_reserved - al.peak_allocated, 0)
    reserve = excess + flat
    if capacity_bytes is not None:
        reserve = min(reserve, max(capacity_bytes - m.tensors_bytes, flat))
    mean = sum(lengths) / len(lengths)
    shape = (f"every sample {dist.sample(1)[0]} tokens" if dist.std <= 0 else
             f"log-normal, mean {dist.mean:g} +- {dist.std:g} tokens, longer than {dist.max_len}"
             f" {'dropped' if dist.long_samples == 'drop' else 'truncated'}")
    stopped = (f" (the run's {run_micro_batches}: the replay stopped at {micro_batches}, "
               f"at most {MAX_REPLAY_LAYER_PASSES} micro-batches x layers; a longer run can "
               f"reserve more)" if run_micro_batches is not None
               and run_micro_batches > micro_batches else "")
    basis = (f"allocator replay over {micro_batches} sampled micro-batches{stopped} ({shape}; "
             f"drawn: "
             f"mean {mean:.0f}, longest {max(lengths)} tokens; seed {seed}: one order of the "
             f"samples; each micro-batch longer than all before takes new segments, so another "
             f"order can read differently): reserved - "
             f"allocated of the replay {excess / 2**30:.2f} GiB + the flat "
             f"{A.ALLOCATOR_RESERVE_FRACTION.value:.0%} of tensors "
             f"({A.ALLOCATOR_RESERVE_FRACTION.name})"
             + (f"; capped by the card's memory (the cache emptied {al.releases} time(s))"
                if al.releases else "")
             + ("; a request did not fit even with the cache emptied (fragmentation OOM)"
                if oom else "")
             + " (estimate/fragmentation.py)")
    return VarlenReserve(reserved_bytes=al.peak_reserved, allocated_bytes=al.peak_allocated,
                         reserve_bytes=reserve, micro_batches=micro_batches, mean_tokens=mean,
                         longest_tokens=max(lengths), releases=al.releases, out_of_memory=oom,
                         basis=basis)
