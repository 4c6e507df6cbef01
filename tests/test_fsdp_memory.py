"""ZeRO-3/FSDP: the unsharded working set beside the shards, worked by hand."""

from __future__ import annotations

import pytest

from gpuhours.errors import FieldError
from gpuhours.estimate.memory import gathered_working_bytes, training_memory
from gpuhours.estimate.params import count_params
from gpuhours.setup import Training


def test_gathered_working_set_by_hand():
    t = Training(model="llama-3.1-8b", zero_stage=3)   # bf16-mixed: 2-byte weights and grads
    c = count_params(t.arch)
    layer = c.attention_per_layer + c.mlp_per_layer + c.norms_per_layer
    root = c.embedding + c.lm_head + c.final_norm       # untied: 2 x 128256 x 4096 + 4096
    assert root == 2 * 128256 * 4096 + 4096
    # the root unit, less this rank's own 1/8; two layers' weights and two layers' gradients
    expected = root * 2 * (1 - 1 / 8) + 2 * layer * 2 + 2 * layer * 2
    assert gathered_working_bytes(c, t, 8) == pytest.approx(expected)
    assert expected / 2**30 == pytest.approx(3.34, abs=0.01)


def test_lora_under_fsdp_gathers_the_frozen_base_only():
    t = Training(model="llama-3.1-8b", method="lora", zero_stage=3)
    c = count_params(t.arch)
    layer = c.attention_per_layer + c.mlp_per_layer + c.norms_per_layer
    root = c.embedding + c.lm_head + c.final_norm
    assert gathered_working_bytes(c, t, 2) == pytest.approx(root * 2 * 0.5 + 2 * layer * 2)


@pytest.mark.parametrize(("stage", "gpus"), [(0, 8), (1, 8), (2, 8), (3, 1)])
def test_nothing_is_gathered_without_weight_sharding(stage, gpus):
    t = Training(model="llama-3.1-8b", zero_stage=stage)
    assert gathered_working_bytes(count_params(t.arch), t, gpus) == 0.0


def test_the_peak_holds_the_working_set(monkeypatch):
    from gpuhours.estimate import memory

    # activations enough that the start of backward is the peak with or without the set
    t = Training(model="llama-3.1-8b", zero_stage=3, micro_batch=4, seq_len=4096)
    with_set = training_memory(t.arch, t, 8)
    assert with_set.gathered_bytes > 3 * 2**30
    # the peak is at the start of backward here, so the working set adds to it in full
    assert with_set.peak_phase.startswith("start of backward")
    monkeypatch.setattr(memory, "gathered_working_bytes", lambda *a: 0.0)
    without = training_memory(t.arch, t, 8)
    assert without.peak_phase.startswith("start of backward")
    assert with_set.tensors_bytes - without.tensors_bytes == pytest.approx(with_set.gathered_bytes)
    assert training_memory(t.arch, t, 1).gathered_bytes == 0.0


def test_a_model_larger_than_one_gpu_warns_about_loading():
    from gpuhours.api import estimate_training
    from gpuhours.setup import Hardware

    big = estimate_training(Training(model="llama-3-70b", method="lora", zero_stage=3),
                            Hardware(gpu="a100-80gb", num_gpus=8))
    # 70.55e9 parameters x 2 bytes = 131 GiB > 80 GB
    assert any(w.startswith("loading: the whole model is 131 GiB") for w in big.warnings)
    small = estimate_training(Training(model="llama-3.1-8b", zero_stage=3),
                              Hardware(gpu="a100-80gb", num_gpus=8))
    assert not any(w.startswith("loading") for w in small.warnings)


def test_fsdp_qlora_shards_the_4bit_base():
    # the Answer.AI / HF FSDP-QLoRA recipe: 4-bit storage sharded over the GPUs
    from gpuhours.estimate.memory import QLORA_BYTES_PER_PARAM, quantised_params

    t = Training(model="llama-3-70b", method="qlora", zero_stage=3, checkpointing=True)
    c = count_params(t.arch)
    q = quantised_params(t.arch)
    one, two = training_memory(t.arch, t, 1), training_memory(t.arch, t, 2)
    adapters = one.trainable_params * 4.0
    base = q * QLORA_BYTES_PER_PARAM + (c.total - q) * 2.0
    assert one.weights_bytes == pytest.approx(base + adapters)
    # the 4-bit data and the 16-bit rest are sharded; bitsandbytes' absmax (an 8-bit byte per
    # block of 64 weights and an fp32 constant per 256 blocks: 1/64 + 1/4096 bytes a weight)
    # is an attribute of each Params4bit, not a parameter, and stays whole on every rank
    state = q * (1 / 64 + 4 / (64 * 256))
    # the adapters are parameters, sharded like the base
    assert two.weights_bytes == pytest.approx((base - state) / 2 + state + adapters / 2)
    layer = c.attention_per_layer + c.mlp_per_layer + c.norms_per_layer
    root = c.embedding + c.lm_head + c.final_norm
    # two layers gathered: their 4-bit data (0.5 bytes a weight; the absmax is there already)
    assert two.gathered_bytes == pytest.approx(root * 2.0 * 0.5 + 2 * layer * 0.5)


def test_peft_kbit_preparation_keeps_the_unquantised_weights_in_fp32():
    # prepare_model_for_kbit_training casts every non-4-bit weight (embeddings, LM head, norms)
    # to fp32: 4 bytes each instead of 2; the FSDP-QLoRA recipe (ZeRO-3) does not
    from gpuhours.estimate.memory import QLORA_BYTES_PER_PARAM, quantised_params

    t = Training(model="llama-3.1-8b", method="qlora", checkpointing=True)
    c, q = count_params(t.arch), quantised_params(t.arch)
    adapters = training_memory(t.arch, t).trainable_params * 4.0
    prepared = training_memory(t.arch, t).weights_bytes
    assert prepared == pytest.approx(q * QLORA_BYTES_PER_PARAM + (c.total - q) * 4 + adapters)
    plain = t.model_copy(update={"kbit_upcast": False})
    assert training_memory(t.arch, plain).weights_bytes == pytest.approx(
        q * QLORA_BYTES_PER_PARAM + (c.total - q) * 2 + adapters)
    # Llama-3.1-8B: 2 x 128,256 x 4,096 embedding and head weights, 2 bytes more each
    assert prepared - training_memory(t.arch, plain).weights_bytes == pytest.approx(
        2 * (c.total - q), rel=1e-9)
    assert c.total - q > 2 * 128256 * 4096


def test_fsdp_embedding_units_leave_the_embedding_out_of_the_gathered_root():
    # torchtune's custom_sharded_layers ['tok_embeddings', 'output'] (llama3_1/70B_full.yaml
    # @ 30b8519e8): the embedding's unit is resharded after its forward, so at the loss only
    # the head's unit (gathered for its backward) and the final norm stay of the root's. By
    # hand: the embedding, 128,256 x 8,192 bf16 weights, of which 7/8 come from the other
    # ranks over 8 GPUs
    t = Training(model="llama-3.1-70b", zero_stage=3, checkpointing=True)
    units = t.model_copy(update={"fsdp_embedding_units": True})
    root, own = training_memory(t.arch, t, 8), training_memory(units.arch, units, 8)
    assert root.gathered_bytes - own.gathered_bytes == pytest.approx(
        128_256 * 8_192 * 2 * 7 / 8)
    with pytest.raises(FieldError, match="embedding units"):
        Training(model="llama-3.1-70b", zero_stage=2, fsdp_embedding_units=True)


def test_unit_gradients_are_counted_beside_a_layer_backward_not_at_the_loss():
    # full fine-tuning under FSDP: two layers' unsharded gradients (the layer in backward and
    # the one being reduce-scattered) exist from the first layer's backward on. By hand for
    # Llama-3.1-8B in bf16 (2-byte gradients): 2 x 218,112,000 parameters a layer x 2 bytes
    from gpuhours.estimate.memory import gathered_unit_grad_bytes

    # (FSDP2: under FSDP1 the root unit's gradient at the end of backward is larger still,
    # tests/test_fsdp_root_grad.py)
    t = Training(model="llama-3.1-8b", zero_stage=3, checkpointing=True, precision="bf16",
                 fsdp_api="fsdp2")
    c = count_params(t.arch)
    layer = c.attention_per_layer + c.mlp_per_layer + c.norms_per_layer
    assert layer == 218_112_000
    assert gathered_unit_grad_bytes(c, t, 8) == 2 * layer * 2
    m = training_memory(t.arch, t, 8)
    parts = dict(m.peak_parts)
    # at 1 x 2048 the loss's working set (128,256-entry vocabulary) is larger than a layer's
    # backward: the peak is at the loss, without the layers' gradients
    assert "logits_bytes" in parts or "lm_head_backward_bytes" in parts
    assert "gathered_gradients_bytes" not in parts
    assert sum(parts.values()) == pytest.approx(m.tensors_bytes)


def test_fsdp2_cpu_offload_keeps_one_units_reduced_shard_on_the_gpu():
    """FSDP2 drops each unit's reduce-scattered shard once its copy to the host is issued
    (_fsdp_collectives.py foreach_reduce); FSDP1 keeps every unit's `_saved_grad_shard` until
    the end of backward, bounded here as DeepSpeed's reduce bucket (5e8 elements). Llama 3 70B,
    full, pure bf16, 8 GPUs, the embedding and head units of their own (torchtune's
    70B_full.yaml): the largest unit is the head, 128,256 x 8,192 parameters."""
    kw = dict(model="llama-3-70b", precision="bf16", zero_stage=3, offload="optimizer+params",
              checkpointing=True, fsdp_embedding_units=True)
    two = training_memory(Training(**kw, fsdp_api="fsdp2").arch,
                          Training(**kw, fsdp_api="fsdp2"), 8)
    head = 128256 * 8192
    assert two.gradients_bytes == pytest.approx(head * 2 / 8)       # 262,668,288 bytes
    one = training_memory(Training(**kw).arch, Training(**kw), 8)   # fsdp1, the default
    assert one.gradients_bytes == pytest.approx(5e8 * 2)
    # without its own units the root (embedding + head + final norm) is the largest unit
    root = 2 * head + 8192
    kw["fsdp_embedding_units"] = False
    t = Training(**kw, fsdp_api="fsdp2")
    assert training_memory(t.arch, t, 8).gradients_bytes == pytest.approx(root * 2 / 8)


def test_fsdp2_offloaded_shard_of_lora_is_the_copies_root_unit():
    """LoRA with trainable embeddings (modules_to_save): the copies sit in the root unit, the
    largest: Llama 2 7B's embedding and head copies, 2 x 32,000 x 4,096 parameters at the
    copies' 2 gradient bytes (bf16) over 8 ranks, not the adapters and copies spread over the
    32 layers. (CPU offload with a pipeline is refused, so a unit's shard is never a stage's.)"""
    lora = Training(model="llama-2-7b", method="lora", precision="bf16", zero_stage=3,
                    offload="optimizer+params", checkpointing=True, fsdp_api="fsdp2",
                    lora_trainable_embeddings=True)
    m = training_memory(lora.arch, lora, 8)
    assert m.gradients_bytes == pytest.approx(2 * 32000 * 4096 * 2 / 8)
    # with the embedding and head units of their own, the larger copy alone: 32,000 x 4,096
    own = lora.model_copy(update={"fsdp_embedding_units": True})
    assert training_memory(own.arch, own, 8).gradients_bytes == pytest.approx(
        32000 * 4096 * 2 / 8)
