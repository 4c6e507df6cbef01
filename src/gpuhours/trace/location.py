"""Which module an operator runs in, forward and backward.

Forward (and the recomputation of a checkpointed layer in backward): a stack of module paths
kept by forward pre- and post-hooks. Backward: when a module's forward returns, its post-hook
walks the autograd graph back from the outputs and writes the module path into the metadata of
every graph node that no inner module has claimed; during backward the operator's node is
`torch._C._current_autograd_node()` and its metadata names the module. The walk stops at the
nodes that made the module's inputs (recorded by the pre-hook) and at nodes that belong to
modules outside this one, so each node is visited once per enclosing module (a handful of
times).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

_KEY = "gpuhours.module"


class ModuleLocator:
    """Keeps the current module path; `install` hooks every module of a model."""

    def __init__(self) -> None:
        self.stack: list[str] = []
        #: graph nodes that made each running module's inputs: where its walk stops
        self._inputs: list[dict[int, Any]] = []
        self._handles: list[Any] = []

    def install(self, model: torch.nn.Module) -> None:
        for name, module in model.named_modules():
            self._handles.append(module.register_forward_pre_hook(self._pre(name),
                                                                  with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._post(name), always_call=True))

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def in_forward_module(self) -> bool:
        """True while a module's forward runs (in backward: a checkpointed layer recomputing)."""
        return bool(self.stack)

    def current(self) -> str:
        """The innermost module running now, forward or backward ('' for the root or none)."""
        if self.stack:
            return self.stack[-1]
        node = torch._C._current_autograd_node()
        if node is None:
            return ""
        metadata: dict[str, Any] = node.metadata  # type: ignore[assignment]
        path = metadata.get(_KEY)
        return "" if path is None else str(path)

    def _pre(self, name: str) -> Any:
        def hook(module: torch.nn.Module, args: Any, kwargs: Any) -> None:
            self.stack.append(name)
            self._inputs.append({id(n): n for n in _grad_fns((args, kwargs))})

        return hook

    def _post(self, name: str) -> Any:
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            if self.stack and self.stack[-1] == name:
                self.stack.pop()
                inputs = self._inputs.pop()
                if torch.is_grad_enabled():
                    _claim(output, name, inputs)

        return hook


def _grad_fns(output: Any) -> Iterator[Any]:
    for t in tree_leaves(output):
        if isinstance(t, torch.Tensor) and t.grad_fn is not None:
            yield t.grad_fn


def _claim(output: Any, path: str, inputs: dict[int, Any]) -> None:
    """Write `path` into the graph nodes that produced `output` from the module's `inputs`
    (their nodes) and belong to no inner module."""
    prefix = path + "." if path else ""
    todo = [n for n in _grad_fns(output) if id(n) not in inputs]
    seen: dict[int, Any] = {}  # holds the nodes, so that no id is reused during the walk
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        owner = node.metadata.get(_KEY)
        if owner is None:
            node.metadata[_KEY] = path
        elif owner != path and not owner.startswith(prefix):
            continue  # a node of an earlier module: the walk ends here
        todo.extend(nxt for nxt, _ in node.next_functions
                    if nxt is not None and id(nxt) not in inputs)
