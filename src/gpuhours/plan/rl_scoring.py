"""What an RL step's scoring passes (the policy's old log-probs, the reference model) cost
beyond the decoder's forward over every sequence (estimate/generation.py scoring_time_s):

- a vision-language model's images: each scoring forward runs the vision tower over every
  image of every sequence, as the update does (transformers' Qwen2.5-VL forward encodes
  `pixel_values` on every call; EasyR1 @8460e817 verl/workers/actor/dp_actor.py
  `_forward_micro_batch` passes the batch's `multi_modal_inputs` to each forward, old-log-prob
  and reference passes included);
- a reference model whose weights live in host memory (`ref_offload`; FSDP
  `CPUOffload(offload_params=True)`, EasyR1's default `ref.fsdp.enable_cpu_offload: true` in
  examples/config.yaml @8460e817): FSDP keeps each rank's shard on the host (pinned) and copies
  it to the GPU before every forward's all-gather, then drops the GPU copy after the forward
  (torch FullyShardedDataParallel, flat_param.py `pre_unshard` / `_use_sharded_flat_param`), so
  every micro-batch of the pass moves the rank's whole shard up over PCIe. The copy runs on
  FSDP's pre-unshard stream ahead of the compute that needs it: only what exceeds the pass's
  compute is added;
- a MoE model trained with expert parallelism (Training.ep above 1): each scoring forward sends
  every MoE layer's tokens to their experts' ranks and back, as the update's forward does
  (estimate/parallel.py: the all-to-all's two passes, or Megatron-Core's allgather dispatcher's
  gathers and fp64 combine), on the EP group's link and, as the training step's model-parallel
  traffic, on the critical path (assumptions.MODEL_PARALLEL_COMM_OVERLAP).

Pure functions; seconds per GPU.
"""

from __future__ import annotations

import math

from gpuhours.catalog.schema import GpuSpec
from gpuhours.estimate import assumptions as A
from gpuhours.estimate import parallel as P
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.memory import ACTIVATION_BYTES
from gpuhours.estimate.timing import group_link_bytes_per_s
from gpuhours.setup import Hardware, Training

#: bytes per reference-model weight as it sits on the host: the frozen copy is loaded in bf16
#: (EasyR1 @8460e817 verl/workers/fsdp_workers.py `_build_model_optimizer`: torch_dtype float32
#: for the trained roles, bfloat16 for "ref"; verl likewise builds its reference in bf16)
REF_BYTES_PER_PARAM = 2.0


def scoring_micro_batches(sequences_per_gpu: float, tokens_per_sequence: float,
                          budget_tokens: float) -> int:
    """Micro-batches of one scoring pass on one GPU: whole sequences packed up to
    `budget_tokens` each (verl/EasyR1 dynamic batching: `max_token_len` per micro-batch;
    a sequence is never split), at least one sequence a micro-batch."""
    per_micro = max(1, int(budget_tokens // tokens_per_sequence))
    return max(1, math.ceil(sequences_per_gpu / per_micro))


def ref_shard_bytes(params: float, shards: int) -> float:
    """Bytes of one rank's shard of the reference weights (REF_BYTES_PER_PARAM x params / the
    FSDP shards: a full shard over the training GPUs)."""
    return REF_BYTES_PER_PARAM * params / max(1, shards)


def ref_stream_s(shard_bytes: float, micro_batches: int, link_bytes_per_s: float,
                 compute_s: float) -> tuple[float, float]:
    """(copy seconds, seconds added) of a reference pass whose weights are streamed from the
    host: the rank's shard (`shard_bytes`) up once per forward micro-batch at the host link's
    rate, overlapped with the pass's compute (`compute_s`); what exceeds it is added."""
    copy_s = micro_batches * shard_bytes / link_bytes_per_s
    return copy_s, max(0.0, copy_s - compute_s)


def vision_scoring_s(t: Training, sequences: float, gpu: GpuSpec, precision: str) -> float:
    """Seconds of the vision tower's forward over the images of `sequences` sequences on one
    GPU (0 without images): images x the tower's forward FLOPs per image (estimate/vision.py
    vision_forward_flops) at the GEMM efficiency of the tower's width, like the decoder's
    scoring forward."""
    grid, v = t.image_grid, t.arch.vision
    if grid is None or v is None:
        return 0.0
    from gpuhours.estimate.timing import gemm_efficiency, peak_flops
    from gpuhours.estimate.vision import vision_forward_flops

    flops = sequences * t.images_per_example * vision_forward_flops(v, grid).total
    return flops / (peak_flops(gpu, precision) * gemm_efficiency(gpu, v.hidden_size))


def ref_offload_s(*, params: float, shards: int, sequences_per_gpu: float,
                  tokens_per_sequence: float, budget_tokens: float, link_bytes_per_s: float,
                  compute_s: float) -> tuple[float, float, int]:
    """(copy seconds, seconds added, micro-batches) of a reference pass under `ref_offload`:
    the micro-batches of the pass (`scoring_micro_batches`) each copy the rank's shard of the
    bf16 reference weights (`ref_shard_bytes`) up (`ref_stream_s`)."""
    micro = scoring_micro_batches(sequences_per_gpu, tokens_per_sequence, budget_tokens)
    copy_s, added_s = ref_stream_s(ref_shard_bytes(params, shards), micro, link_bytes_per_s,
                                   compute_s)
    return copy_s, added_s, micro


def expert_scoring_s(t: Training, arch: ModelArch, hw: Hardware, tokens_per_rank: float,
                     stages: int = 1) -> float:
    """Seconds of one scoring pass's expert-parallel traffic on one GPU: `tokens_per_rank`
    tokens of its data-parallel group (split over t.tp and t.cp, as the training step splits
    them) through arch.moe_layers / `stages` MoE layers, each sending the forward's bytes
    (parallel.expert_all_to_all_bytes_per_layer with backward False; with the megatron path's
    allgather-unfused dispatch, parallel.expert_allgather_bytes_per_layer) over the EP group's
    link (timing.group_link_bytes_per_s) at assumptions.COLLECTIVE_EFFICIENCY, the share
    assumptions.MODEL_PARALLEL_COMM_OVERLAP hidden. 0 without expert parallelism."""
    if not arch.is_moe or t.ep <= 1:
        return 0.0
    tokens = tokens_per_rank / (t.tp * t.cp)
    a = ACTIVATION_BYTES[t.precision]
    if t.kernels == "megatron" and t.moe_dispatch == "allgather-unfused":
        per_layer = P.expert_allgather_bytes_per_layer(
            tokens, arch.hidden_size, a, arch.num_experts, t.ep, backward=False)
    else:
        per_layer = P.expert_all_to_all_bytes_per_layer(
            tokens, arch.hidden_size, a, arch.experts_per_token, t.ep, backward=False)
    bw, _ = group_link_bytes_per_s(hw, t.ep)
    seconds = arch.moe_layers / max(1, stages) * per_layer / (bw * A.COLLECTIVE_EFFICIENCY.value)
    return seconds * (1.0 - A.MODEL_PARALLEL_COMM_OVERLAP.value)
