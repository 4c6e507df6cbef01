"""A dispatch mode counting the bytes each operator moves, the independent count the eager
pass formulas of estimate/moe_gemm.py and estimate/rope.py are held to (tests/test_moe_gemm.py,
tests/test_rope.py)."""

from __future__ import annotations

from typing import Any

#: operators that make views (no bytes moved)
VIEWS = {"aten.t.default", "aten.view.default", "aten._unsafe_view.default",
         "aten.alias.default", "aten.detach.default", "aten.expand.default",
         "aten.split.Tensor", "aten.split_with_sizes.default", "aten.slice.Tensor",
         "aten.chunk.default", "aten.unsqueeze.default", "aten.as_strided.default"}


def byte_counter(torch: Any) -> Any:
    """A TorchDispatchMode whose `total` adds, for each operator that is not a view, the bytes
    of its tensor operands as viewed (a half of a chunk is half) and of its outputs."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            if str(func) in VIEWS:
                return out
            flat: list[Any] = []

            def walk(x: Any) -> None:
                if isinstance(x, torch.Tensor):
                    flat.append(x)
                elif isinstance(x, (list, tuple)):
                    for y in x:
                        walk(y)

            walk(list(args) + list((kwargs or {}).values()))
            walk(out)
            self.total += sum(t.numel() * t.element_size() for t in flat)
            return out

    return Counter()
