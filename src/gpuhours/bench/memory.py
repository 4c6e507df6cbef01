"""Peak memory of live tensors during one training step, with what it was made of.

A TorchDispatchMode sees every tensor an operator returns (forward, backward and the optimizer
alike); each new storage is counted until its Python object is collected (a weak reference with
a callback: torch keeps one Python object per live storage). Storages that existed before the
step (weights, gradients, optimizer state, buffers) are registered up front. At each new
high-water mark the set of live storages is remembered, so that after the step the peak can be
split into weights, gradients, optimizer state, and the rest (activations, autocast copies,
temporaries). shared/TORCH_NOTES.md: such a counter matched torch's MemTracker within 0.2 MiB
and is 10-70x faster.

This counts tensor storage bytes as allocated by operators; a CUDA caching allocator adds
block rounding and reserve on top (the runner reports its own statistics on a GPU).
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict


class MemoryPeak(BaseModel):
    """Peak bytes of live tensor storage in one step, and its parts at that moment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    peak_bytes: int
    weights_bytes: int
    gradients_bytes: int
    optimizer_state_bytes: int
    activations_and_temporaries_bytes: int
    #: tensors that were alive before the step and are none of the above (the batch, caches)
    other_preexisting_bytes: int
    basis: str


class LiveStorageTracker:
    """Counts live tensor storage bytes on one device type while active (a context manager)."""

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type
        self._serial = itertools.count()
        self._by_cdata: dict[int, int] = {}   # storage C pointer -> serial, for live storages
        self._bytes: dict[int, int] = {}       # serial -> bytes, for live storages
        self._refs: dict[int, Any] = {}        # serial -> weakref (keeps the callback alive)
        self._preexisting: set[int] = set()
        self.live_bytes = 0
        self.peak_bytes = 0
        self._peak_live: frozenset[int] = frozenset()
        self._mode: Any = None

    # bookkeeping -----------------------------------------------------------------------------

    def _serial_of(self, tensor: Any) -> int | None:
        storage = tensor.untyped_storage()
        return self._by_cdata.get(storage._cdata)

    def track(self, tensor: Any, preexisting: bool = False) -> None:
        """Count `tensor`'s storage if it is on our device type and not counted yet."""
        if tensor.device.type != self.device_type:
            return
        storage = tensor.untyped_storage()
        cdata = storage._cdata
        if cdata in self._by_cdata:
            return
        nbytes = int(storage.nbytes())
        serial = next(self._serial)
        self._by_cdata[cdata] = serial
        self._bytes[serial] = nbytes
        self._refs[serial] = weakref.ref(storage, self._freed_callback(serial, cdata))
        if preexisting:
            self._preexisting.add(serial)
        self.live_bytes += nbytes
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
            self._peak_live = frozenset(self._bytes)

    def _freed_callback(self, serial: int, cdata: int) -> Callable[[Any], None]:
        def freed(_ref: Any) -> None:
            nbytes = self._bytes.pop(serial, 0)
            self.live_bytes -= nbytes
            self._refs.pop(serial, None)
            if self._by_cdata.get(cdata) == serial:
                del self._by_cdata[cdata]
        return freed

    # the dispatch mode -----------------------------------------------------------------------

    def __enter__(self) -> LiveStorageTracker:
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves

        tracker = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
                out = func(*args, **(kwargs or {}))
                for leaf in tree_leaves(out):
                    if _is_tensor(leaf):
                        tracker.track(leaf)
                return out

        self._mode = _Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._mode.__exit__(*exc)
        self._mode = None

    # the answer ------------------------------------------------------------------------------

    def peak(self, weights: Iterable[Any], gradients: Iterable[Any],
             optimizer_state: Iterable[Any]) -> MemoryPeak:
        """Split the peak by category; the tensors given must still be alive (end of step)."""
        at_peak = self._peak_live
        counted: set[int] = set()

        def bytes_of(tensors: Iterable[Any]) -> int:
            total = 0
            for t in tensors:
                if not _is_tensor(t) or t.device.type != self.device_type:
                    continue
                serial = self._serial_of(t)
                if serial is not None and serial in at_peak and serial not in counted:
                    counted.add(serial)
                    total += self._bytes[serial]
            return total

        w = bytes_of(weights)
        g = bytes_of(gradients)
        o = bytes_of(optimizer_state)
        before = sum(self._bytes.get(s, 0) for s in at_peak & (self._preexisting - counted))
        rest = self.peak_bytes - w - g - o - before
        return MemoryPeak(
            peak_bytes=self.peak_bytes, weights_bytes=w, gradients_bytes=g,
            optimizer_state_bytes=o, activations_and_temporaries_bytes=rest,
            other_preexisting_bytes=before,
            basis="measured: live tensor storage bytes counted by a TorchDispatchMode over one "
                  "real step (gpuhours.bench.memory); parts told apart by storage identity at "
                  "the high-water mark")


def _is_tensor(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def state_tensors(model: Any, optimizer: Any) -> tuple[list[Any], list[Any], list[Any]]:
    """(weights and buffers, gradients, optimizer state tensors) of a model and its optimizer."""
    weights = list(model.parameters()) + list(model.buffers())
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    state = [v for s in optimizer.state.values() for v in s.values() if _is_tensor(v)]
    return weights, grads, state


def bytes_of_tensors(tensors: Iterable[Any]) -> int:
    """Storage bytes of distinct storages (tied weights and views count once)."""
    seen: set[int] = set()
    total = 0
    for t in tensors:
        s = t.untyped_storage()
        if s._cdata not in seen:
            seen.add(s._cdata)
            total += int(s.nbytes())
    return total
