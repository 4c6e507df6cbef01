"""Our dispatch-level account of tensor storage: every allocation and free of a step, in order.

A TorchDispatchMode sees every operator below autograd. Each output whose storage it has not
seen is an allocation of `storage.nbytes()` bytes; the free is recorded when the last tensor (or
view, or autograd's saved copy) that holds it goes (storage identity and lifetime:
gpuhours.torchkit.storage.LiveStorages, shared with bench). Views share their base's storage and
cost nothing; in-place operators allocate nothing. The same mode counts each operator's FLOPs
(torch's formulas and ours, gpuhours.torchkit.flops, in the "torch" convention: full S x S
attention) and the bytes its tensors hold (inputs + outputs), for the roofline.

What it cannot see: memory a kernel allocates for itself without an operator (CUDA workspaces
of cuBLAS and attention kernels, NCCL buffers), and the caching allocator's rounding (modelled
in trace/allocator.py).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from gpuhours.torchkit.storage import LiveStorages
from gpuhours.trace.accounting import Place, StorageLog
from gpuhours.trace.location import ModuleLocator

#: role hints given at allocation time; gradients and optimizer state are marked afterwards
ACTIVATIONS, LOGITS, AUTOCAST, BACKWARD_TEMPS, RECOMPUTED, OPTIMIZER_TEMPS, OTHER = (
    "activations", "logits and loss", "autocast weight copies", "backward temporaries",
    "recomputed activations", "optimizer temporaries", "other")

#: rows of the per-module count that are no child module of the model
OUTSIDE_MODULES, OPTIMIZER_ROW = "(loss, glue)", "(optimizer)"

_TO_COPY = torch.ops.aten._to_copy.default
_ADD = torch.ops.aten.add.Tensor


class StorageTracker(TorchDispatchMode):
    """Records allocations, frees, FLOPs and bytes of every operator run under it."""

    def __init__(self, locator: ModuleLocator, head_paths: tuple[str, ...],
                 root_paths: tuple[str, ...], flop_formulas: dict[Any, Any]) -> None:
        super().__init__()
        self.log = StorageLog()
        self.locator = locator
        #: live storages by identity; a uid has more than one holder where an accumulation
        #: took over a gradient's storage (`_accumulates`)
        self._storages = LiveStorages(self._freed)
        #: id of the autograd node that was running when a uid was allocated in backward
        self._creator: dict[int, int] = {}
        self._head = head_paths
        self._roots = frozenset(root_paths)
        self._head_cache: dict[str, bool] = {}
        self._formulas = flop_formulas
        self.step = -1  # before the first step (reported as step 0)
        self.phase = "setup"
        self.recording = True
        #: count operators (FLOPs, bytes) only while True: the last step's
        self.count_ops = True
        #: (op name, phase, dtype, flops, bytes) -> calls
        self.op_calls: Counter[tuple[str, str, str, int, int]] = Counter()
        #: with `count_modules`: (top-level module, op name, phase, dtype, flops, bytes,
        #: reduction length) -> calls, where the reduction length is flops / (2 x output elements) (a matmul's
        #: inner dimension K), 0 for operators without FLOPs
        self.count_modules = False
        self.module_calls: Counter[tuple[str, str, str, str, int, int, int]] = Counter()

    # --- phases and registration --------------------------------------------------------------
    def begin(self, step: int, phase: str) -> None:
        self.step, self.phase = step, phase
        self.log.mark_phase(step, phase)

    def register(self, t: torch.Tensor, role: str) -> None:
        """Count a tensor made before the trace started (parameters, buffers, the batch)."""
        self._track(t, role, Place(self.step, "setup", "", "before the step"))

    def uid_of(self, t: torch.Tensor) -> int | None:
        return self._storages.uid_of(t)

    def mark(self, tensors: list[torch.Tensor], role: str) -> None:
        """Give the storages of `tensors` a role decided after they were made."""
        for t in tensors:
            uid = self.uid_of(t)
            if uid is not None:
                self.log.roles[uid] = role

    # --- the mode -------------------------------------------------------------------------------
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not self.recording:
            return out
        outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        new = [t for t in outputs if t not in self._storages]
        phase = self.phase
        if phase == "backward" and self.locator.in_forward_module():
            phase = "recompute"
        if new and phase == "backward" and func is _ADD and self._accumulates(args, new):
            new = []
        if new:
            module = self.locator.current()
            place = Place(self.step, phase, module, str(func.overloadpacket.__name__))
            role = self._role(func, args, phase, module)
            node = torch._C._current_autograd_node() if phase == "backward" else None
            for t in new:
                uid = self._track(t, role, place)
                if node is not None and uid is not None:
                    self._creator[uid] = id(node)
        if self.count_ops:
            self._count_op(func, args, kwargs, out, outputs, phase)
        return out

    def _role(self, func: Any, args: Any, phase: str, module: str) -> str:
        if phase in ("forward", "recompute") and func is _TO_COPY \
                and isinstance(args[0], torch.Tensor):
            uid = self.uid_of(args[0])
            if uid is not None and self.log.roles[uid] == "parameters":
                return AUTOCAST
        if phase == "forward":
            return LOGITS if self._in_head(module) else ACTIVATIONS
        if phase == "recompute":
            return RECOMPUTED
        if phase == "backward":
            return LOGITS if self._in_head(module) else BACKWARD_TEMPS
        if phase.startswith("optimizer"):  # the step, and the warm-up step on zero gradients
            return OPTIMIZER_TEMPS
        return OTHER

    def _in_head(self, module: str) -> bool:
        """The LM head (or classifier), and code outside the model's blocks (the loss)."""
        hit = self._head_cache.get(module)
        if hit is None:
            hit = module in self._roots or any(
                module == h or module.startswith(h + ".") for h in self._head if h)
            self._head_cache[module] = hit
        return hit

    def _accumulates(self, args: Any, new: list[torch.Tensor]) -> bool:
        """Autograd summing two gradients of one tensor (its InputBuffer): on real tensors it
        adds in place into the gradient already buffered (or else into the new one), but on
        tensor subclasses such as fake tensors it never does; here the sum takes over the
        storage of the gradient real autograd would have added into.

        Recognised as an add in backward of two tensors shaped like its output, of which the
        first (or else the second) is a gradient made by an earlier graph node than the one
        running, contiguous, and owning a storage of the output's size. An add inside one
        node's own formula sums tensors that node made."""
        out = new[0]
        if len(new) != 1:
            return False
        node = torch._C._current_autograd_node()
        if node is None:
            return False
        now = id(node)
        for x in args[:2]:
            if not (isinstance(x, torch.Tensor) and x.shape == out.shape
                    and x.dtype == out.dtype):
                return False
        for x in args[:2]:
            uid = self.uid_of(x)
            creator = self._creator.get(uid) if uid is not None else None
            if (uid is not None and creator is not None and creator != now
                    and x.is_contiguous()
                    and self.log.sizes[uid] == out.untyped_storage().nbytes()):
                # `out`'s storage holds the bytes of `uid` from now on (no new allocation)
                self._storages.alias(out, uid)
                return True
        return False

    def _track(self, t: torch.Tensor, role: str, place: Place) -> int | None:
        if t in self._storages:
            return None
        uid = self.log.allocate(t.untyped_storage().nbytes(), role, place)
        self._storages.add(t, uid)
        return uid

    def _freed(self, uid: int) -> None:
        if self.recording:  # frees after the trace are not part of it
            self.log.free(uid)

    def _count_op(self, func: Any, args: Any, kwargs: Any, out: Any,
                  outputs: list[torch.Tensor], phase: str) -> None:
        """FLOPs and tensor bytes of one operator call. Calls that move no data are left out:
        metadata queries (no tensor output), views, and aliases of an input's storage."""
        if func.is_view:
            return
        inputs = [a for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        if not outputs:
            # in-place operators that return nothing (the optimizer's _foreach_*_, the grad
            # scaler's unscale): their written arguments are read and written back
            if not func._schema.is_mutable or not inputs:
                return
            outputs = _written_arguments(func, args, kwargs)
            if not outputs:
                return
        elif not func._schema.is_mutable:
            held = {id(t.untyped_storage()) for t in inputs}
            if all(id(t.untyped_storage()) in held for t in outputs):
                return  # e.g. _unsafe_view, alias: the output is an input's storage
        formula = self._formulas.get(func.overloadpacket)
        flops = int(formula(*args, **kwargs, out_val=out)) if formula is not None else 0
        nbytes = sum(t.numel() * t.element_size() for t in inputs) + sum(
            t.numel() * t.element_size() for t in outputs)
        dtype = str(outputs[0].dtype).replace("torch.", "")
        key = (str(func.overloadpacket.__name__), phase, dtype, flops, nbytes)
        self.op_calls[key] += 1
        if self.count_modules:
            elements = sum(t.numel() for t in outputs)
            reduction = flops // (2 * elements) if flops and elements else 0
            top = self._top_module(phase)
            self.module_calls[(top, key[0], phase, dtype, flops, nbytes, reduction)] += 1

    def _top_module(self, phase: str) -> str:
        """The top-level module (a child of the model) an operator runs in; the optimizer;
        or OUTSIDE_MODULES (the loss, and the model's own forward between its children)."""
        if phase.startswith("optimizer") or phase == "zero_grad":
            return OPTIMIZER_ROW
        path = self.locator.current()
        if not path:
            return OUTSIDE_MODULES
        return path.split(".", 1)[0]

    def close(self) -> None:
        """Stop recording (frees after the step are not part of it)."""
        self.recording = False


def _written_arguments(func: Any, args: Any, kwargs: Any) -> list[torch.Tensor]:
    """The tensors an in-place operator writes: its arguments whose schema marks them written."""
    written: list[torch.Tensor] = []
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        value = args[i] if i < len(args) else kwargs.get(a.name)
        written += [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]
    return written
