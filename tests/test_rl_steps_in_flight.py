"""A stream that runs several steps' rollouts at once (rollout_steps_in_flight: NeMo-RL's
max_trajectory_age_steps with in-flight weight updates), rollout engines wider than a node, and
context parallelism's padding of each sequence, in the rl phase."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import InputError
from rl_plan import grpo_plan, run_rl_phase

BASE: dict[str, Any] = grpo_plan("rl-in-flight-test")
STREAM: dict[str, Any] = dict(placement="dedicated", rollout_gpus=4, async_rollout=True,
                              partial_rollout=True)


def test_steps_in_flight_fill_the_engines_with_several_steps_shares(tmp_path: Path):
    # 32 prompts x 8 = 256 sequences over 4 one-GPU engines: 64 a step each. With 4 steps in
    # flight the engines run up to 256 each (the phase's max_num_seqs and the KV cache allow):
    # the same work at a larger batch, so the stream produces a step's sequences sooner
    one = run_rl_phase(tmp_path, BASE, **STREAM).details
    four = run_rl_phase(tmp_path, BASE, **STREAM, rollout_steps_in_flight=4).details
    assert one["generation_batch_per_gpu"] == 64
    assert four["generation_batch_per_gpu"] == 256
    assert four["rollout_generation_s"] < one["rollout_generation_s"]
    # a batch of 64 is the same step's share, so the rollouts' time per sequence at 256 is
    # what the stream takes for the step's 64: each engine's 64 / 256 of a 256-batch
    for part in ("policy_update_s", "weight_sync_s", "old_policy_log_probs_s"):
        assert four[part] == pytest.approx(one[part])


def test_steps_in_flight_need_a_stream(tmp_path: Path):
    with pytest.raises(InputError, match="partial_rollout") as caught:
        run_rl_phase(tmp_path, BASE, placement="dedicated", rollout_gpus=4, async_rollout=True,
                     rollout_steps_in_flight=8)
    assert "rollout_steps_in_flight" in str(caught.value)


def test_a_bad_steps_in_flight_exits_2_from_a_plan_file(tmp_path: Path):
    plan = {**BASE, "phases": [{**BASE["phases"][0], "rollout_steps_in_flight": 0}]}
    f = tmp_path / "plan.yaml"
    f.write_text(yaml.safe_dump(plan, sort_keys=False))
    result = CliRunner().invoke(app, ["plan", str(f)])
    assert result.exit_code == 2
    assert "rollout_steps_in_flight" in result.output and "Traceback" not in result.output


def test_a_rollout_engine_may_span_nodes(tmp_path: Path):
    # 16 GPUs, one colocated engine of TP 16 (Llama-3.1-8B's 32 heads split 16 ways): on two
    # nodes of 8 its all-reduces cross the network (NCCL, 25 GB/s a GPU); in one 16-GPU NVLink
    # domain they stay on NVLink. Everything else alike, the rollouts take longer across nodes
    def rollouts(per_node: int) -> float:
        base = {**BASE, "hardware": {"gpu": "h100-sxm", "gpus_per_node": per_node,
                                     "nodes": 16 // per_node},
                "defaults": {"model": "llama-3.1-8b", "method": "lora", "checkpointing": True}}
        d = run_rl_phase(tmp_path, base, rollout_tensor_parallel=16).details
        assert d["rollout_tensor_parallel"] == 16
        return float(d["rollout_generation_s"])

    assert rollouts(8) > rollouts(16)


def test_context_parallelism_pads_the_mean_sequence_to_its_chunks(tmp_path: Path):
    # a 512 + 1,023-token sequence over CP 2: Megatron-Core cuts it into 2 x 2 chunks, so it is
    # padded to 1,536 (a multiple of 4); before, the odd mean was refused outright
    base = {**BASE, "hardware": {"gpu": "h100-sxm", "gpus_per_node": 8, "nodes": 1},
            "defaults": {"model": "qwen2.5-7b", "method": "lora", "checkpointing": True}}
    def update(response: int) -> float:
        return float(run_rl_phase(tmp_path, base, response_tokens=response, cp=2
                                  ).details["policy_update_s"])

    # 1,535 and 1,536 tokens are both costed as 1,536; 1,537 as 1,540
    assert update(1023) == pytest.approx(update(1024))
    assert update(1025) > update(1024)


def test_the_context_check_takes_the_lengths_given_not_the_padded(tmp_path: Path):
    # Llama-2-7B's 4,096 positions: 1,000 + 3,096 tokens fit exactly; padded to a multiple of
    # 2 x cp 3 (4,098) for the cost only, never refused for it
    base = {**BASE, "hardware": {"gpu": "h100-sxm", "gpus_per_node": 6, "nodes": 1},
            "defaults": {"model": "llama-2-7b", "method": "lora", "checkpointing": True}}
    r = run_rl_phase(tmp_path, base, prompt_tokens=1000, response_tokens=2000,
                     max_response_tokens=3096, cp=3)
    assert r.details["policy_update_s"] > 0
    with pytest.raises(InputError, match="exceed llama-2-7b's 4,096-token context"):
        run_rl_phase(tmp_path, base, prompt_tokens=1000, response_tokens=2000,
                     max_response_tokens=3097, cp=3)


def test_async_scheduling_shortens_the_rollouts_and_is_vllms(tmp_path: Path):
    # the engine's 2.3 ms host step a decode step beside the GPU's instead of after it
    serial = run_rl_phase(tmp_path, BASE).details
    phase = run_rl_phase(tmp_path, BASE, rollout_async_scheduling=True)
    overlapped = phase.details
    assert overlapped["rollout_generation_s"] < serial["rollout_generation_s"]
    assert "async scheduling: the engine's host step beside the GPU's work" in phase.basis
    assert overlapped["policy_update_s"] == pytest.approx(serial["policy_update_s"])
    with pytest.raises(InputError) as caught:
        run_rl_phase(tmp_path, BASE, rollout_async_scheduling=True, engine="sglang")
    assert "rollout_async_scheduling" in str(caught.value)


def test_dynamic_sampling_repeats_the_generation_not_the_update(tmp_path: Path):
    # DAPO's dynamic sampling at 2.5 generation rounds a step on average: the rollouts take
    # 2.5 times as long, the scoring passes and the update take the kept batch once
    once = run_rl_phase(tmp_path, BASE).details
    again = run_rl_phase(tmp_path, BASE, generation_rounds_per_step=2.5).details
    assert again["rollout_generation_s"] == pytest.approx(2.5 * once["rollout_generation_s"])
    assert again["policy_update_s"] == pytest.approx(once["policy_update_s"])
    assert again["generation_rounds_per_step"] == 2.5
    with pytest.raises(InputError) as caught:
        run_rl_phase(tmp_path, BASE, generation_rounds_per_step=0.5)
    assert "generation_rounds_per_step" in str(caught.value) and "line" in str(caught.value)
