"""Generation: KV cache, batch by memory, prefill and decode, by hand."""

from __future__ import annotations

import pytest

from gpuhours import catalog
from gpuhours.errors import InputError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.generation import (
    estimate_generation,
    kv_cache_bytes_per_token,
    max_batch_by_memory,
)
from gpuhours.estimate.params import count_params
from gpuhours.resolve import resolve_model
from gpuhours.setup import Generation


def test_kv_cache_of_llama_2_7b_is_half_a_mebibyte_per_token():
    arch, _ = resolve_model("llama-2-7b")
    # K and V x 32 layers x 32 heads x 128 x 2 bytes = 524,288 bytes
    assert kv_cache_bytes_per_token(arch) == 2 * 32 * 4096 * 2 == 2**19


def test_gqa_shrinks_the_kv_cache_by_the_group_size():
    arch, _ = resolve_model("llama-3-8b")
    # 8 kv heads of 128 instead of 32: a quarter of llama-2-7b's
    assert kv_cache_bytes_per_token(arch) == 2 * 32 * 1024 * 2


def test_batch_limited_by_memory_by_hand():
    arch, _ = resolve_model("llama-2-7b")
    gpu = catalog.gpu("a100-80gb")
    g = Generation(arch=arch, prompt_tokens=1024, output_tokens=1024)
    weights = count_params(arch).total * 2
    # vLLM V1 on an A100 profiles 8,192 tokens (its larger default is for other GPUs of 70 GiB
    # or more): the MLP's layer holds 2 x 4,096 + 3 x 11,008 = 41,216 bf16 elements a token
    # (the sampler's 8,192 x 4,096 x 2 + 256 x 32,000 x 32 bytes = 0.33 GB is smaller)
    reserve = 8_192 * 41_216 * 2
    usable = gpu.memory_bytes * A.GENERATION_MEMORY_UTILISATION.value - weights - reserve
    assert max_batch_by_memory(arch, g, gpu) == int(usable // (2048 * 2**19)) == 58


def test_decode_at_batch_one_is_bandwidth_bound_by_hand():
    arch, _ = resolve_model("llama-2-7b")
    gpu = catalog.gpu("h100-sxm")
    e = estimate_generation(Generation(arch=arch, prompt_tokens=100, output_tokens=100, batch=1),
                            gpu)
    assert e.decode_bound == "memory bandwidth"
    # issue 13: decode bandwidth is 80% of datasheet x d / (d + half width), and each step adds
    # the engine's host cost (it was a flat 75% engine efficiency and no host cost)
    bw = 3350e9 * 0.80 * 4096 / (4096 + A.DECODE_BANDWIDTH_HALF_WIDTH.value)
    # untied llama-2-7b: the 32000 x 4096 input embedding is gathered, not read
    weights = (count_params(arch).total - 32000 * 4096) * 2
    # first decode step reads every weight and 100 tokens of KV cache
    assert e.decode_step_s_first == pytest.approx(
        A.DECODE_HOST_STEP_S["vllm"].value + (weights + 100 * 2**19) / bw)
    # ~13.2 GB at ~2.4 TB/s + 2.3 ms: about 8 ms per token, ~125 tokens/s for one sequence
    assert 6e-3 < e.decode_step_s_first < 10e-3


def test_large_batches_amortise_the_weights():
    arch, _ = resolve_model("llama-2-7b")
    gpu = catalog.gpu("h100-sxm")
    one = estimate_generation(Generation(arch=arch, prompt_tokens=100, output_tokens=100,
                                         batch=1), gpu)
    many = estimate_generation(Generation(arch=arch, prompt_tokens=100, output_tokens=100,
                                          batch=64), gpu)
    assert many.output_tokens_per_s > 20 * one.output_tokens_per_s


def test_a_batch_that_does_not_fit_is_refused():
    arch, _ = resolve_model("llama-2-70b")
    with pytest.raises(InputError, match="leave no room"):
        estimate_generation(Generation(arch=arch, prompt_tokens=100, output_tokens=100),
                            catalog.gpu("rtx-4090"))


def test_a_gpu_without_bf16_generates_in_fp16() -> None:
    # the V100 has fp16 tensor cores and no bf16: the engines run float16 (vLLM's dtype auto)
    gpu = catalog.gpu("v100-32gb")
    g = Generation(arch=resolve_model("llama-2-7b")[0], engine="vllm", prompt_tokens=512,
                   output_tokens=64, batch=8)
    auto = estimate_generation(g, gpu)
    assert auto.prefill_s == estimate_generation(g, gpu, "fp16").prefill_s


def test_deepseek_v3_is_generated_as_released_in_block_fp8() -> None:
    """The catalog's released_weights: FP8 e4m3 linears with a float32 scale per 128 x 128
    block (8 + 32/16,384 = 8.002 bits), the embedding and LM head bf16: 671,026,404,352
    parameters, 2 x 129,280 x 7,168 = 1,853,317,120 of them in the untied embedding and head.
    On an H200 (fp8 tensor cores) the matmuls are W8A8; on an A100 the weights are dequantised."""
    import json

    from typer.testing import CliRunner

    from gpuhours.cli import app

    def run(gpu: str, tp: str) -> dict:
        r = CliRunner().invoke(app, ["generation", "-m", "deepseek-v3", "-g", gpu,
                                     "--tensor-parallel", tp, "--batch", "8", "--json"])
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)

    vocab = 2 * 129_280 * 7_168
    weights = (671_026_404_352 - vocab) * 8.002 / 8 + vocab * 2
    h200 = run("h200", "8")  # 8 x 141 GB: fits as released, not in bf16 (1.34 TB)
    assert h200["weights_bytes"]["value"] == pytest.approx(weights, rel=1e-9)
    assert "FP8 linear layers" in h200["basis"] and "fp8 input-quantisation" in h200["basis"]
    a100 = run("a100-80gb", "16")  # no fp8 tensor cores: weights dequantised, bf16 GEMMs
    assert "FP8 linear layers" in a100["basis"]
    assert "fp8 input-quantisation" not in a100["basis"]
