"""Megatron-Core's allgather dispatcher's expert-parallel traffic (estimate/parallel.py
expert_allgather_bytes_per_layer), worked by hand from its collectives."""

from __future__ import annotations

import pytest

from gpuhours.estimate import parallel as P


def test_allgather_dispatch_bytes_by_hand() -> None:
    # 4,096 tokens a GPU, hidden 2,048, bf16, 128 experts, EP 8, fp64 router. Each ring
    # collective has a GPU send 7 shards of its own size. Forward: the routing map (128 x 1
    # byte), the probs (128 x 8), the hidden states (2,048 x 2), the combine in fp64 (2,048 x 8)
    # = 1,152 + 20,480 = 21,632 bytes a token; backward: the probs' and hidden states'
    # gradients reduce-scattered (1,024 + 4,096), the combine's all-gathered (16,384) = 21,504
    got = P.expert_allgather_bytes_per_layer(4096, 2048, 2.0, 128, 8)
    assert got == pytest.approx((21_632 + 21_504) * 4096 * 7)
    # against the all-to-all of the top-8 copies it replaces: 4 x 4,096 x 8 x 2,048 x 2 x 7/8
    a2a = P.expert_all_to_all_bytes_per_layer(4096, 2048, 2.0, 8, 8)
    assert a2a == pytest.approx(469_762_048)
    assert got / a2a == pytest.approx(43_136 / 16_384)
    # full recomputation gathers and combines the forward again
    again = P.expert_allgather_bytes_per_layer(4096, 2048, 2.0, 128, 8, recompute=True)
    assert again - got == pytest.approx(21_632 * 4096 * 7)
    assert P.expert_allgather_bytes_per_layer(4096, 2048, 2.0, 128, 1) == 0.0


def test_the_setting_reaches_the_expert_traffic() -> None:
    # Qwen3-30B-A3B on 8 H100s, EP 8 in one node: the step's expert traffic with NeMo-RL's
    # allgather dispatch is the allgather bytes over the all-to-all's (top-8 of EP 8: the same
    # bytes per token and pass as every token once), 43,136 / 16,384, on the same link
    from gpuhours import catalog
    from gpuhours.estimate.timing import layout_collectives
    from gpuhours.resolve import resolve_model
    from gpuhours.setup import Hardware, Training

    arch, _ = resolve_model("qwen3-30b-a3b")
    hw = Hardware(gpu=catalog.gpu("h100-sxm"), num_gpus=8)
    t = Training.model_validate(dict(arch=arch, model="qwen3-30b-a3b", precision="bf16",
                                     seq_len=4096, ep=8, kernels="megatron",
                                     moe_dispatch="allgather-unfused"))
    lay = P.layout_of(1, 1, 1, 8, 1, 8, arch)

    def expert_s(tt: Training) -> float:
        return sum(c.seconds for c in layout_collectives(arch, tt, hw, lay, 0.0)
                   if c.name == "expert all-to-all")

    fused = t.model_copy(update={"moe_dispatch": "fused"})
    assert expert_s(t) / expert_s(fused) == pytest.approx(43_136 / 16_384)


def test_a_scoring_forward_sends_the_expert_traffic_by_hand() -> None:
    # Qwen3-30B-A3B (48 MoE layers, hidden 2,048, top-8 of 128), bf16, EP 8 on one H100 node:
    # NVLink 900 GB/s both ways, 450 one way, at the collective efficiency 0.75. 10,000 tokens
    # a data-parallel rank, TP 1: the all-to-all's forward, dispatch and combine of the 8 copies,
    # 7/8 of them leaving the GPU: 2 x 10,000 x 8 x 2,048 x 2 x 7/8 = 573.44 MB a layer
    from gpuhours import catalog
    from gpuhours.estimate import assumptions as A
    from gpuhours.plan.rl_scoring import expert_scoring_s
    from gpuhours.resolve import resolve_model
    from gpuhours.setup import Hardware, Training

    arch, _ = resolve_model("qwen3-30b-a3b")
    gpu = catalog.gpu("h100-sxm")
    assert gpu.interconnect_gb_per_s_two_way == 900
    hw = Hardware(gpu=gpu, num_gpus=8)
    t = Training.model_validate(dict(arch=arch, model="qwen3-30b-a3b", precision="bf16", ep=8,
                                     kernels="megatron"))
    link = 450e9 * 0.75
    assert A.COLLECTIVE_EFFICIENCY.value == 0.75 and A.MODEL_PARALLEL_COMM_OVERLAP.value == 0.0
    assert expert_scoring_s(t, arch, hw, 10_000) == pytest.approx(48 * 573.44e6 / link)
    # NeMo-RL's allgather dispatch: 21,632 bytes a token and layer to each of 7 ranks
    nemo = t.model_copy(update={"moe_dispatch": "allgather-unfused"})
    assert expert_scoring_s(nemo, arch, hw, 10_000) == pytest.approx(
        48 * 21_632 * 7 * 10_000 / link)
    # two pipeline stages: each GPU's 24 layers; without EP nothing
    assert expert_scoring_s(t, arch, hw, 10_000, stages=2) == pytest.approx(
        24 * 573.44e6 / link)
    assert expert_scoring_s(t.model_copy(update={"ep": 1}), arch, hw, 10_000) == 0.0
