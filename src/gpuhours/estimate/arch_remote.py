"""Shapes of model types whose modelling code ships with the checkpoint (trust_remote_code).

transformers has no class for these `model_type`s, so their parameter count cannot be checked
against a model it builds; each reader here is written from the published modelling file and
checked against a hand count of the published config (tests/test_qwen1.py).

- qwen (Qwen-1: Qwen-1.8B/7B/14B/72B and their -Chat models; `modeling_qwen.py` of the
  Qwen/Qwen-7B repository, QWenLMHeadModel): a llama-style pre-norm decoder with RMSNorm,
  rotary embeddings and a SwiGLU MLP, written with GPT-2-style names:
  - `attn.c_attn`: one fused q/k/v linear, hidden -> 3 x heads x kv_channels, with a bias
    (nn.Linear's default; `no_bias` does not apply to it);
  - `attn.c_proj`: heads x kv_channels -> hidden, bias only when `no_bias` is false;
  - `mlp.w1`, `mlp.w2` (the two gated branches) hidden -> intermediate_size // 2 and
    `mlp.c_proj` back to hidden: the config's intermediate_size is twice the MLP width;
  - `ln_1`, `ln_2`, `ln_f`: RMSNorm (a weight only); `wte` and an untied `lm_head`.
  Every head has its own keys and values (no grouped-query attention).
"""

from __future__ import annotations

import math
from typing import Any

from gpuhours.errors import InputError

#: model types read here (never built with transformers to count them)
REMOTE_CODE_MODEL_TYPES = frozenset({"qwen"})


def remote_code_fields(cfg: dict[str, Any], name: str, where: str,
                       model_type: str) -> dict[str, Any]:
    """The ModelArch fields of a config of one of REMOTE_CODE_MODEL_TYPES (see the module
    docstring); estimate/arch.py builds the ModelArch."""
    if model_type == "qwen":
        return _qwen1(cfg, name, where)
    raise InputError(where, f"model_type {model_type!r} has no remote-code reader.")  # pragma: no cover


def _positive(cfg: dict[str, Any], where: str, *keys: str, required: bool = True) -> int:
    """The first of `keys` set in `cfg`, a positive integer; 0 when absent and not required."""
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or not math.isfinite(value) or value <= 0 or float(value) != int(value)):
            raise InputError(where, f"field {key!r} must be a positive integer, got {value!r}.")
        return int(value)
    if required:
        raise InputError(where, f"config has none of the fields {', '.join(keys)}.",
                         "Expected a Qwen-1 config.json (hidden_size, num_hidden_layers, ...).")
    return 0


def _qwen1(cfg: dict[str, Any], name: str, where: str) -> dict[str, Any]:
    d = _positive(cfg, where, "hidden_size")
    heads = _positive(cfg, where, "num_attention_heads")
    inner = _positive(cfg, where, "intermediate_size")
    if inner % 2:
        raise InputError(where, f"a Qwen-1 config's intermediate_size is twice the MLP width "
                                f"(QWenMLP uses intermediate_size // 2); {inner} is odd.")
    bias = not bool(cfg.get("no_bias", True))
    return dict(
        name=name,
        model_type="qwen",
        hidden_size=d,
        num_layers=_positive(cfg, where, "num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=_positive(cfg, where, "kv_channels", required=False) or max(d // heads, 1),
        intermediate_size=inner // 2,
        vocab_size=_positive(cfg, where, "vocab_size"),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        gated_mlp=True,
        qkv_bias=True,
        out_bias=bias,
        mlp_bias=bias,
        norm_bias=False,
        max_positions=_positive(cfg, where, "max_position_embeddings", "seq_length",
                                required=False) or None,
    )
