"""The ledger's and the tracker's public API (gpuhours issue 10): the track, doctor and storage
modules use only public names of other modules (no `ledger._write()`, no `from x import _y`,
no `run._current`), and the public ledger transaction holds its promises under faults."""

from __future__ import annotations

import ast
import sqlite3
from pathlib import Path

import pytest

from gpuhours.track.ledger import Ledger

SRC = Path(__file__).resolve().parents[1] / "src" / "gpuhours"
PACKAGES = ("track", "doctor", "storage")
#: private names of the standard library that are the documented way to do something
ALLOWED = {"os._exit", "sys._getframe"}


def _reach_ins(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gpuhours"):
            own_package = node.module.rsplit(".", 1)[0] == f"gpuhours.{path.parent.name}"
            for alias in node.names:
                # a package's private module (storage._fs) is its own business; a private name
                # of another module is not
                if alias.name.startswith("_") and not (own_package and alias.name == "_fs"):
                    found.append(f"{path.name}:{node.lineno} from {node.module} import "
                                 f"{alias.name}")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                and not node.attr.startswith("__"):
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            text = f"{ast.unparse(owner)}.{node.attr}"
            if text not in ALLOWED:
                found.append(f"{path.name}:{node.lineno} {text}")
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_modules_use_only_public_names_of_other_modules(package: str) -> None:
    found = [r for p in sorted((SRC / package).glob("*.py")) for r in _reach_ins(p)]
    assert found == [], "private reach-ins:\n" + "\n".join(found)


def test_transaction_commits_whole_or_nothing_and_stays_usable(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "l.sqlite") as book:
        with book.transaction() as db:
            db.execute("INSERT INTO runs (created_utc, status, project, phase, name, hostname, "
                       "device_kind, device_name, config_json) VALUES ('t', 'running', 'p', "
                       "'a', 'n', 'h', 'cpu', 'x', '{}')")
        with pytest.raises(RuntimeError), book.transaction() as db:
            db.execute("UPDATE runs SET phase = 'changed'")
            raise RuntimeError("fails inside")
        assert [r["phase"] for r in book.query("SELECT phase FROM runs")] == ["a"]
        with book.transaction() as db:  # the connection is ready for the next one
            db.execute("UPDATE runs SET phase = 'b'")
        assert book.query("SELECT phase FROM runs WHERE id = ?", [1])[0]["phase"] == "b"


def test_a_refused_commit_rolls_back_and_leaves_the_connection_usable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A COMMIT refused by a full disk must not leave the transaction open (the next BEGIN would
    fail with 'cannot start a transaction within a transaction')."""
    real_connect = sqlite3.connect
    refuse = {"on": False}

    class RefusingCommit(sqlite3.Connection):
        def execute(self, sql: str, *args: object) -> sqlite3.Cursor:  # type: ignore[override]
            if refuse["on"] and sql == "COMMIT":
                raise sqlite3.OperationalError("database or disk is full")
            return super().execute(sql, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(sqlite3, "connect",
                        lambda *a, **k: real_connect(*a, factory=RefusingCommit, **k))
    with Ledger.open(tmp_path / "l.sqlite") as book:
        refuse["on"] = True
        with pytest.raises(sqlite3.OperationalError, match="disk is full"), \
                book.transaction() as db:
            db.execute("INSERT INTO runs (created_utc, status, project, phase, name, hostname, "
                       "device_kind, device_name, config_json) VALUES ('t', 'running', 'p', "
                       "'a', 'n', 'h', 'cpu', 'x', '{}')")
        refuse["on"] = False
        assert book.query("SELECT COUNT(*) AS n FROM runs")[0]["n"] == 0
        with book.transaction() as db:
            db.execute("DELETE FROM runs")


def test_hf_callback_uses_the_public_tracker_api() -> None:
    from gpuhours.track import loop

    public = {"start_tracking", "start_step", "end_step", "add_time", "add_save_bytes",
              "sync_device", "current_step", "count", "close", "run_id", "wait_written"}
    assert public <= set(dir(loop.TrackedRun)) | set(dir(loop))
    tree = ast.parse((SRC / "track" / "callbacks.py").read_text())
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Attribute) and n.value.attr == "run"}
    assert used <= public, used - public
