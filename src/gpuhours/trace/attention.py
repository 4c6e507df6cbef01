"""Attention and dropout as CUDA runs them, for traces on the CPU.

`cuda_like_sdpa` installs, for the duration of a trace, a `scaled_dot_product_attention` that
sends the calls CUDA's flash kernel would take (no mask) to our operator
`gpuhours::flash_attention` (torchkit/flash_attention.py), which saves what the CUDA kernel saves
(grouped-query k and v unrepeated, an fp32 log-sum-exp), and everything else to torch's own
function. Under autocast it casts q, k and v to the autocast dtype first, as CUDA autocast does
for `scaled_dot_product_attention`. `cuda_like_dropout` keeps a 1-byte mask, as CUDA's fused
dropout does.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from gpuhours.torchkit.flash_attention import flash_attention


def _sdpa(original: Any) -> Any:
    def sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
             attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
             is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False
             ) -> torch.Tensor:
        n_rep_ok = query.shape[1] % key.shape[1] == 0 and (enable_gqa or
                                                             query.shape[1] == key.shape[1])
        if attn_mask is not None or query.dim() != 4 or not n_rep_ok:
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                            is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
        if torch.is_autocast_enabled("cpu"):
            dtype = torch.get_autocast_dtype("cpu")
            query, key, value = (t.to(dtype) for t in (query, key, value))
        s = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
        out, _ = flash_attention(query, key, value, float(dropout_p), bool(is_causal), float(s))
        return out

    return sdpa


def _dropout(original: Any) -> Any:
    def dropout(input: torch.Tensor, p: float = 0.5, training: bool = True,
                inplace: bool = False) -> torch.Tensor:
        if not training or p == 0 or inplace:
            return original(input, p, training, inplace)
        return torch.native_dropout(input, p, True)[0]

    return dropout


@contextlib.contextmanager
def cuda_like_dropout() -> Iterator[None]:
    """Within: F.dropout keeps a 1-byte boolean mask, as CUDA's fused dropout
    (`native_dropout`) does; the CPU path would keep a mask of the input's dtype."""
    original = F.dropout
    F.dropout = _dropout(original)
    try:
        yield
    finally:
        F.dropout = original


@contextlib.contextmanager
def cuda_like_sdpa() -> Iterator[None]:
    """Within: F.scaled_dot_product_attention keeps what CUDA's flash kernel keeps."""
    original = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = _sdpa(original)
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original
