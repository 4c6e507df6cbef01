"""Megatron-Core's MoE router and all-to-all dispatcher on the host (estimate/host.py
MEGATRON_ROUTER_OPS, MEGATRON_A2A_*, MEGATRON_MOE_FORWARD_SYNCS) and the forward's waits
(estimate/timing.py host_gpu_combined_s)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuhours.estimate import assumptions as A
from gpuhours.estimate.host import (
    MEGATRON_MOE_FORWARD_SYNCS,
    megatron_alltoall_ops,
    megatron_moe_forward_syncs_per_micro_batch,
    megatron_ops_by_pass,
    megatron_ops_per_micro_batch,
)
from gpuhours.estimate.moe_gemm import routing_bytes_per_token_layer
from gpuhours.estimate.timing import host_gpu_combined_s
from gpuhours.setup import Training

#: Megatron-Core @d98e8a64's router and dispatcher run on CPU and counted with count_ops
#: (scripts/megatron_moe_dispatch_count.py)
COUNTS = json.loads(
    (Path(__file__).parent / "data" / "megatron_moe_alltoall_counts.json").read_text())


def _cuda_counts(name: str) -> tuple[float, float]:
    """A CPU run's counts as the same code counts on a GPU with Transformer Engine: the
    stand-ins (the normed input's `x * 1`, the experts' product and, where the probs are not
    bf16, their cast) taken off; the device-to-host copies the run counted apart put in; the
    clone of the host-side counts' transpose (combine_preprocess's .T.ravel() of
    num_global_tokens_per_local_expert, a CPU tensor on a GPU too once copied, made only where
    it is not already contiguous: EP > 1 with several local experts) taken off; an fp32
    router's gating, which on CPU casts the input and the weight before torch.mm, one
    Transformer Engine GEMM (-2); and the weighted SwiGLU's probs-gradient reduction, which
    the stand-in does not make, added to the backward (+1)."""
    run = COUNTS["configs"][name]
    stand = COUNTS["stand_in"]
    probs_cast = run["router_dtype"] is not None  # fp32, fp64: the probs cast to bf16
    fwd = sum(run["forward"].values()) + run["dtoh_copies"]
    fwd -= sum(stand["forward"].values()) - (0 if probs_cast else 1)
    bwd = sum(run["backward"].values()) + 1
    bwd -= sum(stand["backward"].values()) - (0 if probs_cast else 1)
    if run["ep"] > 1 and run["experts"] // run["ep"] > 1:
        fwd -= 1
        assert run["forward"]["aten.clone"] == 4  # the map's, the probs', the counts', this
    if run["router_dtype"] == "fp32":
        fwd -= 2
    return fwd, bwd


@pytest.mark.parametrize(("name", "dtype"), [
    ("ep2_local4_fp64", "fp64"), ("ep2_local1_fp64", "fp64"), ("ep1_local4_fp64", "fp64"),
    ("ep2_local4_fp32", "fp32"), ("ep2_local4_none", "bf16")])
def test_unfused_counts_match_the_run_dispatcher(name: str, dtype: str) -> None:
    run = COUNTS["configs"][name]
    assert megatron_alltoall_ops(run["experts"], run["ep"], False, dtype) == pytest.approx(
        _cuda_counts(name))


def test_the_run_dispatcher_waits_once_a_forward_at_its_sync_point() -> None:
    for run in COUNTS["configs"].values():
        assert run["event_synchronize"] == MEGATRON_MOE_FORWARD_SYNCS["alltoall-unfused"]
    points = {n: r["sync_point"] for n, r in COUNTS["configs"].items()}
    assert points["ep2_local4_fp64"] == "before_ep_alltoall"
    assert points["ep1_local4_fp64"] == "before_permutation_2"


def test_fused_by_hand() -> None:
    # Qwen3-30B-A3B's 128 experts on EP 8 (16 local), the fp64 router (NeMo-RL's DeepSeek and
    # 235B recipes keep the base config's): forward router 13, token counts 7, four copies to
    # the host, the permute's 4 Triton launches, 3 all-to-alls, the chunk sort there and back
    # 4, the unpermute 1: 36; backward router 12, permute 1, all-to-alls 3, sorts 2, unpermute
    # 1, the branch's sum and the weighted SwiGLU's reduction 2: 21
    assert megatron_alltoall_ops(128, 8, True, "fp64") == (36.0, 21.0)
    # unfused, the same but for the counts' fifth copy (+1), the permute's 6 operators (+2;
    # backward 4: +3), the sorts' three cats (-1; backward 3: +1) and the unpermute's zeros
    # and scatter_add_ (+1; backward 1): forward 39, backward 25
    assert megatron_alltoall_ops(128, 8, False, "fp64") == (39.0, 25.0)


def _t(**kw: object) -> Training:
    base: dict[str, object] = {"model": "qwen3-30b-a3b", "precision": "bf16",
                               "kernels": "megatron", "seq_len": 4096}
    return Training(**{**base, **kw})  # type: ignore[arg-type]


def test_forward_waits_by_dispatch_graphs_and_recompute() -> None:
    t = _t(moe_dispatch="alltoall-unfused", ep=8)
    assert megatron_moe_forward_syncs_per_micro_batch(t.arch, t) == 48
    assert megatron_moe_forward_syncs_per_micro_batch(
        t.arch, t.model_copy(update={"checkpointing": True})) == 96
    allgather = t.model_copy(update={"moe_dispatch": "allgather-unfused"})
    assert megatron_moe_forward_syncs_per_micro_batch(allgather.arch, allgather) == 144
    # a graphed MoE layer needs drop-and-pad routing: no wait
    graphed = t.model_copy(update={"cuda_graph_scope": ("moe",)})
    assert megatron_moe_forward_syncs_per_micro_batch(graphed.arch, graphed) == 0
    dense = _t(model="qwen3-8b")
    assert megatron_moe_forward_syncs_per_micro_batch(dense.arch, dense) == 0


def test_passes_add_up_and_recompute_goes_to_the_backward() -> None:
    t = _t(moe_dispatch="alltoall-unfused", ep=8)
    fwd, bwd = megatron_ops_by_pass(t.arch, t)
    assert fwd + bwd == pytest.approx(megatron_ops_per_micro_batch(t.arch, t))
    ckpt = t.model_copy(update={"checkpointing": True})
    c_fwd, c_bwd = megatron_ops_by_pass(ckpt.arch, ckpt)
    # the forward's layers again in the backward; the 32 outside operators not again
    assert c_fwd == fwd
    assert c_bwd == pytest.approx(bwd + fwd - 32.0)


def test_a_waiting_forward_is_combined_apart_from_the_backward() -> None:
    # host-bound forward (host 8 ms, GPU 1 ms), GPU-bound backward (host 1, GPU 8), p = 1.5:
    # together, one p-norm of 9 and 9: 9 x 2^(2/3) = 14.29 ms, the backward's GPU time hiding
    # the forward's host time. Apart (each forward layer waits for the GPU, so the host
    # cannot run ahead into the backward): 2 x (8^1.5 + 1)^(2/3) = 2 x 8.23 = 16.47 ms, plus
    # the waits' latency (48 x 30 us = 1.44 ms): 17.91 ms
    assert A.HOST_GPU_OVERLAP_P.value == 1.5
    together = host_gpu_combined_s(9e-3, 9e-3)
    assert together == pytest.approx(9e-3 * 2 ** (2 / 3))
    apart = host_gpu_combined_s(9e-3, 9e-3, forward_pass=(8e-3, 1e-3), sync_s=48 * 30e-6)
    assert apart == pytest.approx(2 * (8 ** 1.5 + 1) ** (2 / 3) * 1e-3 + 1.44e-3)
    assert apart - together == pytest.approx(3.62e-3, abs=0.01e-3)
    # a forward and a backward of the same ratio lose nothing apart (homogeneity): only the
    # waits' latency is added
    alike = host_gpu_combined_s(6e-3, 9e-3, forward_pass=(2e-3, 3e-3), sync_s=1e-3)
    assert alike == pytest.approx(host_gpu_combined_s(6e-3, 9e-3) + 1e-3)


def test_unfused_permute_moves_more_than_the_fused() -> None:
    # Qwen3-30B-A3B: k 8, d 2048, bf16, 128 experts, no recompute. Fused: forward (3 x 8 + 1),
    # backward (3 x 8 + 2) elements of d at 2 bytes, router 4 passes x 128 x 4 bytes each way:
    # (25 + 26) x 4096 + 2 x 2048 = 212,992. Unfused with the fp64 router: (73 + 73) x 4096 +
    # 2 x 4 x 128 x 8 = 606,208
    t = _t()
    assert routing_bytes_per_token_layer(t.arch, "megatron", 2.0, False, "fused", 8,
                                         "bf16") == pytest.approx(212_992.0)
    assert routing_bytes_per_token_layer(t.arch, "megatron", 2.0, False, "alltoall-unfused",
                                         8, "fp64") == pytest.approx(606_208.0)
