"""Calibration arithmetic: the efficiency scale is solved so that the analytic step time equals the
measured one, found from the nearest matching ledger measurement, and carried to comparable
setups. Golden values come from the estimator itself (round trips), not from constants."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuhours.catalog.schema import GpuSpec
from gpuhours.errors import InputError
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.estimator import estimate_training
from gpuhours.setup import Hardware, Training
from gpuhours.track.calibration import (
    calibrated_estimate,
    efficiency_scale_for,
    find_calibration,
    measured_device,
    training_of,
)
from gpuhours.track.ledger import Ledger

CONFIG = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4,
          "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 688,
          "vocab_size": 4096, "max_position_embeddings": 2048}


def _training(config: dict[str, Any] = CONFIG, **over: Any) -> Training:
    # long enough sequences that the GPU's work, not the host's operators, leads the step:
    # a host-led step calibrates nothing (calibration.HOST_LED_FRACTION)
    arch = from_hf_config(config, name="tiny-llama")
    return Training(**{"arch": arch, "precision": "fp32", "micro_batch": 4, "seq_len": 2048,
                       **over})


def _store(ledger: Ledger, t: Training, step_time_s: float, device_key: str = "toy",
           config: dict[str, Any] = CONFIG, **setup_over: Any) -> int:
    tokens = t.tokens_per_micro_batch * t.grad_accum
    setup = {"method": t.method, "precision": t.precision, "micro_batch": t.micro_batch,
             "seq_len": t.seq_len, "grad_accum": t.grad_accum, "checkpointing": t.checkpointing,
             "compiled": False, "optimizer": t.optimizer, "optimizer_impl": t.optimizer_impl,
             "lora_rank": t.lora_rank, "lora_targets": t.lora_targets, "attention": "sdpa",
             **setup_over}
    return ledger.add_measurement(
        kind="bench", status="ok", device_kind="cuda", device_key=device_key,
        device_name="Toy GPU", model="tiny-llama", setup=setup, model_config=config,
        environment={"hostname": "h"},
        results={"step_time_median_s": step_time_s, "tokens_per_s": tokens / step_time_s,
                 "timing": {"n_steps": 20},
                 "tokens_per_s_range": [0.9 * tokens / step_time_s, 1.1 * tokens / step_time_s]})


def _measured(t: Training, hw: Hardware, scale: float) -> float:
    """A step time the estimator would give at efficiency x `scale`: what we pretend we measured."""
    return estimate_training(t, hw, "test", efficiency_scale=scale).step_time_s.value


@pytest.mark.parametrize("scale", [0.05, 0.37, 1.0, 2.5])
def test_scale_is_solved_from_the_step_time(toy_gpu: GpuSpec, scale: float) -> None:
    t, hw = _training(), Hardware(gpu=toy_gpu)
    assert efficiency_scale_for(t, hw, _measured(t, hw, scale)) == pytest.approx(scale, rel=1e-6)


def test_scale_by_hand(toy_gpu: GpuSpec) -> None:
    """Where the step is nearly all matmul, the scale is (analytic compute time) / (measured time
    minus the non-compute parts): checked against the estimate's own breakdown."""
    t, hw = _training(micro_batch=64), Hardware(gpu=toy_gpu)
    e = estimate_training(t, hw, "test")
    parts = {k: v.value for k, v in e.step_time_breakdown_s.items()}
    # compute at half the assumed efficiency; the host's operators combine with the GPU's
    # time as a 1.5-norm (assumptions.HOST_GPU_OVERLAP_P), the optimizer adds
    gpu = (parts["matmul_s"] + parts["attention_s"]) / 0.5 + parts["memory_bound_s"]
    measured = (parts["host_s"] ** 1.5 + gpu ** 1.5) ** (1 / 1.5) + parts["optimizer_s"]
    assert efficiency_scale_for(t, hw, measured) == pytest.approx(0.5, rel=1e-6)


def test_impossible_measurements_give_none(toy_gpu: GpuSpec) -> None:
    t, hw = _training(), Hardware(gpu=toy_gpu)
    assert efficiency_scale_for(t, hw, 1e-12) is None  # faster than the memory traffic allows
    # a bf16 step this small is mostly the host issuing operators whatever the efficiency:
    # the measurement cannot tell the GPU's efficiency, so there is no calibration
    small = _training(precision="bf16-amp", micro_batch=1, seq_len=128)
    e = estimate_training(small, hw, "test", efficiency_scale=0.6)
    assert e.step_time_breakdown_s["host_exposed_s"].value > 0.5 * e.step_time_s.value
    assert efficiency_scale_for(small, hw, _measured(small, hw, 0.6)) is None
    assert efficiency_scale_for(t, hw, 1e6) is None    # 1000x slower than assumed
    with pytest.raises(ValueError):
        efficiency_scale_for(t, hw, 0.0)


def test_calibrated_estimate_reproduces_its_measurement(toy_gpu: GpuSpec, tmp_path: Path) -> None:
    t, hw = _training(), Hardware(gpu=toy_gpu)
    measured = _measured(t, hw, 0.37)
    with Ledger.open(tmp_path / "l.sqlite") as ledger:
        row = _store(ledger, t, measured)
        analytic, calibrated, cal = calibrated_estimate(t, hw, "test", ledger)
        date = ledger.measurement(row).created_utc[:10]
    assert cal is not None and calibrated is not None
    assert cal.ledger_id == row and cal.efficiency_scale == pytest.approx(0.37, rel=1e-6)
    assert calibrated.step_time_s.value == pytest.approx(measured, rel=1e-6)
    assert analytic.step_time_s.value == pytest.approx(_measured(t, hw, 1.0))
    assert cal.basis.startswith(f"calibrated: ledger #{row}, Toy GPU, {date}")
    assert calibrated.gemm_efficiency.basis == "measured"
    assert cal.basis in calibrated.step_time_s.source


def test_comparable_setups_take_the_scale_and_others_do_not(toy_gpu: GpuSpec,
                                                             tmp_path: Path) -> None:
    t, hw = _training(), Hardware(gpu=toy_gpu)
    wide = {**CONFIG, "hidden_size": 512, "intermediate_size": 1376}
    very_wide = {**CONFIG, "hidden_size": 1024, "intermediate_size": 2752}
    with Ledger.open(tmp_path / "l.sqlite") as ledger:
        _store(ledger, t, _measured(t, hw, 0.37))

        def scale(target: Training) -> float | None:
            cal = find_calibration(ledger, hw, target)
            return None if cal is None else cal.efficiency_scale

        assert scale(_training(micro_batch=16)) == pytest.approx(0.37, rel=1e-6)
        assert scale(_training(seq_len=1024)) == pytest.approx(0.37, rel=1e-6)
        assert scale(_training(config=wide)) == pytest.approx(0.37, rel=1e-6)
        assert scale(_training(config=very_wide)) is None          # hidden size 4x
        assert scale(_training(method="lora")) is None
        assert scale(_training(checkpointing=True)) is None
        assert scale(_training(precision="bf16-mixed")) is None    # bf16 matmuls, not fp32
        assert find_calibration(ledger, hw, t, device_key="other-gpu") is None
        assert find_calibration(ledger, hw, t, exclude_ids=[1]) is None


def test_bf16_flavours_share_a_calibration(toy_gpu: GpuSpec, tmp_path: Path) -> None:
    hw = Hardware(gpu=toy_gpu)
    amp = _training(precision="bf16-amp", micro_batch=64, seq_len=512)
    with Ledger.open(tmp_path / "l.sqlite") as ledger:
        _store(ledger, amp, _measured(amp, hw, 0.6))
        cal = find_calibration(ledger, hw, _training(precision="bf16-mixed", micro_batch=64,
                                                     seq_len=512))
    assert cal is not None and cal.efficiency_scale == pytest.approx(0.6, rel=1e-6)


def test_the_nearest_measurement_wins_and_skips_compiled_and_failed(toy_gpu: GpuSpec,
                                                                   tmp_path: Path) -> None:
    hw = Hardware(gpu=toy_gpu)
    small, large = _training(micro_batch=1), _training(micro_batch=32)
    with Ledger.open(tmp_path / "l.sqlite") as ledger:
        near = _store(ledger, small, _measured(small, hw, 0.2))
        far = _store(ledger, large, _measured(large, hw, 0.8))
        _store(ledger, small, _measured(small, hw, 0.9), compiled=True)
        ledger.add_measurement(kind="bench", status="does-not-fit", device_kind="cuda",
                               device_key="toy", device_name="Toy GPU", model="tiny-llama",
                               setup={}, model_config=CONFIG, environment={},
                               results={"error": "OOM"})
        first = find_calibration(ledger, hw, _training(micro_batch=2))
        second = find_calibration(ledger, hw, _training(micro_batch=24))
    assert first is not None and first.ledger_id == near
    assert first.efficiency_scale == pytest.approx(0.2, rel=1e-6)
    assert second is not None and second.ledger_id == far


def test_training_of_a_ledger_row(tmp_path: Path, toy_gpu: GpuSpec) -> None:
    t = _training(method="lora", lora_rank=8, lora_targets="qv", checkpointing=True,
                  grad_accum=4)
    with Ledger.open(tmp_path / "l.sqlite") as ledger:
        m = ledger.measurement(_store(ledger, t, 1.0))
    assert training_of(m) == t


def test_measured_device_from_probes(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "l.sqlite") as ledger:
        common: dict[str, Any] = dict(device_kind="cpu", device_key="cpu-amd-epyc-2t",
                                      device_name="AMD EPYC, 2 torch threads", hostname="h")
        ledger.add_probe(**common, probe="matmul", dtype="float32", value=8e10, unit="flop/s",
                         details={})
        ledger.add_probe(**common, probe="matmul", dtype="bfloat16", value=1.6e11,
                         unit="flop/s", details={})
        with pytest.raises(InputError, match="no copy"):
            measured_device(ledger, "cpu-amd-epyc-2t")
        ledger.add_probe(**common, probe="copy", dtype=None, value=2e10, unit="bytes/s",
                         details={"device_memory_bytes": 24e9})
        spec = measured_device(ledger, "cpu-amd-epyc-2t")
        with pytest.raises(InputError, match="no matmul probe"):
            measured_device(ledger, "cpu-other-1t")
    assert spec.generation == "cpu" and spec.name == "cpu-amd-epyc-2t"
    assert spec.dense_tflops.fp32 == pytest.approx(0.08)
    assert spec.dense_tflops.bf16 == pytest.approx(0.16)
    assert spec.memory_bw_gb_per_s == pytest.approx(20.0)
    assert spec.memory_gb == pytest.approx(24.0)
    assert spec.source.startswith("measured: ledger probe #1")
    e = estimate_training(_training(), Hardware(gpu=spec), "test")
    assert e.step_time_s.value > 0


def test_ledger_calibration_and_bench_imports_do_not_import_torch() -> None:
    code = ("import sys, json, gpuhours.track.calibration, gpuhours.track.ledger, "
            "gpuhours.bench, gpuhours.bench.cli, gpuhours.bench.sweep, gpuhours.bench.render; "
            "print(json.dumps([m for m in ('torch', 'transformers', 'peft') "
            "if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert json.loads(out.stdout) == []


# --- the host's cost per operator, from a host-led measurement -----------------------------
def test_a_host_led_measurement_gives_the_host_cost_per_operator(toy_gpu: GpuSpec,
                                                                tmp_path: Path) -> None:
    from gpuhours.track.calibration import find_host_calibration

    small = _training(precision="bf16-amp", micro_batch=1, seq_len=128)
    # what this setup measures on a host that takes 20 us per operator (the estimate's own
    # step time there); the solve must give 20 back
    hw20 = Hardware(gpu=toy_gpu, host_us_per_op=20.0)
    measured = estimate_training(small, hw20, "test").step_time_s.value
    with Ledger.open(tmp_path / "l.sqlite") as ledger:
        mid = _store(ledger, small, measured)
        host = find_host_calibration(ledger, Hardware(gpu=toy_gpu), device_key="toy")
    assert host is not None and host.ledger_id == mid
    assert host.host_us_per_op == pytest.approx(20.0, rel=1e-6)
    assert host.basis.startswith(f"measured: ledger #{mid}")


def test_a_gpu_led_measurement_says_nothing_of_the_host(toy_gpu: GpuSpec, tmp_path: Path) -> None:
    from gpuhours.track.calibration import find_host_calibration

    big = _training(micro_batch=16)
    hw = Hardware(gpu=toy_gpu)
    with Ledger.open(tmp_path / "l.sqlite") as ledger:
        _store(ledger, big, _measured(big, hw, 0.5))
        assert find_host_calibration(ledger, hw, device_key="toy") is None


def test_the_estimate_names_the_measured_host(toy_gpu: GpuSpec, tmp_path: Path) -> None:
    from gpuhours.track.calibration import calibration_kwargs

    small = _training(precision="bf16-amp", micro_batch=1, seq_len=128)
    hw = Hardware(gpu=toy_gpu)
    measured = estimate_training(small, Hardware(gpu=toy_gpu, host_us_per_op=20.0),
                                 "test").step_time_s.value
    with Ledger.open(tmp_path / "l.sqlite") as ledger:
        _store(ledger, small, measured)
        kwargs = calibration_kwargs(ledger, hw.model_copy(update={"gpu": toy_gpu}), small)
    e = estimate_training(small, hw, "test", **kwargs)
    host = e.step_time_breakdown_s["host_s"]
    assert host.basis == "measured" and "20.0 us per operator" in host.source
    assert e.step_time_s.value == pytest.approx(measured, rel=1e-6)
    # a host the user states wins over the ledger's
    given = estimate_training(small, Hardware(gpu=toy_gpu, host_us_per_op=8.0), "test",
                              **kwargs)
    assert "given: host_us_per_op" in given.step_time_breakdown_s["host_s"].source
