"""Node types (issue 16, "the network"): the catalog's nodes, `--node` and a plan's
hardware.node set GPUs per node and the network between nodes, from the vendors' figures."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuhours import catalog
from gpuhours.cli import app
from gpuhours.errors import FieldError, UnknownNameError
from gpuhours.plan.budget import evaluate
from gpuhours.plan.load import load_plan

runner = CliRunner()

#: each node's network as its source states it: Gb/s per port x ports for the GPUs' traffic, or
#: per instance; / 8 bits / the GPUs of the node = GB/s per GPU one way (hand conversions)
STATED_GBIT_PER_NODE = {"dgx-a100": 8 * 200, "dgx-h100": 8 * 400, "dgx-h200": 8 * 400,
                        "dgx-b200": 8 * 400, "dgx-b300": 8 * 800, "aws-p4d": 400,
                        "aws-p4de": 400, "aws-p5": 3200,
                        "azure-nd-a100-v4": 8 * 200, "azure-nd-h100-v5": 8 * 400,
                        "gb200-nvl72": 72 * 400}


def test_every_node_type_carries_catalog_gpus_and_its_stated_network():
    nodes = catalog.nodes()
    assert sorted(n.name for n in nodes) == sorted(STATED_GBIT_PER_NODE)
    for n in nodes:
        assert all(catalog.gpu(g).name == g for g in n.gpus)
        assert n.inter_node_gb_per_s_one_way == (STATED_GBIT_PER_NODE[n.name] / 8
                                                 / n.gpus_per_node)
        assert n.source and n.as_of
    assert catalog.node("p4d.24xlarge").name == "aws-p4d"


def test_a_node_must_carry_the_gpu_named():
    with pytest.raises(FieldError, match="dgx-h100 carries h100-sxm, not a100-80gb"):
        catalog.node_for_gpu("dgx-h100", "a100-80gb")
    assert catalog.node_for_gpu("dgx-h100", "h100").name == "dgx-h100"
    with pytest.raises(UnknownNameError, match="dgx-h100"):
        catalog.node("dgx-h10")


ARGS = ["estimate", "--model", "llama-2-70b", "--gpu", "a100-40gb", "--gpus", "64",
        "--zero", "3", "--checkpointing", "--batch", "1", "--seq", "2048", "--tokens", "1e9",
        "--json"]


def _json(*extra: str) -> dict:
    result = runner.invoke(app, [*ARGS, *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_node_sets_the_network_as_the_two_options_would():
    by_node = _json("--node", "aws-p4d")
    by_hand = _json("--gpus-per-node", "8", "--inter-node-gb-per-s", "6.25")
    assert by_node["step_time_s"]["value"] == by_hand["step_time_s"]["value"]
    assert any(a.startswith("network: aws-p4d") for a in by_node["assumptions"])
    # ZeRO-3 on 8 nodes gathers the 70B's weights over the network every step: a p4d's
    # 6.25 GB/s per GPU makes the step slower than a DGX A100's 25 GB/s
    dgx = _json("--node", "dgx-a100")
    assert by_node["step_time_s"]["value"] > 1.5 * dgx["step_time_s"]["value"]


@pytest.mark.parametrize(("extra", "message"), [
    (["--node", "dgx-h100"], "dgx-h100 carries h100-sxm, not a100-40gb"),
    (["--node", "aws-p4d", "--inter-node-gb-per-s", "50"], "--node aws-p4d sets it"),
    (["--node", "dgx-a10"], "Did you mean"),
])
def test_node_errors_name_the_option(extra, message):
    result = runner.invoke(app, [*ARGS[:-1], *extra])
    assert result.exit_code == 2
    assert "--node" in result.output and message in " ".join(result.output.split())
    assert "Traceback" not in result.output


PLAN = """project: nodes
hardware:
  gpu: a100-40gb
  node: {node}
  nodes: 8{extra}
seeds: 1
phases:
  - name: pretrain
    kind: pretrain
    runs: once
    model: llama-2-70b
    tokens: 1.0e+9
    zero_stage: 3
    checkpointing: true
    micro_batch: 1
    seq_len: 2048
"""


def test_a_plan_names_its_node_type(tmp_path):
    hours = {}
    for node in ("aws-p4d", "dgx-a100"):
        path = tmp_path / f"{node}.yaml"
        path.write_text(PLAN.format(node=node, extra=""))
        b = evaluate(load_plan(path))
        assert b.num_gpus == 64
        hours[node] = b.total_gpu_hours
    assert hours["aws-p4d"] > 1.5 * hours["dgx-a100"]


def test_a_plan_giving_the_network_twice_is_refused_at_its_line(tmp_path):
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN.format(node="aws-p4d", extra="\n  inter_node_gb_per_s_one_way: 50"))
    result = runner.invoke(app, ["plan", str(path), "--no-doc"])
    assert result.exit_code == 2
    out = " ".join(result.output.split())
    assert "node aws-p4d sets inter_node_gb_per_s_one_way" in out and "line" in out
