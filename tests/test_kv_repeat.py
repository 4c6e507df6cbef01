"""K and v repeated to the query heads (Training.kv_repeated, estimate/kv_repeat.py) against the
storage autograd saves in a real model: transformers' eager attention calls repeat_kv (a copy at
the query width, which its matmuls save), its SDPA path passes enable_gqa (k and v saved at
their own width). The same tiny grouped-query Llama (8 query heads, 2 kv heads) both ways."""

from __future__ import annotations

import pytest

from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.memory import activation_bytes
from gpuhours.setup import Training
from saved_storage import saved_storage_bytes

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CONFIG = dict(model_type="llama", hidden_size=256, intermediate_size=688, num_hidden_layers=2,
              num_attention_heads=8, num_key_value_heads=2, vocab_size=1000,
              max_position_embeddings=512, tie_word_embeddings=False)
BATCH, SEQ = 2, 64


def _real(attention: str) -> int:
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(**CONFIG)
    config._attn_implementation = attention
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    return saved_storage_bytes(model, BATCH, SEQ, CONFIG["vocab_size"])


def _predicted(flash: bool, repeated: bool) -> float:
    arch = from_hf_config(CONFIG, "tiny")
    t = Training(arch=arch, method="full", precision="bf16", micro_batch=BATCH, seq_len=SEQ,
                 flash_attention=flash, kv_repeated=repeated)
    # the loss keeps log-softmax's fp32 output: tokens x vocab x 4 bytes
    return activation_bytes(arch, t).total + BATCH * SEQ * CONFIG["vocab_size"] * 4


def test_repeated_kv_is_what_eager_attention_saves():
    real = _real("eager")
    assert _predicted(flash=False, repeated=True) == pytest.approx(real, rel=0.02)
    # without the term the count falls short by the copies: 2 layers x 128 tokens x 2 x
    # (256 - 64) x 2 bytes = 196,608 bytes, 4.3% of this model's saved storage
    assert _predicted(flash=False, repeated=False) < 0.975 * real


def test_grouped_kv_is_what_sdpa_saves():
    real = _real("sdpa")
    assert _predicted(flash=True, repeated=False) == pytest.approx(real, rel=0.02)
    assert _predicted(flash=True, repeated=True) > 1.04 * real
