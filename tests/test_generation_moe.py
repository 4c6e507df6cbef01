"""MoE decode reads only the routed experts its tokens go to (issue 13: the published SGLang
Qwen3-30B-A3B rows were 32-72% slow in the estimate when every expert was read)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuhours import catalog
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.blocks import routed_expert_params
from gpuhours.estimate.generation import (
    decode_bandwidth_efficiency,
    estimate_generation,
    experts_touched,
    weight_bytes_read_per_step,
)
from gpuhours.setup import Generation

#: 8 experts of width 1024, top-2, on 2 layers of d 512 (Mixtral's shape, small)
MOE = ModelArch(name="hand-moe", model_type="mixtral", hidden_size=512, num_layers=2,
                num_heads=8, num_kv_heads=8, head_dim=64, intermediate_size=1024,
                vocab_size=1000, tie_embeddings=False, gated_mlp=True, num_experts=8,
                experts_per_token=2, moe_intermediate_size=1024)


def test_experts_touched_by_hand() -> None:
    # one token: its 2 experts; two tokens: 8 x (1 - (6/8)^2) = 3.5; many: all 8
    assert experts_touched(MOE, 1) == pytest.approx(2.0)
    assert experts_touched(MOE, 2) == pytest.approx(3.5)
    assert experts_touched(MOE, 1000) == pytest.approx(8.0)


def test_decode_at_batch_one_reads_the_routed_experts_only() -> None:
    # 2 layers x 8 experts x 3 x 512 x 1024 = 25,165,824 routed weights; one token reads 2 of
    # 8: 6/8 of them, 18,874,368 weights x 2 bytes, are not read
    assert routed_expert_params(MOE) == 25_165_824
    gpu = catalog.gpu("a100-80gb")
    e = estimate_generation(Generation(arch=MOE, prompt_tokens=1, output_tokens=1, batch=1),
                            gpu)
    whole = weight_bytes_read_per_step(MOE, 2.0)
    assert e.weights_read_bytes_per_step == pytest.approx(whole - 18_874_368 * 2)
    bw = 2039e9 * decode_bandwidth_efficiency(MOE)
    kv = 1 * 2 * 2 * 8 * 64 * 2  # one token's K and V: 2 layers x 8 heads x 64 x 2 bytes
    passes = A.DECODE_KV_PASSES["vllm"].value
    # and vLLM's fused MoE path launches 8 routing kernels a layer a dense MLP does not
    routing = 2 * 8 * A.SGLANG_MARLIN_MOE_EMPTY_LAUNCH_S.value
    assert e.decode_step_s_first == pytest.approx(
        A.DECODE_HOST_STEP_S["vllm"].value + (whole - 18_874_368 * 2 + passes * kv) / bw
        + routing, rel=1e-6)


def test_a_dense_model_reads_every_weight() -> None:
    dense = replace(MOE, num_experts=0, experts_per_token=0, moe_intermediate_size=0)
    assert routed_expert_params(dense) == 0
    e = estimate_generation(Generation(arch=dense, prompt_tokens=1, output_tokens=1, batch=1),
                            catalog.gpu("a100-80gb"))
    assert e.weights_read_bytes_per_step == weight_bytes_read_per_step(dense, 2.0)


def _first_step_s(**setup: object) -> float:
    g = Generation(arch=MOE, prompt_tokens=1, output_tokens=1, batch=1, **setup)  # type: ignore[arg-type]
    return estimate_generation(g, catalog.gpu("h100-sxm")).decode_step_s_first


def test_sglang_marlin_moe_launches_every_empty_expert_by_hand(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # SGLang 0.4.6's GPTQ/AWQ MoE (vLLM 0.7.2's marlin_gemm_moe) launches a kernel for every
    # expert of both GEMMs; one token routes to 2 of 8: 2 layers x 2 GEMMs x 6 empty
    # experts = 24 empty launches of 2.4 us a decode step, beside the 2 x 8 routing kernels
    # every fused MoE layer launches (the same small-kernel time)
    launch = A.SGLANG_MARLIN_MOE_EMPTY_LAUNCH_S
    assert launch.value == pytest.approx(2.4e-6)
    int4 = {"engine": "sglang", "weight_bytes_per_param": 0.56}
    with_launches = _first_step_s(**int4)
    monkeypatch.setattr(A, "SGLANG_MARLIN_MOE_EMPTY_LAUNCH_S", replace(launch, value=0.0))
    assert with_launches - _first_step_s(**int4) == pytest.approx((24 + 16) * 2.4e-6)


def test_the_launches_are_named_as_the_bound_when_they_lead() -> None:
    # Qwen3-30B-A3B GPTQ-Int4 at batch 1 on an H20: 48 x 2 x 120 empty launches (29 ms) against
    # ~3 GB of weights read in ~2 ms
    from gpuhours.resolve import resolve_model

    arch, _ = resolve_model("qwen3-30b-a3b", None)
    g = Generation(arch=arch, prompt_tokens=1, output_tokens=8, batch=1, engine="sglang",
                   weight_bytes_per_param=0.56)
    e = estimate_generation(g, catalog.gpu("h20"))
    assert e.decode_bound.startswith("kernel launches")
    assert e.decode_step_s_first > 48 * 2 * 120 * 2.4e-6


@pytest.mark.parametrize("setup", [
    {"engine": "sglang"},  # bf16 weights: the Triton fused-MoE kernel, one launch
    {"engine": "sglang", "matmul_precision": "fp8"},  # fp8 W8A8: the Triton fused-MoE kernel
    {"engine": "vllm", "weight_bytes_per_param": 0.56},  # vLLM: no such constant
])
def test_no_empty_expert_launches_outside_sglang_weight_only_moe(
        setup: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    # the launch time moves only the 2 layers x 8 routing kernels here (and fp8's 2 x 4 input
    # quantisations), no empty expert
    before = _first_step_s(**setup)
    launch = A.SGLANG_MARLIN_MOE_EMPTY_LAUNCH_S
    monkeypatch.setattr(A, "SGLANG_MARLIN_MOE_EMPTY_LAUNCH_S", replace(launch, value=1.0))
    kernels = 2 * 8 + (2 * 4 if setup.get("matmul_precision") == "fp8" else 0)
    assert _first_step_s(**setup) - before == pytest.approx(kernels * (1.0 - launch.value))


def test_routing_kernels_by_hand_and_only_where_a_fused_moe_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """8 kernels a fused MoE layer launches beyond a dense MLP's three (router GEMM, fp32 cast,
    topk_softmax, renormalising sum and divide, the align's fill and kernel, moe_sum: vLLM's
    fused_moe.py), each a small kernel's time: 2 layers x 8 x 2.4 us on this model for vLLM
    and SGLang; none for hf-generate (its Python loop is costed instead) or a dense model."""
    from gpuhours.estimate.generation import FUSED_MOE_ROUTING_KERNELS

    assert FUSED_MOE_ROUTING_KERNELS == 1 + 1 + 1 + 2 + 2 + 1
    launch = A.SGLANG_MARLIN_MOE_EMPTY_LAUNCH_S
    steps = {engine: _first_step_s(engine=engine) for engine in ("vllm", "sglang", "hf-generate")}
    monkeypatch.setattr(A, "SGLANG_MARLIN_MOE_EMPTY_LAUNCH_S", replace(launch, value=0.0))
    for engine in ("vllm", "sglang"):
        assert steps[engine] - _first_step_s(engine=engine) == pytest.approx(2 * 8 * 2.4e-6)
    assert steps["hf-generate"] == pytest.approx(_first_step_s(engine="hf-generate"))
    dense = replace(MOE, num_experts=0, experts_per_token=0, moe_intermediate_size=0)
    g = Generation(arch=dense, prompt_tokens=1, output_tokens=1, batch=1, engine="sglang")
    base = estimate_generation(g, catalog.gpu("h100-sxm")).decode_step_s_first
    monkeypatch.setattr(A, "SGLANG_MARLIN_MOE_EMPTY_LAUNCH_S", replace(launch, value=1.0))
    assert estimate_generation(g, catalog.gpu("h100-sxm")).decode_step_s_first == base


def test_fp8_input_quantisation_kernels_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """W8A8 quantises each of a layer's 4 linear inputs with a kernel of its own (SGLang's
    per_token_group_quant_fp8 before w8a8_block_fp8_matmul): on a dense 2-layer model the step
    moves by 2 x 4 small-kernel times when that time does; bf16 and hf-generate do not move."""
    from gpuhours.estimate.generation import FP8_ACTIVATION_QUANT_KERNELS

    assert FP8_ACTIVATION_QUANT_KERNELS == 4  # qkv, o, gate-up, down
    dense = replace(MOE, num_experts=0, experts_per_token=0, moe_intermediate_size=0)

    def step(**setup: object) -> float:
        g = Generation(arch=dense, prompt_tokens=1, output_tokens=1, batch=1, **setup)  # type: ignore[arg-type]
        return estimate_generation(g, catalog.gpu("h100-sxm")).decode_step_s_first

    setups = [{"engine": "sglang", "matmul_precision": "fp8"}, {"engine": "sglang"},
              {"engine": "hf-generate", "matmul_precision": "fp8",
               "hf_transformers_version": "4.51"}]
    before = [step(**s) for s in setups]
    launch = A.SGLANG_MARLIN_MOE_EMPTY_LAUNCH_S
    monkeypatch.setattr(A, "SGLANG_MARLIN_MOE_EMPTY_LAUNCH_S", replace(launch, value=1.0))
    after = [step(**s) for s in setups]
    assert after[0] - before[0] == pytest.approx(2 * 4 * (1.0 - launch.value))
    assert after[1] == pytest.approx(before[1]) and after[2] == pytest.approx(before[2])
