"""A colocated trainer's state moved out of the engine's way around each refit and back
(plan/rl_refit_offload.py, `refit_offload`; issue 13): the bytes and seconds worked by hand,
the plan field's bad values named with their line, and the validation rows that take it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import InputError
from gpuhours.plan.rl_refit_offload import optimizer_state_bytes_moved, refit_offload_s
from rl_plan import grpo_plan, run_rl_phase, write_rl_plan

# Qwen2.5-7B trained in full on one node of 8 H100s, its optimizer state sharded (ZeRO-1)
BASE: dict[str, Any] = {
    **grpo_plan("rl-refit-offload"),
    "hardware": {"gpu": "h100-sxm", "gpus_per_node": 8, "nodes": 1},
    "defaults": {"model": "qwen2.5-7b", "method": "full", "checkpointing": True,
                 "zero_stage": 1}}


def run(tmp_path: Path, **phase: Any) -> Any:
    return run_rl_phase(tmp_path, BASE, **phase)


def test_bytes_and_seconds_by_hand():
    # 4 GB of moments and 2 GB of fp32 master copy a GPU: the remainders are half the master's
    assert optimizer_state_bytes_moved("moments", 4e9, 2e9) == pytest.approx(4e9)
    assert optimizer_state_bytes_moved("moments+remainders", 4e9, 2e9) == pytest.approx(5e9)
    assert optimizer_state_bytes_moved("moments+master", 4e9, 2e9) == pytest.approx(6e9)
    assert optimizer_state_bytes_moved("none", 4e9, 2e9) == 0.0
    # 8 GB of weights down and up pinned at 50 GB/s: 0.32 s; 5 GB of optimizer state down and
    # up pageable, 4.5x slower: 2 x 5 x 4.5 / 50 = 0.9 s
    assert refit_offload_s(8e9, 5e9, 50e9, 4.5) == pytest.approx(0.32 + 0.9)
    assert refit_offload_s(8e9, 0.0, 50e9, 4.5) == pytest.approx(0.32)
    with pytest.raises(ValueError, match="refit_offload"):
        optimizer_state_bytes_moved("all", 4e9, 2e9)
    with pytest.raises(ValueError, match="host link"):
        refit_offload_s(8e9, 5e9, 0.0, 4.5)
    with pytest.raises(ValueError, match="pageable"):
        refit_offload_s(8e9, 5e9, 50e9, 0.5)


def test_refit_offload_in_a_plan_by_hand(tmp_path):
    """Qwen2.5-7B (7,615,616,512 parameters), bf16-mixed on 8 H100s at ZeRO-1: each GPU holds
    all the bf16 weights (2p bytes) and an eighth of the fp32 moments (8p / 8 = p) and of the
    master copy (4p / 8 = p / 2, of which the int16 remainders are p / 4). Weights down and up
    at PCIe 5.0's 63 GB/s x 0.8 = 50.4 GB/s, the optimizer state down and up 4.5x slower:
    (2 x 2p + 2 x (p + p/4) x 4.5) / 50.4e9 = 15.25p / 50.4e9 = 2.304 s a step."""
    from gpuhours.estimate.offload import PAGEABLE_COPY_SLOWDOWN, PCIE_COPY_EFFICIENCY

    p = 7_615_616_512
    link = 63e9 * PCIE_COPY_EFFICIENCY.value
    slow = PAGEABLE_COPY_SLOWDOWN.value
    on = run(tmp_path, refit_offload="moments+remainders").details
    off = run(tmp_path).details
    assert on["refit_offload_s"] == pytest.approx(
        (2 * 2 * p + 2 * (p + p / 4) * slow) / link, rel=1e-3)
    assert on["refit_offload_s"] == pytest.approx(2.304, abs=0.002)
    assert off["refit_offload_s"] == 0.0
    # it is the step's "host offload" part, and the step grows by exactly it
    assert on["host_offload_s"] == pytest.approx(on["refit_offload_s"])
    assert on["step_time_s"] == pytest.approx(off["step_time_s"] + on["refit_offload_s"])
    # without the remainders (the fp32 master copy stays on the GPU): p/4 less each way
    moments = run(tmp_path, refit_offload="moments").details["refit_offload_s"]
    assert on["refit_offload_s"] - moments == pytest.approx(2 * (p / 4) * slow / link, rel=1e-3)


def test_bad_values_name_the_field_and_its_line(tmp_path):
    with pytest.raises(InputError, match=r"line \d+.*refit_offload.*'moments\+remainders'"):
        run(tmp_path, refit_offload="sometimes")
    with pytest.raises(InputError, match="refit_offload.*placement: colocated"):
        run(tmp_path, refit_offload="moments", placement="dedicated", rollout_gpus=2)
    with pytest.raises(InputError, match="refit_offload and offload_between_phases"):
        run(tmp_path, refit_offload="moments", offload_between_phases=True)
    # GB200's host link is NVLink-C2C, which has no figure: refused, naming the field
    gb200 = {**BASE, "hardware": {"gpu": "gb200", "gpus_per_node": 4, "nodes": 1}}
    with pytest.raises(InputError, match="refit_offload.*no PCIe host link"):
        run_rl_phase(tmp_path, gb200, refit_offload="moments")


def test_bad_value_exits_2_from_the_cli(tmp_path):
    f = write_rl_plan(tmp_path, BASE, refit_offload="yes")
    result = CliRunner().invoke(app, ["plan", str(f)])
    assert result.exit_code == 2
    assert "refit_offload" in result.output and "line" in result.output
    assert "Traceback" not in result.output


def test_the_validation_rows_that_take_it_are_nemo_rl_colocated():
    """NeMo-RL's Megatron worker offloads around the refit only with colocated generation
    (grpo.py refit_policy_generation @108bffda and v0.6.0); its recipes all set the
    precision-aware optimizer (moments+remainders). Counted from the CSV's own columns, not
    from the cases: every NeMo-RL colocated row on a GPU with a PCIe figure takes it, no other
    row does, and the GB200 colocated rows say that it is not costed there. Likewise vLLM's
    level-1 sleep (rollout_sleep_offload), which NeMo-RL calls only when colocated."""
    from gpuhours_dev.validation import rl

    data = rl.rows()
    nemo_colocated = {i for i, r in enumerate(data) if r["framework"].startswith("NeMo-RL")
                      and r["placement"].startswith("colocated")}
    taking = {c.row for c in rl.CASES if c.phase.get("refit_offload", "none") != "none"}
    cased = {c.row for c in rl.CASES}
    gb200 = {i for i in nemo_colocated if data[i]["gpu"].startswith("GB200")}
    assert taking == (nemo_colocated & cased) - gb200
    assert len(taking) == 11
    assert {c.phase["refit_offload"] for c in rl.CASES if c.row in taking} == {
        "moments+remainders"}
    # the engine beside it sleeps at level 1 on exactly those rows (vllm_generation.py
    # finish_generation calls `sleep` only when colocated)
    assert {c.row for c in rl.CASES if c.phase.get("rollout_sleep_offload")
            and data[c.row]["framework"].startswith("NeMo-RL")} == taking
    for c in rl.CASES:
        if c.row in gb200:
            assert "NOT costed" in c.assumed and "NVLink-C2C" in c.assumed, c.row
        if c.row in taking:
            assert "offload_before_refit" in c.assumed, c.row

