"""FSDP/ZeRO-3 traffic between cards without peer-to-peer access, and the part of it exposed.

Sources of the numbers held here: the catalog's host-staged figures (RTX 4090: 30 GB/s both
directions, p2pBandwidthLatencyTest "Bidirectional P2P=Disabled" on PCIe 4.0 x16; RTX 3090:
16.5 GB/s, Puget Systems' test, as gpus.yaml cites them) and hand arithmetic."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpuhours import catalog
from gpuhours.catalog.schema import DenseTflops, GpuSpec
from gpuhours.estimate import assumptions as A
from gpuhours.estimate import parallel as P
from gpuhours.estimate.flops import training_flops_per_token
from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.params import count_params
from gpuhours.estimate.timing import _within_node_link, training_step_time
from gpuhours.resolve import resolve_model
from gpuhours.setup import Hardware, Training


def test_geforce_cards_have_no_peer_to_peer_and_a_sourced_staged_figure():
    for name, two_way in (("rtx-4090", 30.0), ("rtx-3090", 16.5)):
        g = catalog.gpu(name)
        assert g.peer_to_peer is False
        assert g.host_staged_gb_per_s_two_way == two_way
        assert "p2pBandwidthLatencyTest" in g.peer_to_peer_source
    # a data-centre part keeps its own link: nothing recorded, taken as able
    assert catalog.gpu("a100-80gb-pcie").peer_to_peer is None


def test_a_peer_to_peer_figure_without_its_source_is_refused():
    with pytest.raises(ValidationError, match="peer_to_peer_source"):
        GpuSpec(name="x", full_name="x", vendor="NVIDIA", generation="ada", memory_gb=24,
                memory_bw_gb_per_s=1000, dense_tflops=DenseTflops(bf16=100),
                interconnect="pcie", interconnect_gb_per_s_two_way=64, source="test",
                as_of="2026-01-01", peer_to_peer=False, host_staged_gb_per_s_two_way=30.0)


def test_the_link_without_peer_to_peer_is_the_host_staged_one():
    bw, link = _within_node_link(catalog.gpu("rtx-4090"))
    assert bw == pytest.approx(15e9)  # 30 GB/s both ways: 15 per direction
    assert "staged through host memory" in link
    bw, link = _within_node_link(catalog.gpu("a100-80gb-pcie"))
    assert link == "pcie" and bw == pytest.approx(catalog.gpu("a100-80gb-pcie")
                                                  .interconnect_gb_per_s_two_way / 2 * 1e9)


def test_fsdp_exposure_by_hand():
    # slow link: forward 1.0 s of gathers beside 0.5 s of compute, backward 1.2 s beside 2.0 s,
    # 10 layers: per layer min(0.1, 0.05) x 9 + min(0.12, 0.2) x 9 = 0.45 + 1.08 = 1.53 s hide,
    # under the 0.8 x 2.2 = 1.76 s the overlap share allows: 2.2 - 1.53 exposed
    assert P.fsdp_exposed_s(1.0, 1.2, 0.5, 2.0, 10, 0.8) == pytest.approx(0.67)
    # compute-rich: 9 x 0.1 x 2 = 1.8 s could hide, the overlap share allows 1.6: 0.4 exposed
    assert P.fsdp_exposed_s(1.0, 1.0, 10.0, 20.0, 10, 0.8) == pytest.approx(0.4)
    # one layer: nothing before it to run beside
    assert P.fsdp_exposed_s(1.0, 1.0, 10.0, 20.0, 1, 0.8) == pytest.approx(2.0)


def test_zero3_traffic_on_two_rtx_4090_by_hand():
    """Llama-2-7B LoRA (r64 all-linear) with ZeRO-3 on two 4090s, 1 x 2048 tokens: per
    micro-batch two all-gathers of the bf16 weights, each GPU receiving half (ring (n-1)/n),
    and a reduce-scatter of the fp32 adapter gradients, over 15 GB/s x the collective
    efficiency."""
    arch = resolve_model("llama-2-7b")[0]
    t = Training(arch=arch, method="lora", lora_rank=64, lora_targets="all-linear",
                 micro_batch=1, seq_len=2048, precision="bf16", checkpointing=True, zero_stage=3)
    hw = Hardware(gpu=catalog.gpu("rtx-4090"), num_gpus=2)
    n = training_memory(arch, t, 2).trainable_params
    st = training_step_time(arch, t, hw, training_flops_per_token(arch, 2048, "lora", 64,
                                                                  "all-linear", True), n)
    total = count_params(arch).total
    assert total == 6_738_415_616  # meta-llama/Llama-2-7b-hf, as transformers counts it
    bw = 15e9 * A.COLLECTIVE_EFFICIENCY.value
    # and each of the 3 x 32 per-layer collectives pays NCCL's ring latency over PCIe,
    # 8.4 + 1 x 5.7 us (parallel.ring_latency_s)
    latency = 3 * 32 * (8.4 + 5.7) * 1e-6
    assert st.communication_s == pytest.approx((2 * 0.5 * 2 * total + 0.5 * 4 * n) / bw
                                               + latency)
    assert "staged through host memory" in st.link
    # a 2048-token micro-batch cannot hide 1.8 s of gathers: more than the 20% the overlap
    # share alone would leave exposed
    assert st.communication_exposed_s > (1 - A.COMM_OVERLAP.value) * st.communication_s


def test_nf4_dequantisation_bytes_by_hand():
    from gpuhours.estimate.quant import nf4_dequant_bytes_per_weight

    # per weight: packed 4 bits (0.5) + the nested absmax pass (1 byte read, fp32 written, per
    # 64) + the fp32 absmax read by the 4-bit kernel (per 64) + the bf16 copy written and read
    # back by the matmul (2 + 2)
    assert nf4_dequant_bytes_per_weight() == pytest.approx(0.5 + 5 / 64 + 4 / 64 + 4.0)
    assert nf4_dequant_bytes_per_weight(4.0) == pytest.approx(0.5 + 9 / 64 + 8.0)  # fp32 compute


def test_gathers_cannot_hide_behind_more_compute_than_the_step_has():
    """Answer.AI's #410 setup (Llama-2-7B LoRA, 1 x 512, ZeRO-3 on two RTX 3090s): 2.2 s of
    gathers over the host-staged link beside well under a second of compute. What is exposed is
    at least the traffic less all the compute, and at least each pass's first layer."""
    arch = resolve_model("llama-2-7b")[0]
    t = Training(arch=arch, method="lora", lora_rank=64, lora_targets="all-linear",
                 micro_batch=1, seq_len=512, precision="bf16", checkpointing=True, zero_stage=3)
    hw = Hardware(gpu=catalog.gpu("rtx-3090"), num_gpus=2)
    n = training_memory(arch, t, 2).trainable_params
    st = training_step_time(arch, t, hw, training_flops_per_token(arch, 512, "lora", 64,
                                                                  "all-linear", True), n)
    gather_pass_s = 0.5 * 2 * count_params(arch).total / (8.25e9 * A.COLLECTIVE_EFFICIENCY.value)
    assert gather_pass_s == pytest.approx(1.089, abs=0.001)
    assert st.communication_s > 2 * gather_pass_s
    assert st.communication_exposed_s >= st.communication_s - st.compute_s - st.host_exposed_s
    assert st.communication_exposed_s >= 2 * gather_pass_s / arch.num_layers
    assert st.communication_exposed_s > 1.0



def test_zero3_beside_tensor_parallelism_is_gathered_layer_by_layer(tiny, toy_gpu):
    """The data-parallel collective of a tp x dp layout under ZeRO-3 is gathered layer by layer
    too. The tiny model has two layers: in each pass only the second layer's traffic can run
    beside the first layer's compute, so with compute to spare half of it stays exposed (the
    overlap share alone would leave 20%)."""
    t = Training(arch=tiny, micro_batch=64, seq_len=2048, precision="bf16", zero_stage=3, tp=2)
    hw = Hardware(gpu=toy_gpu, num_gpus=8)
    n = training_memory(tiny, t, 8).trainable_params
    st = training_step_time(tiny, t, hw, training_flops_per_token(tiny, 2048), n)
    dp = st.collectives[-1]
    assert dp.name == "data-parallel gradients" and dp.seconds > 0
    assert st.compute_s > 10 * dp.seconds  # compute to spare
    assert dp.exposed_s == pytest.approx(dp.seconds / 2)
