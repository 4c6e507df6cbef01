"""NeMo-RL's one-step-off collector with in-flight weight updates (in_flight_weight_updates):
the group-by-group replay (estimate/inflight_rollout.py) and the rl phase's use of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuhours.errors import InputError
from gpuhours.estimate.inflight_rollout import collector_replay
from rl_plan import grpo_plan, run_rl_phase

BASE: dict[str, Any] = grpo_plan("rl-inflight-test")
ONE_OFF: dict[str, Any] = dict(placement="dedicated", rollout_gpus=4, async_rollout=True)


def _one_second(_sequences: float, _context: float) -> float:
    return 1.0


def _free(_sequences: float, _tokens: float) -> float:
    return 0.0


def test_two_groups_of_two_on_two_slots_by_hand():
    # A step is 2 prompt groups, lengths [2, 4] and [3, 1] tokens, on one engine of 2 slots
    # (max_num_seqs 2), a decode step 1 s, prefill free, training 1 s, refit 1 s; the
    # collector holds 2 groups (one step's). Worked by hand from the refit that ends step 0 at
    # t = 7 (the engine at decode step 6, the next step's [2, 4] group running since t = 5
    # with 1 and 3 tokens left, its [3, 1] group queued):
    #   t 7-8   [2, 4]'s 2 ends; the queued 3 takes the slot (1 slot each: 4 and 3 running)
    #   t 8-10  the 4 ends: its group is done, its slot starts the next step's [2, 4] (the
    #           engines hold the version it is for); the queued 1 takes the engine's slot
    #   t 10-11 the 3 and the 1 end: the step's batch is complete (the trainer waited 7-11)
    #   t 11-12 training, the next step's 2 and 4 decoding beside it
    #   t 12-13 the refit: the engine stalls; step 1 ends at 13
    # so a step every 6 s, the trainer waiting 4 s of it, the engine busy 5 s (7-12).
    r = collector_replay(1, [[2, 4], [3, 1]], steps_ahead=1, engines=1, cache_tokens=1000,
                         max_num_seqs=2, decode_s=_one_second, prefill_s=_free, train_s=1.0,
                         sync_s=1.0, steps=4)
    assert r.step_s == pytest.approx(6.0)
    assert r.trainer_wait_s == pytest.approx(4.0)
    assert r.engine_busy_s == pytest.approx(5.0)
    assert r.decode_steps == pytest.approx(5.0)
    assert r.peak_running == 2 and r.preemptions == 0


def test_an_admission_beside_running_requests_adds_what_its_prefill_outlasts():
    # the hand-worked case with a prefill of 1.5 s where a decode step is 1 s: the groups'
    # admissions at t 8 and 10 (beside one running request) add 1.5 - 1 = 0.5 s each, the one
    # into the empty engine after the batch completes its whole 1.5 s, which outlasts the 1 s
    # of training, so the refit waits for it: 6 + 0.5 + 0.5 + 1.5 = 8.5 s a step, 2.5 s of it
    # prefill, the trainer waiting 4 + 0.5 + 0.5 s
    r = collector_replay(1, [[2, 4], [3, 1]], 1, 1, 1000, 2, _one_second,
                         lambda _n, _tokens: 1.5, 1.0, 1.0, steps=8)
    assert r.step_s == pytest.approx(8.5)
    assert r.prefill_s == pytest.approx(2.5)
    assert r.trainer_wait_s == pytest.approx(5.0)


def test_a_slow_trainer_sets_the_step():
    # the same groups beside 5 s of training: the engine's 5 s of decode all run under it, the
    # trainer never waits, and a step is training + refit, 6 s
    r = collector_replay(1, [[2, 4], [3, 1]], 1, 1, 1000, 2, _one_second, _free, 5.0, 1.0,
                         steps=6)
    assert r.step_s == pytest.approx(6.0)
    assert r.trainer_wait_s == pytest.approx(0.0)


@pytest.mark.parametrize(("kwargs", "field"), [
    (dict(steps_ahead=0), "steps_ahead"),
    (dict(engines=0), "engines"),
    (dict(group_lengths=[[2, 0]]), "response length"),
    (dict(cache_tokens=3), "does not fit"),
])
def test_bad_replay_inputs_say_which(kwargs: dict[str, Any], field: str):
    args: dict[str, Any] = dict(prompt_tokens=1, group_lengths=[[2, 4]], steps_ahead=1,
                                engines=1, cache_tokens=100, max_num_seqs=2,
                                decode_s=_one_second, prefill_s=_free, train_s=1.0, sync_s=1.0)
    with pytest.raises(ValueError, match=field):
        collector_replay(**{**args, **kwargs})


def test_the_default_one_step_off_step_is_unchanged(tmp_path: Path):
    # without in_flight_weight_updates (the default) the step is max(rollout side, training
    # side) + refit, from the phase's own parts
    d = run_rl_phase(tmp_path, BASE, **ONE_OFF).details
    assert "rollout_inflight_engine_busy_s" not in d
    rollout_side = d["rollout_generation_s"] + d["reward_host_s"]
    training = sum(d[k] for k in ("rollout_intake_s", "old_policy_log_probs_s",
                                  "reference_model_s", "reward_model_s", "policy_update_s",
                                  "critic_s", "host_offload_s") if k in d)
    assert d["step_time_s"] == pytest.approx(max(rollout_side, training)
                                              + d["weight_sync_s"] + d.get("validation_s", 0))


def test_in_flight_weight_updates_replays_the_collector(tmp_path: Path):
    # responses up to 4,096 tokens (mean 1,024) on 4 rollout GPUs: the batch alone, waiting for
    # its longest, outlasts the training side. Replayed, the next step's groups run under the
    # training and the trainer waits only for the rest: shorter than max(rollout side,
    # training side) + refit, never shorter than training side + refit
    tail = dict(ONE_OFF, max_response_tokens=4096)
    plain = run_rl_phase(tmp_path, BASE, **tail).details
    phase = run_rl_phase(tmp_path, BASE, **tail, in_flight_weight_updates=True)
    d = phase.details
    for part in ("rollout_generation_s", "policy_update_s", "weight_sync_s"):
        assert d[part] == pytest.approx(plain[part])
    training = sum(d[k] for k in ("old_policy_log_probs_s", "reference_model_s",
                                  "policy_update_s") if k in d)
    assert d["rollout_generation_s"] > training
    assert training + d["weight_sync_s"] < d["step_time_s"] < plain["step_time_s"]
    assert d["rollout_inflight_trainer_wait_s"] > 0
    assert "NeMo-RL's collector with in-flight weight updates replayed" in phase.formula


def test_a_training_led_step_is_training_and_refit_either_way(tmp_path: Path):
    # 4 rollout GPUs at the plan's 1,024-token responses: the training side outlasts the
    # rollouts, the trainer never waits, and the replay's step is the formula's
    plain = run_rl_phase(tmp_path, BASE, **ONE_OFF).details
    d = run_rl_phase(tmp_path, BASE, **ONE_OFF, in_flight_weight_updates=True).details
    assert d["rollout_inflight_trainer_wait_s"] == pytest.approx(0.0)
    assert d["step_time_s"] == pytest.approx(plain["step_time_s"])


@pytest.mark.parametrize(("phase", "text"), [
    (dict(in_flight_weight_updates=True), "async_rollout"),
    (dict(ONE_OFF, partial_rollout=True, in_flight_weight_updates=True), "partial_rollout"),
    (dict(ONE_OFF, in_flight_weight_updates=True, engine="sglang"), "vllm"),
])
def test_in_flight_weight_updates_refused_where_it_means_nothing(tmp_path: Path,
                                                                 phase: dict[str, Any],
                                                                 text: str):
    with pytest.raises(InputError) as caught:
        run_rl_phase(tmp_path, BASE, **phase)
    assert "in_flight_weight_updates" in str(caught.value) and text in str(caught.value)
