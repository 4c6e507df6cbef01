"""Every override option of `estimate` changes what it says, in the direction its physics
implies (issue: `--memory-gb` on a catalog GPU was ignored, the usable-MiB field winning)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app

#: llama-2-7b, ZeRO-3 over 16 A100-80GB: two nodes, so the network matters
BASE = ["estimate", "--model", "llama-2-7b", "--gpu", "a100-80gb", "--gpus", "16", "--zero",
        "3", "--batch", "2", "--seq", "2048", "--checkpointing", "--json", "--no-calibrate"]


def _estimate(*extra: str) -> dict:
    result = CliRunner().invoke(app, [*BASE, *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _part(d: dict, name: str) -> float:
    return d["step_time_breakdown_s"][name]["value"]


@pytest.fixture(scope="module")
def base() -> dict:
    return _estimate()


def test_memory_gb_sets_the_device_memory(base: dict) -> None:
    d = _estimate("--memory-gb", "200")
    assert base["memory"]["device_bytes"]["value"] == 80 * 2**30  # nvidia-smi's MiB
    assert d["memory"]["device_bytes"]["value"] == pytest.approx(200e9)


def test_peak_tflops_scales_the_compute_time(base: dict) -> None:
    d = _estimate("--peak-tflops", "624")  # twice the A100's dense bf16
    assert _part(d, "matmul_s") == pytest.approx(_part(base, "matmul_s") / 2, rel=1e-9)
    assert _part(d, "attention_s") == pytest.approx(_part(base, "attention_s") / 2, rel=1e-9)


def test_bandwidth_scales_the_memory_bound_time(base: dict) -> None:
    d = _estimate("--bandwidth-gb-per-s", str(2 * 2039))  # twice the A100-80GB's HBM
    assert _part(d, "memory_bound_s") == pytest.approx(_part(base, "memory_bound_s") / 2,
                                                       rel=1e-9)
    assert _part(d, "matmul_s") == pytest.approx(_part(base, "matmul_s"), rel=1e-12)


def test_inter_node_bandwidth_scales_the_collectives(base: dict) -> None:
    d = _estimate("--inter-node-gb-per-s", "50")  # twice the default 25 GB/s
    assert _part(d, "communication_s") == pytest.approx(_part(base, "communication_s") / 2,
                                                        rel=0.05)


def test_gpus_per_node_moves_the_collectives_onto_nvlink(base: dict) -> None:
    d = _estimate("--gpus-per-node", "16")  # one node: NVLink (300 GB/s one way) not the NIC
    assert _part(d, "communication_s") < _part(base, "communication_s") / 5


def test_host_us_per_op_scales_the_host_time(base: dict) -> None:
    d = _estimate("--host-us-per-op", "16")  # half the assumed 32 us
    assert _part(d, "host_s") == pytest.approx(_part(base, "host_s") / 2, rel=1e-9)
    assert "given: host_us_per_op" in d["step_time_breakdown_s"]["host_s"]["source"]


def test_usd_per_gpu_hour_is_costed_beside_the_catalog() -> None:
    d = _estimate("--tokens", "1e9", "--usd-per-gpu-hour", "1.5")
    rows = d["totals"]["cost_usd"]
    given = [r for r in rows if r["provider"] == "given"]
    assert len(given) == 1 and given[0]["source"] == "--usd-per-gpu-hour"
    assert given[0]["on_demand_usd"] == pytest.approx(1.5 * d["totals"]["gpu_hours"]["value"])
    assert len(rows) > 1  # the catalog's rows are still there


def test_generation_takes_a_price_too() -> None:
    result = CliRunner().invoke(app, ["generation", "--model", "qwen2.5-7b", "--gpu", "h100-sxm",
                                      "--sequences", "1e5", "--usd-per-gpu-hour", "2", "--json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    given = [r for r in d["cost_usd"] if r["provider"] == "given"]
    assert given[0]["on_demand_usd"] == pytest.approx(2 * d["gpu_hours"]["value"])
