"""The RL step of a plan's `rl` phase: the longest response, placement, async overlap, weight
sync and the extra passes, worked from the parts the phase reports; bad input named by field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuhours.errors import InputError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.params import count_params
from gpuhours.plan.budget import evaluate
from gpuhours.plan.load import load_plan
from gpuhours.setup import Training
from rl_plan import grpo_plan, run_rl_phase

BASE: dict[str, Any] = grpo_plan("rl-test")


def run(tmp_path: Path, **phase: Any) -> Any:
    return run_rl_phase(tmp_path, BASE, **phase)


def test_the_longest_response_sets_the_step(tmp_path):
    even = run(tmp_path).details
    tailed = run(tmp_path, max_response_tokens=4096).details
    # the same mean work; the longest response alone needs 4096 decode steps
    assert tailed["rollout_tail_s"] > even["rollout_tail_s"] * 3.5
    # 32 sequences an engine, all admitted at once by vLLM's paged cache (7B on half an A100:
    # room for far more than 32 x 4,608 tokens), none preempted: the step lasts as many decode
    # steps as the longest response
    assert (even["rollout_admissions"], even["rollout_preemptions"]) == (1, 0)
    assert (even["rollout_decode_steps"], tailed["rollout_decode_steps"]) == (1024, 4096)
    # decode of 32 or fewer sequences of a 7B is weight-bound: each step costs about what one
    # sequence's does, so the rollouts last about as long as the longest decoded alone (never
    # less: the others run beside it)
    assert tailed["rollout_tail_s"] < tailed["rollout_generation_s"] < 1.2 * tailed[
        "rollout_tail_s"]
    assert tailed["step_time_s"] > even["step_time_s"]


def test_dedicated_rollout_gpus_wait_for_each_other_unless_async(tmp_path):
    sync = run(tmp_path, placement="dedicated", rollout_gpus=2).details
    assert (sync["rollout_gpus"], sync["train_gpus"]) == (2, 6)
    train_side = (sync["old_policy_log_probs_s"] + sync["reference_model_s"]
                  + sync["policy_update_s"])
    assert sync["step_time_s"] == pytest.approx(
        sync["rollout_generation_s"] + train_side + sync["weight_sync_s"])
    asy = run(tmp_path, placement="dedicated", rollout_gpus=2, async_rollout=True).details
    assert asy["step_time_s"] == pytest.approx(
        max(asy["rollout_generation_s"], train_side) + asy["weight_sync_s"])
    # the engine gets vLLM's default share of its own GPUs
    assert sync["rollout_memory_utilisation"] == A.GENERATION_MEMORY_UTILISATION.value


def test_weight_sync_by_hand(tmp_path):
    d = run(tmp_path, placement="dedicated", rollout_gpus=2).details
    weights = count_params(Training(model="qwen2.5-7b").arch).total * 2.0
    # NVLink on an A100 SXM: 600 GB/s two-way, 300 one way, at collective efficiency
    assert d["weight_sync_s"] == pytest.approx(
        weights / (300e9 * A.COLLECTIVE_EFFICIENCY.value))
    colocated = run(tmp_path).details
    local = 2 * weights / (2039e9 * A.BANDWIDTH_EFFICIENCY.value)
    gather = 7 / 8 * weights / (300e9 * A.COLLECTIVE_EFFICIENCY.value)
    assert colocated["weight_sync_s"] == pytest.approx(local + gather, rel=0.01)


def test_ppo_critic_and_epochs_add_their_passes(tmp_path):
    grpo = run(tmp_path).details
    ppo = run(tmp_path, critic=True, policy_epochs=2, old_logprob_pass=True).details
    assert ppo["policy_update_s"] == pytest.approx(2 * grpo["policy_update_s"])
    # the critic: one scoring pass (as the old-policy pass) and an update like the policy's
    assert ppo["critic_s"] == pytest.approx(ppo["old_policy_log_probs_s"]
                                            + ppo["policy_update_s"])
    no_old = run(tmp_path, old_logprob_pass=False).details
    assert no_old["old_policy_log_probs_s"] == 0.0


def test_rollout_batch_caps_each_call(tmp_path):
    free = run(tmp_path).details
    # 32 x 8 = 256 sequences per step over 8 engines: 32 each; the cache holds them at once
    assert (free["generation_batch_per_gpu"], free["rollout_admissions"]) == (32, 1)
    capped = run(tmp_path, rollout_batch=4).details
    # 4 per generate call: 32 / 4 = 8 calls of 4, each costing at least a weight read per token
    assert (capped["generation_batch_per_gpu"], capped["rollout_admissions"]) == (4, 8)
    assert capped["rollout_generation_s"] > 4 * free["rollout_generation_s"]
    # the rest of the step does not move
    assert capped["policy_update_s"] == pytest.approx(free["policy_update_s"])
    with pytest.raises(InputError, match="rollout_batch") as caught:
        run(tmp_path, rollout_batch=0)
    assert "plan.yaml" in str(caught.value)


def test_fp8_rollouts_read_half_the_weights(tmp_path):
    plan = {**BASE, "hardware": {"gpu": "h100-sxm", "gpus_per_node": 8, "nodes": 2},
            "phases": [{**BASE["phases"][0], "max_response_tokens": 4096}]}

    def phase(**kw: Any) -> Any:
        f = tmp_path / "plan.yaml"
        f.write_text(yaml.safe_dump({**plan, "phases": [{**plan["phases"][0], **kw}]}))
        return evaluate(load_plan(f)).phases[0].details

    bf16, fp8 = phase(), phase(rollout_precision="fp8")
    # the tail is one sequence decoding alone: weight-bound, so fp8's 1-byte weights cut its
    # device time with the bytes (the host step per token stays): about half, the LM head
    # staying 16-bit as vLLM's fp8 leaves it
    from gpuhours.estimate.generation import weight_bytes_read_per_step
    from gpuhours.resolve import resolve_model

    arch, _ = resolve_model(BASE["defaults"]["model"])
    ratio = weight_bytes_read_per_step(arch, 1.0) / weight_bytes_read_per_step(arch, 2.0)
    assert 0.5 < ratio < 0.6
    host = 4096 * A.DECODE_HOST_STEP_S["vllm"].value
    # and W8A8 quantises each linear layer's input with a small kernel of its own (4 a layer,
    # generation.FP8_ACTIVATION_QUANT_KERNELS), a fixed time a step
    from gpuhours.estimate.generation import FP8_ACTIVATION_QUANT_KERNELS

    quant = (4096 * arch.num_layers * FP8_ACTIVATION_QUANT_KERNELS
             * A.SGLANG_MARLIN_MOE_EMPTY_LAUNCH_S.value)
    assert fp8["rollout_tail_s"] - host - quant == pytest.approx(
        (bf16["rollout_tail_s"] - host) * ratio, rel=0.05)
    assert fp8["policy_update_s"] == pytest.approx(bf16["policy_update_s"])
    # an A100 has no fp8 tensor cores: the field is named
    with pytest.raises(InputError, match="fp8") as caught:
        run(tmp_path, rollout_precision="fp8")
    assert "rollout_precision" in str(caught.value)
    # transformers' generate runs the synced policy as trained: no fp8 rollouts there
    with pytest.raises(InputError, match="quantis") as caught:
        phase(engine="hf-generate", rollout_precision="fp8")
    assert "rollout_precision" in str(caught.value)
    # a built TensorRT-LLM 0.5-0.6 engine holds its weights: no rollouts of a changing policy
    with pytest.raises(InputError, match="GptSession") as caught:
        phase(engine="tensorrt-llm")
    assert "'engine'" in str(caught.value)
    # nor a converted LMDeploy 0.1 TurboMind workspace (estimate/lmdeploy.py)
    with pytest.raises(InputError, match="TurboMind") as caught:
        phase(engine="lmdeploy")
    assert "'engine'" in str(caught.value)


@pytest.mark.parametrize(("phase", "field", "pattern"), [
    (dict(max_response_tokens=512), "max_response_tokens", "below the mean"),
    (dict(placement="dedicated"), "rollout_gpus", "rollout_gpus"),
    (dict(async_rollout=True), "async_rollout", "dedicated"),
    (dict(placement="dedicated", rollout_gpus=2, partial_rollout=True), "partial_rollout",
     "async_rollout"),
    (dict(generations_per_prompt=0), "generations_per_prompt", "greater than or equal to 1"),
    (dict(placement="dedicated", rollout_gpus=8), "rollout_gpus", "none of the phase's 8"),
    (dict(max_response_tokens=200_000), "max_response_tokens", "context"),
    (dict(rollout_memory_utilisation=0.1, max_response_tokens=2048), "rollout_memory",
     "no room"),
])
def test_bad_rl_settings_name_the_field(tmp_path, phase, field, pattern):
    with pytest.raises(InputError, match=pattern) as caught:
        run(tmp_path, **phase)
    assert "plan.yaml" in str(caught.value)
    assert field in str(caught.value) or field in caught.value.fields


def test_the_plans_host_cost_per_operator_reaches_the_estimate(tmp_path):
    slow = run(tmp_path).details
    fast_plan = {**BASE, "hardware": {**BASE["hardware"], "host_us_per_op": 8.0}}
    f = tmp_path / "fast.yaml"
    f.write_text(yaml.safe_dump({**fast_plan, "phases": BASE["phases"]}, sort_keys=False))
    fast = evaluate(load_plan(f)).phases[0].details
    assert fast["policy_update_s"] < slow["policy_update_s"]


def test_single_controller_moves_the_padded_batch_through_the_driver(tmp_path):
    """256 sequences padded to 512 + 2,048 tokens: int64 prompts (512), responses and
    response_mask (2 x 2,048), input_ids, attention_mask, position_ids (3 x 2,560) = 98,304
    bytes each; the old-policy pass returns log-probs and entropy (2 x 4 x 2,048 bytes), the
    reference its log-probs (4 x 2,048); the update gets six float32 tensors more (old
    log-probs, scores, rewards, advantages, returns, reference log-probs: 6 x 4 x 2,048)."""
    plain = run(tmp_path, max_response_tokens=2048).details
    driven = run(tmp_path, max_response_tokens=2048, single_controller=True).details
    rate = A.RL_DRIVER_BYTES_PER_S.value
    by_hand = {"rollout_generation_s": 256 * 98_304, "old_policy_log_probs_s": 256 * 114_688,
               "reference_model_s": 256 * 106_496, "policy_update_s": 256 * 147_456}
    for part, moved in by_hand.items():
        assert driven[part] - plain[part] == pytest.approx(moved / rate), part
        assert driven["driver_" + part] == pytest.approx(moved / rate), part
    assert driven["driver_transfer_s"] == pytest.approx(sum(by_hand.values()) / rate)
    assert driven["step_time_s"] - plain["step_time_s"] == pytest.approx(
        sum(by_hand.values()) / rate)
    # the bytes do not shrink with the GPUs: the same transfer on 8 times as many
    wide = {**BASE, "hardware": {"gpu": "a100-80gb", "gpus_per_node": 8, "nodes": 8},
            "phases": [{**BASE["phases"][0], "max_response_tokens": 2048,
                        "single_controller": True}]}
    f = tmp_path / "wide.yaml"
    f.write_text(yaml.safe_dump(wide, sort_keys=False))
    assert evaluate(load_plan(f)).phases[0].details["driver_transfer_s"] == pytest.approx(
        driven["driver_transfer_s"])
    # the batch goes to the update once a step: the epochs loop inside the workers
    epochs = run(tmp_path, max_response_tokens=2048, single_controller=True, policy_epochs=4)
    assert epochs.details["driver_policy_update_s"] == pytest.approx(256 * 147_456 / rate)


def test_streamed_rollouts_do_not_wait_for_the_longest_response(tmp_path):
    """verl fully_async_policy with partial rollouts: 32 x 8 = 256 sequences on 2 engine GPUs,
    128 each. Without a stream the 4,096-token tail sets the rollouts; streamed, they take
    the work at the mean length alone, with a cache sized at prompt + mean response (the same
    as a step whose longest response is the mean)."""
    dedicated = dict(placement="dedicated", rollout_gpus=2, async_rollout=True)
    tailed = run(tmp_path, **dedicated, max_response_tokens=4096).details
    even = run(tmp_path, **dedicated).details
    streamed = run(tmp_path, **dedicated, max_response_tokens=4096, partial_rollout=True).details
    assert tailed["rollout_generation_s"] > even["rollout_generation_s"] * 1.5
    # (the synchronous batch replayed a stretch of steps at a time, the stream's wave summed
    # over 32 segments of its decode: the same to 0.1%)
    assert streamed["rollout_generation_s"] == pytest.approx(even["rollout_generation_s"],
                                                             rel=1e-3)
    assert streamed["generation_batch_per_gpu"] == even["generation_batch_per_gpu"] == 128
    # calls of at most 48: 128 sequences are 3 calls in a synchronous step (48, 48, 32), 2 2/3
    # waves of 48 in a stream
    w_even = run(tmp_path, **dedicated, rollout_batch=48).details
    w_streamed = run(tmp_path, **dedicated, rollout_batch=48, max_response_tokens=4096,
                     partial_rollout=True).details
    assert w_even["rollout_admissions"] == 3
    # neither the calls nor the longest response's tail plays a part in a stream: not reported
    assert "rollout_admissions" not in w_streamed and "rollout_tail_s" not in w_streamed
    # decode of 32 or 48 sequences is mostly weight-bound: the call of 32 costs a little less
    # than one of 48 (the stream: 2 2/3 waves of 48)
    assert w_even["rollout_generation_s"] * (128 / 48) / 3 < w_streamed["rollout_generation_s"]
    assert w_streamed["rollout_generation_s"] == pytest.approx(
        w_even["rollout_generation_s"] * (128 / 48) / 3, rel=0.05)
    # the slower side sets the step, as one-step-off
    train_side = (streamed["old_policy_log_probs_s"] + streamed["reference_model_s"]
                  + streamed["policy_update_s"])
    assert streamed["step_time_s"] == pytest.approx(
        max(streamed["rollout_generation_s"], train_side) + streamed["weight_sync_s"])


def test_streamed_rollouts_reach_the_trainer_through_its_driver(tmp_path):
    """Streamed, the trainer pulls the step's padded rollouts from the message queue itself
    (256 x 98,304 bytes: test_single_controller_moves_the_padded_batch_through_the_driver):
    on the training side, not in the engines' time."""
    kw = dict(placement="dedicated", rollout_gpus=2, async_rollout=True, partial_rollout=True,
              max_response_tokens=2048)
    plain = run(tmp_path, **kw).details
    driven = run(tmp_path, **kw, single_controller=True).details
    rate = A.RL_DRIVER_BYTES_PER_S.value
    assert plain["rollout_intake_s"] == 0.0
    assert driven["rollout_intake_s"] == pytest.approx(256 * 98_304 / rate)
    assert driven["rollout_generation_s"] == pytest.approx(plain["rollout_generation_s"])
    train_side = (driven["rollout_intake_s"] + driven["old_policy_log_probs_s"]
                  + driven["reference_model_s"] + driven["policy_update_s"])
    assert driven["step_time_s"] == pytest.approx(
        max(driven["rollout_generation_s"], train_side) + driven["weight_sync_s"])


def test_offload_between_phases_by_hand(tmp_path):
    """EasyR1's actor.offload: each GPU's shard of the fp32 weights (bf16-amp: 4 bytes a
    parameter, no master copy) goes to the GPU and back around the weight sync, the old-log-prob
    pass and the update, its fp32 moments (8 bytes) around the update: 2 x (3 x 4P/8 + 8P/8) =
    5P bytes per GPU per step for Qwen2.5-7B (P = 7,615,616,512) under ZeRO-3 on 8 A100s, at
    PCIe 4.0's 31.5 GB/s x the copy efficiency 0.8."""
    from gpuhours.estimate.offload import PCIE_COPY_EFFICIENCY

    full = dict(method="full", zero_stage=3, precision="bf16-amp")
    on = run(tmp_path, **full, offload_between_phases=True).details
    off = run(tmp_path, **full).details
    p = 7_615_616_512
    link = 31.5e9 * PCIE_COPY_EFFICIENCY.value
    assert on["host_offload_s"] == pytest.approx(5 * p / link, rel=0.01)
    assert off["host_offload_s"] == 0.0
    assert on["step_time_s"] == pytest.approx(off["step_time_s"] + on["host_offload_s"])
    # no old-log-prob pass: one round trip of the weights fewer (4P); PPO's critic adds its
    # forward and update (2 x (2 x 4P/8 + 8P/8) = 4P)
    lean = run(tmp_path, **full, offload_between_phases=True, old_logprob_pass=False).details
    assert lean["host_offload_s"] == pytest.approx(4 * p / link, rel=0.01)
    ppo = run(tmp_path, **full, offload_between_phases=True, critic=True).details
    assert ppo["host_offload_s"] == pytest.approx(9 * p / link, rel=0.01)


def test_offload_between_phases_without_a_host_link_figure_names_the_field(tmp_path):
    plan = {**BASE, "hardware": {"gpu": "gb200", "gpus_per_node": 4, "nodes": 1},
            "phases": [{**BASE["phases"][0], "offload_between_phases": True}]}
    f = tmp_path / "plan.yaml"
    f.write_text(yaml.safe_dump(plan, sort_keys=False))
    with pytest.raises(InputError, match="host link") as caught:
        evaluate(load_plan(f))
    assert "offload_between_phases" in caught.value.where and "plan.yaml" in caught.value.where


def test_a_colocated_split_that_cannot_hold_the_trainer_names_the_field(tmp_path):
    """Full fine-tuning of Qwen2.5-7B under ZeRO-3 on 8 A100-80GBs: 2 + 4 + 8 bytes a
    parameter (bf16 weights, fp32 master, AdamW moments) x 7,615,616,512 / 8 = 13.3 GB
    (12.4 GiB) resident per GPU, which a 0.5 share leaves room for and a 0.9 share (8 GB
    left) does not."""
    with pytest.raises(InputError, match="leaves") as caught:
        run(tmp_path, method="full", zero_stage=3, rollout_memory_utilisation=0.9)
    assert "rollout_memory_utilisation" in caught.value.where
    assert "line" in caught.value.where
    assert "12.4 GiB" in caught.value.message
    run(tmp_path, method="full", zero_stage=3)  # 0.5: fits
    # offloaded between phases, the state waits on the host during rollouts
    run(tmp_path, method="full", zero_stage=3, rollout_memory_utilisation=0.9,
        offload_between_phases=True)


def test_a_colocated_split_counts_the_critic_and_the_reward_model_too(tmp_path):
    """PPO colocated (verl, OpenRLHF): the critic's and the reward model's weights stay beside
    the policy's while the engine generates. Qwen2.5-7B full under ZeRO-3 on 8 A100-80GBs:
    the policy's 14 bytes a parameter x 7,615,616,512 / 8 = 12.4 GiB, the critic's as much,
    a Qwen2.5-7B reward model's bf16 weights 2 x 7,615,616,512 / 8 = 1.8 GiB: 26.6 GiB, over
    the 0.7 share's 23.9 GiB left (the policy alone, 12.4, would fit). A does-not-fit verdict
    (exit 1), not bad input."""
    from gpuhours.errors import DoesNotFit

    ppo = dict(method="full", zero_stage=3, critic=True, rollout_memory_utilisation=0.7,
               reward={"kind": "model", "model": "qwen2.5-7b"})
    with pytest.raises(DoesNotFit, match="leaves") as caught:
        run(tmp_path, **ppo)
    assert "rollout_memory_utilisation" in caught.value.where
    message = caught.value.message
    assert "needs 26.6 GiB" in message and "critic" in message and "reward model" in message
    run(tmp_path, **{**ppo, "rollout_memory_utilisation": 0.6})  # 31.9 GiB left: fits
    run(tmp_path, **{**ppo, "critic": False})  # 14.2 GiB: fits at 0.7


def test_few_sequences_per_rollout_gpu_warn_that_decode_is_weight_bound(tmp_path):
    # 32 x 8 = 256 sequences on 8 GPUs: 32 each, no warning; 2 prompts x 4 on 8 GPUs: 1 each
    assert not any("weight-bound" in w for w in run(tmp_path).warnings)
    few = run(tmp_path, prompts_per_step=2, generations_per_prompt=4)
    assert any("only 1 sequences per rollout GPU" in w and "weight-bound" in w
               for w in few.warnings)


def test_packed_update_budget_is_per_gpu_of_a_context_parallel_group(tmp_path):
    """With no micro_batch, the update packs 16,384 tokens per GPU (verl's
    ppo_max_token_len_per_gpu); a context-parallel (Ulysses) group of cp GPUs shares a micro-batch
    of cp x that (verl dp_actor.py: x ulysses_sequence_parallel_size), each GPU holding 1/cp of
    every sequence: 512 + 1,024 tokens a sequence, 16,384 // 1,536 = 10 sequences; 4 x 16,384 //
    1,536 = 42 with cp 4."""
    plain = run(tmp_path, method="full", zero_stage=3).details
    assert plain["update_micro_batch"] == 10
    split = run(tmp_path, method="full", zero_stage=3, cp=4).details
    assert split["update_micro_batch"] == 42
    # a micro-batch the plan sets is kept as given
    assert run(tmp_path, method="full", zero_stage=3, cp=4, micro_batch=3
               ).details["update_micro_batch"] == 3
    # the budget a framework's script sets (verl's ppo_max_token_len_per_gpu): 6,144 // 1,536 =
    # 4 sequences a GPU, 8 with cp 2
    assert run(tmp_path, method="full", zero_stage=3, update_tokens_per_gpu=6144
               ).details["update_micro_batch"] == 4
    assert run(tmp_path, method="full", zero_stage=3, cp=2, update_tokens_per_gpu=6144
               ).details["update_micro_batch"] == 8
    # both ways of batching the update at once: an error naming the field and the plan
    with pytest.raises(InputError, match="update_tokens_per_gpu") as caught:
        run(tmp_path, method="full", zero_stage=3, micro_batch=3, update_tokens_per_gpu=6144)
    assert "plan.yaml" in str(caught.value)


def test_packed_micro_batch_never_spans_two_mini_batches(tmp_path):
    """verl splits the step's sequences into mini-batches (one optimizer step each) before it
    packs them by tokens (dp_actor.py update_policy): 32 prompts x 8 = 256 sequences, 8
    mini-batches over 8 data-parallel GPUs = 4 sequences a rank, under the budget's 10; with cp
    4 there are 2 ranks, 16 sequences each, under the budget's 42."""
    assert run(tmp_path, method="full", zero_stage=3, mini_batches=8
               ).details["update_micro_batch"] == 4
    assert run(tmp_path, method="full", zero_stage=3, cp=4, mini_batches=8
               ).details["update_micro_batch"] == 16
    # the mini-batches take whole prompts: 32 prompts do not split into 5
    with pytest.raises(InputError, match="mini_batches"):
        run(tmp_path, method="full", zero_stage=3, mini_batches=5)


def test_a_token_budget_below_the_longest_sequence_is_refused(tmp_path):
    """A micro-batch packed by tokens must hold the longest sequence (verl asserts it): 512 +
    1,024 = 1,536 tokens against a budget of 1,000 (x cp 1) is an error naming the field; with
    cp 2 the group's 2,000 tokens hold it."""
    with pytest.raises(InputError, match="cannot hold the longest sequence") as caught:
        run(tmp_path, method="full", zero_stage=3, update_tokens_per_gpu=1000)
    assert "update_tokens_per_gpu" in caught.value.where and "line" in caught.value.where
    assert run(tmp_path, method="full", zero_stage=3, cp=2, update_tokens_per_gpu=1000
               ).details["update_micro_batch"] == 1


def test_fp8_rollouts_of_an_moe_run_fp8_gemms_not_per_expert_launches(tmp_path):
    """fp8 rollouts are W8A8 (fp8 GEMMs): SGLang's per-expert Marlin launches belong to 8/4-bit
    weights dequantised into bf16 GEMMs and must not be charged. On an H100, Qwen3-30B-A3B's
    fp8 rollouts read half the bf16 weights; with the launches charged (48 MoE layers x 2 GEMMs
    x ~120 empty experts x 2.5 us = 29 ms a decode step) they ran several times slower than
    bf16's instead."""
    plan = {**BASE, "hardware": {"gpu": "h100-sxm", "gpus_per_node": 8, "nodes": 2},
            "defaults": {"model": "qwen3-30b-a3b", "method": "full", "zero_stage": 3,
                         "checkpointing": True}}

    def rollout(precision: str) -> float:
        f = tmp_path / f"plan-{precision}.yaml"
        phase = {**BASE["phases"][0], "engine": "sglang", "rollout_precision": precision,
                 "offload_between_phases": True, "rollout_tensor_parallel": 2,
                 "rollout_memory_utilisation": 0.8}
        f.write_text(yaml.safe_dump({**plan, "phases": [phase]}, sort_keys=False))
        return float(evaluate(load_plan(f)).phases[0].details["rollout_generation_s"])

    assert rollout("fp8") < rollout("bf16")


def test_the_engines_max_num_seqs_caps_the_running_sequences(tmp_path):
    free = run(tmp_path).details
    # 256 sequences over 8 engines, 32 each: under vLLM's default 256 running, all at once
    assert (free["generation_batch_per_gpu"], free["rollout_admissions"]) == (32, 1)
    # an engine that runs at most 8 (verl sets rollout.max_num_seqs, 1024 in its rollout.yaml)
    # is handed the same 32 and decodes them 8 at a time: 4 passes over the weights per token
    # where one did, and decode of 8 or 32 sequences of a 7B on an A100 is weight-bound
    capped = run(tmp_path, rollout_max_num_seqs=8).details
    assert capped["generation_batch_per_gpu"] == 32
    # 8 admitted, the next 8 as they complete (equal lengths: together): 4 admissions
    assert (capped["rollout_peak_running_sequences"], capped["rollout_admissions"]) == (8, 4)
    assert 3.0 < capped["rollout_generation_s"] / free["rollout_generation_s"] < 4.2
    with pytest.raises(InputError, match="rollout_max_num_seqs") as caught:
        run(tmp_path, rollout_max_num_seqs=0)
    assert "plan.yaml" in str(caught.value)


def test_weights_too_big_for_the_share_name_what_would_fit(tmp_path):
    """Walk finding F1. Llama-3-70B in bf16: 70,553,706,496 x 2 bytes = 141.1 GB. In the
    colocated default share, 0.5 x 80 GB = 40 GB a GPU: split 2 ways 70.6 GB, 4 ways 35.3 GB
    (leaving 4.7 GB for KV cache), so tensor parallelism 4 is the smallest that holds it. The
    A100 runs no fp8 matmuls: fp8 weights are not offered. No share of one 80 GB GPU holds
    141 GB: raising rollout_memory_utilisation (never set here) is not offered either."""
    with pytest.raises(InputError) as caught:
        run(tmp_path, model="llama-3-70b", method="lora", max_response_tokens=2048)
    err = caught.value
    assert "rollout_tensor_parallel" in err.where
    assert "141.1 GB" in err.message
    assert "0.5 of the GPU, the default for colocated" in err.message
    assert "rollout_tensor_parallel: 4 splits the weights to 35.3 GB a GPU" in err.hint
    assert "fp8" not in err.hint
    assert "rollout_memory_utilisation" not in err.hint
    # the remedy named fits: the phase runs with it
    run(tmp_path, model="llama-3-70b", method="lora", max_response_tokens=2048,
        rollout_tensor_parallel=4, zero_stage=3)


def test_a_share_too_small_for_a_model_that_fits_the_gpu_says_how_large(tmp_path):
    """Qwen2.5-7B in bf16, 15.2 GB, on an 80 GB A100 in a 0.1 share (8 GB): more tensor
    parallelism would help (3.8 GB a GPU at 4; at 2, 7.6 GB and vLLM's profiling reserve
    leave no 8 GB), and so would a share of 0.2 (16 GB: the weights, the reserve and one
    sequence's KV cache, 2 x 28 layers x 4 KV heads x 128 x 2 bytes x 2,560 tokens =
    0.15 GB); 0.15 (12 GB) would not."""
    with pytest.raises(InputError) as caught:
        run(tmp_path, rollout_memory_utilisation=0.1, max_response_tokens=2048)
    assert "rollout_memory_utilisation of at least 0.2," in caught.value.hint
    assert "rollout_tensor_parallel: 4 splits the weights to 3.8 GB a GPU" in caught.value.hint


def test_fp8_weights_are_offered_where_the_gpu_runs_fp8(tmp_path):
    """Llama-3-70B on H100s (fp8 matmuls): in fp8, 70.6 GB, split 2 ways 35.3 GB, within the
    0.5 x 80 GB share."""
    plan = {**BASE, "hardware": {**BASE["hardware"], "gpu": "h100-sxm"},
            "phases": [{**BASE["phases"][0], "model": "llama-3-70b", "method": "lora"}]}
    f = tmp_path / "h100.yaml"
    f.write_text(yaml.safe_dump(plan, sort_keys=False))
    with pytest.raises(InputError) as caught:
        evaluate(load_plan(f))
    assert "rollout_precision: fp8 (1 byte a weight) with rollout_tensor_parallel: 2" in (
        caught.value.hint)


def test_a_model_no_engine_holds_asks_for_a_larger_gpu(tmp_path):
    """DeepSeek-V3, 671B parameters, 1,342 GB in bf16: 168 GB a GPU at tensor parallelism 8,
    beyond any share of an 80 GB A100 (which runs no fp8). Since an engine may span nodes
    (tensor parallelism up to 64, as NeMo-RL's DeepSeek-V3 recipes run it; issue 13), the
    remedy is the smallest engine that holds it: 64 GPUs of 21.0 GB each (32 leave 41.9 GB, over
    the 0.5 x 80 GB share); on 16 GB T4s no engine does."""
    with pytest.raises(InputError) as caught:
        run(tmp_path, model="deepseek-v3", method="lora")
    assert ("rollout_tensor_parallel: 64 splits the weights to 21.0 GB a GPU (the phase's 8 "
            "rollout GPUs must then be a multiple of 64)") in caught.value.hint
    t4 = {**BASE, "hardware": {**BASE["hardware"], "gpu": "t4"}}
    with pytest.raises(InputError) as caught:
        run_rl_phase(tmp_path, t4, model="deepseek-v3", method="lora")
    assert "No rollout engine of up to 64 t4 GPUs" in caught.value.hint
    assert "more memory" in caught.value.hint and "fp8" not in caught.value.hint


def test_the_setup_shown_accumulates_the_gpus_share_of_the_step(tmp_path):
    """Walk finding F10: 32 prompts x 8 responses = 256 sequences on 8 GPUs, 32 each; in
    micro-batches of 4, 8 of them a step (grad_accum 8, where 1 was shown); with 2
    mini-batches (optimizer steps) 16 sequences each, 4 micro-batches. A grad_accum the plan
    gives is kept."""
    assert run(tmp_path, micro_batch=4).setup["grad_accum"] == 8
    assert run(tmp_path, micro_batch=4, mini_batches=2).setup["grad_accum"] == 4
    assert run(tmp_path, micro_batch=4, grad_accum=2).setup["grad_accum"] == 2
    r = run(tmp_path, micro_batch=5)
    assert (r.setup["micro_batch"], r.setup["grad_accum"]) == (5, 7)  # ceil(32 / 5)


def test_a_micro_batch_that_does_not_fit_is_named_as_the_plan_gives_it(tmp_path):
    """micro_batch 64 of 512 + 1,024 = 1,536-token sequences, the longest 512 + 4,096 =
    4,608: its memory is taken at the longest length over the same tokens, 64 x 1,536 /
    4,608 = 21 sequences; the error says the plan's 64 first."""
    with pytest.raises(InputError) as caught:
        run(tmp_path, micro_batch=64, max_response_tokens=4096, checkpointing=False)
    assert caught.value.message.startswith(
        "a micro-batch of 64 sequences (1,536 tokens each on average; its memory taken at the "
        "longest, 4,608 tokens, as the same tokens in 21 sequence(s)) needs")
