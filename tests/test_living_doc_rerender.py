"""A living document whose numbers did not change but whose text this release renders otherwise
is rewritten at the same version, its notes and history kept; one already current is left alone."""

from __future__ import annotations

import shutil
from pathlib import Path

from typer.testing import CliRunner

from gpuhours.cli import app

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "h100-phase1a.yaml"


def _plan(plan: Path, doc: Path) -> str:
    r = runner.invoke(app, ["plan", str(plan), "--out", str(doc)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    return r.output


def test_an_older_layout_is_rewritten_at_the_same_version(tmp_path: Path):
    plan = tmp_path / "plan.yaml"
    shutil.copy(EXAMPLE, plan)
    doc = tmp_path / "BUDGET.md"
    _plan(plan, doc)
    fresh = doc.read_text()
    # an older release's body: one line of it laid out otherwise, the state comment the same;
    # and the user's notes, which must survive
    older = fresh.replace("## Hardware", "## Hardware (older layout)", 1)
    notes = "(Your notes: gpuhours keeps this section as you write it.)"
    assert notes in older
    older = older.replace(notes, "my own note", 1)
    assert older != fresh
    doc.write_text(older)
    out = _plan(plan, doc)
    assert "Rewrote" in out and "numbers are the same" in " ".join(out.split())
    now = doc.read_text()
    assert "## Hardware (older layout)" not in now and "## Hardware" in now
    version_line = next(line for line in fresh.splitlines() if line.startswith("**Version"))
    assert version_line in now  # same version and date: nothing was bumped
    assert now.count("- **v") == fresh.count("- **v")  # no history entry added
    assert "my own note" in now and notes not in now
    # and a current document is left alone
    out = _plan(plan, doc)
    assert "is current" in out and doc.read_text() == now
