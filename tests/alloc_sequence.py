"""The allocations and frees of a real training step, in order, recorded at the dispatcher.

A TorchDispatchMode sees every operator's outputs; each storage not seen before is an
allocation of `untyped_storage().nbytes()` bytes, freed when the last tensor (view, saved copy)
holding it goes (gpuhours.torchkit.storage.LiveStorages). Storages that exist before recording
(weights, the batch) are not in the log. A test helper (torch needed)."""

from __future__ import annotations

import itertools
from typing import Any

from gpuhours.torchkit.storage import LiveStorages


class SequenceRecorder:
    """`events`: +uid for an allocation of `sizes[uid]` bytes, -uid for its free; `marks`:
    (index into events, label) set by `mark`."""

    def __init__(self) -> None:
        self.sizes: dict[int, int] = {}
        self.events: list[int] = []
        self.marks: list[tuple[int, str]] = []
        self._uids = itertools.count(1)
        self._live = LiveStorages(lambda uid: self.events.append(-uid))
        self._mode: Any = None

    def mark(self, label: str) -> None:
        self.marks.append((len(self.events), label))

    def _track(self, t: Any) -> None:
        if t.device.type != "cpu" or t in self._live:
            return
        uid = next(self._uids)
        self.sizes[uid] = int(t.untyped_storage().nbytes())
        self._live.add(t, uid)
        self.events.append(uid)

    def __enter__(self) -> SequenceRecorder:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves

        rec = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
                out = func(*args, **(kwargs or {}))
                for leaf in tree_leaves(out):
                    if isinstance(leaf, torch.Tensor):
                        rec._track(leaf)
                return out

        self._mode = _Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._mode.__exit__(*exc)
        self._mode = None
