"""The ledger: an SQLite file of measurements (benchmarks) and device probes.

Where: `--ledger PATH`, else the environment variable GPUHOURS_LEDGER, else
`.gpuhours/ledger.sqlite` in the current directory (beside the user's project).

How it stays whole:
- the schema is versioned (table `schema_version`) and brought up to date by the migration
  functions in `MIGRATIONS`, in one transaction, when a ledger is opened;
- every write is one `BEGIN IMMEDIATE ... COMMIT` transaction, so a process killed mid-write
  leaves either the whole record or none of it;
- WAL journal mode and a busy timeout let several benchmarks write to one ledger at once: a
  writer waits for the other's transaction instead of failing.
Records are append-only; units are in the column and field names. Standard library only.
"""

from __future__ import annotations

import json
import random
import socket
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuhours.errors import InputError
from gpuhours.track.paths import DEFAULT_RELATIVE_PATH, ENV_VAR, ledger_path  # noqa: F401

#: how long a writer waits for another writer's transaction before giving up, ms
BUSY_TIMEOUT_MS = 30_000


# --- schema and migrations ------------------------------------------------------------------------


def _v1_measurements(db: sqlite3.Connection) -> None:
    """Version 1: one row per benchmark configuration, with its setup, environment and results.

    The columns are what `ledger list` and calibration filter on; the JSON columns keep everything
    (the full configuration, the environment, the result with each figure's basis)."""
    db.execute("""
        CREATE TABLE measurements (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            created_utc TEXT NOT NULL,
            kind TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('ok', 'does-not-fit', 'failed')),
            device_kind TEXT NOT NULL,
            device_key TEXT NOT NULL,
            device_name TEXT NOT NULL,
            hostname TEXT NOT NULL,
            model TEXT NOT NULL,
            method TEXT,
            precision TEXT,
            micro_batch INTEGER,
            seq_len INTEGER,
            grad_accum INTEGER,
            checkpointing INTEGER,
            compiled INTEGER,
            steps_timed INTEGER,
            step_time_median_s REAL,
            step_time_p90_s REAL,
            step_time_cv REAL,
            tokens_per_s REAL,
            model_flops_per_step REAL,
            peak_flops_per_s REAL,
            peak_flops_basis TEXT,
            mfu REAL,
            peak_memory_bytes INTEGER,
            setup_json TEXT NOT NULL,
            model_config_json TEXT NOT NULL,
            environment_json TEXT NOT NULL,
            results_json TEXT NOT NULL
        )""")
    db.execute("CREATE INDEX measurements_device ON measurements (device_key, model)")


def _v2_device_probes(db: sqlite3.Connection) -> None:
    """Version 2: measured device rates (a CPU's matmul FLOP/s and copy bandwidth), which are the
    peaks of devices that have no catalog row; measurements name the probe they used."""
    db.execute("""
        CREATE TABLE device_probes (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            created_utc TEXT NOT NULL,
            device_kind TEXT NOT NULL,
            device_key TEXT NOT NULL,
            device_name TEXT NOT NULL,
            hostname TEXT NOT NULL,
            probe TEXT NOT NULL,
            dtype TEXT,
            value REAL NOT NULL,
            unit TEXT NOT NULL,
            details_json TEXT NOT NULL
        )""")
    db.execute("CREATE INDEX device_probes_device ON device_probes (device_key, probe, dtype)")
    db.execute("ALTER TABLE measurements ADD COLUMN probe_ids_json TEXT NOT NULL DEFAULT '[]'")


def _v3_runs(db: sqlite3.Connection) -> None:
    """Version 3: tracked training runs (gpuhours.track) and their step records.

    A run is one row, written when it starts and updated when it ends (status, summary); its
    steps are appended in batches, one transaction per batch, so a killed run keeps every batch
    it flushed and stays 'running' (the doctor says so). Times in seconds, memory in bytes."""
    db.execute("""
        CREATE TABLE runs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            created_utc TEXT NOT NULL,
            finished_utc TEXT,
            status TEXT NOT NULL CHECK (status IN ('running', 'finished', 'failed')),
            project TEXT NOT NULL,
            phase TEXT NOT NULL,
            name TEXT NOT NULL,
            hostname TEXT NOT NULL,
            device_kind TEXT NOT NULL,
            device_name TEXT NOT NULL,
            planned_steps INTEGER,
            config_json TEXT NOT NULL,
            summary_json TEXT NOT NULL DEFAULT '{}'
        )""")
    db.execute("CREATE INDEX runs_project ON runs (project, phase)")
    db.execute("""
        CREATE TABLE run_steps (
            run_id INTEGER NOT NULL REFERENCES runs (id),
            step INTEGER NOT NULL,
            started_s REAL NOT NULL,
            wall_s REAL NOT NULL,
            data_wait_s REAL NOT NULL,
            compute_s REAL NOT NULL,
            optimizer_s REAL NOT NULL,
            eval_s REAL NOT NULL,
            save_s REAL NOT NULL,
            save_bytes INTEGER NOT NULL,
            samples INTEGER,
            tokens_real INTEGER,
            tokens_computed INTEGER,
            peak_memory_bytes INTEGER,
            memory_basis TEXT,
            device_util_pct REAL,
            PRIMARY KEY (run_id, step)
        )""")


#: MIGRATIONS[i] brings a ledger from version i to version i + 1. Append only: never edit one
#: that has shipped; a new table or column is a new function at the end.
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_v1_measurements, _v2_device_probes,
                                                           _v3_runs]
SCHEMA_VERSION = len(MIGRATIONS)


def now_utc() -> str:
    """Now, UTC, ISO 8601 to the second: the timestamps of ledger records."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# --- records --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measurement:
    """One benchmark configuration as stored. `results` holds every figure with its basis."""

    id: int
    created_utc: str
    kind: str
    status: str
    device_kind: str
    device_key: str
    device_name: str
    hostname: str
    model: str
    setup: dict[str, Any]
    model_config: dict[str, Any]
    environment: dict[str, Any]
    results: dict[str, Any]
    probe_ids: list[int]
    tokens_per_s: float | None
    step_time_median_s: float | None
    step_time_p90_s: float | None
    step_time_cv: float | None
    mfu: float | None
    peak_memory_bytes: int | None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @property
    def model_label(self) -> str:
        """The model as measured: its name and the --set overrides that changed it (a 2-layer
        variant is not the model its name says)."""
        return model_label(self.model, self.setup.get("config_overrides"))


def model_label(model: str, overrides: dict[str, Any] | None) -> str:
    """A model and its --set overrides as the user typed them (key=value)."""
    if not overrides:
        return model
    return f"{model} ({', '.join(f'{k}={v}' for k, v in overrides.items())})"


@dataclass(frozen=True)
class Probe:
    """One measured device rate: `probe` 'matmul' (unit 'flop/s', per dtype) or 'copy'
    (unit 'bytes/s': bytes read + written per second)."""

    id: int
    created_utc: str
    device_kind: str
    device_key: str
    device_name: str
    hostname: str
    probe: str
    dtype: str | None
    value: float
    unit: str
    details: dict[str, Any]


_SETUP_COLUMNS = ("method", "precision", "micro_batch", "seq_len", "grad_accum", "checkpointing",
                  "compiled")
_RESULT_COLUMNS = ("steps_timed", "step_time_median_s", "step_time_p90_s", "step_time_cv",
                   "tokens_per_s", "model_flops_per_step", "peak_flops_per_s", "peak_flops_basis",
                   "mfu", "peak_memory_bytes")


class Ledger:
    """An open ledger. Use as a context manager, or call `close()`.

        with Ledger.open(ledger_path(args.ledger)) as ledger:
            row_id = ledger.add_measurement(...)
    """

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self._db = db
        self.path = path
        #: how long a write waits for another process's write lock, s
        self.busy_timeout_s = BUSY_TIMEOUT_MS / 1000

    # opening ------------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | Path, create: bool = True,
             busy_timeout_s: float | None = None) -> Ledger:
        """Open (and, with `create`, make) the ledger at `path`, migrating it to SCHEMA_VERSION.

        Several processes may open (and create) the same new ledger at once: the switch to WAL
        and the migration wait for each other (up to `busy_timeout_s`, then an InputError that
        says the file is locked). A file that is not an SQLite database, or a ledger written by
        a newer gpuhours, is an InputError naming the file; it is never modified.
        """
        path = Path(path)
        where = f"ledger {path}"
        if busy_timeout_s is None:
            busy_timeout_s = BUSY_TIMEOUT_MS / 1000
        if path.is_dir():
            raise InputError(where, "is a directory; expected an SQLite file.",
                             f"Use --ledger {path / 'ledger.sqlite'} or another file.")
        if not path.exists():
            if not create:
                raise InputError(where, "does not exist.",
                                 f"Run `gpuhours bench` to create it, or set --ledger / {ENV_VAR}.")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise InputError(where, f"cannot create its folder: {e.strerror}.") from None
        elif not _has_sqlite_header(path):
            raise InputError(where, "is not an SQLite database (a gpuhours ledger); it was left "
                                    "unchanged.", f"Point --ledger or {ENV_VAR} at a ledger file, "
                                                  "or move this file away to start a new ledger.")
        else:
            foreign = _foreign_tables(path, busy_timeout_s)
            if foreign:
                raise InputError(where, f"is an SQLite database of something else (holding "
                                        f"{', '.join(foreign[:4])}{', ...' if len(foreign) > 4 else ''}"
                                        f"; no gpuhours schema_version); it was left unchanged.",
                                 f"Point --ledger or {ENV_VAR} at a ledger file, or a new path "
                                 "to start a ledger there.")
        try:
            db = sqlite3.connect(str(path), timeout=busy_timeout_s, isolation_level=None)
        except sqlite3.Error as e:
            raise InputError(where, f"cannot be opened: {e}.") from None
        db.row_factory = sqlite3.Row
        ledger = cls(db, path)
        ledger.busy_timeout_s = busy_timeout_s
        try:
            _retry_while_locked(lambda: cls._prepare(ledger, where), busy_timeout_s)
        except sqlite3.DatabaseError as e:
            db.close()
            if _condition(e) is not None:  # locked, disk full, I/O error, read-only: say so
                raise InputError(where, describe_error(e, busy_timeout_s) + "; it was left "
                                        "unchanged.", _hint_for(e)) from None
            raise InputError(where, f"is not a readable gpuhours ledger ({e}); it was left "
                                    "unchanged.", "Point --ledger at another file.") from None
        except BaseException:
            db.close()
            raise
        return ledger

    def _prepare(self, where: str) -> None:
        """WAL, pragmas and migrations; each step may be retried while another process holds
        the file (creating it, switching it to WAL, migrating it)."""
        db = self._db
        db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
        mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise InputError(where, f"could not switch to WAL journal mode (got {mode!r}); "
                                    "is it on a network file system?")
        db.execute("PRAGMA synchronous = FULL")
        db.execute("PRAGMA foreign_keys = ON")
        self._migrate()

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # transactions and queries (the public API of the other track modules) ---------------------

    @contextmanager
    def transaction(self, busy_timeout_s: float | None = None) -> Iterator[sqlite3.Connection]:
        """One write transaction: everything executed on the yielded connection is stored whole
        or not at all. BEGIN IMMEDIATE takes the write lock at once, waiting up to
        `busy_timeout_s` (default: the ledger's) for another writer, so a read-then-write cannot
        deadlock. A failure (an exception inside, a COMMIT refused because the disk is full)
        rolls back and re-raises; the connection is left ready for the next transaction.

            with ledger.transaction() as db:
                db.execute("INSERT INTO runs ...", values)
        """
        if busy_timeout_s is not None:
            self._db.execute(f"PRAGMA busy_timeout = {max(0, int(busy_timeout_s * 1000))}")
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    with suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                raise
        finally:
            if busy_timeout_s is not None:
                with suppress(sqlite3.Error):
                    self._db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """The rows of one SELECT (columns by name: row["id"]). A damaged file is an InputError
        naming the ledger."""
        try:
            return list(self._db.execute(sql, list(args)).fetchall())
        except sqlite3.DatabaseError as e:
            raise InputError(f"ledger {self.path}", f"cannot be read ({e}).") from None

    def schema_version(self) -> int:
        row = self._db.execute("SELECT MAX(version) FROM schema_version").fetchone()
        return int(row[0] or 0)

    def _migrate(self) -> None:
        self._db.execute("CREATE TABLE IF NOT EXISTS schema_version ("
                         "version INTEGER NOT NULL, applied_utc TEXT NOT NULL)")
        if self.schema_version() == SCHEMA_VERSION:
            return
        with self.transaction() as db:
            # read again under the write lock: another process may have migrated meanwhile
            current = self.schema_version()
            if current > SCHEMA_VERSION:
                raise InputError(f"ledger {self.path}",
                                 f"has schema version {current}, newer than this gpuhours "
                                 f"understands ({SCHEMA_VERSION}); it was left unchanged.",
                                 "Upgrade gpuhours to read it.")
            for version in range(current, SCHEMA_VERSION):
                MIGRATIONS[version](db)
                db.execute("INSERT INTO schema_version (version, applied_utc) VALUES (?, ?)",
                           (version + 1, now_utc()))

    # writing ------------------------------------------------------------------------------------

    def add_measurement(
        self,
        *,
        kind: str,
        status: str,
        device_kind: str,
        device_key: str,
        device_name: str,
        model: str,
        setup: dict[str, Any],
        model_config: dict[str, Any],
        environment: dict[str, Any],
        results: dict[str, Any],
        probe_ids: list[int] | None = None,
        created_utc: str | None = None,
    ) -> int:
        """Append one measurement in one transaction; returns its id.

        `setup` carries method, precision, micro_batch, seq_len, grad_accum, checkpointing and
        compiled; `results` the figures (step_time_median_s, tokens_per_s, mfu, ...). The
        well-known keys of both are copied into columns; everything is kept in the JSON."""
        hostname = str(environment.get("hostname") or socket.gethostname())
        values: dict[str, Any] = {
            "created_utc": created_utc or now_utc(), "kind": kind, "status": status,
            "device_kind": device_kind, "device_key": device_key, "device_name": device_name,
            "hostname": hostname, "model": model,
            "setup_json": dumps_json(setup), "model_config_json": dumps_json(model_config),
            "environment_json": dumps_json(environment), "results_json": dumps_json(results),
            "probe_ids_json": dumps_json(list(probe_ids or [])),
        }
        for key in _SETUP_COLUMNS:
            value = setup.get(key)
            values[key] = int(value) if isinstance(value, bool) else value
        for key in _RESULT_COLUMNS:
            values[key] = results.get(key)
        columns = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        with self.transaction() as db:
            cur = db.execute(f"INSERT INTO measurements ({columns}) VALUES ({marks})",
                             tuple(values.values()))
            return int(cur.lastrowid or 0)

    def add_probe(self, *, device_kind: str, device_key: str, device_name: str, hostname: str,
                  probe: str, dtype: str | None, value: float, unit: str,
                  details: dict[str, Any]) -> int:
        """Append one device probe (a measured matmul rate or copy bandwidth); returns its id."""
        with self.transaction() as db:
            cur = db.execute(
                "INSERT INTO device_probes (created_utc, device_kind, device_key, device_name, "
                "hostname, probe, dtype, value, unit, details_json) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (now_utc(), device_kind, device_key, device_name, hostname, probe, dtype, value,
                 unit, dumps_json(details)))
            return int(cur.lastrowid or 0)

    # reading ------------------------------------------------------------------------------------

    def measurements(self, *, device_key: str | None = None, status: str | None = None,
                     limit: int | None = None) -> list[Measurement]:
        """Measurements, newest first, optionally of one device and status."""
        where, args = [], []
        if device_key is not None:
            where.append("device_key = ?")
            args.append(device_key)
        if status is not None:
            where.append("status = ?")
            args.append(status)
        sql = "SELECT * FROM measurements"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [_measurement(r) for r in self.query(sql, args)]

    def measurement(self, measurement_id: int) -> Measurement:
        rows = self.query("SELECT * FROM measurements WHERE id = ?", [measurement_id])
        if not rows:
            raise InputError("ID", f"no measurement #{measurement_id} in ledger {self.path}.",
                             "See `gpuhours ledger list`.")
        return _measurement(rows[0])

    def probes(self, *, device_key: str | None = None, probe: str | None = None,
               dtype: str | None = None) -> list[Probe]:
        """Device probes, newest first, optionally filtered."""
        where, args = [], []
        for column, value in (("device_key", device_key), ("probe", probe), ("dtype", dtype)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        sql = "SELECT * FROM device_probes"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [_probe(r) for r in self.query(sql + " ORDER BY id DESC", args)]

    def probe(self, probe_id: int) -> Probe:
        rows = self.query("SELECT * FROM device_probes WHERE id = ?", [probe_id])
        if not rows:
            raise InputError("probe", f"no device probe #{probe_id} in ledger {self.path}.")
        return _probe(rows[0])

    def integrity_ok(self) -> bool:
        """SQLite's own check of the file (pages, indexes)."""
        return self._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def is_locked(e: BaseException) -> bool:
    """True for SQLite's "another connection holds the lock" errors (SQLITE_BUSY, SQLITE_LOCKED),
    which go away by waiting; False for every other error."""
    if not isinstance(e, sqlite3.OperationalError):
        return False
    name = str(getattr(e, "sqlite_errorname", ""))
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return True
    text = str(e).lower()
    return "database is locked" in text or "is locked" in text or "database is busy" in text


def _condition(e: BaseException) -> str | None:
    """What about the file's surroundings an SQLite error reports: 'locked', 'full', 'io',
    'readonly', 'cantopen'; None for anything else (a damaged or foreign file, a bug)."""
    if is_locked(e):
        return "locked"
    name = str(getattr(e, "sqlite_errorname", ""))
    text = str(e).lower()
    for condition, code, words in (("full", "SQLITE_FULL", "disk is full"),
                                   ("io", "SQLITE_IOERR", "disk i/o error"),
                                   ("readonly", "SQLITE_READONLY", "readonly"),
                                   ("cantopen", "SQLITE_CANTOPEN", "unable to open")):
        if name.startswith(code) or words in text:
            return condition
    return None


def describe_error(e: BaseException, busy_timeout_s: float | None = None) -> str:
    """What an SQLite error means for a ledger, in words (the end of "ledger X: ...")."""
    condition = _condition(e)
    if condition == "locked":
        waited = f" and stayed locked for {busy_timeout_s:g} s" if busy_timeout_s else ""
        return (f"is locked by another process (a benchmark, a tracker, an sqlite3 shell or a "
                f"backup holds its write lock){waited} ({e})")
    return {"full": f"cannot be written: the disk is full ({e})",
            "io": f"cannot be written: a disk I/O error ({e})",
            "readonly": f"cannot be written: it is read-only ({e})",
            "cantopen": f"cannot be opened ({e})"}.get(condition or "", f"cannot be used ({e})")


def _hint_for(e: BaseException) -> str:
    if is_locked(e):
        return "Retry when the other writer has finished, or use another --ledger."
    return "Free the disk or fix its permissions, or point --ledger at another file."


def _retry_while_locked(step: Callable[[], None], timeout_s: float) -> None:
    """Run `step`, again after a short random pause while SQLite says the file is locked, until
    `timeout_s` has passed. SQLite's own busy wait does not cover every case: a connection that
    holds a read lock and needs the write lock (the switch to WAL of a file another process is
    creating) gets SQLITE_BUSY at once, since waiting could deadlock."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            step()
            return
        except sqlite3.OperationalError as e:
            if not is_locked(e) or time.monotonic() >= deadline:
                raise
        time.sleep(random.uniform(0.005, 0.05))


def _foreign_tables(path: Path, busy_timeout_s: float) -> list[str]:
    """The tables, views, indexes and triggers of an existing SQLite file that is not a ledger:
    none when it has schema_version (a ledger, of any version) or nothing at all (an empty
    database is adopted). Read through a read-only connection, so that another program's database is never
    switched to WAL or given tables; if that connection cannot read it (a ledger whose WAL
    index cannot be opened read-only), [] and the normal open decides."""
    try:
        ro = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True,
                             timeout=busy_timeout_s)
    except sqlite3.Error:
        return []
    try:
        names = [str(r[0]) for r in ro.execute(
            "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name")]
    except sqlite3.Error:
        return []
    finally:
        ro.close()
    if not names or "schema_version" in names:
        return []
    return names


def _has_sqlite_header(path: Path) -> bool:
    """An empty file is a new ledger; otherwise the file must start with SQLite's magic."""
    try:
        with path.open("rb") as f:
            head = f.read(16)
    except OSError as e:
        raise InputError(f"ledger {path}", f"cannot be read: {e.strerror}.") from None
    return head == b"" or head == b"SQLite format 3\x00"


def dumps_json(value: Any) -> str:
    """The JSON of a ledger column: sorted keys; what JSON cannot hold as its str()."""
    return json.dumps(value, sort_keys=True, default=str)


def _measurement(r: sqlite3.Row) -> Measurement:
    return Measurement(
        id=r["id"], created_utc=r["created_utc"], kind=r["kind"], status=r["status"],
        device_kind=r["device_kind"], device_key=r["device_key"], device_name=r["device_name"],
        hostname=r["hostname"], model=r["model"], setup=json.loads(r["setup_json"]),
        model_config=json.loads(r["model_config_json"]),
        environment=json.loads(r["environment_json"]), results=json.loads(r["results_json"]),
        probe_ids=json.loads(r["probe_ids_json"]), tokens_per_s=r["tokens_per_s"],
        step_time_median_s=r["step_time_median_s"], step_time_p90_s=r["step_time_p90_s"],
        step_time_cv=r["step_time_cv"], mfu=r["mfu"], peak_memory_bytes=r["peak_memory_bytes"],
    )


def _probe(r: sqlite3.Row) -> Probe:
    return Probe(id=r["id"], created_utc=r["created_utc"], device_kind=r["device_kind"],
                 device_key=r["device_key"], device_name=r["device_name"],
                 hostname=r["hostname"], probe=r["probe"], dtype=r["dtype"], value=r["value"],
                 unit=r["unit"], details=json.loads(r["details_json"]))
