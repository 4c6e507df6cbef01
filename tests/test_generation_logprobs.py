"""Each sampled token's logprob returned by vLLM V1 (Generation.returns_logprobs; the rl
phase's rollout_returns_logprobs): host work for every running sequence every decode step,
serial with the GPU unless async scheduling (assumptions.DECODE_HOST_LOGPROB_S_PER_SEQUENCE,
measured by scripts/bench_vllm_logprob_host.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuhours import catalog
from gpuhours.errors import InputError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.generation import GenerationEstimate, estimate_generation
from gpuhours.setup import Generation
from rl_plan import grpo_plan, run_rl_phase

# 256 running sequences: 128 prompts x 2 a batch, vLLM's max_num_seqs 256
_SETUP = {"model": "llama-3.1-8b", "prompt_tokens": 128, "output_tokens": 1024, "batch": 256}


def _estimate(gpu: str = "h100-sxm", **fields: Any) -> GenerationEstimate:
    return estimate_generation(Generation.model_validate({**_SETUP, **fields}),
                               catalog.gpu(gpu))


def test_the_constant_is_the_benchmarks_median():
    # scripts/bench_vllm_logprob_host.py, vLLM 0.11.2's own code: 4.41 us (median of 9 runs)
    assert A.DECODE_HOST_LOGPROB_S_PER_SEQUENCE.value == pytest.approx(4.4e-6)
    assert "measured" in A.DECODE_HOST_LOGPROB_S_PER_SEQUENCE.basis


def test_each_running_sequence_adds_its_logprob_to_a_serial_step_by_hand():
    without, with_ = _estimate(), _estimate(returns_logprobs=True)
    assert with_.running_sequences == 256
    # 256 sequences x 4.4 us = 1.1264 ms more on every decode step, first and last alike
    assert with_.decode_step_s_first - without.decode_step_s_first == pytest.approx(1.1264e-3)
    assert with_.decode_step_s_last - without.decode_step_s_last == pytest.approx(1.1264e-3)
    # nothing else moves: the prefill and the engine's own host step
    assert with_.prefill_s == pytest.approx(without.prefill_s)
    assert with_.host_step_s == without.host_step_s
    assert with_.figures()["logprob_host_s_per_sequence"].basis == "measured"
    assert "logprob_host_s_per_sequence" not in without.figures()


def test_the_grace_host_takes_its_ratio():
    # the catalog's gb200 host_op_time_ratio 2.75: 256 x 4.4 us x 2.75 = 3.0976 ms
    without, with_ = _estimate("gb200"), _estimate("gb200", returns_logprobs=True)
    assert with_.decode_step_s_first - without.decode_step_s_first == pytest.approx(3.0976e-3)


def test_under_async_scheduling_it_joins_the_host_step_beside_the_gpu():
    serial = _estimate()
    device = serial.decode_step_s_first - serial.host_step_s
    overlapped = _estimate(async_scheduling=True, returns_logprobs=True)
    # max(host step + 256 x 4.4 us, the GPU's step)
    assert overlapped.decode_step_s_first == pytest.approx(
        max(serial.host_step_s + 1.1264e-3, device))


def test_returning_logprobs_is_vllm_v1s():
    with pytest.raises(InputError, match="logprobs"):
        Generation.model_validate({**_SETUP, "engine": "sglang", "returns_logprobs": True})
    with pytest.raises(InputError, match="returns_logprobs"):
        Generation.model_validate({**_SETUP, "engine": "vllm-v0", "returns_logprobs": True})


def test_the_rl_phase_passes_it_and_names_its_field(tmp_path: Path):
    base = grpo_plan("rl-logprobs-test")
    plain = run_rl_phase(tmp_path, base).details
    asked = run_rl_phase(tmp_path, base, rollout_returns_logprobs=True).details
    assert asked["rollout_generation_s"] > plain["rollout_generation_s"]
    assert asked["policy_update_s"] == pytest.approx(plain["policy_update_s"])
    with pytest.raises(InputError) as caught:
        run_rl_phase(tmp_path, base, rollout_returns_logprobs=True, engine="sglang")
    assert "rollout_returns_logprobs" in str(caught.value)
