"""Regenerate docs/validation.md: the estimator against published measurements."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from gpuhours.validation import all_comparisons
from gpuhours.validation.report import render_markdown, summary

DOC = Path(__file__).resolve().parent.parent / "docs" / "validation.md"


def main() -> None:
    comparisons = all_comparisons()
    text = render_markdown(comparisons)
    DOC.parent.mkdir(exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=DOC.parent, prefix=".validation.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, DOC)  # atomic
    for kind, (ok, n) in summary(comparisons).items():
        print(f"{kind}: {ok}/{n} within tolerance")
    print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
