"""`gpuhours::flash_attention`: attention as CUDA's flash kernel keeps it, runnable on CPU and on
fake tensors.

On a GPU, `scaled_dot_product_attention` without a mask runs the flash kernel: it saves q, k and
v as given (grouped-query attention is native: k and v keep their fewer heads), its output, and
an fp32 log-sum-exp per head and query; with dropout it keeps the random generator's seed, not a
mask. The CPU flash kernel has no grouped-query support, so torch repeats k and v to all heads
first and saves the repeated copies: memory a GPU never holds. This operator saves exactly what
the CUDA kernel saves (trace/attention.py routes attention to it during a trace).

On real CPU tensors (tests) it computes attention with the CPU kernel, repeating k and v inside
the call only, and without dropout (the CPU kernel has none): its memory is the CUDA kernel's,
its values those of attention without dropout. Its FLOPs are registered in torchkit/flops.py.
"""

from __future__ import annotations

from typing import Any

import torch

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

#: the operators, for the FLOP registry (torchkit/flops.py)
FORWARD_OP = torch.ops.gpuhours.flash_attention
BACKWARD_OP = torch.ops.gpuhours.flash_attention_backward
