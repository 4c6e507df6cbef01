"""COMPUTE_BUDGET.md: versions appended only when numbers change; notes and history kept."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from gpuhours.errors import InputError
from gpuhours.plan.budget import evaluate
from gpuhours.plan.load import load_plan
from gpuhours.report.living_doc import (
    HISTORY_BEGIN,
    NOTES_BEGIN,
    NOTES_END,
    update_living_document,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def write_plan(tmp_path: Path, epochs: int = 3, seeds: int = 3) -> Path:
    text = (EXAMPLES / "pixelis.yaml").read_text()
    text = text.replace("    epochs: 3\n    overheads: [curriculum]",
                        f"    epochs: {epochs}\n    overheads: [curriculum]")
    text = text.replace("seeds: 3", f"seeds: {seeds}")
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    return path


def run(plan: Path, day: date):
    b = evaluate(load_plan(plan))
    return b, update_living_document(b, plan.parent / "COMPUTE_BUDGET.md", plan.name, day)


def test_first_run_writes_version_1(tmp_path):
    b, up = run(write_plan(tmp_path), date(2026, 1, 1))
    assert up.written and up.version == "1.0.0"
    text = up.path.read_text()
    assert "- **v1.0.0** (2026-01-01): first budget from the plan" in text
    assert f"{b.total_gpu_hours:,.0f} GPU hours" in text


def test_unchanged_numbers_append_nothing(tmp_path):
    plan = write_plan(tmp_path)
    _, first = run(plan, date(2026, 1, 1))
    before = first.path.read_bytes()
    _, again = run(plan, date(2026, 2, 1))
    assert not again.written and again.version == "1.0.0"
    assert first.path.read_bytes() == before


def test_a_change_appends_a_version_saying_what_changed_and_keeps_the_past(tmp_path):
    plan = write_plan(tmp_path, epochs=3)
    b1, _ = run(plan, date(2026, 1, 1))
    doc = tmp_path / "COMPUTE_BUDGET.md"
    # the user writes notes, and the history's first line is what it was
    text = doc.read_text()
    first_entry = next(line for line in text.splitlines() if line.startswith("- **v1.0.0**"))
    notes = "We may get H100s in March.\n\n- ask about spot pricing"
    start, end = text.index(NOTES_BEGIN) + len(NOTES_BEGIN), text.index(NOTES_END)
    doc.write_text(text[:start] + "\n" + notes + "\n" + text[end:])

    write_plan(tmp_path, epochs=4)
    b2, up = run(plan, date(2026, 2, 1))
    assert up.written and up.version == "1.1.0"
    sft_before = next(r for r in b1.phases if r.name == "sft").gpu_hours_per_run
    sft_after = next(r for r in b2.phases if r.name == "sft").gpu_hours_per_run
    assert sft_after == pytest.approx(sft_before * 4 / 3, rel=0.01)
    text = doc.read_text()
    assert first_entry in text  # never rewritten
    assert (f"- **v1.1.0** (2026-02-01): sft {sft_before:,.1f} -> {sft_after:,.1f} GPU h: the "
            f"plan's settings for it changed") in text
    assert notes in text
    assert text.index(first_entry) < text.index("- **v1.1.0**") < text.index("<!-- gpuhours:state")


def test_a_formula_change_alone_is_a_version(tmp_path):
    plan = write_plan(tmp_path, seeds=3)
    run(plan, date(2026, 1, 1))
    write_plan(tmp_path, seeds=5)
    _, up = run(plan, date(2026, 1, 2))
    assert up.version == "1.1.0" and "seeds or contingency" in up.changes[0]


def test_a_foreign_file_is_left_untouched(tmp_path):
    plan = write_plan(tmp_path)
    doc = tmp_path / "COMPUTE_BUDGET.md"
    doc.write_text("# my own budget\n")
    with pytest.raises(InputError, match="was not written by gpuhours"):
        run(plan, date(2026, 1, 1))
    assert doc.read_text() == "# my own budget\n"


def test_history_markers_are_in_order(tmp_path):
    _, up = run(write_plan(tmp_path), date(2026, 1, 1))
    text = up.path.read_text()
    assert text.index(NOTES_BEGIN) < text.index(HISTORY_BEGIN)
