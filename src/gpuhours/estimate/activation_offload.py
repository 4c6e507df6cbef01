"""Activation offloading to host memory (torchtune's OffloadActivations; issue 14).

torchtune's recipes with `enable_activation_offloading: True` (recipes/
full_finetune_single_device.py, lora_finetune_single_device.py and torchtune/training/
_activation_offloading.py at pytorch/torchtune@1814feb17) run the model's forward (not the
loss) inside `OffloadActivations()`, a torch.autograd.graph.saved_tensors_hooks. Its pack hook
copies every tensor autograd saves of at least `min_offload_size` = 1024 bytes that is not a
parameter or buffer into a pinned CPU tensor (`torch.empty_like(..., pin_memory=True,
device="cpu")`, `copy_(non_blocking=True)`) on a second CUDA stream (`use_streams=True`), and
keeps the GPU tensor in a forward stash until `max_fwd_stash_size` = 5 newer saved tensors
have been packed (then waits for its copy's event and drops it). In backward its unpack hook
copies each back on the side stream when autograd asks for it and frees it once the next
autograd node starts. The output head runs under a NoOpManager (its input is not offloaded),
and the recipe refuses offloading without activation checkpointing.

Under checkpointing the tensors saved inside a checkpointed layer go to checkpoint's own inner
hooks (nothing is kept; the layer is recomputed), so what the outer hook packs is each layer's
input, which non-reentrant checkpoint saves outside its region (torch/utils/checkpoint.py:
`_NoopSaveInputs` in torch 2.5, `_CheckpointFrame.save_inputs` in later releases), and what
the model saves outside the layers (the final norm's input). tests/test_activation_offload.py
runs a real checkpointed model on this CPU with a counting pack hook: the packed bytes are the
layer inputs and the final norm's.

Counted (estimate/memory.py activation_bytes): the layer inputs leave the GPU but one. At the
end of the forward the stash holds the last five saved tensors, which are the final RMSNorm's
own (its fp32 input, saved by the square and again by the multiply with the rsqrt, the rsqrt,
the normalised output and its weight), so no layer input is left at the loss; in backward
each layer's input is brought back when its recomputation starts, beside the recomputed layer.
One layer input is counted in both phases (at the loss that is one too many: 48 MiB for
Llama 3.2 3B at 8,192 tokens). The final norm's saves stay counted on the GPU as before. Host
memory: every offloaded tensor, pinned (the same fp32 input packed twice is copied twice).
Time: the copies down (forward) and up (backward) run on the side stream beside the compute;
only what the compute cannot hide is added (estimate/timing.py).
"""

from __future__ import annotations

from gpuhours.estimate.offload import host_link_bytes_per_s

#: torchtune OffloadActivations' defaults (training/_activation_offloading.py @ 1814feb17)
MAX_FWD_STASH_SIZE = 5
MIN_OFFLOAD_SIZE_BYTES = 1024
#: layer inputs left on the GPU at the loss and while one layer is recomputed (module text)
LAYER_INPUTS_KEPT = 1


def layer_inputs_kept(num_layers: int) -> int:
    """Checkpointed layer inputs that stay on the GPU under activation offloading."""
    return min(num_layers, LAYER_INPUTS_KEPT)


def offloaded_bytes(num_layers: int, tokens: int, layer_input_bytes_per_token: float,
                    outside_bytes: float) -> float:
    """Bytes copied to pinned host memory per micro-batch: every checkpointed layer's input
    (tokens x its bytes per token) and the saves outside the layers (`outside_bytes`, the final
    norm's), each at least MIN_OFFLOAD_SIZE_BYTES at any real size. This is also the host RAM
    it needs, pinned."""
    return num_layers * tokens * layer_input_bytes_per_token + outside_bytes


def offload_pcie_s(bytes_per_micro_batch: float, micro_batches: int,
                   link_bytes_per_s: float) -> float:
    """Seconds of PCIe copies per optimizer step: each offloaded byte goes down in the forward
    and comes back up in the backward."""
    return 2.0 * bytes_per_micro_batch * micro_batches / link_bytes_per_s


def offload_exposed_s(pcie_s: float, compute_s: float) -> float:
    """The copies run on their own stream beside the compute (use_streams=True): only what
    the compute does not cover adds to the step."""
    return max(0.0, pcie_s - compute_s)


def host_link_for_offload(generation: str, gpu_name: str, lanes: int | None = None) -> float:
    """Pinned copy bytes/s per direction between the GPU and its host on `lanes` of PCIe
    (estimate/offload.py host_link_bytes_per_s: the PCIe figure by generation and copy
    efficiency)."""
    return host_link_bytes_per_s(generation, gpu_name, lanes, field="activation_offload")
