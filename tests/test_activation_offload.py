"""Activation offloading (torchtune's OffloadActivations; estimate/activation_offload.py).

The model: under checkpointing, what the pack hook of a saved_tensors_hooks around the model's
forward sees is each checkpointed layer's input and the final norm's saves; it copies those to
pinned host memory. Checked on a real checkpointed Llama on this CPU with a counting pack hook,
then by hand on Llama 3.2 3B."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli_json import LLAMA_3B_FULL, estimate_json
from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate.activation_offload import (
    MIN_OFFLOAD_SIZE_BYTES,
    offload_exposed_s,
    offload_pcie_s,
)
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.memory import activation_bytes, offloaded_activation_bytes, training_memory
from gpuhours.resolve import resolve_model
from gpuhours.setup import Training

runner = CliRunner()

CONFIG = {"model_type": "llama", "vocab_size": 256, "hidden_size": 64,
          "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
          "num_key_value_heads": 2, "max_position_embeddings": 256,
          "tie_word_embeddings": False, "rms_norm_eps": 1e-6}
BATCH, SEQ = 2, 32


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_packed_bytes_of_a_real_checkpointed_model(precision: str) -> None:
    """What torchtune's pack hook would copy, counted on a real model: every saved tensor of at
    least MIN_OFFLOAD_SIZE_BYTES that is not a parameter, up to the LM head (which torchtune
    runs under its NoOpManager)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(**{k: v for k, v in CONFIG.items() if k != "model_type"})
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    model.activation_checkpointing_enable({"use_reentrant": False})
    model.train()
    in_head = [False]
    model.lm_head.register_forward_pre_hook(lambda *a: in_head.__setitem__(0, True))
    packed = []

    def pack(x):
        size = x.numel() * x.element_size()
        if (not in_head[0] and size >= MIN_OFFLOAD_SIZE_BYTES
                and not isinstance(x, torch.nn.Parameter)):
            packed.append(size)
        return x

    ids = torch.randint(0, CONFIG["vocab_size"], (BATCH, SEQ))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        model(input_ids=ids)
    arch = from_hf_config(CONFIG, "tiny")
    t = Training(arch=arch, method="full", precision=precision, micro_batch=BATCH,
                 seq_len=SEQ, checkpointing=True, activation_offload=True)
    # by hand: 3 layer inputs (4 or 2 bytes) and the final norm's fp32 input twice and its
    # normalised output (4 + 4 + 4, or 4 + 4 + 2 under bf16)
    tokens_hidden = BATCH * SEQ * 64
    by_hand = tokens_hidden * (3 * 4 + 12 if precision == "fp32" else 3 * 2 + 10)
    assert sum(packed) == by_hand
    assert offloaded_activation_bytes(arch, t) == by_hand


def _3b(**kw: object) -> Training:
    arch, _ = resolve_model("llama-3.2-3b")
    fields = {"checkpointing": True, **kw}
    return Training(arch=arch, method="full", precision="bf16", micro_batch=2, seq_len=4096,
                    **fields)


def test_llama_3b_by_hand() -> None:
    """Llama 3.2 3B (28 layers, hidden 3072), 2 x 4096 tokens in bf16: 27 of the 28 layer
    inputs leave the GPU, 27 x 8192 x 3072 x 2 = 1,358,954,496 bytes; the host holds all 28
    and the final norm's saves: 28 x 8192 x 3072 x 2 + 8192 x 3072 x 10 = 1,660,944,384."""
    plain, off = _3b(), _3b(activation_offload=True)
    arch = plain.arch
    assert (activation_bytes(arch, plain).total - activation_bytes(arch, off).total
            == 1_358_954_496)
    assert training_memory(arch, off).host_bytes == 1_660_944_384
    assert training_memory(arch, plain).host_bytes == 0


def test_copies_time_by_hand() -> None:
    # 1 GB per micro-batch, 2 micro-batches, down and up at 25 GB/s: 0.16 s
    assert offload_pcie_s(1e9, 2, 25e9) == pytest.approx(0.16)
    assert offload_exposed_s(0.16, 0.10) == pytest.approx(0.06)
    assert offload_exposed_s(0.16, 1.0) == 0.0


def test_refused_without_checkpointing() -> None:
    with pytest.raises(FieldError, match="checkpointing"):
        _3b(activation_offload=True, checkpointing=False)


def _estimate(*args: str) -> dict:
    return estimate_json(*LLAMA_3B_FULL, *args)


def test_cli_flag_host_ram_and_hidden_copies() -> None:
    plain = _estimate("--checkpointing")
    off = _estimate("--checkpointing", "--activation-offload")
    saved = (plain["memory"]["activations_bytes"]["value"]
             - off["memory"]["activations_bytes"]["value"])
    assert saved == pytest.approx(1_358_954_496)
    host = off["memory"]["host_bytes"]
    assert host["value"] == 1_660_944_384 and "activation_offload.py" in host["source"]
    # 2 x 1.66 GB at 25.2 GB/s (PCIe 4.0 x 0.8) is 0.13 s, under a step of about a second:
    # hidden by the side stream
    assert off["step_time_s"]["value"] == pytest.approx(plain["step_time_s"]["value"])
    assert off["setup"]["activation_offload"] is True
    bad = runner.invoke(app, ["estimate", "--model", "llama-3.2-3b", "--gpu", "a100-80gb",
                              "--activation-offload"])
    assert bad.exit_code == 2 and "--activation-offload/--checkpointing" in bad.output
    assert "Traceback" not in bad.output


def test_torchtune_config_sets_it(tmp_path: Path) -> None:
    from gpuhours.importers import read_setup

    path = tmp_path / "3B_full_single_device.yaml"
    path.write_text("model:\n  _component_: torchtune.models.llama3_2.llama3_2_3b\n"
                    "batch_size: 2\nenable_activation_checkpointing: True\n"
                    "enable_activation_offloading: True\noptimizer_in_bwd: True\n"
                    "gradient_accumulation_steps: 1\ndtype: bf16\n")
    got = read_setup(path)
    assert got.fields["activation_offload"] is True
    assert got.fields["optimizer_in_backward"] is True
    path.write_text("enable_activation_offloading: sometimes\n")
    result = runner.invoke(app, ["estimate", "--from", str(path), "--gpu", "a100-80gb"])
    assert result.exit_code == 2 and "enable_activation_offloading" in result.output
