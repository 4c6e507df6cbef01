"""The dequantisation cap of weight-only quantised (GPTQ/AWQ) decode GEMMs: a step converts at
most SMs x boost clock x DEQUANT_WEIGHTS_PER_SM_CYCLE weights a second (issue 13,
docs/generation.md). Worked by hand from the model's config and the GPU's datasheet figures."""

from __future__ import annotations

import pytest

from gpuhours.catalog.schema import GpuSpec
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.generation import (
    decode_bandwidth_efficiency,
    estimate_generation,
    generation_summary,
)
from gpuhours.resolve import resolve_gpu, resolve_model
from gpuhours.setup import Generation

#: Qwen2.5-7B's config.json: d 3584, 28 layers, 28 query / 4 KV heads of 128, MLP 18944, vocab
#: 152064, untied head; counted by hand: q and o d x d, k and v d x 512 (+ q/k/v biases), the
#: three MLP matrices d x 18944, two norms of d; the final norm d; the head vocab x d
D, LAYERS, FF, VOCAB = 3584, 28, 18944, 152064
PER_LAYER = 2 * D * D + 2 * D * 512 + (D + 2 * 512) + 3 * D * FF + 2 * D
DECODER = LAYERS * PER_LAYER + D  # 6.53e9: the weights a 4-bit step dequantises
HEAD = VOCAB * D


def _step_s(gpu: GpuSpec, weight_bytes: float) -> float:
    arch, _ = resolve_model("qwen2.5-7b", None)
    g = Generation(arch=arch, prompt_tokens=1, output_tokens=1, batch=1, engine="vllm",
                   weight_bytes_per_param=weight_bytes)
    return estimate_generation(g, gpu).decode_step_s_first


def test_a_4bit_step_on_an_a100_is_bound_by_its_weights_per_sm_cycle() -> None:
    """A100 80GB (108 SMs x 1.41 GHz, whitepaper): 6.53e9 weights / (108 x 1.41e9 x 14.9)
    = 2.88 ms, where their 0.56-byte reads take 3.66e9 B / (2,039 GB/s x 0.8 x 3584 / 4084)
    = 2.55 ms: the step is host + 2.88 ms + the 16-bit head's 1.09 GB / the same bandwidth
    + 28 layers x 4 quantised GEMMs x 5 us (Marlin's fixed time a GEMM)."""
    gpu = resolve_gpu("a100-80gb")
    assert (gpu.sm_count, gpu.boost_clock_mhz) == (108, 1410)
    assert A.DEQUANT_WEIGHTS_PER_SM_CYCLE.value == 14.9
    assert A.QUANTISED_GEMM_FIXED_S.value == 5e-6
    arch, _ = resolve_model("qwen2.5-7b", None)
    bw = 2039e9 * A.BANDWIDTH_EFFICIENCY.value * D / (D + A.DECODE_BANDWIDTH_HALF_WIDTH.value)
    assert decode_bandwidth_efficiency(arch) * 2039e9 == pytest.approx(bw)
    dequant = DECODER / (108 * 1410e6 * 14.9)
    assert dequant == pytest.approx(2.88e-3, rel=0.01)
    assert DECODER * 0.56 / bw == pytest.approx(2.55e-3, rel=0.01)  # bytes: not the bound
    host = A.DECODE_HOST_STEP_S["vllm"].value
    kv = 2 * LAYERS * 512 * 2 * 1 / bw  # one token of K and V, bf16
    expected = host + dequant + HEAD * 2.0 / bw + kv + LAYERS * 4 * 5e-6
    assert _step_s(gpu, 0.56) == pytest.approx(expected, rel=2e-3)


def test_bytes_bind_when_they_take_longer_and_16bit_or_unrecorded_gpus_pay_nothing() -> None:
    """8-bit weights on the same A100: 6.53e9 bytes take 4.56 ms at its decode bandwidth,
    longer than the 2.88 ms of conversion: the bytes set the step (each quantised GEMM's fixed
    5 us beside). bf16 weights are not converted. A GPU whose SMs and clock the catalog does
    not record is not capped."""
    gpu = resolve_gpu("a100-80gb")
    bw = 2039e9 * A.BANDWIDTH_EFFICIENCY.value * D / (D + A.DECODE_BANDWIDTH_HALF_WIDTH.value)
    host = A.DECODE_HOST_STEP_S["vllm"].value
    kv = 2 * LAYERS * 512 * 2 / bw
    fixed = LAYERS * 4 * 5e-6
    assert _step_s(gpu, 1.0) == pytest.approx(host + (DECODER + HEAD * 2) / bw + kv + fixed,
                                              rel=2e-3)
    bf16 = _step_s(gpu, 2.0)
    assert bf16 == pytest.approx(host + (DECODER + HEAD) * 2 / bw + kv, rel=2e-3)
    bare = gpu.model_copy(update={"sm_count": None, "boost_clock_mhz": None, "sm_source": ""})
    assert _step_s(bare, 0.56) == pytest.approx(
        host + (DECODER * 0.56 + HEAD * 2) / bw + kv + fixed, rel=2e-3)
    assert _step_s(bare, 0.56) < _step_s(gpu, 0.56)


def test_the_estimate_names_the_cap_and_its_figures() -> None:
    arch, _ = resolve_model("qwen2.5-7b", None)
    gpu = resolve_gpu("a100-80gb")
    g = Generation(arch=arch, prompt_tokens=1, output_tokens=16, batch=1, engine="vllm",
                   weight_bytes_per_param=0.56)
    e = estimate_generation(g, gpu)
    assert e.decode_bound.startswith("dequantisation")
    s = generation_summary(e, g, gpu)
    used = {a["name"]: a for a in s["assumptions"]}
    assert used["dequant_weights_per_sm_cycle"]["value"] == 14.9
    assert "22, 23, 55 and 56" in used["dequant_weights_per_sm_cycle"]["source"]
    assert used["quantised_gemm_fixed_s"]["value"] == 5e-6
    assert used["a100-80gb.sm_count_x_boost_clock"]["value"] == 108 * 1410
    assert "SMs x clock" in s["basis"]
    # 16-bit weights name neither
    g16 = g.model_copy(update={"weight_bytes_per_param": 2.0})
    s16 = generation_summary(estimate_generation(g16, gpu), g16, gpu)
    assert not {"dequant_weights_per_sm_cycle", "quantised_gemm_fixed_s"} & {
        a["name"] for a in s16["assumptions"]}


def test_sm_figures_go_together_and_need_a_source() -> None:
    gpu = resolve_gpu("a100-80gb")
    row = gpu.model_dump()
    with pytest.raises(ValueError, match="go together"):
        GpuSpec(**{**row, "boost_clock_mhz": None})
    with pytest.raises(ValueError, match="sm_source"):
        GpuSpec(**{**row, "sm_source": ""})


def test_recorded_sms_and_clocks_agree_with_each_parts_fp32_peak() -> None:
    """An independent check of the catalog's SM figures: the datasheet fp32 peak is SMs x
    FP32 lanes x 2 x boost clock, 64 lanes an SM on Ampere's GA100, 128 on Hopper. The H20's
    clock is assumed (not published): its reported 44 TFLOPS would need 2.2 GHz at 78 SMs, 11%
    above the 1.98 taken, and its source says so."""
    from gpuhours import catalog

    lanes = {"ampere": 64, "hopper": 128}
    recorded = [g for g in catalog.gpus() if g.sm_count is not None]
    assert {"a100-80gb", "h100-sxm", "h20"} <= {g.name for g in recorded}
    for g in recorded:
        assert g.sm_count is not None and g.boost_clock_mhz is not None and g.dense_tflops.fp32
        implied = g.sm_count * lanes[g.generation] * 2 * g.boost_clock_mhz * 1e6 / 1e12
        if g.name == "h20":
            assert implied / g.dense_tflops.fp32 == pytest.approx(0.90, abs=0.01)
            assert "ASSUMED" in g.sm_source
        else:
            assert implied == pytest.approx(g.dense_tflops.fp32, rel=0.02), g.name


def test_marlin_terms_only_on_engines_that_run_marlin() -> None:
    """transformers' generate runs bitsandbytes/AutoAWQ/GPTQModel kernels, not Marlin: no cap,
    no fitted Marlin constant among its assumptions, and its basis says so (a reviewer's
    finding); a GPU without SM figures says the conversion is not costed."""
    import json

    from typer.testing import CliRunner

    from gpuhours.cli import app

    def run(*args: str) -> dict:
        result = CliRunner().invoke(app, ["generation", "--model", "qwen2.5-7b",
                                          "--weight-bytes-per-param", "0.56", "--json", *args])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    hf = run("--gpu", "a100-80gb", "--engine", "hf-generate")
    assert "not modelled" in hf["basis"]
    assert not any(a["name"] == "dequant_weights_per_sm_cycle" for a in hf["assumptions"])
    vllm = run("--gpu", "a100-80gb")
    assert any(a["name"] == "dequant_weights_per_sm_cycle" for a in vllm["assumptions"])
    assert "not costed" in run("--gpu", "h800")["basis"]
