"""CPU offload of training state (DeepSpeed ZeRO-Offload / ZeRO-Infinity, FSDP CPUOffload):
what leaves the GPU, the host RAM it takes, and the time it adds.

How DeepSpeed runs it (Ren et al. 2021, "ZeRO-Offload", sec. 4.1 and fig. 5; Rajbhandari et
al. 2021, "ZeRO-Infinity", sec. 5; DeepSpeed's zero/stage_1_and_2.py and stage3.py):

- `optimizer` (DeepSpeed `offload_optimizer: {device: cpu}`, OpenRLHF `--adam_offload`; needs
  ZeRO 1-3): each rank's partition of the fp32 master weights, the two Adam moments and an fp32
  gradient buffer live in host memory. In backward every micro-batch's reduced gradient
  partition is copied down over PCIe (overlapped with the rest of backward: overlap_comm); after
  the last micro-batch DeepSpeedCPUAdam updates the partition on the host (not overlapped with
  the GPU: the step waits for it; ZeRO-Offload's delayed parameter update is off by default)
  and the updated half-precision partition is copied back up.
- `optimizer+params` (DeepSpeed ZeRO-3 `offload_param: {device: cpu}`; FSDP
  `CPUOffload(offload_params=True)`): the half-precision weights live on the host too. Every
  forward and every backward (and the recomputed forward under checkpointing) fetches each
  rank's partition up before the all-gather; the GPU keeps only the gathered working set (the
  layers in flight). No weight copy after the step: the next forward fetches them.

The GPU's host link (PCIe) and the host's memory bandwidth are assumptions below; the CPU Adam
step is memory-bound on host DRAM (it streams the partition's state once per step).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuhours.estimate.assumptions import Assumption

#: PCIe generation of the GPU's host link by GPU generation, GB/s per direction of an x16 slot
#: (PCIe 3.0 x16 = 15.75, 4.0 = 31.5, 5.0 = 63 GB/s per direction; PCI-SIG). Volta and Turing
#: are Gen3, Ampere and Ada Gen4 (A100 datasheet: "PCIe Gen4: 64 GB/s" two-way), Hopper and
#: Blackwell's HGX parts Gen5 (H100 SXM datasheet: "PCIe Gen5: 128 GB/s" two-way). GB200's
#: Grace link (NVLink-C2C, 450 GB/s per direction) is not PCIe and has no row: refused.
HOST_LINK_GB_PER_S_ONE_WAY_BY_GENERATION: dict[str, Assumption] = {
    "volta": Assumption("host_link.volta", 15.75, "GB/s per direction", "PCIe 3.0 x16"),
    "turing": Assumption("host_link.turing", 15.75, "GB/s per direction", "PCIe 3.0 x16"),
    "ampere": Assumption("host_link.ampere", 31.5, "GB/s per direction",
                         "PCIe 4.0 x16 (A100 datasheet: PCIe Gen4 64 GB/s two-way)"),
    "ada": Assumption("host_link.ada", 31.5, "GB/s per direction", "PCIe 4.0 x16"),
    "hopper": Assumption("host_link.hopper", 63.0, "GB/s per direction",
                         "PCIe 5.0 x16 (H100 SXM datasheet: PCIe Gen5 128 GB/s two-way)"),
}

#: Share of the raw PCIe rate that pinned-memory copies reach. Assumption: CUDA's bandwidthTest
#: with pinned memory typically shows ~25 GB/s on a Gen4 x16 slot (of 31.5) and ~50 on Gen5;
#: DeepSpeed pins its offload buffers (pin_memory: true in its examples).
PCIE_COPY_EFFICIENCY = Assumption(
    "pcie_copy_efficiency", 0.8, "fraction of the PCIe rate",
    "assumption: pinned cudaMemcpy reaches ~25 of 31.5 GB/s (Gen4 x16), ~50 of 63 (Gen5)")

#: Host memory bandwidth the CPU Adam steps of one node's GPUs share, GB/s. Assumption: a
#: two-socket training server (8 DDR4-3200 or DDR5-4800 channels per socket: 410-610 GB/s
#: peak) running DeepSpeedCPUAdam (AVX-512/AVX2, OpenMP over the rank's cores; "5X-7X faster
#: than the standard PyTorch implementation", DeepSpeed ZeRO-Offload tutorial) at about a
#: quarter of the peak: streaming updates from 8 processes with their threads bound to cores
#: (the tutorial's --bind_cores_to_rank gives 1.3x: the rate is below the peak). Not measured
#: here: a host of one's own is better measured.
HOST_ADAM_GB_PER_S_PER_NODE = Assumption(
    "host_adam_gb_per_s_per_node", 100.0, "GB/s per node",
    "assumption: DeepSpeedCPUAdam streaming the node's partitions at ~1/4 of a two-socket "
    "server's 410-610 GB/s DRAM peak")

#: Gradient buffer that stays on the GPU while offloaded gradients flow down: DeepSpeed's
#: reduce_bucket_size default, 5e8 elements (deepspeed/runtime/zero/config.py).
GRAD_BUCKET_ELEMENTS = Assumption("offload_grad_bucket_elements", 5e8, "elements",
                                  "DeepSpeed's reduce_bucket_size default (zero/config.py)")

#: Bytes DeepSpeedCPUAdam moves per parameter of the partition per step: reads the fp32
#: weight, the fp32 gradient and both fp32 moments (16), writes weight and moments (12) and the
#: half-precision copy that goes back to the GPU (2). Counted from the update it performs.
CPU_ADAM_BYTES_PER_PARAM = 30.0


def host_link_bytes_per_s(generation: str, gpu_name: str) -> float:
    """Achievable bytes/s per direction between one GPU and its host (PCIe x efficiency)."""
    from gpuhours.errors import FieldError

    link = HOST_LINK_GB_PER_S_ONE_WAY_BY_GENERATION.get(generation)
    if link is None:
        raise FieldError("offload", f"{gpu_name} ({generation}) has no PCIe host link figure "
                         f"for CPU offload (rows: {', '.join(HOST_LINK_GB_PER_S_ONE_WAY_BY_GENERATION)})."
                         , "Use offload none on it.")
    return link.value * 1e9 * PCIE_COPY_EFFICIENCY.value


@dataclass(frozen=True)
class OffloadTime:
    """Seconds per optimizer step that CPU offload adds, per GPU."""

    #: gradients down (every micro-batch) and, with params offloaded, weights up for every
    #: forward and backward: the traffic that overlaps with compute
    pcie_overlapped_s: float
    #: the part of it the compute does not hide
    pcie_exposed_s: float
    #: DeepSpeedCPUAdam over the node's partitions, memory-bound on host DRAM
    cpu_adam_s: float
    #: the updated half-precision partition copied back up after the step (optimizer only)
    params_up_s: float

    @property
    def added_s(self) -> float:
        return self.pcie_exposed_s + self.cpu_adam_s + self.params_up_s


def offload_time(*, offload: str, grad_bytes_per_micro_batch: float,
                 weight_bytes_per_pass: float, weight_passes_per_micro_batch: int,
                 micro_batches: int, params_up_bytes: float, trainable_params_on_node: float,
                 link_bytes_per_s: float, compute_s: float) -> OffloadTime:
    """The offload's time per optimizer step on one GPU.

    - down and up while the step computes: the rank's reduced gradient partition
      (`grad_bytes_per_micro_batch`) in every micro-batch; with params offloaded, its weight
      partition (`weight_bytes_per_pass`) fetched `weight_passes_per_micro_batch` times (forward,
      backward, a recomputed forward). It overlaps with the step's compute (`compute_s`); what
      exceeds it is exposed.
    - CPU Adam: the partitions of the node's GPUs (`trainable_params_on_node`) x
      CPU_ADAM_BYTES_PER_PARAM at the node's host bandwidth, after backward.
    - the updated half-precision partition up (`params_up_bytes`, optimizer only), after it.
    """
    flowing = micro_batches * grad_bytes_per_micro_batch
    if offload == "optimizer+params":
        flowing += micro_batches * weight_passes_per_micro_batch * weight_bytes_per_pass
    overlapped = flowing / link_bytes_per_s
    host_bw = HOST_ADAM_GB_PER_S_PER_NODE.value * 1e9
    cpu_adam = trainable_params_on_node * CPU_ADAM_BYTES_PER_PARAM / host_bw
    params_up = params_up_bytes / link_bytes_per_s if offload == "optimizer" else 0.0
    return OffloadTime(overlapped, max(0.0, overlapped - compute_s), cpu_adam, params_up)


def host_bytes_per_gpu(*, offload: str, master_bytes: float, optimizer_bytes: float,
                       trainable_params_per_gpu: float, weights_bytes: float) -> float:
    """Host RAM one GPU's rank holds for the offloaded state, bytes: its partition's fp32 master
    weights and optimizer moments (`master_bytes`, `optimizer_bytes`, as they would have been on
    the GPU), an fp32 gradient buffer of the partition (4 bytes per trainable parameter:
    DeepSpeed accumulates the offloaded gradients in fp32 on the host) and, with params
    offloaded, its partition of the weights (`weights_bytes`). DeepSpeed's pinned staging
    buffers are left out."""
    host = master_bytes + optimizer_bytes + 4.0 * trainable_params_per_gpu
    if offload == "optimizer+params":
        host += weights_bytes
    return host
