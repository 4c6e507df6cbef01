"""What a trace changes in transformers so that the fake-tensor run takes the path a GPU run
takes. Each is a context manager, undone on exit; each one's docstring says why.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from gpuhours.trace.attention import cuda_like_dropout, cuda_like_sdpa
from gpuhours.trace.autocast import cuda_fp32_policy


@contextlib.contextmanager
def unpacked_sequences() -> Iterator[None]:
    """Within: transformers takes each batch row as one sequence, without reading position ids.

    transformers looks for several sequences packed into one row by reading the position ids;
    on fake tensors it cannot read them, assumes packing and builds a full causal mask, which
    turns off SDPA's `is_causal` path (the flash kernel, grouped-query attention without
    repeating k and v). Our batch holds one sequence per row, as a real unpacked batch does, so
    we answer the question for it: no packing.
    """
    try:
        from transformers import masking_utils
    except ImportError:  # pragma: no cover
        yield
        return
    original = masking_utils.find_packed_sequence_indices
    masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = original


@contextlib.contextmanager
def moe_grouped_mm_fallback() -> Iterator[None]:
    """Within: MoE experts whose weights are not bf16 use transformers' own grouped-matmul
    operator (it saves the same tensors) instead of torch's grouped_mm, whose kernels and fake
    implementation take bf16 only."""
    try:
        from transformers.integrations import moe
    except ImportError:  # pragma: no cover - a transformers without MoE experts
        yield
        return
    original = getattr(moe, "_can_use_grouped_mm", None)
    if original is None:  # pragma: no cover
        yield
        return

    def can_use(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> bool:
        return bool(weight.dtype == torch.bfloat16 and original(input, weight, offs))

    moe._can_use_grouped_mm = can_use
    try:
        yield
    finally:
        moe._can_use_grouped_mm = original


@contextlib.contextmanager
def as_on_gpu(flash_attention: bool, autocast: bool) -> Iterator[None]:
    """All of the above, CUDA's dropout (trace/attention.py), CUDA's flash attention when
    `flash_attention` (trace/attention.py), CUDA autocast's fp32 operators when `autocast`
    (trace/autocast.py)."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(unpacked_sequences())
        stack.enter_context(moe_grouped_mm_fallback())
        stack.enter_context(cuda_like_dropout())
        if flash_attention:
            stack.enter_context(cuda_like_sdpa())
        if autocast:
            stack.enter_context(cuda_fp32_policy())
        yield


