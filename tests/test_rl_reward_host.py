"""A rule reward's host time in an RL step (issue 13; plan/rl_reward_host.py): the function
against hand-worked numbers, the plan fields' errors, and a plan with and without a verifier."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.plan.rl_reward_host import largest_chunk, per_response_s, reward_host


def test_per_response_seconds_follow_the_measured_table() -> None:
    # between 2,000 (3.00 ms) and 4,000 tokens (3.57 ms): halfway at 3,000
    assert per_response_s("math-verify", 3_000) == pytest.approx(3.285e-3)
    # below the first length its figure; beyond the last, the last segment's slope:
    # 5.92 + (5.92 - 3.57) x 2,000 / 4,000 = 7.095 ms at 10,000 tokens
    assert per_response_s("math-verify", 100) == pytest.approx(1.78e-3)
    assert per_response_s("math-verify", 10_000) == pytest.approx(7.095e-3)
    # the string match reads the last 300 characters: no trend with length
    assert per_response_s("string-match", 500) == per_response_s("string-match", 16_000)
    assert per_response_s("none", 4_000) == 0.0
    with pytest.raises(ValueError):
        per_response_s("regex", 1_000)


def test_chunks_as_nemo_rl_cuts_them() -> None:
    # chunk_list_to_workers([1, 2, 3, 4, 5], 3) == [[1, 2], [3, 4], [5]] (its docstring)
    assert largest_chunk(5, 3) == 2
    assert largest_chunk(2_048, 8) == 256
    assert largest_chunk(2_049, 8) == 257
    assert largest_chunk(3, 8) == 1
    assert largest_chunk(0, 8) == 0


def test_batch_after_the_rollout_waits_for_the_largest_chunk() -> None:
    # 2,048 responses of 1,000 tokens over 8 workers: 256 x 1.85 ms = 0.4736 s on the step,
    # 2,048 x 1.85 ms = 3.7888 CPU-seconds in all
    r = reward_host("math-verify", 8, False, 2_048, 1_000, rollout_s=60.0)
    assert r.critical_s == pytest.approx(0.4736)
    assert r.total_s == pytest.approx(3.7888)
    # one worker: the whole batch serial
    assert reward_host("math-verify", 1, False, 2_048, 1_000, 60.0).critical_s == \
        pytest.approx(3.7888)


def test_per_response_scoring_hides_behind_the_rollout_but_its_last_response() -> None:
    # 512 responses of 2,000 tokens at 3.00 ms, one at a time: 1.536 s in all
    long = reward_host("math-verify", 1, True, 512, 2_000, rollout_s=50.0)
    assert long.critical_s == pytest.approx(3.00e-3)  # the last response's score
    short = reward_host("math-verify", 1, True, 512, 2_000, rollout_s=1.0)
    assert short.critical_s == pytest.approx(0.536)  # what outlasts a 1 s rollout


def test_unset_verifier_costs_nothing_and_says_so() -> None:
    r = reward_host(None, 1, False, 2_048, 1_000, 60.0)
    assert (r.critical_s, r.total_s) == (0.0, 0.0)
    assert "not costed" in r.text and "reward.verifier unset" in r.text


def _plan(tmp_path: Path, reward: dict, name: str = "plan.yaml", **phase) -> Path:
    f = tmp_path / name
    f.write_text(yaml.safe_dump({
        "project": "rw", "hardware": {"gpu": "h100-sxm", "gpus_per_node": 8, "nodes": 1},
        "phases": [{"name": "grpo", "kind": "rl", "model": "qwen2.5-7b", "method": "lora",
                    "checkpointing": True, "steps": 10, "prompts_per_step": 64,
                    "generations_per_prompt": 8, "prompt_tokens": 256, "response_tokens": 1000,
                    "max_response_tokens": 2000, "reward": reward, **phase}]},
        sort_keys=False))
    return f


def _details(path: Path) -> dict:
    r = CliRunner().invoke(app, ["plan", str(path), "--json"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    return json.loads(r.output)["phases"][0]["details"]


def test_a_plan_with_and_without_the_verifier(tmp_path: Path) -> None:
    without = _details(_plan(tmp_path, {"kind": "rule"}, "a.yaml"))
    assert without["reward_host_s"]["value"] == 0.0
    assert "reward.verifier unset" in without["reward_host_basis"]
    with_ = _details(_plan(tmp_path, {"kind": "rule", "verifier": "math-verify", "workers": 8},
                           "b.yaml"))
    # 512 responses of 1,000 tokens over 8 workers: 64 x 1.85 ms = 0.1184 s, colocated: on
    # the step as it is
    assert with_["reward_host_s"]["value"] == pytest.approx(0.1184)
    assert with_["reward_host_s"]["basis"] == "assumed"
    assert "bench_reward_host.py" in with_["reward_host_s"]["source"]
    assert with_["reward_host_total_s"]["value"] == pytest.approx(512 * 1.85e-3)
    assert (with_["step_time_s"]["value"] - without["step_time_s"]["value"]
            == pytest.approx(0.1184))
    # dedicated one-step-off rollouts: the reward on the rollout side, hidden when training
    # takes longer
    ded = {"placement": "dedicated", "rollout_gpus": 4, "async_rollout": True}
    a = _details(_plan(tmp_path, {"kind": "rule"}, "c.yaml", **ded))
    b = _details(_plan(tmp_path, {"kind": "rule", "verifier": "math-verify",
                                  "per_response": True}, "d.yaml", **ded))
    rollout, train = a["rollout_generation_s"]["value"], sum(
        a[k]["value"] for k in ("old_policy_log_probs_s", "reference_model_s",
                                "policy_update_s", "host_offload_s"))
    assert b["reward_host_s"]["value"] == pytest.approx(max(1.85e-3, 512 * 1.85e-3 - rollout))
    assert b["step_time_s"]["value"] == pytest.approx(
        max(rollout + b["reward_host_s"]["value"], train) + a["weight_sync_s"]["value"])


def test_each_generation_round_scores_its_batch(tmp_path: Path) -> None:
    # DAPO's dynamic sampling, 2 rounds a step: 2 x 64 x 1.85 ms = 0.2368 s
    d = _details(_plan(tmp_path, {"kind": "rule", "verifier": "math-verify", "workers": 8},
                       generation_rounds_per_step=2.0))
    assert d["reward_host_s"]["value"] == pytest.approx(0.2368)
    assert d["reward_host_total_s"]["value"] == pytest.approx(2 * 512 * 1.85e-3)


def test_a_reward_model_has_no_rule_on_the_host(tmp_path: Path) -> None:
    d = _details(_plan(tmp_path, {"kind": "model", "model": "qwen2.5-0.5b"}))
    assert d["reward_host_s"]["value"] == 0.0 and d["reward_model_s"]["value"] > 0
    assert "reward model" in d["reward_host_basis"]


@pytest.mark.parametrize(("reward", "field", "key", "says"), [
    ({"kind": "rule", "verifier": "math-verify", "workers": 0}, "reward.workers", "workers:",
     "greater than or equal to 1"),
    ({"kind": "rule", "verifier": "regex"}, "reward.verifier", "verifier:", "'math-verify'"),
    # a rule across the reward's fields: the line its mapping starts on (its first key)
    ({"kind": "rule", "verifier": "math-verify", "workers": 8, "per_response": True},
     "reward", "kind:", "per_response scores one response a call"),
    ({"kind": "model", "model": "qwen2.5-0.5b", "verifier": "math-verify"}, "reward", "kind:",
     "of kind `model`"),
    ({"kind": "rule", "workers": 4}, "reward", "kind:", "give verifier"),
])
def test_bad_reward_fields_are_named_with_their_line(tmp_path: Path, reward: dict, field: str,
                                                     key: str, says: str) -> None:
    f = _plan(tmp_path, reward)
    lines = f.read_text().splitlines()
    start = next(i for i, x in enumerate(lines) if x.strip() == "reward:")
    line = next(i for i, x in enumerate(lines) if i > start and x.strip().startswith(key)) + 1
    r = CliRunner().invoke(app, ["plan", str(f)], env={"COLUMNS": "300"})
    assert r.exit_code == 2, r.output
    text = " ".join(r.output.split())
    assert f"plan.yaml, line {line}, phases[0] (grpo).{field}:" in text, text
    assert says in text
    assert "Traceback" not in r.output
