"""Issue 16 review of the setup chooser: the step's bottleneck when the collectives outlast the
compute, layouts searched when plain data parallelism is not clearly compute-bound and costed
on the kernel path that runs them, tensor-parallel groups charged by where their ranks lie,
the GB200 NVL72 node, context parallelism's 2 x cp split."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuhours import catalog
from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate import parallel as P
from gpuhours.estimate.fit import candidate_layouts
from gpuhours.estimate.timing import group_link_bytes_per_s, groups_cross_nodes, network_bottleneck
from gpuhours.setup import Hardware, Training

runner = CliRunner()


# --- the bottleneck ----------------------------------------------------------------------------

def test_collectives_longer_than_compute_name_the_network():
    """The reviewer's ZeRO-3 step: 89.47 s of collectives beside 62.3 s of GPU compute (52.48
    matmuls + 5.69 attention + 4.14 memory-bound); only 27.25 s left exposed, less than the
    matmuls, yet the step waits on the network: it is named, not "matmul compute"."""
    label = network_bottleneck((), 89.47, "inter-node network", 52.48 + 5.69 + 4.14)
    assert label.startswith("communication over inter-node network")
    assert network_bottleneck((), 27.0, "inter-node network", 62.31) == ""


def test_the_largest_collective_of_a_layout_is_named():
    tp = P.Collective(name="tensor-parallel collectives", seconds=5.0, exposed_s=5.0,
                      link="NVLink")
    dp = P.Collective(name="data-parallel gradients", seconds=10.0, exposed_s=1.0,
                      link="inter-node network")
    # 15 s of collectives in all beside 12 s of compute
    assert network_bottleneck((tp, dp), 0.0, "", 12.0).startswith(
        "data-parallel gradients over inter-node network")
    assert network_bottleneck((tp, dp), 0.0, "", 15.0) == ""  # not more than compute


# --- the plain question: 70B on 64 H100 (defects 1 and 9) --------------------------------------

REPRO = ["estimate", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--node", "dgx-h100",
         "--gpus", "64", "--seq", "4096", "--tokens", "100B", "--json", "--no-calibrate"]


def test_a_network_bound_plain_setup_gives_way_to_a_searched_layout():
    """The old pick, ZeRO-3 with checkpointing at micro-batch 2 x 8, reads its own step as
    network-bound; the chooser now searches layouts and lands on a faster one, costed on
    Megatron-Core's kernel path and said so."""
    old = json.loads(runner.invoke(app, [*REPRO, "--batch", "2", "--grad-accum", "8",
                                         "--checkpointing", "--zero", "3"]).stdout)
    assert "communication over" in old["bottleneck"]
    r = runner.invoke(app, REPRO)
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    s = d["setup"]
    assert s["tp"] * s["pp"] > 1 and s["kernels"] == "megatron"
    why = d["warnings"][0]
    assert "parallel layouts were searched" in why and "kernels megatron" in why
    assert d["totals"]["gpu_hours"]["value"] < old["totals"]["gpu_hours"]["value"]


def test_kernels_given_are_kept_for_a_searched_layout():
    d = json.loads(runner.invoke(app, [*REPRO, "--kernels", "eager"]).stdout)
    assert d["setup"]["kernels"] == "eager" and d["setup"]["tp"] * d["setup"]["pp"] > 1
    assert "kernels megatron" not in d["warnings"][0]


def test_the_header_names_a_kernel_path_other_than_eager():
    r = runner.invoke(app, [a for a in REPRO if a != "--json"])
    assert r.exit_code == 0, r.output
    assert "kernels megatron" in " ".join(r.stdout.split("model:")[0].split())


# --- tensor-parallel groups and nodes (defect 15) ----------------------------------------------

@pytest.mark.parametrize(("gpus", "per_node", "span", "crosses"), [
    (12, 6, 4, True),    # groups 0-3, 4-7 (nodes 0-5 | 6-11), 8-11: 4-7 crosses
    (10, 6, 4, True),    # 4-7 again
    (7, 6, 4, False),    # one whole group, 0-3
    (16, 8, 4, False),   # 4 divides 8: every group within a node
    (16, 4, 8, True),    # wider than a node
    (8, 8, 8, False)])
def test_groups_cross_nodes_by_hand(gpus, per_node, span, crosses):
    assert groups_cross_nodes(gpus, per_node, span) is crosses


def test_a_group_across_two_nodes_is_charged_the_network():
    hw = Hardware(gpu="h100-sxm", num_gpus=12, gpus_per_node=6, inter_node_gb_per_s_one_way=25)
    assert group_link_bytes_per_s(hw, 4) == (25e9, "inter-node network")
    aligned = hw.model_copy(update={"num_gpus": 16, "gpus_per_node": 8})
    assert group_link_bytes_per_s(aligned, 4)[1] != "inter-node network"


def test_tensor_parallelism_across_nodes_is_warned_and_not_chosen():
    r = runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm",
                            "--gpus", "12", "--gpus-per-node", "6", "--tp", "4", "--batch", "1",
                            "--zero", "1", "--seq", "4096", "--json", "--no-calibrate"])
    assert r.exit_code == 0, r.output
    warnings = json.loads(r.stdout)["warnings"]
    assert any(w.startswith("tensor parallelism 4 across nodes of 6 GPUs") for w in warnings)
    t = Training(model="llama-3.1-8b", seq_len=4096)
    layouts = candidate_layouts(t, Hardware(gpu="h100-sxm", num_gpus=12, gpus_per_node=6))
    assert {x["tp"] for x in layouts} == {1, 2}  # 4 does not divide a node of 6


# --- GB200 NVL72 (defect 16) -------------------------------------------------------------------

def test_gb200_nvl72_is_one_72_gpu_nvlink_domain():
    node = catalog.node("gb200-nvl72")
    assert node.gpus_per_node == 72 and node.gpus == ["gb200"]
    args = ["estimate", "--model", "llama-3.1-8b", "--gpu", "gb200", "--gpus", "72",
            "--seq", "4096", "--batch", "1", "--zero", "3", "--checkpointing", "--json",
            "--no-calibrate"]
    eight = json.loads(runner.invoke(app, args).stdout)["warnings"]
    assert any("gb200-nvl72" in w and "72 GPUs" in w for w in eight)
    rack = json.loads(runner.invoke(app, [*args, "--node", "gb200-nvl72"]).stdout)["warnings"]
    assert not any("gb200-nvl72 racks" in w for w in rack)


# --- context parallelism (defect 17) -----------------------------------------------------------

def test_cp_needs_2_cp_to_divide_the_sequence():
    """Megatron-LM's get_batch_on_this_cp_rank views the sequence as 2 x cp chunks: 4094
    tokens split by cp 2 into 4 chunks is no whole view."""
    with pytest.raises(FieldError) as err:
        Training(model="llama-3.1-8b", seq_len=4094, cp=2)
    assert err.value.fields == ("cp",)
    Training(model="llama-3.1-8b", seq_len=4096, cp=2)
    r = runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm",
                            "--gpus", "8", "--cp", "2", "--seq", "4094", "--batch", "1"])
    assert r.exit_code == 2 and r.stderr.startswith("error --cp:")


def test_fit_costs_a_searched_layout_on_the_megatron_kernels_unless_kernels_are_given():
    # as estimate's chooser: the layout fit finds is costed on the code that runs it
    from typer.testing import CliRunner

    from gpuhours.cli import app

    args = ["fit", "--model", "llama-2-70b", "--gpu", "a100-80gb", "--gpus", "64",
            "--seq", "4096", "--json"]
    open_ = json.loads(CliRunner().invoke(app, args).stdout)
    given = json.loads(CliRunner().invoke(app, [*args, "--kernels", "eager"]).stdout)
    fastest, eager = open_["fastest"], given["fastest"]
    assert fastest["tp"] * fastest["pp"] > 1 and fastest["kernels"] == "megatron"
    assert eager["kernels"] == "eager"
