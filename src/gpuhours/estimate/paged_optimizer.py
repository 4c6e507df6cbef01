"""bitsandbytes' paged optimizers: moments in CUDA managed memory (issue 14).

bitsandbytes' paged optimizers (PagedAdamW, PagedAdamW8bit; bitsandbytes 0.44.0, released
2024-09-23, the version beside torchtune's README table of 30b8519e8) allocate each moment
buffer in `Optimizer8bit.get_state_buffer` (bitsandbytes/optim/optimizer.py): a parameter of
fewer than 1e5 elements gets `torch.zeros_like` (torch's caching allocator); a larger one gets
`F.get_paged` (bitsandbytes/functional.py), whose memory comes from `cget_managed_ptr`, that is
`cudaMallocManaged(&ptr, bytes, cudaMemAttachHost)` (csrc/pythonInterface.cpp). The 8-bit
optimizer's block-wise absmax vectors (`torch.zeros`, one fp32 per 256 elements) stay in
torch's allocator. Before each parameter's update the step prefetches its two moments to the
GPU (`prefetch_state`, cudaMemPrefetchAsync) and synchronises.

What follows for the memory figures:

- torch's counters (`max_memory_allocated`, `max_memory_reserved`, the active bytes that
  torchtune logs) never see managed memory: the paged moments are not in `tensors_bytes`
  nor in the allocator's reserve. torchtune's PR #527 (2024-03-19) logged, for Llama-2-7B full
  fine-tuning in bf16 with PagedAdamW (fp32 moments: 7B x 8 bytes = 54 GB) and
  optimizer_in_bwd, "GPU peak memory allocation: 13.99 GB, reserved: 15.97 GB": the weights
  alone are 13.5 GB.
- On the device the moments are resident while there is room; when torch's allocator and the
  context leave less than they need, the driver evicts managed pages to host memory and
  migrates them back at the prefetch (CUDA unified memory oversubscription, Pascal and later).
  So the paged state never makes a setup not fit: `paged_resident_bytes` is what stays on the
  GPU, the rest goes over PCIe each step (`paged_overflow_bytes`). That traffic is not timed
  here (estimate/timing.py): its overlap with the backward (the step synchronises after every
  parameter) is not known, and it is reported instead.

Modelled for full fine-tuning, whose tensors are all far above the threshold but the norm
vectors (d or 2d elements). An adapter's matrices (rank x fan-in, fan-out x rank) fall either
side of it by rank and width: adapters' moments stay counted on the GPU (an upper bound of a
few MB at the usual ranks).
"""

from __future__ import annotations

from gpuhours.estimate.params import ParamCounts

#: bitsandbytes 0.44.0 optim/optimizer.py get_state_buffer: `p.numel() < 1e5` stays in torch
PAGED_MIN_ELEMENTS = 100_000


def paged_state_params(counts: ParamCounts, trainable: int, norm_elements: int) -> int:
    """Trainable parameters whose moments bitsandbytes pages under full fine-tuning: every
    trainable tensor of PAGED_MIN_ELEMENTS elements or more, which is all of them but the
    norm vectors (`norm_elements` elements each: one norm's weight and bias), of which a block
    has `counts.norms_per_layer / norm_elements` and the model one final norm. A norm of 1e5
    elements or more (hidden size of 100,000) is paged too. Biases, vectors as well, are
    counted as paged (their few hundred kB of moments are not told apart)."""
    if norm_elements >= PAGED_MIN_ELEMENTS:
        return trainable
    norms = counts.num_layers * counts.norms_per_layer + counts.final_norm
    return max(trainable - norms, 0)


def paged_moment_bytes_per_param(optimizer: str) -> float:
    """Bytes per paged parameter in CUDA managed memory: for 8-bit AdamW its two 1-byte
    moments (the absmax vectors stay in torch's allocator); for 32-bit AdamW its two fp32
    moments, whatever the parameter's dtype (bitsandbytes 0.44.0 Optimizer2State.init_state:
    `get_state_buffer(p, dtype=torch.float32)` for state1 and state2)."""
    return 2.0 if optimizer == "adamw-8bit" else 8.0


def paged_resident_bytes(paged_bytes: float, capacity_bytes: float,
                         device_bytes: float) -> float:
    """Bytes of the paged state on the GPU: as much as the GPU's `capacity_bytes` leaves beside
    the rest of the process (`device_bytes`: torch's reserved memory and the CUDA context),
    all of it when it fits."""
    return min(paged_bytes, max(capacity_bytes - device_bytes, 0.0))


def paged_overflow_bytes(paged_bytes: float, capacity_bytes: float,
                         device_bytes: float) -> float:
    """Bytes of the paged state that live on the host and cross PCIe each step (in at its
    parameter's prefetch, out when evicted): what `paged_resident_bytes` leaves."""
    return paged_bytes - paged_resident_bytes(paged_bytes, capacity_bytes, device_bytes)
