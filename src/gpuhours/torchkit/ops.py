"""Count the device operators one training step dispatches: the factor of its host floor.

In eager mode every aten operator that produces or writes data is one (or, for foreach ops, a
few) kernel launches, each costing the host a roughly fixed time in Python, the dispatcher,
autograd and the CUDA launch. A step cannot finish before its host has issued them all: with a
small micro-batch that, not the GPU, sets the step time (docs/bench.md, the H100 run). Views,
aliases and allocations launch nothing on the device and are not counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

#: operators that allocate or describe memory without a kernel of their own
_NO_KERNEL = frozenset({
    "aten.empty.memory_format", "aten.empty_strided.default", "aten.new_empty.default",
    "aten.new_empty_strided.default", "aten.empty_like.default", "aten.lift_fresh.default",
    "aten._local_scalar_dense.default", "aten.detach.default", "aten.alias.default",
    "aten.set_.source_Storage_storage_offset", "aten.resize_.default", "aten.sym_size.int",
    "aten.sym_stride.int", "aten.sym_numel.default", "aten.is_same_size.default",
    "aten.is_nonzero.default", "aten._has_compatible_shallow_copy_type.default",
})


def counts_as_kernel(func: Any) -> bool:
    """Whether dispatching `func` (an OpOverload) launches device work."""
    if getattr(func, "is_view", False):
        return False
    return str(func) not in _NO_KERNEL


def count_dispatched(step: Callable[[], object]) -> int:
    """Run `step` once and count every aten operator it dispatches, views and allocations
    included: the host's dispatches (what a per-operator host time multiplies), not only the
    kernels count_ops counts."""
    from torch.utils._python_dispatch import TorchDispatchMode

    calls = 0

    class _Every(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            nonlocal calls
            calls += 1
            return func(*args, **(kwargs or {}))

    with _Every():
        step()
    return calls


def count_ops(step: Callable[[], object]) -> Counter[str]:
    """Run `step` once and count, per operator name, the operators that launch device work
    (below autograd: what actually executes, backward included)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    counts: Counter[str] = Counter()

    class _Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            if counts_as_kernel(func):
                counts[str(func.overloadpacket)] += 1
            return func(*args, **(kwargs or {}))

    with _Counter():
        step()
    return counts
