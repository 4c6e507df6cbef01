"""Consolidate batch files into one, and remove the originals only once the result is safe.

Order of operations, each step only when the one before succeeded:
1. check the inputs: regular files (not links), distinct, the destination new;
2. write the destination atomically (temporary file in its directory, fsync, rename, fsync of
   the directory), hashing every byte read (SHA-256, per part and in all);
3. verify: the destination's size equals the sum of the parts; its SHA-256, read back from the
   file, equals the hash of the bytes read; no input changed (size, mtime, inode) meanwhile;
4. write `<dest>.index.json` (each part's offset, size and SHA-256), atomically;
5. only then remove the originals.
A failure or interruption before step 5 leaves every original in place; the destination is
either absent or whole. The read-back in step 3 may come from the page cache: it proves what
was written, not what a failing disk will return later.

The default merge is byte concatenation (JSON lines, raw token arrays, any format whose files
concatenate). For a format that does not (torch .pt files, Arrow files), pass `write` (merge the
parts into the open file) and `verify` (read the written file back and raise if wrong);
gpuhours.storage.torch_merge does it for .pt files.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable, Sequence
from typing import BinaryIO

from pydantic import BaseModel, ConfigDict

from gpuhours.errors import InputError
from gpuhours.files import atomic_write_bytes, atomic_writer, fsync_dir

_CHUNK = 1 << 20


class Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    offset: int
    bytes: int
    sha256: str


class Consolidation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    dest: str
    #: the index of the parts (byte concatenation only)
    index: str | None
    parts: list[Part]
    bytes: int
    sha256: str | None
    removed: list[str]


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _check_inputs(batch_files: Sequence[str], dest: str) -> list[tuple[str, os.stat_result]]:
    if not batch_files:
        raise InputError("batch files", "expected at least one file to consolidate.")
    if os.path.lexists(dest):
        raise InputError(dest, "already exists; consolidation writes a new file and never "
                               "overwrites one. Choose another name or move it away.")
    seen: set[tuple[int, int]] = set()
    checked = []
    for p in batch_files:
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            raise InputError(p, "no such file.") from None
        if stat.S_ISLNK(st.st_mode):
            raise InputError(p, "is a symbolic link; give the file itself (removing a link would "
                                "not free its target, and its target is not ours to remove).")
        if not stat.S_ISREG(st.st_mode):
            raise InputError(p, "is not a regular file.")
        if (st.st_dev, st.st_ino) in seen:
            raise InputError(p, "is listed twice (or is a hard link to another input).")
        seen.add((st.st_dev, st.st_ino))
        checked.append((p, st))
    return checked


def _sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def check_inputs(batch_files: Sequence[str], dest: str) -> int:
    """Step 1 alone (for a dry run): InputError unless the inputs are distinct regular files
    and `dest` is new; their total size, bytes."""
    return sum(st.st_size for _, st in _check_inputs(batch_files, dest))


def consolidate(batch_files: Sequence[str], dest: str, remove_originals: bool = True,
                write: Callable[[Sequence[str], BinaryIO], None] | None = None,
                verify: Callable[[str], None] | None = None,
                describe: Callable[[], dict[str, object]] | None = None) -> Consolidation:
    """Write `batch_files` into the new file `dest`; verify it; then remove the originals.
    With a custom format, `describe()` (after the verification) gives the index to write."""
    checked = _check_inputs(batch_files, dest)
    if (write is None) != (verify is None):
        raise InputError("consolidate", "pass both `write` and `verify` for a custom format, or "
                                        "neither for byte concatenation.")
    parts: list[Part] = []
    total = hashlib.sha256()
    offset = 0
    with atomic_writer(dest) as out:
        if write is not None:
            write([p for p, _ in checked], out)
        else:
            for p, _ in checked:
                h = hashlib.sha256()
                size = 0
                with open(p, "rb") as f:
                    while chunk := f.read(_CHUNK):
                        out.write(chunk)
                        h.update(chunk)
                        total.update(chunk)
                        size += len(chunk)
                parts.append(Part(path=p, offset=offset, bytes=size, sha256=h.hexdigest()))
                offset += size
    try:
        _verify(dest, checked, parts, total.hexdigest() if write is None else None, verify)
    except BaseException:
        os.unlink(dest)  # ours, and not a faithful copy: the originals stay
        raise
    index = None
    if write is None:
        index = dest + ".index.json"
        atomic_write_bytes(index, json.dumps({
            "dest": os.path.basename(dest), "bytes": offset, "sha256": total.hexdigest(),
            "parts": [pt.model_dump() for pt in parts]}, indent=1).encode())
    elif describe is not None:
        index = dest + ".index.json"
        atomic_write_bytes(index, json.dumps({"dest": os.path.basename(dest), **describe()},
                                             indent=1).encode())
    removed = []
    if remove_originals:
        for p, _ in checked:
            os.unlink(p)
            removed.append(p)
        for d in sorted({os.path.dirname(os.path.abspath(p)) for p in removed}):
            fsync_dir(d)
    return Consolidation(dest=dest, index=index, parts=parts, bytes=os.path.getsize(dest),
                         sha256=total.hexdigest() if write is None else None, removed=removed)


def _verify(dest: str, checked: list[tuple[str, os.stat_result]], parts: list[Part],
            expected_sha256: str | None, verify: Callable[[str], None] | None) -> None:
    for p, before in checked:
        try:
            now = os.lstat(p)
        except FileNotFoundError:
            raise InputError(p, "disappeared during consolidation; the consolidated file was "
                                "discarded.") from None
        if _identity(now) != _identity(before):
            raise InputError(p, "changed during consolidation (size, mtime or inode); the "
                                "consolidated file was discarded and the originals kept.")
    if verify is not None:
        try:
            verify(dest)
        except InputError:
            raise
        except Exception as e:
            raise InputError(dest, f"verification failed ({e}); the consolidated file was "
                                   "discarded and the originals kept.") from e
        return
    size = os.path.getsize(dest)
    expected_size = sum(pt.bytes for pt in parts)
    if size != expected_size or sum(st.st_size for _, st in checked) != expected_size:
        raise InputError(dest, f"has {size} bytes, the parts {expected_size}; discarded, "
                               "originals kept.")
    if _sha256_of(dest) != expected_sha256:
        raise InputError(dest, "SHA-256 read back differs from the bytes written; discarded, "
                               "originals kept.")
