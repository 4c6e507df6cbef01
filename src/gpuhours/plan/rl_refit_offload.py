"""What a colocated trainer moves between host and GPU around each refit of its rollout engine
(`refit_offload`; issue 13).

NeMo-RL's Megatron policy worker, when generation is colocated (NVIDIA-NeMo/RL@108bffda, v0.5,
and the v0.6.0 tag: nemo_rl/algorithms/grpo.py `grpo_train` and `refit_policy_generation`;
nemo_rl/models/policy/workers/megatron_policy_worker.py), makes room for vLLM every step:

- `offload_before_refit` (before the engine's weights wake, inside the step's
  "prepare_for_generation/total" timer): the gradient buffers are freed (Megatron-Core's
  `_ParamAndGradBuffer.offload_to_cpu(move_params=False, move_grads=True)` resizes their
  storage to 0: nothing is copied), and `move_optimizer("cpu")` moves every tensor of the
  optimizer's state with `v.to("cpu")`: a synchronous copy into fresh pageable host memory.
  Under `use_precision_aware_optimizer` (grpo_math_1B.yaml and the performance recipes set it,
  with `bf16: true`) that state is Transformer Engine FusedAdam's `exp_avg` and `exp_avg_sq`
  (fp32) and `master_param`, which with Megatron-Core's default `store_param_remainders: True`
  holds only the int16 low halves of the fp32 master weights (distrib_optimizer.py
  `init_shard(torch.int16)`); without it the fp32 master copy is the inner optimizer's
  parameters, not its state, and stays on the GPU.
- `offload_after_refit` (after the weight transfer, same timer): `move_model(self.model,
  "cpu")`, whose DDP buffers `offload_to_cpu` copy the bf16 parameter buffer into a pinned
  host buffer (`param_data_cpu.copy_(param_data, non_blocking=True)`, pinned at the first
  step) and free it; the gradients, already freed, again move nothing.
- `prepare_for_lp_inference` (the "logprob_inference_prep" timer): `move_model(..., "cuda",
  move_grads=False)`: the bf16 parameters back up from the pinned buffer.
- `prepare_for_training` (the "training_prep" timer): the gradient buffers re-made and zeroed
  on the GPU (`reload_from_cpu`: no host copy), and, because generation is colocated
  (`self.is_generation_colocated`), `move_optimizer("cuda")`: the optimizer state up from the
  pageable host tensors.

The _ParamAndGradBuffer methods are those of the Megatron-LM fork NeMo-RL pins
(terrykong/Megatron-LM branch yuya/nemo-rl-use-dev @0d401602, the same text on the later
nemo-rl-yarn-lru-cache-fix @25a62edf; NeMo-RL pins b73ae5cd of that fork, not in the mirror;
upstream Megatron-LM has the same methods since 287d2f47, 2026-01-28). With dedicated
generation GPUs none of it runs: `offload_before_refit` / `offload_after_refit` are called only
when colocated, and `prepare_for_training` moves the optimizer only then (or with
`offload_optimizer_for_logprob`, false in every recipe).

Nothing overlaps these copies: each phase waits for its state before it starts, and the
pageable copies return only when done. So per step and GPU:

    seconds = 2 x weight_bytes / link + 2 x optimizer_state_bytes / (link / pageable slowdown)

Pure functions; bytes and seconds per GPU.
"""

from __future__ import annotations

from typing import Literal

#: Which of the optimizer's tensors are in its state and so move with `move_optimizer`:
#: "moments" (exp_avg, exp_avg_sq: the master copy is the inner optimizer's parameters and
#: stays), "moments+remainders" (precision-aware with store_param_remainders: the master
#: weights' int16 low halves, half the fp32 copy's bytes, move too), "moments+master"
#: (precision-aware without remainders: the whole fp32 master copy moves).
RefitOffload = Literal["none", "moments", "moments+remainders", "moments+master"]

#: Share of the fp32 master copy's bytes that each `refit_offload` choice moves.
MASTER_SHARE_MOVED: dict[str, float] = {
    "none": 0.0, "moments": 0.0, "moments+remainders": 0.5, "moments+master": 1.0}


def optimizer_state_bytes_moved(kind: str, moments_bytes: float, master_bytes: float) -> float:
    """Bytes of one GPU's optimizer state that `move_optimizer` copies each way: its shard of
    the Adam moments (`moments_bytes`) and the share of its fp32 master copy (`master_bytes`,
    4 bytes a parameter of the shard) that `kind` keeps in the optimizer's state
    (MASTER_SHARE_MOVED: the int16 remainders are 2 of those 4 bytes)."""
    if kind not in MASTER_SHARE_MOVED:
        raise ValueError(f"refit_offload must be one of {', '.join(MASTER_SHARE_MOVED)}, "
                         f"got {kind!r}")
    if kind == "none":
        return 0.0
    return moments_bytes + MASTER_SHARE_MOVED[kind] * master_bytes


def refit_offload_s(weight_bytes: float, optimizer_bytes: float, link_bytes_per_s: float,
                    pageable_slowdown: float) -> float:
    """Seconds one GPU spends each step moving the trainer's state around a colocated refit:
    its bf16 weight shard (`weight_bytes`) down to pinned host memory and back up, each way at
    the host link's achievable rate (`link_bytes_per_s`, per direction), and its optimizer state
    (`optimizer_bytes`) down into pageable host memory and back, each way `pageable_slowdown`
    times slower (the driver stages pageable copies through a pinned buffer). Not overlapped."""
    if link_bytes_per_s <= 0:
        raise ValueError(f"host link rate must be positive, got {link_bytes_per_s}")
    if pageable_slowdown < 1:
        raise ValueError(f"a pageable copy is no faster than a pinned one: slowdown "
                         f"{pageable_slowdown} < 1")
    return (2.0 * weight_bytes + 2.0 * optimizer_bytes * pageable_slowdown) / link_bytes_per_s
