"""An engine's tensor-parallel group wider than a node (estimate/tp_allreduce.py): vLLM's
custom all-reduce within a node of up to 8 GPUs, NCCL's modelled latency beyond, the network's
bandwidth for the bytes (NeMo-RL's DeepSeek-V3 and Qwen3-235B rollouts at TP 16-64)."""

from __future__ import annotations

import pytest

from gpuhours import catalog
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.generation import estimate_generation
from gpuhours.estimate.tp_allreduce import nccl_allreduce_latency_s, tp_allreduce_latency_s
from gpuhours.setup import Generation


def test_nccl_latency_by_hand_from_its_tuner_constants():
    # NVIDIA/nccl@5067397c tuning.cc, LL protocol. 32 GPUs on 4 nodes of 8:
    # ring 6.6 + (62 - 6) x 0.6 + 6 x 2.7 = 56.4 us; tree 6.8 + 2 x (7 x 0.6 + 2 x 5.0) = 35.2 us
    assert nccl_allreduce_latency_s(32, 8) == pytest.approx(35.2e-6)
    # 16 GPUs in one NVLink domain (GB200 NVL72): ring 6.6 + 30 x 0.6 = 24.6; tree 6.8 + 2 x 15 x
    # 0.6 = 24.8: the ring's
    assert nccl_allreduce_latency_s(16, 72) == pytest.approx(24.6e-6)
    # 16 GPUs on 2 nodes: ring 6.6 + 28 x 0.6 + 2 x 2.7 = 28.8; tree 6.8 + 2 x (4.2 + 5.0) = 25.2
    assert nccl_allreduce_latency_s(16, 8) == pytest.approx(25.2e-6)


def test_vllm_custom_all_reduce_within_a_node_of_up_to_eight():
    for tp in (2, 4, 8):
        assert tp_allreduce_latency_s(tp, 8) == A.TP_ALLREDUCE_LATENCY_S.value
    # 16 in one 72-GPU NVLink domain: beyond the custom kernel's 8, NCCL's
    assert tp_allreduce_latency_s(16, 72) == pytest.approx(24.6e-6)
    # 8 spread over two 4-GPU nodes: the custom kernel declines a group across nodes
    assert tp_allreduce_latency_s(8, 4) == nccl_allreduce_latency_s(8, 4)


def _decode(gpus_per_node: int, network_gb_per_s: float = 25.0):
    g = Generation.model_validate({"model": "qwen3-235b-a22b", "prompt_tokens": 128,
                                   "output_tokens": 64, "batch": 32, "tensor_parallel": 16,
                                   "gpus_per_node": gpus_per_node,
                                   "inter_node_gb_per_s_one_way": network_gb_per_s})
    return estimate_generation(g, catalog.gpu("h100-sxm"))


def test_an_engine_across_nodes_all_reduces_over_the_network_by_hand():
    # Qwen3-235B-A22B (94 layers, hidden 4,096) at TP 16, 32 running sequences: two
    # all-reduces a layer of 32 x 4,096 bf16 values, ring traffic 2 x 15/16 of them
    message = 32 * 4096 * 2
    across = _decode(8)  # two DGX nodes, 25 GB/s a GPU between them
    one = 25.2e-6 + 2 * 15 / 16 * message / 25e9
    assert across.allreduce_s_per_decode_step == pytest.approx(2 * 94 * one)
    # the same engine in one NVLink domain: NVLink's 450 GB/s one way, the ring's 24.6 us
    within = _decode(72)
    one = 24.6e-6 + 2 * 15 / 16 * message / 450e9
    assert within.allreduce_s_per_decode_step == pytest.approx(2 * 94 * one)
    # a faster network shortens only the bytes' term
    faster = _decode(8, 50.0)
    assert faster.allreduce_s_per_decode_step == pytest.approx(
        2 * 94 * (25.2e-6 + 2 * 15 / 16 * message / 50e9))
    assert (within.allreduce_s_per_decode_step < faster.allreduce_s_per_decode_step
            < across.allreduce_s_per_decode_step)


def test_generation_says_what_its_all_reduces_were_costed_with() -> None:
    import json

    from typer.testing import CliRunner

    from gpuhours.cli import app

    def assumed(*args: str) -> dict[str, dict]:
        r = CliRunner().invoke(app, ["generation", "-m", "llama-3-8b", "-g", "h100",
                                     "--json", *args])
        assert r.exit_code == 0, r.output
        return {a["name"]: a for a in json.loads(r.stdout)["assumptions"]}

    within = assumed("--tensor-parallel", "8")
    assert "tp_allreduce_latency_s" in within and "gpus_per_node" not in within
    across = assumed("--tensor-parallel", "16")
    assert "tp_allreduce_latency_s" not in across
    # NCCL's model at 16 GPUs over two nodes of 8 (the hand-worked 25.2 us above)
    assert across["tp_allreduce_latency_s.nccl"]["value"] == pytest.approx(25.2e-6)
    assert "the default, not given" in across["inter_node_gb_per_s_one_way"]["source"]
    node = assumed("--tensor-parallel", "16", "--node", "dgx-h100")
    assert node["inter_node_gb_per_s_one_way"]["value"] == 50.0
    assert node["inter_node_gb_per_s_one_way"]["source"].startswith("given")
    assert node["gpus_per_node"]["source"].startswith("given")  # 8, as the default, but given
    one = assumed("--tensor-parallel", "16", "--gpus-per-node", "4")
    assert one["gpus_per_node"]["source"].startswith("given")
    assert "not given" in one["inter_node_gb_per_s_one_way"]["source"]
