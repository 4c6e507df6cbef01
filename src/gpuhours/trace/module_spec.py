"""A user's own model named on the command line: `pkg.mod:factory` and `--input` shapes.

- `load_factory("pkg.mod:factory")` imports the factory (the current directory on the path; a
  `path/to/file.py:factory` is imported from that file). The factory is called with no
  arguments and returns a torch `nn.Module`; an `nn.Module` object named directly is used as is.
- `parse_input_specs(["images=float32[B,3,224,224]", ...])`: each input's keyword (none:
  positional, in order), dtype and shape, where `B` stands for the batch.
- `make_inputs(specs, batch)`: the tensors of one batch (zeros for integer dtypes, so that
  token ids and labels are valid indices; standard normal values for floating dtypes).

This is the fallback that trace needs; gpuhours.bench.module_spec (issue 17, another part) may
hold the same parsing for bench: the two should be one. No torch at import time.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuhours.errors import InputError

#: dtype names accepted in an input spec -> torch attribute name
DTYPES = {"float32": "float32", "fp32": "float32", "float": "float32", "float16": "float16",
          "fp16": "float16", "half": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float64": "float64", "int64": "int64", "long": "int64", "int32": "int32",
          "int": "int32", "int16": "int16", "uint8": "uint8", "int8": "int8", "bool": "bool"}

_SPEC = re.compile(r"^\s*(?:(?P<name>[A-Za-z_][A-Za-z_0-9]*)\s*=\s*)?(?P<dtype>[A-Za-z0-9_]+)"
                   r"\s*\[(?P<dims>[^\]]*)\]\s*$")
_FORMAT = "NAME=DTYPE[DIMS], e.g. images=float32[B,3,224,224] (B: the batch; NAME= optional)"


@dataclass(frozen=True)
class InputSpec:
    """One model input: keyword (None: positional), torch dtype name, dims (int or 'B')."""

    name: str | None
    dtype: str
    dims: tuple[int | str, ...]

    def shape(self, batch: int) -> tuple[int, ...]:
        return tuple(batch if d == "B" else int(d) for d in self.dims)

    def text(self) -> str:
        dims = ",".join(str(d) for d in self.dims)
        return f"{self.name + '=' if self.name else ''}{self.dtype}[{dims}]"


def parse_input_spec(text: str, where: str = "--input") -> InputSpec:
    """One `NAME=DTYPE[DIMS]`; a clear error naming `where` otherwise."""
    m = _SPEC.match(text)
    if m is None:
        raise InputError(where, f"cannot read {text!r}: expected {_FORMAT}.")
    dtype = DTYPES.get(m["dtype"].lower())
    if dtype is None:
        raise InputError(where, f"unknown dtype {m['dtype']!r} in {text!r}; expected one of "
                                f"{', '.join(sorted(set(DTYPES)))}.")
    dims: list[int | str] = []
    for raw in m["dims"].split(","):
        d = raw.strip()
        if d.upper() == "B":
            dims.append("B")
        elif d.isdigit() and int(d) > 0:
            dims.append(int(d))
        else:
            raise InputError(where, f"dimension {d!r} of {text!r} is neither a positive "
                                    f"whole number nor B (the batch); expected {_FORMAT}.")
    return InputSpec(name=m["name"], dtype=dtype, dims=tuple(dims))


def parse_input_specs(texts: Sequence[str], where: str = "--input") -> list[InputSpec]:
    """Every `--input`; at least one, names unique, positional ones before keywords."""
    if not texts:
        raise InputError(where, f"a model named by --module needs its inputs: {_FORMAT}.")
    specs = [parse_input_spec(t, where) for t in texts]
    names = [s.name for s in specs if s.name]
    if len(set(names)) != len(names):
        raise InputError(where, f"an input is named twice: {', '.join(names)}.")
    seen_name = False
    for s in specs:
        if s.name is None and seen_name:
            raise InputError(where, f"positional input {s.text()} after a named one: give the "
                                    "positional inputs first, in order.")
        seen_name = seen_name or s.name is not None
    if not any("B" in s.dims for s in specs):
        raise InputError(where, "no input has the batch dimension B: the batch could not grow.")
    return specs


def make_inputs(specs: Sequence[InputSpec], batch: int) -> tuple[list[Any], dict[str, Any]]:
    """(positional, keyword) tensors of one batch on the current device (fake under a
    FakeTensorMode)."""
    import torch

    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for s in specs:
        dtype = getattr(torch, s.dtype)
        shape = s.shape(batch)
        t = (torch.randn(shape, dtype=dtype) if dtype.is_floating_point
             else torch.zeros(shape, dtype=dtype))
        if s.name is None:
            args.append(t)
        else:
            kwargs[s.name] = t
    return args, kwargs


def load_factory(spec: str, where: str = "--module") -> Callable[[], Any]:
    """The callable named by 'pkg.mod:factory' or 'path/to/file.py:factory'."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise InputError(where, f"expected MODULE:FACTORY, got {spec!r}.",
                         "For example: my_project.models:build_model, or "
                         "examples/hybrid_vision.py:build")
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise InputError(where, f"no file {module_name}.")
            loaded = importlib.util.spec_from_file_location(f"_gpuhours_user_{path.stem}", path)
            assert loaded is not None and loaded.loader is not None
            module = importlib.util.module_from_spec(loaded)
            loaded.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except InputError:
        raise
    except ImportError as e:
        raise InputError(where, f"cannot import {module_name!r}: {e}.",
                         "Run from your project's folder, or install it.") from None
    except Exception as e:  # the user's module raised while importing
        raise InputError(where, f"importing {module_name!r} failed: {type(e).__name__}: "
                                f"{e}.") from None
    obj = getattr(module, attr, None)
    if obj is None:
        raise InputError(where, f"{module_name} has no attribute {attr!r}.")
    import torch

    if isinstance(obj, torch.nn.Module):
        return lambda: obj
    if not callable(obj):
        raise InputError(where, f"{module_name}:{attr} is neither a function nor an nn.Module.")
    return obj  # type: ignore[no-any-return]


def build_module(factory: Callable[[], Any], spec: str, where: str = "--module",
                 device: str | None = None) -> Any:
    """Call `factory()` (under `torch.device(device)` when given) and check it made a module."""
    import contextlib

    import torch

    ctx = torch.device(device) if device is not None else contextlib.nullcontext()
    try:
        with ctx:
            model = factory()
    except InputError:
        raise
    except Exception as e:
        raise InputError(where, f"{spec}() failed: {type(e).__name__}: "
                                f"{str(e).strip()[:300]}.") from None
    if not isinstance(model, torch.nn.Module):
        raise InputError(where, f"{spec}() returned a {type(model).__name__}, not a torch "
                                "nn.Module.")
    return model
