"""Local updates per weight sync (plan/rl_async.py; verl fully_async_policy's
trigger_parameter_sync_step with staleness 0): hand-worked steps, the plan field, bad values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import InputError
from gpuhours.plan.rl_async import hidden_training_s, overlapped_bottleneck, pipelined_step_s
from rl_plan import grpo_plan, run_rl_phase

BASE: dict[str, Any] = grpo_plan("rl-async-test")

def run(tmp_path: Path, **phase: Any) -> Any:
    return run_rl_phase(tmp_path, BASE, **phase)


DEDICATED: dict[str, Any] = dict(placement="dedicated", rollout_gpus=2, max_response_tokens=4096,
                                 mini_batches=4)


def test_pipelined_step_by_hand():
    # engines slower than the trainer: 100 s of rollouts, 80 s of training in 4 local updates;
    # the first three (60 s) start after 25 s and end at 85 s, inside the rollouts; the last
    # (20 s) after them: 100 + 20 + a 2 s sync
    assert pipelined_step_s(100.0, 80.0, 2.0, 4) == pytest.approx(122.0)
    assert hidden_training_s(100.0, 80.0, 2.0, 4) == pytest.approx(60.0)
    # one update per sync is the synchronous sum
    assert pipelined_step_s(100.0, 80.0, 2.0, 1) == pytest.approx(182.0)
    assert hidden_training_s(100.0, 80.0, 2.0, 1) == pytest.approx(0.0)
    # a trainer slower than the engines waits for the first batch only: 40 / 4 = 10 s, then
    # trains 200 s in all: 10 + 150 + 50 + 2
    assert pipelined_step_s(40.0, 200.0, 2.0, 4) == pytest.approx(212.0)
    # two updates: max(100, 50 + 40) + 40 + 2
    assert pipelined_step_s(100.0, 80.0, 2.0, 2) == pytest.approx(142.0)
    with pytest.raises(ValueError, match="at least 1"):
        pipelined_step_s(1.0, 1.0, 0.0, 0)


def test_a_plan_with_local_updates_overlaps_them_with_the_rollouts(tmp_path):
    """The phase's step from its own parts: the sum with one update a sync, the pipeline's
    formula with four; every part the same in both."""
    one = run(tmp_path, **DEDICATED).details
    four_result = run(tmp_path, **DEDICATED, updates_per_sync=4)
    four = four_result.details
    train = (four["old_policy_log_probs_s"] + four["reference_model_s"]
             + four["policy_update_s"])
    roll, sync = four["rollout_generation_s"], four["weight_sync_s"]
    assert one["step_time_s"] == pytest.approx(roll + train + sync)
    assert four["step_time_s"] == pytest.approx(
        max(roll, roll / 4 + 3 / 4 * train) + train / 4 + sync)
    assert four["step_time_s"] < one["step_time_s"]
    for part in ("rollout_generation_s", "policy_update_s", "reference_model_s"):
        assert four[part] == pytest.approx(one[part])
    assert "4 local updates a sync" in four_result.formula
    # one-step-off already overlaps the whole update with the next rollouts: no change
    asy = dict(DEDICATED, async_rollout=True)
    assert run(tmp_path, **asy, updates_per_sync=4).details["step_time_s"] == pytest.approx(
        run(tmp_path, **asy).details["step_time_s"])


@pytest.mark.parametrize(("phase", "pattern"), [
    (dict(updates_per_sync=2), "placement: dedicated"),
    (dict(DEDICATED, updates_per_sync=3), "must divide"),
    (dict(DEDICATED, updates_per_sync=0), "greater than or equal to 1"),
])
def test_bad_updates_per_sync_names_the_field(tmp_path, phase, pattern):
    with pytest.raises(InputError, match=pattern) as caught:
        run(tmp_path, **phase)
    assert "plan.yaml" in str(caught.value)
    assert "updates_per_sync" in str(caught.value) or "updates_per_sync" in caught.value.fields


def test_bad_updates_per_sync_exits_2_from_a_plan_file(tmp_path):
    plan = {**BASE, "phases": [{**BASE["phases"][0], "updates_per_sync": 2}]}
    f = tmp_path / "plan.yaml"
    f.write_text(yaml.safe_dump(plan, sort_keys=False))
    result = CliRunner().invoke(app, ["plan", str(f)])
    assert result.exit_code == 2
    assert "updates_per_sync" in result.output and "Traceback" not in result.output


def test_the_plan_file_field_reaches_the_step(tmp_path: Path):
    plan = {**BASE, "phases": [{**BASE["phases"][0], **DEDICATED, "updates_per_sync": 4}]}
    f = tmp_path / "plan.yaml"
    f.write_text(yaml.safe_dump(plan, sort_keys=False))
    result = CliRunner().invoke(app, ["plan", str(f), "--json"])
    assert result.exit_code == 0, result.output
    assert "4 local updates a sync" in result.output


def test_the_side_that_sets_an_overlapped_step_names_its_bound():
    """max(rollout, training side): 103 s of rollouts against 19 + 19 + 95 = 133 s of training
    leave the update the bound, though the rollouts are the longest single part; 140 s of
    rollouts set the step themselves; a tie goes to the rollouts (the trainer waits)."""
    train = {"old-policy log-probs": 19.0, "reference model": 19.0, "policy update": 95.0}
    assert overlapped_bottleneck(103.0, train) == "policy update"
    assert overlapped_bottleneck(140.0, train) == "rollout generation"
    assert overlapped_bottleneck(133.0, train) == "rollout generation"
    assert overlapped_bottleneck(50.0, {"reference model": 30.0, "critic": 40.0}) == "critic"
    # a serial part (the weight sync) longer than the overlapped max names the step; shorter
    # ones do not
    assert overlapped_bottleneck(103.0, train, {"weight sync": 140.0}) == "weight sync"
    assert overlapped_bottleneck(103.0, train, {"weight sync": 9.0}) == "policy update"
    with pytest.raises(ValueError, match="at least one part"):
        overlapped_bottleneck(1.0, {})
