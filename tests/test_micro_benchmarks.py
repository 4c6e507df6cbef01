"""The budget document's micro-benchmark section (issue 17): a bench run in the ledger that sets
a phase's figures is listed with what it measured, and its arrival bumps the version."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

from gpuhours import catalog
from gpuhours.estimate.estimator import estimate_training
from gpuhours.plan.budget import evaluate
from gpuhours.plan.load import load_plan
from gpuhours.report.living_doc import update_living_document
from gpuhours.resolve import resolve_model
from gpuhours.setup import Hardware, Training
from gpuhours.track.ledger import Ledger

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

#: the measured step's parts (s) and peak, as `gpuhours bench` stores them
PARTS_S = {"data_s": 0.0021, "forward_s": 0.0412, "backward_s": 0.0803, "optimizer_s": 0.0109}
PEAK_BYTES = 7 * 2**30 + 2**29  # 7.50 GiB


def _ledger(tmp_path: Path) -> tuple[Path, float]:
    """A ledger with one bench run of examples/qwen2-0.5b-experiments.yaml's setup (LoRA r4,
    micro-batch 2 x 2048 on an RTX 4090: GPU-led, so it sets the efficiency), measured at 1.5x
    the analytic step time. Returns (path, measured step seconds)."""
    arch, _ = resolve_model("qwen2-0.5b")
    t = Training(arch=arch, method="lora", lora_rank=4, micro_batch=2, seq_len=2048)
    step_s = estimate_training(t, Hardware(gpu=catalog.gpu("rtx-4090")), "t").step_time_s.value
    step_s *= 1.5
    _, config = catalog.model("qwen2-0.5b")
    path = tmp_path / "ledger.sqlite"
    with Ledger.open(path) as book:
        book.add_measurement(
            kind="bench", status="ok", device_kind="cuda", device_key="rtx-4090",
            device_name="NVIDIA GeForce RTX 4090", model="qwen2-0.5b",
            setup={"method": "lora", "precision": t.precision, "micro_batch": 2, "seq_len": 2048,
                   "grad_accum": 1, "checkpointing": False, "compiled": False,
                   "optimizer": "adamw", "optimizer_impl": "foreach", "lora_rank": 4,
                   "lora_targets": "all-linear", "attention": "sdpa"},
            model_config=config, environment={"hostname": "gpu-box"},
            results={"step_time_median_s": step_s, "step_time_cv": 0.012,
                     "tokens_per_s": 2 * 2048 / step_s, "steps_timed": 40,
                     "phases_median_s": PARTS_S, "peak_memory_bytes": PEAK_BYTES,
                     "peak_memory_basis": "torch.cuda.max_memory_allocated",
                     "mfu": 0.31, "timing": {"n_steps": 40}})
    return path, step_s


def _plan(tmp_path: Path) -> Path:
    text = (EXAMPLES / "qwen2-0.5b-experiments.yaml").read_text()
    plan = tmp_path / "grid.yaml"
    plan.write_text(text.replace("seq_len: 128", "seq_len: 2048").replace("micro_batch: 8",
                                                                  "micro_batch: 2"))
    return plan


def test_without_a_measurement_the_document_says_every_step_time_is_assumed(tmp_path):
    plan = _plan(tmp_path)
    b = evaluate(load_plan(plan))
    assert b.micro_benchmarks == []
    doc = tmp_path / "COMPUTE_BUDGET.md"
    update_living_document(b, doc, plan.name, date(2026, 1, 1))
    section = doc.read_text().split("## Micro-benchmarks")[1].split("\n## ")[0]
    assert "None yet" in section and "gpuhours bench" in section


def test_a_bench_run_is_listed_with_what_it_measured_and_bumps_the_version(tmp_path):
    plan = _plan(tmp_path)
    assert "seq_len: 2048" in plan.read_text()
    doc = tmp_path / "COMPUTE_BUDGET.md"
    update_living_document(evaluate(load_plan(plan)), doc, plan.name, date(2026, 1, 1))
    ledger, step_s = _ledger(tmp_path)
    with Ledger.open(ledger, create=False) as book:
        b = evaluate(load_plan(plan), ledger=book)

    [mb] = b.micro_benchmarks
    assert mb.ledger_id == 1 and mb.device == "NVIDIA GeForce RTX 4090"
    assert mb.step_time_median_s == step_s and mb.steps_timed == 40
    assert mb.step_parts_s == {"data": 0.0021, "forward": 0.0412, "backward": 0.0803,
                               "optimizer": 0.0109}
    # the one grid phase of the example, calibrated by its GPU efficiency (a GPU-led step)
    assert [u.split(":")[0] for u in mb.used_for] == ["experiments"]
    assert "efficiency" in mb.used_for[0]

    up = update_living_document(b, doc, plan.name, date(2026, 2, 1))
    assert up.version == "1.1.0"
    assert any("micro-benchmark ledger #1 (NVIDIA GeForce RTX 4090" in c and
               "experiments" in c for c in up.changes)
    text = doc.read_text()
    section = text.split("## Micro-benchmarks")[1].split("\n## ")[0]
    row = next(line for line in section.splitlines() if line.startswith("| 1 |"))
    # the measured figures, as measured: step ms, parts in ms, 7.50 GiB, MFU
    assert f"{1000 * step_s:,.1f}, CV 1.2% over 40 steps" in row
    assert "data 2.1; forward 41.2; backward 80.3; optimizer 10.9" in row
    assert "7.50 GiB" in row and "31.0%" in row
    assert "torch.cuda.max_memory_allocated" in section
    assert "**v1.1.0** (2026-02-01)" in text

    # the same budget again: nothing new, no bump
    again = update_living_document(b, doc, plan.name, date(2026, 2, 2))
    assert again.version == "1.1.0" and not again.written


def test_the_json_budget_carries_the_micro_benchmarks(tmp_path):
    plan = _plan(tmp_path)
    ledger, _ = _ledger(tmp_path)
    with Ledger.open(ledger, create=False) as book:
        out = json.loads(evaluate(load_plan(plan), ledger=book).model_dump_json())
    assert out["micro_benchmarks"][0]["ledger_id"] == 1
    assert out["micro_benchmarks"][0]["peak_memory_bytes"]["value"] == PEAK_BYTES
    assert out["micro_benchmarks"][0]["peak_memory_bytes"]["basis"] == "measured"


def test_plan_names_the_measurement_it_uses(tmp_path):
    from typer.testing import CliRunner

    from gpuhours.cli import app

    plan = _plan(tmp_path)
    ledger, _ = _ledger(tmp_path)
    result = CliRunner().invoke(app, ["plan", str(plan), "--ledger", str(ledger), "--no-doc"])
    assert result.exit_code == 0, result.output
    assert "measured: ledger #1 (NVIDIA GeForce RTX 4090," in result.output
    assert "sets experiments: the GPU's efficiency" in " ".join(result.output.split())
