"""Step-time arithmetic on a toy GPU with round numbers."""

from __future__ import annotations

import pytest

from gpuhours.estimate import assumptions as A
from gpuhours.estimate.estimator import estimate_training, training_amount
from gpuhours.estimate.flops import training_flops_per_token
from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.timing import gemm_efficiency, training_step_time
from gpuhours.setup import Hardware, Training


def test_gemm_efficiency_is_generation_times_width(toy_gpu):
    # ampere 0.80 x 64 / (64 + 128)
    assert gemm_efficiency(toy_gpu, 64) == pytest.approx(0.80 * 64 / 192)


def test_matmul_time_by_hand(tiny, toy_gpu):
    t = Training(arch=tiny, micro_batch=8, seq_len=128)
    hw = Hardware(gpu=toy_gpu)
    f = training_flops_per_token(tiny, 128)
    st = training_step_time(tiny, t, hw, f, 202048)
    e = 0.80 * 64 / 192
    assert st.matmul_s == pytest.approx(1024 * 6 * 137728 / (100e12 * e))
    assert st.communication_s == 0


def test_accumulation_does_not_change_time_per_token(tiny, toy_gpu):
    hw = Hardware(gpu=toy_gpu)
    one = estimate_training(Training(arch=tiny, micro_batch=64, seq_len=512), hw, "t")
    four = estimate_training(Training(arch=tiny, micro_batch=64, seq_len=512, grad_accum=4),
                             hw, "t")
    # the optimizer step is amortised over 4x the tokens: per-token time can only drop a little
    assert four.tokens_per_s_per_gpu.value >= one.tokens_per_s_per_gpu.value
    assert four.tokens_per_s_per_gpu.value == pytest.approx(one.tokens_per_s_per_gpu.value,
                                                            rel=0.05)


def test_steps_from_examples_and_epochs(tiny, toy_gpu):
    # seed 002's error: 600K examples x 3 epochs is not 1.8M steps at batch 32
    t = Training(arch=tiny, micro_batch=8, seq_len=128, grad_accum=4)
    amount = training_amount(t, Hardware(gpu=toy_gpu), examples=600_000, epochs=3)
    assert amount is not None
    tokens, steps, _ = amount
    assert steps == 600_000 * 3 / 32
    assert tokens == steps * 32 * 128


def test_data_parallel_all_reduce_by_hand(tiny, toy_gpu):
    t = Training(arch=tiny, micro_batch=8, seq_len=128, precision="bf16")
    hw = Hardware(gpu=toy_gpu, num_gpus=4)
    f = training_flops_per_token(tiny, 128)
    n = training_memory(tiny, t, 4).trainable_params
    st = training_step_time(tiny, t, hw, f, n)
    # ring all-reduce: 2 x (N-1)/N x bf16 grads over 200 GB/s per direction x efficiency
    bw = 400 / 2 * 1e9 * A.COLLECTIVE_EFFICIENCY.value
    assert st.communication_s == pytest.approx(2 * 3 / 4 * 2 * n / bw)
    assert 0 <= st.communication_exposed_s <= st.communication_s


def test_tiny_batches_are_launch_bound(tiny, toy_gpu):
    e = estimate_training(Training(arch=tiny, micro_batch=1, seq_len=16), Hardware(gpu=toy_gpu),
                          "t")
    assert e.bottleneck.startswith("kernel launches")
