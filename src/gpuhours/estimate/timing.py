"""Step time of a training step per GPU, seconds, by part, with the bottleneck named.

Roofline: matmuls run at the GPU's GEMM efficiency (assumptions.py) scaled by the width of the
matrices; attention kernels at a lower share; non-matmul work is memory-bound at the achievable
bandwidth; in eager mode the host issues every operator (counted per layer, assumptions.py) and
host and GPU time of a micro-batch combine as a p-norm (partial overlap); the optimizer moves
the bytes its implementation is counted to move; communication over the interconnect is partly
hidden behind compute. A model-parallel layout (estimate/parallel.py) divides each GPU's share
of the compute by tp x pp x cp, adds the pipeline bubble and each collective on its own link.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuhours.catalog.schema import GpuSpec
from gpuhours.errors import FieldError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate import parallel as P
from gpuhours.estimate.activation_offload import (
    host_link_for_offload,
    offload_exposed_s,
    offload_pcie_s,
)
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.bnb_int8 import int8_input_quant_bytes
from gpuhours.estimate.compiled import (
    COMPILED_CE_TRAFFIC_BYTES_PER_LOGIT,
    compiled_elementwise_bytes_per_token_layer,
    compiled_layer_applies,
    compiled_loss_applies,
)
from gpuhours.estimate.dora import (
    dora_elementwise_bytes_per_token_layer,
    dora_flops_per_micro_batch,
    dora_flops_per_token,
    dora_norm_bytes_per_micro_batch,
)
from gpuhours.estimate.flops import TrainingFlops
from gpuhours.estimate.host import (
    host_ops_per_micro_batch,
    megatron_expert_gemm_calls_per_micro_batch,
    megatron_expert_gemm_forward_calls_per_micro_batch,
    megatron_moe_forward_syncs_per_micro_batch,
    megatron_moe_host_op_weight,
    megatron_ops_by_pass,
    moe_router_dtype_of,
)
from gpuhours.estimate.kv_repeat import (
    repeated_kv_copy_bytes_per_token_layer,
    repeated_kv_extra_bytes_per_token_layer,
)
from gpuhours.estimate.liger import (
    eager_replaced_saved_bytes_per_token_layer,
    liger_layer_applies,
    liger_moved_bytes_per_token_layer,
)
from gpuhours.estimate.lora_traffic import (
    generic_lora_saved_bytes_per_token_layer,
    lora_branch_bytes_per_token_layer,
)
from gpuhours.estimate.megatron_2021 import (
    score_bytes_per_token_layer as megatron_2021_score_bytes_per_token_layer,
)
from gpuhours.estimate.memory import (
    ACTIVATION_BYTES,
    LORA_ADAPTED,
    QLORA_BYTES_PER_PARAM,
    activation_bytes_per_token_layer,
    kbit_upcast_active,
    offloaded_activation_bytes,
    quantised_params,
    residual_bytes,
    state_bytes_per_param,
)
from gpuhours.estimate.moe_gemm import (
    expert_gemm_slowdown,
    expert_matmul_flops_per_token,
    expert_shapes,
    recompute_bytes_per_token_layer,
    routing_bytes_per_token_layer,
    unfused_expert_bytes_per_token_layer,
)
from gpuhours.estimate.offload import OffloadTime, host_link_bytes_per_s
from gpuhours.estimate.params import count_params
from gpuhours.estimate.pipe_engine import pipe_engine_grad_sync_bytes
from gpuhours.estimate.quant import (
    dequant_bytes_per_weight,
    dequants_per_micro_batch,
    weight_read_bytes_per_micro_batch,
)
from gpuhours.estimate.rope import unfused_rope_bytes_per_token_layer
from gpuhours.estimate.unsloth import offloaded_checkpoint_copy_s
from gpuhours.estimate.vision_host import vision_host_ops_per_micro_batch
from gpuhours.setup import Hardware, Training, deepspeed_overlap_comm_of, loss_kernel_of

_PEAK_KEY = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16", "bf16-mixed": "bf16",
             "fp16-mixed": "fp16", "bf16-amp": "bf16", "fp16-amp": "fp16", "fp8-mixed": "fp8"}


def peak_flops(gpu: GpuSpec, precision: str) -> float:
    """Dense peak FLOP/s of `gpu` for the matmul precision of `precision` (datasheet); for
    fp8-mixed the fp8 peak (its MFU is counted against it)."""
    key = _PEAK_KEY[precision]
    if key == "fp8":
        check_fp8(gpu)
    tflops = getattr(gpu.dense_tflops, key)
    if tflops is None:
        raise FieldError("precision", f"{gpu.name} has no {key} matmul rate in the catalog.",
                         _precision_hint(gpu, precision))
    return tflops * 1e12


def _precision_hint(gpu: GpuSpec, precision: str) -> str:
    """What to run instead on a GPU without `precision`'s matmul rate: the same scheme in the
    other half precision (bf16-mixed -> fp16-mixed, with fp32 master weights and loss scaling;
    bf16-amp -> fp16-amp; bf16 -> fp16), as a V100 or T4 user runs it, else fp32."""
    other = {"bf16": "fp16", "fp16": "bf16"}
    half = precision[:4]
    if half in other and getattr(gpu.dense_tflops, other[half]):
        swapped = other[half] + precision[4:]
        scaling = ", with loss scaling" if other[half] == "fp16" and precision[4:] else ""
        return (f"Use --precision {swapped} (the same scheme in {other[half]}{scaling})"
                + (", or fp32." if gpu.dense_tflops.fp32 else "."))
    return "Use --precision fp32." if gpu.dense_tflops.fp32 else "Give --peak-tflops."


def check_fp8(gpu: GpuSpec) -> None:
    """Refuse fp8-mixed on a GPU without fp8 tensor cores (before Hopper and Ada; MI250X, TPUs),
    or one whose fp8 GEMM efficiency has no entry in assumptions.py."""
    if (gpu.dense_tflops.fp8 is None
            or gpu.generation not in A.FP8_GEMM_EFFICIENCY_BY_GENERATION):
        has = sorted(A.FP8_GEMM_EFFICIENCY_BY_GENERATION)
        raise FieldError("precision", f"{gpu.name} ({gpu.generation}) has no fp8 tensor cores: "
                         f"fp8-mixed needs a GPU of generation {', '.join(has)} with an fp8 rate "
                         f"in the catalog.", "Use bf16-mixed (or fp16-mixed on GPUs without "
                         "bf16).")


#: vendors whose devices run the 4-bit bases' kernels (bitsandbytes, GPTQ and torchao's NF4
#: are CUDA, and bitsandbytes also ROCm): no TPU, Apple or Intel device runs QLoRA here
QLORA_VENDORS = ("NVIDIA", "AMD")


def check_cuda_runtime_flags(t: Training, gpu: GpuSpec) -> None:
    """Refuse the options that describe a CUDA (or ROCm) PyTorch step on another stack: a TPU's
    XLA program or a measured CPU has no kernel launches to block (`cuda_launch_blocking`)
    and runs no DeepSpeed PipelineEngine (`deepspeed_pipe_engine`)."""
    for field, on in (("cuda_launch_blocking", t.cuda_launch_blocking),
                      ("deepspeed_pipe_engine", t.deepspeed_pipe_engine)):
        if on and gpu.stack != "torch-cuda":
            raise FieldError((field, "gpu"), f"{field} describes a PyTorch step on CUDA or ROCm "
                             f"(kernel launches, DeepSpeed's engine); {gpu.name} runs the "
                             f"{gpu.stack} stack.", f"Leave {field} off on {gpu.name}.")


def check_qlora(gpu: GpuSpec) -> None:
    """Refuse QLoRA on a device without the 4-bit bases' kernels (a TPU): the same rule by
    which fit never offers QLoRA there (remedies.py). A CPU the ledger measured is left to its
    measurement (bitsandbytes has CPU kernels; `gpuhours bench` ran what it ran)."""
    if gpu.vendor not in QLORA_VENDORS and gpu.stack != "cpu":
        raise FieldError(("method", "gpu"), f"{gpu.name} ({gpu.vendor} {gpu.generation}) runs "
                         f"none of the 4-bit bases modelled: bitsandbytes' NF4, GPTQ/AWQ and "
                         f"torchao's NF4 kernels are CUDA (bitsandbytes also ROCm), so QLoRA "
                         f"needs an NVIDIA or AMD GPU.",
                         "Use --method lora (a 16-bit base) on this device.")


def fp8_gemm_efficiency(gpu: GpuSpec, hidden_size: int) -> float:
    """Achieved fraction of the dense fp8 peak for fp8-mixed's GEMMs: generation x width."""
    check_fp8(gpu)
    base = A.fp8_gemm_efficiency_entry(gpu.generation, gpu.compute_capability).value
    return base * hidden_size / (hidden_size + A.GEMM_HALF_WIDTH.value)


def fp8_matmul_flops_per_token(arch: ModelArch, t: Training, flops: TrainingFlops) -> float:
    """The matmul FLOPs per token fp8-mixed runs in fp8: the decoder layers' linears (forward,
    backward, recomputation). The LM head stays in bf16 (Megatron-LM keeps its output layer
    outside Transformer Engine; torchtitan's float8 converter skips `output`), as do LoRA
    adapters and a vision tower; the head's FLOPs are 6 x its weights per token when it trains,
    4 x when frozen (LoRA: no weight gradient)."""
    head = count_params(arch).lm_head_matmul * (6.0 if t.method == "full" else 4.0)
    layers = flops.matmul_forward + flops.matmul_backward + flops.recompute_matmul - head
    return max(layers, 0.0)


def fp8_cast_bytes_per_token(arch: ModelArch) -> float:
    """Bytes fp8-mixed's casts move per token over the layers: each decoder-layer linear's input
    (q/k/v share one: d; o_proj: q; gate/up share one: d; down_proj: f) and each output
    gradient (q + 2 kv; d; 2 f or f; d), per routed expert for an MoE's MLP, at
    assumptions.FP8_CAST_BYTES_PER_ELEMENT."""
    d, q, kv = arch.hidden_size, arch.q_dim, arch.kv_dim
    f = arch.moe_intermediate_size if arch.is_moe else arch.intermediate_size
    experts = arch.experts_per_token if arch.is_moe else 1
    mlp_out = 2 * f if arch.gated_mlp else f
    elements = (d + q) + (q + 2 * kv) + d + experts * ((d + f) + (mlp_out + d))
    return arch.num_layers * elements * A.FP8_CAST_BYTES_PER_ELEMENT.value


def product_matmul_factor(gpu: GpuSpec) -> float:
    """For a GeForce card: its measured square-matmul share of its bf16 dense peak (catalog
    matmul_measured_tflops / dense_tflops.bf16) over the share of the product its generation's
    GEMM efficiency is about (assumptions.GEMM_REFERENCE_MATMUL_SHARE), dimensionless. GeForce
    peaks are rated at the boost clock, which the cards run above (RTX 3090 1.08, 4090 1.00 of
    the rated peak, where the A100 SXM reaches 0.85: matmul_microbench.csv), as GeForce
    Blackwell's own entry (assumptions.GEMM_EFFICIENCY_BY_SM_MAJOR) already takes. 1 for other
    parts (the data-centre and professional parts' measured shares, recorded in the catalog, are
    not applied: docs/validation.md 'GEMM efficiency per product'), where a figure is missing,
    or where the part's compute-capability major has an entry of its own."""
    ref = A.GEMM_REFERENCE_MATMUL_SHARE.get(gpu.generation)
    peak = gpu.dense_tflops.bf16
    if ref is None or gpu.matmul_measured_tflops is None or not peak \
            or "GeForce" not in gpu.full_name:
        return 1.0
    if A.gemm_efficiency_entry(gpu.generation, gpu.compute_capability) \
            is not A.GEMM_EFFICIENCY_BY_GENERATION[gpu.generation]:
        return 1.0
    return gpu.matmul_measured_tflops / peak / ref.value


def gemm_efficiency_assumptions(gpu: GpuSpec) -> list[A.Assumption]:
    """The assumptions `gemm_efficiency` rests on for `gpu`, for the figure's basis: its
    entry (assumptions.gemm_efficiency_entry) and, where product_matmul_factor applies, the
    reference product's share that factor divides by."""
    entry = A.gemm_efficiency_entry(gpu.generation, gpu.compute_capability)
    if product_matmul_factor(gpu) == 1.0:
        return [entry]
    return [entry, A.GEMM_REFERENCE_MATMUL_SHARE[gpu.generation]]


def gemm_efficiency_basis(gpu: GpuSpec) -> str:
    """`gemm_efficiency`'s basis in words: the entry and, on a GeForce card with a measured
    matmul rate, the product factor with its measured rate and reference share."""
    entry = A.gemm_efficiency_entry(gpu.generation, gpu.compute_capability)
    text = f"{entry.name} {entry.value}"
    factor = product_matmul_factor(gpu)
    if factor != 1.0:
        ref = A.GEMM_REFERENCE_MATMUL_SHARE[gpu.generation]
        text += (f" x {factor:.3f} ({gpu.name}'s measured matmul "
                 f"{gpu.matmul_measured_tflops:g} of {gpu.dense_tflops.bf16:g} TFLOPS over "
                 f"{ref.name} {ref.value})")
    return text


def gemm_efficiency(gpu: GpuSpec, hidden_size: int) -> float:
    """Achieved fraction of dense peak for the model's GEMMs: the part's generation (or
    generation and compute-capability major: assumptions.gemm_efficiency_entry) x the product's
    measured matmul rate over its generation's reference product's (product_matmul_factor) x
    width factor."""
    base = A.gemm_efficiency_entry(gpu.generation, gpu.compute_capability).value
    width = hidden_size / (hidden_size + A.GEMM_HALF_WIDTH.value)
    return base * product_matmul_factor(gpu) * width


def attention_assumption(gpu: GpuSpec, fused: bool) -> A.Assumption | None:
    """The generation's own attention rate for the kernel (fused: cuDNN / FlashAttention-3 or
    -4; else PyTorch SDPA's), or None where assumptions.py has none, or where its entry holds
    for another compute-capability major than the part's (A.ATTENTION_TABLE_SM_MAJOR: Blackwell's
    entries are 10.x's, not the GeForce RTX 50's 12.x). A compute capability with its own
    published figures (A.ATTENTION_TABLE_BY_COMPUTE_CAPABILITY: 10.3, Blackwell Ultra) takes
    its own entry."""
    table = (A.ATTENTION_EFFICIENCY_BY_GENERATION if fused
             else A.SDPA_ATTENTION_EFFICIENCY_BY_GENERATION)
    major = A.ATTENTION_TABLE_SM_MAJOR.get(gpu.generation)
    if major is not None and (gpu.compute_capability is None
                              or int(gpu.compute_capability.split(".")[0]) != major):
        return None
    key = A.ATTENTION_TABLE_BY_COMPUTE_CAPABILITY.get(gpu.compute_capability or "",
                                                      gpu.generation)
    return table.get(key)


def attention_efficiency(gpu: GpuSpec, hidden_size: int, fused: bool = False,
                         kernels: str = "eager") -> float:
    """Achieved fraction of dense (bf16) peak per causal attention FLOP of flash attention: the
    generation's own figure for the kernel where assumptions.py has one (the flash-attn package
    called by the model's code, `kernels` "flash-attn": FLASH_ATTN2_EFFICIENCY_BY_GENERATION;
    Hopper: fused, cuDNN or FlashAttention-3, else SDPA's FlashAttention-2; Blackwell 10.x:
    cuDNN's, fused or through SDPA), else a share of the GEMM efficiency
    (ATTENTION_EFFICIENCY_RATIO)."""
    if kernels == "flash-attn" and not fused:
        fa2 = A.FLASH_ATTN2_EFFICIENCY_BY_GENERATION.get(gpu.generation)
        if fa2 is not None:
            return fa2.value
    own = attention_assumption(gpu, fused)
    if own is not None:
        return own.value
    return gemm_efficiency(gpu, hidden_size) * A.ATTENTION_EFFICIENCY_RATIO.value


def link_bandwidth_bytes_per_s(hw: Hardware) -> tuple[float, str]:
    """Per-GPU bandwidth of the slowest link a ring collective crosses, one direction, B/s."""
    if hw.num_nodes > 1:
        return hw.inter_node_gb_per_s_one_way * 1e9, "inter-node network"
    return _within_node_link(hw.gpu, hw.pcie_lanes)


def _within_node_link(gpu: GpuSpec, lanes: int | None = None) -> tuple[float, str]:
    """Per-GPU one-way bandwidth between GPUs of one node, B/s: the catalog's GPU link.

    PCIe cards that cannot address each other's memory (catalog `peer_to_peer: false`, the
    GeForce parts) get no NCCL P2P transport: its p2pCanConnect asks cudaDeviceCanAccessPeer
    and declines the pair, and the SHM transport copies every chunk through a buffer in host
    memory (NVIDIA/nccl@5067397c src/transport/p2p.cc, shm.cc "via SHM/direct"). The link is
    then the catalog's measured host-staged figure, half of its two-way total per direction.
    PCIe figures are for x16 slots; on `lanes` (Hardware.pcie_lanes) fewer, lanes/16 of them."""
    if gpu.interconnect_gb_per_s_two_way and gpu.interconnect in ("nvlink", "xgmi", "ici"):
        return gpu.interconnect_gb_per_s_two_way / 2 * 1e9, gpu.interconnect
    share = (lanes or 16) / 16
    narrow = f", x{lanes} slots" if lanes and lanes < 16 else ""
    if gpu.interconnect == "pcie" and gpu.peer_to_peer is False \
            and gpu.host_staged_gb_per_s_two_way:
        return (gpu.host_staged_gb_per_s_two_way / 2 * 1e9 * share,
                f"pcie staged through host memory (no peer-to-peer{narrow})")
    if gpu.interconnect == "pcie" and gpu.interconnect_gb_per_s_two_way:
        return gpu.interconnect_gb_per_s_two_way / 2 * 1e9 * share, "pcie" + narrow
    return (A.PCIE_FALLBACK_GB_PER_S_ONE_WAY.value * 1e9 * share,
            "pcie (assumed" + narrow + ")")


def groups_cross_nodes(num_gpus: int, gpus_per_node: int, span_gpus: int) -> bool:
    """Whether some group of `span_gpus` consecutive ranks, the groups starting at multiples of
    it (ranks 0..span-1, span..2 span-1, ...), has ranks on two nodes of `gpus_per_node`:
    when span is wider than a node, or does not divide it and a group reaches the first node
    boundary (12 GPUs in nodes of 6, groups of 4: ranks 4-7 span two nodes)."""
    if num_gpus <= gpus_per_node:
        return False
    if span_gpus > gpus_per_node:
        return True
    if gpus_per_node % span_gpus == 0:
        return False
    # the group around the first node boundary: starts below it, ends at or past it
    return (gpus_per_node // span_gpus + 1) * span_gpus <= num_gpus


def group_link_bytes_per_s(hw: Hardware, span_gpus: int) -> tuple[float, str]:
    """Per-GPU one-way bandwidth of a collective whose ranks lie within `span_gpus` consecutive
    GPUs (Megatron-LM's rank order: tensor innermost, then context, data, pipeline; each group
    starting at a multiple of its span): the GPU's own link (NVLink) when every group lies in
    one node, the network between nodes otherwise (the step waits for the slowest group)."""
    if not groups_cross_nodes(hw.num_gpus, hw.gpus_per_node, span_gpus):
        return _within_node_link(hw.gpu, hw.pcie_lanes)
    return hw.inter_node_gb_per_s_one_way * 1e9, "inter-node network"


#: GPU generations whose NVSwitch runs CUDA multicast, which Transformer Engine's userbuffers
#: (--tp-comm-overlap) need (NVIDIA/TransformerEngine issue 1071, a maintainer: "relies on
#: CUDA Multicast handles")
TP_OVERLAP_GENERATIONS = ("hopper", "blackwell")


@dataclass(frozen=True)
class StepTime:
    """Seconds per optimizer step per GPU, by part; `step_time_s` is their combination."""

    matmul_s: float
    attention_s: float
    memory_bound_s: float
    #: host seconds to issue the step's operators (eager mode), all micro-batches
    host_s: float
    #: the part of host_s the GPU waits for: combined micro-batch time minus GPU time
    host_exposed_s: float
    optimizer_s: float
    communication_s: float
    communication_exposed_s: float
    step_time_s: float
    bottleneck: str
    gemm_efficiency: float
    attention_efficiency: float
    link: str
    #: model-parallel layouts: the idle share of the pipeline and each collective on its link
    pipeline_bubble_s: float = 0.0
    collectives: tuple[P.Collective, ...] = ()
    #: CPU offload: PCIe traffic, the host's Adam step, the weights copied up
    offload: OffloadTime | None = None
    #: the part of matmul_s the routed experts' small GEMMs add (estimate/moe_gemm.py), before
    #: the layout's split of the layers
    expert_gemm_s: float = 0.0
    #: checkpoint_offload's copies of the block inputs to the host and back, on the compute
    #: stream (estimate/unsloth.py): added to the step
    checkpoint_copy_s: float = 0.0
    #: the largest part of the step as summed (exposed time): the bottleneck unless the
    #: collectives in all outlast the compute (network_bottleneck), when that names them
    largest_part: str = ""

    @property
    def compute_s(self) -> float:
        return self.matmul_s + self.attention_s + self.memory_bound_s


def training_step_time(arch: ModelArch, t: Training, hw: Hardware, flops: TrainingFlops,
                       trainable_params: int, efficiency_scale: float = 1.0) -> StepTime:
    """Time of one optimizer step (grad_accum micro-batches) on one GPU of `hw`.

    `efficiency_scale` multiplies the compute efficiencies (calibration from measurements).
    """
    gpu = hw.gpu
    check_cuda_runtime_flags(t, gpu)
    if t.method == "qlora":
        check_qlora(gpu)
    fp8 = t.precision == "fp8-mixed"
    if fp8:
        check_fp8(gpu)  # before the bf16 rate: a V100 lacks both, and fp8 is what was asked
    # fp8-mixed: attention, the LM head and everything but the layers' GEMMs run in bf16
    peak = peak_flops(gpu, "bf16-mixed" if fp8 else t.precision)
    tokens = t.tokens_per_micro_batch * t.grad_accum
    e_mm = gemm_efficiency(gpu, arch.hidden_size) * efficiency_scale
    e_attn = attention_efficiency(gpu, arch.hidden_size, t.fused_attention,
                                  t.kernels) * efficiency_scale
    bw = gpu.memory_bw_gb_per_s * 1e9 * A.BANDWIDTH_EFFICIENCY.value

    matmul_s = tokens * flops.matmul_flops_per_token / (peak * e_mm)
    fp8_cast_traffic = 0.0
    if fp8:
        fp8_flops = fp8_matmul_flops_per_token(arch, t, flops)
        e_fp8 = fp8_gemm_efficiency(gpu, arch.hidden_size) * efficiency_scale
        matmul_s = tokens * ((flops.matmul_flops_per_token - fp8_flops) / (peak * e_mm)
                             + fp8_flops / (peak_flops(gpu, t.precision) * e_fp8))
        fp8_cast_traffic = tokens * fp8_cast_bytes_per_token(arch)
    expert_gemm_s = expert_gemm_extra_s(arch, t, hw, tokens, e_mm, efficiency_scale)
    matmul_s += expert_gemm_s
    # DoRA: B A through an identity per micro-batch, and the recomputed base matmul per token
    # (estimate/dora.py), at the GEMM rate (assumed: B A's r-wide GEMMs are not slower)
    matmul_s += (t.grad_accum * dora_flops_per_micro_batch(arch, t)
                 + tokens * dora_flops_per_token(arch, t)) / (peak * e_mm)
    if t.flash_attention:
        attention_s = tokens * flops.attention_flops_per_token / (peak * e_attn)
        score_traffic = 0.0
    else:
        # unfused attention: score matmuls at GEMM rate, over the full (masked) S x S matrix,
        # plus the score matrix's memory traffic
        attention_s = tokens * 2 * flops.attention_flops_per_token / (peak * e_mm)
        score_traffic = 0.0
    tensors, scores = activation_bytes_per_token_layer(arch, t.precision, t.flash_attention,
                                                       t.seq_len, t.method, t.lora_targets,
                                                       t.lora_rank,
                                                       eager_attention=t.eager_attention)
    passes = A.ELEMENTWISE_PASSES.value + (1.0 if t.checkpointing else 0.0)
    a = ACTIVATION_BYTES[t.precision]
    # k and v repeated to the query heads: saved wider (estimate/kv_repeat.py)
    elementwise = (tensors + repeated_kv_extra_bytes_per_token_layer(arch, t, a)) * passes
    if liger_layer_applies(arch, t) is None:
        # Liger's RMSNorm, RoPE and SwiGLU kernels, each one read and one write of its tensors
        # (estimate/liger.py), in place of eager's passes over what those parts save
        r = residual_bytes(t.precision)
        elementwise += (liger_moved_bytes_per_token_layer(arch, t, a, r)
                        - eager_replaced_saved_bytes_per_token_layer(
                            arch, a, r, t.method == "full", t.liger_kernels == "classes")
                        * passes)
    if compiled_layer_applies(arch, t) is None:
        # torch.compile: Inductor's fused kernels, each one read and one write of its tensors
        # (estimate/compiled.py), in place of eager's passes over the saved tensors
        elementwise = (compiled_elementwise_bytes_per_token_layer(arch, t, a)
                       + repeated_kv_copy_bytes_per_token_layer(arch, t, a))
    if t.kernels == "megatron-2021":
        # Megatron-LM's unfused attention: the score matrix through baddbmm, the fused softmax,
        # dropout and bmm, and back, each pass counted (estimate/megatron_2021.py)
        scores_moved = megatron_2021_score_bytes_per_token_layer(
            arch, t.seq_len, t.checkpointing, ACTIVATION_BYTES[t.precision])
    else:
        scores_moved = scores * 3
    layer_traffic = tokens * arch.num_layers * (elementwise + scores_moved + score_traffic)
    if t.method != "full" and not arch.encoder and compiled_layer_applies(arch, t) is not None:
        # peft's LoRA branch, counted operator by operator (estimate/lora_traffic.py), in
        # place of the generic passes over the adapters' saved inputs
        kept = a if t.precision.endswith(("-mixed", "-amp")) else 4
        # (compiled: Inductor fuses the branch's elementwise operators, as the fused branch)
        branch = 0.0 if t.compile else lora_branch_bytes_per_token_layer(arch, t, a)
        if branch > 0:  # a fused branch keeps the generic count
            generic = generic_lora_saved_bytes_per_token_layer(arch, t, a, kept) * passes
            layer_traffic += tokens * arch.num_layers * max(branch - generic, 0.0)
    per_logit = (COMPILED_CE_TRAFFIC_BYTES_PER_LOGIT[loss_kernel_of(t)] if compiled_loss_applies(t)
                 else A.LOSS_KERNEL_LOGITS_TRAFFIC[loss_kernel_of(t)].value)
    logit_traffic = 0.0 if arch.encoder else tokens * arch.vocab_size * per_logit * a / 2
    dequant_traffic = 0.0
    if t.method == "qlora":
        # each 4-bit weight dequantised to 16 bits (estimate/quant.py: bitsandbytes' one kernel,
        # or auto-gptq's five PyTorch intermediates) as often as the kernel does it, and the
        # 16-bit weight read back by each matmul that uses it
        # (fp32 compute: the weight dequantised to fp32 and read by fp32 matmuls, 4 bytes)
        ckpt = t.checkpointing
        compute_bytes = 4.0 if t.precision == "fp32" else 2.0
        one = dequant_bytes_per_weight(t.base_quant, t.tokens_per_micro_batch, compute_bytes)
        dequant_traffic = t.grad_accum * quantised_params(arch) * (
            dequants_per_micro_batch(t.base_quant, ckpt) * one
            + weight_read_bytes_per_micro_batch(t.base_quant, ckpt, compute_bytes))
        # bitsandbytes' int8 linears quantise their input at every call (estimate/bnb_int8.py)
        dequant_traffic += tokens * arch.num_layers * int8_input_quant_bytes(
            arch, t.base_quant, ckpt, a)
    layer_traffic += fp8_cast_traffic
    # DoRA's weight norm over every adapted weight per micro-batch and its rescaling of the
    # outputs per token (estimate/dora.py; peft's eager operators, also under compile)
    layer_traffic += (t.grad_accum * dora_norm_bytes_per_micro_batch(arch, t, a)
                      + tokens * arch.num_layers * dora_elementwise_bytes_per_token_layer(
                          arch, t, a))
    # an MoE layer's token permutation, weighting and combine, and its router's logits
    layer_traffic += tokens * arch.moe_layers * routing_bytes_per_token_layer(
        arch, t.kernels, a, t.checkpointing, t.moe_dispatch, t.ep,
        moe_router_dtype_of(t) if t.kernels == "megatron" else "fp32")
    # Megatron-Core's eager rotary where TE's fused one cannot run (a YaRN factor: gpt-oss)
    layer_traffic += tokens * arch.attention_layer_count * unfused_rope_bytes_per_token_layer(
        arch, t.kernels, a, t.checkpointing)
    # Megatron-Core's unfused expert MLP: an eager clamp and the per-expert fc2 bias (gpt-oss)
    layer_traffic += tokens * arch.moe_layers * unfused_expert_bytes_per_token_layer(
        arch, t.kernels, a, t.checkpointing, t.moe_fused_mlp)
    # selective recomputation: the experts' activation, a MoE layer's pre-MLP norm
    layer_traffic += tokens * arch.moe_layers * recompute_bytes_per_token_layer(
        arch, t.kernels, a, t.recompute_modules, t.moe_fused_mlp)
    memory_bound_s = (layer_traffic + logit_traffic + dequant_traffic) / bw
    lay = P.layout_of(t.tp, t.pp, t.cp, t.ep, t.virtual_stages, hw.num_gpus, arch,
                      a2a_overlap=t.moe_a2a_overlap)
    stage_share = 1.0  # the slowest pipeline stage's share of the decoder layers
    if not lay.trivial:
        # a GPU runs 1/(tp cp) of each of its stage's layers; the LM head and the loss sit on
        # the last stage; the pipeline keeps the pace of the slowest stage (Narayanan et al.
        # 2021): with uneven stages (parallel.stage_layers) a fuller middle stage may be it
        split = lay.tp * lay.cp
        head_s = tokens * 6.0 * count_params(arch).lm_head_matmul / (peak * e_mm)
        layer_s = matmul_s - head_s + attention_s + (layer_traffic + dequant_traffic) / bw
        ends_s = head_s + logit_traffic / bw
        shares = P.stage_fractions(lay)
        slowest = max(range(lay.pp), key=lambda i: (
            shares[i] * layer_s + (ends_s if i == lay.pp - 1 else 0.0), i))
        stage_share, last = shares[slowest], slowest == lay.pp - 1
        matmul_s = ((matmul_s - head_s) * stage_share + (head_s if last else 0.0)) / split
        attention_s *= stage_share / split
        memory_bound_s = ((layer_traffic + dequant_traffic) * stage_share
                          + (logit_traffic if last else 0.0)) / split / bw
    gpu_compute_s = matmul_s + attention_s + memory_bound_s
    if not eager_host_dispatch(gpu):
        # on a CPU the operators run on the host itself: their dispatch is inside the measured
        # compute rate, not a second timeline beside it; on a TPU XLA runs the step as one
        # compiled program (eager_host_dispatch)
        host_s = host_exposed_s = 0.0
    else:
        # Megatron-Core's MoE router and dispatcher operators at their own host time
        # (host.megatron_moe_host_op_weight: measured on one CPU against the eager layer's)
        moe_weight = megatron_moe_host_op_weight()
        host_s = t.grad_accum * host_ops_per_micro_batch(arch, t, moe_weight) \
            * host_s_per_op(hw) * stage_share
        # TE's grouped GEMM: one cuBLASLt call per local expert from C++ (host.py), at the
        # published per-call figure scaled by this host's ratio to the x86 operator figure
        host_s += (t.grad_accum * megatron_expert_gemm_calls_per_micro_batch(arch, t)
                   * A.CUBLASLT_GEMM_HOST_S.value * host_s_per_op(hw) / A.HOST_S_PER_OP.value
                   * stage_share)
        # a vision tower's operators, combined with its own GPU work (host_gpu_combined_s)
        tower_host_s = t.grad_accum * vision_host_ops_per_micro_batch(t) * host_s_per_op(hw)
        tower_gpu_s = (tokens * (flops.vision_matmul_flops_per_token / (peak * e_mm)
                                 + flops.vision_attention_flops_per_token / (peak * e_attn))
                       if lay.trivial else 0.0)
        # Megatron-Core's MoE dispatcher waits on the host for the token counts in every MoE
        # layer's forward (host.megatron_moe_forward_syncs_per_micro_batch): the forward is
        # combined apart from the backward, and each wait costs a host operator
        syncs = (t.grad_accum * megatron_moe_forward_syncs_per_micro_batch(arch, t)
                 * stage_share)
        forward_pass = None
        if syncs:
            per_call = A.CUBLASLT_GEMM_HOST_S.value * host_s_per_op(hw) / A.HOST_S_PER_OP.value
            forward_host_s = t.grad_accum * stage_share * (
                megatron_ops_by_pass(arch, t, moe_weight)[0] * host_s_per_op(hw)
                + megatron_expert_gemm_forward_calls_per_micro_batch(arch, t) * per_call)
            forward_pass = (forward_host_s,
                            (gpu_compute_s - tower_gpu_s) * forward_share(flops))
        combined = host_gpu_combined_s(host_s, gpu_compute_s - tower_gpu_s, tower_host_s,
                                       tower_gpu_s, lay.trivial, forward_pass=forward_pass,
                                       sync_s=syncs * host_s_per_op(hw))
        host_s += tower_host_s
        host_exposed_s = combined - gpu_compute_s
        if t.cuda_launch_blocking:
            # each launch returns only when its kernel has run: no operator is issued while
            # the GPU runs the one before, so the host's time adds to the GPU's in full
            host_exposed_s = host_s
    compute_s = gpu_compute_s + host_exposed_s
    # activation offloading's copies on their side stream (estimate/activation_offload.py)
    act_offload_s = (_activation_offload_exposed_s(arch, t, hw, gpu_compute_s)
                     if t.activation_offload else 0.0)
    compute_s += act_offload_s

    optimizer_s = _optimizer_time_s(t, trainable_params, hw, bw)
    if eager_host_dispatch(gpu):
        optimizer_s = _with_optimizer_host_s(t, optimizer_s,
                                             optimizer_ops(arch, t) * host_s_per_op(hw))
    collectives: tuple[P.Collective, ...] = ()
    bubble_s = 0.0
    if lay.trivial:
        if t.deepspeed_pipe_engine and hw.num_gpus > 1:
            sync = pipe_engine_collective(t, hw, trainable_params, hw.num_gpus, hw.num_gpus)
            comm_s, exposed_s, link = sync.seconds, sync.exposed_s, sync.link
        else:
            comm_s, exposed_s, link = _communication_s(t, hw, trainable_params, arch,
                                                       compute_s, forward_share(flops))
        if t.cuda_launch_blocking:
            exposed_s = comm_s  # each collective's launch returns when it has run
    else:
        collectives = layout_collectives(arch, t, hw, lay, attention_s,
                                         stage_share * arch.num_layers,
                                         gemm_s=matmul_s, compute_s=gpu_compute_s)
        if t.cuda_launch_blocking:
            collectives = tuple(replace(c, exposed_s=c.seconds) for c in collectives)
        # tensor, context, expert and stage-to-stage traffic are inside each stage's time: the
        # bubble idles in proportion to all of it, (p - 1)/(v m) of the ideal step
        stage_s = compute_s + sum(c.exposed_s for c in collectives)
        bubble_s = stage_s * (lay.pp - 1) / (lay.virtual_stages * t.grad_accum)
        local = P.local_params(arch, count_params(arch), lay)
        shards = P.zero_shards(lay, local)
        trained = P.local_trainable_params(trainable_params, count_params(arch).total, local,
                                           t.method)
        optimizer_s = trained / (shards if t.zero_stage >= 1 else 1) \
            * optimizer_bytes_per_param(t) / bw
        if eager_host_dispatch(gpu):
            optimizer_s = _with_optimizer_host_s(t, optimizer_s,
                                                 optimizer_ops(arch, t) * host_s_per_op(hw))
        dp = (pipe_engine_collective(t, hw, trained, round(shards), lay.tp * lay.cp * lay.dp)
              if t.deepspeed_pipe_engine else
              _layout_data_parallel(t, hw, lay, local.total, shards, stage_s, trained,
                                    forward_share(flops), stage_share * arch.num_layers))
        if t.cuda_launch_blocking:
            dp = replace(dp, exposed_s=dp.seconds)
        comm_s, exposed_s, link = dp.seconds, dp.exposed_s, dp.link
        collectives = (*collectives, dp)
    off = None
    if t.offload != "none":  # the optimizer runs on the host (estimate/offload.py)
        off = _offload_time(arch, t, hw, trainable_params, compute_s)
        optimizer_s = off.added_s
    model_parallel_s = sum(c.exposed_s for c in collectives[:-1]) if collectives else 0.0
    # Unsloth's offloaded checkpoints, copied on the compute stream (estimate/unsloth.py)
    checkpoint_copy_s = _checkpoint_copy_s(arch, t, hw)
    step = (compute_s + optimizer_s + exposed_s + model_parallel_s + bubble_s
            + checkpoint_copy_s)

    parts = {
        "matmul compute": matmul_s,
        "attention kernels": attention_s,
        "memory-bound elementwise work": memory_bound_s,
        "host issuing eager operators (micro-batch too small to hide it)": host_exposed_s,
        "activation offload: PCIe copies the compute does not hide": act_offload_s,
        ("optimizer step (memory-bound)" if off is None else
         "CPU offload: host Adam step, weights up, PCIe not hidden"): optimizer_s,
        f"communication over {link}": exposed_s,
        "checkpoint copies to and from the host (on the compute stream)": checkpoint_copy_s,
    }
    if collectives:
        parts[f"pipeline bubble ({lay.pp} stages, {t.grad_accum} micro-batches)"] = bubble_s
        for c in collectives[:-1]:
            parts[f"{c.name} over {c.link}"] = c.exposed_s
        parts[f"data-parallel gradients over {link}"] = parts.pop(
            f"communication over {link}")
    largest_part = max(parts, key=lambda k: parts[k])
    bottleneck = network_bottleneck(collectives, comm_s, link, gpu_compute_s) or largest_part
    return StepTime(
        matmul_s=matmul_s,
        attention_s=attention_s,
        memory_bound_s=memory_bound_s,
        host_s=host_s,
        host_exposed_s=host_exposed_s,
        optimizer_s=optimizer_s,
        communication_s=comm_s,
        communication_exposed_s=exposed_s,
        step_time_s=step,
        bottleneck=bottleneck,
        largest_part=largest_part,
        gemm_efficiency=e_mm,
        attention_efficiency=e_attn if t.flash_attention else e_mm,
        link=link,
        pipeline_bubble_s=bubble_s,
        collectives=collectives,
        offload=off,
        expert_gemm_s=expert_gemm_s,
        checkpoint_copy_s=checkpoint_copy_s,
    )


#: said of a step whose collectives take longer in all than the compute they overlap
NETWORK_BOUND_NOTE = "more in all than the compute it overlaps"


def network_bottleneck(collectives: tuple[P.Collective, ...], comm_s: float, link: str,
                       gpu_compute_s: float) -> str:
    """The bottleneck label of a step whose communication, hidden or not, takes longer in all
    than its GPU compute (matmuls, attention, memory-bound work): the step then waits on the
    network however well the collectives overlap, although the part left exposed may be
    smaller than the matmuls. The largest collective on its link; "" when compute is longer."""
    if collectives:
        total = sum(c.seconds for c in collectives)
        if total <= gpu_compute_s or total <= 0:
            return ""
        big = max(collectives, key=lambda c: c.seconds)
        return f"{big.name} over {big.link} (communication {NETWORK_BOUND_NOTE})"
    if comm_s <= gpu_compute_s or comm_s <= 0:
        return ""
    return f"communication over {link} ({NETWORK_BOUND_NOTE})"


def expert_gemm_extra_s(arch: ModelArch, t: Training, hw: Hardware, tokens: float, e_mm: float,
                        efficiency_scale: float = 1.0) -> float:
    """Seconds the routed experts' GEMMs of `tokens` take beyond the dense GEMM rate that
    matmul_s charges them at: their time at that rate x (estimate/moe_gemm.py
    expert_gemm_slowdown - 1), the shapes those of one micro-batch on one rank (its sequence
    chunk's sequence-parallel share of tokens, ep ranks' routed copies brought in, whole
    experts: expert tensor parallelism 1).
    fp8-mixed runs the experts in fp8 (fp8_matmul_flops_per_token). 0 for a dense model."""
    if not arch.is_moe:
        return 0.0
    gpu = hw.gpu
    fp8 = t.precision == "fp8-mixed"
    trains = t.method == "full"
    if fp8:
        peak = peak_flops(gpu, t.precision)
        eff = fp8_gemm_efficiency(gpu, arch.hidden_size) * efficiency_scale
        element = 1.0
    else:
        peak = peak_flops(gpu, t.precision)
        eff = e_mm
        element = ACTIVATION_BYTES[t.precision]
    # expert tensor parallelism 1, as the memory and the all-to-all take it (parallel.py):
    # each rank routes its sequence-parallel share of the micro-batch's tokens through whole
    # experts
    shapes = expert_shapes(arch, t.tokens_per_micro_batch / (t.cp * t.tp), t.ep, 1)
    bw = gpu.memory_bw_gb_per_s * 1e9 * A.BANDWIDTH_EFFICIENCY.value
    slowdown = expert_gemm_slowdown(shapes, trains, peak, eff, bw, element, gpu.sm_count,
                                    grouped_launch=t.kernels == "megatron")
    flops = expert_matmul_flops_per_token(arch, trains, t.checkpointing)
    return tokens * flops / (peak * eff) * (slowdown - 1.0)


def _activation_offload_exposed_s(arch: ModelArch, t: Training, hw: Hardware,
                                  gpu_compute_s: float) -> float:
    """Seconds per step that activation offloading's copies add: the layer inputs and the
    final norm's fp32 input down in each forward and up in each backward, beside the GPU's
    compute of the step (estimate/activation_offload.py)."""
    pcie = offload_pcie_s(offloaded_activation_bytes(arch, t), t.grad_accum,
                          host_link_for_offload(hw.gpu.generation, hw.gpu.name,
                                                hw.pcie_lanes))
    return offload_exposed_s(pcie, gpu_compute_s)
def _checkpoint_copy_s(arch: ModelArch, t: Training, hw: Hardware) -> float:
    """Seconds per step of checkpoint_offload's copies (estimate/unsloth.py
    offloaded_checkpoint_copy_s) over the GPU's host link on its PCIe lanes
    (estimate/offload.py); 0 without it."""
    if not (t.checkpoint_offload and t.checkpointing):
        return 0.0
    residual = 4 if kbit_upcast_active(t) else residual_bytes(t.precision)
    return offloaded_checkpoint_copy_s(
        arch, t, residual, host_link_bytes_per_s(hw.gpu.generation, hw.gpu.name,
                                                 hw.pcie_lanes, field="checkpoint_offload"))


def _offload_time(arch: ModelArch, t: Training, hw: Hardware, trainable: int,
                  compute_s: float) -> OffloadTime:
    """CPU offload's part of the step (estimate/offload.py offload_time) with this setup's
    bytes: gradients in the gradient dtype (fp32 for peft's adapters), weights fetched in their
    stored form (QLoRA's 4-bit layers), partitions over the data-parallel GPUs."""
    from gpuhours.estimate.offload import (
        host_link_bytes_per_s,
        offload_time,
        zero3_offload_grad_bytes_per_param,
        zero12_offload_grad_bytes_per_param,
    )

    n = hw.num_gpus
    total = count_params(arch).total
    full = t.method == "full"
    st = state_bytes_per_param(t.precision, t.optimizer, trainable=True)
    grad_bytes = st.grads if full else 4.0
    half = 4.0 if (t.precision == "fp32" or t.precision.endswith("-amp")) else 2.0
    weights = total * half
    if t.method == "qlora":
        q = quantised_params(arch)
        weights = q * QLORA_BYTES_PER_PARAM + (total - q) * half
    up_bytes_per_param = st.weights if full else 4.0
    if t.zero_stage >= 3 and t.zero3_engine == "deepspeed":
        down, up = zero3_offload_grad_bytes_per_param(micro_batches=t.grad_accum,
                                                      grad_bytes=grad_bytes)
        grad_step_bytes = down + up
        grads_overlap = deepspeed_overlap_comm_of(t)  # DeepSpeed's default: on for ZeRO-3
    elif t.zero_stage >= 3:  # FSDP's CPUOffload: each micro-batch's shard down in its dtype
        grad_step_bytes = t.grad_accum * grad_bytes
        grads_overlap = True
    else:
        down, up = zero12_offload_grad_bytes_per_param(micro_batches=t.grad_accum,
                                                       grad_bytes=grad_bytes)
        grad_step_bytes = down + up
        grads_overlap = deepspeed_overlap_comm_of(t)
    return offload_time(
        offload=t.offload, grad_bytes_per_step=trainable / n * grad_step_bytes,
        grads_overlap=grads_overlap,
        weight_bytes_per_pass=weights / n,
        weight_passes_per_micro_batch=3 if t.checkpointing else 2,
        micro_batches=t.grad_accum, params_up_bytes=trainable / n * up_bytes_per_param,
        trainable_params_on_node=trainable / n * min(hw.gpus_per_node, n),
        link_bytes_per_s=host_link_bytes_per_s(hw.gpu.generation, hw.gpu.name,
                                               hw.pcie_lanes),
        compute_s=compute_s, copies=t.offload_copies)


def layout_collectives(arch: ModelArch, t: Training, hw: Hardware, lay: P.Layout,
                       attention_s: float, stage_layers: float | None = None,
                       gemm_s: float = 0.0, compute_s: float = 0.0
                       ) -> tuple[P.Collective, ...]:
    """The model-parallel traffic of one optimizer step on one GPU of a stage of `stage_layers`
    layers (the slowest; L/pp when not given), each on its link: tensor
    parallelism within tp consecutive GPUs, context parallelism within tp x cp, expert all-to-all
    within ep, stage-to-stage sends across the whole layout. Tensor, expert and stage traffic is
    on the critical path (assumptions.MODEL_PARALLEL_COMM_OVERLAP); ring attention's KV exchange
    hides behind the attention kernels it feeds. As setup choices, tensor-parallel traffic
    pipelined with its GEMMs (t.tp_comm_overlap: behind `gemm_s`, the stage's matmuls) and the
    expert all-to-all behind another micro-batch's compute (t.moe_a2a_overlap: `compute_s`),
    each as parallel.overlapped_exposed_s counts it."""
    if t.tp_comm_overlap and hw.gpu.generation not in TP_OVERLAP_GENERATIONS:
        raise FieldError("tp_comm_overlap", f"Transformer Engine's userbuffers need CUDA "
                         f"multicast over NVSwitch (Hopper or later); {hw.gpu.name} is "
                         f"{hw.gpu.generation}.")
    sm = A.OVERLAP_COMM_SM_SHARE.value
    a = ACTIVATION_BYTES[t.precision]
    eff = A.COLLECTIVE_EFFICIENCY.value
    hidden_share = A.MODEL_PARALLEL_COMM_OVERLAP.value
    m, d = t.grad_accum, arch.hidden_size
    layers = arch.num_layers / lay.pp if stage_layers is None else stage_layers
    tokens = t.tokens_per_micro_batch / lay.cp  # the tokens of one GPU's sequence chunk
    out: list[P.Collective] = []

    def add(name: str, volume_bytes: float, span: int, hideable_s: float | None = None) -> None:
        bw, link = group_link_bytes_per_s(hw, span)
        seconds = volume_bytes / (bw * eff)
        hidden = min(seconds, hideable_s) if hideable_s is not None else seconds * hidden_share
        exposed = seconds - hidden
        if name == "tensor-parallel collectives" and t.tp_comm_overlap:
            exposed = P.overlapped_exposed_s(seconds, P.tp_overlap_unpaired_share(lay.tp),
                                             gemm_s, sm)
        if name == "expert all-to-all" and t.moe_a2a_overlap:
            exposed = P.overlapped_exposed_s(seconds, P.a2a_unpaired_share(
                lay.pp, lay.virtual_stages, m), compute_s, sm)
        out.append(P.Collective(name=name, seconds=seconds, exposed_s=exposed, link=link))

    if lay.tp > 1:
        add("tensor-parallel collectives", m * layers * P.tensor_parallel_bytes_per_layer(
            tokens, d, a, lay.tp, t.checkpointing), lay.tp)
    if lay.cp > 1:
        add("context-parallel KV ring", m * layers * P.context_parallel_bytes_per_layer(
            t.tokens_per_micro_batch, arch.kv_dim, a, lay.cp, lay.tp, t.checkpointing),
            lay.tp * lay.cp, hideable_s=attention_s)
    if lay.ep > 1:
        if t.kernels == "megatron" and t.moe_dispatch == "allgather-unfused":
            # Megatron-Core's allgather dispatcher, fp64 router (NeMo-RL's): every token once
            # each way, the combine in fp64 (parallel.expert_allgather_bytes_per_layer)
            volume = m * layers * P.expert_allgather_bytes_per_layer(
                tokens / lay.tp, d, a, arch.num_experts, lay.ep, t.checkpointing)
        else:
            volume = m * layers * P.expert_all_to_all_bytes_per_layer(
                tokens / lay.tp, d, a, arch.experts_per_token, lay.ep, t.checkpointing)
        per_node = min(hw.gpus_per_node, lay.ep)
        if lay.ep > per_node:
            # an all-to-all sends (ep - g)/(ep - 1) of its bytes to ranks in other nodes, each GPU
            # through its own port, and the rest over the node's own links at the same time:
            # the slower of the two parts
            inter = volume * (lay.ep - per_node) / (lay.ep - 1)
            port, net = group_link_bytes_per_s(hw, lay.ep)
            inside, _ = _within_node_link(hw.gpu, hw.pcie_lanes)
            seconds = max(inter / port, (volume - inter) / inside) / eff
            exposed = seconds * (1 - hidden_share)
            if t.moe_a2a_overlap:
                exposed = P.overlapped_exposed_s(seconds, P.a2a_unpaired_share(
                    lay.pp, lay.virtual_stages, m), compute_s, sm)
            out.append(P.Collective(name="expert all-to-all", seconds=seconds,
                                    exposed_s=exposed, link=net))
        else:
            add("expert all-to-all", volume, lay.ep)
    if lay.pp > 1:
        add("pipeline sends", m * P.pipeline_p2p_bytes_per_micro_batch(
            tokens, d, a, lay.tp, lay.virtual_stages), hw.num_gpus)
    return tuple(out)


def _layout_data_parallel(t: Training, hw: Hardware, lay: P.Layout, local_params: float,
                          shards: float, compute_s: float, trained: float | None = None,
                          fwd_share: float = 1 / 3, layers: float = 1.0) -> P.Collective:
    """The data-parallel gradient (and ZeRO-3 weight) traffic of one GPU's parameters over the
    ranks that hold the same ones, on the link those ranks span (tp x cp x dp GPUs), partly
    hidden behind compute as for plain data parallelism (assumptions.COMM_OVERLAP); ZeRO-3's,
    gathered layer by layer, behind at most one of the stage's `layers` each
    (parallel.fsdp_exposed_s; `fwd_share` of `compute_s` is the forward pass's). `trained`:
    the GPU's trainable parameters where fewer than its parameters (LoRA: only the adapters'
    gradients move; ZeRO-3 still gathers every weight)."""
    trained = local_params if trained is None else trained
    bw, link = group_link_bytes_per_s(hw, lay.tp * lay.cp * lay.dp)
    bw *= A.COLLECTIVE_EFFICIENCY.value
    half = not (t.precision == "fp32" or t.precision.endswith("-amp"))
    grad_bytes = 2.0 if half else 4.0
    if t.zero_stage < 3:
        # Megatron-Core's fp32 gradient buffer reduced in fp32, the weights gathered in theirs
        reduced = 4.0 if t.grad_reduce_in_fp32 else grad_bytes
        seconds = (P.data_parallel_grad_bytes(trained, reduced, shards, t.zero_stage,
                                              t.grad_accum, gather_bytes=grad_bytes) / bw
                   if shards > 1 else 0.0)
        exposed = seconds - min(seconds * A.COMM_OVERLAP.value, compute_s)
    else:
        ring = (shards - 1) / shards
        # one all-gather and one reduce-scatter per layer and pass, each paying the ring's
        # latency (parallel.ring_latency_s) besides its bytes
        lat_s = max(int(layers), 1) * P.ring_latency_s(int(shards), _nodes_spanned(
            hw, lay.tp * lay.cp * lay.dp), _ring_step_s(hw))
        gather_s = ring * local_params * grad_bytes / bw + lat_s  # one pass's all-gathers
        scatter_s = ring * trained * grad_bytes / bw + lat_s  # the gradients' reduce-scatter
        seconds = t.grad_accum * (2 * gather_s + scatter_s)
        exposed = (_zero3_exposed_s(gather_s, scatter_s, t.grad_accum, compute_s, fwd_share,
                                    max(int(layers), 1)) if shards > 1 else 0.0)
    return P.Collective(name="data-parallel gradients", seconds=seconds,
                        exposed_s=exposed, link=link)


def _with_optimizer_host_s(t: Training, optimizer_s: float, host_s: float) -> float:
    """The optimizer step's time beside the host's issuing of its operators (`host_s`): the
    longer of the two, or their sum under CUDA_LAUNCH_BLOCKING (each launch returns only when
    its kernel has run)."""
    return optimizer_s + host_s if t.cuda_launch_blocking else max(optimizer_s, host_s)


def pipe_engine_collective(t: Training, hw: Hardware, params: float, ranks: int,
                           span_gpus: int) -> P.Collective:
    """DeepSpeed's PipelineEngine's data-parallel synchronisation of one GPU's `params` over
    `ranks` ranks spanning `span_gpus` GPUs (estimate/pipe_engine.py): the gradients'
    all-reduce after the last backward and, with ZeRO-1, the updated weights' all-gather, in the
    engine's half precision (fp32 where the step is), on the link those ranks span at
    assumptions.COLLECTIVE_EFFICIENCY; all of it exposed (no compute runs beside it). The
    gradients in fp32 with bf16 (DeepSpeed's BF16_Optimizer) or fp32 training, in fp16 with
    fp16; the updated weights in the half precision trained."""
    half = not (t.precision == "fp32" or t.precision.endswith("-amp"))
    weight_bytes = 2.0 if half else 4.0
    grad_bytes = 2.0 if t.precision in ("fp16", "fp16-mixed") else 4.0
    bw, link = group_link_bytes_per_s(hw, span_gpus)
    bw *= A.COLLECTIVE_EFFICIENCY.value
    seconds = pipe_engine_grad_sync_bytes(params, grad_bytes, weight_bytes, ranks,
                                          t.zero_stage) / bw
    return P.Collective(name="data-parallel gradients", seconds=seconds, exposed_s=seconds,
                        link=link)


def _ring_step_s(hw: Hardware) -> float:
    """NCCL's per-step ring latency between two GPUs of a node: PCIe's or NVLink's."""
    return (P.RING_PCIE_STEP_LATENCY_S if hw.gpu.interconnect == "pcie"
            else P.RING_NVLINK_STEP_LATENCY_S)


def _nodes_spanned(hw: Hardware, span_gpus: int) -> int:
    """Nodes a group of ranks spread over `span_gpus` consecutive GPUs touches."""
    return max(1, min(hw.num_nodes, -(-span_gpus // hw.gpus_per_node)))


def host_gpu_combined_s(host_s: float, gpu_s: float, tower_host_s: float = 0.0,
                        tower_gpu_s: float = 0.0, tower_apart: bool = True,
                        forward_pass: tuple[float, float] | None = None,
                        sync_s: float = 0.0) -> float:
    """Seconds of a step's compute with the host issuing its operators beside the GPU: the
    p-norm (host^p + gpu^p)^(1/p) (assumptions.HOST_GPU_OVERLAP_P) of the decoder's host and
    GPU time, plus, for a vision-language model, the same p-norm of its vision tower's own
    host and GPU time (estimate/vision_host.py), taken apart (`tower_apart`).

    Apart, because the host cannot run ahead of the tower into the decoder: the tower's output
    is the decoder's input, and the modelling code reads the image-token count back to the
    host between the two (transformers' Qwen2-VL `get_placeholder_mask`; EasyR1 @8460e817
    verl/models/transformers/qwen2_vl.py `_get_input_embeds`: `(input_ids ==
    image_token_id).sum().item()`). In forward the tower's operators are issued while the GPU
    has nothing else queued, in backward after the decoder's: its host time (about 40
    operators a block for GEMMs of a few tenths of a millisecond) hides only behind its own
    GPU work. Without `tower_apart` (model-parallel layouts, where the tower's GPU time is not
    split out) its host time joins the decoder's in one p-norm.

    `forward_pass` (the decoder's forward host and GPU seconds, within host_s and gpu_s): a
    forward that waits on the host for the GPU in every layer (Megatron-Core's MoE dispatcher,
    host.megatron_moe_forward_syncs_per_micro_batch), plus `sync_s`, the waits' own latency.
    After each wait the GPU's queue is empty: the host cannot issue the next layer's operators
    while the GPU runs this one's, so each stretch between two waits is its own host and GPU
    time combined, and their sum is, by the p-norm's homogeneity (for stretches alike), the
    p-norm of the forward's totals. The backward keeps the forward's splits and does not
    wait: its host runs ahead as before, up to the next forward's first wait, which drains
    whatever backward work it left queued. So the forward is combined apart from the
    backward: p(hf, gf) + p(h - hf, g - gf) >= p(h, g), most where the forward is host-bound
    and the backward GPU-bound. A recomputed forward (full checkpointing) waits too: it runs
    layer by layer inside the backward, so the backward is cut at every layer as well, the same
    sum of p-norms (it is in the backward's totals) with twice the waits. Pipeline parallelism
    changes nothing here: under 1F1B a stage alternates one micro-batch's forward with
    another's backward, and each forward's first wait drains the backward before it, as a
    step of one stage without pipelining does."""
    p = A.HOST_GPU_OVERLAP_P.value

    def pnorm(a: float, b: float) -> float:
        return float((a ** p + b ** p) ** (1 / p))

    def decoder(host: float, gpu: float) -> float:
        if forward_pass is None:
            return pnorm(host, gpu)
        f_host, f_gpu = forward_pass
        return (pnorm(f_host, f_gpu) + pnorm(max(host - f_host, 0.0), max(gpu - f_gpu, 0.0))
                + sync_s)

    if not tower_apart:
        return decoder(host_s + tower_host_s, gpu_s + tower_gpu_s)
    return decoder(host_s, gpu_s) + (pnorm(tower_host_s, tower_gpu_s)
                                     if tower_host_s or tower_gpu_s else 0.0)


def eager_host_dispatch(gpu: GpuSpec) -> bool:
    """Whether the host issues the step operator by operator beside the device (PyTorch eager
    on CUDA or ROCm: estimate/host.py's count x host_s_per_op). Not on a CPU (the operators
    run on the host itself) nor on a TPU: JAX's jit and PyTorch/XLA trace the step into one
    XLA program, compiled once and then launched once a step (PyTorch/XLA's lazy tracing of
    each step runs ahead of the device, asynchronously; its cost is not modelled), so there
    is no per-operator launch to hide."""
    return gpu.stack not in ("cpu", "xla")


def host_s_per_op(hw: Hardware) -> float:
    """Host seconds per eager operator: the machine's own figure when given, else the assumed
    x86 figure times the part's host ratio (a Grace superchip's: catalog host_op_time_ratio)."""
    if hw.host_us_per_op is not None:
        return hw.host_us_per_op * 1e-6
    return A.HOST_S_PER_OP.value * (hw.gpu.host_op_time_ratio or 1.0)


def optimizer_ops(arch: ModelArch, t: Training) -> float:
    """Device operators of one optimizer step (assumptions.OPS_OPTIMIZER)."""
    if t.optimizer_impl != "per-parameter":
        return A.OPS_OPTIMIZER[t.optimizer_impl]
    if t.method == "full":
        # per layer: the linears, two norms, any biases; plus embeddings, head, final norm
        tensors = arch.num_layers * (7 + 2 + 3 * arch.qkv_bias) + 3
    else:
        tensors = arch.num_layers * 2 * len(LORA_ADAPTED[t.lora_targets])
    return A.OPS_OPTIMIZER["per-parameter-per-tensor"] * tensors + 2


def optimizer_bytes_per_param(t: Training) -> float:
    """Bytes the optimizer step moves per trainable parameter (assumptions.ADAMW_TRAFFIC_*):
    element sizes from the memory model's state bytes, pass counts from the implementation."""
    if t.method == "full":
        st = state_bytes_per_param(t.precision, t.optimizer, trainable=True)
        g = st.grads
        p = st.master or st.weights
        half_copy = st.weights if st.master else 0.0  # -mixed writes the half-precision weights
        s_bytes = 4.0 if (st.master or st.weights == 4.0) else 2.0
    else:
        # LoRA adapters are fp32 (peft's default), whatever the base precision
        g = p = s_bytes = 4.0
        half_copy = 0.0
    if t.optimizer == "adamw":
        ks, kg, kp = {"fused": A.ADAMW_TRAFFIC_FUSED,
                      "foreach-2.0": A.ADAMW_TRAFFIC_FOREACH_2_0}.get(
            t.optimizer_impl, A.ADAMW_TRAFFIC_FOREACH)
        return ks * s_bytes + kg * g + kp * p + half_copy
    if t.optimizer == "adamw-8bit":
        # bitsandbytes' fused 8-bit kernel: read p, g and both 1-byte moments, write p and them
        return 2 * p + g + 4 * 1.0 + half_copy
    if t.optimizer == "sgd":
        return 2 * p + g + half_copy  # p.add_(g, alpha=-lr)
    # momentum: buf.mul_(m) (2s), buf.add_(g) (2s + g), p.add_(buf) (2p + s)
    return 5 * s_bytes + g + 2 * p + half_copy


def _optimizer_time_s(t: Training, trainable: int, hw: Hardware, bw: float) -> float:
    """The optimizer step: its counted bytes per parameter at the achievable bandwidth."""
    shard = hw.num_gpus if t.zero_stage >= 1 else 1
    return trainable / shard * optimizer_bytes_per_param(t) / bw


def forward_share(flops: TrainingFlops) -> float:
    """The forward pass's share of a step's FLOPs (recomputation runs in the backward pass)."""
    fwd = flops.matmul_forward + flops.lora_forward + flops.attention_forward \
        + flops.vision_forward + flops.vision_attention_forward
    total = flops.hardware_flops_per_token
    return fwd / total if total else 0.5


def _zero3_exposed_s(gather_s: float, scatter_s: float, micro_batches: int, compute_s: float,
                     fwd_share: float, layers: int,
                     windows: tuple[float, float] = (1.0, 1.0)) -> float:
    """Seconds of a step's ZeRO-3/FSDP traffic not hidden behind its compute: per micro-batch
    one weight all-gather (`gather_s`) in forward, and in backward the gather again and the
    gradients' reduce-scatter (`scatter_s`), each layer's beside one layer's compute, or the
    `windows` share of it (parallel.fsdp_exposed_s; `fwd_share` of `compute_s` is the forward
    pass's)."""
    m = micro_batches
    return m * P.fsdp_exposed_s(gather_s, gather_s + scatter_s, compute_s * fwd_share / m,
                                compute_s * (1 - fwd_share) / m, layers, A.COMM_OVERLAP.value,
                                windows)


def _deepspeed_zero12_s(t: Training, trainable: int, ranks: int, bw: float,
                        compute_s: float) -> tuple[float, float]:
    """(seconds, exposed seconds) of DeepSpeed ZeRO-1/2's gradient traffic per step, on
    `bw` bytes/s per GPU. Volume as parallel.data_parallel_grad_bytes: ZeRO-2 reduces every
    micro-batch's gradients, ZeRO-1 only the boundary's, and the updated partitions are
    all-gathered once per step. The gradients move in DeepSpeed's communication dtype, the
    engine's half precision when bf16 or fp16 is on, adapters included (the engine casts the
    whole model; DeepSpeed v0.12.3 engine.py communication_data_type: torch.bfloat16 with bf16
    enabled). Each reduction's last bucket waits for the end of the backward
    (parallel.deepspeed_reduce_exposed_share); the all-gather runs in the optimizer step, after
    the backward, with no compute beside it."""
    ring = (ranks - 1) / ranks
    grad_bytes = 4.0 if (t.precision == "fp32" or t.precision.endswith("-amp")) else 2.0
    pass_s = ring * trainable * grad_bytes / bw
    passes = t.grad_accum if t.zero_stage == 2 else 1
    share = P.deepspeed_reduce_exposed_share(trainable, t.deepspeed_reduce_bucket,
                                             deepspeed_overlap_comm_of(t),
                                             A.COMM_OVERLAP.value)
    reduce_s = passes * pass_s
    hidden = min(reduce_s * (1 - share), compute_s)
    return reduce_s + pass_s, reduce_s + pass_s - hidden


def _communication_s(t: Training, hw: Hardware, trainable: int, arch: ModelArch,
                     compute_s: float, fwd_share: float = 1 / 3) -> tuple[float, float, str]:
    """Collective time per step and the part of it not hidden behind compute.

    Ring collectives move (N-1)/N of the buffer per GPU for an all-gather or a reduce-scatter,
    twice that for an all-reduce. DDP and ZeRO-1 reduce the gradients once per optimizer step
    (no_sync during accumulation), ZeRO-2 every micro-batch (parallel.data_parallel_grad_bytes),
    hidden up to assumptions.COMM_OVERLAP; ZeRO-3/FSDP
    gathers the weights in forward and again in backward and reduce-scatters gradients in every
    micro-batch, each layer's beside one layer's compute (parallel.fsdp_exposed_s; `fwd_share`
    of `compute_s` is the forward pass's).
    """
    n = hw.num_gpus
    if n == 1:
        return 0.0, 0.0, "none"
    bw, link = link_bandwidth_bytes_per_s(hw)
    bw *= A.COLLECTIVE_EFFICIENCY.value
    ring = (n - 1) / n
    grad_bytes = 4.0 if (t.precision == "fp32" or t.precision.endswith("-amp")) else 2.0
    if t.method != "full":
        grad_bytes = 4.0  # peft adapters in fp32
    if t.zero_stage in (1, 2) and t.deepspeed_reduce_bucket > 0:
        return _deepspeed_zero12_s(t, trainable, n, bw, compute_s) + (link,)
    if t.zero_stage < 3:
        volume = P.data_parallel_grad_bytes(
            trainable, 4.0 if t.grad_reduce_in_fp32 else grad_bytes, n, t.zero_stage,
            t.grad_accum, gather_bytes=grad_bytes)
    else:
        fp32_weights = t.precision == "fp32" or t.precision.endswith("-amp")
        weight_bytes = (4.0 if fp32_weights else 2.0) * count_params(arch).total
        if t.method == "qlora":
            # FSDP gathers the packed 4-bit storage of the quantised linears
            q = quantised_params(arch)
            weight_bytes = q * QLORA_BYTES_PER_PARAM + (count_params(arch).total - q) * 2.0
        # one all-gather and one reduce-scatter per layer and pass, each with the ring's latency
        one_s = P.ring_latency_s(n, hw.num_nodes, _ring_step_s(hw))
        lat_s = arch.num_layers * one_s
        gather_s = ring * weight_bytes / bw + lat_s  # one pass's all-gathers
        scatter_s = ring * trainable * grad_bytes / bw + lat_s
        if t.fsdp_adapter_units:
            # the adapters' own units: their weights gathered in each pass and their gradients
            # reduce-scattered unit by unit (the layers' frozen units have none), a collective
            # each (parallel.fsdp_adapter_unit_collectives), put with the backward's traffic
            gathers, scatters = P.fsdp_adapter_unit_collectives(
                len(LORA_ADAPTED[t.lora_targets]), arch.num_layers, t.checkpointing)
            adapter_bytes = 2.0 if t.lora_adapter_dtype == "half" else 4.0
            passes = gathers // scatters
            scatter_s = (ring * trainable * grad_bytes / bw + scatters * one_s
                         + passes * ring * trainable * adapter_bytes / bw + gathers * one_s)
        windows = (P.fsdp_adapter_unit_windows(
            arch.hidden_size, arch.q_dim, arch.kv_dim,
            arch.intermediate_size, arch.gated_mlp, t.checkpointing)
            if t.fsdp_adapter_units else (1.0, 1.0))
        exposed = _zero3_exposed_s(gather_s, scatter_s, t.grad_accum, compute_s, fwd_share,
                                   arch.num_layers, windows)
        return t.grad_accum * (2 * gather_s + scatter_s), exposed, link
    comm_s = volume / bw
    hidden = min(comm_s * A.COMM_OVERLAP.value, compute_s)
    return comm_s, comm_s - hidden, link
