"""The storage autograd saves for backward, measured on real models: the independent count the
activation formulas (estimate/memory.py, estimate/vit.py, estimate/vision.py) are held to."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

#: a two-layer Llama with an untied head, small enough to run on CPU in the real-run tests
#: (peft's LoRA and DoRA adapters and their dtypes)
TINY_LLAMA_CONFIG: dict[str, Any] = dict(
    model_type="llama", hidden_size=256, intermediate_size=688, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
    max_position_embeddings=512, tie_word_embeddings=False)


class Saved(NamedTuple):
    """One distinct storage autograd saved: a weak reference to the first tensor seen on it
    (dead once backward could no longer need it), its bytes, that tensor's shape."""

    ref: Any
    nbytes: int
    shape: tuple[int, ...]


@contextmanager
def saved_storages(exclude: Iterable[Any]) -> Iterator[dict[int, Saved]]:
    """Every distinct storage autograd saves inside the block, by data pointer; the storages of
    the tensors in `exclude` (parameters, inputs) left out."""
    import torch

    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict[int, Saved] = {}

    def pack(t: Any) -> Any:
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip:
            seen.setdefault(storage.data_ptr(),
                            Saved(weakref.ref(t), storage.nbytes(), tuple(t.shape)))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield seen


def saved_storage_bytes(model: Any, batch: int, seq: int, vocab: int,
                        labels: Any = None) -> int:
    """Bytes of every distinct storage autograd saves in one forward of `model` (train mode) on
    a `batch` x `seq` batch of random token ids (labels: the ids, unless given), the parameters'
    own left out."""
    import torch

    model.train()
    ids = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))
    with saved_storages(model.parameters()) as seen:
        model(input_ids=ids, labels=ids if labels is None else labels)
    return sum(s.nbytes for s in seen.values())


@contextmanager
def tracked_head(tokens: int, hidden: int, vocab: int) -> Iterator[tuple[Any, Any, Any, Any]]:
    """(h, w, y, tracker): a bf16 hidden state that takes a gradient, an LM head's weight and the
    labels, seeded, already counted by bench's live-storage tracker (the one every loss kernel's
    storage test reads), inside the tracker's block: what a loss's tests then run and count."""
    import torch

    from gpuhours.torchkit.storage import LiveStorageTracker

    torch.manual_seed(0)
    h = torch.randn(tokens, hidden, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(vocab, hidden, dtype=torch.bfloat16)
    y = torch.randint(0, vocab, (tokens,))
    tracker = LiveStorageTracker("cpu")
    with tracker:
        for x in (h, w, y):
            tracker.track(x, preexisting=True)
        yield h, w, y, tracker


def alive_saved_bytes(model: Any, ids: Any, context: Any = None) -> int:
    """Bytes of the distinct storages autograd saved in one forward of `model` on `ids` (with
    labels: the loss too) that are still alive when it returns, the parameters' and buffers'
    own left out. Liveness, not first sight: a storage freed inside the forward (DoRA's and
    LoHa's transient weights) can have its address reused, so an address seen again after
    every tensor on it died counts as a new storage. `context`: e.g. torch.autocast."""
    import torch

    skip = {p.untyped_storage().data_ptr() for p in model.parameters()}
    skip |= {b.untyped_storage().data_ptr() for b in model.buffers()}
    current: dict[int, list[Any]] = {}
    ended: list[list[Any]] = []

    def alive(entry: list[Any]) -> bool:
        return any(ref() is not None for ref in entry[1:])

    def pack(t: Any) -> Any:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in skip:
            entry = current.get(ptr)
            if entry is not None and not alive(entry):
                ended.append(entry)
                entry = None
            if entry is None:
                entry = current[ptr] = [storage.nbytes()]
            entry.append(weakref.ref(t))
        return t

    with context or contextlib.nullcontext(), \
            torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(input_ids=ids, labels=ids)
    total = sum(e[0] for e in [*current.values(), *ended] if alive(e))
    del out
    return total
