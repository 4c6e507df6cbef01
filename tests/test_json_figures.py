"""Every physical quantity in each command's --json is a figure, {value, unit, basis, source}
(README: "every figure is {value, unit, basis, source}"). A reviewer found bare numbers in
`plan --json` (phases[].gpu_hours_per_run, details.step_time_s, mfu, memory_per_gpu_bytes,
total_gpu_hours, electricity_kwh), `fit --json` (requested.memory_total_bytes,
tokens_per_s_per_gpu) and generation's assumptions without a source.

The walk visits every leaf. The numbers allowed bare are counts and ids, the setup as given
(`setup`: inputs and the model's shape), price rows (`costs[]`, `cost_usd[]`,
`downtime_cost_usd[]`: each row names its provider, instance and the price's date) and track
records (`track_record`: a validation table's summary, naming the table and its date)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_args

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.estimate.figures import BasisKind

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

#: keys whose numbers are counts or ids, not quantities with a unit
COUNTS = frozenset({
    "num_gpus", "seeds", "gpus", "line", "micro_batch", "grad_accum", "zero_stage", "tp", "pp",
    "cp", "ep", "virtual_stages", "data_parallel", "candidates_evaluated",
    "largest_micro_batch", "grad_accum_for_effective_batch", "effective_batch",
    "micro_batch_for_effective_batch", "ledger_id", "runs", "steps_done", "steps_planned",
    "steps_timed", "priority", "schedule_gpus", "reduced_priority", "other_setup_runs",
    # doctor: steps the run recorded and the steps planned
    "steps_recorded", "planned_steps",
    # catalog models: a model's shape
    "hidden_size", "num_layers", "num_heads", "num_kv_heads", "vocab_size", "experts_per_token",
    "num_experts",
    # a phase's details that count things (plan/results.py DETAIL_COUNTS)
    "experiments", "generation_batch_per_gpu", "rollout_gpus", "train_gpus",
    "rollout_tensor_parallel", "update_micro_batch", "grpo_calibration_ledger_id",
    "rollout_waves", "rollout_admissions", "rollout_preemptions", "rollout_peak_running_sequences",
    # compare's offers: their rank, and the instances billed (catalog/billing.py)
    "rank", "instances", "billed_gpus", "gpus_per_instance", "offers_total"})
#: keys under which numbers are inputs as given, settings, or price rows (a catalog price with
#: its source and date beside it)
NOT_FIGURES = frozenset({"setup", "costs", "cost_usd", "downtime_cost_usd", "amount",
                         "stale_after_days", "usd_per_gpu_hour",
                         # a catalog model's released weight format, its source beside it
                         "released_weights",
                         # a validation table's summary (counts and dimensionless ratios of
                         # published to predicted), its table and date beside it
                         # (estimate/track_record.py)
                         "track_record"})
KINDS = set(get_args(BasisKind))


def bare_numbers(x: Any, path: str = "") -> list[str]:
    """The paths of numeric leaves that are neither in a figure nor allowed bare."""
    out: list[str] = []
    if isinstance(x, dict):
        if {"value", "unit", "basis", "source"} <= set(x):
            assert x["basis"] in KINDS, (path, x["basis"])
            assert isinstance(x["source"], str) and x["source"], path
            assert isinstance(x["unit"], str) and x["unit"], path
            return out
        for key, v in x.items():
            if key in NOT_FIGURES or (key in COUNTS and not isinstance(v, dict | list)):
                continue
            out += bare_numbers(v, f"{path}.{key}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            out += bare_numbers(v, f"{path}[{i}]")
    elif isinstance(x, int | float) and not isinstance(x, bool):
        out.append(path)
    return out


def _json(*args: str, code: int = 0) -> Any:
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == code, r.output
    return json.loads(r.stdout)


def test_the_walk_finds_a_bare_number() -> None:
    """The checker itself: a bare quantity is found, a figure, a count and a setup are not."""
    data = {"a_s": 1.5, "b": {"value": 1, "unit": "s", "basis": "formula", "source": "x"},
            "gpus": 8, "setup": {"seq_len": 2048}, "deep": [{"mfu": 0.4}]}
    assert bare_numbers(data) == [".a_s", ".deep[0].mfu"]


@pytest.mark.parametrize("args", [
    ["estimate", "--model", "qwen2.5-7b", "--gpu", "h100", "--gpus", "8", "--zero", "3",
     "--tokens", "1e9"],
    ["fit", "--model", "qwen2.5-7b", "--gpu", "a100-40gb", "--method", "lora",
     "--checkpointing", "--effective-batch", "32"],
    ["generation", "--model", "qwen2.5-7b", "--gpu", "h100", "--sequences", "1e4"],
    ["plan", str(EXAMPLES / "h100-phase1a.yaml"), "--no-doc"],
    ["plan", str(EXAMPLES / "pixelis.yaml"), "--no-doc"],
    ["plan", str(EXAMPLES / "qwen2-0.5b-experiments.yaml"), "--no-doc"],
    ["compare", "--model", "qwen2.5-7b", "--method", "lora", "--batch", "4", "--seq", "2048",
     "--checkpointing", "--tokens", "1e9"],
], ids=["estimate", "fit", "generation", "plan-h100", "plan-pixelis-rl", "plan-grid",
        "compare"])
def test_every_quantity_is_a_figure(args: list[str]) -> None:
    assert bare_numbers(_json(*args)) == []


def test_generation_that_does_not_fit_is_figures_too() -> None:
    data = _json("generation", "--model", "llama-3-70b", "--gpu", "h100", "--tensor-parallel", "1",
                 code=1)  # one GPU given: the weights alone do not fit
    assert bare_numbers(data) == []


def test_the_reviewers_plan_fields_are_figures_with_the_estimates_basis() -> None:
    """The fields the reviewer named, each with a unit and the source of the number: the
    phase's step time and MFU are the estimate's own figures (its roofline and efficiency)."""
    b = _json("plan", str(EXAMPLES / "h100-phase1a.yaml"), "--no-doc")
    phase = b["phases"][0]
    d = phase["details"]
    assert d["step_time_s"]["unit"] == "s" and "roofline" in d["step_time_s"]["source"]
    assert d["mfu"]["unit"].startswith("fraction")
    assert d["memory_per_gpu_bytes"]["unit"] == "bytes"
    assert phase["gpu_hours_per_run"]["unit"] == "GPU hours"
    # GPU hours of the phase = steps x step time x GPUs / 3600, in the figures' own values
    assert phase["gpu_hours_per_run"]["value"] == pytest.approx(
        d["optimizer_steps"]["value"] * d["step_time_s"]["value"] * phase["gpus"] / 3600,
        rel=1e-3)
    assert b["total_gpu_hours"]["value"] == pytest.approx(phase["gpu_hours_per_run"]["value"])
    # electricity = GPU hours x 700 W (the H100 SXM's TDP in the catalog) / 1000
    assert b["electricity_kwh"] == {**b["electricity_kwh"], "unit": "kWh", "basis": "formula"}
    assert b["electricity_kwh"]["value"] == pytest.approx(
        b["total_gpu_hours"]["value"] * 700 / 1000)


def test_fit_figures_hold_their_numbers() -> None:
    r = _json("fit", "--model", "qwen2.5-7b", "--gpu", "a100-40gb", code=1)
    req = r["requested"]
    assert req["memory_total_bytes"]["unit"] == "bytes"
    assert req["fits"] == (req["memory_total_bytes"]["value"]
                           <= req["memory_limit_bytes"]["value"])
    # the default headroom is an assumption; a given one is input
    assert r["headroom_fraction"]["basis"] == "assumed"
    given = _json("fit", "--model", "qwen2.5-7b", "--gpu", "a100-40gb", "--headroom", "0.2",
                  code=1)
    assert given["headroom_fraction"] == {**given["headroom_fraction"], "value": 0.2,
                                          "basis": "input"}


def test_doctor_json_is_figures(tmp_path: Path) -> None:
    """doctor --json (walk p9, minor: step_time_mean_s, usd_per_gpu_hour and the options'
    hours were bare): a finished trainer_state.json of 100 steps in 1000 s, priced as given."""
    state = tmp_path / "trainer_state.json"
    history: list[dict[str, Any]] = [{"loss": 2.0, "learning_rate": 1e-5, "step": s}
                                     for s in range(10, 101, 10)]
    history.append({"step": 100, "train_runtime": 1000.0, "train_loss": 2.0,
                    "train_samples_per_second": 0.8, "train_steps_per_second": 0.1})
    state.write_text(json.dumps({"global_step": 100, "max_steps": 100, "train_batch_size": 8,
                                 "logging_steps": 10, "log_history": history}))
    d = _json("doctor", "--hf-log", str(state), "--model", "qwen2.5-0.5b", "--seq", "512",
              "--gpu", "h100", "--usd-per-gpu-hour", "2")
    assert bare_numbers(d) == []
    assert d["options"], "the options table is walked too"
    # by hand: 1000 s / 100 steps; the price as given
    assert d["step_time_mean_s"] == {**d["step_time_mean_s"], "value": 10.0, "unit": "s"}
    assert d["usd_per_gpu_hour"] == {**d["usd_per_gpu_hour"], "value": 2.0, "basis": "input"}


def test_catalog_models_json_is_figures() -> None:
    """catalog models --json (walk p9, minor): the parameter counts as figures, the table's
    columns (heads, KV heads, MoE) in the JSON too."""
    rows = {r["name"]: r for r in _json("catalog", "models")}
    assert bare_numbers(list(rows.values())) == []
    mixtral = next(r for r in rows.values() if r["num_experts"])
    assert mixtral["computed_params"]["basis"] == "formula"
    assert rows["qwen2.5-7b"]["published_params"]["basis"] == "catalog"
    assert (rows["qwen2.5-7b"]["num_heads"], rows["qwen2.5-7b"]["num_kv_heads"]) == (28, 4)
