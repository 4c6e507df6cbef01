"""Expected downtime of a long run (estimate/goodput.py): hand-worked numbers, the Llama 3
rate it rests on, and the option that sets or turns off the rate (CLI and plan)."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate import goodput as G

runner = CliRunner()


def test_the_rate_is_the_llama_3_papers():
    # 419 unexpected interruptions in 54 days on 16,384 GPUs (Llama 3 paper sec. 3.3.4)
    assert G.INTERRUPTIONS_PER_GPU_HOUR.value == pytest.approx(1.97328e-5, rel=1e-5)  # 419 / 21,233,664
    # the whole 16K-GPU job: one interruption every 54 x 24 / 419 = 3.093 hours
    assert G.job_mtbf_s(G.INTERRUPTIONS_PER_GPU_HOUR.value, 16384) / 3600 == pytest.approx(
        3.0931, rel=1e-4)
    # Tectonic's 2 TB/s over 16,384 GPUs: 0.12207 GB/s per GPU
    assert G.STORAGE_WRITE_GB_PER_S_PER_GPU.value == pytest.approx(0.12207, rel=1e-4)


def test_a_hand_worked_run():
    # 100 hours of steps on 1,000 GPUs at 1e-4 interruptions per GPU-hour: M = 36,000 s;
    # 50 TB of checkpoint at 1 GB/s per GPU: C = 50 s; Young: tau = sqrt(2 x 50 x 36,000)
    # = 1,897.37 s; restarts of 600 s; lost share (600 + 948.68) / 36,000 = 0.043019;
    # work 360,000 x (1 + 50 / 1,897.37) = 369,486.8 s; wall 369,486.8 / 0.956981 = 386,096.3 s
    d = G.expected_downtime(360_000.0, 1000, 50e12, 1e-4, step_time_s=10.0, restart_s=600.0,
                            storage_gb_per_s_per_gpu=1.0)
    assert d.mtbf_s == pytest.approx(36_000.0)
    assert d.checkpoint_write_s == pytest.approx(50.0)
    assert d.checkpoint_interval_s == pytest.approx(1897.37, rel=1e-5)
    assert d.wall_s == pytest.approx(386_096.3, rel=1e-6)
    assert d.interruptions == pytest.approx(10.7249, rel=1e-4)
    assert d.restarts_s == pytest.approx(6434.94, rel=1e-5)
    assert d.lost_work_s == pytest.approx(10_174.53, rel=1e-5)
    assert d.checkpoint_writes_s == pytest.approx(9486.83, rel=1e-5)
    assert d.goodput == pytest.approx(0.93241, rel=1e-4)


def test_nothing_fails_nothing_is_lost_and_a_step_bounds_the_interval():
    d = G.expected_downtime(1000.0, 8, 1e9, 0.0, step_time_s=1.0)
    assert (d.downtime_s, d.goodput, d.interruptions) == (0.0, 1.0, 0.0)
    assert math.isinf(d.mtbf_s)
    # a checkpoint is written between optimizer steps: never more often than one a step
    d = G.expected_downtime(1000.0, 8, 1.0, 1e-3, step_time_s=30.0)
    assert d.checkpoint_interval_s == 30.0


def test_a_rate_no_run_survives_is_refused_with_the_option():
    with pytest.raises(FieldError, match="never finishes"):
        G.expected_downtime(3600.0, 2048, 1e12, 0.5, step_time_s=1.0)


_ARGS = ["estimate", "--model", "llama-2-7b", "--gpu", "a100-80gb", "--gpus", "1024",
         "--seq", "4096", "--tokens", "2e12", "--json"]


def _estimate(*extra: str) -> dict:
    result = runner.invoke(app, [*_ARGS, *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _totals(*extra: str) -> dict:
    return _estimate(*extra)["totals"]


def test_the_estimate_prints_downtime_and_the_option_sets_or_drops_it():
    whole = _estimate()
    plain = whole["totals"]
    down = plain["downtime_gpu_hours"]
    # the figure names the rate; its source is in the assumptions list (a short basis keeps a
    # wide table whole)
    assert down["basis"] == "assumed" and "1.97e-05/GPU-h)" in down["source"]
    assert any("419 unexpected interruptions" in str(a) for a in whole["assumptions"])
    # on 1,024 GPUs the job is interrupted every 3600 / (1.97e-5 x 1024) = 49.5 h: a few
    # percent of a run of thousands of hours
    assert 0.002 < down["value"] / plain["gpu_hours"]["value"] < 0.05
    assert plain["gpu_hours_with_downtime"]["value"] == pytest.approx(
        plain["gpu_hours"]["value"] + down["value"])
    # the total holds an assumed figure, so it is assumed too; the wall clock gets the job's
    # share (downtime GPU hours / 1,024 GPUs)
    assert plain["gpu_hours_with_downtime"]["basis"] == "assumed"
    assert plain["wall_clock_hours_with_downtime"]["value"] == pytest.approx(
        plain["wall_clock_hours"]["value"] + down["value"] / 1024)
    # cost_usd prices the steps; downtime_cost_usd the downtime, at the same rows
    steps_cost = {r["instance"]: r for r in plain["cost_usd"]}
    assert plain["downtime_cost_usd"] and len(plain["downtime_cost_usd"]) == len(steps_cost)
    for r in plain["downtime_cost_usd"]:
        price = steps_cost[r["instance"]]["on_demand_usd_per_gpu_hour"]
        assert r["on_demand_usd"] == pytest.approx(down["value"] * price)
        assert steps_cost[r["instance"]]["on_demand_usd"] == pytest.approx(
            plain["gpu_hours"]["value"] * price)
    off = _totals("--interruptions-per-gpu-hour", "0")
    assert off["downtime_gpu_hours"]["value"] == 0.0
    assert off["gpu_hours"]["value"] == plain["gpu_hours"]["value"]
    assert off["downtime_cost_usd"] == [] and off["gpu_hours_with_downtime"]["basis"] == "formula"
    more = _totals("--interruptions-per-gpu-hour", "1e-4")
    assert more["downtime_gpu_hours"]["value"] > 3 * down["value"]
    assert "(0.0001/GPU-h, given)" in more["downtime_gpu_hours"]["source"]
    bad = runner.invoke(app, [*_ARGS, "--interruptions-per-gpu-hour", "0.5"])
    assert bad.exit_code == 2 and "--interruptions-per-gpu-hour" in bad.output
    assert "Traceback" not in bad.output


PLAN = """project: downtime
hardware:
  gpu: a100-80gb
  nodes: 16{extra}
seeds: 1
phases:
  - name: pretrain
    kind: pretrain
    runs: once
    model: llama-2-7b
    tokens: 2.0e+11
    seq_len: 4096
    micro_batch: 1
    zero_stage: 1
"""


def test_a_plan_gives_the_rate(tmp_path):
    from gpuhours.plan.budget import evaluate
    from gpuhours.plan.load import load_plan

    def phase(extra: str):
        path = tmp_path / "plan.yaml"
        path.write_text(PLAN.format(extra=extra))
        [result] = evaluate(load_plan(path)).phases
        return result

    plain = phase("")
    assert plain.details["downtime_gpu_hours"] > 0
    off = phase("\n  interruptions_per_gpu_hour: 0")
    assert off.details["downtime_gpu_hours"] == 0.0
    assert not any(w.startswith("expected downtime") for w in off.warnings)
    # at 1e-3 per GPU-hour 128 GPUs are interrupted every 7.8 hours: several percent, said
    often = phase("\n  interruptions_per_gpu_hour: 0.001")
    assert often.details["downtime_gpu_hours"] > 0.01 * often.gpu_hours_per_run_base
    assert any(w.startswith("expected downtime") and "not in the phase's GPU hours" in w
               for w in often.warnings)


def test_the_cost_table_says_it_prices_the_steps_and_what_downtime_adds():
    args = [a for a in _ARGS if a != "--json"]
    out = runner.invoke(app, args, env={"COLUMNS": "200", "NO_COLOR": "1"}).stdout
    plain = _totals()
    assert f"the {plain['gpu_hours']['value']:,.1f} GPU hours of the steps" in out
    assert f"The expected downtime adds {plain['downtime_gpu_hours']['value']:,.1f} GPU h" in out
    assert "wall clock with downtime" in out


def test_the_default_rate_is_named_when_no_run_survives_it():
    # 262,144 GPUs at the default 1.97e-5: interrupted every 3600 / (1.97e-5 x 262,144) s
    # = 11.6 min, less than the 15-minute restart alone
    result = runner.invoke(app, ["estimate", "--model", "llama-2-7b", "--gpu", "a100-80gb",
                                 "--gpus", "262144", "--tokens", "2e12"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    text = " ".join(result.output.split())
    assert "not given, so the default of 1.97e-05 interruptions per GPU-hour" in text
    assert "every 11.6 minutes" in text and "or 0 to leave downtime out" in text


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_rate_that_is_not_a_number_is_refused_as_such(value):
    result = runner.invoke(app, [*_ARGS, "--interruptions-per-gpu-hour", value])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "finite number" in result.output and "less than or equal" not in result.output


def test_a_plans_rate_no_run_survives_names_the_hardware_line(tmp_path):
    from gpuhours.errors import InputError
    from gpuhours.plan.budget import evaluate
    from gpuhours.plan.load import load_plan

    path = tmp_path / "plan.yaml"
    path.write_text(PLAN.format(extra="\n  interruptions_per_gpu_hour: 0.5"))
    with pytest.raises(InputError) as caught:
        evaluate(load_plan(path))
    # line 5 of the plan is the hardware key, not the phase (line 8)
    assert caught.value.where == f"{path}, line 5, hardware.interruptions_per_gpu_hour"
    assert "never finishes" in caught.value.message


def _fit(*extra: str) -> dict:
    result = runner.invoke(app, ["fit", "--model", "llama-2-7b", "--gpu", "a100-80gb",
                                 "--gpus", "64", "--batch", "4", "--checkpointing", "--zero",
                                 "1", "--json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_fit_takes_the_interruption_rate_and_reports_the_goodput_by_hand() -> None:
    # 1e-4 interruptions per GPU-hour on 64 GPUs: M = 3600 / (1e-4 x 64) = 562,500 s. The
    # checkpoint: Llama-2-7B's 6,738,415,616 parameters x (2 bf16 weights + 4 fp32 master + 4 + 4
    # Adam moments) = 94.34 GB, written at 2e12 / 16,384 B/s per GPU by 64 GPUs: C = 12.07 s.
    # Young: tau = sqrt(2 C M) = 3,685 s (longer than any step); restart R = 900 s.
    # goodput = (1 - (R + tau / 2) / M) / (1 + C / tau)
    m = 3600 / (1e-4 * 64)
    c = 6_738_415_616 * 14 / (2e12 / 16384 * 64)
    tau = math.sqrt(2 * c * m)
    by_hand = (1 - (900 + tau / 2) / m) / (1 + c / tau)
    given = _fit("--interruptions-per-gpu-hour", "1e-4")
    assert given["expected_goodput"]["value"] == pytest.approx(by_hand, rel=1e-3)
    assert "(given)" in given["goodput_basis"]
    # the default rate (1.97e-5, Llama 3) loses less; 0 loses nothing
    default = _fit()
    assert by_hand < default["expected_goodput"]["value"] < 1.0
    assert "Llama 3 paper" in default["goodput_basis"]
    assert _fit("--interruptions-per-gpu-hour", "0")["expected_goodput"]["value"] == 1.0
    # a rate at which the job never finishes is the user's error, named by its option
    bad = runner.invoke(app, ["fit", "--model", "llama-2-7b", "--gpu", "a100-80gb", "--gpus",
                              "64", "--interruptions-per-gpu-hour", "0.5"])
    assert bad.exit_code == 2 and "--interruptions-per-gpu-hour" in bad.output
    assert "Traceback" not in bad.output
    text = runner.invoke(app, ["fit", "--model", "llama-2-7b", "--gpu", "a100-80gb", "--gpus",
                               "64", "--checkpointing", "--zero", "1",
                               "--interruptions-per-gpu-hour", "1e-4"])
    assert text.exit_code == 0 and "Expected goodput" in text.output
