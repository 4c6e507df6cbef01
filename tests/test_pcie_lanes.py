"""PCIe slots narrower than x16 (Hardware.pcie_lanes): the GPU-to-GPU and host links at
lanes/16 of the catalog's x16 figures, by hand (RTX 3090: 16.5 GB/s both ways staged through
host memory on x16 PCIe 4.0, gpus.yaml), from the CLI and a plan file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuhours import catalog
from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate.offload import host_link_bytes_per_s
from gpuhours.estimate.timing import link_bandwidth_bytes_per_s
from gpuhours.setup import Hardware

runner = CliRunner()


def test_links_scale_with_lanes_by_hand() -> None:
    x16, link = link_bandwidth_bytes_per_s(Hardware(gpu="rtx-3090", num_gpus=2))
    assert x16 == pytest.approx(8.25e9) and "x8" not in link  # 16.5 both ways: 8.25 each
    x8, link = link_bandwidth_bytes_per_s(Hardware(gpu="rtx-3090", num_gpus=2, pcie_lanes=8))
    assert x8 == pytest.approx(4.125e9) and "x8 slots" in link
    # a card with peer-to-peer PCIe: its own x16 figure, 64 GB/s both ways, 32 each; x4: 8
    pcie = catalog.gpu("a100-80gb-pcie")
    x4, _ = link_bandwidth_bytes_per_s(Hardware(gpu=pcie, num_gpus=2, pcie_lanes=4))
    assert x4 == pytest.approx(pcie.interconnect_gb_per_s_two_way / 2 * 1e9 / 4)
    # NVLink is not PCIe: lanes leave it alone
    nv, _ = link_bandwidth_bytes_per_s(Hardware(gpu="a100-80gb", num_gpus=2, pcie_lanes=8))
    assert nv == pytest.approx(catalog.gpu("a100-80gb").interconnect_gb_per_s_two_way / 2 * 1e9)
    # the host link of CPU offload likewise
    assert host_link_bytes_per_s("ampere", "rtx-3090", 8) == pytest.approx(
        host_link_bytes_per_s("ampere", "rtx-3090") / 2)


def test_lanes_a_slot_can_have() -> None:
    # the library's bad input is a FieldError keyed by the field (README), not pydantic's
    with pytest.raises(FieldError, match="1, 2, 4, 8 or 16 lanes") as caught:
        Hardware(gpu="rtx-3090", pcie_lanes=3)
    assert caught.value.fields == ("pcie_lanes",)


def _step(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["estimate", "--model", "llama-2-7b", "--gpu", "rtx-3090",
                                 "--gpus", "2", "--zero", "3", "--method", "lora",
                                 "--checkpointing", "--json", *args])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout)["step_time_breakdown_s"])


def test_cli_lanes_double_the_traffic_time() -> None:
    x16 = _step()["communication_s"]["value"]
    x8 = _step("--pcie-lanes", "8")
    # each collective's bytes at half the rate; its latency is the same
    assert x8["communication_s"]["value"] == pytest.approx(2 * x16, rel=0.02)
    assert "x8 slots" in x8["communication_s"]["source"]
    bad = runner.invoke(app, ["estimate", "--model", "llama-2-7b", "--gpu", "rtx-3090",
                              "--pcie-lanes", "3"])
    assert bad.exit_code == 2 and "--pcie-lanes" in bad.output
    assert "Traceback" not in bad.output


def _plan(tmp_path: Path, lanes: str) -> str:
    path = tmp_path / "plan.yaml"
    path.write_text(
        "project: t\nhardware: {gpu: rtx-3090, gpus_per_node: 2, nodes: 1, "
        f"pcie_lanes: {lanes}}}\nseeds: 1\n"
        "defaults: {model: llama-2-7b, method: lora, precision: bf16, checkpointing: true, "
        "zero_stage: 3}\n"
        "phases:\n  - {name: sft, kind: finetune, examples: 1000, seq_len: 2048, "
        "micro_batch: 1, grad_accum: 1}\n")
    return str(path)


def test_plan_file(tmp_path: Path) -> None:
    assert runner.invoke(app, ["plan", _plan(tmp_path, "8"), "--no-doc"]).exit_code == 0
    bad = runner.invoke(app, ["plan", _plan(tmp_path, "3"), "--no-doc"])
    assert bad.exit_code == 2 and "hardware.pcie_lanes" in bad.output
