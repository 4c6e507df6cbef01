"""Attention as CUDA's flash-attention kernel keeps it, for traces on the CPU.

On a GPU, `scaled_dot_product_attention` without a mask runs the flash kernel: it saves q, k and
v as given (grouped-query attention is native: k and v keep their fewer heads), its output, and
an fp32 log-sum-exp per head and query; with dropout it keeps the random generator's seed, not
a mask. The CPU flash kernel that a
trace would otherwise run has no grouped-query support, so torch repeats k and v to all heads
first and saves the repeated copies: for Llama-3-8B that is 2 x (32 - 8) x 128 extra elements per
token and layer, memory a GPU never holds.

`cuda_like_sdpa` installs, for the duration of a trace, a `scaled_dot_product_attention` that
sends exactly those calls (no mask) to our custom operator `gpuhours::flash_attention` with the
CUDA kernel's saved tensors and output, and everything else to torch's own function. Under
autocast it casts q, k and v to the autocast dtype first, as CUDA autocast does for
`scaled_dot_product_attention`. On real CPU tensors (tests) the operator computes attention with
the CPU kernel, repeating k and v inside the call only, and without dropout (the CPU kernel has
none): its memory is the CUDA kernel's, its values are those of attention without dropout.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

_OP = "gpuhours::flash_attention"
_BACKWARD_OP = "gpuhours::flash_attention_backward"


def _repeat_kv(t: torch.Tensor, n_rep: int) -> torch.Tensor:
    return t if n_rep == 1 else t.repeat_interleave(n_rep, dim=1)


@torch.library.custom_op(_OP, mutates_args=())
def flash_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    dropout_p: float, is_causal: bool, scale: float
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, log-sum-exp) of softmax(q k^T x scale) v, q: (B, H, S, D), k, v: (B, H_kv, S, D)."""
    n_rep = query.shape[1] // key.shape[1]
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, _repeat_kv(key, n_rep), _repeat_kv(value, n_rep), 0.0, is_causal, scale=scale)
    return out, lse


@flash_attention.register_fake
def _(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dropout_p: float,
      is_causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    b, h, s, _ = query.shape
    # the kernels write (batch, seq, heads, dim) and return it as a (batch, heads, seq, dim)
    # view, so that the usual transpose(1, 2).contiguous() after attention copies nothing
    out = query.new_empty((b, s, h, value.shape[-1])).transpose(1, 2)
    return out, query.new_empty((b, h, s), dtype=torch.float32)


@torch.library.custom_op(_BACKWARD_OP, mutates_args=())
def flash_attention_backward(grad: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                             value: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                             dropout_p: float, is_causal: bool, scale: float
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of q, k, v (k and v summed over the query heads that share them)."""
    n_rep = query.shape[1] // key.shape[1]
    dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad, query, _repeat_kv(key, n_rep), _repeat_kv(value, n_rep), out, lse, 0.0, is_causal,
        scale=scale)
    if n_rep > 1:
        b, hkv, s, d = key.shape
        dk = dk.view(b, hkv, n_rep, s, d).sum(2)
        dv = dv.view(b, hkv, n_rep, s, value.shape[-1]).sum(2)
    return dq, dk.contiguous(), dv.contiguous()


@flash_attention_backward.register_fake
def _(grad: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
      out: torch.Tensor, lse: torch.Tensor, dropout_p: float, is_causal: bool, scale: float
      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.empty_like(query), torch.empty_like(key), torch.empty_like(value)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
    query, key, value, dropout_p, is_causal, scale = inputs
    out, lse = output
    ctx.save_for_backward(query, key, value, out, lse)
    ctx.dropout_p, ctx.is_causal, ctx.scale = dropout_p, is_causal, scale


def _backward(ctx: Any, grad_out: torch.Tensor, grad_lse: Any) -> tuple[Any, ...]:
    query, key, value, out, lse = ctx.saved_tensors
    dq, dk, dv = flash_attention_backward(grad_out.contiguous(), query, key, value, out, lse,
                                          ctx.dropout_p, ctx.is_causal, ctx.scale)
    return dq, dk, dv, None, None, None


flash_attention.register_autograd(_backward, setup_context=_setup_context)


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


#: the operators, for FLOP formulas (trace/flops.py)
FORWARD_OP = torch.ops.gpuhours.flash_attention
BACKWARD_OP = torch.ops.gpuhours.flash_attention_backward
