"""Unsloth's stack (estimate/unsloth.py: kernels "unsloth", checkpoint_offload, loss unsloth-ce)
held to hand-worked counts from what Unsloth's code saves (unsloth/kernels/fast_lora.py,
rms_layernorm.py, cross_entropy_loss.py; unsloth-zoo gradient_checkpointing.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuhours.errors import FieldError
from gpuhours.estimate.estimator import estimate_training
from gpuhours.estimate.memory import activation_bytes, logits_bytes, loss_backward_bytes
from gpuhours.estimate.memory import training_memory as memory
from gpuhours.estimate.offload import host_link_bytes_per_s
from gpuhours.estimate.unsloth import (
    fused_groups,
    unsloth_layer_saved_bytes_per_token,
)
from gpuhours.importers import read_setup
from gpuhours.resolve import resolve_model
from gpuhours.setup import Hardware, Training, loss_kernel_of

LLAMA_8B, _ = resolve_model("llama-3.1-8b")  # d 4096, q 4096, kv 1024, f 14336, 32 layers
ALL = frozenset({"q", "k", "v", "o", "gate", "up", "down"})


def _t(**kw: object) -> Training:
    base: dict[str, object] = dict(arch=LLAMA_8B, method="qlora", lora_rank=32,
                                   lora_targets="all-linear", precision="bf16", micro_batch=1,
                                   seq_len=4096, checkpointing=True, kernels="unsloth")
    return Training.model_validate({**base, **kw})


def test_the_shape_the_hand_counts_use() -> None:
    a = LLAMA_8B
    assert (a.hidden_size, a.q_dim, a.kv_dim, a.intermediate_size, a.num_layers) == (
        4096, 4096, 1024, 14336, 32)


def test_a_fully_adapted_layer_keeps_what_unsloths_functions_save() -> None:
    """bf16 (a = 2): two RMSNorms keep their input and fp32 1/RMS, 2 (2 x 4096 + 4) = 16,392;
    attention q, k, v, output 2 (2 x 4096 + 2 x 1024) = 20,480; LoRA_QKV's X 8,192; LoRA_W
    nothing new (o_proj's input is the kernel's output); LoRA_MLP's X, e, g
    2 (4096 + 2 x 14336) = 65,536: 110,600 bytes per token."""
    per = unsloth_layer_saved_bytes_per_token(LLAMA_8B, ALL, 2, 32, half_adapters=False,
                                              bnb_input_saved=True)
    assert per == 110_600
    # the adapters' dtype and the rank do not enter a fused group's saved set
    assert unsloth_layer_saved_bytes_per_token(LLAMA_8B, ALL, 2, 8, half_adapters=True,
                                               bnb_input_saved=False) == 110_600


def test_unpatched_groups_keep_peft_and_transformers_tensors() -> None:
    """q,v only (no group whole: Unsloth patches none), half adapters, no dropout, 16-bit base:
    norms 16,392 + attention 20,480 + q/v adapters' shared input 8,192 and A's outputs
    2 x 2 x 8 = 32 + transformers' MLP (gate output, activation, up: 3 x 2 x 14336 = 86,016):
    131,112. fp32 adapters keep their own fp32 input copy each: 2 x 4 x 4096 + 2 x 4 x 8."""
    qv = frozenset({"q", "v"})
    assert fused_groups(LLAMA_8B, qv) == frozenset()
    half = unsloth_layer_saved_bytes_per_token(LLAMA_8B, qv, 2, 8, half_adapters=True,
                                               bnb_input_saved=False)
    assert half == 16_392 + 20_480 + 8_192 + 32 + 86_016
    fp32 = unsloth_layer_saved_bytes_per_token(LLAMA_8B, qv, 2, 8, half_adapters=False,
                                               bnb_input_saved=False)
    assert fp32 == 16_392 + 20_480 + 2 * 4 * 4096 + 2 * 4 * 8 + 86_016
    # a 4-bit base that keeps its inputs (bitsandbytes before 0.43.2) adds the MLP's two
    # inputs (X 8,192, the product 28,672); q/k/v's is the adapters' own with half adapters
    bnb = unsloth_layer_saved_bytes_per_token(LLAMA_8B, qv, 2, 8, half_adapters=True,
                                              bnb_input_saved=True)
    assert bnb - half == 8_192 + 28_672


def test_dropout_or_a_bias_leaves_a_group_unpatched() -> None:
    assert fused_groups(LLAMA_8B, ALL) == frozenset({"qkv", "o", "mlp"})
    assert fused_groups(LLAMA_8B, ALL, lora_dropout=0.05) == frozenset()
    qwen, _ = resolve_model("qwen2.5-7b")  # q, k and v carry a bias
    assert qwen.qkv_bias and fused_groups(qwen, ALL) == frozenset({"o", "mlp"})


def test_the_loss_keeps_half_logits_and_two_fp32_values_a_token() -> None:
    """Fast_CrossEntropyLoss: N V a + 8 N in forward; its backward writes into the logits."""
    t = _t()
    assert loss_kernel_of(t) == "unsloth-ce"
    n, v = 4096, LLAMA_8B.vocab_size
    assert logits_bytes(LLAMA_8B, t) == n * v * 2 + 8 * n
    assert loss_backward_bytes(LLAMA_8B, t) == n * v * 2 + 8 * n


def test_offloaded_checkpoints_leave_one_block_input_on_the_gpu() -> None:
    """32 bf16 block inputs of 4096 tokens x 4096 x 2 bytes: 31 of them leave the GPU, all 32
    are in host memory."""
    on, off = _t(), _t(checkpoint_offload=True)
    one_input = 4096 * 4096 * 2
    assert activation_bytes(LLAMA_8B, on).total - activation_bytes(LLAMA_8B, off).total == (
        31 * one_input)
    assert memory(LLAMA_8B, off).host_bytes == 32 * one_input
    assert memory(LLAMA_8B, on).host_bytes == 0.0


def test_the_offload_copies_add_their_pcie_time_to_the_step() -> None:
    """Down in forward and up in backward, per micro-batch, on the compute stream:
    2 x 32 x 4096 x 4096 x 2 bytes x 2 micro-batches / the A100's host link."""
    hw = Hardware(gpu="a100-80gb")
    on = estimate_training(_t(grad_accum=2), hw)
    off = estimate_training(_t(grad_accum=2, checkpoint_offload=True), hw)
    copies = 2 * 32 * 4096 * 4096 * 2 * 2 / host_link_bytes_per_s("ampere", "a100-80gb")
    assert off.step_time_breakdown_s["checkpoint_copy_s"].value == pytest.approx(copies)
    assert off.step_time_s.value - on.step_time_s.value == pytest.approx(copies, rel=1e-6)


def test_the_4bit_base_stays_half_precision_under_unsloth() -> None:
    """Unsloth prepares the 4-bit model itself: no peft fp32 upcast of the embedding and
    head, so its weights are 2 x 2 x 128256 x 4096 bytes less than with peft's upcast."""
    peft = Training.model_validate({**_t().model_dump(), "kernels": "eager"})
    diff = memory(LLAMA_8B, peft).weights_bytes - memory(LLAMA_8B, _t()).weights_bytes
    assert diff == pytest.approx(2 * 2 * 128256 * 4096 + 2 * 2 * 4096 * 65, rel=1e-3)


def test_what_unsloths_path_does_not_model_is_refused() -> None:
    with pytest.raises(FieldError, match="full fine-tuning"):
        _t(method="full")
    with pytest.raises(FieldError, match="checkpointing is off"):
        _t(checkpointing=False, checkpoint_offload=True)
    with pytest.raises(FieldError, match="NF4"):
        _t(base_quant="gptq-int4")
    with pytest.raises(FieldError, match="DoRA"):
        _t(dora=True)
    with pytest.raises(FieldError, match="no tp 2") as e:
        _t(method="lora", tp=2)
    assert e.value.fields == ("kernels", "tp")


def test_fit_and_the_chooser_keep_to_what_unsloth_runs() -> None:
    """A sweep builds its setups by copying fields (no validator runs): on Unsloth's path it
    must still not offer ZeRO (an 8B QLoRA on 8 GPUs: every row at stage 0), and a setup
    copied into what the path refuses is refused when evaluated."""
    from gpuhours.estimate.candidate import evaluate
    from gpuhours.estimate.fit import fit

    hw = Hardware(gpu="h100", num_gpus=8)
    result = fit(_t(), hw)
    assert result.fastest is not None and result.fastest.zero_stage == 0
    assert all(a.zero_stage == 0 for a in result.alternatives)
    with pytest.raises(FieldError, match="no ZeRO"):
        evaluate(_t().model_copy(update={"zero_stage": 3}), hw, 0.1, "")


def test_llama_factory_use_unsloth_reads_as_unsloths_stack(tmp_path: Path) -> None:
    """LLaMA-Factory's use_unsloth (model_utils/unsloth.py @ ff6d4d12e): get_peft_model with
    use_gradient_checkpointing="unsloth"; full fine-tuning through it is not modelled."""
    text = ("model_name_or_path: meta-llama/Llama-3.1-8B\nstage: sft\nfinetuning_type: lora\n"
            "quantization_bit: 4\nlora_target: all\nbf16: true\ncutoff_len: 4096\n"
            "use_unsloth: true\nper_device_train_batch_size: 1\n")
    path = tmp_path / "unsloth.yaml"
    path.write_text(text)
    got = read_setup(path)
    assert got.fields["kernels"] == "unsloth" and got.fields["checkpoint_offload"] is True
    path.write_text(text.replace("finetuning_type: lora", "finetuning_type: full")
                    .replace("quantization_bit: 4\n", ""))
    got = read_setup(path)
    assert "kernels" not in got.fields
    assert any(u.startswith("use_unsloth=true") and "not modelled" in u for u in got.unused)


def test_axolotl_unsloth_checkpointing_reads_as_checkpoint_offload(tmp_path: Path) -> None:
    """axolotl's gradient_checkpointing: unsloth runs Unsloth_Offloaded_Gradient_Checkpointer
    (its utils/gradient_checkpointing); the layers stay transformers' (kernels not set)."""
    path = tmp_path / "ax.yaml"
    path.write_text("base_model: meta-llama/Llama-3.1-8B\nadapter: qlora\nload_in_4bit: true\n"
                    "lora_r: 16\nlora_target_linear: true\nsequence_len: 4096\n"
                    "micro_batch_size: 1\ngradient_checkpointing: unsloth\nbf16: true\n")
    got = read_setup(path)
    assert got.format == "axolotl"
    assert got.fields["checkpointing"] is True and got.fields["checkpoint_offload"] is True
    assert "kernels" not in got.fields


def test_checkpoint_offload_and_activation_offload_are_one_or_the_other() -> None:
    """Both move the checkpointed layer inputs to the host (Unsloth's and torchtune's ways):
    together they would count those inputs on the host twice, so the setup refuses it."""
    with pytest.raises(FieldError, match="activation_offload"):
        Training(model="llama-3.1-8b", method="qlora", checkpointing=True,
                 checkpoint_offload=True, activation_offload=True)
