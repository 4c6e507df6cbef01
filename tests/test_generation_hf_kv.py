"""HF `generate`'s KV-cache traffic per decode step (issue 13): counted by hand, and counted again
from a real decode step of a tiny Llama on this CPU (every aten operator the step dispatches)."""

from __future__ import annotations

import pytest

from cache_bytes import CACHE_BYTES_PER_TOKEN, PAST, TINY_LLAMA, decode_step_cache_bytes
from gpuhours import catalog
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.generation import (
    decode_bandwidth_efficiency,
    estimate_generation,
    hf_generate_kv_cache_passes,
    kv_cache_bytes_per_token,
    weight_bytes_read_per_step,
)
from gpuhours.resolve import resolve_model
from gpuhours.setup import Generation


def test_passes_by_hand() -> None:
    """cat (read + write) + repeat_kv (read 1, write n) + attention (read n); n = 1: no repeat."""
    qwen, _ = resolve_model("qwen2.5-7b")      # 28 query heads on 4 KV heads: n = 7
    llama, _ = resolve_model("llama-2-7b")     # 32 on 32: n = 1
    assert hf_generate_kv_cache_passes(qwen) == 2 + 8 + 7 == 17
    assert hf_generate_kv_cache_passes(llama) == 3


def test_mha_decode_step_at_batch_8_by_hand() -> None:
    """Llama-2-7B, batch 8 at a 2,048-token context on an A100: weights + 3 x 1.895 passes of the
    cache through the same bandwidth (the step is device-bound, above 32 x 0.88 ms)."""
    arch, _ = resolve_model("llama-2-7b")
    gpu = catalog.gpu("a100-80gb")
    g = Generation(arch=arch, prompt_tokens=2047, output_tokens=1, batch=8, engine="hf-generate")
    e = estimate_generation(g, gpu)
    kv_per_token = 2 * 32 * 4096 * 2  # K and V, 32 layers, 4,096 wide, bf16: 512 KiB
    assert kv_cache_bytes_per_token(arch) == kv_per_token
    kv = 3 * A.DECODE_KV_PASSES["hf-generate"].value * 8 * 2047.5 * kv_per_token
    bw = 2039e9 * decode_bandwidth_efficiency(arch)
    device = (weight_bytes_read_per_step(arch, 2.0) + kv) / bw
    assert device > 32 * A.DECODE_HOST_PER_LAYER_S["hf-generate"].value
    assert e.decode_step_s_first == pytest.approx(A.DECODE_HOST_STEP_S["hf-generate"].value
                                                  + device, rel=1e-3)


def test_a_real_decode_step_moves_the_counted_cache_bytes() -> None:
    """One decode step of a 2-layer Llama (4 query heads on 2 KV heads: n = 2, eager attention,
    transformers' DynamicCache) on this CPU: every operator that reads or writes a tensor shaped
    like the cache is recorded; the reads and writes are those the count names, byte for byte."""
    read, written = decode_step_cache_bytes("eager")

    n, past, new = 2, PAST, PAST + 1
    one = CACHE_BYTES_PER_TOKEN
    # cat reads the old cache and writes the new; repeat_kv reads it, writes n; attention reads n
    assert read == one * (past + new + n * new)
    assert written == one * (new + n * new)
    arch = from_hf_config({"model_type": "llama", **TINY_LLAMA}, "tiny")
    assert hf_generate_kv_cache_passes(arch) == 7
    # the count takes the old cache at the new length: one token of difference
    assert (read + written) / (one * new) == pytest.approx(7, abs=1 / new + 1e-12)


def test_the_output_names_the_counted_passes() -> None:
    """`generation --json`'s basis says how many passes the model's KV cache was counted at."""
    from gpuhours.estimate.generation import generation_summary

    arch, _ = resolve_model("llama-2-7b")
    gpu = catalog.gpu("a100-80gb")
    for engine, says in (("hf-generate", True), ("vllm", False)):
        g = Generation(arch=arch, prompt_tokens=64, output_tokens=8, batch=2, engine=engine)
        basis = generation_summary(estimate_generation(g, gpu), g, gpu)["basis"]
        assert ("KV bytes x 3 passes counted" in basis) is says
