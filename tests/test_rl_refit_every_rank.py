"""NeMo-RL's non-colocated refit: one NCCL group of every training rank and every engine rank,
rank 0 broadcasting the whole bf16 model to all of them (weight_sync_every_rank). Hand-worked
against the ring's arithmetic: every GPU receives every byte once; over whole nodes the ring's
channels leave and enter each node through all its NICs, so the node takes the bytes in at
gpus_per_node x the per-GPU network figure, capped by the node's own GPU link."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rl_plan import grpo_plan, run_rl_phase

BASE: dict[str, Any] = grpo_plan("refit-every-rank")
#: Qwen2.5-7B: 7,615,616,512 parameters, 2 bytes each
WEIGHTS = 7_615_616_512 * 2
#: COLLECTIVE_EFFICIENCY (asserted below)
EFF = 0.75


def _two_nodes(network_gb_per_s: float | None = None) -> dict[str, Any]:
    hardware = {**BASE["hardware"], "nodes": 2}
    if network_gb_per_s is not None:
        hardware["inter_node_gb_per_s_one_way"] = network_gb_per_s
    return {**BASE, "hardware": hardware}


def test_refit_over_whole_nodes_takes_every_nic_of_a_node(tmp_path: Path) -> None:
    """2 nodes of 8 A100s (8 training GPUs, 8 engine GPUs), 25 GB/s a GPU between nodes: the
    ring enters the engines' node through 8 NICs, 8 x 25 = 200 GB/s, below NVLink's 300; the
    15.23 GB take 15.23e9 / (200e9 x 0.75) = 0.1015 s, where rank 0 alone beside the engines
    (OpenRLHF's group) sends them over one GPU's 25 GB/s: 0.812 s, 8x longer."""
    from gpuhours.estimate import assumptions as A

    assert A.COLLECTIVE_EFFICIENCY.value == EFF
    every = run_rl_phase(tmp_path, _two_nodes(), placement="dedicated", rollout_gpus=8,
                         weight_sync_every_rank=True).details
    assert every["weight_sync_s"] == pytest.approx(0.10154, rel=1e-3)
    assert every["weight_sync_s"] == pytest.approx(WEIGHTS / (200e9 * EFF), rel=1e-9)
    sender = run_rl_phase(tmp_path, _two_nodes(), placement="dedicated",
                          rollout_gpus=8).details
    assert sender["weight_sync_s"] == pytest.approx(0.81233, rel=1e-3)


def test_refit_over_whole_nodes_is_capped_by_the_node_link(tmp_path: Path) -> None:
    """At 50 GB/s a GPU (a DGX-H100's 400 Gb/s NICs) 8 NICs bring 400 GB/s into a node, but
    each A100 forwards the bytes to the next over NVLink's 300 GB/s a direction: that is the
    ring's rate, 15.23e9 / (300e9 x 0.75) = 0.0677 s."""
    d = run_rl_phase(tmp_path, _two_nodes(50.0), placement="dedicated", rollout_gpus=8,
                     weight_sync_every_rank=True).details
    assert d["weight_sync_s"] == pytest.approx(0.067694, rel=1e-3)


def test_refit_within_one_node_is_the_node_link_either_way(tmp_path: Path) -> None:
    """On one node (4 training GPUs, 4 engines) no network is crossed: NVLink's 300 GB/s with
    or without the training ranks in the group, 15.23e9 / (300e9 x 0.75) = 0.0677 s."""
    for every in (True, False):
        d = run_rl_phase(tmp_path, BASE, placement="dedicated", rollout_gpus=4,
                         weight_sync_every_rank=every).details
        assert d["weight_sync_s"] == pytest.approx(0.067694, rel=1e-3)
