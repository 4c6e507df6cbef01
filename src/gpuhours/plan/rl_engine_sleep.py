"""A colocated rollout engine that sleeps between rollouts with its weights in host memory
(issue 13).

EasyR1 (hiyouga/EasyR1@8460e81797cbba99e8630374d80ad709b98df4f6, v0.3.2) builds its vLLM
engine with `enable_sleep_mode=True` and puts it to sleep after building it
(verl/workers/rollout/vllm_rollout_spmd.py: `self.inference_engine.sleep(level=1)`). Each
rollout then goes through its sharding manager (verl/workers/sharding_manager/fsdp_vllm.py
`load_vllm_and_sync_weights` / `offload_vllm`, called by ray_trainer.py `fit` inside the "gen"
timer and by `_validate` around the validation rollouts):

- `wake_up(tags=["weights"])` maps the engine's weight memory back and copies each buffer's
  host backup up to it;
- the trainer's weights are then loaded over them (the weight sync);
- `sleep(level=1)` after the rollout copies the weight buffers down to pinned host memory
  again, then unmaps all of the engine's memory (the KV cache is discarded, not copied).

vLLM's CuMemAllocator does both copies with a plain `cudaMemcpy` per buffer, allocation by
allocation, nothing beside them (vllm-project/vllm vllm/device_allocator/cumem.py
`CuMemAllocator.sleep`: `cpu_backup_tensor = torch.empty(..., pin_memory=...)`,
`libcudart.cudaMemcpy(cpu_ptr, ptr, size_in_bytes)`; `wake_up` the reverse). So every
rollout moves each GPU's share of the engine's weights down and up over its PCIe link, at the
host link's rate, and the step waits for it.

Pure functions; bytes and seconds per GPU.
"""

from __future__ import annotations


def engine_weight_bytes_per_gpu(params: float, bytes_per_weight: float,
                                tensor_parallel: int) -> float:
    """Bytes of the engine's weights one GPU holds: `params` at `bytes_per_weight` (bf16: 2,
    fp8 W8A8: 1), split over the engine's `tensor_parallel` GPUs."""
    if tensor_parallel < 1:
        raise ValueError(f"tensor_parallel must be at least 1, got {tensor_parallel}")
    return params * bytes_per_weight / tensor_parallel


def sleep_wake_s(weight_bytes_per_gpu: float, host_link_bytes_per_s: float) -> float:
    """Seconds of one sleep/wake cycle of a level-1 sleeping engine on one GPU: its weights
    copied down to host memory at `sleep` and up again at `wake_up`, one way each, at the
    host link's achievable rate (bytes/s per direction). Not overlapped: each `cudaMemcpy` is
    synchronous and nothing else runs in the sharding manager meanwhile."""
    if host_link_bytes_per_s <= 0:
        raise ValueError(f"host link rate must be positive, got {host_link_bytes_per_s}")
    return 2.0 * weight_bytes_per_gpu / host_link_bytes_per_s
