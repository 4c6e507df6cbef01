"""PPO's trained roles on GPUs of their own (plan/rl_train.py; OpenRLHF Ray's actor and critic
groups, the critic trained beside the actor): hand-worked overlap, the plan fields, bad values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import InputError
from gpuhours.plan.budget import evaluate
from gpuhours.plan.load import load_plan
from gpuhours.plan.rl_train import critic_added_s, optimizer_steps, shared_host_adam_s
from rl_plan import run_rl_phase

BASE: dict[str, Any] = {
    "project": "rl-roles-test",
    "hardware": {"gpu": "a800-80gb", "gpus_per_node": 8, "nodes": 1},
    "defaults": {"model": "qwen2.5-0.5b", "method": "full", "checkpointing": True,
                 "zero_stage": 2, "micro_batch": 4, "grad_accum": 4},
    "phases": [{"name": "ppo", "kind": "rl", "steps": 10, "prompts_per_step": 256,
                "generations_per_prompt": 1, "prompt_tokens": 512, "response_tokens": 512,
                "critic": True, "placement": "dedicated", "rollout_gpus": 2,
                "reward": {"kind": "rule"}}],
}


def run(tmp_path: Path, **phase: Any) -> Any:
    return run_rl_phase(tmp_path, BASE, **phase)


def test_critic_added_by_hand():
    # beside the actor's 100 s update: an 80 s critic adds nothing, a 130 s one its last 30 s
    assert critic_added_s(100.0, 80.0, True) == 0.0
    assert critic_added_s(100.0, 130.0, True) == pytest.approx(30.0)
    # after the actor's, on the same GPUs: all of it
    assert critic_added_s(100.0, 80.0, False) == pytest.approx(80.0)


def test_an_actor_on_fewer_gpus_updates_slower(tmp_path):
    """The same 256 sequences on 2 GPUs instead of 4: each GPU trains twice the tokens, so the
    update takes about twice as long (the optimizer step's share differs: within 15%)."""
    two = run(tmp_path, actor_gpus=2).details
    four = run(tmp_path, actor_gpus=4).details
    assert two["policy_update_s"] / four["policy_update_s"] == pytest.approx(2.0, rel=0.15)


def test_packed_updates_split_over_the_actors_own_gpus(tmp_path):
    """Without a micro_batch the update packs each data-parallel rank's share: the ranks are
    the actor's GPUs, so 2 of them train twice the sequences each that 4 do."""
    plan = {**BASE, "defaults": {k: v for k, v in BASE["defaults"].items()
                                 if k not in ("micro_batch", "grad_accum")},
            "phases": [{**BASE["phases"][0]}]}
    times = {}
    for gpus in (2, 4):
        plan["phases"][0]["actor_gpus"] = gpus
        f = tmp_path / f"plan{gpus}.yaml"
        f.write_text(yaml.safe_dump(plan, sort_keys=False))
        times[gpus] = evaluate(load_plan(f)).phases[0].details["policy_update_s"]
    assert times[2] / times[4] == pytest.approx(2.0, rel=0.15)


def test_a_critic_on_its_own_gpus_trains_beside_the_actor(tmp_path):
    """The critic the policy's size on as many GPUs as the actor: its update lasts as long as
    the actor's and runs at the same time, so only its values pass is added to the step; on
    half the GPUs it takes about twice as long, and what outlasts the actor's is added."""
    result = run(tmp_path, actor_gpus=2, critic_gpus=2)
    assert "policy's update on 2 GPUs and the critic's on 2" in result.formula
    same = result.details
    assert same["critic_update_s"] == pytest.approx(same["policy_update_s"])
    assert same["critic_s"] == pytest.approx(same["critic_value_pass_s"])
    half = run(tmp_path, actor_gpus=2, critic_gpus=1).details
    beyond = half["critic_s"] - half["critic_value_pass_s"]
    assert beyond == pytest.approx(half["critic_update_s"] - half["policy_update_s"])
    assert beyond / half["policy_update_s"] == pytest.approx(1.0, rel=0.15)
    # without GPUs of its own the critic trains after the actor: its whole update is added
    after = run(tmp_path, actor_gpus=2).details
    assert after["critic_s"] - after["critic_value_pass_s"] == pytest.approx(
        after["policy_update_s"])
    assert after["step_time_s"] > same["step_time_s"]


@pytest.mark.parametrize(("phase", "pattern"), [
    (dict(actor_gpus=2, placement="colocated", rollout_gpus=None), "placement: dedicated"),
    (dict(critic_gpus=2), "needs `critic: true` and `actor_gpus`"),
    (dict(actor_gpus=2, critic_gpus=2, critic=False), "needs `critic: true`"),
    (dict(actor_gpus=4, critic_gpus=4), "exceed the 6 training GPUs"),
])
def test_bad_role_gpus_name_the_field(tmp_path, phase, pattern):
    with pytest.raises(InputError, match=pattern) as caught:
        run(tmp_path, **phase)
    assert "plan.yaml" in str(caught.value)


def test_bad_role_gpus_exit_2_from_a_plan_file(tmp_path):
    plan = {**BASE, "phases": [{**BASE["phases"][0], "actor_gpus": 4, "critic_gpus": 4}]}
    f = tmp_path / "plan.yaml"
    f.write_text(yaml.safe_dump(plan, sort_keys=False))
    result = CliRunner().invoke(app, ["plan", str(f)])
    assert result.exit_code == 2
    assert "critic_gpus" in result.output and "Traceback" not in result.output


def test_shared_host_adam_by_hand():
    # a 7B critic's CPU Adam beside the actor's on one host: 7e9 parameters at the node's
    # 1.8e9 a second (estimate/offload.py, DeepSpeed issue #6834)
    assert shared_host_adam_s(7e9) == pytest.approx(7 / 1.8)
    # 1,024 sequences, micro-batch 8 x accumulation 8 x 2 GPUs = 128 a step: 8 steps, 16 over
    # two epochs; a remainder is a step of its own
    assert optimizer_steps(1024, 8, 8, 2, 1) == 8
    assert optimizer_steps(1024, 8, 8, 2, 2) == 16
    assert optimizer_steps(1000, 8, 8, 2, 1) == 8
    assert optimizer_steps(1100, 8, 8, 2, 1) == 9


def test_offloaded_roles_on_one_host_share_its_adam(tmp_path):
    """With --adam_offload both roles' CPU Adam stream one host's memory at once: each of the
    actor's 8 optimizer steps (256 sequences / (4 x 4 x 2)) waits for the critic's state too,
    Qwen2.5-0.5B's 494M parameters (its model card: 0.49B) / 1.8e9 a second = 0.274 s."""
    BASE["defaults"]["offload"] = "optimizer"
    try:
        beside = run(tmp_path, actor_gpus=2, critic_gpus=2).details
        after = run(tmp_path, actor_gpus=2).details
    finally:
        del BASE["defaults"]["offload"]
    added = beside["policy_update_s"] - after["policy_update_s"]
    assert added == pytest.approx(8 * 494e6 / 1.8e9, rel=0.02)
    # the same on the critic's side: the pair still lasts as long as either
    assert beside["critic_update_s"] == pytest.approx(beside["policy_update_s"])


def test_a_critic_at_its_own_zero_stage_trains_as_that_setup_does(tmp_path):
    """DeepSpeed-Chat's benchmark scripts train the actor at ZeRO-2 and the critic at ZeRO-3
    (--critic_zero_stage 3), with --offload its weights on the host too: `critic_training`
    gives the critic its own settings. Its update is the estimator's for that setup over the
    step's 256 sequences of 1,024 tokens on the 6 training GPUs, at the policy's micro-batches;
    the policy's update does not move."""
    from gpuhours.estimate.estimator import estimate_training
    from gpuhours.setup import Hardware, Training

    own = {"zero_stage": 3, "zero3_engine": "deepspeed", "offload": "optimizer+params"}
    plain = run(tmp_path).details
    apart = run(tmp_path, critic_training=own).details
    assert apart["policy_update_s"] == pytest.approx(plain["policy_update_s"])
    t = Training.model_validate({**BASE["defaults"], **own, "seq_len": 1024})
    e = estimate_training(t, Hardware(gpu="a800-80gb", num_gpus=6))
    assert apart["critic_update_s"] == pytest.approx(256 * 1024 / e.tokens_per_s.value)
    # the weights fetched from the host and the CPU Adam make it slower than the policy's
    assert apart["critic_update_s"] > plain["critic_update_s"]


def test_critic_training_needs_a_critic(tmp_path):
    plan = {**BASE, "phases": [{**BASE["phases"][0], "critic": False,
                                "critic_training": {"zero_stage": 3}}]}
    f = tmp_path / "plan.yaml"
    f.write_text(yaml.safe_dump(plan, sort_keys=False))
    result = CliRunner().invoke(app, ["plan", str(f)])
    assert result.exit_code == 2
    assert "critic_training" in result.output and "Traceback" not in result.output
