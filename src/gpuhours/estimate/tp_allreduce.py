"""Latency of one small all-reduce in an inference engine's tensor-parallel group, seconds.

A decode step all-reduces a few kilobytes of activations twice a layer, so its collectives cost
their latency, not their bytes. Within one node of up to 8 GPUs vLLM runs its own one-shot
all-reduce over NVLink (vllm/distributed/device_communicators/custom_all_reduce.py:
CustomAllreduce._SUPPORTED_WORLD_SIZES = [2, 4, 6, 8], and it declines a group that spans
nodes), costed at assumptions.TP_ALLREDUCE_LATENCY_S. A wider group (vLLM tensor_parallel_size
16-64: NeMo-RL's DeepSeek-V3 and Qwen3-235B rollouts) falls back to NCCL, whose own latency
model is used here: NVIDIA/nccl@5067397c src/graph/tuning.cc, the default tuner constants
(baseLatencies, hwLatencies of the LL protocol, which NCCL picks for small messages) and the
all-reduce latency of its ring and tree algorithms; NCCL takes the faster.
"""

from __future__ import annotations

import math

from gpuhours.estimate import assumptions as A

#: GPUs vLLM's custom all-reduce serves (CustomAllreduce._SUPPORTED_WORLD_SIZES' largest)
VLLM_CUSTOM_ALLREDUCE_MAX_GPUS = 8

# NCCL tuning.cc @5067397c, ncclTunerConstantsDefaults, protocol LL (us)
_NCCL_BASE_TREE_US = 6.8
_NCCL_BASE_RING_US = 6.6
_NCCL_NVLINK_LL_US = 0.6      # hwLatencies[NVLINK][TREE and RING][LL]
_NCCL_NET_TREE_LL_US = 5.0    # hwLatencies[NET][TREE][LL]
_NCCL_NET_RING_LL_US = 2.7    # hwLatencies[NET][RING][LL]


def nccl_allreduce_latency_s(ranks: int, ranks_per_node: int) -> float:
    """NCCL's modelled latency of one all-reduce of `ranks` GPUs, `ranks_per_node` of them in
    each NVLink domain, LL protocol (tuning.cc @5067397c ncclTopoTuneModel), seconds:
    ring = base 6.6 + (2(ranks-1) - 2(nodes-1)) x 0.6 + 2(nodes-1) x 2.7 us;
    tree = base 6.8 + 2 x ((ranks_per_node - 1) x 0.6 + log2(nodes) x 5.0) us; the lesser.
    Not counted: the graph's own latencyInter and the network plugin's overhead term."""
    nodes = math.ceil(ranks / ranks_per_node)
    per_node = min(ranks, ranks_per_node)
    inter_steps = 2 * (nodes - 1)
    ring = (_NCCL_BASE_RING_US + (2 * (ranks - 1) - inter_steps) * _NCCL_NVLINK_LL_US
            + inter_steps * _NCCL_NET_RING_LL_US)
    tree = _NCCL_BASE_TREE_US + 2 * ((per_node - 1) * _NCCL_NVLINK_LL_US
                                     + math.floor(math.log2(nodes)) * _NCCL_NET_TREE_LL_US)
    return min(ring, tree) * 1e-6


def tp_allreduce_latency_s(tensor_parallel: int, gpus_per_node: int) -> float:
    """One decode all-reduce's latency in an engine's tensor-parallel group, seconds: vLLM's
    custom all-reduce (assumptions.TP_ALLREDUCE_LATENCY_S) for up to 8 GPUs of one node, NCCL's
    modelled latency (`nccl_allreduce_latency_s`) for a wider group or one across nodes."""
    if tensor_parallel <= min(VLLM_CUSTOM_ALLREDUCE_MAX_GPUS, gpus_per_node):
        return A.TP_ALLREDUCE_LATENCY_S.value
    return nccl_allreduce_latency_s(tensor_parallel, gpus_per_node)
