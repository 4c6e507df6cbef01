"""The host's time per operator of Megatron-Core's MoE router and token dispatcher
(assumptions.MEGATRON_MOE_HOST_OP_RATIO, CUDA_LAUNCH_HOST_S; estimate/host.py
megatron_moe_host_op_weight), from the CPU measurement in tests/data/megatron_host_op_times.json
(scripts/bench_megatron_host_ops.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuhours.estimate import assumptions as A
from gpuhours.estimate.host import (
    host_forward_ops_per_micro_batch,
    host_ops_per_micro_batch,
    megatron_moe_host_op_weight,
    megatron_moe_ops_per_layer,
)
from gpuhours.setup import Training

DATA = json.loads(
    (Path(__file__).parent / "data" / "megatron_host_op_times.json").read_text())


def _fastest() -> dict[tuple[str, str, str, int], float]:
    """Microseconds per counted operator of each configuration, the fastest of its rounds
    (each round's figure is already the fastest of its repeats)."""
    best: dict[tuple[str, str, str, int], float] = {}
    for row in DATA["rows"]:
        if row["kind"] == "floor":
            continue
        name = row.get("model") or row.get("router_dtype") or row["spec"]
        precision = "bf16" if row["precision"].startswith("bf16") else "fp32"
        key = (row["kind"], name, precision, row["tokens"])
        per_op = row["min_s"] / row["ops"] * 1e6  # the time per call over the count
        best[key] = min(best.get(key, float("inf")), per_op)
    return best


def test_the_file_says_where_and_when() -> None:
    assert DATA["torch"].startswith("2.13")
    assert DATA["date"] == "2026-11-25"
    assert "EPYC" in DATA["machine"]
    assert "d98e8a64" in DATA["source"]


def test_ratio_is_the_measured_one() -> None:
    best = _fastest()
    ratios = []
    for tokens in (8, 16):
        for precision in ("bf16", "fp32"):
            eager = (best[("eager", "qwen2", precision, tokens)]
                     + best[("eager", "llama", precision, tokens)]) / 2
            routers = [v for k, v in best.items()
                       if k[0] == "router_dispatch" and k[2:] == (precision, tokens)]
            assert len(routers) == 2  # fp64 and the input's dtype
            ratios.append(sum(routers) / 2 / eager)
    # every size and precision has Megatron's operators dearer than the eager layer's
    assert min(ratios) > 1.3
    measured = sum(ratios) / len(ratios)
    assert A.MEGATRON_MOE_HOST_OP_RATIO.value == pytest.approx(measured, abs=0.05)


def test_the_local_layer_is_dearer_too_but_not_used() -> None:
    best = _fastest()
    for tokens in (8, 16):
        for precision in ("bf16", "fp32"):
            eager = min(best[("eager", m, precision, tokens)] for m in ("qwen2", "llama"))
            assert best[("mcore_layer", "local", precision, tokens)] > 1.3 * eager


def test_weight_applies_the_ratio_to_the_host_side_part() -> None:
    # (1.8 x (32 - 4) + 4) / 32 = (50.4 + 4) / 32 = 1.7
    assert A.MEGATRON_MOE_HOST_OP_RATIO.value == 1.8
    assert A.CUDA_LAUNCH_HOST_S.value == 4e-6
    assert A.HOST_S_PER_OP.value == 32e-6
    assert megatron_moe_host_op_weight() == pytest.approx(1.7)


def _t(**kw: object) -> Training:
    base: dict[str, object] = {"model": "qwen3-30b-a3b", "precision": "bf16",
                               "kernels": "megatron", "seq_len": 4096, "ep": 8,
                               "moe_dispatch": "fused"}
    return Training(**{**base, **kw})  # type: ignore[arg-type]


def test_one_moe_layers_router_and_dispatcher_by_hand() -> None:
    # Qwen3-30B-A3B (48 layers, all MoE, 128 experts), EP 8, fused permute, bf16 router.
    # Forward: the router 11 (TE's gating GEMM 1, top-k 1, softmax's cast and kernel 2,
    # type_as 1, routing_probs 2, routing_map 4), the token counts 7, the copies to the host
    # 4, the permute's 4 Triton launches, 3 all-to-alls, the chunk sort there and back 4, the
    # unpermute 1: 34. Backward: the router 8, the permute 1, 3 all-to-alls, the sorts 2, the
    # unpermute 1, the branch's sum and the weighted SwiGLU's reduction 2: 17. 51 operators.
    t = _t()
    assert megatron_moe_ops_per_layer(t.arch, t) == (34.0, 17.0)
    # at 1.7 eager operators each: 57.8 and 28.9
    fwd, bwd = megatron_moe_ops_per_layer(t.arch, t, megatron_moe_host_op_weight())
    assert (fwd, bwd) == (pytest.approx(57.8), pytest.approx(28.9))
    # on an x86 H100 host: 51 x 32 us x 1.7 = 2.7744 ms a layer a micro-batch, where the eager
    # rate gave 51 x 32 us = 1.632 ms
    assert (fwd + bwd) * A.HOST_S_PER_OP.value == pytest.approx(2.7744e-3)
    # the whole micro-batch: 48 layers x 51 x 0.7 more operators' worth
    more = (host_ops_per_micro_batch(t.arch, t, megatron_moe_host_op_weight())
            - host_ops_per_micro_batch(t.arch, t))
    assert more == pytest.approx(48 * 51 * 0.7)
    # a scoring pass: the forward's 34 only
    more_fwd = (host_forward_ops_per_micro_batch(t.arch, t, megatron_moe_host_op_weight())
                - host_forward_ops_per_micro_batch(t.arch, t))
    assert more_fwd == pytest.approx(48 * 34 * 0.7)


def test_graphed_router_takes_its_weighted_operators_off() -> None:
    # a "moe" graph holds the router and dispatcher: their weight must leave with them
    t = _t(cuda_graph_scope=("moe",))
    w = megatron_moe_host_op_weight()
    assert host_ops_per_micro_batch(t.arch, t, w) == pytest.approx(
        host_ops_per_micro_batch(t.arch, t))


def test_dense_and_eager_paths_unchanged() -> None:
    w = megatron_moe_host_op_weight()
    dense = _t(model="qwen3-8b", ep=1)
    assert host_ops_per_micro_batch(dense.arch, dense, w) == host_ops_per_micro_batch(
        dense.arch, dense)
    eager = _t(kernels="eager", ep=1, moe_dispatch="fused")
    assert host_ops_per_micro_batch(eager.arch, eager, w) == host_ops_per_micro_batch(
        eager.arch, eager)
