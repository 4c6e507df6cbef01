"""Storage budgets (gpuhours.storage.budget) held to hand arithmetic and to real files.

The hand counts use conftest's `tiny` model: d=64, 2 layers, 4 heads of 16, 2 kv heads, SwiGLU
128, vocab 1000, untied. Parameters: embedding 64,000 + LM head 64,000 + 2 x (attention
4,096 + 2,048 + 2,048 + 4,096 + MLP 3 x 64 x 128 + norms 2 x 64) + final norm 64 = 202,048.
LoRA rank 16 on all linears: per layer q 16 x (64 + 64) + k 16 x (64 + 32) + v the same + o
16 x (64 + 64) + gate/up/down 3 x 16 x (64 + 128) = 16,384; 32,768 for the model.

The real-file tests build the same shape with transformers, save it with safetensors (and
torch.save for the optimizer), and compare the tensor bytes in the files with the formula.
"""

from __future__ import annotations

import os
import struct

import pytest

from gpuhours.errors import InputError
from gpuhours.estimate.arch import from_hf_config
from gpuhours.setup import Training
from gpuhours.storage.budget import (
    checkpoint_bytes,
    checkpoint_bytes_for,
    checkpoint_write_s,
    log_bytes,
    raw_text_bytes,
    retained_checkpoints_bytes,
    rollout_buffer_bytes,
    token_id_bytes,
    tokenized_dataset_bytes,
    total_bytes,
)

TINY_PARAMS = 202_048
TINY_LORA_16 = 32_768


@pytest.mark.parametrize(("precision", "optimizer", "with_optimizer", "bytes_per_param"), [
    ("bf16-mixed", "adamw", False, 2),       # bf16 weights
    ("bf16-mixed", "adamw", True, 14),       # + fp32 master 4 + moments 8 (ZeRO paper, 2+4+8)
    ("bf16-amp", "adamw", True, 12),         # fp32 weights 4 + fp32 moments 8
    ("fp32", "adamw", False, 4),
    ("bf16", "adamw", True, 6),              # bf16 weights 2 + bf16 moments 4
    ("bf16-mixed", "sgd", True, 6),          # 2 + master 4, no moments
])
def test_full_checkpoint_hand_count(tiny, precision, optimizer, with_optimizer, bytes_per_param):
    f = checkpoint_bytes(tiny, "full", precision, optimizer, with_optimizer)
    assert f.value == TINY_PARAMS * bytes_per_param
    assert f.unit == "bytes" and f.basis == "formula"
    assert "count_params" in f.source and "state_bytes_per_param" in f.source


@pytest.mark.parametrize("method", ["lora", "qlora"])
def test_adapter_checkpoint_hand_count(tiny, method):
    alone = checkpoint_bytes(tiny, method, "bf16-mixed", lora_rank=16, lora_targets="all-linear")
    assert alone.value == TINY_LORA_16 * 4  # fp32 adapters; the base is not saved
    resume = checkpoint_bytes(tiny, method, "bf16-mixed", "adamw", with_optimizer=True)
    assert resume.value == TINY_LORA_16 * (4 + 8)
    assert "not saved" in alone.source


def test_checkpoint_bytes_for_training_matches(tiny):
    t = Training(arch=tiny, method="lora", precision="bf16-mixed", lora_rank=16)
    assert checkpoint_bytes_for(t).value == checkpoint_bytes(tiny, "lora", lora_rank=16).value


def test_retained_and_write_time(tiny):
    one = checkpoint_bytes(tiny, "full", "bf16-mixed", with_optimizer=True)
    assert retained_checkpoints_bytes(one, 3).value == 4 * one.value  # N + 1 while saving
    assert retained_checkpoints_bytes(one, 3, saving_next=False).value == 3 * one.value
    # 14e9 bytes (a 1e9-param bf16-mixed resume checkpoint) at 2 GB/s, 10 saves: 70 s
    from gpuhours.estimate.figures import formula

    big = formula(14e9, "bytes", "test")
    w = checkpoint_write_s(big, disk_write_gb_per_s=2.0, saves=10)
    assert w.value == pytest.approx(70.0)
    assert w.unit == "s" and "lower bound" in w.source


@pytest.mark.parametrize(("vocab", "width"), [(1000, 2), (50_257, 2), (65_536, 2), (65_537, 4),
                                              (128_256, 4), (151_936, 4)])
def test_token_id_bytes(vocab, width):
    assert token_id_bytes(vocab) == width


def test_tokenized_dataset_layouts():
    # 1e9 GPT-2 tokens packed as uint16: 2 GB (nanoGPT's openwebtext train.bin is ~17 GB for ~9B)
    assert tokenized_dataset_bytes(1e9, 50_257).value == 2e9
    assert tokenized_dataset_bytes(1e9, 128_256, copies=2).value == 8e9
    assert tokenized_dataset_bytes(1e6, 128_256, "hf-datasets").value == 5e6
    assert tokenized_dataset_bytes(1e6, 128_256, "hf-datasets-labels").value == 13e6


def test_raw_text_is_marked_assumed_unless_stated():
    a = raw_text_bytes(1e9)
    assert a.value == 4e9 and a.basis == "assumed" and "assumption" in a.source
    s = raw_text_bytes(1e9, bytes_per_token=3.2)
    assert s.value == pytest.approx(3.2e9) and s.basis == "formula"


def test_rollout_buffer_hand_count():
    # 1000 rollouts x (1024 tokens x (4 id + 1 x 4 logprob) + 1 x 4 reward) = 8,196,000
    assert rollout_buffer_bytes(1000, 1024).value == 8_196_000
    # PPO-style: 5 fp32 values per token
    assert rollout_buffer_bytes(10, 100, floats_per_token=5, floats_per_rollout=0).value == (
        10 * 100 * (4 + 20))


def test_logs_and_total():
    logs = log_bytes(24, 2e9)
    assert logs.value == 48e9
    total = total_bytes({"logs": logs, "text": raw_text_bytes(1e9)})
    assert total.value == 52e9 and total.basis == "assumed" and "logs, text" in total.source


@pytest.mark.parametrize("call", [
    lambda: tokenized_dataset_bytes(-1, 1000),
    lambda: tokenized_dataset_bytes(1, 0),
    lambda: rollout_buffer_bytes(float("nan"), 10),
    lambda: log_bytes(1, -5),
    lambda: checkpoint_write_s(raw_text_bytes(1), 0),
])
def test_bad_budget_inputs_raise_input_error(call):
    with pytest.raises(InputError, match="storage budget"):
        call()


# --- against real files ---------------------------------------------------------------------

CONFIG = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
              max_position_embeddings=128, tie_word_embeddings=False)


def safetensors_tensor_bytes(path: str) -> int:
    """File size less the 8-byte length and the JSON header: the bytes of the tensors."""
    with open(path, "rb") as f:
        header = struct.unpack("<Q", f.read(8))[0]
    return os.path.getsize(path) - 8 - header


def _model(torch, transformers, dtype, **overrides):
    torch.manual_seed(0)
    cfg = {**CONFIG, **overrides}
    model = transformers.LlamaForCausalLM(transformers.AutoConfig.for_model(**cfg)).to(dtype)
    return model, from_hf_config(cfg, "tiny")


@pytest.mark.parametrize(("dtype_name", "precision", "tie"), [
    ("bfloat16", "bf16-mixed", False), ("float32", "fp32", False), ("bfloat16", "bf16", True)])
def test_weights_checkpoint_equals_safetensors_file(tmp_path, dtype_name, precision, tie):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("safetensors")
    model, arch = _model(torch, transformers, getattr(torch, dtype_name), tie_word_embeddings=tie)
    model.save_pretrained(tmp_path)
    in_file = safetensors_tensor_bytes(str(tmp_path / "model.safetensors"))
    in_memory = sum(p.numel() * p.element_size() for p in model.parameters())  # tied: once
    assert checkpoint_bytes(arch, "full", precision).value == in_file == in_memory


@pytest.mark.parametrize(("dtype_name", "precision", "moment_bytes"), [
    ("float32", "fp32", 8), ("bfloat16", "bf16", 4)])
def test_optimizer_state_equals_torch_save(tmp_path, dtype_name, precision, moment_bytes):
    """torch AdamW after one step: exp_avg and exp_avg_sq in the parameter dtype. The tensors
    match the formula exactly; the pickled file adds a per-tensor overhead (step scalars, names),
    under 5% here."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model, arch = _model(torch, transformers, getattr(torch, dtype_name))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, CONFIG["vocab_size"], (1, 8), generator=torch.Generator().manual_seed(0))
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    moments = sum(t.numel() * t.element_size() for s in opt.state.values()
                  for k, t in s.items() if k in ("exp_avg", "exp_avg_sq"))
    torch.save(opt.state_dict(), tmp_path / "optimizer.pt")
    model.save_pretrained(tmp_path)
    weights = safetensors_tensor_bytes(str(tmp_path / "model.safetensors"))
    predicted = checkpoint_bytes(arch, "full", precision, "adamw", with_optimizer=True).value
    assert moments == TINY_PARAMS * moment_bytes
    assert predicted == weights + moments
    assert os.path.getsize(tmp_path / "optimizer.pt") == pytest.approx(moments, rel=0.05)


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
@pytest.mark.parametrize(("targets", "peft_targets"), [("all-linear", "all-linear"),
                                                       ("qv", ["q_proj", "v_proj"])])
def test_lora_checkpoint_equals_adapter_file(tmp_path, targets, peft_targets):
    """peft on a bf16 base: the adapters are fp32 and only they are saved."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    model, arch = _model(torch, transformers, torch.bfloat16)
    model = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules=peft_targets))
    model.save_pretrained(tmp_path)
    in_file = safetensors_tensor_bytes(str(tmp_path / "adapter_model.safetensors"))
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    predicted = checkpoint_bytes(arch, "lora", "bf16-mixed", lora_rank=8, lora_targets=targets)
    assert predicted.value == in_file == trainable
