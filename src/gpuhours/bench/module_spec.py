"""A user's own `nn.Module` and its inputs, named on the command line.

`--module` names a factory: `package.module:factory` (imported, the current directory first on
the path) or `path/to/file.py:factory` (loaded from the file). The factory is called without
arguments and must return an `nn.Module`; a module class or instance is taken as well.

`--input` gives each forward argument's name, dtype and shape, `B` standing for the batch:

    images=float32[B,3,224,224]
    input_ids=int64[B,128]<32000; attention_mask=int64[B,128]<2

Several inputs are separated by `;` (or given as repeated options). Floating inputs are drawn
from a standard normal distribution, integer ones uniformly from [0, HIGH) (`<HIGH`, default 2),
booleans at random; all from one seeded generator, so the same spec gives the same tensors.
The tensors are passed to the module by keyword: the names must be its forward's parameters.

Bad specs raise a FieldError keyed by the field (`module`, `inputs`; the CLI names the option:
gpuhours.cli_common.OPTION_OF_FIELD) saying what was expected; exit code 2 in the CLI.
torch is imported inside the functions only.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuhours.errors import FieldError

#: dtype names accepted in --input -> torch dtype attribute
DTYPES = {
    "float32": "float32", "fp32": "float32", "float": "float32",
    "float16": "float16", "fp16": "float16", "half": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16", "float64": "float64", "double": "float64",
    "int64": "int64", "long": "int64", "int32": "int32", "int": "int32", "int16": "int16",
    "int8": "int8", "uint8": "uint8", "bool": "bool",
}
_FLOAT = {"float32", "float16", "bfloat16", "float64"}
_ENTRY_RE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([A-Za-z0-9]+)\s*\[([^\]]*)\]"
                       r"\s*(?:<\s*(\d+))?\s*")
_EXAMPLE = "For example: --input 'images=float32[B,3,224,224]' (B is the batch)."


@dataclass(frozen=True)
class InputSpec:
    """One forward argument: name, torch dtype name, shape (None where the batch goes)."""

    name: str
    dtype: str
    shape: tuple[int | None, ...]
    #: integer inputs: values drawn from [0, high)
    high: int = 2

    def shape_at(self, batch: int) -> tuple[int, ...]:
        return tuple(batch if d is None else d for d in self.shape)

    def text(self) -> str:
        dims = ",".join("B" if d is None else str(d) for d in self.shape)
        bound = f"<{self.high}" if self.dtype not in _FLOAT and self.dtype != "bool" else ""
        return f"{self.name}={self.dtype}[{dims}]{bound}"


def load_module(spec: str) -> Any:
    """The `nn.Module` that `spec` ('package.module:factory' or 'file.py:factory') builds.

    Raises InputError (where '--module') when the spec is malformed, the module cannot be
    imported, the factory is missing or fails, or what it returns is not an nn.Module."""
    from torch import nn

    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr or not attr.isidentifier():
        raise FieldError("module", f"expected package.module:factory or path/to/file.py:factory, "
                                   f"got {spec!r}.",
                         "For example: --module examples/hybrid_vision.py:build")
    module = _import(target)
    obj = getattr(module, attr, None)
    if obj is None:
        raise FieldError("module", f"{target} has no attribute {attr!r}.")
    if isinstance(obj, nn.Module):
        return obj
    if not callable(obj):
        raise FieldError("module", f"{target}:{attr} is a {type(obj).__name__}, not a factory "
                                   "or an nn.Module.")
    try:
        built = obj()
    except Exception as e:  # the user's code raised: say so, without our traceback
        raise FieldError("module", f"calling {target}:{attr}() failed: {type(e).__name__}: "
                                   f"{e}.", "The factory is called without arguments.") from None
    if not isinstance(built, nn.Module):
        raise FieldError("module", f"{target}:{attr}() returned a {type(built).__name__}, "
                                   "expected a torch.nn.Module.")
    return built


def _import(target: str) -> Any:
    """A module by dotted name (the current directory first on sys.path) or by file path."""
    if target.endswith(".py") or "/" in target or "\\" in target:
        path = Path(target)
        if not path.is_file():
            raise FieldError("module", f"{target}: no such file.")
        name = f"gpuhours_user_{re.sub(r'[^A-Za-z0-9_]', '_', path.stem)}"
        loaded = importlib.util.spec_from_file_location(name, path)
        if loaded is None or loaded.loader is None:
            raise FieldError("module", f"{target}: not a Python file that can be loaded.")
        module = importlib.util.module_from_spec(loaded)
        sys.modules[name] = module  # dataclasses and pickling look modules up by name
        try:
            loaded.loader.exec_module(module)
        except Exception as e:
            del sys.modules[name]
            raise FieldError("module", f"loading {target} failed: {type(e).__name__}: {e}.") \
                from None
        return module
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(target)
    except ImportError as e:
        raise FieldError("module", f"cannot import {target!r}: {e}.",
                         "Run from your project's folder, install it, or give a file path "
                         "(path/to/file.py:factory).") from None
    except Exception as e:  # the user's module raised while importing
        raise FieldError("module", f"importing {target!r} failed: {type(e).__name__}: {e}.") \
            from None


def parse_input_spec(spec: str | Sequence[str]) -> list[InputSpec]:
    """The inputs a spec names (see the module docstring); InputError (where '--input') when
    it is malformed."""
    texts = [spec] if isinstance(spec, str) else list(spec)
    entries = [e for t in texts for e in t.split(";") if e.strip()]
    if not entries:
        raise FieldError("inputs", "expected at least one input, got none.", _EXAMPLE)
    found: list[InputSpec] = []
    for entry in entries:
        m = _ENTRY_RE.fullmatch(entry)
        if m is None:
            raise FieldError("inputs", f"expected NAME=DTYPE[DIMS], got {entry.strip()!r}.",
                             _EXAMPLE)
        name, dtype_text, dims_text, high_text = m.groups()
        dtype = DTYPES.get(dtype_text.lower())
        if dtype is None:
            raise FieldError("inputs", f"{name}: unknown dtype {dtype_text!r}; expected one of "
                                       f"{', '.join(sorted(set(DTYPES.values())))}.")
        shape = tuple(_dim(name, d) for d in dims_text.split(",")) if dims_text.strip() else ()
        if None not in shape:
            raise FieldError("inputs", f"{name}: the shape [{dims_text}] has no B; one "
                                       "dimension must be the batch.", _EXAMPLE)
        if high_text is not None and (dtype in _FLOAT or dtype == "bool"):
            raise FieldError("inputs", f"{name}: '<{high_text}' bounds integer inputs only, "
                                       f"not {dtype}.")
        high = int(high_text) if high_text is not None else 2
        if high < 1:
            raise FieldError("inputs", f"{name}: expected a bound '<N' with N >= 1, got "
                                       f"'<{high_text}'.")
        if any(s.name == name for s in found):
            raise FieldError("inputs", f"{name} is given twice.")
        found.append(InputSpec(name=name, dtype=dtype, shape=shape, high=high))
    return found


def _dim(name: str, text: str) -> int | None:
    d = text.strip()
    if d == "B":
        return None
    if d.isdigit() and int(d) > 0:
        return int(d)
    raise FieldError("inputs", f"{name}: expected each dimension to be B or a positive whole "
                               f"number, got {d!r}.", _EXAMPLE)


def make_inputs(specs: Sequence[InputSpec], batch: int, seed: int = 0,
                device: str = "cpu") -> dict[str, Any]:
    """Random tensors for `specs` at `batch`, from one generator seeded with `seed`."""
    import torch

    if batch < 1:
        raise FieldError("batch", f"expected a batch of at least 1, got {batch}.")
    gen = torch.Generator(device="cpu").manual_seed(seed)
    tensors: dict[str, Any] = {}
    for s in specs:
        shape = s.shape_at(batch)
        dtype = getattr(torch, s.dtype)
        if s.dtype in _FLOAT:
            t = torch.randn(shape, generator=gen).to(dtype)
        elif s.dtype == "bool":
            t = torch.randint(0, 2, shape, generator=gen).bool()
        else:
            t = torch.randint(0, s.high, shape, generator=gen, dtype=dtype)
        tensors[s.name] = t.to(device)
    return tensors


def parse_inputs(spec: str | Sequence[str], batch: int, seed: int = 0) -> dict[str, Any]:
    """{name: random tensor} for an --input spec at `batch` (see the module docstring)."""
    return make_inputs(parse_input_spec(spec), batch, seed)
