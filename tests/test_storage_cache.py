"""The size-capped LRU cache and the consolidation of batch files (gpuhours.storage)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from gpuhours.errors import InputError
from gpuhours.storage import consolidation as consolidation_mod
from gpuhours.storage.cache import CacheEntry, LruCache, evict, plan_lru_eviction
from gpuhours.storage.consolidation import consolidate

NOW = 1_000_000.0


def entry(name: str, size: int, used: float, modified: float | None = None) -> CacheEntry:
    return CacheEntry(name, size, used, used if modified is None else modified)


# --- LRU --------------------------------------------------------------------------------------

def test_plan_evicts_least_recently_used_until_under_cap():
    entries = [entry("a", 100, 10), entry("b", 100, 30), entry("c", 100, 20), entry("d", 100, 40)]
    chosen = plan_lru_eviction(entries, max_bytes=200, now=NOW)
    assert [e.rel_path for e in chosen] == ["a", "c"]
    assert plan_lru_eviction(entries, max_bytes=400, now=NOW) == []


def test_plan_never_evicts_recent_or_protected_or_in_flight_files():
    entries = [entry("old", 100, 10), entry("writing", 100, 5, modified=NOW - 1),
               entry("keep", 100, 1), entry(".x.bin.0123abcd.gpuhours-tmp", 100, 0)]
    chosen = plan_lru_eviction(entries, max_bytes=0, now=NOW, settle_s=60,
                               protect=frozenset({"keep"}))
    assert [e.rel_path for e in chosen] == ["old"]


def _file(path: Path, size: int, atime: float, mtime: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, (atime, mtime))


def test_evict_uses_the_later_of_atime_and_mtime(tmp_path):
    _file(tmp_path / "read_recently.bin", 100, atime=NOW - 10, mtime=NOW - 5000)
    _file(tmp_path / "written_recently.bin", 100, atime=NOW - 9000, mtime=NOW - 20)
    _file(tmp_path / "sub" / "stale.bin", 100, atime=NOW - 3000, mtime=NOW - 4000)
    r = evict(str(tmp_path), max_bytes=200, apply=True, now=NOW)
    assert r.evicted == ["sub/stale.bin"] and r.evicted_bytes == 100 and not r.over_cap
    assert sorted(p.name for p in tmp_path.rglob("*.bin")) == ["read_recently.bin",
                                                                "written_recently.bin"]


def test_evict_dry_run_changes_nothing_and_links_are_left_alone(tmp_path):
    outside = tmp_path / "outside.bin"
    _file(outside, 1000, NOW - 9000, NOW - 9000)
    cache = tmp_path / "cache"
    _file(cache / "a.bin", 100, NOW - 100, NOW - 100)
    os.symlink(outside, cache / "link.bin")
    dry = evict(str(cache), max_bytes=0, now=NOW)
    assert dry.evicted == ["a.bin"] and dry.bytes_before == 100 and not dry.applied
    assert (cache / "a.bin").exists()
    evict(str(cache), max_bytes=0, apply=True, now=NOW)
    assert not (cache / "a.bin").exists()
    assert (cache / "link.bin").is_symlink() and outside.stat().st_size == 1000


def test_lru_cache_get_refreshes_recency(tmp_path):
    cache = LruCache(str(tmp_path / "c"), max_bytes=250)
    for key in ("a", "b"):
        cache.put(key, b"x" * 100)
    os.utime(cache.path("a"), (NOW - 200, NOW - 200))
    os.utime(cache.path("b"), (NOW - 100, NOW - 100))
    assert cache.get("a") is not None  # a is now the most recently used
    r = cache.put("c", b"x" * 100)
    assert r.evicted == ["b"]
    assert cache.get("b") is None and cache.get("a") and cache.get("c")


@pytest.mark.parametrize("key", ["../x", "a/b", ".hidden", "", "x.tmp"])
def test_lru_cache_refuses_keys_that_are_paths(tmp_path, key):
    with pytest.raises(InputError, match="cache key"):
        LruCache(str(tmp_path), max_bytes=10).path(key)


def test_evict_bad_cap_and_missing_directory(tmp_path):
    with pytest.raises(InputError, match="max_bytes"):
        evict(str(tmp_path), max_bytes=-1)
    with pytest.raises(InputError, match="no such directory"):
        evict(str(tmp_path / "nope"), max_bytes=1)


# --- consolidation ----------------------------------------------------------------------------

def _batches(tmp_path: Path, n: int = 3) -> list[str]:
    paths = []
    for i in range(n):
        p = tmp_path / "temp" / f"batch_{i}.jsonl"
        p.parent.mkdir(exist_ok=True)
        p.write_text("".join(json.dumps({"batch": i, "row": r}) + "\n" for r in range(5 + i)))
        paths.append(str(p))
    return paths


def test_consolidate_writes_verifies_indexes_then_removes(tmp_path):
    paths = _batches(tmp_path)
    contents = b"".join(Path(p).read_bytes() for p in paths)
    dest = tmp_path / "dataset_v1.jsonl"
    r = consolidate(paths, str(dest))
    assert dest.read_bytes() == contents
    assert r.sha256 == hashlib.sha256(contents).hexdigest() and r.bytes == len(contents)
    index = json.loads(Path(r.index or "").read_text())
    assert [p["offset"] for p in index["parts"]] == [0, r.parts[1].offset, r.parts[2].offset]
    for part in r.parts:
        chunk = contents[part.offset:part.offset + part.bytes]
        assert hashlib.sha256(chunk).hexdigest() == part.sha256
    assert r.removed == paths and not any(Path(p).exists() for p in paths)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".gpuhours-tmp")] == []


def test_failed_verification_keeps_the_originals(tmp_path, monkeypatch):
    paths = _batches(tmp_path)
    monkeypatch.setattr(consolidation_mod, "_sha256_of", lambda path: "0" * 64)
    with pytest.raises(InputError, match="SHA-256 read back differs"):
        consolidate(paths, str(tmp_path / "out.jsonl"))
    assert all(Path(p).exists() for p in paths)
    assert not (tmp_path / "out.jsonl").exists()


def test_interrupted_write_leaves_no_file_and_the_originals(tmp_path):
    paths = _batches(tmp_path)

    def write(parts, out):
        out.write(Path(parts[0]).read_bytes())
        raise KeyboardInterrupt  # the process is stopped half-way

    with pytest.raises(KeyboardInterrupt):
        consolidate(paths, str(tmp_path / "out.jsonl"), write=write, verify=lambda p: None)
    assert all(Path(p).exists() for p in paths)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["temp"]  # no dest, no temp file


def test_an_input_changed_meanwhile_keeps_the_originals(tmp_path):
    paths = _batches(tmp_path)

    def write(parts, out):
        for p in parts:
            out.write(Path(p).read_bytes())
        with open(parts[1], "a") as f:  # another process appends to a batch
            f.write("late row\n")

    with pytest.raises(InputError, match="changed during consolidation"):
        consolidate(paths, str(tmp_path / "out.jsonl"), write=write, verify=lambda p: None)
    assert all(Path(p).exists() for p in paths) and not (tmp_path / "out.jsonl").exists()


def test_custom_format_with_its_own_verification(tmp_path):
    """A format that does not concatenate (a JSON list per file): merged by `write`, checked by
    `verify` (row count), originals removed only after."""
    paths = []
    for i in range(3):
        p = tmp_path / f"batch_{i}.json"
        p.write_text(json.dumps(list(range(i * 10, i * 10 + 4))))
        paths.append(str(p))

    def write(parts, out):
        rows = [r for p in parts for r in json.loads(Path(p).read_text())]
        out.write(json.dumps(rows).encode())

    def verify(path):
        if len(json.loads(Path(path).read_text())) != 12:
            raise ValueError("row count")

    r = consolidate(paths, str(tmp_path / "all.json"), write=write, verify=verify)
    assert json.loads((tmp_path / "all.json").read_text())[4:6] == [10, 11]
    assert r.index is None and r.removed == paths

    def bad_verify(path):
        raise ValueError("row count 11, expected 12")

    more = [str(tmp_path / "x.json")]
    Path(more[0]).write_text("[1]")
    with pytest.raises(InputError, match="verification failed \\(row count 11"):
        consolidate(more, str(tmp_path / "y.json"), write=write, verify=bad_verify)
    assert Path(more[0]).exists() and not (tmp_path / "y.json").exists()


def test_consolidate_refuses_bad_inputs(tmp_path):
    paths = _batches(tmp_path, 2)
    os.symlink(paths[0], tmp_path / "link.jsonl")
    (tmp_path / "exists.jsonl").write_text("mine")
    cases = [
        (([str(tmp_path / "link.jsonl")], "o1"), "is a symbolic link"),
        (([paths[0], paths[0]], "o2"), "listed twice"),
        (([str(tmp_path / "missing")], "o3"), "no such file"),
        ((paths, "exists.jsonl"), "already exists"),
        (([], "o4"), "at least one file"),
    ]
    for (inputs, dest), pattern in cases:
        with pytest.raises(InputError, match=pattern):
            consolidate(inputs, str(tmp_path / dest))
    assert (tmp_path / "exists.jsonl").read_text() == "mine"
    assert all(Path(p).exists() for p in paths)
