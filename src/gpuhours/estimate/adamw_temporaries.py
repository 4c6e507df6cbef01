"""How many state-sized sets of temporaries torch's AdamW holds at once in its step, by
implementation (issue 14: Qwen's own fine-tuning rows, PyTorch 2.0).

torch's foreach AdamW (torch/optim/adamw.py, `_multi_tensor_adamw`, the default on CUDA from
2.0: optimizer.py `_default_to_fused_or_foreach`) runs each operator over the list of all
parameters of a dtype and device, so each temporary it makes is a list as large as the
optimizer state of one moment (one "set"):

- torch 2.0.0 (read from its wheel, torch/optim/adamw.py:564-568), not capturable:
  `exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)`, `torch._foreach_div_(
  exp_avg_sq_sqrt, ...)`, `denom = torch._foreach_add(exp_avg_sq_sqrt, eps)`, then
  `torch._foreach_addcdiv_(device_params, device_exp_avgs, denom, step_size)`: the square
  root's list and `denom` are both alive at the addcdiv_, two sets.
- torch 2.1.0 (torch/optim/adamw.py:599-603): `torch._foreach_add_(exp_avg_sq_sqrt, eps)` in
  place, then addcdiv_ with it: one set. The change is pytorch/pytorch#104898 ("[foreach][AdamW]
  Minimize intermediates to save peak memory", merged 2023-07-10, for pytorch#97712), in
  every release since (2.13 measured one set under fake tensors: shared TORCH_NOTES.md).

fused AdamW (fused=True, bitsandbytes' kernels) and a per-parameter loop hold at most one
tensor's worth: none counted.

The foreach path runs once per (device, dtype) group of parameters
(`_group_tensors_by_device_and_dtype`, groups in the order of their first parameter), and each
group's lists replace the previous group's only when assigned, after they are made: in torch
2.0, making group k's square root finds group k-1's square root and `denom` alive (2 S_{k-1} +
S_k), making its `denom` finds group k-1's `denom` and group k's root (S_{k-1} + 2 S_k); in
2.1+, group k's root is made beside group k-1's (S_{k-1} + S_k). One group: 2 S in 2.0, S
after. (LoRA with trainable embedding copies in bf16 beside fp32 adapters has two groups.)
"""

from __future__ import annotations

from collections.abc import Sequence

#: state-sized temporary sets alive at once in the step, by setup.OptimizerImpl (AdamW only)
ADAMW_TEMPORARY_SETS = {"foreach": 1, "foreach-2.0": 2, "fused": 0, "per-parameter": 0}


def adamw_temporary_sets(optimizer: str, optimizer_impl: str) -> int:
    """State-sized sets of temporaries torch's AdamW holds at once in its step (module
    docstring): 1 for torch >= 2.1's foreach path, 2 for torch 2.0's, 0 for fused kernels and
    per-parameter loops, and 0 for any optimizer but torch's AdamW (8-bit: bitsandbytes' fused
    kernel; SGD: not modelled)."""
    if optimizer != "adamw":
        return 0
    return ADAMW_TEMPORARY_SETS[optimizer_impl]


def adamw_temporary_bytes(optimizer: str, optimizer_impl: str,
                          group_set_bytes: Sequence[float]) -> float:
    """Bytes of torch AdamW's step temporaries alive at once: `group_set_bytes` is one set per
    (device, dtype) group of parameters, in the order the step runs them (module docstring):
    the largest over groups k of 2 S_{k-1} + S_k and S_{k-1} + 2 S_k for torch 2.0's foreach
    path, of S_{k-1} + S_k for later releases, 0 for fused kernels and per-parameter loops."""
    sets = adamw_temporary_sets(optimizer, optimizer_impl)
    if sets == 0 or not group_set_bytes:
        return 0.0
    peak = 0.0
    before = 0.0
    for s in group_set_bytes:
        peak = max(peak, before + s if sets == 1 else before + s + max(before, s))
        before = s
    return peak
