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


def _state(gpu_hours: float, gpus: int = 8, wall: float | None = None, digest: str = "a",
           spent: float | None = None, **extra) -> dict:
    phase = {"gpu_hours": gpu_hours, "gpus": gpus,
             "wall_hours": gpu_hours / gpus if wall is None else wall, "digest": digest,
             "basis": "formula", "spent": spent, "projected": None}
    return {"version": "1.2.0", "total_gpu_hours": gpu_hours, "phases": {"sft": phase}, **extra}


def test_what_a_version_records_beyond_the_gpu_hours() -> None:
    from gpuhours.report.living_doc import what_changed

    # 8 GPUs -> 1 at the same GPU hours: the wall clock is 8x; a version says so
    (line,) = what_changed(_state(5.6), _state(5.6, gpus=1))
    assert line == "sft: 8 -> 1 GPUs, wall clock 0.7 -> 5.6 h"
    # settings changed, GPU hours within the threshold: still recorded
    (line,) = what_changed(_state(100.0), _state(100.2, digest="b"))
    assert line == "sft: the plan's settings for it changed (100.2 GPU h)"
    # tracked actuals shown before and not found now
    (line,) = what_changed(_state(10.0, spent=0.4), _state(10.0))
    assert "the 0.40 GPU h of tracked runs shown before are not in this run's ledger" in line
    # nothing moved: nothing to record
    assert what_changed(_state(10.0), _state(10.0)) == []


def test_small_moves_add_up_to_a_version(tmp_path) -> None:
    from gpuhours.report.living_doc import what_changed

    # the last version had 5.2 GPU h; rewrites at that version kept moving it by < 0.5% each
    old = _state(5.47, versioned={"total_gpu_hours": 5.2,
                                  "phases": {"sft": {"gpu_hours": 5.2, "gpus": 8,
                                                     "wall_hours": 0.65}}})
    (line,) = what_changed(old, _state(5.5))
    assert line.startswith("sft 5.2 -> 5.5 GPU h")


def test_a_document_checked_out_with_crlf_is_the_same_document(tmp_path) -> None:
    plan = write_plan(tmp_path)
    _, first = run(plan, date(2026, 1, 1))
    crlf = first.path.read_bytes().replace(b"\n", b"\r\n")
    first.path.write_bytes(crlf)
    _, again = run(plan, date(2026, 2, 1))
    assert not again.written and again.changes == [] and again.version == "1.0.0"
    assert first.path.read_bytes() == crlf


def test_the_document_names_its_plan_the_same_from_any_folder(tmp_path) -> None:
    plan = write_plan(tmp_path)
    b = evaluate(load_plan(plan))
    doc = tmp_path / "COMPUTE_BUDGET.md"
    first = update_living_document(b, doc, str(plan), date(2026, 1, 1))  # absolute path
    assert "Generated from `plan.yaml`" in doc.read_text()
    again = update_living_document(b, doc, "plan.yaml", date(2026, 2, 1))
    assert first.written and not again.written


def test_no_calibrate_does_not_version_the_tracked_actuals_away(tmp_path) -> None:
    """With the ledger's tracked runs in the document, a run that does not look them up
    (--no-calibrate) and the next that does again record no version."""
    from gpuhours.track.ledger import Ledger
    from gpuhours.track.runs import StepRecord, add_steps, start_run

    plan = write_plan(tmp_path)
    loaded = load_plan(plan)
    doc = plan.parent / "COMPUTE_BUDGET.md"
    with Ledger.open(tmp_path / "l.sqlite") as book:
        rid = start_run(book, project=loaded.plan.project, phase="sft", name="x",
                        device_kind="cuda", device_name="NVIDIA A100-SXM4-40GB",
                        planned_steps=100, config={"num_gpus": 8})
        add_steps(book, rid, [StepRecord(step=i + 1, started_s=float(i), wall_s=10.0)
                              for i in range(10)])
        first = update_living_document(evaluate(loaded, ledger=book), doc, plan.name,
                                       date(2026, 1, 1))
        assert "GPU h spent over 10 steps" in doc.read_text()
        unread = update_living_document(evaluate(loaded, ledger=book, calibrate=False), doc,
                                        plan.name, date(2026, 1, 2))
        again = update_living_document(evaluate(loaded, ledger=book), doc, plan.name,
                                       date(2026, 1, 3))
    assert first.version == unread.version == again.version == "1.0.0"
    assert unread.changes == [] and again.changes == []
