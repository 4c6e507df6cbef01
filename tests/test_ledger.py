"""The ledger: schema and migrations, transactions, concurrent writers, a writer killed mid-write,
broken files, export, and the `gpuhours ledger` commands."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from contextlib import closing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import InputError
from gpuhours.track import ledger as L
from gpuhours.track.ledger_export import CSV_COLUMNS, to_csv, to_json

SETUP = {"method": "full", "precision": "fp32", "micro_batch": 2, "seq_len": 64, "grad_accum": 1,
         "checkpointing": False, "compiled": False, "optimizer": "adamw"}


def _add(ledger: L.Ledger, tokens_per_s: float = 1000.0, **over: object) -> int:
    kwargs: dict = dict(kind="bench", status="ok", device_kind="cpu", device_key="cpu-x-2t",
                        device_name="X, 2 torch threads", model="tiny", setup=SETUP,
                        model_config={"model_type": "llama"},
                        environment={"hostname": "h", "torch": "2.13.0"},
                        results={"tokens_per_s": tokens_per_s, "step_time_median_s": 0.128,
                                 "mfu": 0.5, "peak_memory_bytes": 12345})
    kwargs.update(over)
    return ledger.add_measurement(**kwargs)


def test_new_ledger_has_current_schema_wal_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "ledger.sqlite"
    with L.Ledger.open(path) as ledger:
        assert ledger.schema_version() == L.SCHEMA_VERSION == len(L.MIGRATIONS)
        row_id = _add(ledger)
        probe_id = ledger.add_probe(device_kind="cpu", device_key="cpu-x-2t", device_name="X",
                                    hostname="h", probe="matmul", dtype="float32", value=1e11,
                                    unit="flop/s", details={"reps": 8})
        m = ledger.measurement(row_id)
        assert m.tokens_per_s == 1000.0 and m.step_time_median_s == 0.128
        assert m.peak_memory_bytes == 12345 and m.setup == SETUP
        assert m.results["mfu"] == 0.5
        assert ledger.probe(probe_id).value == 1e11
        assert ledger.integrity_ok()
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        # units in the column names
        cols = [r[1] for r in db.execute("PRAGMA table_info(measurements)")]
        assert {"step_time_median_s", "tokens_per_s", "peak_memory_bytes"} <= set(cols)


def test_migration_from_version_1_keeps_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE schema_version (version INTEGER NOT NULL, applied_utc TEXT NOT NULL)")
    L.MIGRATIONS[0](db)
    db.execute("INSERT INTO schema_version VALUES (1, '2026-01-01T00:00:00+00:00')")
    db.execute("INSERT INTO measurements (created_utc, kind, status, device_kind, device_key, "
               "device_name, hostname, model, setup_json, model_config_json, environment_json, "
               "results_json, tokens_per_s) VALUES ('2026-01-01', 'bench', 'ok', 'cpu', 'k', "
               "'n', 'h', 'tiny', '{}', '{}', '{}', '{}', 42.0)")
    db.commit()
    db.close()
    with L.Ledger.open(path) as ledger:
        assert ledger.schema_version() == L.SCHEMA_VERSION
        (m,) = ledger.measurements()
        assert m.tokens_per_s == 42.0 and m.probe_ids == []
        assert ledger.probes() == []


def test_newer_schema_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite"
    with L.Ledger.open(path):
        pass
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("INSERT INTO schema_version VALUES (99, 'future')")
    before = path.read_bytes()
    with pytest.raises(InputError, match="newer than this gpuhours"):
        L.Ledger.open(path)
    assert path.read_bytes() == before


@pytest.mark.parametrize("content", [b"hello, not a database" * 10, b"SQLite format 3\x00" + b"\xff" * 200])
def test_broken_file_is_an_input_error_and_untouched(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "broken.sqlite"
    path.write_bytes(content)
    with pytest.raises(InputError, match="ledger .*broken.sqlite"):
        L.Ledger.open(path)
    assert path.read_bytes() == content


def test_directory_and_missing_ledger(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory"):
        L.Ledger.open(tmp_path)
    with pytest.raises(InputError, match="does not exist"):
        L.Ledger.open(tmp_path / "none.sqlite", create=False)


def test_ledger_path_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(L.ENV_VAR, raising=False)
    assert L.ledger_path() == tmp_path / ".gpuhours" / "ledger.sqlite"
    monkeypatch.setenv(L.ENV_VAR, str(tmp_path / "env.sqlite"))
    assert L.ledger_path() == tmp_path / "env.sqlite"
    assert L.ledger_path(tmp_path / "given.sqlite") == tmp_path / "given.sqlite"


def test_a_failed_write_leaves_nothing(tmp_path: Path) -> None:
    with L.Ledger.open(tmp_path / "l.sqlite") as ledger:
        _add(ledger)
        with pytest.raises(sqlite3.IntegrityError):
            _add(ledger, status="half-written")  # violates the CHECK: the transaction rolls back
        assert len(ledger.measurements()) == 1


WRITER = textwrap.dedent("""
    import sys
    from gpuhours.track.ledger import Ledger
    path, tag, count, payload = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    with Ledger.open(path) as ledger:
        print("open", flush=True)
        for i in range(count):
            tps = float(i)
            ledger.add_measurement(
                kind="bench", status="ok", device_kind="cpu", device_key=tag,
                device_name=tag, model="tiny", setup={"i": i}, model_config={},
                environment={"hostname": tag},
                results={"tokens_per_s": tps, "i": i, "blob": "x" * payload})
""")


def _writer(path: Path, tag: str, count: int, payload: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(path), tag, str(count),
                             str(payload)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_two_processes_writing_at_once_both_land(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    writers = [_writer(path, tag, 40, 2000) for tag in ("a", "b")]
    for w in writers:
        _, err = w.communicate(timeout=120)
        assert w.returncode == 0, err
    with L.Ledger.open(path) as ledger:
        rows = ledger.measurements()
        assert ledger.integrity_ok()
    assert len(rows) == 80
    assert len({m.id for m in rows}) == 80
    for tag in ("a", "b"):
        assert sorted(m.results["i"] for m in rows if m.device_key == tag) == list(range(40))


def test_writer_killed_mid_write_leaves_the_ledger_consistent(tmp_path: Path) -> None:
    path = tmp_path / "killed.sqlite"
    w = _writer(path, "k", 100_000, 200_000)  # ~200 kB per row: each commit takes a while
    assert w.stdout is not None and w.stdout.readline().strip() == "open"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with closing(sqlite3.connect(path)) as db:
            if db.execute("SELECT COUNT(*) FROM measurements").fetchone()[0] >= 5:
                break
        time.sleep(0.02)
    os.kill(w.pid, signal.SIGKILL)
    w.communicate(timeout=30)
    assert w.returncode == -signal.SIGKILL
    with L.Ledger.open(path) as ledger:
        assert ledger.integrity_ok()
        rows = ledger.measurements()
        assert len(rows) >= 5
        for m in rows:  # every row is whole: columns and JSON agree, the payload is complete
            assert m.tokens_per_s == float(m.results["i"])
            assert len(m.results["blob"]) == 200_000
        assert sorted(m.results["i"] for m in rows) == list(range(len(rows)))
        _add(ledger)  # and it takes new writes


def test_export_json_and_csv(tmp_path: Path) -> None:
    with L.Ledger.open(tmp_path / "l.sqlite") as ledger:
        _add(ledger, tokens_per_s=10.0)
        _add(ledger, tokens_per_s=20.0)
        rows = list(reversed(ledger.measurements()))
    data = json.loads(to_json(rows))
    assert [d["tokens_per_s"] for d in data] == [10.0, 20.0]
    assert data[0]["environment"]["torch"] == "2.13.0"
    table = list(csv.DictReader(io.StringIO(to_csv(rows))))
    assert list(table[0]) == list(CSV_COLUMNS)
    assert table[1]["tokens_per_s"] == "20.0" and table[1]["micro_batch"] == "2"


def test_ledger_commands(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    with L.Ledger.open(path) as ledger:
        _add(ledger)
    runner = CliRunner()
    r = runner.invoke(app, ["ledger", "list", "--ledger", str(path), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)[0]["tokens_per_s"] == 1000.0
    r = runner.invoke(app, ["ledger", "list", "--ledger", str(path)])
    assert r.exit_code == 0 and "tiny" in r.stdout
    r = runner.invoke(app, ["ledger", "show", "1", "--ledger", str(path)])
    assert r.exit_code == 0 and "step_time_median_s: 0.128" in r.stdout
    r = runner.invoke(app, ["ledger", "export", "--ledger", str(path), "--format", "csv"])
    assert r.exit_code == 0 and r.stdout.startswith("id,created_utc")
    out = tmp_path / "ledger.json"
    r = runner.invoke(app, ["ledger", "export", "--ledger", str(path), "--output", str(out)])
    assert r.exit_code == 0 and json.loads(out.read_text())[0]["model"] == "tiny"


@pytest.mark.parametrize("args, message", [
    (["ledger", "show", "7"], "no measurement #7"),
    # the house error, not click's usage text (walk p9, minor)
    (["ledger", "show", "abc"], "error ID: expected a measurement id, a whole number, got 'abc'"),
    (["ledger", "export", "--format", "xml"], "expected json or csv"),
    (["ledger", "list", "--limit", "0"], "expected a positive number"),
])
def test_ledger_command_errors(tmp_path: Path, args: list[str], message: str) -> None:
    path = tmp_path / "l.sqlite"
    with L.Ledger.open(path):
        pass
    r = CliRunner().invoke(app, [*args, "--ledger", str(path)])
    assert r.exit_code == 2
    assert message in r.output
    assert "Traceback" not in r.output


def test_ledger_command_on_broken_or_missing_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.sqlite"
    broken.write_text("not a ledger")
    for path, message in ((broken, "is not an SQLite database"),
                          (tmp_path / "none.sqlite", "does not exist")):
        r = CliRunner().invoke(app, ["ledger", "list", "--ledger", str(path)])
        assert r.exit_code == 2, r.output
        assert message in r.output
    assert broken.read_text() == "not a ledger"


STALLED_WRITER = textwrap.dedent("""
    import contextlib, sys, time
    from gpuhours.track.ledger import Ledger
    original = Ledger.transaction

    @contextlib.contextmanager
    def stalling(self, busy_timeout_s=None):
        with original(self, busy_timeout_s) as db:
            yield db
            if db.execute("SELECT COUNT(*) FROM measurements").fetchone()[0] == 6:
                print("inside the sixth transaction, rows written, not committed", flush=True)
                time.sleep(120)

    Ledger.transaction = stalling
    with Ledger.open(sys.argv[1]) as ledger:
        for i in range(10):
            ledger.add_measurement(
                kind="bench", status="ok", device_kind="cpu", device_key="k", device_name="k",
                model="tiny", setup={}, model_config={}, environment={"hostname": "h"},
                results={"tokens_per_s": float(i), "i": i})
""")


def test_writer_killed_inside_a_transaction_loses_only_that_record(tmp_path: Path) -> None:
    path = tmp_path / "stalled.sqlite"
    w = subprocess.Popen([sys.executable, "-c", STALLED_WRITER, str(path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert w.stdout is not None
    line = w.stdout.readline()
    assert "inside the sixth transaction" in line, w.communicate(timeout=30)
    os.kill(w.pid, signal.SIGKILL)
    w.communicate(timeout=30)
    with L.Ledger.open(path) as ledger:  # the dead writer's lock and WAL are recovered
        assert ledger.integrity_ok()
        assert sorted(m.results["i"] for m in ledger.measurements()) == [0, 1, 2, 3, 4]
        _add(ledger)
        assert len(ledger.measurements()) == 6


def test_export_replaces_only_an_earlier_export(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    with L.Ledger.open(path) as ledger:
        _add(ledger)
    runner = CliRunner()
    plan = tmp_path / "plan.yaml"
    plan.write_text("project: x\n")
    for target in (path, plan):  # the ledger itself, a user's file: refused, left as they were
        before = target.read_bytes()
        r = runner.invoke(app, ["ledger", "export", "--ledger", str(path), "--output",
                                str(target)])
        assert r.exit_code == 2 and "is not a ledger export written by gpuhours" in r.output
        assert target.read_bytes() == before
    with L.Ledger.open(path) as ledger:  # the ledger still holds its measurement
        assert len(ledger.measurements()) == 1
    for fmt, name in (("json", "e.json"), ("csv", "e.csv")):
        out = tmp_path / name
        for _ in range(2):  # an earlier export of either format is replaced
            r = runner.invoke(app, ["ledger", "export", "--ledger", str(path), "--format", fmt,
                                    "--output", str(out)])
            assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "e.json").read_text())[0]["model"] == "tiny"
    folder = tmp_path / "a-folder"
    folder.mkdir()
    r = runner.invoke(app, ["ledger", "export", "--ledger", str(path), "--output", str(folder)])
    assert r.exit_code == 2 and "is a directory" in r.output
    typo = tmp_path / "exprots" / "e.json"  # a mistyped folder is an error, not a new folder
    r = runner.invoke(app, ["ledger", "export", "--ledger", str(path), "--output", str(typo)])
    assert r.exit_code == 2 and "does not exist" in r.output
    assert not typo.parent.exists()


def test_another_programs_database_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    other = tmp_path / "app.sqlite"
    with closing(sqlite3.connect(other)) as db:
        db.execute("CREATE TABLE foo (x INTEGER)")
        db.execute("INSERT INTO foo VALUES (1)")
        db.commit()
    before = other.read_bytes()
    with pytest.raises(InputError, match="SQLite database of something else .holding foo"):
        L.Ledger.open(other)
    assert other.read_bytes() == before  # no WAL switch, no tables added
    with closing(sqlite3.connect(other)) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert [r[0] for r in db.execute("SELECT name FROM sqlite_master")] == ["foo"]
    # a database of views only is another program's too
    views = tmp_path / "views.sqlite"
    with closing(sqlite3.connect(views)) as db:
        db.execute("CREATE VIEW v AS SELECT 1 AS x")
        db.commit()
    with pytest.raises(InputError, match="holding v;"):
        L.Ledger.open(views)
    # an empty database is adopted as a new ledger; a ledger opens again as before
    empty = tmp_path / "empty.sqlite"
    with closing(sqlite3.connect(empty)) as db:
        db.execute("PRAGMA user_version = 0")
        db.commit()
    with L.Ledger.open(empty) as ledger:
        _add(ledger)
    with L.Ledger.open(empty) as ledger:
        assert len(ledger.measurements()) == 1


def test_a_variant_of_a_model_is_labelled_with_its_overrides(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    with L.Ledger.open(path) as ledger:
        _add(ledger, model="qwen2-0.5b",
             setup={**SETUP, "config_overrides": {"num_hidden_layers": 2, "hidden_size": 128}})
        _add(ledger, model="qwen2-0.5b")
        variant, whole = list(reversed(ledger.measurements()))
    assert variant.model_label == "qwen2-0.5b (hidden_size=128, num_hidden_layers=2)"
    assert whole.model_label == "qwen2-0.5b"
    table = list(csv.DictReader(io.StringIO(to_csv([variant, whole]))))
    assert [t["config_overrides"] for t in table] == ["hidden_size=128 num_hidden_layers=2", ""]
    r = CliRunner().invoke(app, ["ledger", "list", "--ledger", str(path)])
    assert r.exit_code == 0 and "hidden_size=128" in r.stdout  # the label, wrapped in its cell
