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


def test_tiny_batches_are_host_bound(tiny, toy_gpu):
    e = estimate_training(Training(arch=tiny, micro_batch=1, seq_len=16), Hardware(gpu=toy_gpu),
                          "t")
    assert e.bottleneck.startswith("host issuing eager operators")


def test_host_time_by_hand(tiny, toy_gpu):
    # bf16-mixed runs under autocast: 55 forward + 89 backward operators per layer, no biases,
    # plus 32 + 24 outside the layers; each 32 us; host and GPU combine as a 1.5-norm
    t = Training(arch=tiny, micro_batch=1, seq_len=16, grad_accum=3)
    hw = Hardware(gpu=toy_gpu)
    st = training_step_time(tiny, t, hw, training_flops_per_token(tiny, 16), 202048)
    ops = tiny.num_layers * (55 + 89) + 32 + 24
    assert st.host_s == pytest.approx(3 * ops * 32e-6)
    gpu = st.matmul_s + st.attention_s + st.memory_bound_s
    assert st.host_exposed_s == pytest.approx((st.host_s ** 1.5 + gpu ** 1.5) ** (1 / 1.5) - gpu)
    # the micro-batches' host time adds up; the optimizer's 11 operators are issued once
    assert st.optimizer_s >= 11 * 32e-6


def test_host_operators_of_qwen2_lora_and_checkpointing_by_hand():
    from gpuhours.estimate.timing import host_ops_per_micro_batch

    # Qwen2.5-0.5B: 24 layers, q/k/v biases (2 backward operators each when trained)
    full = Training(model="qwen2.5-0.5b")
    assert host_ops_per_micro_batch(full.arch, full) == 24 * (55 + 89 + 3 * 2) + 32 + 24
    # LoRA on 7 linears: 8.6 forward and 7.1 backward per adapter, minus the frozen weight's
    # gradient matmul; the biases are frozen; nothing trainable outside the layers
    lora = Training(model="qwen2.5-0.5b", method="lora")
    per_layer = (55 + 7 * 8.6) + (89 + 7 * (7.1 - 1))
    assert host_ops_per_micro_batch(lora.arch, lora) == pytest.approx(24 * per_layer + 32)
    # checkpointing issues each layer's forward again inside the backward
    ckpt = Training(model="qwen2.5-0.5b", checkpointing=True)
    assert (host_ops_per_micro_batch(ckpt.arch, ckpt)
            - host_ops_per_micro_batch(full.arch, full)) == 24 * 55


@pytest.mark.parametrize(("precision", "optimizer", "impl", "bytes_per_param"), [
    # foreach AdamW over fp32 states, grads and params: 13 x 4 + 3 x 4 + 4 x 4
    ("bf16-amp", "adamw", "foreach", 80.0),
    ("fp32", "adamw", "foreach", 80.0),
    # fused: read p, g, m, v and write p, m, v once
    ("fp32", "adamw", "fused", 28.0),
    # -mixed: fp32 master and moments, bf16 grads, and the bf16 weights written back
    ("bf16-mixed", "adamw", "foreach", 13 * 4 + 3 * 2 + 4 * 4 + 2),
    # pure bf16: moments in bf16 too
    ("bf16", "adamw", "foreach", 13 * 2 + 3 * 2 + 4 * 2),
    ("fp32", "sgd", "foreach", 12.0),
    ("fp32", "sgd-momentum", "foreach", 5 * 4 + 4 + 2 * 4),
])
def test_optimizer_bytes_by_hand(precision, optimizer, impl, bytes_per_param):
    from gpuhours.estimate.timing import optimizer_bytes_per_param

    t = Training(model="qwen2.5-0.5b", precision=precision, optimizer=optimizer,
                 optimizer_impl=impl)
    assert optimizer_bytes_per_param(t) == pytest.approx(bytes_per_param)




def test_the_host_cost_per_operator_is_the_machines_when_given(tiny, toy_gpu):
    t = Training(arch=tiny, micro_batch=1, seq_len=16)
    f = training_flops_per_token(tiny, 16)
    assumed = training_step_time(tiny, t, Hardware(gpu=toy_gpu), f, 202048)
    fast = training_step_time(tiny, t, Hardware(gpu=toy_gpu, host_us_per_op=8.0), f, 202048)
    assert fast.host_s == pytest.approx(assumed.host_s * 8 / 32)
    e = estimate_training(t, Hardware(gpu=toy_gpu, host_us_per_op=8.0), "t")
    assert "8 us (given: host_us_per_op)" in e.step_time_breakdown_s["host_s"].source
