"""Plans: the examples, the budget formula, grids, the user's assertions, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.plan.budget import evaluate
from gpuhours.plan.grid import makespan_hours
from gpuhours.plan.load import load_plan, parse_plan

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
runner = CliRunner()


def budget(name: str):
    return evaluate(load_plan(EXAMPLES / name))


def phase(b, name: str):
    return next(r for r in b.phases if r.name == name)


# --- pixelis (seeds 000 and 001) -----------------------------------------------------------

def test_pixelis_budget_formula_by_hand():
    b = budget("pixelis.yaml")
    # stated phases keep their numbers: SVD 4 + 4 GPU h and development 200 (on an RTX 4090)
    # once; online 12 h x 2 GPUs x 1.25
    # (system overhead) and 24 h x 2 x 1.20 (monitoring); ablations 25 and profiling 20 once
    assert phase(b, "svd-qwen2.5-7b").gpu_hours_per_run == 4
    assert phase(b, "ttrl-domain-adaptation").gpu_hours_per_run == pytest.approx(30.0)
    assert phase(b, "ttrl-continual-learning").gpu_hours_per_run == pytest.approx(57.6)
    assert b.one_time_gpu_hours == pytest.approx(208.0)
    assert b.single_seed_gpu_hours == pytest.approx(
        25 + 20 + phase(b, "sft-qwen3-8b").gpu_hours_per_run)
    per_seed = sum(phase(b, n).gpu_hours_per_run for n in (
        "sft", "rft", "ttrl-domain-adaptation", "ttrl-continual-learning", "evaluation"))
    assert b.per_seed_gpu_hours == pytest.approx(per_seed)
    subtotal = 208.0 + 3 * per_seed + b.single_seed_gpu_hours
    assert b.subtotal_gpu_hours == pytest.approx(subtotal)
    assert b.total_gpu_hours == pytest.approx(subtotal * 1.15)
    assert "x 3 seeds" in b.formula and "15% contingency" in b.formula


def test_pixelis_sft_is_the_estimator_with_the_curriculum_overhead():
    b = budget("pixelis.yaml")
    sft = phase(b, "sft")
    assert sft.overheads == {"curriculum": 0.10}
    assert sft.gpu_hours_per_run == pytest.approx(sft.gpu_hours_per_run_base * 1.10)
    # 10,000 examples x 3 epochs / (1 x 4 x 8 GPUs) = 937.5 -> 938 optimizer steps
    assert sft.details["optimizer_steps"] == 938
    assert sft.basis.startswith("formula: analytic estimate")
    # padding to 4096 with a mean of 1500 tokens: 63% of the compute is padding
    assert any("63% of the computed tokens are padding" in w for w in sft.warnings)


def test_pixelis_rft_is_rollouts_plus_update():
    rft = phase(budget("pixelis.yaml"), "rft")
    d = rft.details
    step = (d["rollout_generation_s"] + d["old_policy_log_probs_s"] + d["reference_model_s"]
            + d["reward_model_s"] + d["policy_update_s"] + d["critic_s"] + d["weight_sync_s"])
    assert d["step_time_s"] == pytest.approx(step)
    # + the GPUs waiting while 10 LoRA checkpoints are written (every 500 of 5,000 steps)
    write_s = d["checkpoint_write_s"]
    assert rft.gpu_hours_per_run_base == pytest.approx((5000 * step + write_s) * 8 / 3600)
    # 32 sequences per step on 8 GPUs: 4 per GPU, so decode is bandwidth-bound and dominates
    assert d["generation_batch_per_gpu"] == 4
    # responses of 1,024 tokens on average, 2,048 at most: each step waits for the longest
    assert rft.bottleneck == "rollout generation (waiting for the longest response)"
    # the 4 run at once (vLLM's paged cache) and decode 4 or fewer at the cost of one
    # (weight-bound): the rollouts last about as long as the longest decoded alone
    assert d["rollout_generation_s"] == pytest.approx(d["rollout_tail_s"], rel=0.05)
    assert d["rollout_generation_s"] >= d["rollout_tail_s"]


def test_pixelis_storage_from_physics():
    b = budget("pixelis.yaml")
    sft, rft = phase(b, "sft"), phase(b, "rft")
    # the SFT dataset: 10,000 examples x 1,500 tokens in a datasets table, 4 + 1 bytes a token
    assert sft.storage["dataset"].value == 10_000 * 1500 * 5
    # rollouts kept: 5,000 steps x 32 sequences x 2,048 tokens x (4 id + 4 log-prob) + 4 reward
    assert rft.storage["rollouts"].value == 5000 * 32 * (2048 * 8 + 4)
    # stated parts stay assumed, and make the total assumed
    assert phase(b, "ttrl-domain-adaptation").storage["other"].basis == "assumed"
    assert b.storage_total is not None and b.storage_total.basis == "assumed"


# --- seed 004: a grid on one RTX 4090 ------------------------------------------------------

def test_grid_totals_schedule_and_the_seeds_throughput_warning():
    b = budget("qwen2-0.5b-experiments.yaml")
    grid = b.grids["experiments"]
    assert len(grid.rows) == 63
    assert sum(r.gpu_hours for r in grid.rows) == pytest.approx(phase(b, "experiments")
                                                                .gpu_hours_per_run)
    assert grid.makespan_hours == pytest.approx(sum(r.gpu_hours for r in grid.rows))  # 1 GPU
    assert grid.days == pytest.approx(grid.makespan_hours / 8)
    essential = [r for r in grid.rows if r.priority == 1]
    assert grid.reduced_gpu_hours == pytest.approx(sum(r.gpu_hours for r in essential))
    warning = " ".join(phase(b, "experiments").warnings)
    # 225 tokens/s x ~2 GFLOP/token / 165 TFLOPS = an MFU of about 0.3%
    assert "225 tokens/s" in warning and "implausibly low" in warning
    assert "MFU of 0.27%" in warning


def test_grid_steps_are_steps_of_the_shared_batch():
    b = budget("qwen2-0.5b-experiments.yaml")
    rows = {r.name: r for r in b.grids["experiments"].rows}
    # the same settings: GPU hours are proportional to steps
    assert rows["openwebtext-50k"].gpu_hours == pytest.approx(5 * rows["openwebtext-10k"]
                                                              .gpu_hours, rel=1e-3)
    assert rows["baseline-01"].gpu_hours == 0.17 and "assumed" in rows["baseline-01"].basis


def test_lpt_schedule_by_hand():
    # longest first on 2 GPUs: 5 | 4, then 3 -> GPU2 (7), 3 -> GPU1 (8), 3 -> GPU2 (10)
    assert makespan_hours([3, 5, 3, 4, 3], [1] * 5, 2) == 10
    # the division the seeds used is only a lower bound: 18 / 2 = 9
    assert makespan_hours([3, 5, 3, 4, 3], [1] * 5, 2) > 18 / 2
    # a 2-GPU job waits for both GPUs: 4 h on GPU1, then the 2-GPU job 4-6, then 1 h: 7
    assert makespan_hours([4, 1, 2], [1, 1, 2], 2) == 7


# --- seed 002: one H100 ---------------------------------------------------------------------

def test_h100_phase1a_steps_and_the_measured_hours():
    b = budget("h100-phase1a.yaml")
    p = phase(b, "phase1a")
    # 600,000 examples x 3 epochs / (4 x 2 x 1 GPU) = 225,000 steps, not the seed's 1.8M
    assert p.details["optimizer_steps"] == 225_000
    assert p.details["tokens"] == 225_000 * 8 * 1024
    assert p.checks and "stated 38.0 hours" in p.checks[0]
    stated_over_physics = 38 / p.wall_hours_per_run
    assert 0.5 <= stated_over_physics <= 2  # within 2x: no disagreement warning
    assert not any("the plan states 38.0 hours" in w for w in p.warnings)
    assert b.costs[0].usd_per_gpu_hour == 2.50
    assert b.costs[0].on_demand_usd == pytest.approx(b.total_gpu_hours * 2.50)


# --- assertions both ways ---------------------------------------------------------------------

PLAN = """
project: t
hardware: {{gpu: a100-80gb, gpus_per_node: 1}}
phases:
  - name: sft
    kind: finetune
    model: llama-2-7b
    method: lora
    examples: 10000
    seq_len: 2048
    micro_batch: 4
    checkpointing: true
    expect: {{{expect}}}
"""


def _phase_from(expect: str):
    loaded = parse_plan(PLAN.format(expect=expect), "t.yaml")
    return evaluate(loaded).phases[0]


def test_an_implausibly_high_throughput_is_called_so():
    p = _phase_from("tokens_per_s: 1000000")
    assert any("implausibly high" in w for w in p.warnings)


def test_a_close_throughput_is_not_a_warning():
    base = _phase_from("tokens_per_s: 1").details["tokens_per_s_per_gpu"]
    p = _phase_from(f"tokens_per_s: {base * 1.5:.0f}")
    assert not p.warnings and p.checks


# --- the CLI and the living document ---------------------------------------------------------

def run(*args: str):
    return runner.invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


def test_plan_json_and_document(tmp_path):
    plan = tmp_path / "pixelis.yaml"
    plan.write_text((EXAMPLES / "pixelis.yaml").read_text())
    result = run("plan", str(plan), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["total_gpu_hours"]["value"] > 0 and data["document"]["version"] == "1.0.0"
    doc = (tmp_path / "COMPUTE_BUDGET.md").read_text()
    for section in ("## Executive summary", "## Hardware", "## Phases", "## Budget", "## Cost",
                    "## Warnings about the plan's assumptions", "## Version history"):
        assert section in doc
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_plan_json_prints_the_verdict_when_a_phase_does_not_fit(tmp_path):
    # README: a setup that does not fit is a verdict (exit 1), printed as JSON all the same
    plan = tmp_path / "big.yaml"
    plan.write_text("project: big\nhardware: {gpu: rtx-4090, gpus_per_node: 1}\nphases:\n"
                    "  - name: sft\n    kind: finetune\n    model: llama-2-70b\n"
                    "    method: full\n    tokens: 1e8\n    micro_batch: 1\n    seq_len: 512\n")
    result = run("plan", str(plan), "--json", "--no-doc")
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["fits"] is False and data["project"] == "big"
    assert "line 4" in data["where"] and "GiB" in data["reason"]


def test_schema_is_printed():
    result = run("plan", "--schema")
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert "phases" in schema["properties"]


def test_plan_terminal_names_the_bottleneck_and_formula(tmp_path):
    result = run("plan", str(EXAMPLES / "pixelis.yaml"), "--no-doc")
    assert result.exit_code == 0, result.output
    assert "rollout generation" in result.stdout
    assert "contingency" in result.stdout and "x 3 seeds" in result.stdout


def test_a_phase_that_does_not_fit_is_an_error(tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text(PLAN.format(expect="hours: 1").replace("method: lora", "method: full")
                   .replace("gpu: a100-80gb", "gpu: rtx-4090"))
    result = run("plan", str(bad), "--no-doc")
    assert result.exit_code == 1  # "does not fit", the same code in every command
    assert f"{bad}, line 5, phase 'sft'" in result.stderr and "GiB" in result.stderr


def test_a_phase_on_its_own_gpu_is_costed_as_that_gpu():
    b = budget("pixelis.yaml")
    dev = phase(b, "development")
    assert dev.gpu == "rtx-4090" and phase(b, "sft").gpu == "a100-40gb"
    # each GPU type's hours, contingency included, add up to the total
    assert b.gpu_hours_by_gpu["rtx-4090"] == pytest.approx(200 * 1.15)
    assert sum(b.gpu_hours_by_gpu.values()) == pytest.approx(b.total_gpu_hours)
    # the A100 prices cost only the A100 hours; the 4090 has no catalog price: said so
    # in whole instances: a phase on g GPUs pays ceil(g / k) instances of k GPUs
    a100 = [c for c in b.costs if c.gpu == "a100-40gb" and c.usd_per_gpu_hour]
    runs = {"once": 1, "per_seed": b.seeds, "single_seed": 1}
    on_a100 = [(r.gpu_hours_per_run * runs[r.runs] * 1.15, r.gpus) for r in b.phases
               if r.gpu == "a100-40gb"]
    assert sum(h for h, _ in on_a100) == pytest.approx(b.gpu_hours_by_gpu["a100-40gb"])
    assert a100 and all(c.on_demand_usd == pytest.approx(c.usd_per_gpu_hour * sum(
        h * -(-g // c.gpus_per_instance) * c.gpus_per_instance / g for h, g in on_a100))
        for c in a100)
    assert all(c.instance.endswith("[a100-40gb]") for c in a100)
    assert any(w.startswith("no catalog price for rtx-4090") for w in b.warnings)
    # electricity at each type's TDP
    assert b.electricity_kwh == pytest.approx(
        b.gpu_hours_by_gpu["a100-40gb"] * 0.400 + b.gpu_hours_by_gpu["rtx-4090"] * 0.450)


def test_an_unknown_phase_gpu_names_the_line_and_field(tmp_path):
    import yaml

    from gpuhours.errors import InputError

    data = yaml.safe_load((EXAMPLES / "pixelis.yaml").read_text())
    data["phases"][0]["gpu"] = "rtx-9999"
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(InputError, match="field 'gpu'") as caught:
        evaluate(load_plan(f))
    assert "p.yaml, line" in str(caught.value)
