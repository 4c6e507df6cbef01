"""A step measured on one device carried to another through the roofline (issue 17):
gpuhours.track.transfer and `gpuhours estimate --transfer-from`.

Hand-worked cases on made-up devices (no host timeline: generation "cpu", so the step is the
device's work alone): the same device gives the measurement back; a device twice as fast in
every rate halves it; a device twice as fast only in FLOP/s moves the central figure by the
compute share and brackets it by the two attributions of the residual."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuhours.catalog.schema import GpuSpec
from gpuhours.cli import app
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.estimator import estimate_training
from gpuhours.setup import Hardware, Training
from gpuhours.track.ledger import Ledger
from gpuhours.track.transfer import transfer_step

CONFIG = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4,
          "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 688,
          "vocab_size": 4096, "max_position_embeddings": 2048}


def _device(name: str, tflops: float, gb_per_s: float) -> GpuSpec:
    return GpuSpec.model_validate(dict(
        name=name, aliases=[], full_name=name, vendor="other", generation="cpu",
        memory_gb=1000.0, memory_bw_gb_per_s=gb_per_s, dense_tflops={"fp32": tflops},
        interconnect="none", source="made up for a test", as_of="2026-11-23", notes=""))


def _training(**over: Any) -> Training:
    arch = from_hf_config(CONFIG, name="tiny-llama")
    return Training(**{"arch": arch, "precision": "fp32", "micro_batch": 4, "seq_len": 512,
                       **over})


def _parts(t: Training, gpu: GpuSpec) -> tuple[float, float]:
    """(compute-bound, memory-bound) seconds of the estimate: what the transfer splits."""
    b = {k: v.value for k, v in estimate_training(t, Hardware(gpu=gpu), "t")
         .step_time_breakdown_s.items()}
    return b["matmul_s"] + b["attention_s"], b["memory_bound_s"] + b["optimizer_s"]


A = _device("dev-a", 1.0, 50.0)


@pytest.mark.parametrize("measured_s", [0.05, 0.4, 3.0])
def test_the_same_device_and_setup_give_the_measurement_back(measured_s: float) -> None:
    t, hw = _training(), Hardware(gpu=A)
    x = transfer_step(measured_s, t, hw, t, hw)
    assert x.step_s == pytest.approx(measured_s, rel=1e-6)
    assert x.low_s == pytest.approx(measured_s, rel=1e-6)
    assert x.high_s == pytest.approx(measured_s, rel=1e-6)


def test_a_device_twice_as_fast_in_every_rate_halves_the_step() -> None:
    t = _training()
    compute, memory = _parts(t, A)
    measured = 1.7 * (compute + memory)
    x = transfer_step(measured, t, Hardware(gpu=A), t, Hardware(gpu=_device("b", 2.0, 100.0)))
    assert x.residual == pytest.approx(1.7, rel=1e-6)
    for s in (x.step_s, x.low_s, x.high_s):
        assert s == pytest.approx(measured / 2, rel=1e-6)


def test_a_device_faster_only_in_flops_by_hand() -> None:
    """B has twice A's FLOP/s and the same bandwidth. With the measured step T = 1.5 (C + M):
    proportional, T_B = 1.5 (C/2 + M); the residual all in compute, (T - M)/2 + M; all in the
    memory-bound part, C/2 + (T - C)."""
    t = _training()
    compute, memory = _parts(t, A)
    measured = 1.5 * (compute + memory)
    x = transfer_step(measured, t, Hardware(gpu=A), t, Hardware(gpu=_device("b", 2.0, 50.0)))
    assert x.step_s == pytest.approx(1.5 * (compute / 2 + memory), rel=1e-6)
    in_compute = (measured - memory) / 2 + memory
    in_memory = compute / 2 + (measured - compute)
    assert x.low_s == pytest.approx(min(in_compute, in_memory), rel=1e-6)
    assert x.high_s == pytest.approx(max(in_compute, in_memory), rel=1e-6)
    assert x.low_s < x.step_s < x.high_s


def test_the_target_setup_scales_by_the_physics() -> None:
    """Another micro-batch on the target: the measured ratio applies to the target's parts."""
    t, t8 = _training(), _training(micro_batch=8)
    compute, memory = _parts(t, A)
    x = transfer_step(2.0 * (compute + memory), t, Hardware(gpu=A), t8,
                      Hardware(gpu=_device("b", 2.0, 100.0)))
    compute8, memory8 = _parts(t8, _device("b", 2.0, 100.0))
    assert x.step_s == pytest.approx(2.0 * (compute8 + memory8), rel=1e-6)


def test_a_step_below_anything_scaling_can_give_is_refused() -> None:
    t, hw = _training(), Hardware(gpu=A)
    with pytest.raises(ValueError):
        transfer_step(0.0, t, hw, t, hw)


# The command -----------------------------------------------------------------------------------
GPT2 = ["--model", "gpt2", "--seq", "512", "--batch", "4", "--precision", "bf16-mixed"]


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    """A measurement of GPT-2 on an RTX 4090 (a catalog GPU: no probes needed), its figures
    made up; the transfer carries whatever was measured."""
    from gpuhours import catalog
    from gpuhours.catalog import model as catalog_model

    _, config = catalog_model("gpt2")
    path = tmp_path / "ledger.sqlite"
    with Ledger.open(path) as book:
        book.add_measurement(
            kind="bench", status="ok", device_kind="cuda", device_key="rtx-4090",
            device_name=catalog.gpu("rtx-4090").full_name, model="gpt2",
            setup={"method": "full", "precision": "bf16-mixed", "micro_batch": 4,
                   "seq_len": 512, "grad_accum": 1, "checkpointing": False,
                   "compiled": False},
            model_config=config, environment={"hostname": "h"},
            results={"step_time_median_s": 0.25, "tokens_per_s": 2048 / 0.25})
    return path


def test_estimate_carries_a_measurement_from_another_gpu(ledger: Path) -> None:
    r = CliRunner().invoke(app, ["estimate", *GPT2, "--gpu", "h100-sxm", "--ledger",
                                 str(ledger), "--transfer-from", "1", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    moved = data["transferred"]
    assert moved["ledger_id"] == 1
    step = moved["step_time_s"]
    assert step["basis"] == "formula" and "ledger #1" in step["source"]
    assert "rtx-4090" in step["source"] and "h100-sxm" in step["source"]
    assert moved["step_time_low_s"]["value"] <= step["value"] <= moved["step_time_high_s"]["value"]
    # the H100 is faster than the 4090 in every rate: the step it is given is shorter
    assert step["value"] < 0.25
    assert moved["analytic_step_time_s"]["value"] == pytest.approx(data["step_time_s"]["value"])
    text = CliRunner().invoke(app, ["estimate", *GPT2, "--gpu", "h100-sxm", "--ledger",
                                    str(ledger), "--transfer-from", "1"],
                              env={"COLUMNS": "80"})
    assert text.exit_code == 0, text.output
    assert "Measured elsewhere: ledger #1, carried to h100-sxm" in text.stdout


def test_bad_transfers_are_clear_errors(ledger: Path, tmp_path: Path) -> None:
    def run(*args: str) -> Any:
        return CliRunner().invoke(app, ["estimate", *args])

    other = run("--model", "qwen2-0.5b", "--seq", "512", "--gpu", "h100-sxm", "--ledger",
                str(ledger), "--transfer-from", "1")
    assert other.exit_code == 2 and "--transfer-from" in other.output
    assert "same model" in other.output and "Traceback" not in other.output
    missing = run(*GPT2, "--gpu", "h100-sxm", "--ledger", str(ledger), "--transfer-from", "7")
    assert missing.exit_code == 2 and "no measurement #7" in missing.output
    assert "error --transfer-from:" in missing.output  # the flag, not the ledger show's "ID"
    none = CliRunner().invoke(app, ["estimate", *GPT2, "--gpu", "h100-sxm", "--transfer-from",
                                    "1"], env={"GPUHOURS_LEDGER": str(tmp_path / "no.sqlite")})
    assert none.exit_code == 2 and "no ledger" in none.output
