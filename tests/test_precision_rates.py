"""The RTX 5090 runs the default precision (its bf16 FP32-accumulate rate from NVIDIA's RTX
Blackwell whitepaper, Table 3), and a GPU without bf16 gets the mixed-precision setup a user
would run instead (reviewer's finding 3)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuhours import catalog
from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate.timing import peak_flops

runner = CliRunner()
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


def test_rtx_5090_bf16_is_the_whitepapers_fp32_accumulate_dense_rate():
    gpu = catalog.gpu("rtx-5090")
    assert peak_flops(gpu, "bf16-mixed") == pytest.approx(209.5e12)
    # the 4090's row is the same convention: bf16 = fp16 with FP32 accumulate, dense
    ada = catalog.gpu("rtx-4090").dense_tflops
    assert ada.bf16 == ada.fp16 == pytest.approx(165.15)


def test_rtx_5090_qlora_with_the_default_precision_is_estimated():
    r = runner.invoke(app, ["estimate", "--model", "qwen2.5-7b", "--gpu", "rtx-5090", "--method",
                            "qlora", "--batch", "1", "--seq", "1024", "--tokens", "1e7",
                            "--no-calibrate", "--json"], env=ENV)
    assert r.exit_code == 0, r.output
    e = json.loads(r.output)
    # MFU = tokens/s x model FLOPs per token / 209.5 TFLOPS
    mfu = e["tokens_per_s_per_gpu"]["value"] * e["model_flops_per_token"]["value"] / 209.5e12
    assert e["mfu"]["value"] == pytest.approx(mfu, rel=1e-6)


@pytest.mark.parametrize("gpu, asked, suggested", [
    ("v100-16gb", "bf16-mixed", "fp16-mixed"), ("t4", "bf16-amp", "fp16-amp"),
    ("t4", "bf16", "fp16")])
def test_without_bf16_the_same_scheme_in_fp16_is_suggested(gpu: str, asked: str,
                                                           suggested: str):
    with pytest.raises(FieldError, match=rf"Use --precision {suggested} \(the same scheme"):
        peak_flops(catalog.gpu(gpu), asked)
