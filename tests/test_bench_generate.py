"""`gpuhours bench --workload generate` on this CPU: a tiny Qwen2-shaped model, real HF generate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app

pytest.importorskip("torch")
pytest.importorskip("transformers")

TINY = ["--model", "qwen2.5-0.5b", "--set", "num_hidden_layers=2", "--set", "hidden_size=64",
        "--set", "intermediate_size=128", "--set", "num_attention_heads=4",
        "--set", "num_key_value_heads=2", "--set", "vocab_size=512", "--precision", "fp32",
        "--threads", "1"]
runner = CliRunner()


def test_generate_is_measured_and_stored(tmp_path: Path) -> None:
    from gpuhours.track.ledger import Ledger

    ledger = tmp_path / "l.sqlite"
    r = runner.invoke(app, ["bench", *TINY, "--workload", "generate", "--batch", "2",
                            "--prompt-tokens", "16", "--output-tokens", "9", "--repeats", "1",
                            "--ledger", str(ledger), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    res = d["result"]
    # the decode step is the 8 steps after the first token, by hand from the two timings
    assert res["decode_step_s"] == pytest.approx((res["generate_s"] - res["prefill_s"]) / 8)
    assert res["output_tokens_per_s"] == pytest.approx(2 / res["decode_step_s"])
    assert res["operators_per_decode_step"] > 0
    assert res["estimated_decode_step_s"] is None  # a CPU has no catalog row to estimate on
    with Ledger.open(ledger, create=False) as book:
        (m,) = book.measurements()
    assert m.id == d["ledger_id"] and m.kind == "generate" and m.status == "ok"
    assert m.step_time_median_s == pytest.approx(res["decode_step_s"])
    assert m.setup["batch"] == 2 and m.setup["output_tokens"] == 9


@pytest.mark.parametrize(("extra", "option"), [
    (["--workload", "decode"], "--workload"),
    (["--workload", "generate", "--output-tokens", "1"], "--output-tokens"),
    (["--workload", "generate", "--sweep", "batch=1,2"], "--sweep"),
])
def test_bad_generate_input_names_the_option(extra: list[str], option: str) -> None:
    r = runner.invoke(app, ["bench", *TINY, *extra, "--no-ledger"])
    assert r.exit_code == 2, r.output
    assert option in r.output and "Traceback" not in r.output


def test_on_a_catalog_gpu_the_estimate_stands_beside_the_measurement() -> None:
    from gpuhours import catalog
    from gpuhours.api import estimate_generation
    from gpuhours.bench.generate import GenerateResult, with_estimate
    from gpuhours.setup import Generation, Hardware

    g = Generation(model="qwen2.5-0.5b", batch=16, prompt_tokens=512, output_tokens=128,
                   engine="hf-generate")
    measured = GenerateResult(
        setup={}, device_kind="cuda", device_key="h100-sxm", device_name="NVIDIA H100 80GB HBM3",
        catalog_gpu="h100-sxm", dtype="bfloat16", prefill_s=0.038, generate_s=4.19,
        decode_step_s=0.0327, decode_steps_s=[0.0327], output_tokens_per_s=16 / 0.0327,
        operators_per_decode_step=None, peak_memory_bytes=1_460_057_600, timing_basis="test")
    r = with_estimate(measured, g)
    e = estimate_generation(g, Hardware(gpu=catalog.gpu("h100-sxm")))
    assert r.estimated_prefill_s == pytest.approx(e.prefill_s)
    assert r.estimated_decode_step_s == pytest.approx(e.decode_s / 128)
    assert r.estimate_basis is not None and "h100-sxm" in r.estimate_basis
    # the H100 run's max_memory_allocated for this setup (transformers 5.17): the analytic
    # peak of live tensors sits 71 MB (cuBLAS's workspaces) below it (docs/generation.md)
    assert r.estimated_peak_memory_bytes is not None
    assert 60e6 < 1_460_057_600 - r.estimated_peak_memory_bytes < 75e6


def test_a_generate_measurement_calibrates_the_host_of_hf_generate(tmp_path: Path) -> None:
    from gpuhours import catalog
    from gpuhours.api import estimate_generation
    from gpuhours.setup import Generation, Hardware
    from gpuhours.track.ledger import Ledger

    h100 = Hardware(gpu=catalog.gpu("h100-sxm"))
    g = Generation(model="qwen2.5-0.5b", batch=1, prompt_tokens=512, output_tokens=128,
                   engine="hf-generate")
    analytic = estimate_generation(g, h100)
    # the H100 run's measured decode step for this setup (docs/generation.md): 32.0 ms
    measured = 0.0320
    _, config = catalog.model("qwen2.5-0.5b")
    with Ledger.open(tmp_path / "l.sqlite") as book:
        mid = book.add_measurement(
            kind="generate", status="ok", device_kind="cuda", device_key="h100-sxm",
            device_name="NVIDIA H100 80GB HBM3", model="qwen2.5-0.5b",
            setup={"workload": "generate", "batch": 1, "prompt_tokens": 512,
                   "output_tokens": 128, "engine": "hf-generate", "precision": "bf16"},
            model_config=config, environment={"hostname": "h"},
            results={"step_time_median_s": measured, "tokens_per_s": 1 / measured})
        calibrated = estimate_generation(g, h100, book)
        other = estimate_generation(Generation(model="llama-3.1-8b", batch=1, prompt_tokens=512,
                                               output_tokens=128, engine="hf-generate"),
                                    h100, book)
    assert analytic.calibration is None
    assert calibrated.decode_s / 128 == pytest.approx(measured, rel=1e-4)
    assert calibrated.calibration is not None
    assert calibrated.calibration.startswith(f"calibrated: ledger #{mid}")
    assert calibrated.figures()["host_step_s"].basis == "measured"
    # the host measured on this machine carries to another model on it: Llama-3.1-8B's
    # decode step measured 44.2 ms on the same H100 (held out): predicted within 10%
    assert other.calibration == calibrated.calibration
    assert other.decode_s / 128 == pytest.approx(0.0442, rel=0.10)
