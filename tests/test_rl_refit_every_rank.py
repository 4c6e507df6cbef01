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


#: an H100 node: the fp8 rollout needs Hopper or later
H100: dict[str, Any] = {**BASE, "hardware": {**BASE["hardware"], "gpu": "h100-sxm"}}


def test_fp8_engines_cast_the_whole_model_beside_the_broadcast(tmp_path: Path) -> None:
    """NeMo-RL's fp8 engines cast every received bf16 linear weight, whole, in eager torch:
    49 bytes of GPU traffic a weight (2 + 4, 4 + 4, 4 + 4, 4, 4 + 4, 4 + 4, 4 + 1, 1 + 1).
    Qwen2.5-7B: 7,615,616,512 parameters less the embedding and the untied LM head (152,064 x
    3,584 each) and the norms (28 x 2 x 3,584 + 3,584) = 6,525,417,472 cast; x 49 B /
    (3,350 GB/s x 0.8) = 0.11931 s on an H100, longer than the broadcast over NVLink (15.23 GB /
    (450 GB/s x 0.75) = 0.0451 s), beside which it runs: the refit is the cast's."""
    cast = 7_615_616_512 - 2 * 152_064 * 3_584 - (28 * 2 * 3_584 + 3_584)
    assert cast == 6_525_417_472
    d = run_rl_phase(tmp_path, H100, placement="dedicated", rollout_gpus=4,
                     rollout_precision="fp8", refit_fp8_cast=True).details
    assert d["weight_sync_s"] == pytest.approx(0.11931, rel=1e-3)
    plain = run_rl_phase(tmp_path, H100, placement="dedicated", rollout_gpus=4,
                         rollout_precision="fp8").details
    assert plain["weight_sync_s"] == pytest.approx(0.045128, rel=1e-3)


def test_fp8_cast_needs_fp8_dedicated_engines(tmp_path: Path) -> None:
    """The cast is the fp8 engines' work on a dedicated refit: refused on bf16 engines."""
    from gpuhours.errors import InputError

    with pytest.raises(InputError) as caught:
        run_rl_phase(tmp_path, H100, placement="dedicated", rollout_gpus=4,
                     refit_fp8_cast=True)
    assert "refit_fp8_cast" in str(caught.value.message)
