"""CPU offload of training state (DeepSpeed ZeRO-Offload / ZeRO-Infinity, FSDP CPUOffload):
what leaves the GPU, the host RAM it takes, and the time it adds.

How DeepSpeed runs it (Ren et al. 2021, "ZeRO-Offload", sec. 4.1 and fig. 5; Rajbhandari et
al. 2021, "ZeRO-Infinity", sec. 5; DeepSpeed's zero/stage_1_and_2.py and stage3.py):

- `optimizer` (DeepSpeed `offload_optimizer: {device: cpu}`, OpenRLHF `--adam_offload`; needs
  ZeRO 1-3): each rank's partition of the fp32 master weights, the two Adam moments and an fp32
  gradient buffer live in host memory. In backward every micro-batch's reduced gradient
  partition goes down over PCIe, and with accumulation the running sum comes back up to be
  added to on the GPU (zero12_offload_grad_bytes_per_param); the copies overlap the rest of
  backward only with overlap_comm (DeepSpeed's default for ZeRO-3 only: zero/config.py
  overlap_comm_valid @v0.13.2; below it they run on the compute stream). After the last
  micro-batch DeepSpeedCPUAdam updates the partition on the host (not overlapped with the
  GPU: the step waits for it; ZeRO-Offload's delayed parameter update is off by default) and
  the updated half-precision partition is copied back up.
- `optimizer+params` (DeepSpeed ZeRO-3 `offload_param: {device: cpu}`; FSDP
  `CPUOffload(offload_params=True)`): the half-precision weights live on the host too. Every
  forward and every backward (and the recomputed forward under checkpointing) fetches each
  rank's partition up before the all-gather; the GPU keeps only the gathered working set (the
  layers in flight). No weight copy after the step: the next forward fetches them.

The GPU's host link (PCIe) is an assumption below; the CPU Adam step's rate is a published
measurement of one node (HOST_ADAM_PARAMS_PER_S_PER_NODE).
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

#: How much slower a copy between the GPU and pageable host memory runs than one from pinned
#: memory: the driver stages it through a pinned buffer, and the call returns only when the
#: bytes have moved, so nothing overlaps it. DeepSpeed PR #5301 (2024-03-20, in 0.14.1) moved
#: ZeRO-1/2 offload's step copy up from a CPU-cast pageable tensor to a pinned one: "Speedup h2d
#: memcpy by 6x on single GPU and 4-5x on 8GPU node"; PR #8207 (2026) made pin_memory the
#: default because "the prior False silently selected the slow staged pageable copy ... with no
#: overlap against backward compute". The 8-GPU node's middle, 4.5, taken for every such copy
#: (the pinned copy it was measured against moved 4 bytes a parameter, the pageable one 2 after
#: a CPU cast: per byte the pageable path is slower still; taken as 4.5 all the same).
PAGEABLE_COPY_SLOWDOWN = Assumption(
    "pageable_copy_slowdown", 4.5, "x the pinned copy's time",
    "DeepSpeed PR #5301: pinned H2D 4-5x faster than the pageable path on an 8-GPU node (6x on "
    "one GPU)")

#: DeepSpeedCPUAdam's rate over the partitions of one node's GPUs, parameters per second
#: (the 8 ranks' steps run at once and share the host). A published measurement: DeepSpeed
#: issue #6834 (deepspeed 0.14.5; Qwen-72B, ZeRO-3 with the optimizer and parameters offloaded,
#: 4 nodes of 8 A100-80GB): the optimizer step took about 10 s with offload against 0.2 s
#: without (the maintainer's reading of the run's wall_clock_breakdown, 2024-12-11), so one
#: node stepped 72e9 / 4 = 18e9 parameters in ~10 s: 1.8e9 parameters/s, i.e. ~54 GB/s of the
#: host's DRAM at 30 bytes a parameter (CPU_ADAM_BYTES_PER_PARAM). The host's CPU and the
#: threads per rank are not stated (DeepSpeed's launcher sets OMP_NUM_THREADS only with
#: --bind_cores_to_rank, launcher/launch.py @v0.13.2; PR #7474 measured 1.3x from binding).
#: The rate covers what DeepSpeed's step timer holds (stage3.py step @v0.14.5): the gradients'
#: unscale and clip on the host, the Adam update and the cast of the updated fp32 partition to
#: half precision (torch converts a CPU-to-GPU copy's dtype on the CPU: ATen cuda/Copy.cu
#: copy_kernel_cuda, as ZeRO-1/2's `bit16_partitions[...].copy_(fp32_partition)` does too).
#: Replaced 100 GB/s (an assumed quarter of a two-socket DRAM peak; 3.3e9 parameters/s) on
#: 2026-11-24; no RL or fine-tuning validation row was used to set it.
HOST_ADAM_PARAMS_PER_S_PER_NODE = Assumption(
    "host_adam_params_per_s_per_node", 1.8e9, "parameters/s per node",
    "measured, DeepSpeed issue #6834: a 72B ZeRO-3 offload step ~10 s on each of 4 nodes of "
    "8 A100 (18e9 parameters per node); the node's CPU not stated")

#: Gradient buffer that stays on the GPU while offloaded gradients flow down: DeepSpeed's
#: reduce_bucket_size default, 5e8 elements (deepspeed/runtime/zero/config.py).
GRAD_BUCKET_ELEMENTS = Assumption("offload_grad_bucket_elements", 5e8, "elements",
                                  "DeepSpeed's reduce_bucket_size default (zero/config.py)")

#: Bytes DeepSpeedCPUAdam moves per parameter of the partition per step: reads the fp32
#: weight, the fp32 gradient and both fp32 moments (16), writes weight and moments (12) and the
#: half-precision copy that goes back to the GPU (2). Counted from the update it performs;
#: used only to read HOST_ADAM_PARAMS_PER_S_PER_NODE as a host bandwidth.
CPU_ADAM_BYTES_PER_PARAM = 30.0


def zero12_offload_grad_bytes_per_param(*, micro_batches: int,
                                        grad_bytes: float) -> tuple[float, float]:
    """(down, up) bytes per parameter of a rank's partition per optimizer step that DeepSpeed
    ZeRO-1/2 with offload_optimizer moves over PCIe for the gradients (deepspeed v0.13.2
    runtime/zero/stage_1_and_2.py copy_grads_in_partition): with gradient accumulation every
    micro-batch after the first copies the partition's accumulated gradient up from pinned
    host memory in the gradient dtype (`grad_bytes`) and adds it on the GPU, and every
    micro-batch but the last copies the sum back down (async_accumulate_grad_in_cpu_via_gpu);
    the last sends it down as fp32 into the optimizer's gradient buffer
    (async_inplace_copy_grad_to_fp32_buffer_from_gpu: `.float()`, then the copy: 4 bytes).
    One micro-batch: (4, 0)."""
    extra = micro_batches - 1
    return extra * grad_bytes + 4.0, extra * grad_bytes


def zero3_offload_grad_bytes_per_param(*, micro_batches: int,
                                       grad_bytes: float) -> tuple[float, float]:
    """(down, up) bytes per parameter of a rank's partition per optimizer step that DeepSpeed
    ZeRO-3 with offload_optimizer moves over PCIe for the gradients (deepspeed v0.13.2
    runtime/zero/stage3.py partition_grads; its gradient partitions live in a host buffer of
    gradient_accumulation_dtype, the model's dtype unless data_types sets it): every
    micro-batch copies its reduced partition into the host buffer and reads the buffer back to
    the GPU (the first with `copy_` then `.to(device)`, the later ones `.to(device)`, add,
    `copy_`), and the last sends the sum into the optimizer's fp32 gradient buffer once more
    (a copy across dtypes: in `grad_bytes`, converted on the host). So down
    (micro_batches + 1) x grad_bytes, up micro_batches x grad_bytes."""
    return (micro_batches + 1) * grad_bytes, micro_batches * grad_bytes


def host_link_bytes_per_s(generation: str, gpu_name: str, lanes: int | None = None,
                          field: str = "offload") -> float:
    """Achievable bytes/s per direction between one GPU and its host (PCIe x efficiency), on
    `lanes` of PCIe (Hardware.pcie_lanes; None = the x16 the figures are for). `field`: the
    setup field that asked for host copies, named in the error where the GPU has no figure."""
    from gpuhours.errors import FieldError

    link = HOST_LINK_GB_PER_S_ONE_WAY_BY_GENERATION.get(generation)
    if link is None:
        raise FieldError(field, f"{gpu_name} ({generation}) has no PCIe host link figure "
                         f"for copies to the host (rows: "
                         f"{', '.join(HOST_LINK_GB_PER_S_ONE_WAY_BY_GENERATION)}).",
                         f"Drop {field} on it.")
    return link.value * 1e9 * PCIE_COPY_EFFICIENCY.value * (lanes or 16) / 16


@dataclass(frozen=True)
class OffloadTime:
    """Seconds per optimizer step that CPU offload adds, per GPU."""

    #: gradients down and up (per micro-batch) and, with params offloaded, weights up for
    #: every forward and backward: the traffic that overlaps with compute when DeepSpeed
    #: runs it beside the compute
    pcie_overlapped_s: float
    #: the part of it the compute does not hide (all of the gradients' share when DeepSpeed
    #: copies them on the compute stream)
    pcie_exposed_s: float
    #: DeepSpeedCPUAdam over the node's partitions (HOST_ADAM_PARAMS_PER_S_PER_NODE)
    cpu_adam_s: float
    #: the updated half-precision partition copied back up after the step (optimizer only)
    params_up_s: float

    @property
    def added_s(self) -> float:
        return self.pcie_exposed_s + self.cpu_adam_s + self.params_up_s


def offload_time(*, offload: str, grad_bytes_per_step: float, grads_overlap: bool,
                 weight_bytes_per_pass: float, weight_passes_per_micro_batch: int,
                 micro_batches: int, params_up_bytes: float, trainable_params_on_node: float,
                 link_bytes_per_s: float, compute_s: float,
                 copies: str = "pinned") -> OffloadTime:
    """The offload's time per optimizer step on one GPU.

    - PCIe while the step computes: the rank's gradient partition, down and up over all the
      micro-batches (`grad_bytes_per_step`: zero12_offload_grad_bytes_per_param's down + up for
      ZeRO-1/2, down in the gradient dtype every micro-batch for ZeRO-3); with params offloaded,
      its weight partition (`weight_bytes_per_pass`) fetched `weight_passes_per_micro_batch`
      times (forward, backward, a recomputed forward). Copies in one stream, one after the
      other. What can overlap the step's compute (`compute_s`) and exceeds it is exposed; the
      gradients' copies overlap only with `grads_overlap` (DeepSpeed's overlap_comm: ZeRO-1/2
      otherwise copy on the compute stream, stage_1_and_2.py reduce_ipg_grads @v0.13.2).
    - CPU Adam: the partitions of the node's GPUs (`trainable_params_on_node`) at
      HOST_ADAM_PARAMS_PER_S_PER_NODE, after backward.
    - the updated half-precision partition up (`params_up_bytes`, optimizer only), after it.
    - `copies` (setup.py OffloadCopies): "pageable-step" runs that last copy at
      1/PAGEABLE_COPY_SLOWDOWN of the link's rate (DeepSpeed before 0.14.1 casts the fp32
      partition to half precision on the CPU, into pageable memory: ZeRO-1/2's
      `bit16_partitions[...].copy_(fp32_partition)`, ZeRO-3's
      `_reassign_or_swap_out_partitioned_parameters` @v0.13.2, PR #5301); "pageable" every
      copy, none of them hidden behind compute (DeepSpeed's pin_memory off, PR #8207).
    """
    pageable = copies == "pageable"
    rate = link_bytes_per_s / (PAGEABLE_COPY_SLOWDOWN.value if pageable else 1.0)
    grads_s = grad_bytes_per_step / rate
    weights_s = 0.0
    if offload == "optimizer+params":
        weights_s = micro_batches * weight_passes_per_micro_batch * weight_bytes_per_pass / rate
    if pageable:  # staged copies return when done: nothing runs beside them
        exposed = grads_s + weights_s
    else:
        hideable = weights_s + (grads_s if grads_overlap else 0.0)
        exposed = max(0.0, hideable - compute_s) + (0.0 if grads_overlap else grads_s)
    cpu_adam = trainable_params_on_node / HOST_ADAM_PARAMS_PER_S_PER_NODE.value
    up_rate = link_bytes_per_s / (1.0 if copies == "pinned" else PAGEABLE_COPY_SLOWDOWN.value)
    params_up = params_up_bytes / up_rate if offload == "optimizer" else 0.0
    return OffloadTime(grads_s + weights_s, exposed, cpu_adam, params_up)


def host_accumulation_bytes_per_param(*, zero_stage: int, zero3_engine: str, grad_accum: int,
                                       grad_bytes: float) -> float:
    """Bytes per partition parameter of DeepSpeed's host buffer for the gradients between
    micro-batches, in the gradient dtype: ZeRO-1/2 keeps one when it accumulates
    (stage_1_and_2.py `accumulated_grads_in_cpu`, made at the first micro-batch of
    gradient_accumulation_steps > 1, @v0.13.2); DeepSpeed's ZeRO-3 always keeps its gradient
    partitions there (stage3.py `grad_partitions_flat_buffer` on the offload device). FSDP's
    CPUOffload (zero3_engine fsdp): none counted."""
    if zero_stage >= 3:
        return grad_bytes if zero3_engine == "deepspeed" else 0.0
    return grad_bytes if grad_accum > 1 else 0.0


def host_bytes_per_gpu(*, offload: str, master_bytes: float, optimizer_bytes: float,
                       trainable_params_per_gpu: float, weights_bytes: float,
                       accumulation_bytes: float = 0.0) -> float:
    """Host RAM one GPU's rank holds for the offloaded state, bytes: its partition's fp32 master
    weights and optimizer moments (`master_bytes`, `optimizer_bytes`, as they would have been on
    the GPU), an fp32 gradient buffer of the partition (4 bytes per trainable parameter:
    DeepSpeed accumulates the offloaded gradients in fp32 on the host) and, with params
    offloaded, its partition of the weights (`weights_bytes`), and DeepSpeed's host buffer that
    accumulates the gradient partition across micro-batches in the gradient dtype
    (`accumulation_bytes`: host_accumulation_bytes_per_param). DeepSpeed's pinned staging
    buffers are left out."""
    host = master_bytes + optimizer_bytes + 4.0 * trainable_params_per_gpu + accumulation_bytes
    if offload == "optimizer+params":
        host += weights_bytes
    return host
