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
