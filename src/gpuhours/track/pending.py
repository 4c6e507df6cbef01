"""A tracked run's records on their way to the ledger, kept until the ledger takes them.

Tracking must never stop or slow the training it watches. The ledger can refuse a write for a
while (another process holds its write lock: an `sqlite3` shell, a backup, a long transaction;
the disk is full) or for good (the file was removed, its disk failed). So a write is tried with a
short wait for the lock (`ATTEMPT_BUSY_TIMEOUT_S`), and when it fails nothing is raised into the
training loop: the records stay in memory, the next flush tries again (backing off up to
`MAX_RETRY_INTERVAL_S`), one warning is logged (logger `gpuhours.track`), and the fault is
recorded in the run's summary (`ledger_faults`). A failed write is never a failed run.

When the run ends with records still refused, a background thread keeps trying for
`close_timeout_s` while the program goes on; then the records are written to a file beside the
ledger (`.<ledger name>.pending-*.json`), which the next tracked run on that ledger imports
(`import_pending`). Standard library only.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gpuhours.report.text import plain
from gpuhours.track.ledger import Ledger, describe_error, is_locked, now_utc
from gpuhours.track.runs import (
    StepRecord,
    add_steps,
    finish_run,
    insert_pending_run,
    is_same_run,
    start_run,
)

log = logging.getLogger("gpuhours.track")

#: how long one write from the training loop waits for another process's write lock, s. A
#: tracker's own transactions hold the lock for about 10 ms, so another tracker writing to the
#: same ledger is waited for; a lock held longer is a fault, and the loop goes on.
ATTEMPT_BUSY_TIMEOUT_S = 0.05
#: the first retry after a refused write, s; doubled after each refusal up to the maximum
FIRST_RETRY_INTERVAL_S = 0.25
MAX_RETRY_INTERVAL_S = 10.0
#: how long the background thread keeps trying after the run has ended, s (then the records go
#: to a pending file beside the ledger)
CLOSE_TIMEOUT_S = 30.0
#: the pause between two attempts of the background thread, s
DRAIN_RETRY_INTERVAL_S = 0.2
PENDING_FORMAT = "gpuhours-pending-run/1"


class PendingWriter:
    """The records of one run that the ledger has not taken yet: the run itself (until it has an
    id), its step records, its final status. `flush()` never raises."""

    def __init__(self, ledger: Ledger, run_fields: dict[str, Any]) -> None:
        self.ledger = ledger
        self.path = ledger.path
        #: the path as logged: a user's path, control characters shown as escapes
        self._shown = plain(ledger.path)
        self.run_id: int | None = None
        self._run_fields = run_fields
        self._steps: list[StepRecord] = []
        self._finish: tuple[str, Callable[[], dict[str, Any]]] | None = None
        self._retry_s = FIRST_RETRY_INTERVAL_S
        self._next_try = 0.0
        self._warned = False
        self._fault_since: float | None = None
        self.faults: dict[str, Any] = {}
        self._lock = threading.Lock()

    # from the training thread ------------------------------------------------------------------

    def add_steps(self, records: list[StepRecord]) -> None:
        with self._lock:
            self._steps.extend(records)

    def set_finish(self, status: str, summary: Callable[[], dict[str, Any]]) -> None:
        """The run's final status; its summary is built when it is written (with the faults)."""
        with self._lock:
            self._finish = (status, summary)

    @property
    def pending_steps(self) -> int:
        return len(self._steps)

    @property
    def done(self) -> bool:
        return self.run_id is not None and not self._steps and self._finish is None

    def flush(self, ledger: Ledger | None = None, force: bool = False,
              busy_timeout_s: float = ATTEMPT_BUSY_TIMEOUT_S) -> bool:
        """Try to write everything pending, through `ledger` (default: the one given at the
        start; another thread passes its own connection). True when nothing is left. Never
        raises: a refusal is logged once, recorded and retried later (not before the back-off
        interval unless `force`)."""
        book = ledger or self.ledger
        now = time.monotonic()
        if not force and now < self._next_try:
            return False
        with self._lock:
            try:
                if (book is not self.ledger and self.run_id is not None
                        and not is_same_run(book, self.run_id, self._run_fields)):
                    # the path opened again holds another ledger now (moved aside, started
                    # afresh): what is left becomes a run of its own, never another's
                    self.run_id = None
                if self.run_id is None:
                    self.run_id = start_run(book, **self._run_fields,
                                            busy_timeout_s=busy_timeout_s)
                if self._steps:
                    add_steps(book, self.run_id, self._steps, busy_timeout_s=busy_timeout_s)
                    self._steps = []
                if self._finish is not None:
                    status, summary = self._finish
                    self._recovered(now)
                    finish_run(book, self.run_id, status, self._with_faults(summary()),
                               busy_timeout_s=busy_timeout_s)
                    self._finish = None
            except Exception as e:  # noqa: BLE001 - nothing may reach the training loop
                self._refused(e, now)
                return False
            self._recovered(now)
            return True

    # faults ------------------------------------------------------------------------------------

    def _refused(self, e: Exception, now: float) -> None:
        self._next_try = now + self._retry_s
        self._retry_s = min(self._retry_s * 2, MAX_RETRY_INTERVAL_S)
        f = self.faults
        f["failed_writes"] = f.get("failed_writes", 0) + 1
        f["max_pending_steps"] = max(f.get("max_pending_steps", 0), len(self._steps))
        if self._fault_since is None:
            self._fault_since = now
        if "first_error" not in f:
            f["first_error"] = describe_error(e)
            f["first_failed_utc"] = now_utc()
            f["locked"] = is_locked(e)
        if not self._warned:
            self._warned = True
            log.warning("gpuhours.track: ledger %s %s; %d step record(s) are kept in memory and "
                        "written when it takes them; training goes on.", self._shown,
                        describe_error(e), len(self._steps))

    def _recovered(self, now: float) -> None:
        if self._fault_since is not None:
            waited = now - self._fault_since
            self.faults["delayed_s"] = max(self.faults.get("delayed_s", 0.0), waited)
            self._fault_since = None
            self._retry_s = FIRST_RETRY_INTERVAL_S
            log.info("gpuhours.track: ledger %s took the pending records after %.1f s.",
                     self._shown, waited)

    def _with_faults(self, summary: dict[str, Any]) -> dict[str, Any]:
        if self.faults:
            summary = {**summary, "ledger_faults": dict(self.faults)}
        return summary

    # after the run -----------------------------------------------------------------------------

    def drain(self, timeout_s: float) -> bool:
        """Keep trying for `timeout_s` through a connection of this thread's own (SQLite
        connections belong to the thread that opened them); then write what is left to a
        pending file. True when everything reached the ledger."""
        deadline = time.monotonic() + timeout_s
        own: Ledger | None = None
        try:
            while True:
                try:
                    if own is None:
                        own = Ledger.open(self.path, create=False, busy_timeout_s=1.0)
                    if self.flush(own, force=True, busy_timeout_s=1.0):
                        return True
                except Exception as e:  # noqa: BLE001 - a background thread must not die loudly
                    self._refused(e, time.monotonic())
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                # each attempt already waits up to 1 s for the lock; a full disk fails at once
                time.sleep(min(DRAIN_RETRY_INTERVAL_S, left))
        finally:
            if own is not None:
                own.close()
        self._spill()
        return False

    def _spill(self) -> None:
        """Write what the ledger did not take to a pending file beside it (atomically)."""
        with self._lock:
            target = self.path.parent / (f".{self.path.name}.pending-{os.getpid()}-"
                                         f"{secrets.token_hex(4)}.json")
            self.faults["spilled_to"] = str(target)
            finish = None
            if self._finish is not None:
                status, summary = self._finish
                finish = {"status": status, "summary": self._with_faults(summary())}
            data = {"format": PENDING_FORMAT, "ledger": str(self.path), "run_id": self.run_id,
                    "run": self._run_fields, "steps": [asdict(s) for s in self._steps],
                    "finish": finish}
            try:
                from gpuhours.files import atomic_write_text

                atomic_write_text(target, json.dumps(data, default=str))
            except Exception as e:  # noqa: BLE001
                log.error("gpuhours.track: ledger %s never took this run's records (%d step "
                          "record(s)), and they could not be kept in %s either (%s): they are "
                          "lost.", self._shown, len(self._steps), plain(target), e)
                return
            log.warning("gpuhours.track: ledger %s did not take this run's records (%d step "
                        "record(s)) in time; they are kept in %s and the next tracked run on this "
                        "ledger adds them.", self._shown, len(self._steps), plain(target))


class UntrackedWriter:
    """Stands in for a PendingWriter on a process that must not write: a distributed job's
    ranks other than 0, each of which would otherwise register the same run again (with the
    job's GPU count each time). It takes every record and keeps none."""

    ledger = None
    run_id = None
    done = True

    def __init__(self) -> None:
        self.faults: dict[str, Any] = {}

    def add_steps(self, records: list[StepRecord]) -> None:
        return None

    def set_finish(self, status: str, summary: Callable[[], dict[str, Any]]) -> None:
        return None

    def flush(self, ledger: Ledger | None = None, force: bool = False,
              busy_timeout_s: float = ATTEMPT_BUSY_TIMEOUT_S) -> bool:
        return True

    def drain(self, timeout_s: float) -> bool:
        return True


def pending_files(ledger_path: Path) -> list[Path]:
    """Pending files left beside a ledger by runs that ended while it refused writes."""
    return sorted(ledger_path.parent.glob(f".{ledger_path.name}.pending-*.json"))


def import_pending(ledger: Ledger, busy_timeout_s: float = 1.0) -> int:
    """Add the records of pending files to the ledger, one transaction per file, then remove
    each file; returns how many step records were added. A file that cannot be read or written
    is left for the next time (and logged); this never raises."""
    added = 0
    for path in pending_files(ledger.path):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("format") != PENDING_FORMAT:
                raise ValueError(f"format {data.get('format')!r}")
            steps = [StepRecord(**s) for s in data["steps"]]
            added += insert_pending_run(ledger, data.get("run_id"), data["run"], steps,
                                        data.get("finish"), busy_timeout_s)
            path.unlink()
        except Exception as e:  # noqa: BLE001 - importing old records must not stop a new run
            log.warning("gpuhours.track: pending records %s were not added to ledger %s (%s); "
                        "left for the next time.", path, ledger.path, e)
    return added
