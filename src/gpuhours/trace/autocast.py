"""CUDA autocast's fp32 policy, applied to a CPU trace under autocast.

torch.autocast has a policy per device. CUDA's runs some operators in fp32 whatever their input
(softmax, log_softmax, layer_norm, pow, exp, sum, the losses, ...: the "fp32" list of
torch/csrc/autograd autocast, as the PyTorch AMP documentation lists it for CUDA). CPU autocast
has no such list for most of them: a softmax of fp16 scores stays fp16 on the CPU and is fp32
on the GPU, a difference of bytes per score that a trace must not make. Within
`cuda_fp32_policy()`, while CPU autocast is on, the Python-level calls of those operators get
their half-precision inputs cast to fp32 first, which is what CUDA autocast does. Operators
called from inside C++ (a composite's internals) are not affected; transformers' models call
these from Python.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

#: the members of CUDA autocast's fp32 list that transformer models call: (namespace, name)
_FP32_FUNCS: tuple[tuple[Any, str], ...] = tuple(
    [(F, n) for n in ("softmax", "log_softmax", "layer_norm", "group_norm", "nll_loss",
                      "cross_entropy", "mse_loss", "l1_loss", "smooth_l1_loss", "kl_div",
                      "binary_cross_entropy_with_logits", "cosine_similarity")]
    + [(torch, n) for n in ("softmax", "log_softmax", "layer_norm", "group_norm", "pow", "exp",
                            "log", "rsqrt", "sum", "cumsum", "prod", "norm", "logsumexp")]
    + [(torch.Tensor, n) for n in ("softmax", "log_softmax", "pow", "__pow__", "exp", "log",
                                   "rsqrt", "sum", "cumsum", "prod", "norm", "logsumexp")])

_HALF = (torch.float16, torch.bfloat16)


def _up(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.dtype in _HALF:
        return x.float()
    return x


def _fp32(fn: Any) -> Any:
    def run_in_fp32(*args: Any, **kwargs: Any) -> Any:
        if torch.is_autocast_enabled("cpu"):
            args = tuple(_up(a) for a in args)
            kwargs = {k: _up(v) for k, v in kwargs.items()}
        return fn(*args, **kwargs)

    return run_in_fp32


@contextlib.contextmanager
def cuda_fp32_policy() -> Iterator[None]:
    """Within (and while CPU autocast is on): CUDA autocast's fp32 operators run in fp32.

    The functions are replaced where they live (torch.nn.functional, torch, torch.Tensor) and
    put back on exit: a torch-function mode would not see the recomputation of checkpointed
    layers, which autograd runs during backward."""
    saved = [(ns, name, getattr(ns, name)) for ns, name in _FP32_FUNCS]
    try:
        for ns, name, fn in saved:
            setattr(ns, name, _fp32(fn))
        yield
    finally:
        for ns, name, fn in saved:
            setattr(ns, name, fn)
