"""The setup-dependent memory terms of QLoRA and DeepSpeed as real stacks run them (issue 14),
held to hand-worked numbers for Llama-2-7B (d = 4096, MLP width f = 11008, 32 layers, gated
MLP), bf16 activations (a = 2 bytes):

- bitsandbytes' MatMul4Bit keeps each 4-bit linear's input (bitsandbytes/autograd/_functions.py
  `ctx.tensors = (A, B)`); half-precision stream: q/k/v share one input, gate/up one, down_proj
  its own: a (d + d + f) = 2 (4096 + 4096 + 11008) = 38,400 bytes per token and layer.
- peft's fp32 upcast (prepare_model_for_kbit_training): every linear casts the fp32 stream to
  bf16 itself: a (3d + 2d + f) = 2 (12288 + 8192 + 11008) = 62,976; and Linear4bit returns fp32,
  so gate, up and the activation's output take 4 - 2 bytes more: 3 x 2 x 11008 = 66,048; in
  all 129,024. The checkpointed layer inputs are fp32: 2 bytes x 4096 more per token and layer.
- DeepSpeed ZeRO-2 with overlap_comm: 2 x reduce_bucket_size elements in the model's dtype
  (stage_1_and_2.py backward): Qwen's ds_config_zero2.json 2e8 -> 2 x 2e8 x 2 = 8e8 bytes.
"""

from __future__ import annotations

import pytest

from gpuhours.estimate.estimator import estimate_training
from gpuhours.estimate.memory import (
    activation_bytes,
    deepspeed_bucket_bytes,
    gptq_saved_weight_bytes_per_layer,
    held_logits_bytes,
    lora_dropout_mask_bytes_per_token_layer,
    quantised_base_bytes_per_token_layer,
    training_memory,
)
from gpuhours.resolve import resolve_gpu
from gpuhours.setup import Hardware, Training


def _t(**kw) -> Training:
    base = dict(model="llama-2-7b", method="qlora", precision="bf16", micro_batch=1,
                seq_len=1024, lora_rank=8, lora_targets="qv")
    return Training(**{**base, **kw})


def test_bnb_saved_inputs_half_precision_stream():
    t = _t(kbit_upcast=False)
    assert quantised_base_bytes_per_token_layer(t.arch, t) == 38_400


def test_bnb_saved_inputs_with_peft_fp32_upcast():
    t = _t(kbit_upcast=True)
    assert quantised_base_bytes_per_token_layer(t.arch, t) == 129_024


def test_no_term_without_a_bitsandbytes_base():
    assert quantised_base_bytes_per_token_layer(_t().arch, _t(method="lora")) == 0
    gptq = _t(base_quant="gptq-int4")
    assert quantised_base_bytes_per_token_layer(gptq.arch, gptq) == 0


def test_qlora_keeps_more_than_lora_per_layer():
    """Without checkpointing every layer keeps the inputs: 32 layers x 1024 tokens x 38,400."""
    q, lo = _t(kbit_upcast=False), _t(method="lora")
    diff = activation_bytes(q.arch, q).total - activation_bytes(lo.arch, lo).total
    assert diff == 32 * 1024 * 38_400


def test_fp32_upcast_under_checkpointing_by_hand():
    """Checkpointing: every layer's input, fp32 instead of bf16 (32 x 1024 x 2 x 4096), and the
    one recomputed layer's tensors (1024 x (129,024 - 38,400))."""
    up, no = _t(kbit_upcast=True, checkpointing=True), _t(kbit_upcast=False, checkpointing=True)
    diff = activation_bytes(up.arch, up).total - activation_bytes(no.arch, no).total
    assert diff == 32 * 1024 * 2 * 4096 + 1024 * (129_024 - 38_400)


def test_deepspeed_buckets_by_hand():
    two = _t(deepspeed_reduce_bucket=200_000_000, deepspeed_overlap_comm=True)
    assert deepspeed_bucket_bytes(two) == 8e8
    one = _t(deepspeed_reduce_bucket=200_000_000, deepspeed_overlap_comm=False)
    assert deepspeed_bucket_bytes(one) == 4e8
    # overlap_comm not stated: DeepSpeed's default below ZeRO-3 is off, one buffer
    assert deepspeed_bucket_bytes(_t(deepspeed_reduce_bucket=200_000_000)) == 4e8
    fp32 = _t(method="full", precision="fp32", deepspeed_reduce_bucket=10**8,
              deepspeed_overlap_comm=True)
    assert deepspeed_bucket_bytes(fp32) == 8e8
    assert deepspeed_bucket_bytes(_t()) == 0


def test_deepspeed_buckets_join_the_backward_peak():
    """At micro-batch 1 x 1024 the peak is the start of backward: the buckets add 8e8 bytes
    (the LoRA branch held fixed: DeepSpeed's engine would otherwise default it to peft-half)."""
    plain = training_memory(_t().arch, _t(lora_branch="peft-half"))
    ds = training_memory(_t().arch, _t(deepspeed_reduce_bucket=200_000_000,
                                       deepspeed_overlap_comm=True, lora_branch="peft-half"))
    assert plain.peak_phase.startswith("start of backward")
    assert ds.tensors_bytes - plain.tensors_bytes == pytest.approx(8e8)


def test_terms_printed_with_their_basis():
    """The estimate's assumptions name each term, its size and its source."""
    t = _t(kbit_upcast=False, deepspeed_reduce_bucket=200_000_000, deepspeed_overlap_comm=True)
    e = estimate_training(t, Hardware(gpu=resolve_gpu("a100-80gb"), num_gpus=1), "catalog")
    lines = "\n".join(e.assumptions)
    # 32 layers x 1024 tokens x 38,400 bytes = 1.17 GiB, 8e8 bytes = 0.75 GiB
    assert "qlora_base_saved_bytes = 1.17 GiB" in lines and "MatMul4Bit" in lines
    assert "deepspeed_bucket_bytes = 0.75 GiB" in lines and "stage_1_and_2.py" in lines
    plain = estimate_training(_t(method="lora"), Hardware(gpu=resolve_gpu("a100-80gb")),
                              "catalog")
    assert not any("qlora_base" in x or "deepspeed_bucket" in x for x in plain.assumptions)


def test_held_logits_by_hand():
    """A loop that holds the model's output through backward (Answer.AI's train.py) keeps its
    fp32 logits beside the loss's working set: 1024 tokens x 32,000 vocabulary x 4 bytes."""
    held = _t(method="lora", held_logits="fp32")
    assert held_logits_bytes(held.arch, held) == 1024 * 32_000 * 4
    half = _t(method="lora", held_logits="half")
    assert held_logits_bytes(half.arch, half) == 1024 * 32_000 * 2
    assert held_logits_bytes(half.arch, _t(method="lora", held_logits="fp32",
                                           loss_kernel="chunked")) == 0
    plain = training_memory(held.arch, _t(method="lora"))
    more = training_memory(held.arch, held)
    assert more.tensors_bytes - plain.tensors_bytes == pytest.approx(1024 * 32_000 * 4)


def test_gptq_torch_path_keeps_dequantised_weights_by_hand():
    """auto-gptq's PyTorch path keeps each linear's fp16 dequantised weight for backward:
    Llama-2-7B's layer has q, k, v, o (4 x 4096 x 4096) and gate, up, down (3 x 4096 x 11008)
    weights: 2 x (67,108,864 + 135,266,304) = 404,750,336 bytes per layer."""
    t = _t(base_quant="gptq-int4")
    assert gptq_saved_weight_bytes_per_layer(t.arch, t) == 404_750_336
    # without checkpointing every layer's: 32 x that beside the activations counted per token
    m = training_memory(t.arch, t)
    assert m.activations_bytes - activation_bytes(t.arch, t).total == 32 * 404_750_336
    # below 128 tokens per micro-batch its CUDA kernel runs instead: nothing kept
    short = _t(base_quant="gptq-int4", seq_len=64)
    assert gptq_saved_weight_bytes_per_layer(short.arch, short) == 0
    nf4 = _t()
    assert gptq_saved_weight_bytes_per_layer(nf4.arch, nf4) == 0


def test_lora_dropout_masks_by_hand():
    """Dropout on each adapter's input keeps a 1-byte mask per input element: all-linear on
    Llama-2-7B adapts q, k, v, o, gate and up (6 x 4096 inputs) and down (11,008): 35,584 bytes
    per token and layer; q,v: 8,192. Without checkpointing, 32 layers x 1024 tokens of them."""
    t = _t(method="lora", lora_targets="all-linear", lora_dropout=0.1)
    assert lora_dropout_mask_bytes_per_token_layer(t.arch, t) == 35_584
    qv = _t(method="lora", lora_dropout=0.05)
    assert lora_dropout_mask_bytes_per_token_layer(qv.arch, qv) == 8_192
    none = _t(method="lora", lora_targets="all-linear")
    assert lora_dropout_mask_bytes_per_token_layer(none.arch, none) == 0
    diff = activation_bytes(t.arch, t).total - activation_bytes(none.arch, none).total
    assert diff == 32 * 1024 * 35_584
