"""Parallel layouts per GPU: tensor (with sequence), pipeline, context and expert parallelism
combined with data parallelism and ZeRO.

A layout splits `num_gpus` into tp x cp x dp x pp (Megatron-LM's rank order, tensor innermost,
pipeline outermost): dp = num_gpus / (tp pp cp). Experts are split by ep over the tp x cp x dp
ranks of a pipeline stage (expert tensor parallelism 1, as Megatron-Core's MoE recipes run).

Sources:
- Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
  Megatron-LM" (PTD-P): the 1F1B pipeline bubble (p - 1) / m of the ideal time, divided by v for
  the interleaved schedule (sec. 2.2); two all-reduces of the b s h activations per layer in the
  forward pass and two in backward for tensor parallelism (sec. 2.3, 3.2); point-to-point sends
  of b s h between stages, split over the tensor-parallel ranks by the scatter/gather
  optimisation (sec. 4.1).
- Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models":
  sequence parallelism replaces each all-reduce by a reduce-scatter and an all-gather of the same
  volume and divides every activation by t (sec. 4.2.2); the first pipeline stage holds p
  micro-batches of L/p layers, times (1 + (p - 1)/(p v)) for the interleaved schedule (sec. 4.2.3).
- Liu et al. 2023, "Ring Attention with Blockwise Transformers": each rank passes its K and V
  chunk around the ring of cp ranks, overlapped with the block computation.
- Lepikhin et al. 2020 (GShard) / Megatron-Core MoE: two all-to-alls per MoE layer forward
  (dispatch, combine) and two in backward.
- Megatron-Core's uneven pipeline split (`--decoder-first-pipeline-num-layers`,
  `--decoder-last-pipeline-num-layers`, `--account-for-embedding-in-pipeline-split`,
  `--account-for-loss-in-pipeline-split`): a pipeline size that does not divide the layers, the
  embedding on the first stage and the LM head and loss on the last (stage_layers).
Ring collectives move (n - 1)/n of the buffer per GPU for an all-gather or a reduce-scatter and
twice that for an all-reduce (the bus-bandwidth convention of nccl-tests).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from gpuhours.catalog.schema import NodeSpec
from gpuhours.errors import FieldError
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.blocks import routed_expert_params
from gpuhours.estimate.params import ParamCounts

#: The reference node of each GPU generation (catalog node types, each with its network per
#: GPU from its datasheet: gpuhours catalog nodes). `Hardware.inter_node_gb_per_s_one_way`
#: keeps its 25 GB/s default (a DGX A100's); a newer node's figure is the one to give it.
REFERENCE_NODE = {"ampere": "DGX A100", "hopper": "DGX H100", "blackwell": "DGX B200"}
#: GPUs that come only in a node type of their own, before their generation's: a GB200 is
#: sold in NVL72 racks (one NVLink domain of 72 GPUs), not in 8-GPU nodes
REFERENCE_NODE_OF_GPU = {"gb200": "GB200 NVL72"}


def reference_node(generation: str, gpu: str | None = None) -> NodeSpec | None:
    """The catalog node type a GPU (REFERENCE_NODE_OF_GPU), else its generation's GPUs
    (REFERENCE_NODE), usually come in (an alias of the catalog row), or None."""
    from gpuhours import catalog

    name = REFERENCE_NODE_OF_GPU.get(gpu or "") or REFERENCE_NODE.get(generation)
    return catalog.node(name) if name else None


@dataclass(frozen=True)
class Layout:
    """How the GPUs are split: tensor, pipeline, context, expert and data parallel sizes, and
    the virtual stages per pipeline rank of the interleaved schedule."""

    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    virtual_stages: int = 1
    dp: int = 1
    #: decoder layers of each pipeline stage (stage_layers); () when not worked out (the
    #: layers taken as split evenly)
    stages: tuple[int, ...] = ()
    #: the expert all-to-all of one micro-batch runs beside another's compute (combined 1F1B):
    #: one more micro-batch's activations alive
    a2a_overlap: bool = False

    @property
    def model_parallel(self) -> int:
        """GPUs one model replica is spread over: tp x pp x cp."""
        return self.tp * self.pp * self.cp

    @property
    def trivial(self) -> bool:
        """Data parallelism only (every GPU holds the whole model)."""
        return self.model_parallel == 1 and self.ep == 1

    def label(self) -> str:
        parts = [f"{k}{v}" for k, v in (("tp", self.tp), ("pp", self.pp), ("cp", self.cp),
                                        ("ep", self.ep)) if v > 1]
        if self.virtual_stages > 1:
            parts.append(f"v{self.virtual_stages}")
        return " ".join(parts + [f"dp{self.dp}"])


# the chooser asks for the same layouts and splits of one model thousands of times a search
# (a few per candidate): every argument is hashable and every result immutable
@functools.lru_cache(maxsize=4096)
def layout_of(tp: int, pp: int, cp: int, ep: int, virtual_stages: int, num_gpus: int,
              arch: ModelArch | None = None, a2a_overlap: bool = False) -> Layout:
    """The layout of `num_gpus`, checked: tp x pp x cp divides the GPUs, ep divides the ranks
    of a stage (tp x cp x dp). Errors name the options (`--tp`, `--pp`, `--cp`, `--ep`). With
    `arch`, the layers of each pipeline stage (stage_layers)."""
    mp = tp * pp * cp
    if num_gpus % mp:
        raise FieldError(("tp", "pp", "cp"), f"tp {tp} x pp {pp} x cp {cp} = {mp} GPUs per model "
                         f"replica does not divide the {num_gpus} GPUs.",
                         "Choose sizes whose product divides the number of GPUs.")
    dp = num_gpus // mp
    if (tp * cp * dp) % ep:
        raise FieldError("ep", f"expert parallelism {ep} must divide the {tp * cp * dp} GPUs of "
                         f"a pipeline stage (tp x cp x dp = {tp} x {cp} x {dp}).")
    stages = stage_layers(arch, pp) if arch is not None and pp > 1 else ()
    return Layout(tp=tp, pp=pp, cp=cp, ep=ep, virtual_stages=virtual_stages, dp=dp,
                  stages=stages, a2a_overlap=a2a_overlap)


#: Megatron-Core splits these widths over the tp ranks and refuses a size that does not divide
#: one: attention heads and query groups (KV heads) with divide(..., world_size) in
#: megatron/core/transformer/attention.py (NVIDIA/Megatron-LM@00c2c0ad), the MLP's fc1 columns
#: and fc2 rows (ffn_hidden_size) with divide(output_size / input_size, world_size) in
#: ColumnParallelLinear / RowParallelLinear, megatron/core/tensor_parallel/layers.py
#: (@960c06b9). The vocabulary is not checked: Megatron pads it to a multiple of
#: make_vocab_size_divisible_by x tp. Routed experts run with expert tensor parallelism 1 here
#: (module docstring), so their width is not split; their count must divide by ep (setup.py).
#: Mamba mixers' heads are not checked (their split is not modelled).
def tp_split_widths(arch: ModelArch) -> list[tuple[str, int]]:
    """(name, size) of each width tensor parallelism divides, as Megatron-Core splits them."""
    widths: list[tuple[str, int]] = []
    if arch.num_heads and arch.attention_layer_count:
        widths += [("attention heads", arch.num_heads),
                   ("key-value heads (query groups)", arch.num_kv_heads)]
    if arch.intermediate_size and (not arch.is_moe or arch.dense_mlp_layers > 0):
        widths.append(("MLP width (intermediate_size)", arch.intermediate_size))
    if arch.shared_expert_intermediate_size:
        widths.append(("shared-expert MLP width", arch.shared_expert_intermediate_size))
    return widths


def tp_split_problem(arch: ModelArch, tp: int) -> str:
    """Why `tp` ranks cannot split `arch` (the first width it does not divide), or ""."""
    for what, size in tp_split_widths(arch):
        if size % tp:
            return f"its {what}, {size}, is not a multiple of tp {tp}"
    return ""


def tp_sizes_that_split(arch: ModelArch, up_to: int) -> list[int]:
    """The tensor-parallel sizes from 1 to `up_to` that split every width of `arch`."""
    return [x for x in range(1, up_to + 1) if not tp_split_problem(arch, x)]


def head_layer_equivalents(arch: ModelArch) -> float:
    """The LM head's matmul in units of one decoder layer's matmuls: its weights over the mean
    weights a token goes through in a layer (attention, dense MLP or shared and k of the
    routed experts). Compute per token is 6 x weights for both (Kaplan et al. 2020), so this
    is the head's share of the last stage's time in layers; attention's s-dependent FLOPs are
    left out (they make a layer heavier, the head lighter)."""
    from gpuhours.estimate.params import count_params

    counts = count_params(arch)
    routed = routed_expert_params(arch)
    active_routed = routed * arch.experts_per_token / arch.num_experts if arch.is_moe else 0.0
    per_layer = (counts.attention_per_layer + counts.mlp_per_layer + counts.norms_per_layer
                 - (routed - active_routed) / arch.num_layers)
    return counts.lm_head_matmul / per_layer if per_layer else 0.0


@functools.lru_cache(maxsize=1024)
def stage_layers(arch: ModelArch, pp: int) -> tuple[int, ...]:
    """Decoder layers of each of `pp` pipeline stages, first to last.

    A pp that divides the layers: L/pp each (Megatron-LM's default split). Otherwise each stage
    starts at ceil(L/pp) and the stage with the most work, counting the LM head and loss on the
    last stage (head_layer_equivalents; the embedding lookup on the first is a gather, no
    matmul), gives up a layer until the layers add up; on a tie the earlier stage gives (it
    holds more micro-batches' activations in flight); no stage goes below one layer. Megatron-
    Core runs any such split with `--pipeline-model-parallel-layout`, and with
    `--decoder-first-pipeline-num-layers` / `--decoder-last-pipeline-num-layers` when the
    middle stages are even (`--account-for-embedding-in-pipeline-split` /
    `--account-for-loss-in-pipeline-split` count the embedding and the loss as a layer each).
    The slowest stage sets the step time, the fullest the memory per GPU (timing.py,
    memory.py).

    DeepSeek-V3 (61 layers, its head 1.58 layers) on 16 stages: 3, 4 x 14, 2."""
    n = arch.num_layers
    if pp > n:
        raise FieldError("pp", f"{arch.name} has {n} layers: {pp} pipeline stages would leave "
                               f"stages without a layer.", "Choose at most one stage per layer.")
    if n % pp == 0:
        return (n // pp,) * pp
    head = head_layer_equivalents(arch)
    layers = [math.ceil(n / pp)] * pp
    for _ in range(sum(layers) - n):
        def load(i: int) -> tuple[float, int]:
            return layers[i] + (head if i == pp - 1 else 0.0), -i
        i = max((i for i in range(pp) if layers[i] > 1), key=load)
        layers[i] -= 1
    return tuple(layers)


def stages_text(arch: ModelArch, pp: int) -> str:
    """" (uneven stages, layers: 3, 4 x 14 stages, 2)" when pp does not divide the layers,
    else ""."""
    if pp <= 1 or arch.num_layers % pp == 0:
        return ""
    runs: list[list[int]] = []
    for x in stage_layers(arch, pp):
        if runs and runs[-1][0] == x:
            runs[-1][1] += 1
        else:
            runs.append([x, 1])
    parts = [f"{x} x {k} stages" if k > 1 else str(x) for x, k in runs]
    return f" (uneven stages, layers: {', '.join(parts)})"


@functools.lru_cache(maxsize=4096)
def stage_fractions(lay: Layout) -> tuple[float, ...]:
    """Each stage's share of the decoder layers (lay.stages, else an even split)."""
    if lay.stages:
        return tuple(x / sum(lay.stages) for x in lay.stages)
    return (1 / lay.pp,) * lay.pp


# --- memory -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class LocalParams:
    """Parameters one GPU holds on the fuller of the first and last pipeline stages."""

    #: non-expert parameters (attention, dense MLP, norms, embeddings/head on their stages)
    dense: float
    #: routed-expert weights (split by ep, sharded by ZeRO over the expert-data-parallel ranks)
    expert: float

    @property
    def total(self) -> float:
        return self.dense + self.expert


@functools.lru_cache(maxsize=4096)
def local_params(arch: ModelArch, counts: ParamCounts, lay: Layout) -> LocalParams:
    """Parameters per GPU: each layer's attention and MLP weights / tp (column- and row-parallel
    linears; Narayanan et al. sec. 2.3), routed experts / ep, norms and the router replicated,
    the embedding and LM head / tp (vocabulary-parallel), each stage's layers (stage_layers).
    With pp > 1 the first stage holds the embedding and the last the LM head (a tied head keeps
    a copy there, as Megatron-LM does); the largest stage is returned."""
    # the mean over the layers: dense first layers (DeepSeek) have no experts
    expert_per_layer = routed_expert_params(arch) / arch.num_layers
    router = arch.hidden_size * arch.num_experts * arch.moe_layers / arch.num_layers
    split_mlp = counts.mlp_per_layer - expert_per_layer - router
    dense_layer = (counts.attention_per_layer + split_mlp) / lay.tp + router \
        + counts.norms_per_layer
    if lay.pp == 1:
        ends = (counts.embedding + counts.lm_head) / lay.tp + counts.final_norm
        return LocalParams(dense=arch.num_layers * dense_layer + counts.extra + ends,
                           expert=arch.num_layers * expert_per_layer / lay.ep)
    head = counts.lm_head if counts.lm_head else counts.embedding  # tied: a copy on the last
    if not lay.stages:
        lay = Layout(tp=lay.tp, pp=lay.pp, cp=lay.cp, ep=lay.ep, dp=lay.dp,
                     virtual_stages=lay.virtual_stages, stages=stage_layers(arch, lay.pp))
    out = []
    for i, share in enumerate(stage_fractions(lay)):
        layers = share * arch.num_layers
        end = (counts.embedding / lay.tp if i == 0 else 0.0) + (
            head / lay.tp + counts.final_norm if i == lay.pp - 1 else 0.0)
        out.append(LocalParams(dense=layers * dense_layer + counts.extra / lay.pp + end,
                               expert=layers * expert_per_layer / lay.ep))
    return max(out, key=lambda x: x.total)


def local_trainable_params(trainable: float, total: float, local: LocalParams,
                           method: str) -> float:
    """Trainable parameters one GPU holds under a layout. Full training: its local parameters.
    LoRA: the adapters go with their base linear (Megatron-Bridge, src/megatron/bridge/peft/
    lora.py@0191fc5 LoRAMerge: on a column-parallel base linear_in is split over the dim and
    linear_out over the outputs, on a row-parallel one linear_in over the inputs and linear_out
    over the outputs: both / tp), the stages split the layers, so the GPU holds the model's
    adapters in the share of its parameters it holds (local / total; exact for a dense model
    without vocabulary-parallel ends, whose share the embedding and head shift by <2%)."""
    if method == "full":
        return local.total
    return trainable * local.total / total


def zero_shards(lay: Layout, local: LocalParams) -> float:
    """The number of ranks ZeRO divides this GPU's state over, as one effective count: dense
    state over the dp x cp ranks holding the same shard (Megatron-LM's distributed optimizer
    shards over data and context parallel ranks), expert state over the tp x cp x dp / ep ranks
    holding the same experts. Equal to the data-parallel size without experts."""
    dense_ranks = lay.dp * lay.cp
    expert_ranks = max(lay.tp * lay.cp * lay.dp // lay.ep, 1)
    per_gpu = local.dense / dense_ranks + local.expert / expert_ranks
    return local.total / per_gpu if per_gpu else 1.0


def activation_micro_batches_in_flight(lay: Layout, micro_batches: int) -> tuple[float, float]:
    """Activations held on the fullest stage before the last and on the last pipeline stage,
    in units of one micro-batch's activations of all L layers (before the tp and cp split).

    1F1B: stage i (from 0) holds min(m, p - i) micro-batches of its layers, so the first holds
    min(m, p) of L/p (Korthikanti et al. 2022, sec. 4.2.3: p micro-batches, so L layers'
    worth); interleaved with v virtual stages: times (1 + (p - 1)/(p v)). The last stage holds
    one micro-batch of its layers. Uneven stages (lay.stages): the most any stage before the
    last holds (the second stage when the first is a layer short).

    The expert all-to-all overlap (lay.a2a_overlap, combined 1F1B) runs the forward of one
    micro-batch beside the backward of the one before: one more micro-batch of the first
    stage's layers is alive (two of all layers without pipelining)."""
    p, v, m = lay.pp, lay.virtual_stages, micro_batches
    extra = 1 if lay.a2a_overlap and m > 1 else 0
    if p == 1:
        return 1.0 + extra, 1.0
    shares = stage_fractions(lay)
    first = max(min(m, p - i) * shares[i] for i in range(p - 1))
    if v > 1:
        first *= 1 + (p - 1) / (p * v)
    return first + extra * shares[0] / v, shares[-1]


# --- time -------------------------------------------------------------------------------------

def pipeline_bubble_fraction(pp: int, micro_batches: int, virtual_stages: int = 1) -> float:
    """Share of a pipelined step spent idle in the bubble: (p - 1) / (v m + p - 1).

    Narayanan et al. 2021, sec. 2.2: the bubble is (p - 1)/m of the ideal time for 1F1B and
    (p - 1)/(v m) for the interleaved schedule with v model chunks per GPU; as a share of the
    whole step, (p - 1)/(m + p - 1) and (p - 1)/(v m + p - 1)."""
    return (pp - 1) / (virtual_stages * micro_batches + pp - 1)


def tensor_parallel_bytes_per_layer(tokens: float, hidden_size: int, activation_bytes: float,
                                    tp: int, recompute: bool = False) -> float:
    """Bytes one GPU sends per layer and micro-batch for tensor (and sequence) parallelism.

    Two all-reduces of the b s h activations forward and two backward (Narayanan et al. 2021,
    sec. 3.2), each 2 (t - 1)/t of the buffer per GPU: 8 (t - 1)/t b s h bytes; sequence
    parallelism's all-gather + reduce-scatter pairs move the same (Korthikanti et al. 2022,
    sec. 4.2.2). Full recomputation repeats the forward's two: 12 (t - 1)/t b s h."""
    if tp == 1:
        return 0.0
    passes = 6 if recompute else 4  # all-reduces per layer: 2 fwd + 2 bwd (+ 2 recomputed)
    return passes * 2 * (tp - 1) / tp * tokens * hidden_size * activation_bytes


def pipeline_p2p_bytes_per_micro_batch(tokens: float, hidden_size: int,
                                       activation_bytes: float, tp: int,
                                       virtual_stages: int = 1) -> float:
    """Bytes one GPU sends to its neighbouring stage per micro-batch: the activations forward and
    their gradient backward, b s h each, split over the t tensor-parallel ranks (scatter/gather,
    Narayanan et al. 2021 sec. 4.1), once per model chunk: 2 v b s h / t."""
    return 2 * virtual_stages * tokens * hidden_size * activation_bytes / tp


def context_parallel_bytes_per_layer(tokens: float, kv_dim: int, activation_bytes: float,
                                     cp: int, tp: int, recompute: bool = False) -> float:
    """Bytes one GPU sends per layer and micro-batch for ring attention over cp ranks: its K and
    V chunk (b s/cp x 2 kv) passed cp - 1 times forward; backward passes K and V again and their
    gradients (twice the forward); KV heads split by tp. Full recomputation adds a forward."""
    if cp == 1:
        return 0.0
    passes = 4 if recompute else 3
    return passes * (cp - 1) * (tokens / cp) * 2 * kv_dim * activation_bytes / tp


def expert_all_to_all_bytes_per_layer(tokens_per_gpu: float, hidden_size: int,
                                      activation_bytes: float, experts_per_token: int, ep: int,
                                      recompute: bool = False, backward: bool = True) -> float:
    """Bytes one GPU sends per MoE layer and micro-batch: dispatch and combine all-to-alls of its
    tokens' hidden states to the k routed experts, (ep - 1)/ep of them to other ranks, forward and
    backward (4 all-to-alls; 6 with full recomputation); a forward alone (`backward` False: a
    scoring pass) 2."""
    if ep == 1:
        return 0.0
    passes = (6 if recompute else 4) if backward else 2
    return passes * tokens_per_gpu * experts_per_token * hidden_size * activation_bytes \
        * (ep - 1) / ep


#: bytes of an element of the router's probabilities with moe_router_dtype fp64 (NeMo-RL's
#: grpo_math_1B.yaml): the gathered probs, and the combine cast to the probs' dtype
ROUTER_FP64_BYTES = 8.0


def expert_allgather_bytes_per_layer(tokens_per_gpu: float, hidden_size: int,
                                     activation_bytes: float, num_experts: int, ep: int,
                                     recompute: bool = False, backward: bool = True) -> float:
    """Bytes one GPU sends per MoE layer and micro-batch with Megatron-Core's allgather
    dispatcher and an fp64 router (NVIDIA/Megatron-LM@4bbcd72d token_dispatcher.py
    MoEAllGatherTokenDispatcher: token_dispatch all-gathers the routing map (1 byte a token and
    expert), the probs (fp64) and the hidden states over the EP ranks; token_combine
    reduce-scatters the expert outputs cast to the probs' dtype, fp64 here). A ring all-gather
    or reduce-scatter has each rank send (ep - 1) of its shards, so one GPU sends
    (ep - 1) x tokens x width x bytes for each. Forward: the map, the probs, the hidden states
    (activation bytes), the combine (8 bytes); backward: the gradients of the gathered hidden
    states and probs reduce-scattered, the combine's all-gathered (fp64); full recomputation
    adds the forward; a forward alone (`backward` False: a scoring pass) the forward's. Where an
    all-to-all dispatcher sends each token's k routed copies, this moves every token once each
    way, the combine at four times bf16's bytes."""
    if ep == 1:
        return 0.0
    e8 = ROUTER_FP64_BYTES
    forward = (num_experts * (1.0 + e8) + hidden_size * (activation_bytes + e8))
    back = num_experts * e8 + hidden_size * (activation_bytes + e8)
    passes = forward * (2 if recompute else 1) + back if backward else forward
    return passes * tokens_per_gpu * (ep - 1)


def data_parallel_grad_bytes(params: float, grad_bytes: float, ranks: float,
                             zero_stage: int = 0, micro_batches: int = 1,
                             gather_bytes: float | None = None) -> float:
    """Bytes one GPU sends to reduce its gradients over `ranks` data-parallel ranks per optimizer
    step. DDP and ZeRO-1: one all-reduce per step, 2 (n - 1)/n of the buffer (ZeRO-1's
    reduce-scatter + all-gather of the updated weights move the same); gradients accumulate
    unreduced over the micro-batches (torch DDP no_sync; DeepSpeed ZeRO-1 reduces only at the
    accumulation boundary). ZeRO-2 keeps only its 1/n of the gradients, so every micro-batch's
    gradients are reduce-scattered as its backward produces them, (n - 1)/n each, and the
    updated weights all-gathered once per step: (m + 1) (n - 1)/n of the buffer.
    DeepSpeed@38327e07 deepspeed/runtime/zero/stage_1_and_2.py,
    reduce_ready_partitions_and_remove_grads: `if self.partition_gradients or
    self.is_gradient_accumulation_boundary` (partition_gradients: stage 2).
    `gather_bytes`: bytes per parameter of ZeRO-1/2's all-gather of the updated weights where
    they differ from the gradients' (Megatron-Core's fp32 gradient buffer reduce-scattered,
    the bf16 weights all-gathered: grad_reduce_in_fp32); None: the gradients'."""
    if ranks <= 1:
        return 0.0
    ring = (ranks - 1) / ranks
    gather = grad_bytes if gather_bytes is None else gather_bytes
    if zero_stage == 2:
        return ring * params * (micro_batches * grad_bytes + gather)
    if zero_stage == 1:
        return ring * params * (grad_bytes + gather)
    return 2 * ring * params * grad_bytes


def deepspeed_reduce_exposed_share(trained: float, bucket_elements: int, overlap_comm: bool,
                                   overlap_share: float) -> float:
    """Share of one backward's gradient reduction that DeepSpeed ZeRO-1/2 leaves exposed after
    the backward, with `bucket_elements` its reduce_bucket_size and `trained` the elements
    reduced. Each gradient is copied into the bucket as backward produces it, and the bucket is
    reduced when the next gradient would not fit: beside the rest of the backward, on the
    reduction stream, with overlap_comm; on the compute stream without it. What is left in the
    bucket when the backward ends is reduced by the epilogue, followed by a device
    synchronize, with no compute left to run beside (DeepSpeed v0.12.3 @6ea44d02
    deepspeed/runtime/zero/stage_1_and_2.py reduce_independent_p_g_buckets_and_remove_grads:
    `if self.elements_in_ipg_bucket + param.numel() > self.reduce_bucket_size:
    self.reduce_ipg_grads()`; independent_gradient_partition_epilogue: reduce_ipg_grads, then
    `get_accelerator().synchronize()` with overlap_comm). So the last, partly filled bucket is
    exposed in full (all of it where the trained elements fit one bucket: LoRA's adapters,
    143M elements for Qwen-7B r64, under Qwen's 2e8), the full buckets before it hidden up to
    `overlap_share` (assumptions.COMM_OVERLAP), and nothing is hidden without overlap_comm.
    Buckets are counted as if gradients filled them exactly (parameter boundaries ignored)."""
    if not overlap_comm or trained <= 0:
        return 1.0
    if bucket_elements <= 0 or trained <= bucket_elements:
        return 1.0
    full = math.ceil(trained / bucket_elements) - 1
    tail = trained - full * bucket_elements
    tail_share = tail / trained
    return tail_share + (1 - tail_share) * (1 - overlap_share)


#: NCCL's latency model of a ring collective (Simple protocol, the one large buffers take),
#: NVIDIA/nccl@5067397c src/graph/tuning.cc ncclTopoTuneModel: a base latency, then per ring
#: step the hardware latency of the hop, the network's for the steps that cross a node boundary
#: (ncclTunerConstantsDefaults: baseLatencies Ring Simple 8.4 us; hwLatencies Ring Simple:
#: NVLINK 3.4 us, PCI 5.7 us, NET 14 us). The network's extra latency (graphs latencyInter) and
#: the proxy overhead NCCL adds are left out. NCCL picks the protocol per message size, and for
#: small messages LL/LL128 step faster (LL128 Ring: 1.9 us per NVLink step, same table), so for
#: a small per-layer collective this can overstate the latency (about 2x at 2,048 ranks); for
#: the large buffers it is applied to, Simple is the protocol NCCL takes.
RING_BASE_LATENCY_S = 8.4e-6
RING_NVLINK_STEP_LATENCY_S = 3.4e-6
RING_PCIE_STEP_LATENCY_S = 5.7e-6
RING_NET_STEP_LATENCY_S = 14.0e-6


def ring_latency_s(ranks: int, nodes: int,
                   intra_step_s: float = RING_NVLINK_STEP_LATENCY_S) -> float:
    """Latency of one ring all-gather or reduce-scatter over `ranks` GPUs in `nodes` nodes:
    n - 1 steps, N - 1 of them across the network (NCCL's nInterSteps), the rest inside a node
    at `intra_step_s` (NVLink's or PCIe's; constants above). What a sharded data-parallel layer
    pays per collective however small its buffer: at 2,048 ranks in 256 nodes,
    1,792 x 3.4 + 255 x 14 + 8.4 us = 9.7 ms."""
    if ranks <= 1:
        return 0.0
    inter = max(nodes - 1, 0)
    return (RING_BASE_LATENCY_S + (ranks - 1 - inter) * intra_step_s
            + inter * RING_NET_STEP_LATENCY_S)


# --- overlap of model-parallel traffic with compute (setup choices) ---------------------------

def a2a_unpaired_share(pp: int, virtual_stages: int, micro_batches: int) -> float:
    """Share of a step's expert all-to-all that no other micro-batch's compute can hide under
    combined 1F1B (Megatron-Core --overlap-moe-expert-parallel-comm; DeepSeek-V3 sec. 3.2.1):
    the schedule runs the forward of one micro-batch beside the backward of another, the
    all-to-all of each behind the other's attention and MLP. Without pipelining the first
    forward and the last backward have no partner: one micro-batch's worth of m. With the
    interleaved schedule the first stage's warm-up forwards, 2 (p - 1) + (v - 1) p model
    chunks of v m (Megatron-Core's interleaved schedule), and as many cool-down backwards,
    run alone."""
    p, v, m = pp, virtual_stages, micro_batches
    alone = 1 if p == 1 else 2 * (p - 1) + (v - 1) * p
    return min(1.0, alone / (v * m))


def overlapped_exposed_s(comm_s: float, unpaired_share: float, cover_s: float,
                         sm_share: float) -> float:
    """Seconds a collective adds to the step when it runs beside compute: the unpaired share in
    full, the rest beyond the compute it runs beside (`cover_s` x the paired share), and the
    compute slowed by the SMs the communication takes (`sm_share`) while it is hidden."""
    paired = comm_s * (1 - unpaired_share)
    hidden = min(paired, cover_s * (1 - unpaired_share))
    return comm_s - hidden + hidden * sm_share


def tp_overlap_unpaired_share(tp: int) -> float:
    """Share of the tensor-parallel traffic that --tp-comm-overlap cannot hide: the all-gather
    before a column-parallel GEMM and the reduce-scatter after a row-parallel one are split into
    tp chunks exchanged around the ring while the GEMM runs on the chunk before (Transformer
    Engine's pipelined ring exchange, Wang et al. 2022 "Overlap communication with dependent
    computation via decomposition"); the first chunk has no GEMM to run beside: 1/tp."""
    return 1 / tp


def fsdp_exposed_s(forward_comm_s: float, backward_comm_s: float, forward_compute_s: float,
                   backward_compute_s: float, layers: int, overlap_share: float,
                   windows: tuple[float, float] = (1.0, 1.0)) -> float:
    """Seconds of ZeRO-3/FSDP traffic in one micro-batch not hidden behind its compute.

    FSDP unshards one wrapped layer at a time on its own stream, the gather of the next layer
    beside this layer's compute: in forward the CPU runs ahead and issues it, with at most two
    layers gathered (limit_all_gathers, the rate limiter), in backward BackwardPrefetch.
    BACKWARD_PRE issues it before this layer's gradients (Zhao et al. 2023, "PyTorch FSDP:
    Experiences on Scaling Fully Sharded Data Parallel": backward and forward prefetching, rate
    limiter); each layer's gradient reduce-scatter runs beside the next layer's backward. So a
    layer's traffic hides behind at most one layer's compute of the same pass, and the first
    layer of each pass has none before it: per pass the hidden part is at most
    (L - 1) x min(traffic per layer, compute per layer). Within that bound `overlap_share`
    (assumptions.COMM_OVERLAP) of the traffic hides, as for data parallelism. Recomputation
    runs inside the backward pass and counts as backward compute.

    `windows` (forward, backward): the share of a layer's compute of each pass that the next
    gather can run beside, 1 when the host issues it a whole layer ahead; LoRA adapters wrapped
    as units of their own hold the host closer (fsdp_adapter_unit_windows)."""
    hideable = 0.0
    for comm, compute, window in ((forward_comm_s, forward_compute_s, windows[0]),
                                  (backward_comm_s, backward_compute_s, windows[1])):
        hideable += (layers - 1) * min(comm / layers, window * compute / layers)
    comm_s = forward_comm_s + backward_comm_s
    return comm_s - min(comm_s * overlap_share, hideable)


# --- FSDP with each LoRA adapter a unit of its own (Training.fsdp_adapter_units) ------------
# Read in torch's FSDP1 (torch/distributed/fsdp/_runtime_utils.py and _limiter_utils.py, the same
# from torch 2.1, when limit_all_gathers became the default, to 2.13) and seen in a real run
# (tests/test_fsdp_adapter_units.py: FSDP1 on two CPU processes, a tiny Llama with peft's LoRA
# wrapped as train.py wraps it, reentrant checkpointing, the rate limiter's queue logged).
# Answer.AI's fsdp_qlora train.py (@05ed9f2; the same FSDP call and wrap policy through its
# Feb-Mar 2024 benchmark runs) wraps peft's model with lambda_auto_wrap_policy on every leaf
# module whose weight requires grad (FSDP1 with use_orig_params=False keeps one requires_grad
# per flat parameter), so each adapter's lora_A and lora_B Linear is a unit inside its decoder
# layer's unit, and it passes limit_all_gathers=True. Every FULL_SHARD unit that frees its
# weights after its forward (or backward) records an event in one queue all units share
# (_free_event_queue, the root's), and every unshard first waits on the host
# (event.synchronize()) for the oldest queued event once two are queued. With layer units alone
# layer i+1's gather is issued once the GPU has freed layer i-1: it runs beside all of layer
# i's compute. With adapter units the queue holds adapters' events: in the run, layer i+1's
# unshard waits for the free of layer i's up_proj lora_B, so the gather runs beside down_proj
# only (its matmul, adapter and the residual add); in backward the previous layer is prefetched
# from the pre-backward hook of the layer's q_proj lora_A and waits for the free of its k_proj
# lora_A, so it runs beside the input-gradient matmuls of k_proj and q_proj only.


def fsdp_adapter_unit_windows(hidden: int, q_dim: int, kv_dim: int, ffn: int, gated: bool,
                              checkpointing: bool) -> tuple[float, float]:
    """(forward, backward) share of a layer's compute that the next layer's all-gather runs
    beside when every LoRA adapter of a Llama-shaped layer is an FSDP unit of its own (the note
    above): down_proj's matmul of the layer's forward matmuls, and the input-gradient matmuls
    of k_proj and q_proj of its backward ones (the recomputed forward and the input gradients:
    the frozen base has no weight gradients). Shares of matmul work, applied to the pass's
    whole compute (attention and elementwise work taken in the same proportion)."""
    linears = hidden * (2 * q_dim + 2 * kv_dim) + (3 if gated else 2) * hidden * ffn
    backward = linears * (2 if checkpointing else 1)
    return hidden * ffn / linears, hidden * (q_dim + kv_dim) / backward


def fsdp_adapter_unit_collectives(adapted_linears_per_layer: int, layers: int,
                                  checkpointing: bool) -> tuple[int, int]:
    """(all-gathers, reduce-scatters) the adapter units of one micro-batch issue besides the
    layers' own (Training.fsdp_adapter_units): 2 units (lora_A, lora_B) per adapted linear,
    each gathered for its forward, again for the recomputed forward (checkpointing: the
    recompute's post-forward frees it again) and for its backward, and its gradient
    reduce-scattered once. Each is a collective of its own, paying the ring's latency."""
    units = 2 * adapted_linears_per_layer * layers
    return units * (3 if checkpointing else 2), units


@dataclass(frozen=True)
class Collective:
    """One kind of communication in a step: seconds on its link and the part not hidden."""

    name: str
    seconds: float
    exposed_s: float
    link: str
