"""A benchmark in the ledger replaces the assumed efficiency in estimate and plan, and the
living document records the change as "efficiency measured"."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuhours import catalog
from gpuhours.cli import app
from gpuhours.estimate.estimator import estimate_training
from gpuhours.plan.budget import evaluate
from gpuhours.plan.load import load_plan
from gpuhours.report.living_doc import update_living_document
from gpuhours.resolve import resolve_model
from gpuhours.setup import Hardware, Training
from gpuhours.track.ledger import Ledger

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
runner = CliRunner()


def _grid_setup(micro_batch: int = 8, seq_len: int = 128) -> tuple[Training, Hardware]:
    """The setup of examples/qwen2-0.5b-experiments.yaml (by default)."""
    arch, _ = resolve_model("qwen2-0.5b")
    t = Training(arch=arch, method="lora", lora_rank=4, micro_batch=micro_batch, seq_len=seq_len)
    return t, Hardware(gpu=catalog.gpu("rtx-4090"))


def _ledger_measuring(tmp_path: Path, slowdown: float, micro_batch: int = 8,
                      seq_len: int = 128) -> Path:
    """A ledger with one benchmark of the grid's setup, `slowdown` x the analytic step time."""
    t, hw = _grid_setup(micro_batch, seq_len)
    _, config = catalog.model("qwen2-0.5b")
    step_s = estimate_training(t, hw, "t").step_time_s.value * slowdown
    path = tmp_path / "ledger.sqlite"
    with Ledger.open(path) as book:
        book.add_measurement(
            kind="bench", status="ok", device_kind="cuda", device_key="rtx-4090",
            device_name="NVIDIA GeForce RTX 4090", model="qwen2-0.5b",
            setup={"method": "lora", "precision": t.precision, "micro_batch": micro_batch,
                   "seq_len": seq_len,
                   "grad_accum": 1, "checkpointing": False, "compiled": False,
                   "optimizer": "adamw", "optimizer_impl": "foreach", "lora_rank": 4,
                   "lora_targets": "all-linear", "attention": "sdpa"},
            model_config=config, environment={"hostname": "gpu-box"},
            results={"step_time_median_s": step_s,
                     "tokens_per_s": micro_batch * seq_len / step_s,
                     "timing": {"n_steps": 50}})
    return path


def test_estimate_uses_the_measured_efficiency(tmp_path):
    ledger = _ledger_measuring(tmp_path, slowdown=2.0)
    args = ["estimate", "--model", "qwen2-0.5b", "--gpu", "rtx-4090", "--method", "lora",
            "--lora-rank", "4", "--batch", "8", "--seq", "128", "--json"]
    plain = json.loads(runner.invoke(app, [*args, "--no-calibrate"]).stdout)
    result = runner.invoke(app, [*args, "--ledger", str(ledger)])
    assert result.exit_code == 0, result.output
    cal = json.loads(result.stdout)
    assert plain["gemm_efficiency"]["basis"] == "assumed"
    # 1,024 tokens per micro-batch: the estimate calls this step host-led, so the measurement
    # sets the host's cost per operator (not the GPU's efficiency, which it cannot tell)
    host = cal["step_time_breakdown_s"]["host_s"]
    assert host["basis"] == "measured" and "ledger #1" in host["source"]
    assert cal["gemm_efficiency"]["basis"] == "assumed"
    # the same setup measured at half the analytic speed is predicted at that speed
    assert cal["tokens_per_s_per_gpu"]["value"] == pytest.approx(
        plain["tokens_per_s_per_gpu"]["value"] / 2, rel=0.01)


def test_a_gpu_led_measurement_sets_the_efficiency(tmp_path):
    ledger = _ledger_measuring(tmp_path, slowdown=2.0, micro_batch=8, seq_len=2048)
    args = ["estimate", "--model", "qwen2-0.5b", "--gpu", "rtx-4090", "--method", "lora",
            "--lora-rank", "4", "--batch", "8", "--seq", "2048", "--json"]
    plain = json.loads(runner.invoke(app, [*args, "--no-calibrate"]).stdout)
    cal = json.loads(runner.invoke(app, [*args, "--ledger", str(ledger)]).stdout)
    assert cal["gemm_efficiency"]["basis"] == "measured"
    assert "ledger #1" in cal["gemm_efficiency"]["source"]
    assert cal["step_time_breakdown_s"]["host_s"]["basis"] != "measured"
    assert cal["tokens_per_s_per_gpu"]["value"] == pytest.approx(
        plain["tokens_per_s_per_gpu"]["value"] / 2, rel=0.01)


def test_plan_is_calibrated_and_the_document_says_efficiency_measured(tmp_path):
    plan = tmp_path / "grid.yaml"
    plan.write_text((EXAMPLES / "qwen2-0.5b-experiments.yaml").read_text())
    doc = tmp_path / "COMPUTE_BUDGET.md"
    before = evaluate(load_plan(plan))
    update_living_document(before, doc, plan.name, date(2026, 1, 1))
    with Ledger.open(_ledger_measuring(tmp_path, slowdown=1.5), create=False) as book:
        after = evaluate(load_plan(plan), ledger=book)
    grid_before = before.phases[0]
    grid_after = after.phases[0]
    assert grid_after.basis.startswith("measured: ") and "ledger #1" in grid_after.basis
    assert grid_after.gpu_hours_per_run > grid_before.gpu_hours_per_run * 1.2
    up = update_living_document(after, doc, plan.name, date(2026, 2, 1))
    assert up.version == "1.1.0"
    assert "experiments" in up.changes[0] and "efficiency measured" in up.changes[0]


def test_plan_against_actual_from_tracked_runs(tmp_path):
    """A tracked run of the h100 example's phase: spent hours, projection, overrun, and a new
    version of the document that says so."""
    from gpuhours.track.runs import StepRecord, add_steps, finish_run, start_run

    plan = tmp_path / "h100.yaml"
    plan.write_text((EXAMPLES / "h100-phase1a.yaml").read_text())
    doc = tmp_path / "COMPUTE_BUDGET.md"
    budgeted = evaluate(load_plan(plan)).phases[0].gpu_hours_per_run
    update_living_document(evaluate(load_plan(plan)), doc, plan.name, date(2026, 1, 1))
    path = tmp_path / "ledger.sqlite"
    planned = 225_000
    # 1,000 steps measured at a rate that projects to twice the budget
    step_s = 2 * budgeted * 3600 / planned
    with Ledger.open(path) as book:
        run = start_run(book, project="Phase 1A on one H100", phase="phase1a", name="try-1",
                        device_kind="cuda", device_name="NVIDIA H100 80GB HBM3",
                        planned_steps=planned, config={"num_gpus": 1})
        add_steps(book, run, [StepRecord(step=i, started_s=i * step_s, wall_s=step_s)
                              for i in range(1000)])
        finish_run(book, run, "running", {})
        b = evaluate(load_plan(plan), ledger=book)
    actual = b.phases[0].actual
    assert actual is not None
    assert actual.gpu_hours_spent == pytest.approx(1000 * step_s / 3600)
    assert actual.projected_gpu_hours == pytest.approx(2 * budgeted, rel=1e-6)
    assert actual.overrun_gpu_hours == pytest.approx(budgeted, rel=1e-6)
    up = update_living_document(b, doc, plan.name, date(2026, 1, 2))
    assert up.version == "1.1.0"
    assert "GPU h spent in tracked runs" in up.changes[0]
    assert "Actual:" in doc.read_text() and "overrun" in doc.read_text()


def test_a_smoke_run_of_another_setup_is_not_projected_by_the_plan(tmp_path):
    from gpuhours.report.budget_terminal import actual_text
    from gpuhours.track.runs import StepRecord, add_steps, start_run

    plan = tmp_path / "h100.yaml"
    plan.write_text((EXAMPLES / "h100-phase1a.yaml").read_text())
    with Ledger.open(tmp_path / "ledger.sqlite") as book:
        run = start_run(book, project="Phase 1A on one H100", phase="phase1a", name="smoke",
                        device_kind="cpu", device_name="AMD EPYC", planned_steps=100,
                        config={"num_gpus": 1, "model_config": {
                            "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 512}})
        add_steps(book, run, [StepRecord(step=i, started_s=i, wall_s=1.0) for i in range(10)])
        b = evaluate(load_plan(plan), ledger=book)
    actual = b.phases[0].actual
    assert actual is not None
    assert actual.runs == 0 and actual.projected_gpu_hours is None
    assert actual.other_setup_runs == 1
    text = actual_text(b.phases[0])
    assert "1 tracked run(s) of another setup not counted" in text
    assert "ran on cpu (planned h100-sxm)" in text
