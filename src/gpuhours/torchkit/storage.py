"""Live tensor storage, counted at the dispatcher: the identity-and-lifetime core that bench and
trace share, and bench's tracker of a step's peak.

`LiveStorages` knows which storages are alive. torch keeps one Python object per live storage
(`tensor.untyped_storage()` returns the same object while the storage lives), so `id()` of that
object names the storage, and a weak reference with a callback on it says when the last tensor,
view or autograd saved copy holding it is gone. Views share their base's storage and so cost
nothing; in-place operators make no storage.

`LiveStorageTracker` (bench) is a TorchDispatchMode over it: every storage an operator returns is
counted until it is freed; storages that existed before the step (weights, gradients, optimizer
state, buffers) are registered up front. At each new high-water mark the set of live storages is
remembered, so that after the step the peak can be split into weights, gradients, optimizer
state and the rest (activations, autocast copies, temporaries). shared/TORCH_NOTES.md: such a
counter matched torch's MemTracker within 0.2 MiB and is 10-70x faster. The trace's
StorageTracker (trace/tracker.py) builds its ordered allocation log on the same core.

This counts tensor storage bytes as operators allocate them; a CUDA caching allocator adds block
rounding and reserve on top (bench reports torch.cuda's statistics on a GPU; trace/allocator.py
models them). torch is imported only where a tensor is looked at: importing this module stays
light.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict


class LiveStorages:
    """Live storages by identity, each under the uid its owner gave it. `on_free(uid)` is called
    when the last storage object holding a uid is collected."""

    def __init__(self, on_free: Callable[[int], None]) -> None:
        self._on_free = on_free
        #: id(storage object) -> (uid, weak reference keeping the callback alive)
        self._live: dict[int, tuple[int, Any]] = {}
        #: storage objects holding a uid, where more than one (see `alias`)
        self._holders: dict[int, int] = {}

    def __contains__(self, tensor: Any) -> bool:
        return id(tensor.untyped_storage()) in self._live

    def uid_of(self, tensor: Any) -> int | None:
        """The uid of `tensor`'s storage, None when it is not being watched."""
        entry = self._live.get(id(tensor.untyped_storage()))
        return entry[0] if entry else None

    def add(self, tensor: Any, uid: int) -> None:
        """Watch `tensor`'s storage under `uid` (the caller checked that it is new)."""
        storage = tensor.untyped_storage()
        key = id(storage)
        self._live[key] = (uid, weakref.ref(storage, self._freed(key)))

    def alias(self, tensor: Any, uid: int) -> None:
        """`tensor`'s storage holds the bytes of `uid` from now on, besides the storage that
        already does: the uid is freed when both are gone (no new allocation)."""
        self._holders[uid] = self._holders.get(uid, 1) + 1
        self.add(tensor, uid)

    def _freed(self, key: int) -> Callable[[Any], None]:
        def callback(_ref: Any) -> None:
            entry = self._live.pop(key, None)
            if entry is None:
                return
            uid = entry[0]
            held = self._holders.pop(uid, 1) - 1
            if held > 0:
                self._holders[uid] = held
            else:
                self._on_free(uid)

        return callback


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
        self._storages = LiveStorages(self._freed)
        self._bytes: dict[int, int] = {}       # serial -> bytes, for live storages
        self._preexisting: set[int] = set()
        self.live_bytes = 0
        self.peak_bytes = 0
        self._peak_live: frozenset[int] = frozenset()
        self._mode: Any = None

    def track(self, tensor: Any, preexisting: bool = False) -> None:
        """Count `tensor`'s storage if it is on our device type and not counted yet."""
        if tensor.device.type != self.device_type or tensor in self._storages:
            return
        nbytes = int(tensor.untyped_storage().nbytes())
        serial = next(self._serial)
        self._storages.add(tensor, serial)
        self._bytes[serial] = nbytes
        if preexisting:
            self._preexisting.add(serial)
        self.live_bytes += nbytes
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
            self._peak_live = frozenset(self._bytes)

    def _freed(self, serial: int) -> None:
        self.live_bytes -= self._bytes.pop(serial, 0)

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
                serial = self._storages.uid_of(t)
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
                  "real step (gpuhours.torchkit.storage); parts told apart by storage identity "
                  "at the high-water mark")


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
