"""Hand-worked examples of each formula, with the arithmetic written out."""

from __future__ import annotations

import pytest

from gpuhours.estimate import assumptions as A
from gpuhours.estimate.flops import training_flops_per_token
from gpuhours.estimate.memory import (
    QLORA_BYTES_PER_PARAM,
    activation_bytes,
    activation_bytes_per_token_layer,
    logits_bytes,
    state_bytes_per_param,
    training_memory,
)
from gpuhours.estimate.params import count_params
from gpuhours.setup import Training


def test_param_count_of_tiny_model_by_hand(tiny):
    # embedding 1000*64 = 64000; per layer: q 64*64 + k 64*32 + v 64*32 + o 64*64 = 12288,
    # MLP 3*64*128 = 24576, two RMSNorms 2*64 = 128 -> 36992; x2 layers = 73984;
    # final norm 64; untied head 64000.
    c = count_params(tiny)
    assert c.total == 64000 + 73984 + 64 + 64000
    # matmul weights a token passes: 2 * (12288 + 24576) + head 64000
    assert c.matmul_active == 137728


def test_training_flops_full_and_lora_by_hand(tiny):
    f = training_flops_per_token(tiny, seq_len=128)
    # forward matmuls 2 * 137728; backward twice that; causal attention forward
    # 4 * L * q_dim * (S+1)/2 = 4 * 2 * 64 * 64.5 = 33024, backward twice that
    assert f.matmul_forward == 275456
    assert f.matmul_backward == 550912
    assert f.attention_forward == pytest.approx(33024)
    assert f.model_flops_per_token == pytest.approx(275456 * 3 + 33024 * 3)
    assert f.recompute == 0

    lora = training_flops_per_token(tiny, seq_len=128, method="lora", lora_rank=4,
                                    lora_targets="qv")
    # frozen base: backward is input gradients only (1x forward)
    assert lora.matmul_backward == 275456
    # adapters q: 4*(64+64), v: 4*(64+32) -> 896 per layer, 1792 in all; 2x forward, 4x backward
    assert lora.lora_forward == 2 * 1792
    assert lora.lora_backward == 4 * 1792


def test_checkpointing_adds_one_forward(tiny):
    plain = training_flops_per_token(tiny, 128)
    ckpt = training_flops_per_token(tiny, 128, checkpointing=True)
    assert ckpt.model_flops_per_token == plain.model_flops_per_token
    # one more forward of the layers: 2 x 2 x 36864 matmul weights + attention 33024; the LM
    # head (64000 weights) is outside the checkpointed blocks and is not recomputed
    assert ckpt.hardware_flops_per_token - plain.hardware_flops_per_token == pytest.approx(
        2 * 2 * 36864 + 33024)


def test_six_n_rule_for_a_long_context_free_model(tiny):
    # at seq 1 attention is negligible and full training is 6 x matmul params per token
    f = training_flops_per_token(tiny, seq_len=1)
    assert f.matmul_forward + f.matmul_backward == 6 * count_params(tiny).matmul_active


def test_activation_bytes_of_one_layer_by_hand(tiny):
    # a=2 bytes; d=64, q=64, kv=32, f=128; full fine-tuning.
    # norms: 2 * (4*64 fp32 input + 2*64 normalised) = 768
    # attention: q,k,v 2*(64+32+32) = 256 + kernel output 128 + q/k/v input 128
    #            + o_proj input 128 = 640
    # MLP: gate, up, act 3*2*128 = 768 + MLP input 128 + down input 256 = 1152
    tensors, scores = activation_bytes_per_token_layer(tiny, "bf16-mixed", True, 128)
    assert tensors == 768 + 640 + 1152
    assert scores == 0
    t = Training(arch=tiny, micro_batch=2, seq_len=128)
    act = activation_bytes(tiny, t)
    # 256 tokens x 2 layers x 2560 + outside the blocks: the final norm's fp32 input and the
    # LM head's input, 256 x 64 x (4 + 2)
    assert act.total == 256 * 2 * 2560 + 256 * 64 * 6


def test_eager_attention_keeps_the_score_matrix(tiny):
    _, scores = activation_bytes_per_token_layer(tiny, "bf16-mixed", False, 128)
    # heads x S per token, fp32 softmax output (4) + bf16 copy (2)
    assert scores == 4 * 128 * 6


def test_lora_keeps_adapter_inputs_in_fp32(tiny):
    qv, _ = activation_bytes_per_token_layer(tiny, "bf16", True, 128, "lora", "qv", lora_rank=4)
    # norms: fp32 inputs only (frozen weights) 2*256 = 512; attention: q,k,v after rotary
    # 256 + kernel output 128; MLP: gate, up, act 768 (for the SiLU and product backward);
    # LoRA on q and v: each keeps an fp32 copy of its input (4*64) and A's output (4*4)
    assert qv == 512 + (256 + 128) + 768 + 2 * (4 * 64 + 4 * 4)
    full, _ = activation_bytes_per_token_layer(tiny, "bf16", True, 128, "full")
    assert full == 2560


def test_checkpointing_keeps_layer_inputs_and_one_layer(tiny):
    t = Training(arch=tiny, micro_batch=2, seq_len=128, checkpointing=True)
    act = activation_bytes(tiny, t)
    assert act.total == 2 * 256 * 128 + 256 * 2560 + 256 * 64 * 6


def test_logits_with_fp32_upcast(tiny):
    t = Training(arch=tiny, micro_batch=2, seq_len=128)
    # 256 tokens x vocab 1000 x (2 bf16 logits + 4 upcast + 4 log-softmax/gradient)
    assert logits_bytes(tiny, t) == 256 * 1000 * 10


@pytest.mark.parametrize(
    ("precision", "optimizer", "total"),
    [("bf16-mixed", "adamw", 16), ("fp32", "adamw", 16), ("bf16", "adamw", 8),
     ("bf16-mixed", "sgd", 8), ("fp32", "sgd-momentum", 12)],
)
def test_bytes_per_trainable_param(precision, optimizer, total):
    # ZeRO paper sec. 3.1: mixed-precision Adam keeps 2 + 2 + 12 = 16 bytes per parameter
    s = state_bytes_per_param(precision, optimizer, trainable=True)
    assert s.weights + s.grads + s.master + s.optimizer == total


def test_eight_bit_adam_moments():
    s = state_bytes_per_param("bf16-mixed", "adamw-8bit", trainable=True)
    assert s.optimizer == pytest.approx(2.0, rel=0.01)


def test_qlora_bits_per_parameter():
    # Dettmers et al. 2023: NF4 with double quantisation = 4.127 bits per parameter
    assert QLORA_BYTES_PER_PARAM * 8 == pytest.approx(4.127, abs=0.001)


def test_zero_stages_divide_the_right_states(tiny):
    t0 = Training(arch=tiny, zero_stage=0)
    n = count_params(tiny).total
    m0 = training_memory(tiny, t0, num_gpus=8)
    assert m0.weights_bytes == 2 * n and m0.master_weights_bytes == 4 * n
    assert m0.optimizer_bytes == 8 * n and m0.gradients_bytes == 2 * n
    m1 = training_memory(tiny, t0.model_copy(update={"zero_stage": 1}), num_gpus=8)
    assert m1.optimizer_bytes == 8 * n / 8 and m1.master_weights_bytes == 4 * n / 8
    assert m1.gradients_bytes == 2 * n
    m2 = training_memory(tiny, t0.model_copy(update={"zero_stage": 2}), num_gpus=8)
    assert m2.gradients_bytes == 2 * n / 8 and m2.weights_bytes == 2 * n
    m3 = training_memory(tiny, t0.model_copy(update={"zero_stage": 3}), num_gpus=8)
    assert m3.weights_bytes == 2 * n / 8


def test_memory_total_adds_named_overheads(tiny):
    m = training_memory(tiny, Training(arch=tiny))
    assert m.allocator_reserve_bytes == m.tensors_bytes * A.ALLOCATOR_RESERVE_FRACTION.value
    assert m.total_bytes == m.tensors_bytes + m.allocator_reserve_bytes + m.cuda_context_bytes
