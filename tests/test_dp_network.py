"""Data-parallel gradient traffic at scale (issue 16): ZeRO-2's reduce-scatter every
micro-batch and the latency of ZeRO-3's per-layer rings, by hand."""

from __future__ import annotations

import pytest

from gpuhours.estimate import parallel as P
from gpuhours.estimate.flops import training_flops
from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.timing import training_step_time
from gpuhours.setup import Hardware, Training


def test_zero2_reduces_every_micro_batch_by_hand():
    # 1e9 parameters, 2-byte gradients, 4 ranks: a ring moves (n - 1)/n = 3/4 of the buffer per
    # reduce-scatter or all-gather. DDP/ZeRO-1: one all-reduce, 2 x 3/4 x 2 GB = 3 GB, whatever
    # the accumulation; ZeRO-2 with 3 micro-batches: 3 reduce-scatters + 1 all-gather = 6 GB
    assert P.data_parallel_grad_bytes(1e9, 2, 4, zero_stage=1, micro_batches=3) == 3e9
    assert P.data_parallel_grad_bytes(1e9, 2, 4, zero_stage=2, micro_batches=3) == 6e9
    assert P.data_parallel_grad_bytes(1e9, 2, 4, zero_stage=2, micro_batches=1) == 3e9
    assert P.data_parallel_grad_bytes(1e9, 2, 1, zero_stage=2, micro_batches=3) == 0.0


def test_ring_latency_by_hand():
    # NCCL's ring model (Simple): 8.4 us + 3.4 us per step inside a node + 14 us per step across
    # nodes; 2,048 ranks in 256 nodes: 1,792 x 3.4 + 255 x 14 + 8.4 = 6,092.8 + 3,570 + 8.4 us
    assert P.ring_latency_s(2048, 256) == pytest.approx(9671.2e-6)
    assert P.ring_latency_s(8, 1) == pytest.approx((8.4 + 7 * 3.4) * 1e-6)
    assert P.ring_latency_s(1, 1) == 0.0


def _step(zero: int, accum: int, gpus: int = 16):
    t = Training(model="llama-2-7b", seq_len=2048, micro_batch=1, grad_accum=accum,
                 checkpointing=True, zero_stage=zero)
    hw = Hardware(gpu="a100-80gb", num_gpus=gpus)  # 25 GB/s per GPU between nodes (default)
    mem = training_memory(t.arch, t, gpus)
    return training_step_time(t.arch, t, hw, training_flops(t), mem.trainable_params)


def test_zero2_traffic_on_two_nodes_by_hand():
    # Llama-2-7B (6,738,415,616 parameters), bf16 gradients, 16 A100s in 2 nodes, each rank on
    # its own 25 GB/s NIC x 0.75 (the collective efficiency) = 18.75 GB/s: ZeRO-1's one
    # all-reduce moves 2 x 15/16 x 13.48 GB = 25.27 GB per rank, 1.348 s
    st = _step(zero=1, accum=4)
    assert st.communication_s == pytest.approx(2 * 15 / 16 * 6_738_415_616 * 2 / 18.75e9,
                                               rel=1e-6)
    # ZeRO-2 over the same 4 micro-batches moves (4 + 1)/2 = 2.5 times ZeRO-1's bytes
    assert _step(zero=2, accum=4).communication_s == pytest.approx(2.5 * st.communication_s)


def test_deepspeed_last_bucket_is_exposed_by_hand():
    # DeepSpeed ZeRO-1/2 reduces a bucket when the next gradient would overflow it, and what
    # is left when the backward ends after it (stage_1_and_2.py @ v0.12.3): 143M adapter
    # elements in a 2e8-element bucket never fill it, so all of the reduction waits
    assert P.deepspeed_reduce_exposed_share(143e6, 200_000_000, True, 0.8) == 1.0
    # 5e8 elements in 2e8 buckets: two full buckets hidden up to 80%, the last 1e8 exposed:
    # 1/5 + 4/5 x 0.2 = 0.36
    assert P.deepspeed_reduce_exposed_share(5e8, 200_000_000, True, 0.8) == pytest.approx(0.36)
    # an exact multiple: the last full bucket is reduced by the epilogue (4e8: 1/2 + 1/2 x 0.2)
    assert P.deepspeed_reduce_exposed_share(4e8, 200_000_000, True, 0.8) == pytest.approx(0.6)
    # overlap_comm off: every bucket on the compute stream, nothing hidden
    assert P.deepspeed_reduce_exposed_share(5e8, 200_000_000, False, 0.8) == 1.0


def _lora_zero2(bucket: int, gpus_per_node: int = 2):
    t = Training(model="llama-2-7b", method="lora", lora_rank=64, lora_targets="all-linear",
                 precision="bf16", seq_len=1024, micro_batch=1, grad_accum=8,
                 checkpointing=True, zero_stage=2, deepspeed_reduce_bucket=bucket,
                 deepspeed_overlap_comm=True if bucket else None)
    hw = Hardware(gpu="a100-80gb", num_gpus=4, gpus_per_node=gpus_per_node)
    mem = training_memory(t.arch, t, 4)
    return training_step_time(t.arch, t, hw, training_flops(t), mem.trainable_params), mem


def test_deepspeed_zero2_lora_reduction_waits_for_the_backward_by_hand():
    # Llama-2-7B LoRA r64 on all linears: 64 x (4096 + 4096) x 4 + 64 x (4096 + 11008) x 3 per
    # layer, x 32 = 159,907,840 adapter elements, under one 2e8 bucket. DeepSpeed reduces them
    # in bf16 (communication_data_type) on 4 GPUs in 2 nodes, each on its 25 GB/s NIC x 0.75:
    # 8 reduce-scatters + 1 all-gather of 3/4 x 2 bytes each, all exposed
    st, mem = _lora_zero2(200_000_000)
    adapters = 32 * (64 * 8192 * 4 + 64 * (4096 + 11008) * 3)
    assert mem.trainable_params == adapters
    expected = 9 * 0.75 * adapters * 2 / 18.75e9
    assert st.communication_s == pytest.approx(expected, rel=1e-6)
    assert st.communication_exposed_s == pytest.approx(expected, rel=1e-6)
    # without DeepSpeed's bucket (torch-side ZeRO-2 as before): the same rings in fp32
    # adapters' gradients, 80% hidden behind compute
    plain, _ = _lora_zero2(0)
    assert plain.communication_s == pytest.approx(2 * expected)
    assert plain.communication_exposed_s == pytest.approx(0.2 * plain.communication_s)
