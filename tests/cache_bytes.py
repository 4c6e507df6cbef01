"""Bytes one real HF decode step reads from and writes to tensors shaped like its KV cache, the
independent count the hf-generate cache passes of estimate/generation.py are held to
(tests/test_generation_hf_kv.py, tests/test_generation_hf_release.py)."""

from __future__ import annotations

from typing import Any

import pytest

#: a 2-layer Llama, 4 query heads on 2 KV heads (n = 2), head_dim 16
TINY_LLAMA: dict[str, Any] = dict(
    hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, vocab_size=80, max_position_embeddings=64)
BATCH, PAST = 3, 11
#: bytes of one token of context in the cache: 2 layers, K and V, the batch, 2 KV heads, fp32
CACHE_BYTES_PER_TOKEN = 2 * 2 * BATCH * 2 * TINY_LLAMA["head_dim"] * 4


def decode_step_cache_bytes(attn_implementation: str) -> tuple[int, int]:
    """(read, written): one decode step of TINY_LLAMA after a PAST-token prefill of BATCH
    sequences in transformers' DynamicCache, under a dispatch mode that records every operator
    touching a tensor shaped like the cache (a read counts the input's storage once; views
    move nothing)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils._python_dispatch import TorchDispatchMode

    hd = TINY_LLAMA["head_dim"]
    cfg = transformers.LlamaConfig(**TINY_LLAMA)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM._from_config(
        cfg, attn_implementation=attn_implementation).eval()

    def cache_like(t: object) -> bool:
        return (isinstance(t, torch.Tensor) and t.ndim >= 3 and hd in t.shape[-2:]
                and bool({PAST, PAST + 1} & set(t.shape[-2:])))

    class Count(TorchDispatchMode):
        read = written = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            # views and _unsafe_view alias their input: no bytes move
            if func.is_view or "_unsafe_view" in str(func):
                return out
            flat: list[object] = []
            for a in [*args, *(kwargs or {}).values()]:
                flat += list(a) if isinstance(a, (list, tuple)) else [a]
            # a read touches the input's storage once (repeat_kv's expand reads one cache)
            self.read += sum(t.untyped_storage().nbytes() for t in flat if cache_like(t))
            outs = out if isinstance(out, (list, tuple)) else [out]
            self.written += sum(o.numel() * o.element_size() for o in outs if cache_like(o))
            return out

    with torch.no_grad():
        cache = model(torch.randint(0, 80, (BATCH, PAST)), use_cache=True,
                      past_key_values=transformers.DynamicCache(config=cfg)).past_key_values
        with Count() as c:
            model(torch.randint(0, 80, (BATCH, 1)), past_key_values=cache, use_cache=True)
    return c.read, c.written
