"""Sliding-window / local-global attention (issue 15): which layers are windowed, read as
transformers reads the configs, and min(context, window) in the generation KV cache and the
attention FLOPs, held to hand-worked numbers and to a position-by-position count."""

from __future__ import annotations

from typing import Any

import pytest

from gpuhours.errors import InputError
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.flops import (
    attention_forward_flops_per_token,
    causal_mean_attended,
    generation_flops_per_token,
    prefill_flops_per_token,
)
from gpuhours.estimate.generation import (
    estimate_generation,
    kv_bytes_per_token_per_gpu,
    max_batch_by_memory,
)
from gpuhours.estimate.params import count_params
from gpuhours.resolve import catalog_gpu, resolve_model
from gpuhours.setup import Generation


def _small(model_type: str, **fields: Any) -> dict[str, Any]:
    return {"model_type": model_type, "hidden_size": 256, "num_hidden_layers": 12,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512,
            "vocab_size": 1000, **fields}


# --- which layers are windowed ---------------------------------------------------------------


def test_catalog_windows() -> None:
    """Gemma 2 9B: 42 layers, every even one local (4,096 tokens): 21. Mistral 7B (v0.1):
    sliding_window 4096 on all 32. Qwen2.5-7B states a window but use_sliding_window false."""
    gemma, _ = resolve_model("gemma-2-9b")
    mistral, _ = resolve_model("mistral-7b")
    qwen, _ = resolve_model("qwen2.5-7b")
    assert (gemma.sliding_window, gemma.sliding_layers) == (4096, 21)
    assert (mistral.sliding_window, mistral.sliding_layers) == (4096, 32)
    assert (qwen.sliding_window, qwen.sliding_layers) == (None, 0)


@pytest.mark.parametrize(("model_type", "fields"), [
    ("gemma2", {"sliding_window": 4096}),
    ("gemma2", {"sliding_window": 512, "num_hidden_layers": 13}),
    ("qwen2", {"sliding_window": 4096, "use_sliding_window": True, "max_window_layers": 5}),
    ("qwen2", {"sliding_window": 4096, "use_sliding_window": False}),
    ("qwen3", {"sliding_window": 1024, "use_sliding_window": True, "max_window_layers": 0}),
])
def test_sliding_layers_as_transformers_reads_them(model_type: str, fields: dict[str, Any]
                                                   ) -> None:
    """Configs without layer_types (as the hub's are): our count of windowed layers equals the
    "sliding_attention" entries transformers derives."""
    transformers = pytest.importorskip("transformers")
    cfg = _small(model_type, **fields)
    theirs = transformers.AutoConfig.for_model(**cfg).layer_types
    ours = from_hf_config(cfg, "small")
    assert ours.sliding_layers == sum(1 for x in theirs if x == "sliding_attention")


def test_layer_types_win_and_gemma3s_pattern() -> None:
    """gpt-oss style: layer_types given. Gemma 3 (hub configs of early 2025): every 6th layer
    global by sliding_window_pattern: 12 layers -> 10 local."""
    types = ["sliding_attention", "full_attention"] * 6
    assert from_hf_config(_small("llama", sliding_window=128, layer_types=types),
                          "x").sliding_layers == 6
    arch = from_hf_config(_small("gemma2", sliding_window=1024, layer_types=types), "x")
    assert arch.sliding_layers == 6
    with pytest.raises(InputError, match="layer_types has 3 entries for 12 layers"):
        from_hf_config(_small("llama", sliding_window=128, layer_types=types[:3]), "x")


def test_qwen2_moe_zero_window_is_none() -> None:
    """transformers' Qwen2MoeConfig writes sliding_window 0 when there is none."""
    arch = from_hf_config(_small("mistral", sliding_window=0), "x")
    assert arch.sliding_layers == 0 and arch.sliding_window is None


# --- attention FLOPs -------------------------------------------------------------------------


def test_causal_mean_by_hand_and_by_positions() -> None:
    """Mistral 7B at 8,192 tokens, window 4,096 on every layer: position p sees min(p, 4096)
    keys; the mean is 4096 - 4096 x 4095 / 2 / 8192 = 3,072.25 (global: 4,096.5)."""
    mistral, _ = resolve_model("mistral-7b")
    assert causal_mean_attended(mistral, 8192) == 3072.25
    assert sum(min(p, 4096) for p in range(1, 8193)) / 8192 == 3072.25
    assert attention_forward_flops_per_token(mistral, 8192) == 4 * 32 * 4096 * 3072.25
    assert causal_mean_attended(mistral, 4096) == 2048.5  # within the window: (S + 1) / 2


def test_gemma_mixes_local_and_global_layers() -> None:
    """Gemma 2 9B at 8,192: 21 global layers at 4,096.5 and 21 local at 3,072.25: mean 3,584.375.
    Decode at a 10,000-token context: (21 x 10,000 + 21 x 4,096) / 42 = 7,048 keys."""
    gemma, _ = resolve_model("gemma-2-9b")
    assert causal_mean_attended(gemma, 8192) == (4096.5 + 3072.25) / 2
    assert gemma.attended_tokens(10_000) == 7048
    matmul = 2.0 * count_params(gemma).matmul_active
    assert generation_flops_per_token(gemma, 10_000) == matmul + 4 * 42 * 4096 * 7048
    assert prefill_flops_per_token(gemma, 8192) == matmul + 4 * 42 * 4096 * 3584.375


# --- the KV cache ----------------------------------------------------------------------------


def test_kv_cache_of_a_gemma_sequence_by_hand() -> None:
    """Gemma 2 9B, bf16, 4,096 prompt + 4,096 output tokens: each layer stores 2 x 8 heads x 256
    x 2 B = 8,192 B per token; 21 global layers hold 8,192 tokens, 21 local ones 4,096:
    21 x 8,192 x 8,192 + 21 x 4,096 x 8,192 = 2,113,929,216 B per sequence (every layer full
    would be 2,818,572,288)."""
    gemma, _ = resolve_model("gemma-2-9b")
    g = Generation(arch=gemma, prompt_tokens=4096, output_tokens=4096, batch=4)
    est = estimate_generation(g, catalog_gpu("h100-sxm"))
    assert est.kv_cache_bytes == 4 * 2_113_929_216
    per_token = kv_bytes_per_token_per_gpu(gemma, 2.0, 1)
    assert per_token == 42 * 8192


def test_window_lets_more_sequences_fit() -> None:
    """Mistral 7B at 16,384 tokens per sequence: the cache holds 4,096 tokens per layer, a
    quarter, so about four times the sequences fit beside the weights. SGLang sizes its pool
    from the weights alone (vLLM would also keep its profiling reserve out:
    tests/test_engine_reserve.py), so the hand count is the weights and the cache."""
    mistral, _ = resolve_model("mistral-7b")
    gpu = catalog_gpu("h100-sxm")
    g = Generation(arch=mistral, prompt_tokens=8192, output_tokens=8192, engine="sglang")
    windowed = max_batch_by_memory(mistral, g, gpu)
    from dataclasses import replace

    unwindowed = max_batch_by_memory(replace(mistral, sliding_window=None, sliding_layers=0),
                                     g, gpu)
    weights = count_params(mistral).total * 2.0
    usable = gpu.memory_bytes * 0.9 - weights
    assert windowed == int(usable // (32 * 2 * 1024 * 2 * 4096))
    assert unwindowed == int(usable // (32 * 2 * 1024 * 2 * 16384))
