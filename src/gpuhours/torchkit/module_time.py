"""Forward and backward time of each top-level module of a real training step, measured.

Forward: a pre-hook and a post-hook on each top-level module synchronise the device and read
the clock; the difference is that call's forward time (a module called six times counts six
times). Backward: the post-hook also claims, for its module, the autograd graph nodes its call
made (walking back from its outputs to the nodes that made its inputs). Before `backward()`
every node of the graph gets a pre-hook; when the node about to run belongs to another module
than the last one, the device is synchronised and the time since the last change goes to the
last module. Nodes of no module (the loss, the model's own forward between its children) go to
OUTSIDE. So the rows of one step add up to its forward and backward exactly, and a module that
needs no gradient (a frozen encoder fed by the batch) takes no backward time.

"Top-level" is each child of the model; a ModuleList or ModuleDict (never called itself) is
replaced by its elements, counted together as `name.*`; a transformers model's base model
(`model.base_model`) is replaced by its children, so that its layers are seen.

The synchronisations cost time on a GPU (the host waits at each boundary instead of running
ahead): the step measured with hooks is reported beside the one measured without. With
`ranges=True` each module's forward and backward also appear as named ranges
(`module: vit`, `module: vit (backward)`) in a torch.profiler trace. torch is imported inside
methods: importing this module stays light.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

#: the row of the time spent outside the top-level modules: the loss, and the model's own
#: forward between its children
OUTSIDE = "(loss, glue)"
_KEY = "gpuhours.top_module"


def top_modules(model: Any) -> list[tuple[str, Any]]:
    """(label, module) of each top-level module of `model` (see the module docstring)."""
    import torch

    base = getattr(model, "base_model", None)
    out: list[tuple[str, Any]] = []

    def add(prefix: str, parent: Any) -> None:
        for name, child in parent.named_children():
            path = f"{prefix}{name}"
            if child is base and child is not model:
                add(f"{path}.", child)
            elif isinstance(child, torch.nn.ModuleList | torch.nn.ModuleDict):
                out.extend((f"{path}.*", c) for c in child.children())
            else:
                out.append((path, child))

    add("", model)
    return out


class ModuleTimer:
    """Hooks that time each top-level module's forward and backward (a context manager).

    `synchronize()` waits for the device; `observe` of a runner's Trainer calls
    `before_backward(loss)` and `after_backward()` around each backward."""

    def __init__(self, model: Any, synchronize: Callable[[], None],
                 clock: Callable[[], float] = time.perf_counter, ranges: bool = False) -> None:
        self.modules = top_modules(model)
        self._sync = synchronize
        self._clock = clock
        self._ranges = ranges
        self.forward_s: dict[str, float] = defaultdict(float)
        self.backward_s: dict[str, float] = defaultdict(float)
        self._handles: list[Any] = []
        self._node_handles: list[Any] = []
        self._depth = 0
        self._t0 = 0.0
        self._inputs: dict[int, Any] = {}
        self._current = OUTSIDE
        self._bt = 0.0
        self._range: Any = None

    # --- installation -----------------------------------------------------------------------
    def __enter__(self) -> ModuleTimer:
        for label, module in self.modules:
            self._handles.append(module.register_forward_pre_hook(self._pre(label),
                                                                  with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._post(label),
                                                              always_call=True))
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._drop_node_hooks()
        self._close_range()

    def take(self) -> tuple[dict[str, float], dict[str, float]]:
        """(forward, backward) seconds by label since the last take; resets them."""
        fwd, bwd = dict(self.forward_s), dict(self.backward_s)
        self.forward_s.clear()
        self.backward_s.clear()
        return fwd, bwd

    # --- forward ------------------------------------------------------------------------------
    def _pre(self, label: str) -> Callable[..., None]:
        def hook(module: Any, args: Any, kwargs: Any) -> None:
            self._depth += 1
            if self._depth > 1:  # a top-level module called from inside another: the outer's
                return
            self._inputs = {id(n): n for n in _grad_fns((args, kwargs))}
            self._sync()
            self._open_range(f"module: {label}")
            self._t0 = self._clock()

        return hook

    def _post(self, label: str) -> Callable[..., None]:
        def hook(module: Any, args: Any, output: Any) -> None:
            self._depth -= 1
            if self._depth > 0:
                return
            self._sync()
            self.forward_s[label] += self._clock() - self._t0
            self._close_range()
            import torch

            if torch.is_grad_enabled():
                _claim(output, label, self._inputs)
            self._inputs = {}

        return hook

    # --- backward -----------------------------------------------------------------------------
    def before_backward(self, loss: Any) -> None:
        """Put a pre-hook on every node of `loss`'s graph; start the clock."""
        self._drop_node_hooks()
        seen: dict[int, Any] = {}
        todo = [loss.grad_fn] if loss.grad_fn is not None else []
        while todo:
            node = todo.pop()
            if id(node) in seen:
                continue
            seen[id(node)] = node
            label = node.metadata.get(_KEY, OUTSIDE)
            self._node_handles.append(node.register_prehook(self._enter(label)))
            todo.extend(n for n, _ in node.next_functions if n is not None)
        self._sync()
        self._current = OUTSIDE
        self._open_range(f"module: {OUTSIDE} (backward)")
        self._bt = self._clock()

    def _enter(self, label: str) -> Callable[..., None]:
        def prehook(grad_outputs: Any) -> None:
            if label == self._current:
                return
            self._sync()
            now = self._clock()
            self.backward_s[self._current] += now - self._bt
            self._close_range()
            self._open_range(f"module: {label} (backward)")
            self._current, self._bt = label, now

        return prehook

    def after_backward(self) -> None:
        self._sync()
        self.backward_s[self._current] += self._clock() - self._bt
        self._close_range()
        self._drop_node_hooks()

    def _drop_node_hooks(self) -> None:
        for h in self._node_handles:
            h.remove()
        self._node_handles.clear()

    # --- profiler ranges ----------------------------------------------------------------------
    def _open_range(self, name: str) -> None:
        if self._ranges:
            from torch.autograd.profiler import record_function

            self._range = record_function(name)
            self._range.__enter__()

    def _close_range(self) -> None:
        if self._range is not None:
            self._range.__exit__(None, None, None)
            self._range = None


def _grad_fns(value: Any) -> list[Any]:
    import torch
    from torch.utils._pytree import tree_leaves

    return [t.grad_fn for t in tree_leaves(value)
            if isinstance(t, torch.Tensor) and t.grad_fn is not None]


def _claim(output: Any, label: str, inputs: dict[int, Any]) -> None:
    """Mark the graph nodes made between the module's inputs and its outputs as `label`'s."""
    todo = [n for n in _grad_fns(output) if id(n) not in inputs]
    seen: dict[int, Any] = {}  # holds the nodes, so that no id is reused during the walk
    while todo:
        node = todo.pop()
        if id(node) in seen or _KEY in node.metadata:
            continue
        seen[id(node)] = node
        node.metadata[_KEY] = label
        todo.extend(n for n, _ in node.next_functions if n is not None and id(n) not in inputs)


class ModuleTimeRow(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    component: str
    #: None for the rows that are no module (the data wait, the optimizer step)
    forward_s: float | None
    backward_s: float | None
    total_s: float
    share: float


class ModuleTimes(BaseModel):
    """Median time per component over steps timed with the module hooks, seconds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rows: list[ModuleTimeRow]
    steps: int
    #: the sum of the rows: a step as the hooked steps took it
    total_s: float
    #: the median of the hooked steps' own wall time
    hooked_step_median_s: float
    basis: str


def summarize_module_times(steps: list[dict[str, tuple[float, float]]], data_s: list[float],
                           optimizer_s: list[float], hooked_steps_s: list[float],
                           basis: str) -> ModuleTimes:
    """Medians per component over the hooked steps: each step maps a component to its
    (forward, backward) seconds; the data wait and the optimizer step are rows of their own."""
    labels: list[str] = []
    for s in steps:
        labels += [k for k in s if k not in labels]
    rows: list[tuple[str, float | None, float | None, float]] = []
    if any(data_s):
        rows.append(("data (batch, to device)", None, None, statistics.median(data_s)))
    for label in labels:
        fwd = statistics.median(s.get(label, (0.0, 0.0))[0] for s in steps)
        bwd = statistics.median(s.get(label, (0.0, 0.0))[1] for s in steps)
        rows.append((label, fwd, bwd, fwd + bwd))
    rows.append(("optimizer step", None, None, statistics.median(optimizer_s)))
    total = sum(t for *_, t in rows)
    return ModuleTimes(
        rows=[ModuleTimeRow(component=c, forward_s=f, backward_s=b, total_s=t,
                            share=t / total if total else 0.0) for c, f, b, t in rows],
        steps=len(steps), total_s=total,
        hooked_step_median_s=statistics.median(hooked_steps_s), basis=basis)
