"""The megatron-2021 kernel path: Megatron-LM's 2021 layer (estimate/megatron_2021.py), its
operators and its score matrix's traffic, hand-counted from NVIDIA/Megatron-LM@50a4b5fa."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpuhours import catalog
from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.flops import training_flops
from gpuhours.estimate.host import host_ops_per_micro_batch
from gpuhours.estimate.megatron_2021 import (
    layer_ops,
    parameter_tensors_per_layer,
    score_bytes_per_element,
)
from gpuhours.estimate.timing import training_step_time
from gpuhours.setup import Hardware, Training

runner = CliRunner()


def _gpt(dropout: bool = True) -> ModelArch:
    # GPT 1.7B of the paper's Table 1: hidden 2304, 24 heads, 24 layers
    return ModelArch(name="gpt-1.7b", model_type="gpt2", hidden_size=2304, num_layers=24,
                     num_heads=24, num_kv_heads=24, head_dim=96, intermediate_size=4 * 2304,
                     vocab_size=51200, tie_embeddings=True, gated_mlp=False,
                     position_embeddings=2048, qkv_bias=True, out_bias=True, mlp_bias=True,
                     norm_bias=True, dropout=dropout)


def test_score_bytes_per_element_by_hand():
    # fp16, dropout: forward baddbmm w 2, softmax r 2 w 2, dropout r 2 w 2 + mask 1, bmm r 2 =
    # 13; backward dP w 2, dV's read of P 2, dropout bwd r 2 + mask 1 w 2, softmax bwd r 2 r 2
    # w 2, dQ and dK read dS 2 + 2 = 19; recomputed: 13 + 13 + 19
    assert score_bytes_per_element(True, True) == 45.0
    assert score_bytes_per_element(True, False) == 32.0
    # no dropout: forward 2 + 4 + 2 = 8, backward 2 + 2 + 6 + 4 = 14
    assert score_bytes_per_element(False, False) == 22.0


def test_layer_ops_by_hand():
    # GPT layer: two LayerNorms (w, b), qkv, dense, fc1, fc2 (w, b each): 12 tensors
    assert parameter_tensors_per_layer(_gpt()) == 12
    assert layer_ops(_gpt()) == (17.0, 32.0 + 12.0)
    assert layer_ops(_gpt(dropout=False)) == (16.0, 31.0 + 12.0)


def test_host_ops_with_recomputation():
    t = Training(arch=_gpt(), seq_len=2048, precision="fp16-mixed", checkpointing=True,
                 kernels="megatron-2021", flash_attention=False)
    outside = sum(A.OPS_PER_MICRO_BATCH)
    # 24 layers x (17 forward + 44 backward + 17 recomputed)
    assert host_ops_per_micro_batch(t.arch, t) == 24 * 78 + outside


def test_score_traffic_replaces_eager_passes():
    # the same setup on the eager path keeps 6 bytes a score (fp32 softmax + its fp16 copy) and
    # moves them 3 times (18 B); this path moves 45 B an element. The memory-bound time differs
    # by that difference over 24 heads x 2048 keys a token, 24 layers, 2048 tokens
    hw = Hardware(gpu=catalog.gpu("a100-80gb"), num_gpus=1)
    times = {}
    for kernels in ("eager", "megatron-2021"):
        t = Training(arch=_gpt(), seq_len=2048, precision="fp16-mixed", checkpointing=True,
                     kernels=kernels, flash_attention=False, loss_kernel="megatron")
        times[kernels] = training_step_time(t.arch, t, hw, training_flops(t), 1).memory_bound_s
    bw = hw.gpu.memory_bw_gb_per_s * 1e9 * A.BANDWIDTH_EFFICIENCY.value
    expected = 2048 * 24 * 24 * 2048 * (45.0 - 18.0) / bw
    assert times["megatron-2021"] - times["eager"] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(("update", "field"), [
    ({"flash_attention": True}, "flash_attention"),
    ({"method": "lora"}, "method"),
    ({"precision": "fp32"}, "precision"),
    ({"cp": 2}, "cp"),
])
def test_what_the_2021_layer_did_not_run_is_refused(update, field):
    fields = {"arch": _gpt(), "seq_len": 2048, "precision": "fp16-mixed",
              "kernels": "megatron-2021", "flash_attention": False, **update}
    with pytest.raises(FieldError, match="megatron-2021"):
        Training(**fields)


def test_cli_names_the_flags():
    result = runner.invoke(app, ["estimate", "--model", "llama-2-7b", "--gpu", "a100-80gb",
                                 "--kernels", "megatron-2021", "--no-flash", "--no-calibrate"])
    assert result.exit_code == 2, result.output
    assert "--kernels/--model" in result.output and "GeLU" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(("model", "extra"), [
    ("pythia-1b", {}),          # rotary positions, a parallel residual
    ("falcon-7b", {}),          # multi-query attention, rotary, parallel residual
    ("phi-2", {}),              # rotary, parallel residual
    ("gpt2", {"compile": True}),  # the 2021 code predates torch.compile
])
def test_shapes_and_paths_the_2021_code_never_ran_are_refused(model: str, extra: dict) -> None:
    """A reviewer's find: these were costed with GPT's 17/32 kernels a layer, no warning."""
    with pytest.raises(FieldError) as caught:
        Training(model=model, kernels="megatron-2021", flash_attention=False, **extra)
    assert "kernels" in caught.value.fields
    assert ("compile" if extra else "model") in caught.value.fields
