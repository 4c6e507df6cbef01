"""QLoRA with fp32 compute is what transformers' BitsAndBytesConfig does by default
(bnb_4bit_compute_dtype None -> torch.float32, transformers utils/quantization_config.py), so
HF Trainer without bf16=True and an axolotl qlora file without bf16 run it: it is modelled,
not refused (reviewer's finding 4): fp32 GEMM rate, fp32 activations, each 4-bit weight
dequantised to fp32 and read by fp32 matmuls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate.memory import kbit_upcast_active
from gpuhours.estimate.quant import dequant_bytes_per_weight
from gpuhours.setup import Training

runner = CliRunner()
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


def test_qlora_fp32_is_a_setup():
    t = Training(model="qwen2.5-0.5b", method="qlora", precision="fp32")
    # under fp32 compute peft's upcast adds no copies: every tensor is fp32 already
    assert not kbit_upcast_active(t)
    assert kbit_upcast_active(t.model_copy(update={"precision": "bf16-mixed"}))


@pytest.mark.parametrize("update, match", [
    ({"precision": "fp8-mixed"}, "fp8 GEMMs are not a QLoRA setup"),
    ({"precision": "fp32", "base_quant": "gptq-int4"}, "a gptq-int4 base computes in half"),
])
def test_qlora_precisions_still_refused(update: dict, match: str):
    with pytest.raises(FieldError, match=match):
        Training(model="qwen2.5-0.5b", method="qlora", **update)


def test_nf4_dequantisation_to_fp32_hand_count():
    # packed 0.5 + nested absmax 1/64 + 4/64 + absmax read 4/64, then the weight written in the
    # compute dtype: 2 bytes (bf16) or 4 (fp32); the matmul's read is the caller's
    assert dequant_bytes_per_weight("nf4", None, 2.0) == pytest.approx(0.5 + 9 / 64 + 2)
    assert dequant_bytes_per_weight("nf4", None, 4.0) == pytest.approx(0.5 + 9 / 64 + 4)


def _json(*args: str) -> dict:
    r = runner.invoke(app, ["estimate", "--model", "qwen2.5-7b", "--gpu", "a100-80gb",
                            "--batch", "1", "--seq", "1024", "--tokens", "1e7", "--no-calibrate",
                            "--json", *args], env=ENV)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_qlora_fp32_runs_at_the_fp32_rate():
    e = _json("--method", "qlora", "--precision", "fp32")
    # MFU is counted against the A100's fp32 rate, 19.5 TFLOPS
    mfu = e["tokens_per_s_per_gpu"]["value"] * e["model_flops_per_token"]["value"] / 19.5e12
    assert e["mfu"]["value"] == pytest.approx(mfu, rel=1e-6)
    half = _json("--method", "qlora", "--precision", "bf16-mixed")
    # 312 / 19.5 = 16x the matmul time at the same GEMM efficiency
    assert e["step_time_breakdown_s"]["matmul_s"]["value"] == pytest.approx(
        16 * half["step_time_breakdown_s"]["matmul_s"]["value"], rel=1e-6)


def test_axolotl_qlora_without_bf16_is_estimated(tmp_path: Path):
    path = tmp_path / "qlora.yaml"
    path.write_text("base_model: Qwen/Qwen2.5-7B\nadapter: qlora\nload_in_4bit: true\n"
                    "lora_r: 16\nmicro_batch_size: 1\nsequence_len: 1024\nmax_steps: 10\n")
    r = runner.invoke(app, ["estimate", "--from", str(path), "--gpu", "a100-80gb", "--json"],
                      env=ENV)
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["setup"]["precision"] == "fp32"
