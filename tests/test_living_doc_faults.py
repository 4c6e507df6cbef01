"""The living document under faults (issue 12) and one document per project and plan (issue 11).

Each test here failed before: the document was written 0600, a read-only one overwritten, a
symlink replaced by a plain file, markers in the notes or a phase name corrupted it, concurrent
runs lost history entries, temporary files of killed writes stayed forever, a change of prices or
of the project's name left the cost table as it was, and two plans in one folder shared (and
rewrote) one document.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
import time
from datetime import date
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import InputError
from gpuhours.plan.budget import evaluate
from gpuhours.plan.load import load_plan
from gpuhours.report import living_doc
from gpuhours.report.living_doc import (
    HISTORY_BEGIN,
    HISTORY_END,
    NOTES_BEGIN,
    NOTES_END,
    default_document_path,
    read_previous,
    update_living_document,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
README_ORDER = ["pixelis.yaml", "qwen2-0.5b-experiments.yaml", "h100-phase1a.yaml"]


def write_plan(folder: Path, epochs: int = 3, name: str = "plan.yaml", project: str = "Pixelis",
               extra_phase: str = "") -> Path:
    text = (EXAMPLES / "pixelis.yaml").read_text()
    assert "    epochs: 3\n    overheads: [curriculum]" in text and "phases:\n" in text
    text = text.replace("    epochs: 3\n    overheads: [curriculum]",
                        f"    epochs: {epochs}\n    overheads: [curriculum]")
    text = text.replace("project: Pixelis", f"project: {project}")
    text = text.replace("phases:\n", "phases:\n" + extra_phase, 1)
    path = folder / name
    path.write_text(text)
    return path


def update(plan: Path, doc: Path | None = None, day: date = date(2026, 1, 1)):
    b = evaluate(load_plan(plan))
    return update_living_document(b, doc or plan.parent / "COMPUTE_BUDGET.md", plan.name, day)


def entries(doc: Path) -> list[str]:
    text = doc.read_text()
    block = text[text.rindex(HISTORY_BEGIN) + len(HISTORY_BEGIN):text.rindex(HISTORY_END)]
    return [line for line in block.splitlines() if line.strip()]


# --- the file itself -----------------------------------------------------------------------------

def test_a_new_document_gets_the_umask_default_not_0600(tmp_path):
    old = os.umask(0o022)
    try:
        up = update(write_plan(tmp_path))
    finally:
        os.umask(old)
    assert stat.S_IMODE(up.path.stat().st_mode) == 0o644


def test_an_updated_document_keeps_its_mode(tmp_path):
    plan = write_plan(tmp_path)
    up = update(plan)
    up.path.chmod(0o664)
    write_plan(tmp_path, epochs=4)
    assert update(plan).written
    assert stat.S_IMODE(up.path.stat().st_mode) == 0o664


def test_a_read_only_document_is_refused_and_left_as_it_was(tmp_path):
    plan = write_plan(tmp_path)
    doc = update(plan).path
    doc.chmod(0o444)
    before = doc.read_bytes()
    write_plan(tmp_path, epochs=4)
    with pytest.raises(InputError, match=r"read-only \(mode 0444\).*sft .* GPU h"):
        update(plan)
    assert doc.read_bytes() == before
    # unchanged numbers need no write, so a read-only document that is current is fine
    write_plan(tmp_path, epochs=3)
    assert not update(plan).written


def test_a_symlinked_document_is_written_through_to_its_target(tmp_path):
    plan = write_plan(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    target = shared / "budget.md"
    update(plan, doc=target)
    link = tmp_path / "COMPUTE_BUDGET.md"
    link.symlink_to(target)
    write_plan(tmp_path, epochs=4)
    up = update(plan, doc=link)
    assert up.written and up.version == "1.1.0"
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert "- **v1.1.0**" in target.read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_stale_temporary_files_of_killed_writes_are_removed_and_nothing_else(tmp_path):
    plan = write_plan(tmp_path)
    doc = update(plan).path
    old = time.time() - 2 * 3600
    stale = tmp_path / ".COMPUTE_BUDGET.md.k1ll3d.gpuhours-tmp"
    fresh = tmp_path / ".COMPUTE_BUDGET.md.wr1t1n.gpuhours-tmp"  # a write under way right now
    foreign = tmp_path / ".COMPUTE_BUDGET.md.backup"  # not a name gpuhours makes
    other = tmp_path / ".other.md.k1ll3d.gpuhours-tmp"  # another file's
    for p in (stale, fresh, foreign, other):
        p.write_text("x" * 1000)
    for p in (stale, foreign, other):
        os.utime(p, (old, old))
    write_plan(tmp_path, epochs=4)
    assert update(plan).written
    assert not stale.exists()
    assert fresh.exists() and foreign.exists() and other.exists()
    assert doc.exists()


# --- markers ---------------------------------------------------------------------------------------

def test_notes_that_quote_every_marker_are_kept_as_written(tmp_path):
    plan = write_plan(tmp_path)
    doc = update(plan).path
    text = doc.read_text()
    notes = ("How the file works:\n```\n" + "\n".join([NOTES_BEGIN, NOTES_END, HISTORY_BEGIN,
                                                      HISTORY_END]) +
             '\n<!-- gpuhours:state {"version": "9.9.9", "phases": {}} -->\n```\nend of notes')
    start, end = text.index(NOTES_BEGIN) + len(NOTES_BEGIN), text.index(NOTES_END)
    doc.write_text(text[:start] + "\n" + notes + "\n" + text[end:])
    for epochs in (4, 5):
        write_plan(tmp_path, epochs=epochs)
        up = update(plan)
        assert up.written and up.changes and up.changes[0].startswith("sft ")
    prev = read_previous(doc)
    assert prev is not None and prev.notes == notes
    assert [e[:10] for e in entries(doc)] == ["- **v1.0.0", "- **v1.1.0", "- **v1.2.0"]


def test_a_phase_named_like_a_marker_does_not_corrupt_the_document(tmp_path):
    weird = "  - {name: '<!-- gpuhours:notes:end -->', kind: fixed, gpu_hours: 5, runs: once}\n"
    plan = write_plan(tmp_path, extra_phase=weird)
    doc = update(plan).path
    text = doc.read_text()
    notes = "my notes\nsecond line"
    start, end = text.rindex(NOTES_BEGIN) + len(NOTES_BEGIN), text.rindex(NOTES_END)
    assert text.count(NOTES_END) == 1  # the phase's name is shown, not a second marker
    doc.write_text(text[:start] + "\n" + notes + "\n" + text[end:])
    write_plan(tmp_path, epochs=4, extra_phase=weird.replace("gpu_hours: 5", "gpu_hours: 9"))
    up = update(plan)
    assert up.written and any(c.startswith("&lt;!-- gpuhours:notes:end --&gt; 5.0 -> 9.0")
                              for c in [living_doc._neutral(x) for x in up.changes])
    prev = read_previous(doc)
    assert prev is not None and prev.notes == notes and len(prev.history) == 2
    assert doc.read_text().count(NOTES_END) == 1


# --- concurrency ---------------------------------------------------------------------------------

def test_runs_at_once_lose_no_history_entry(tmp_path, monkeypatch):
    plan = write_plan(tmp_path)
    update(plan)
    budgets = []
    for epochs in range(4, 10):
        write_plan(tmp_path, epochs=epochs)
        budgets.append(evaluate(load_plan(plan)))
    real_write = living_doc.atomic_write_text

    def slow_write(path, text):  # widen the window between reading the history and writing
        time.sleep(0.2)
        real_write(path, text)

    monkeypatch.setattr(living_doc, "atomic_write_text", slow_write)
    doc = tmp_path / "COMPUTE_BUDGET.md"
    errors: list[BaseException] = []

    def run(b):
        try:
            update_living_document(b, doc, plan.name, date(2026, 2, 1))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(b,)) for b in budgets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    found = entries(doc)
    assert len(found) == 1 + len(budgets), found
    assert [e.split("**")[1] for e in found] == [f"v1.{i}.0" for i in range(len(budgets) + 1)]


# --- what a change rewrites ----------------------------------------------------------------------

def test_a_change_of_catalog_prices_rewrites_the_cost_table(tmp_path):
    plan = write_plan(tmp_path)
    b = evaluate(load_plan(plan))
    doc = tmp_path / "COMPUTE_BUDGET.md"
    update_living_document(b, doc, plan.name, date(2026, 1, 1))
    first = b.costs[0]
    dearer = first.model_copy(update={"usd_per_gpu_hour": 2 * first.usd_per_gpu_hour,
                                      "on_demand_usd": 2 * first.on_demand_usd})
    b2 = b.model_copy(update={"costs": [dearer, *b.costs[1:]]})
    up = update_living_document(b2, doc, plan.name, date(2026, 2, 1))
    assert up.written and up.version == "1.1.0"
    assert up.changes[0].startswith(f"prices changed: {first.provider} ({first.kind}) "
                                    f"{first.instance}")
    assert living_doc.usd(dearer.on_demand_usd) in doc.read_text()


def test_a_change_of_the_plans_own_price_rewrites_the_cost_table(tmp_path):
    plan = write_plan(tmp_path)
    assert "  nodes: 1\n" in plan.read_text()
    text = plan.read_text().replace("  nodes: 1\n", "  nodes: 1\n  usd_per_gpu_hour: 2.0\n")
    plan.write_text(text)
    update(plan)
    plan.write_text(text.replace("usd_per_gpu_hour: 2.0", "usd_per_gpu_hour: 3.0"))
    up = update(plan, day=date(2026, 2, 1))
    assert up.written and "prices changed" in up.changes[0] and "$2.00 -> $3.00" in up.changes[0]
    assert "| $3.00 |" in up.path.read_text()


def test_a_new_project_name_rewrites_the_title_and_is_a_version(tmp_path):
    plan = write_plan(tmp_path)
    update(plan)
    write_plan(tmp_path, project="Pixelis v2")
    up = update(plan, day=date(2026, 2, 1))
    assert up.written and up.changes == ["project renamed 'Pixelis' -> 'Pixelis v2'"]
    assert up.path.read_text().startswith("# Compute budget: Pixelis v2\n")


# --- one document per project and plan --------------------------------------------------------------

def test_a_document_of_another_project_and_plan_is_refused(tmp_path):
    doc = update(write_plan(tmp_path)).path
    before = doc.read_bytes()
    other = tmp_path / "qwen.yaml"
    shutil.copy(EXAMPLES / "qwen2-0.5b-experiments.yaml", other)
    with pytest.raises(InputError, match=r"budget document of project 'Pixelis', plan plan\.yaml; "
                                         r"this is project 'Qwen2-0\.5B experiments', plan "
                                         r"qwen\.yaml.*--out"):
        update(other, doc=doc)
    assert doc.read_bytes() == before


def test_the_cli_refuses_another_plans_document_with_exit_code_2(tmp_path):
    doc = update(write_plan(tmp_path)).path
    other = tmp_path / "qwen.yaml"
    shutil.copy(EXAMPLES / "qwen2-0.5b-experiments.yaml", other)
    result = CliRunner().invoke(app, ["plan", str(other), "--out", str(doc)],
                                env={"COLUMNS": "300", "NO_COLOR": "1"})
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "'Pixelis'" in result.stderr and "'Qwen2-0.5B experiments'" in result.stderr


def test_three_plans_in_one_folder_in_the_readme_order_get_a_document_each(tmp_path):
    for name in README_ORDER:
        shutil.copy(EXAMPLES / name, tmp_path / name)
    docs = {}
    for day in (date(2026, 1, 1), date(2026, 1, 2)):
        for name in README_ORDER:
            plan = tmp_path / name
            b = evaluate(load_plan(plan))
            path = default_document_path(plan, b.project)
            up = update_living_document(b, path, str(plan), day)
            docs.setdefault(name, path)
            assert path == docs[name]
            assert up.written == (day == date(2026, 1, 1)), up.changes
    assert docs == {"pixelis.yaml": tmp_path / "COMPUTE_BUDGET.md",
                    "qwen2-0.5b-experiments.yaml": tmp_path / "qwen2-0.5b-experiments.budget.md",
                    "h100-phase1a.yaml": tmp_path / "h100-phase1a.budget.md"}
    for path in docs.values():
        assert len(entries(path)) == 1 and "removed" not in path.read_text()


def test_the_committed_example_document_stays_pixelis(tmp_path):
    """examples/COMPUTE_BUDGET.md was written before documents recorded their plan: it belongs
    to the plan its "Generated from" line names (the README's first command writes it)."""
    shutil.copy(EXAMPLES / "COMPUTE_BUDGET.md", tmp_path / "COMPUTE_BUDGET.md")
    for name in README_ORDER:
        shutil.copy(EXAMPLES / name, tmp_path / name)
    assert default_document_path(tmp_path / "pixelis.yaml", "Pixelis") == \
        tmp_path / "COMPUTE_BUDGET.md"
    assert default_document_path(tmp_path / "qwen2-0.5b-experiments.yaml",
                                 "Qwen2-0.5B experiments") == \
        tmp_path / "qwen2-0.5b-experiments.budget.md"


def test_a_renamed_plan_keeps_its_document(tmp_path):
    plan = write_plan(tmp_path, name="pixelis.yaml")
    update(plan)
    renamed = plan.rename(tmp_path / "pixelis-2026.yaml")
    assert default_document_path(renamed, "Pixelis") == tmp_path / "COMPUTE_BUDGET.md"
    up = update(renamed, day=date(2026, 2, 1))
    assert up.changes == ["now generated from pixelis-2026.yaml (was pixelis.yaml)"]
    # another plan of another project in the same folder gets its own
    assert default_document_path(tmp_path / "other.yaml", "Other") == \
        tmp_path / "other.budget.md"
