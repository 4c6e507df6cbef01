"""Fault injection: tracking never stops or slows the training loop it watches, and a new ledger
can be created by several processes at once (gpuhours issue 12, first two items).

The faults are real where this machine allows: a second process holding the ledger's write lock
(BEGIN EXCLUSIVE, as an `sqlite3` shell or a backup does), a tiny tmpfs that fills up (root
only; skipped otherwise), and a connection whose writes fail with SQLite's own disk-full error.
Hold durations are parameters, a few seconds here."""

from __future__ import annotations

import logging
import multiprocessing as mp
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from gpuhours.errors import InputError
from gpuhours.track import ledger as ledger_module
from gpuhours.track import track_run
from gpuhours.track.ledger import Ledger
from gpuhours.track.runs import list_runs, run_steps

#: how long the lock holder keeps the ledger, s (the issue's case is a minute; the behaviour is
#: the same, the test only needs the lock to outlast the loop)
HOLD_S = 2.5
STEP_S = 0.01
STEPS = 60

HOLDER = textwrap.dedent("""
    import sqlite3, sys, time
    db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=0)
    if sys.argv[3] == "wal":
        db.execute("PRAGMA journal_mode = WAL")
    db.execute("BEGIN " + sys.argv[4])
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    db.execute("COMMIT")
""")


@contextmanager
def lock_holder(path: Path, hold_s: float, journal: str = "wal",
                begin: str = "EXCLUSIVE") -> Iterator[subprocess.Popen[str]]:
    """Another process that holds `path`'s write lock for `hold_s` seconds from when this
    returns."""
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), str(hold_s), journal, begin],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line.strip() == "locked", p.communicate(timeout=30)
    try:
        yield p
    finally:
        p.communicate(timeout=hold_s + 30)


def _train(run: Any, steps: int, on_step: Any = None) -> float:
    """A loop of `steps` steps of STEP_S each; returns its wall time."""
    t0 = time.perf_counter()
    for i in range(steps):
        run.start_step()
        with run.compute():
            time.sleep(STEP_S)
        if on_step is not None:
            on_step(i)
    return time.perf_counter() - t0


def _track_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "gpuhours.track" and r.levelno >= logging.WARNING]


@pytest.mark.parametrize("locked_from_step", [None, 10])
def test_a_held_write_lock_neither_stops_nor_slows_the_loop(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, locked_from_step: int | None) -> None:
    """None: locked before the run starts (the run itself waits in memory); 10: mid-run."""
    caplog.set_level(logging.INFO, logger="gpuhours.track")
    path = tmp_path / "l.sqlite"
    Ledger.open(path).close()
    holder: list[Any] = []

    def lock_now() -> None:
        cm = lock_holder(path, HOLD_S)
        cm.__enter__()
        holder.append(cm)

    if locked_from_step is None:
        lock_now()
    locked_at = time.monotonic()
    try:
        with track_run(project="p", phase="sft", ledger=path, flush_every=5,
                       flush_every_s=1e9) as run:
            def on_step(i: int) -> None:
                nonlocal locked_at
                if i == locked_from_step:
                    lock_now()
                    locked_at = time.monotonic()

            t0 = time.perf_counter()
            loop_s = _train(run, STEPS, on_step)
            total_s = time.perf_counter() - t0
        # on time: the steps' own time, plus the holder's start-up, plus a few short attempts
        assert loop_s < STEPS * STEP_S + 0.8 + (0.6 if locked_from_step is not None else 0)
        assert total_s < STEPS * STEP_S + 1.5  # close() did not wait for the lock either
        assert time.monotonic() - locked_at < HOLD_S, "the lock must outlast the loop"
        assert run.wait_written(timeout_s=HOLD_S + 20)
    finally:
        for cm in holder:
            cm.__exit__(None, None, None)
    with Ledger.open(path) as book:
        (r,) = list_runs(book)
        steps = run_steps(book, r.id)
    assert r.status == "finished"  # a ledger fault is not a failed run
    assert [s.step for s in steps] == list(range(1, STEPS + 1))
    faults = r.summary["ledger_faults"]
    assert faults["locked"] is True and faults["failed_writes"] >= 1
    assert "locked by another process" in faults["first_error"]
    assert faults["delayed_s"] > 0
    warnings = _track_warnings(caplog)
    assert len(warnings) == 1, warnings  # warned once
    assert "locked by another process" in warnings[0] and "training goes on" in warnings[0]


class _FullDisk(sqlite3.Connection):
    """A connection whose writes of step records fail as SQLite fails on a full disk."""

    full = threading.Event()

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:  # type: ignore[override]
        self._check(sql)
        return super().execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> sqlite3.Cursor:  # type: ignore[override]
        self._check(sql)
        return super().executemany(sql, *args)

    def _check(self, sql: str) -> None:
        if self.full.is_set() and sql.lstrip().upper().startswith(("INSERT", "UPDATE")):
            raise sqlite3.OperationalError("database or disk is full")


def test_a_full_disk_neither_stops_the_loop_nor_fails_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    real_connect = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        return real_connect(*args, factory=_FullDisk, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", connect)
    path = tmp_path / "l.sqlite"

    def on_step(i: int) -> None:
        if i == 7:
            _FullDisk.full.set()
        if i == 40:
            _FullDisk.full.clear()  # space was freed

    try:
        with track_run(project="p", phase="sft", ledger=path, flush_every=5,
                       flush_every_s=1e9) as run:
            loop_s = _train(run, STEPS, on_step)
    finally:
        _FullDisk.full.clear()
    assert loop_s < STEPS * STEP_S + 0.8
    assert run.wait_written(timeout_s=20)
    with Ledger.open(path) as book:
        (r,) = list_runs(book)
        steps = run_steps(book, r.id)
    assert r.status == "finished"
    assert [s.step for s in steps] == list(range(1, STEPS + 1))
    assert "disk is full" in r.summary["ledger_faults"]["first_error"]
    assert len(_track_warnings(caplog)) == 1


def test_records_refused_until_the_end_are_kept_and_added_by_the_next_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The disk stays full past the end of the run and past close_timeout_s: the records go to
    a pending file, and the next tracked run on the ledger adds them."""
    real_connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect",
                        lambda *a, **k: real_connect(*a, factory=_FullDisk, **k))
    path = tmp_path / "l.sqlite"
    Ledger.open(path).close()
    _FullDisk.full.set()
    try:
        with track_run(project="p", phase="a", ledger=path, flush_every=5, flush_every_s=1e9,
                       close_timeout_s=0.5) as run:
            _train(run, 12)
        assert run.run_id is None  # the ledger never took the run
        assert not run.wait_written(timeout_s=20)
    finally:
        _FullDisk.full.clear()
    (pending,) = tmp_path.glob(".l.sqlite.pending-*.json")
    assert any(str(pending) in w for w in _track_warnings(caplog))
    with track_run(project="p", phase="b", ledger=path) as later:
        _train(later, 2)
    assert not pending.exists()
    with Ledger.open(path) as book:
        runs = {r.phase: r for r in list_runs(book)}
        assert [s.step for s in run_steps(book, runs["a"].id)] == list(range(1, 13))
    assert runs["a"].status == "finished"
    assert runs["a"].summary["ledger_faults"]["spilled_to"] == str(pending)


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 512 KiB tmpfs (root only)."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}): "
                    "the disk-full case is covered by the monkeypatched test")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_really_full_disk(tiny_tmpfs: Path) -> None:
    path = tiny_tmpfs / "l.sqlite"
    filler = tiny_tmpfs / "filler"
    with track_run(project="p", phase="sft", ledger=path, flush_every=200,
                   flush_every_s=1e9) as run:
        with filler.open("wb", buffering=0) as f, pytest.raises(OSError):
            while True:  # fill the disk
                f.write(b"x" * 4096)
        t0 = time.perf_counter()
        for i in range(3000):
            run.start_step()
            if i == 2500:
                assert run.ledger_faults, "the full disk refused no write"
                filler.unlink()
        loop_s = time.perf_counter() - t0
    assert loop_s < 3.0
    assert run.wait_written(timeout_s=20)
    with Ledger.open(path) as book:
        (r,) = list_runs(book)
        assert len(run_steps(book, r.id)) == 3000
    assert r.status == "finished" and "disk is full" in r.summary["ledger_faults"]["first_error"]


# --- a new ledger, opened by several processes at once ----------------------------------------


def test_creation_waits_for_another_process_creating_the_same_ledger(tmp_path: Path) -> None:
    """The other process holds the new file's write lock in rollback-journal mode, as a creator
    does before its switch to WAL. SQLite's busy wait does not cover the switch: it must be
    retried, not reported at once as 'not a readable gpuhours ledger'."""
    path = tmp_path / "new.sqlite"
    with lock_holder(path, 1.0, journal="delete", begin="IMMEDIATE"):
        t0 = time.monotonic()
        with Ledger.open(path) as book:
            assert book.schema_version() >= 3
    assert time.monotonic() - t0 >= 0.5


def test_a_lock_that_outlasts_the_wait_is_called_a_lock(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ledger_module, "BUSY_TIMEOUT_MS", 300)
    path = tmp_path / "busy.sqlite"
    with lock_holder(path, 1.5, journal="delete", begin="IMMEDIATE"), \
            pytest.raises(InputError) as info:
        Ledger.open(path)
    text = str(info.value)
    assert "locked by another process" in text and "not a readable" not in text
    assert "Retry when the other writer has finished" in text


def _open_at(path: str, barrier: Any, results: Any) -> None:
    barrier.wait()
    try:
        with Ledger.open(path) as book:
            results.put(("ok", book.schema_version()))
    except Exception as e:  # noqa: BLE001 - reported to the test
        results.put(("error", str(e)))


def test_eight_processes_create_one_new_ledger(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")
    for attempt in range(3):
        path = tmp_path / f"race{attempt}" / "ledger.sqlite"
        barrier, results = ctx.Barrier(8), ctx.Queue()
        procs = [ctx.Process(target=_open_at, args=(str(path), barrier, results))
                 for _ in range(8)]
        for p in procs:
            p.start()
        got = [results.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        assert got == [("ok", 3)] * 8 or all(g[0] == "ok" for g in got), got
        with closing(sqlite3.connect(path)) as db:
            assert db.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == \
                got[0][1]  # migrated once, not once per process


def test_disk_full_when_opening_is_said_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_connect = sqlite3.connect

    class Full(sqlite3.Connection):
        def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:  # type: ignore[override]
            if "CREATE TABLE" in sql:
                raise sqlite3.OperationalError("database or disk is full")
            return super().execute(sql, *args)

    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: real_connect(*a, factory=Full, **k))
    with pytest.raises(InputError, match="the disk is full") as info:
        Ledger.open(tmp_path / "full.sqlite")
    assert "not a readable" not in str(info.value)


def test_pending_records_never_join_another_projects_run(tmp_path: Path) -> None:
    """A run's pending file names its run id; if the ledger was moved aside and started afresh
    at the same path, that id is another project's run: the records become a run of their own."""
    from gpuhours.track.ledger import now_utc
    from gpuhours.track.runs import StepRecord, insert_pending_run, start_run

    old = {"project": "OLD", "phase": "sft", "name": "OLD/sft", "device_kind": "cpu",
           "device_name": "cpu", "planned_steps": 10, "config": {}, "created_utc": now_utc()}
    steps = [StepRecord(step=i, started_s=float(i), wall_s=1.0) for i in range(4, 11)]
    finish = {"status": "finished", "summary": {"from": "OLD"}}
    path = tmp_path / "l.sqlite"
    with Ledger.open(path) as book:  # the same ledger: the records join their run
        rid = start_run(book, **old)
        assert insert_pending_run(book, rid, old, steps, finish) == 7
        assert [s.step for s in run_steps(book, rid)] == list(range(4, 11))
    path.rename(tmp_path / "aside.sqlite")
    with Ledger.open(path) as book:  # a fresh ledger at the same path: run 1 is NEW's
        new = start_run(book, project="NEW", phase="sft", name="NEW/sft", device_kind="cpu",
                        device_name="cpu", planned_steps=5, config={})
        assert new == rid
        assert insert_pending_run(book, rid, old, steps, finish) == 7
        runs = {r.project: r for r in list_runs(book)}
        assert runs["NEW"].status == "running" and run_steps(book, new) == []
        assert runs["OLD"].id != new and runs["OLD"].summary == {"from": "OLD"}
        assert [s.step for s in run_steps(book, runs["OLD"].id)] == list(range(4, 11))


def test_the_retry_thread_never_writes_into_another_ledgers_run(tmp_path: Path) -> None:
    """The run's writer knows run #1; the ledger is moved aside and started afresh at the same
    path, where #1 is another project's run: the records left go to a run of their own."""
    from gpuhours.track.pending import PendingWriter
    from gpuhours.track.runs import StepRecord, start_run

    path = tmp_path / "l.sqlite"
    book = Ledger.open(path)
    fields = {"project": "OLD", "phase": "sft", "name": "OLD/sft", "device_kind": "cpu",
              "device_name": "cpu", "planned_steps": 10, "config": {},
              "created_utc": "2026-11-25T00:00:00+00:00", "hostname": "h"}
    writer = PendingWriter(book, fields)
    assert writer.flush(force=True) and writer.run_id == 1
    book.close()
    path.rename(tmp_path / "aside.sqlite")
    with Ledger.open(path) as fresh:
        assert start_run(fresh, project="NEW", phase="sft", name="NEW/sft", device_kind="cpu",
                         device_name="cpu", planned_steps=5, config={}) == 1
    writer.add_steps([StepRecord(step=i, started_s=float(i), wall_s=1.0) for i in (1, 2)])
    writer.set_finish("finished", lambda: {"from": "OLD"})
    assert writer.drain(timeout_s=5.0)
    with Ledger.open(path) as fresh:
        runs = {r.project: r for r in list_runs(fresh)}
        assert runs["NEW"].status == "running" and run_steps(fresh, 1) == []
        assert runs["OLD"].id == 2 and runs["OLD"].summary["from"] == "OLD"
        assert [s.step for s in run_steps(fresh, 2)] == [1, 2]
