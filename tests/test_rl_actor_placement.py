"""Rollouts on the actor's own GPUs while the other roles wait (`placement: actor`; OpenRLHF
Ray without vLLM, each actor rank generating with HF generate, issue 13): hand counts of the
waves, the idle GPU-seconds and the sum that makes the step, the plan fields, bad values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import InputError
from rl_plan import run_rl_phase, write_rl_plan

# 256 prompts x 1 response of 512 + 512 tokens, PPO with a critic, HF generate handed 16
# sequences a call (OpenRLHF's micro_rollout_batch_size), on 8 A800s
BASE: dict[str, Any] = {
    "project": "rl-actor-placement-test",
    "hardware": {"gpu": "a800-80gb", "gpus_per_node": 8, "nodes": 1},
    "defaults": {"model": "qwen2.5-0.5b", "method": "full", "checkpointing": True,
                 "zero_stage": 2, "micro_batch": 4, "grad_accum": 4},
    "phases": [{"name": "ppo", "kind": "rl", "steps": 10, "prompts_per_step": 256,
                "generations_per_prompt": 1, "prompt_tokens": 512, "response_tokens": 512,
                "max_response_tokens": 512, "critic": True, "engine": "hf-generate",
                "rollout_batch": 16, "placement": "actor", "actor_gpus": 4,
                "critic_gpus": 2, "reward": {"kind": "model", "model": "qwen2.5-0.5b"}}],
}


def run(tmp_path: Path, **phase: Any) -> Any:
    return run_rl_phase(tmp_path, BASE, **phase)


def test_rollouts_run_in_waves_on_the_actors_gpus(tmp_path):
    """256 sequences over the actor's 4 GPUs: 64 each, in calls of 16: 4 waves. Colocated on all
    8 GPUs they are 32 each: 2 waves of the same 16, so half the time; colocated on a phase of 4
    GPUs, the same 4 waves as the actor's."""
    actor = run(tmp_path, placement="actor").details
    assert (actor["rollout_gpus"], actor["generation_batch_per_gpu"],
            actor["rollout_waves"]) == (4, 16, 4)
    everywhere = run(tmp_path, placement="colocated", actor_gpus=None, critic_gpus=None).details
    assert everywhere["rollout_waves"] == 2
    assert actor["rollout_generation_s"] == pytest.approx(2 * everywhere["rollout_generation_s"])
    on_four = run(tmp_path, placement="colocated", actor_gpus=None, critic_gpus=None,
                  gpus=4).details
    assert actor["rollout_generation_s"] == pytest.approx(on_four["rollout_generation_s"])


def test_the_other_roles_wait_and_the_step_is_the_sum(tmp_path):
    """The reference, reward and critic GPUs (8 - 4) wait for the whole rollout: idle GPU-s =
    4 x the rollout time; nothing overlaps, so the step is the sum of its parts (the critic part
    holds only what its update outlasts the actor's, plan/rl_train.py)."""
    result = run(tmp_path)
    d = result.details
    assert d["idle_gpu_s"] == pytest.approx(4 * d["rollout_generation_s"])
    parts = ("rollout_generation_s", "old_policy_log_probs_s", "reference_model_s",
             "reward_model_s", "policy_update_s", "critic_s", "weight_sync_s")
    assert d["step_time_s"] == pytest.approx(sum(d[k] for k in parts))
    assert "the rollouts on the actor's 4 GPUs while the other 4 wait" in result.formula
    share = d["idle_gpu_s"] / (8 * d["step_time_s"])
    assert any("4 of the phase's 8 GPUs wait" in w and f"({share:.0%} of" in w
               for w in result.warnings)


def test_updates_on_the_actors_gpus_scoring_over_every_gpu(tmp_path):
    """The actor's update runs on its 4 GPUs whatever the placement: the same as beside 2
    dedicated engine GPUs. The scoring forwards spread over every GPU of the phase holding a
    role: 8 here, 6 beside the engines, so each pass's GPU work takes 6/8 of the time (the
    host's operators at 1e-6 us: with them the micro-batches a GPU issues round up apart)."""
    gpu_only = {**BASE, "hardware": {**BASE["hardware"], "host_us_per_op": 1e-6}}
    actor = run_rl_phase(tmp_path, gpu_only).details
    beside = run_rl_phase(tmp_path, gpu_only, placement="dedicated", rollout_gpus=2).details
    assert actor["policy_update_s"] == pytest.approx(beside["policy_update_s"])
    assert actor["critic_update_s"] == pytest.approx(beside["critic_update_s"])
    assert actor["reference_model_s"] == pytest.approx(beside["reference_model_s"] * 6 / 8)
    assert actor["train_gpus"] == 8 and beside["train_gpus"] == 6
    # no idle figure where no GPU waits for the actor's rollouts
    assert "idle_gpu_s" not in beside


def test_hf_generate_from_zero3_shards_is_flagged(tmp_path):
    """HF generate on the actor's ZeRO-3 shards gathers every layer each token, which the
    rollouts do not cost: a warning says so (OpenRLHF refuses ZeRO-3 without vLLM)."""
    BASE["defaults"]["zero_stage"] = 3
    try:
        flagged = run(tmp_path).warnings
    finally:
        BASE["defaults"]["zero_stage"] = 2
    assert any("ZeRO-3" in w and "not cost" in w for w in flagged)
    assert not any("ZeRO-3" in w for w in run(tmp_path).warnings)


@pytest.mark.parametrize(("phase", "pattern"), [
    (dict(actor_gpus=None, critic_gpus=None), "placement: actor .* needs `actor_gpus`"),
    (dict(rollout_gpus=2), "`rollout_gpus` needs `placement: dedicated`"),
    (dict(actor_gpus=3, rollout_tensor_parallel=2), "multiple of rollout_tensor_parallel"),
    (dict(actor_gpus=12, critic_gpus=None), "exceed the 8 training GPUs"),
    (dict(async_rollout=True), "needs `placement: dedicated`"),
    (dict(updates_per_sync=2, mini_batches=2), "needs `placement: dedicated`"),
    (dict(placement="actors"), "colocated.*dedicated.*actor"),
])
def test_bad_actor_placement_names_the_field(tmp_path, phase, pattern):
    with pytest.raises(InputError, match=pattern) as caught:
        run(tmp_path, **phase)
    assert "plan.yaml" in str(caught.value)


def test_bad_actor_placement_exits_2_without_a_traceback(tmp_path):
    f = write_rl_plan(tmp_path, BASE, actor_gpus=None, critic_gpus=None)
    result = CliRunner().invoke(app, ["plan", str(f)])
    assert result.exit_code == 2
    assert "actor_gpus" in result.output and "Traceback" not in result.output


def test_idle_gpu_seconds_in_the_json(tmp_path):
    f = write_rl_plan(tmp_path, BASE)
    result = CliRunner().invoke(app, ["plan", str(f), "--json"])
    assert result.exit_code == 0, result.output
    text = result.output
    details = json.loads(text[text.index("{"):])["phases"][0]["details"]
    idle, rollout = details["idle_gpu_s"], details["rollout_generation_s"]
    assert (idle["unit"], idle["basis"]) == ("s", "formula")
    assert idle["value"] == pytest.approx(4 * rollout["value"])
