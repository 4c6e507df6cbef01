"""Regenerate docs/validation.md: the estimator against published measurements."""

from __future__ import annotations

from datetime import date
from pathlib import Path

from gpuhours.estimate.track_record import file_name
from gpuhours.files import atomic_write_text
from gpuhours_dev.validation import all_comparisons
from gpuhours_dev.validation.at_scale import plain_track_record
from gpuhours_dev.validation.finetune import save_replays
from gpuhours_dev.validation.report import render_markdown, summary

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "validation.md"
#: what `estimate` prints beside a pretraining total (estimate/track_record.py)
TRACK_RECORD = ROOT / "src" / "gpuhours" / "catalog" / "data" / file_name("pretraining")


def main() -> None:
    comparisons = all_comparisons()
    save_replays()  # the allocator replays of variable-length runs (finetune.py)
    text = render_markdown(comparisons)
    atomic_write_text(DOC, text)
    record = plain_track_record(comparisons, date.today().isoformat())
    atomic_write_text(TRACK_RECORD, record.model_dump_json(indent=2) + "\n")
    for kind, (ok, n) in summary(comparisons).items():
        print(f"{kind}: {ok}/{n} within tolerance")
    print(f"wrote {DOC} and {TRACK_RECORD}")


if __name__ == "__main__":
    main()
