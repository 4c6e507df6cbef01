"""Operators transformers dispatches per decoder layer in one decode step (batch 1, SDPA), counted
on a tiny model on the CPU: the host work of hf-generate's eager step (docs/generation.md, the
transformers 4.51 rows on the H20).

    pip install --no-deps --target DIR transformers==4.51.3 huggingface_hub==0.30.2 \
        tokenizers==0.21.1           (4.46.0: huggingface_hub 0.26.2, tokenizers 0.20.3)
    PYTHONPATH=DIR python -m gpuhours_dev.validation.hf_op_count qwen3   (from scripts/,
        with DIR first on the path; or qwen2, llama)
    ... hf_op_count llama generate   (a whole sampled generate at batch 8, padded: per layer
        and outside the layers; 4.38.2 needs huggingface_hub 0.21.x, tokenizers 0.15.x)

Each aten operator call counts one (views included: each is a Python-level dispatch too). The
count per layer is the difference between a 4-layer and a 2-layer model, halved, so the
embedding, final norm, head and mask work drop out.
"""

from __future__ import annotations

import sys
from typing import Any

from gpuhours.torchkit.ops import count_dispatched

#: a tiny config: 4 query heads on 2 KV heads of 16, as tests/cache_bytes.py's
_COMMON: dict[str, Any] = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4,
                               num_key_value_heads=2, vocab_size=80, max_position_embeddings=64)


def decode_step_operators(model_type: str, layers: int) -> int:
    """aten operators one decode step (1 new token after a 5-token prompt) dispatches."""
    import torch
    import transformers

    classes = {"qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
               "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
               "llama": ("LlamaConfig", "LlamaForCausalLM")}
    config_cls, model_cls = (getattr(transformers, n) for n in classes[model_type])
    extra = {"head_dim": 16} if model_type == "qwen3" else {}
    cfg = config_cls(num_hidden_layers=layers, **_COMMON, **extra)
    torch.manual_seed(0)
    model = model_cls._from_config(cfg, attn_implementation="sdpa").eval()

    with torch.no_grad():
        # a DynamicCache from the start, as generate() keeps it (4.46 would otherwise hand back
        # the legacy tuples and convert them again on the next call)
        cache = model(torch.randint(0, 80, (1, 5)), use_cache=True,
                      past_key_values=transformers.DynamicCache()).past_key_values
        step = torch.randint(0, 80, (1, 1))
        mask = torch.ones(1, 6, dtype=torch.long)
        return count_dispatched(lambda: model(step, past_key_values=cache, use_cache=True,
                                              attention_mask=mask))


def operators_per_layer(model_type: str) -> float:
    return (decode_step_operators(model_type, 4) - decode_step_operators(model_type, 2)) / 2


def generate_operators(model_type: str, layers: int, batch: int, new_tokens: int) -> int:
    """aten operators of a whole sampled `generate` call (issue 13: the RL rows' rollouts): a
    batch of 6-token prompts, the first left-padded by 2 (an RL batch is padded), sampling with
    no logits processor, `new_tokens` tokens. Releases from 4.38 (no DynamicCache argument)."""
    import torch
    import transformers

    classes = {"qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
               "llama": ("LlamaConfig", "LlamaForCausalLM")}
    config_cls, model_cls = (getattr(transformers, n) for n in classes[model_type])
    cfg = config_cls(num_hidden_layers=layers, **_COMMON)
    torch.manual_seed(0)
    model = model_cls._from_config(cfg, attn_implementation="sdpa").eval()
    ids = torch.randint(1, 80, (batch, 6))
    mask = torch.ones_like(ids)
    mask[0, :2] = 0

    with torch.no_grad():
        return count_dispatched(lambda: model.generate(
            ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
            do_sample=True, top_k=0, top_p=1.0, pad_token_id=0, eos_token_id=79))


def generate_step_operators(model_type: str, batch: int = 8) -> tuple[float, float]:
    """(operators per decoder layer, operators outside the layers) of one decode step inside
    `generate`: the difference between 8 and 4 new tokens, per token, on 4 and 2 layers."""
    def per_token(layers: int) -> float:
        return (generate_operators(model_type, layers, batch, 8)
                - generate_operators(model_type, layers, batch, 4)) / 4
    two, four = per_token(2), per_token(4)
    per_layer = (four - two) / 2
    return per_layer, two - 2 * per_layer


if __name__ == "__main__":
    import transformers

    kind = sys.argv[1] if len(sys.argv) > 1 else "qwen3"
    if len(sys.argv) > 2 and sys.argv[2] == "generate":
        layer, rest = generate_step_operators(kind)
        print(f"transformers {transformers.__version__}, {kind}, SDPA, generate at batch 8 "
              f"(padded): {layer:g} operators per decoder layer and {rest:g} outside the "
              f"layers per decode step")
    else:
        print(f"transformers {transformers.__version__}, {kind}, SDPA, batch 1: "
              f"{operators_per_layer(kind):g} operators per decoder layer per decode step")
