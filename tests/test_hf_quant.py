"""transformers' GPTQModel and AutoAWQ linears in `generate` (estimate/hf_quant.py): the
per-linear costs worked by hand for one small shape, a decode step worked by hand, and the
refusals, each naming its field."""

from __future__ import annotations

from typing import Any

import pytest

from gpuhours.api import estimate_generation
from gpuhours.errors import FieldError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate import hf_quant
from gpuhours.estimate.arch import from_hf_config
from gpuhours.resolve import resolve_gpu, resolve_model
from gpuhours.setup import Generation, Hardware

#: one Qwen2 layer: d 64, 4 query heads and 2 KV heads of 16, MLP 128 (gated)
TINY = {"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 1,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "intermediate_size": 128, "vocab_size": 1000, "tie_word_embeddings": True,
        "hidden_act": "silu"}


def test_the_linears_of_one_layer_by_hand() -> None:
    arch = from_hf_config(TINY, "tiny")
    # q 64x64, k 64x32, v 64x32, o 64x64, gate 64x128, up 64x128, down 128x64: 7 linears
    assert hf_quant.linear_count(arch) == 7
    # AutoAWQ below 1,024 tokens: 8 split-k partials of tokens x N fp16 written and read back
    # by the sum: 2 x 8 x 1 x (64 + 32 + 32 + 64 + 128 + 128 + 64 = 512) x 2 bytes
    assert hf_quant.extra_bytes(hf_quant.AUTOAWQ, arch, 1) == 2 * 8 * 512 * 2 == 16384
    assert hf_quant.extra_bytes(hf_quant.AUTOAWQ, arch, 1023) == 2 * 8 * 1023 * 512 * 2
    # at 1,024 tokens: each weight written in fp16 and read back, 4 bytes a weight:
    # 64*64 + 2*64*32 + 64*64 + 2*64*128 + 128*64 = 36,864 weights
    assert hf_quant.extra_bytes(hf_quant.AUTOAWQ, arch, 1024) == 4 * 36864 == 147456
    # Marlin dequantises in registers: nothing beyond its weights; one fixed-time GEMM a linear
    assert hf_quant.extra_bytes(hf_quant.GPTQMODEL, arch, 1) == 0.0
    assert hf_quant.marlin_gemms(hf_quant.GPTQMODEL, arch) == 7
    assert hf_quant.marlin_gemms(hf_quant.AUTOAWQ, arch) == 0
    # host: AutoAWQ's one extra operator at hf-generate's time per operator (0.88 ms a layer
    # over 79 operators: 11.14 us); GPTQModel's the fitted constant
    assert hf_quant.host_s_per_linear(hf_quant.AUTOAWQ) == pytest.approx(0.88e-3 / 79)
    assert hf_quant.host_s_per_linear(hf_quant.GPTQMODEL) == A.HF_GPTQMODEL_LINEAR_HOST_S.value


def _step(model: str, kernel: str | None, weight_bytes: float, **kw: Any) -> float:
    arch, _ = resolve_model(model, None)
    g = Generation(arch=arch, model=model, prompt_tokens=1, output_tokens=16, batch=1,
                   engine="hf-generate", hf_transformers_version="4.51.3",
                   weight_bytes_per_param=weight_bytes, hf_quant_linear=kernel, **kw)
    return estimate_generation(g, Hardware(gpu=resolve_gpu("h20"))).decode_step_s_first


def test_a_host_bound_decode_step_by_hand() -> None:
    # Qwen3-4B, 36 layers of 7 linears, batch 1 on an H20: the GPU's part (2.5 GB of 4-bit
    # weights and a 0.8 GB bf16 LM head, ~2 ms) hides under the host's, so the step is the
    # engine step (1 ms) + 36 x (0.88 ms + 7 x 0.88 ms / 79)
    awq = _step("qwen3-4b", hf_quant.AUTOAWQ, 0.56)
    assert awq == pytest.approx(1e-3 + 36 * (0.88e-3 + 7 * 0.88e-3 / 79), rel=1e-9)
    # Qwen3-0.6B GPTQ-Int8, 28 layers: + 7 x the fitted GPTQModel host time a layer
    gptq = _step("qwen3-0.6b", hf_quant.GPTQMODEL, 1.0)
    assert gptq == pytest.approx(
        1e-3 + 28 * (0.88e-3 + 7 * A.HF_GPTQMODEL_LINEAR_HOST_S.value), rel=1e-9)
    # the same weights without the library named: the bytes' time alone, a bf16 step's host
    assert _step("qwen3-0.6b", None, 1.0) == pytest.approx(1e-3 + 28 * 0.88e-3, rel=1e-9)


@pytest.mark.parametrize(("kw", "fields"), [
    ({"engine": "vllm"}, ("hf_quant_linear", "engine")),
    ({"weight_bytes_per_param": 1.0}, ("weight_bytes_per_param", "hf_quant_linear")),
    ({"tensor_parallel": 2}, ("tensor_parallel", "device_map_gpus")),
    ({"device_map_gpus": 2}, ("tensor_parallel", "device_map_gpus")),
    ({"hf_transformers_version": "5.0"}, ("hf_transformers_version", "hf_quant_linear")),
    ({"model": "qwen3-30b-a3b"}, ("hf_quant_linear",)),
])
def test_what_is_not_modelled_is_refused_naming_the_field(kw: dict[str, Any],
                                                          fields: tuple[str, ...]) -> None:
    model = kw.pop("model", "qwen3-4b")
    arch, _ = resolve_model(model, None)
    setup = {"arch": arch, "model": model, "prompt_tokens": 1, "output_tokens": 16,
             "batch": 1, "engine": "hf-generate", "hf_transformers_version": "4.51.3",
             "weight_bytes_per_param": 0.56, "hf_quant_linear": hf_quant.AUTOAWQ, **kw}
    with pytest.raises(FieldError) as e:
        estimate_generation(Generation(**setup), Hardware(gpu=resolve_gpu("h20")))
    assert e.value.fields == fields


def test_gptqmodel_is_refused_before_transformers_449_and_for_fp8() -> None:
    arch, _ = resolve_model("qwen3-0.6b", None)
    base = {"arch": arch, "prompt_tokens": 1, "output_tokens": 16, "batch": 1,
            "engine": "hf-generate", "hf_quant_linear": hf_quant.GPTQMODEL}
    h20 = Hardware(gpu=resolve_gpu("h20"))
    with pytest.raises(FieldError, match="4.49") as e:
        estimate_generation(Generation(**base, hf_transformers_version="4.46",
                                       weight_bytes_per_param=1.0), h20)
    assert e.value.fields == ("hf_transformers_version", "hf_quant_linear")
    with pytest.raises(FieldError, match="FP8Linear") as e:
        estimate_generation(Generation(**base, hf_transformers_version="4.51.3",
                                       matmul_precision="fp8"), h20)
    assert e.value.fields == ("matmul_precision", "hf_quant_linear")


def test_the_basis_names_the_library_and_the_fitted_constant_only_where_it_applies() -> None:
    from gpuhours.estimate.generation import generation_summary

    arch, _ = resolve_model("qwen3-0.6b", None)
    gpu = resolve_gpu("h20")

    def summary(kernel: str | None, w: float) -> dict[str, Any]:
        g = Generation(arch=arch, model="qwen3-0.6b", prompt_tokens=1, output_tokens=16,
                       batch=1, engine="hf-generate", hf_transformers_version="4.51.3",
                       weight_bytes_per_param=w, hf_quant_linear=kernel)
        return generation_summary(estimate_generation(g, Hardware(gpu=gpu)), g, gpu)

    gptq, awq = summary(hf_quant.GPTQMODEL, 1.0), summary(hf_quant.AUTOAWQ, 0.56)
    names = {a["name"] for a in gptq["assumptions"]}
    assert {"hf_gptqmodel_linear_host_s", "quantised_gemm_fixed_s",
            "dequant_weights_per_sm_cycle"} <= names
    assert "hf_gptqmodel_linear_host_s" not in {a["name"] for a in awq["assumptions"]}
    assert "MarlinQuantLinear" in str(gptq) and "WQLinear_GEMM" in str(awq)


def test_the_awq_linears_transients_by_hand() -> None:
    arch = from_hf_config(TINY, "tiny")
    # 10 tokens, split-k: up_proj's 8 partials and their sum (9 x 10 x 128) beside act(gate)
    # (10 x 128): 12,800; q_proj's 9 x 10 x 64 = 5,760 and down_proj's 10 x 128 + 9 x 10 x 64
    # = 7,040 are smaller
    elements, what = hf_quant.layer_transient_elements(hf_quant.AUTOAWQ, arch, 10)
    assert elements == 12800 and "split-k" in what
    # 2,048 tokens, dequantised: the weights are small beside the activations, so the gated
    # MLP's act(gate), up and product (3 x 2,048 x 128) stay the largest
    assert hf_quant.layer_transient_elements(hf_quant.AUTOAWQ, arch, 2048)[0] == 3 * 2048 * 128
    # a wider layer at 1,024 tokens: up_proj's fp16 weight (2,048 x 4,096) and output beside
    # act(gate): 2 x 1,024 x 4,096 + 2,048 x 4,096 = 16,777,216 > 3 x 1,024 x 4,096
    wide = from_hf_config({**TINY, "hidden_size": 2048, "num_attention_heads": 16,
                           "num_key_value_heads": 8, "head_dim": 128,
                           "intermediate_size": 4096}, "wide")
    elements, what = hf_quant.layer_transient_elements(hf_quant.AUTOAWQ, wide, 1024)
    assert elements == 16777216 and "dequantised" in what
    # Marlin dequantises in registers
    assert hf_quant.layer_transient_elements(hf_quant.GPTQMODEL, wide, 1024) == (0.0, "")


def test_the_awq_transient_sets_generates_prefill_peak() -> None:
    from gpuhours.estimate.hf_generate_memory import prefill_transient

    wide = from_hf_config({**TINY, "hidden_size": 2048, "num_attention_heads": 16,
                           "num_key_value_heads": 8, "head_dim": 128,
                           "intermediate_size": 4096}, "wide")
    plain = prefill_transient(wide, "4.51.3", 1, 1024)
    awq = prefill_transient(wide, "4.51.3", 1, 1024, quant_linear=hf_quant.AUTOAWQ)
    # the residual stream (4 d + 2 head_dim a token) beside each; 2 bytes an element
    residual = 1024 * (4 * 2048 + 2 * 128)
    assert plain.bytes == (3 * 1024 * 4096 + residual) * 2
    assert awq.bytes == (16777216 + residual) * 2 and "AutoAWQ" in awq.what
    assert prefill_transient(wide, "4.51.3", 1, 1024,
                             quant_linear=hf_quant.GPTQMODEL).bytes == plain.bytes
