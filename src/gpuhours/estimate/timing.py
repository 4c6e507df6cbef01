"""Step time of a training step per GPU, seconds, by part, with the bottleneck named.

Roofline: matmuls run at the GPU's GEMM efficiency (assumptions.py) scaled by the width of the
matrices; attention kernels at a lower share; non-matmul work is memory-bound at the achievable
bandwidth; a step cannot be shorter than its kernel launches; communication over the
interconnect is partly hidden behind compute.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuhours.catalog.schema import GpuSpec
from gpuhours.errors import FieldError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.flops import TrainingFlops
from gpuhours.estimate.memory import (
    ACTIVATION_BYTES,
    LORA_ADAPTED,
    QLORA_BYTES_PER_PARAM,
    activation_bytes_per_token_layer,
    quantised_params,
)
from gpuhours.setup import Hardware, Training

_PEAK_KEY = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16", "bf16-mixed": "bf16",
             "fp16-mixed": "fp16", "bf16-amp": "bf16", "fp16-amp": "fp16"}


def peak_flops(gpu: GpuSpec, precision: str) -> float:
    """Dense peak FLOP/s of `gpu` for the matmul precision of `precision` (datasheet)."""
    key = _PEAK_KEY[precision]
    tflops = getattr(gpu.dense_tflops, key)
    if tflops is None:
        supported = [k for k in ("bf16", "fp16", "fp32") if getattr(gpu.dense_tflops, k)]
        raise FieldError(
            "precision",
            f"{gpu.name} has no {key} matmul rate in the catalog.",
            f"Use one of: {', '.join(supported)}.",
        )
    return tflops * 1e12


def gemm_efficiency(gpu: GpuSpec, hidden_size: int) -> float:
    """Achieved fraction of dense peak for the model's GEMMs: generation x width factor."""
    base = A.GEMM_EFFICIENCY_BY_GENERATION[gpu.generation].value
    width = hidden_size / (hidden_size + A.GEMM_HALF_WIDTH.value)
    return base * width


def link_bandwidth_bytes_per_s(hw: Hardware) -> tuple[float, str]:
    """Per-GPU bandwidth of the slowest link a ring collective crosses, one direction, B/s."""
    if hw.num_nodes > 1:
        return hw.inter_node_gb_per_s_one_way * 1e9, "inter-node network"
    gpu = hw.gpu
    if gpu.interconnect_gb_per_s_two_way and gpu.interconnect in ("nvlink", "xgmi", "ici"):
        return gpu.interconnect_gb_per_s_two_way / 2 * 1e9, gpu.interconnect
    if gpu.interconnect == "pcie" and gpu.interconnect_gb_per_s_two_way:
        return gpu.interconnect_gb_per_s_two_way / 2 * 1e9, "pcie"
    return A.PCIE_FALLBACK_GB_PER_S_ONE_WAY.value * 1e9, "pcie (assumed)"


@dataclass(frozen=True)
class StepTime:
    """Seconds per optimizer step per GPU, by part; `step_time_s` is their combination."""

    matmul_s: float
    attention_s: float
    memory_bound_s: float
    launch_floor_s: float
    optimizer_s: float
    communication_s: float
    communication_exposed_s: float
    step_time_s: float
    bottleneck: str
    gemm_efficiency: float
    attention_efficiency: float
    link: str

    @property
    def compute_s(self) -> float:
        return self.matmul_s + self.attention_s + self.memory_bound_s


def training_step_time(arch: ModelArch, t: Training, hw: Hardware, flops: TrainingFlops,
                       trainable_params: int, efficiency_scale: float = 1.0) -> StepTime:
    """Time of one optimizer step (grad_accum micro-batches) on one GPU of `hw`.

    `efficiency_scale` multiplies the compute efficiencies (calibration from measurements).
    """
    gpu = hw.gpu
    peak = peak_flops(gpu, t.precision)
    tokens = t.tokens_per_micro_batch * t.grad_accum
    e_mm = gemm_efficiency(gpu, arch.hidden_size) * efficiency_scale
    e_attn = e_mm * A.ATTENTION_EFFICIENCY_RATIO.value
    bw = gpu.memory_bw_gb_per_s * 1e9 * A.BANDWIDTH_EFFICIENCY.value

    matmul_s = tokens * flops.matmul_flops_per_token / (peak * e_mm)
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
                                                       t.lora_rank)
    passes = A.ELEMENTWISE_PASSES.value + (1.0 if t.checkpointing else 0.0)
    layer_traffic = tokens * arch.num_layers * (tensors * passes + scores * 3 + score_traffic)
    a = ACTIVATION_BYTES[t.precision]
    logit_traffic = 0.0 if arch.encoder else (
        tokens * arch.vocab_size * A.LOSS_KERNEL_LOGITS_TRAFFIC[t.loss_kernel].value * a / 2)
    dequant_traffic = 0.0
    if t.method == "qlora":
        # bitsandbytes dequantises each 4-bit weight to bf16 before every matmul that uses it:
        # read 4.127 bits, write 2 bytes, and the GEMM reads the 2 bytes back; in forward,
        # backward (input gradient) and the recomputed forward.
        passes_over_weights = 3 if t.checkpointing else 2
        dequant_traffic = t.grad_accum * passes_over_weights * quantised_params(arch) * (
            QLORA_BYTES_PER_PARAM + 4.0)
    memory_bound_s = (layer_traffic + logit_traffic + dequant_traffic) / bw
    compute_s = matmul_s + attention_s + memory_bound_s
    per_layer = A.KERNELS_PER_LAYER.value
    if t.method != "full":
        adapters = len(LORA_ADAPTED[t.lora_targets]) - (0 if arch.gated_mlp else 1)
        per_layer += A.KERNELS_PER_LORA_ADAPTER.value * adapters
    kernels = per_layer * (1.5 if t.checkpointing else 1.0) * arch.num_layers
    launch_floor_s = t.grad_accum * kernels * A.KERNEL_LAUNCH_S.value
    compute_s = max(compute_s, launch_floor_s)

    optimizer_s = _optimizer_time_s(t, trainable_params, hw, bw)
    comm_s, exposed_s, link = _communication_s(t, hw, trainable_params, arch, compute_s)
    step = compute_s + optimizer_s + exposed_s

    parts = {
        "matmul compute": matmul_s,
        "attention kernels": attention_s,
        "memory-bound elementwise work": memory_bound_s,
        "kernel launches (CPU-bound: micro-batch too small)": launch_floor_s,
        "optimizer step (memory-bound)": optimizer_s,
        f"communication over {link}": exposed_s,
    }
    if launch_floor_s < matmul_s + attention_s + memory_bound_s:
        parts.pop("kernel launches (CPU-bound: micro-batch too small)")
    bottleneck = max(parts, key=lambda k: parts[k])
    return StepTime(
        matmul_s=matmul_s,
        attention_s=attention_s,
        memory_bound_s=memory_bound_s,
        launch_floor_s=launch_floor_s,
        optimizer_s=optimizer_s,
        communication_s=comm_s,
        communication_exposed_s=exposed_s,
        step_time_s=step,
        bottleneck=bottleneck,
        gemm_efficiency=e_mm,
        attention_efficiency=e_attn if t.flash_attention else e_mm,
        link=link,
    )


def _optimizer_time_s(t: Training, trainable: int, hw: Hardware, bw: float) -> float:
    """AdamW/SGD update: read and write every state of the trainable parameters once."""
    if t.method == "full":
        if t.precision == "fp32" or t.precision.endswith("-amp"):
            per_param = {"adamw": 4 * 4 + 3 * 4, "adamw-8bit": 12 + 4, "sgd": 12,
                         "sgd-momentum": 20}[t.optimizer]
        elif t.precision.endswith("-mixed"):
            # read bf16 grad, fp32 master, m, v; write master, m, v and the bf16 weights
            per_param = {"adamw": 2 + 12 + 12 + 2, "adamw-8bit": 2 + 4 + 2 + 4 + 2 + 2,
                         "sgd": 2 + 4 + 4 + 2, "sgd-momentum": 2 + 8 + 8 + 2}[t.optimizer]
        else:
            per_param = {"adamw": 8 + 6, "adamw-8bit": 6 + 4, "sgd": 6, "sgd-momentum": 10}[
                t.optimizer]
    else:
        per_param = {"adamw": 16 + 12, "adamw-8bit": 10 + 6, "sgd": 12, "sgd-momentum": 20}[
            t.optimizer]
    shard = hw.num_gpus if t.zero_stage >= 1 else 1
    factor = A.OPTIMIZER_TRAFFIC_FACTOR.value if t.optimizer_impl == "foreach" else 1.0
    return trainable / shard * per_param * factor / bw


def _communication_s(t: Training, hw: Hardware, trainable: int, arch: ModelArch,
                     compute_s: float) -> tuple[float, float, str]:
    """Collective time per step and the part of it not hidden behind compute.

    Ring collectives move (N-1)/N of the buffer per GPU for an all-gather or a reduce-scatter,
    twice that for an all-reduce. DDP and ZeRO-1/2 reduce the gradients once per optimizer
    step (no_sync during accumulation); ZeRO-3/FSDP gathers the weights in forward and again in
    backward and reduce-scatters gradients in every micro-batch.
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
    if t.zero_stage < 3:
        volume = 2 * ring * trainable * grad_bytes
    else:
        from gpuhours.estimate.params import count_params

        fp32_weights = t.precision == "fp32" or t.precision.endswith("-amp")
        weight_bytes = (4.0 if fp32_weights else 2.0) * count_params(arch).total
        per_micro = ring * (2 * weight_bytes + trainable * grad_bytes)
        volume = per_micro * t.grad_accum
    comm_s = volume / bw
    hidden = min(comm_s * A.COMM_OVERLAP.value, compute_s)
    return comm_s, comm_s - hidden, link
