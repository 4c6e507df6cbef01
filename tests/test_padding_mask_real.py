"""A padded batch through transformers' SDPA attention, and the output a loop holds, against
estimate/kv_repeat.py on a real tiny Llama with grouped k and v (transformers 5, CPU, bf16).

With a padding mask transformers gives SDPA no enable_gqa (integrations/sdpa_attention.py
use_gqa_in_sdpa): k and v are repeated to the query heads, and torch turns the boolean mask
into an additive bias in each call, which the kernel saves. A training forward returns a
DynamicCache (use_cache=True): its k and v are the tensors the kernel saves when they are not
repeated, copies beside the repeated ones when they are. Counted: the distinct storages
autograd saves in one forward, and the output's logits and cache storages that are not among
them (what holding the output keeps beyond the saved tensors).
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.kv_repeat import (
    held_cache_extra_bytes_per_token_layer,
    held_kv_cache_bytes,
    padding_mask_bytes_per_token_layer,
    repeated_kv_extra_bytes_per_token_layer,
)
from gpuhours.estimate.memory import held_logits_bytes
from gpuhours.setup import Training
from saved_storage import TINY_LLAMA_CONFIG, saved_storages

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

BATCH, SEQ, PAD_FROM = 2, 64, 40  # the second sequence padded from position 40


def _forward(padded: bool) -> tuple[int, int]:
    """(saved bytes, bytes of the output's logits and cache not among them) of one training
    forward of the tiny Llama, full fine-tuning, bf16."""
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(**TINY_LLAMA_CONFIG)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    model.config._attn_implementation = "sdpa"
    model.train()
    ids = torch.randint(0, 1000, (BATCH, SEQ), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    if padded:
        mask[1, PAD_FROM:] = 0
    with saved_storages(model.parameters()) as seen:
        out = model(input_ids=ids, attention_mask=mask, labels=ids)
    saved = sum(s.nbytes for s in seen.values())
    held: dict[int, int] = {}
    tensors: list[Any] = [out.logits]
    for layer in out.past_key_values.layers:
        tensors += [layer.keys, layer.values]
    for x in tensors:
        storage = x.untyped_storage()
        held[storage.data_ptr()] = storage.nbytes()
    beyond = sum(n for ptr, n in held.items() if ptr not in seen)
    return saved, beyond


def _training(padded: bool) -> Training:
    return Training(arch=from_hf_config(TINY_LLAMA_CONFIG, "tiny"), method="full",
                    precision="bf16", micro_batch=BATCH, seq_len=SEQ, kv_repeated=padded,
                    padding_mask=padded, held_kv_cache=True, held_logits="half")


def test_a_padded_batch_saves_the_repeat_and_a_mask_per_layer() -> None:
    saved_plain, _ = _forward(False)
    saved_padded, _ = _forward(True)
    t = _training(True)
    per_token_layer = (repeated_kv_extra_bytes_per_token_layer(t.arch, t, 2.0)
                       + padding_mask_bytes_per_token_layer(t.arch, t, 2.0))
    # 2 x 2 x (256 - 128) for the repeat, 2 x 64 for the mask: 640 bytes a token and layer
    assert per_token_layer == 640
    assert saved_padded - saved_plain == BATCH * SEQ * t.arch.num_layers * per_token_layer


@pytest.mark.parametrize("padded", [False, True])
def test_the_held_output_keeps_its_logits_and_the_cache_beside_repeated_k_v(
        padded: bool) -> None:
    _, beyond = _forward(padded)
    t = _training(padded)
    cache_beyond = (held_cache_extra_bytes_per_token_layer(t.arch, t, 2.0)
                    * t.tokens_per_micro_batch * t.arch.num_layers)
    # unpadded, the cache's k and v are the tensors SDPA saves; padded, copies beside the
    # repeated ones: the whole cache
    assert cache_beyond == (held_kv_cache_bytes(t.arch, t, 2.0) if padded else 0)
    assert beyond == held_logits_bytes(t.arch, t) + cache_beyond
