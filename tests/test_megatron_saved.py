"""Activations that a Megatron-Core layer of Transformer Engine modules keeps (kernels
"megatron", estimate/megatron_saved.py), worked by hand tensor by tensor."""

from __future__ import annotations

import dataclasses

import pytest

from gpuhours.estimate.megatron_saved import (
    megatron_adapted_linears,
    megatron_layer_saved_bytes_per_token,
)
from gpuhours.estimate.memory import LORA_ADAPTED, activation_bytes
from gpuhours.setup import Training


def _t(tiny, **kw: object) -> Training:
    return Training.model_validate({"arch": tiny, "micro_batch": 1, "seq_len": 256,
                                    "precision": "bf16-mixed", "kernels": "megatron", **kw})


def _layer(t: Training) -> float:
    adapted = (megatron_adapted_linears(LORA_ADAPTED[t.lora_targets]) if t.method != "full"
               else frozenset())
    return megatron_layer_saved_bytes_per_token(t.arch, t, 2.0, adapted)


# tiny: d 64, 4 heads of 16 (q 64), 2 kv heads (kv 32), SwiGLU f 128, RMSNorm.
# Every setup keeps: two norm inputs 2 (2 x 64 + 4 rsigma) = 264; attention q, k, v and its
# output 2 (64 + 64) + 2 x 64 = 384, softmax statistics 4 x 4 heads = 16; SwiGLU's input
# 2 x 2 x 128 = 512. Base: 1176.
BASE = 264 + 384 + 16 + 512


def test_full_bf16_by_hand(tiny) -> None:
    # + the norm outputs kept by q/k/v and fc1 (2 x 2 x 64) and fc2's input (2 x 128)
    assert _layer(_t(tiny)) == BASE + 256 + 256


def test_full_fp8_by_hand(tiny) -> None:
    # fp8 copies: the norm outputs 2 x 64, fc2's input 128, the output projection's copy of
    # the attention output 64
    assert _layer(_t(tiny, precision="fp8-mixed")) == BASE + 128 + 128 + 64


def test_lora_qkv_proj_by_hand(tiny) -> None:
    # frozen base: no linear keeps its input; the adapted q/k/v LayerNormLinear returns (and
    # keeps) its norm output, 2 x 64, which its adapter's A keeps too (the same tensor); each
    # adapter's B keeps A's output: 2 adapters x 2 x 16
    assert _layer(_t(tiny, method="lora", lora_targets="attention")) == BASE + 128 + 64


def test_lora_fp8_sequence_parallel_by_hand(tiny) -> None:
    # fp8, tp 2: TE keeps its fp8 copy of the local norm output (1 x 64); the adapter keeps
    # the all-gathered bf16 output, 2 ranks x 2 x 64 (per token before the split by tp)
    t = _t(tiny, method="lora", lora_targets="attention", precision="fp8-mixed", tp=2)
    assert _layer(t) == BASE + 64 + 256 + 64


def test_lora_all_linear_by_hand(tiny) -> None:
    # q/k/v and fc1 norm outputs (2 x 2 x 64), four adapters' B inputs (4 x 2 x 16), fc2's
    # adapter keeps the SwiGLU output (2 x 128)
    t = _t(tiny, method="lora", lora_targets="all-linear")
    assert _layer(t) == BASE + 256 + 128 + 256


def test_the_count_reaches_the_estimate_only_on_the_megatron_path(tiny) -> None:
    t = _t(tiny)
    act = activation_bytes(t.arch, t)
    # 2 layers x 256 tokens x the layer, and outside: the final norm's input and rsigma,
    # the output layer's input (it trains)
    assert act.total == 2 * 256 * (BASE + 512) + 256 * (2 * 64 + 4 + 2 * 64)
    eager = activation_bytes(t.arch, t.model_copy(update={"kernels": "eager"}))
    assert eager.total != act.total


@pytest.mark.parametrize("kw", [dict(num_experts=4, experts_per_token=2,
                                     moe_intermediate_size=64), dict(qk_norm=True)])
def test_other_architectures_keep_the_generic_count(tiny, kw) -> None:
    arch = dataclasses.replace(tiny, **kw)
    t = _t(tiny).model_copy(update={"arch": arch})
    assert (activation_bytes(arch, t).total
            == activation_bytes(arch, t.model_copy(update={"kernels": "eager"})).total)


def test_fp8_params_drop_the_half_precision_layer_weights(tiny) -> None:
    """fp8_params: the layers' linears are fp8 tensors (data and transpose: 2 bytes a
    parameter, as the fp8 copies line counts them without it), so their bf16 copy is not held;
    the fp8 tensors are the weights, resident in every phase (the optimizer step's peak too),
    no longer a copy beside them. tiny's linears: 2 layers x (q 64x64 + k, v 64x32 each + o
    64x64 + gate, up, down 3 x 64x128)."""
    from gpuhours.errors import FieldError
    from gpuhours.estimate.memory import training_memory

    linears = 2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128)
    t = _t(tiny, precision="fp8-mixed")
    plain = training_memory(tiny, t)
    fp8 = training_memory(tiny, t.model_copy(update={"fp8_params": True}))
    # the bf16 linears (2 bytes) out, their fp8 data and transpose (1 + 1 bytes) in
    assert fp8.weights_bytes - plain.weights_bytes == pytest.approx(2 * linears - 2 * linears)
    assert plain.autocast_weight_copies_bytes == 2 * linears
    assert fp8.autocast_weight_copies_bytes == 0
    # the optimizer step's peak holds the fp8 weights: fp8_params saves the bf16 copy, no more
    assert plain.tensors_bytes - fp8.tensors_bytes <= 2 * linears + 1e-6
    with pytest.raises(FieldError, match="fp8-mixed") as e:
        _t(tiny, fp8_params=True)
    assert e.value.fields == ("fp8_params", "precision")
