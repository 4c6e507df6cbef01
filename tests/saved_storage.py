"""The storage autograd saves for backward in one training forward of a real model, parameters
excluded: the independent count the activation formulas (estimate/memory.py) are held to."""

from __future__ import annotations

from typing import Any


def saved_storage_bytes(model: Any, batch: int, seq: int, vocab: int) -> int:
    """Bytes of every distinct storage autograd saves in one forward of `model` (train mode) on
    a `batch` x `seq` batch of random token ids with labels, the parameters' own left out."""
    import torch

    model.train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: Any) -> Any:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen.setdefault(storage.data_ptr(), storage.nbytes())
        return t

    ids = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, labels=ids)
    return sum(seen.values())
