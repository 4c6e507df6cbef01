"""Merge torch `.pt` batch files into one file torch can load, and check the file against them.

Seed 003 saves a dataset as `batch_<i>.pt` files, then consolidates them and deletes the
originals. Byte concatenation does not make a loadable .pt file, so the parts are loaded and
saved again as one object:
- every part a tensor with the same dtype and trailing shape: one tensor, concatenated along
  dimension 0 (`layout` "concat");
- every part a dict with the same keys whose values are such tensors key by key: one dict of
  concatenated tensors ("concat");
- anything else: the list of the parts, in order ("list").
Parts are read with `torch.load(weights_only=True)` (tensors, dicts, lists, numbers: no code
runs); a part that needs full unpickling is refused unless `unsafe_pickle` is set, for files
you trust. The merged file is checked by loading it back (memory-mapped) and comparing it with
each part loaded again, bit for bit (NaN payloads included): the shapes, dtypes, keys and every
byte must match, or the consolidation stops and the originals stay (gpuhours.storage.
consolidation). The write holds every part in memory at once (about their total size, twice
for the concatenation); the check one part at a time.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from gpuhours.errors import InputError

#: suffixes taken as torch files by `--format auto`
TORCH_SUFFIXES = (".pt", ".pth")


@dataclass
class TorchMerge:
    """The merge of one consolidation: fills `layout` and `rows` as it writes."""

    unsafe_pickle: bool = False
    layout: str = ""
    #: per part: rows (dim 0) it gave, per key for a dict ("" for a lone tensor)
    rows: list[dict[str, int]] = field(default_factory=list)

    def load(self, path: str, mmap: bool = False) -> Any:
        import torch

        try:
            return torch.load(path, map_location="cpu", weights_only=not self.unsafe_pickle,
                              mmap=mmap)
        except pickle.UnpicklingError as e:
            raise InputError(path, f"holds objects that torch.load(weights_only=True) refuses "
                                   f"({str(e).splitlines()[0][:200]}).",
                             "If you trust the file, pass --unsafe-pickle (it runs the "
                             "file's pickled code).") from None
        except RuntimeError as e:
            if mmap and "mmap" in str(e):  # a file of the legacy (pre-zip) format
                return self.load(path, mmap=False)
            raise InputError(path, f"torch cannot load it: {str(e).splitlines()[0][:200]}") \
                from None

    def write(self, paths: Sequence[str], out: BinaryIO) -> None:
        """The merged object of `paths`, saved with torch.save into `out`."""
        import torch

        parts = [self.load(p) for p in paths]
        merged: Any
        if _concatenable(parts):
            self.layout = "concat"
            if isinstance(parts[0], dict):
                merged = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
                self.rows = [{k: int(v.shape[0]) for k, v in p.items()} for p in parts]
            else:
                merged = torch.cat(parts)
                self.rows = [{"": int(p.shape[0])} for p in parts]
        else:
            self.layout = "list"
            merged = parts
            self.rows = [{} for _ in parts]
        torch.save(merged, out)

    def verifier(self, paths: Sequence[str]) -> Callable[[str], None]:
        """A check of the merged file against `paths` (raises ValueError on a difference)."""

        def verify(dest: str) -> None:
            merged = self.load(dest, mmap=True)
            if self.layout == "list":
                if not isinstance(merged, list) or len(merged) != len(paths):
                    raise ValueError(f"expected a list of {len(paths)} parts")
                for i, p in enumerate(paths):
                    _same(self.load(p), merged[i], f"part {i} ({p})")
                return
            offsets: dict[str, int] = {}
            for p, rows in zip(paths, self.rows, strict=True):
                part = self.load(p)
                pieces = part.items() if isinstance(part, dict) else [("", part)]
                for key, tensor in pieces:
                    whole = merged[key] if key else merged
                    start = offsets.get(key, 0)
                    _same(tensor, whole[start:start + rows[key]], f"{p}{'[' + key + ']' if key else ''}")
                    offsets[key] = start + rows[key]
            totals = {k: int((merged[k] if k else merged).shape[0]) for k in offsets}
            if totals != offsets:
                raise ValueError(f"the merged file has {totals} rows, the parts {offsets}")

        return verify

    def describe(self, paths: Sequence[str]) -> dict[str, Any]:
        """The index written beside the merged file: layout and each part's rows."""
        return {"format": "torch", "layout": self.layout,
                "parts": [{"path": p, "rows": r} for p, r in zip(paths, self.rows, strict=True)]}


def _is_tensor(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor) and x.dim() >= 1 and x.layout == torch.strided


def _concatenable(parts: Sequence[Any]) -> bool:
    """True when the parts are tensors (or dicts of tensors, key by key) that torch.cat joins
    along dimension 0 without changing a dtype or a trailing shape."""
    if not parts:
        return False
    if all(_is_tensor(p) for p in parts):
        return _same_kind([p for p in parts])
    if all(isinstance(p, dict) for p in parts):
        keys = list(parts[0])
        if not keys or any(list(p) != keys for p in parts):
            return False
        return all(all(_is_tensor(p[k]) for p in parts) and _same_kind([p[k] for p in parts])
                   for k in keys)
    return False


def _same_kind(tensors: Sequence[Any]) -> bool:
    first = tensors[0]
    return all(t.dtype == first.dtype and t.shape[1:] == first.shape[1:] for t in tensors)


def _same(a: Any, b: Any, where: str) -> None:
    """Raise ValueError unless `a` and `b` are the same data: tensors bit for bit, containers
    element by element, other values by ==."""
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            raise ValueError(f"{where}: a tensor against a {type(b).__name__}")
        if a.dtype != b.dtype or a.shape != b.shape:
            raise ValueError(f"{where}: {a.dtype}{list(a.shape)} against {b.dtype}{list(b.shape)}")
        if a.layout == torch.strided and b.layout == torch.strided and a.numel():
            # bitwise: torch.equal calls NaN unequal to itself
            same = torch.equal(a.contiguous().reshape(-1).view(torch.uint8),
                               b.contiguous().reshape(-1).view(torch.uint8))
        else:
            same = torch.equal(a, b)
        if not same:
            raise ValueError(f"{where}: values differ")
        return
    if isinstance(a, dict):
        if not isinstance(b, dict) or list(a) != list(b):
            raise ValueError(f"{where}: keys differ")
        for k in a:
            _same(a[k], b[k], f"{where}[{k!r}]")
        return
    if isinstance(a, list | tuple):
        if type(a) is not type(b) or len(a) != len(b):
            raise ValueError(f"{where}: lengths or types differ")
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
        return
    if a != b:
        raise ValueError(f"{where}: {a!r} against {b!r}")
