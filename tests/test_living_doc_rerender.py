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


def test_numbers_that_moved_below_a_version_are_said_so(tmp_path: Path):
    """A phase that moved by less than a version records (0.5% or 0.05 GPU h) is rewritten at
    the same version, and the message says what moved instead of 'the numbers are the same'."""
    import json
    import re

    plan = tmp_path / "plan.yaml"
    shutil.copy(EXAMPLE, plan)
    doc = tmp_path / "BUDGET.md"
    _plan(plan, doc)
    text = doc.read_text()
    found = re.search(r"<!-- gpuhours:state (\{.*\}) -->", text, re.S)
    assert found
    state = json.loads(found.group(1))
    name, phase = next(iter(state["phases"].items()))
    phase["gpu_hours"] = round(phase["gpu_hours"] * 0.998, 3)  # 0.2%: below a version
    total = state["total_gpu_hours"]
    state["total_gpu_hours"] = round(total - 0.01, 3)
    older = text.replace(found.group(1), json.dumps(state)).replace(
        "## Hardware", "## Hardware (older layout)", 1)
    doc.write_text(older)
    out = " ".join(_plan(plan, doc).split())
    assert "moved a little" in out and name in out and "numbers are the same" not in out
    assert f"{state['total_gpu_hours']:,.1f} -> {total:,.1f} GPU h" in out
