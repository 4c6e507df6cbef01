"""An MoE layer's expert GEMMs and token routing in a training step (issues 14 and 16).

The dense GEMM efficiency (assumptions.GEMM_EFFICIENCY_BY_GENERATION) was set on GEMMs whose M is
the whole micro-batch. A routed expert sees only the tokens sent to it, so its GEMMs are
smaller: M = tokens per expert per micro-batch (the rank's tokens x top-k x ep / experts, the
all-to-all bringing ep ranks' tokens in), N and K the expert's widths, and in the weight gradient
K = M. Three losses follow, each counted from the shape (gemm_time_s):

- tile quantisation: M is rounded up to the kernel's output tile (64 or 128 rows; DeepGEMM pads
  each expert's segment to its BLOCK_M, deepseek-ai/DeepGEMM@55ab91f README "Grouped GEMMs
  (contiguous layout)"), N to 128;
- waves: tiles / SMs rounded up to whole waves (one grouped launch spreads every local
  expert's tiles over the SMs);
- the reduction depth: a tile's prologue and epilogue (loading, writing the output) are paid
  once per K loop, a throughput share K / (K + assumptions.GROUPED_GEMM_K_HALF_DEPTH);
- and the weights' read, which at small M bounds the GEMM by bandwidth (roofline, combined with
  the compute time as a 2-norm: neither hides the other entirely).

The constants were set from DeepGEMM's published H800 microbenchmarks, the six normal GEMMs of
M = 4096 (data/grouped_gemm_microbench.csv, not from any training row); its ten grouped GEMMs were
held out and are reproduced within 10% (tests/test_moe_gemm.py). What the expert GEMMs cost in a
step is then their time by this model over the time of one GEMM of the same N, K over all the
rank's routed tokens (what the dense fit already covers): `expert_gemm_slowdown`.

Token routing (`routing_bytes_per_token_layer`) counts the passes over the routed copies of the
hidden states that Megatron-Core's dispatcher and HF's expert loop make, forward and backward.
The all-to-all itself is estimate/parallel.py's (expert_all_to_all_bytes_per_layer): not here.
Megatron-Core's unfused expert MLP adds eager passes for a clamped activation and the experts'
output bias (`unfused_expert_bytes_per_token_layer`: gpt-oss's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuhours.estimate import assumptions as A
from gpuhours.estimate.arch import ModelArch

#: output tile of Hopper GEMM kernels, rows x columns: 128 x 128 (DeepGEMM's BLOCK_M 128 for
#: training shapes, CUTLASS's 128 x 128 warp-specialised tiles); 64 rows where a group has at
#: most 64 (DeepGEMM's BLOCK_M 64 for small M). Smaller tiles reuse their operands less, so a
#: kernel does not take them for larger M (with them the fit below is worse: rms 7% against 4%)
TILE_N = 128
TILE_M = 128
TILE_M_SMALL = 64
#: the large-GEMM share of the fp8 peak fitted with A.GROUPED_GEMM_K_HALF_DEPTH (0.72) to
#: DeepGEMM's rows; used only to check the model on them: in a training step the GPU's own GEMM
#: efficiency takes its place
GROUPED_GEMM_BASE_EFFICIENCY = 0.72


def gemm_time_s(m: float, n: float, k: float, groups: int, peak_flops: float, efficiency: float,
                bw_bytes_per_s: float, element_bytes: float, sm_count: int | None) -> float:
    """Seconds of `groups` GEMMs of (m x k) @ (k x n) in one launch, each of m rows: 2 m n k
    FLOPs each at `efficiency` of `peak_flops` x the tile, wave and depth shares (module
    docstring), with the operands and the output read or written once at `bw_bytes_per_s`
    (the two combined as an assumptions.GEMM_ROOFLINE_P-norm)."""
    m, n, k = max(m, 1.0), max(n, 1.0), max(k, 1.0)
    memory_s = groups * (m * k + k * n + m * n) * element_bytes / bw_bytes_per_s
    depth = k / (k + A.GROUPED_GEMM_K_HALF_DEPTH.value)
    tile_m = TILE_M_SMALL if m <= TILE_M_SMALL else TILE_M
    tm, tn = math.ceil(m / tile_m), math.ceil(n / TILE_N)
    tiles = groups * tm * tn
    tile_use = m * n / (tm * tile_m * tn * TILE_N)
    wave_use = tiles / (math.ceil(tiles / sm_count) * sm_count) if sm_count else 1.0
    compute_s = groups * 2 * m * n * k / (peak_flops * efficiency * tile_use * wave_use * depth)
    p = A.GEMM_ROOFLINE_P.value
    return (compute_s ** p + memory_s ** p) ** (1 / p)


@dataclass(frozen=True)
class ExpertShapes:
    """One rank's expert GEMMs of one MoE layer and micro-batch."""

    #: routed token copies each local expert receives (the mean; routing balanced)
    tokens_per_expert: float
    #: experts on this rank (one grouped launch)
    local_experts: int
    #: (N, K) of the expert's first linear (gate and up fused) and of its second (down)
    fc1: tuple[float, float]
    fc2: tuple[float, float]


def expert_shapes(arch: ModelArch, tokens_per_rank: float, ep: int, tp: int) -> ExpertShapes:
    """The expert GEMMs of a rank holding experts / ep experts whose micro-batch has
    `tokens_per_rank` tokens: each expert receives tokens x top-k x ep / experts copies (the ep
    ranks' tokens all-to-all'd in, routing balanced); expert tensor parallelism `tp`
    (Megatron-Core's expert_tensor_parallel_size) splits the intermediate width. The training
    step takes it as 1, as its memory and all-to-all do (parallel.py: Megatron-Core's MoE
    recipes set 1; its own default is the tensor-parallel size)."""
    f = arch.moe_intermediate_size / tp
    fc1_n = 2 * f if arch.gated_mlp else f
    per_expert = tokens_per_rank * arch.experts_per_token * ep / arch.num_experts
    return ExpertShapes(tokens_per_expert=per_expert,
                        local_experts=max(arch.num_experts // ep, 1),
                        fc1=(fc1_n, arch.hidden_size), fc2=(arch.hidden_size, f))


def expert_gemm_slowdown(shapes: ExpertShapes, trains_weights: bool, peak_flops: float,
                         efficiency: float, bw_bytes_per_s: float, element_bytes: float,
                         sm_count: int | None, grouped_launch: bool = True) -> float:
    """Time of a rank's expert GEMMs (forward, input gradient, and the weight gradient when
    the experts train) over the time of the same FLOPs as one GEMM per linear over all its
    routed tokens (M = tokens per expert x local experts): above 1 where the experts' small M,
    few tiles or shallow weight-gradient K cost efficiency. Per linear (N, K): forward
    (M, N, K), input gradient (M, K, N), weight gradient (K, N, M). `grouped_launch`: the
    local experts' GEMMs in one launch (Megatron-Core's grouped GEMM, TE GroupedLinear), their
    tiles sharing the waves; else one launch per expert (transformers' loop over experts)."""
    m, g = shapes.tokens_per_expert, shapes.local_experts
    big = m * g

    def t(mm: float, n: float, k: float, groups: int) -> float:
        if not grouped_launch:
            return groups * gemm_time_s(mm, n, k, 1, peak_flops, efficiency, bw_bytes_per_s,
                                        element_bytes, sm_count)
        return gemm_time_s(mm, n, k, groups, peak_flops, efficiency, bw_bytes_per_s,
                           element_bytes, sm_count)

    grouped = whole = 0.0
    for n, k in (shapes.fc1, shapes.fc2):
        grouped += t(m, n, k, g) + t(m, k, n, g)
        whole += t(big, n, k, 1) + t(big, k, n, 1)
        if trains_weights:
            grouped += t(k, n, m, g)
            # the same FLOPs as one (K x N) gradient of depth M x groups
            whole += t(k, n, big, 1)
    return grouped / whole if whole > 0 else 1.0


#: elements of the hidden width moved per routed copy (k) and per token (1) by the permutation,
#: the probability weighting and the combine of one MoE layer, (per copy, per token):
#: - "megatron": Transformer Engine's fused permute / unpermute (Megatron-Core
#:   moe_permute_fusion, which Megatron-Bridge's MoE model providers set True): forward, a
#:   gather writing each copy (read k, write k) and an unpermute that reads the k copies, weights
#:   them and writes the sum (k, 1); backward, the unpermute's gradient writes the k copies' and
#:   reads them back for the probabilities' gradient (2 k, 1), the permute's sums them (k, 1)
#: - "eager": transformers' sparse MoE block, a loop over experts: gather (hidden_states[top_x]:
#:   read k, write k), `* routing_weights` (k, k), index_add_ into the output (read k, read and
#:   write k); backward, the index_add_'s gradient gathered (k, k), the product's for the input
#:   and the weight (read 2 k, write k), the gather's an index_add_ (read k, read and write k)
#: - "megatron-a2a-unfused": Megatron-Core's all-to-all dispatcher with the unfused permute
#:   (Training.moe_dispatch alltoall-unfused; NVIDIA/Megatron-LM@d98e8a64 moe_utils.py permute,
#:   sort_chunks_by_idxs, unpermute; host.py MEGATRON_A2A_* names the operators): forward,
#:   index_select of the k copies (read k, write k), sort_chunks_by_idxs's cat of the received
#:   copies into local-expert order and the combine's cat back (read k, write k each: 4 k),
#:   the unpermute's torch.zeros (write 1) and scatter_add_ (read the k copies, read and write
#:   the k destinations: 3 k): 9 k + 1; backward, scatter_add_'s gather (read k, write k), the
#:   two cats' split gradients concatenated (4 k), index_select's zeros (1) and index_add_
#:   (3 k): 9 k + 1. The probs' and the map's copies (num_experts wide, a few bytes) are left
#:   out; the weighting is the weighted SwiGLU's, as in the fused path
ROUTING_ELEMENTS = {
    "megatron": {"forward": (3, 1), "backward": (3, 2)},
    "megatron-a2a-unfused": {"forward": (9, 1), "backward": (9, 1)},
    "eager": {"forward": (7, 0), "backward": (8, 0)},
}
#: fp32 passes over the router's logits per token and expert: softmax (read, write), top-k
#: (read), the load-balancing loss's statistics (read), forward; as many backward
ROUTER_FP32_PASSES = 4


#: bytes of the fp64 router's logits and probs (Training.moe_dispatch allgather-unfused:
#: moe_router_dtype fp64), per element
ROUTER_FP64_ELEMENT_BYTES = 8.0


def allgather_routing_bytes_per_token(arch: ModelArch, activation_bytes: float, ep: int
                                      ) -> float:
    """Bytes of memory traffic per token of a GPU and MoE layer, one direction (forward; the
    backward moves the same), of Megatron-Core's allgather dispatcher with the unfused permute
    and an fp64 router (NeMo-RL's grpo_math_1B.yaml; NVIDIA/Megatron-LM@4bbcd72d
    token_dispatcher.py MoEAllGatherTokenDispatcher, moe_utils.py permute / unpermute), with
    a = activation bytes, d the width, k routed copies per token (on average k of a GPU's
    gathered rows per own token land on its local experts), ep the EP ranks whose tokens it
    gathers: forward, index_select of the local copies (read k, write k rows: 2 k a), the
    unpermute's torch.zeros over all ep gathered rows (ep a) and scatter_add_ of the copies into
    it (read k, read and write k: 3 k a), the combine's cast of the ep rows to fp64 (ep (a + 8))
    and, after the reduce-scatter, of the GPU's own rows back (8 + a); backward, the casts'
    gradients (the same bytes), scatter_add_'s gather (2 k a), index_select's zeros and
    index_add_ (ep a + 3 k a). Per direction d (5 k a + ep (2 a + 8) + a + 8); the router's
    logits ROUTER_FP32_PASSES times each way in fp64. The collectives' own writes are
    estimate/parallel.py's."""
    k, d, e8 = arch.experts_per_token, arch.hidden_size, ROUTER_FP64_ELEMENT_BYTES
    a = activation_bytes
    rows = 5 * k * a + ep * (2 * a + e8) + a + e8
    return d * rows + ROUTER_FP32_PASSES * arch.num_experts * e8


def routing_bytes_per_token_layer(arch: ModelArch, kernels: str, activation_bytes: float,
                                  recompute: bool, dispatch: str = "fused",
                                  ep: int = 1, router_dtype: str = "fp32") -> float:
    """Bytes of memory traffic per token and MoE layer of the routing around the experts:
    the permutation, weighting and combine of the top-k copies of the hidden state
    (ROUTING_ELEMENTS; the megatron kernel path's fused kernels, otherwise the eager loop), and
    the router's fp32 logits (ROUTER_FP32_PASSES per expert each way), forward and backward,
    the forward twice under full recomputation. With the megatron path's allgather-unfused
    `dispatch` over `ep` ranks, allgather_routing_bytes_per_token each way instead; with
    alltoall-unfused, the unfused permute's passes (ROUTING_ELEMENTS "megatron-a2a-unfused").
    The router's logits are 8 bytes an element with an fp64 `router_dtype` (Megatron-Core's
    moe_router_dtype), else 4 (softmax's fp32). The router's GEMM is with the matmuls
    (estimate/blocks.py; an fp64 router's runs on the fp64 units, not costed apart); the
    all-to-all is estimate/parallel.py's."""
    if not arch.is_moe:
        return 0.0
    forwards = 2 if recompute else 1
    if kernels == "megatron" and dispatch == "allgather-unfused":
        return (forwards + 1) * allgather_routing_bytes_per_token(arch, activation_bytes, ep)
    k, d = arch.experts_per_token, arch.hidden_size
    key = "eager"
    if kernels == "megatron":
        key = "megatron-a2a-unfused" if dispatch == "alltoall-unfused" else "megatron"
    table = ROUTING_ELEMENTS[key]
    logit_bytes = ROUTER_FP64_ELEMENT_BYTES if router_dtype == "fp64" else 4.0

    def pass_bytes(direction: str) -> float:
        per_copy, per_token = table[direction]
        return ((per_copy * k + per_token) * d * activation_bytes
                + ROUTER_FP32_PASSES * arch.num_experts * logit_bytes)

    return forwards * pass_bytes("forward") + pass_bytes("backward")


#: Megatron-Core's unfused expert MLP (TEGroupedMLP without Transformer Engine's op fuser,
#: NVIDIA/Megatron-LM@2a75ac12, the commit Megatron-Bridge@067f987d pins): its eager passes
#: beyond the fused activation, per element of the routed copy's width, as (elements of the
#: activation dtype read + written, bytes of bool masks read + written), forward and backward:
#: - the clamp of the quick-GeGLU (weighted_bias_quick_geglu_impl, fused_bias_geglu.py lines
#:   424-431: eager, outside the fused function, where SwiGLU's takes the clamp inside), per
#:   element of the f-wide halves: forward, chunk (views), clamp of each half (read 1, write 1,
#:   twice) and a cat (read 2, write 2): 8; backward, autograd's clamp gradients
#:   (FunctionsManual clamp_backward): the gate's `where(self <= max, grad, 0)` (le: read 1,
#:   mask 1; where: mask 1, read 1, write 1), the linear half's `where((self >= min)
#:   .logical_and_(self <= max), grad, 0)` (ge and le: read 1, mask 1 each; logical_and_:
#:   masks 3; where: mask 1, read 1, write 1), and the chunk's gradient a cat (read 2, write
#:   2): 11 and 8 mask bytes (the cat's own gradient is views);
#: - the fc2 bias (linear_fc2 skip_bias_add=True, then _apply_bias, experts.py lines 313-330),
#:   per element of the d-wide output: per local expert `t + b * p`, then a cat: forward,
#:   b * p written (1), the add (read 2, write 1), the cat (read 1, write 1): 6; backward, the
#:   product's two gradients (grad * p and grad * b: read 1, write 1 each) each summed to its
#:   operand's shape (read 1 each), and the split of t a cat of its pieces' gradients (read 1,
#:   write 1): 8. The router's probabilities are in its logits' dtype (moe_utils.py line 936
#:   `probs.type_as(logits)`: bf16 without moe_router_dtype, which Megatron-Bridge's gpt-oss
#:   leaves unset), so no fp32 copies, and the closing `.to(dtype)` is a no-op.
#: tests/test_moe_gemm.py counts both on real tensors. With the op fuser
#: (use_transformer_engine_op_fuser: GroupedLinear, ScaledClampedQGeGLU and GroupedLinear with
#: scale_bias, experts.py lines 488-531) none of these passes run.
CLAMP_PASSES = {"forward": (8, 0), "backward": (11, 8)}
FC2_BIAS_PASSES = {"forward": (6, 0), "backward": (8, 0)}


def unfused_expert_mlp_runs(arch: ModelArch, kernels: str, fused_mlp: bool) -> bool:
    """Megatron-Core's TEGroupedMLP runs its unfused path: the megatron kernel path, a MoE
    model, Transformer Engine's op fuser not set (Training.moe_fused_mlp)."""
    return kernels == "megatron" and not fused_mlp and arch.is_moe


def unfused_expert_bytes_per_token_layer(arch: ModelArch, kernels: str, activation_bytes: float,
                                         recompute: bool, fused_mlp: bool = False) -> float:
    """Bytes of memory traffic per token and MoE layer that Megatron-Core's unfused expert MLP
    adds to the fused activation's, over each of the top-k routed copies: CLAMP_PASSES over the
    f-wide halves with a clamped activation (arch.glu_clamp), FC2_BIAS_PASSES over the d-wide
    output with biased experts (arch.expert_bias); forward and backward, the forward twice under
    full recomputation. 0 off the megatron path, with the op fuser (`fused_mlp`), or for a
    model with neither."""
    if not unfused_expert_mlp_runs(arch, kernels, fused_mlp):
        return 0.0
    forwards = 2 if recompute else 1

    def bytes_of(passes: dict[str, tuple[int, int]]) -> float:
        (fe, fm), (be, bm) = passes["forward"], passes["backward"]
        return forwards * (fe * activation_bytes + fm) + be * activation_bytes + bm

    per_copy = 0.0
    if arch.glu_clamp is not None and arch.gated_mlp:
        per_copy += bytes_of(CLAMP_PASSES) * arch.moe_intermediate_size
    if arch.expert_bias:
        per_copy += bytes_of(FC2_BIAS_PASSES) * arch.hidden_size
    return arch.experts_per_token * per_copy


#: selective recomputation (Training.recompute_modules; NVIDIA/Megatron-LM@2a75ac12): "moe_act"
#: runs TEGroupedMLP's bias_act_func again in backward (experts.py lines 266-271, 904-913:
#: CheckpointWithoutOutput): the fused activation's forward, reading the 2 f-wide fc1 output
#: and writing the f-wide result (3 elements per f), and with a clamp CLAMP_PASSES' forward;
#: "layernorm" runs the norms that are modules of their own again (transformer_layer.py lines
#: 448-505): on the megatron path's Transformer Engine layers only a MoE layer's pre-MLP norm
#: (the attention's input norm and a dense MLP's are fused into their linears), read d and
#: write d
ACTIVATION_FORWARD_ELEMENTS = 3
NORM_FORWARD_ELEMENTS = 2


def recompute_bytes_per_token_layer(arch: ModelArch, kernels: str, activation_bytes: float,
                                    modules: tuple[str, ...] | None,
                                    fused_mlp: bool = False) -> float:
    """Bytes of memory traffic per token and MoE layer of the megatron path's selective
    recomputation (`modules`, Training.recompute_modules): moe_act's activation forward over
    each routed copy on the unfused expert MLP (the op fuser's fused activation recomputes
    inside its own kernel: not counted), layernorm's pre-MLP norm. 0 without modules, off the
    megatron path, or for a dense model."""
    if not modules or kernels != "megatron" or not arch.is_moe:
        return 0.0
    total = 0.0
    if "moe_act" in modules and unfused_expert_mlp_runs(arch, kernels, fused_mlp):
        per_f = ACTIVATION_FORWARD_ELEMENTS * activation_bytes
        if arch.glu_clamp is not None and arch.gated_mlp:
            per_f += CLAMP_PASSES["forward"][0] * activation_bytes + CLAMP_PASSES["forward"][1]
        total += arch.experts_per_token * arch.moe_intermediate_size * per_f
    if "layernorm" in modules:
        total += NORM_FORWARD_ELEMENTS * arch.hidden_size * activation_bytes
    return total


def expert_matmul_flops_per_token(arch: ModelArch, trains_weights: bool, recompute: bool) -> float:
    """The routed experts' matmul FLOPs per token over the layers (2 per multiply-add): the
    top-k experts' linears forward, their backward (input and weight gradient, or the input
    gradient alone when the experts are frozen), and the forward again under recomputation.
    Shared experts and the router run over every token as dense GEMMs: not here."""
    if not arch.is_moe:
        return 0.0
    d, f = arch.hidden_size, arch.moe_intermediate_size
    weights = (3 if arch.gated_mlp else 2) * d * f * arch.experts_per_token * arch.moe_layers
    forward = 2.0 * weights
    return forward * (1 + (2 if trains_weights else 1) + (1 if recompute else 0))
