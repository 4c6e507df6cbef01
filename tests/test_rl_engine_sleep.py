"""A colocated vLLM engine sleeping between rollouts with its weights in host memory
(plan/rl_engine_sleep.py, `rollout_sleep_offload`; issue 13): its weights down and up over
PCIe each rollout, worked by hand; bad settings named by field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuhours.errors import InputError
from gpuhours.plan.rl_engine_sleep import engine_weight_bytes_per_gpu, sleep_wake_s
from rl_plan import grpo_plan, run_rl_phase

BASE: dict[str, Any] = grpo_plan("rl-sleep")


def run(tmp_path: Path, **phase: Any) -> Any:
    return run_rl_phase(tmp_path, BASE, **phase)


def test_engine_share_and_round_trip_by_hand():
    # 7e9 bf16 weights over an engine of 2 GPUs: 7 GB a GPU; down and up at 25 GB/s: 0.56 s
    assert engine_weight_bytes_per_gpu(7e9, 2.0, 2) == pytest.approx(7e9)
    assert engine_weight_bytes_per_gpu(7e9, 1.0, 4) == pytest.approx(1.75e9)  # fp8, TP 4
    assert sleep_wake_s(7e9, 25e9) == pytest.approx(0.56)
    with pytest.raises(ValueError, match="tensor_parallel"):
        engine_weight_bytes_per_gpu(7e9, 2.0, 0)
    with pytest.raises(ValueError, match="host link"):
        sleep_wake_s(7e9, 0.0)


def test_sleep_offload_in_a_plan_by_hand(tmp_path):
    """Qwen2.5-7B (7,615,616,512 parameters) in engines of 2 A100s: 7.62 GB of bf16 weights a
    GPU, down at sleep and up at wake, at PCIe 4.0's 31.5 GB/s x the copy efficiency 0.8:
    2 x 7.6156e9 / 25.2e9 = 0.604 s more weight sync, and as much more step."""
    from gpuhours.estimate.offload import PCIE_COPY_EFFICIENCY

    p = 7_615_616_512
    link = 31.5e9 * PCIE_COPY_EFFICIENCY.value
    on = run(tmp_path, rollout_tensor_parallel=2, rollout_sleep_offload=True).details
    off = run(tmp_path, rollout_tensor_parallel=2).details
    assert on["engine_sleep_wake_s"] == pytest.approx(2 * (2 * p / 2) / link, rel=1e-3)
    assert on["engine_sleep_wake_s"] == pytest.approx(0.604, abs=0.001)
    assert off["engine_sleep_wake_s"] == 0.0
    assert on["weight_sync_s"] == pytest.approx(off["weight_sync_s"]
                                                + on["engine_sleep_wake_s"])
    assert on["step_time_s"] == pytest.approx(off["step_time_s"] + on["engine_sleep_wake_s"])
    # fp8 rollouts (on an H100) keep one byte a weight: half the copies
    h100 = {**BASE, "hardware": {"gpu": "h100-sxm", "gpus_per_node": 8, "nodes": 1}}
    fp8 = run_rl_phase(tmp_path, h100, rollout_tensor_parallel=2, rollout_sleep_offload=True,
                       rollout_precision="fp8").details
    bf16 = run_rl_phase(tmp_path, h100, rollout_tensor_parallel=2,
                        rollout_sleep_offload=True).details
    assert fp8["engine_sleep_wake_s"] == pytest.approx(bf16["engine_sleep_wake_s"] / 2)

def test_sleep_offload_needs_a_colocated_vllm_engine(tmp_path):
    with pytest.raises(InputError, match="rollout_sleep_offload"):
        run(tmp_path, placement="dedicated", rollout_gpus=2, rollout_sleep_offload=True)
    with pytest.raises(InputError, match="rollout_sleep_offload"):
        run(tmp_path, engine="hf-generate", rollout_sleep_offload=True)
