"""A cache directory with a size cap and least-recently-used eviction.

Recency is a file's last use: max(st_atime, st_mtime). Why both: atime is the only record of a
read, but Linux mounts default to `relatime` (atime updated at most once a day unless the file
was written since) and many mount `noatime` (never); mtime is the floor, so on such filesystems
the order degrades to "least recently written", never to nonsense. `LruCache.get` sets both
times to now with os.utime, so files used through this class have exact recency whatever the
mount options.

Size is the apparent size (st_size) of regular files. Links are not followed, not counted, not
removed. A file modified less than `settle_s` seconds ago may still be being written and is not
evicted. Only files below the cache directory are ever removed.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from gpuhours.errors import InputError
from gpuhours.files import atomic_write_bytes, is_temp_name
from gpuhours.storage._fs import is_within, resolve_root

_KEY_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.=-]{0,200}")


@dataclass(frozen=True)
class CacheEntry:
    rel_path: str
    bytes: int
    last_used: float
    modified: float


class EvictedFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    bytes: int
    #: max(st_atime, st_mtime), seconds since the epoch
    last_used: float


class Eviction(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    directory: str
    max_bytes: int
    bytes_before: int
    bytes_after: int
    evicted: list[str]
    evicted_bytes: int
    #: True when the cap could not be met (files too recent to evict)
    over_cap: bool
    applied: bool
    #: the evicted files (or those a dry run would evict), least recently used first
    files: list[EvictedFile] = []
    #: files too recently modified to evict (the settle window)
    too_recent: int = 0


def plan_lru_eviction(entries: Sequence[CacheEntry], max_bytes: int, now: float,
                      settle_s: float = 60.0, protect: frozenset[str] = frozenset()) -> list[CacheEntry]:
    """The entries to evict, least recently used first, until the total is at most `max_bytes`.
    Pure. Entries modified within `settle_s` of `now`, and those in `protect`, are never chosen;
    ties in recency go to the larger file first (fewer removals), then by path."""
    total = sum(e.bytes for e in entries)
    chosen: list[CacheEntry] = []
    candidates = sorted((e for e in entries
                         if e.rel_path not in protect and now - e.modified >= settle_s
                         and not is_temp_name(e.rel_path.rsplit("/", 1)[-1])),
                        key=lambda e: (e.last_used, -e.bytes, e.rel_path))
    for e in candidates:
        if total <= max_bytes:
            break
        chosen.append(e)
        total -= e.bytes
    return chosen


def cache_entries(root: str) -> list[CacheEntry]:
    """Regular files below `root` (a real path), links neither followed nor listed."""
    out: list[CacheEntry] = []
    stack = [(root, "")]
    while stack:
        path, rel = stack.pop()
        try:
            it = os.scandir(path)
        except OSError:
            continue
        with it:
            for e in it:
                child = f"{rel}/{e.name}" if rel else e.name
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    stack.append((e.path, child))
                elif stat.S_ISREG(st.st_mode):
                    out.append(CacheEntry(child, st.st_size, max(st.st_atime, st.st_mtime),
                                          st.st_mtime))
    return out


def evict(directory: str, max_bytes: int, apply: bool = False, settle_s: float = 60.0,
          now: float | None = None, protect: frozenset[str] = frozenset()) -> Eviction:
    """Bring the cache under `max_bytes` by removing least recently used files (with `apply`;
    otherwise only say which)."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise InputError("max_bytes", f"expected a whole number of bytes >= 0, got {max_bytes!r}.")
    root = resolve_root(directory, "cache directory")
    entries = cache_entries(root)
    before = sum(e.bytes for e in entries)
    chosen = plan_lru_eviction(entries, max_bytes, time.time() if now is None else now, settle_s,
                               protect)
    evicted: list[str] = []
    files: list[EvictedFile] = []
    freed = 0
    for e in chosen:
        if apply:
            if not is_within(root, e.rel_path):
                continue
            try:
                os.unlink(os.path.join(root, e.rel_path))
            except FileNotFoundError:
                continue
        evicted.append(e.rel_path)
        files.append(EvictedFile(path=e.rel_path, bytes=e.bytes, last_used=e.last_used))
        freed += e.bytes
    t = time.time() if now is None else now
    return Eviction(directory=root, max_bytes=max_bytes, bytes_before=before,
                    bytes_after=before - freed, evicted=evicted, evicted_bytes=freed,
                    over_cap=before - freed > max_bytes, applied=apply, files=files,
                    too_recent=sum(1 for e in entries if t - e.modified < settle_s))


_SIZE_RE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)(?:[eE](\d+))?\s*([KMGT]i?B|B)?\s*",
                      re.IGNORECASE)
_UNIT_BYTES = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size_bytes(text: str, option: str) -> int:
    """'5GB' (10^9), '5GiB' (2^30), '500MB', '1e9' or a plain number of bytes -> bytes; an
    InputError naming `option` otherwise."""
    m = _SIZE_RE.fullmatch(text)
    if m is None:
        raise InputError(option, f"expected a size such as 5GB (10^9 bytes), 5GiB (2^30) or "
                                 f"500MB, got {text!r}.")
    value = float(m.group(1)) * 10 ** int(m.group(2) or 0)
    return int(value * _UNIT_BYTES[(m.group(3) or "B").lower()])


class LruCache:
    """Files by key in one directory, kept under `max_bytes` by LRU eviction on each put.

    settle_s defaults to 0 here: the class writes its own files atomically, so only another
    process's in-flight temporary files need protecting, and those are never evicted. Set it
    when other writers share the directory without atomic writes."""

    def __init__(self, directory: str, max_bytes: int, settle_s: float = 0.0) -> None:
        os.makedirs(directory, exist_ok=True)
        self.directory = resolve_root(directory, "cache directory")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise InputError("max_bytes", f"expected a whole number of bytes >= 0, got "
                                          f"{max_bytes!r}.")
        self.max_bytes = max_bytes
        self.settle_s = settle_s

    def path(self, key: str) -> str:
        if not _KEY_RE.fullmatch(key) or key.endswith(".tmp"):
            raise InputError("cache key", f"expected letters, digits, '_', '.', '=', '-' (no "
                                          f"path separators, not starting with '.'), got {key!r}.")
        return os.path.join(self.directory, key)

    def get(self, key: str) -> str | None:
        """The path of `key` if cached, marking it used now; None otherwise."""
        p = self.path(key)
        try:
            if os.path.islink(p) or not os.path.isfile(p):
                return None
            os.utime(p)
        except FileNotFoundError:
            return None
        return p

    def put(self, key: str, data: bytes) -> Eviction:
        """Write `key` atomically, then evict others to stay under the cap."""
        atomic_write_bytes(self.path(key), data)
        return evict(self.directory, self.max_bytes, apply=True, settle_s=self.settle_s,
                     protect=frozenset({key}))
