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
    """Llama-2-7B, batch 8 at a 2,048-token context on an A100: the weights through the decode
    bandwidth, then 3 passes of the cache at the copies' rate on the A100's SMs (108 SMs x
    1,410 MHz x the fitted bytes a cycle); the step is device-bound, above 32 x 0.88 ms."""
    arch, _ = resolve_model("llama-2-7b")
    gpu = catalog.gpu("a100-80gb")
    g = Generation(arch=arch, prompt_tokens=2047, output_tokens=1, batch=8, engine="hf-generate")
    e = estimate_generation(g, gpu)
    kv_per_token = 2 * 32 * 4096 * 2  # K and V, 32 layers, 4,096 wide, bf16: 512 KiB
    assert kv_cache_bytes_per_token(arch) == kv_per_token
    copies_s = 3 * 8 * 2047.5 * kv_per_token / (108 * 1410e6
                                                 * A.HF_KV_COPY_BYTES_PER_SM_CYCLE.value)
    bw = 2039e9 * decode_bandwidth_efficiency(arch)
    device = weight_bytes_read_per_step(arch, 2.0) / bw + copies_s
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


def test_the_copies_run_at_the_sms_rate_and_fall_back_to_the_bandwidth_form() -> None:
    """hf_kv_copy_bytes_per_s is SMs x boost clock x the fitted bytes a cycle: 108 x 1,410 MHz on
    an A100, 78 x 1,980 MHz on the H20 (within 2% of each other, though the H20's bandwidth is
    twice the A100's); a GPU the catalog has no SM count for (the L40S) costs the counted
    passes at DECODE_KV_PASSES times their bandwidth-time, as before."""
    from gpuhours.estimate.generation import hf_kv_copy_bytes_per_s

    per_cycle = A.HF_KV_COPY_BYTES_PER_SM_CYCLE.value
    a100, h20, l40s = (catalog.gpu(n) for n in ("a100-80gb", "h20", "l40s"))
    assert hf_kv_copy_bytes_per_s(a100) == pytest.approx(108 * 1410e6 * per_cycle)
    assert hf_kv_copy_bytes_per_s(h20) == pytest.approx(78 * 1980e6 * per_cycle)
    assert l40s.sm_count is None and hf_kv_copy_bytes_per_s(l40s) is None
    # the same step on the L40S, by hand: weights and 3 x DECODE_KV_PASSES passes of the cache
    arch, _ = resolve_model("llama-2-7b")
    g = Generation(arch=arch, prompt_tokens=2047, output_tokens=1, batch=8, engine="hf-generate")
    e = estimate_generation(g, l40s)
    kv = 3 * A.DECODE_KV_PASSES["hf-generate"].value * 8 * 2047.5 * 2 * 32 * 4096 * 2
    bw = l40s.memory_bw_gb_per_s * 1e9 * decode_bandwidth_efficiency(arch)
    device = (weight_bytes_read_per_step(arch, 2.0) + kv) / bw
    assert e.decode_step_s_first == pytest.approx(A.DECODE_HOST_STEP_S["hf-generate"].value
                                                  + device, rel=1e-3)
