"""Regenerate the generated blocks of docs/rl.md and docs/generation.md from the validation
harnesses (the hand-written prose around them stays), and the track records a plan's RL phase
and `gpuhours generation` print (src/gpuhours/catalog/data/track_record_{rl,generation-*}.json).
Run after any change to the estimate, the plan's RL model or the harnesses; the tests
test_the_doc_holds_the_current_table (tests/test_rl_validation.py), the generation report's
check and the records' currency tests fail until it is run.

    python scripts/regen_docs.py            # both
    python scripts/regen_docs.py rl         # docs/rl.md only
    python scripts/regen_docs.py generation # docs/generation.md only

docs/validation.md has its own generator, scripts/validate.py.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "scripts")]

from gpuhours.estimate.track_record import GENERATION_ENGINES, file_name  # noqa: E402
from gpuhours.files import atomic_write_text  # noqa: E402

RL_DOC = ROOT / "docs" / "rl.md"
GENERATION_DOC = ROOT / "docs" / "generation.md"
DATA = ROOT / "src" / "gpuhours" / "catalog" / "data"
#: what a plan's RL phase prints beside its step (estimate/track_record.py)
RL_RECORD = DATA / file_name("rl")
#: the generation report runs from its first line ("N published rows (...") to this heading
GENERATION_END = "\n### What remains off, and why"


def _indent(block: str) -> str:
    return "\n".join("  " + line if line else "" for line in block.split("\n"))


def replace_table_block(lines: list[str], new: str, name: str, until: str | None = None
                        ) -> list[str]:
    """`lines` with the generated block that starts at `new`'s first line (a table header,
    found exactly once) replaced by `new`: the old block runs while its lines are table lines
    of the same indent, plus as many trailing lines as `new` has, or up to the line before
    `until` (less blank lines)."""
    new_lines = new.split("\n")
    head = new_lines[0]
    found = [i for i, line in enumerate(lines) if line == head]
    if len(found) != 1:
        raise SystemExit(f"docs/rl.md, block {name}: its header is there {len(found)} times, "
                         f"expected once: {head[:80]!r}")
    i = found[0]
    prefix = head[: len(head) - len(head.lstrip())] + "|"
    j = i
    while j < len(lines) and lines[j].startswith(prefix):
        j += 1
    k = sum(line.startswith(prefix) for line in new_lines)
    trailing = new_lines[k:]
    end = j + len(trailing)
    if until is None and trailing:
        # the block's lines after its table replace as many old ones: refuse when those are
        # not the same kind of line (blank where blank, the same opening words), so prose
        # after the block is neither overwritten nor left behind silently
        old = lines[j:end]

        def shape(block: list[str]) -> list[str]:
            return [line.split(":")[0][:20] if line.strip() else "" for line in block]

        if shape(old) != shape(trailing):
            raise SystemExit(f"docs/rl.md, block {name}: the lines after its table changed "
                             f"shape ({shape(old)} -> {shape(trailing)}); edit the document "
                             "by hand around the block, then run this again")
    if until is not None:
        end = lines.index(until, j)
        while end > j and not lines[end - 1].strip():
            end -= 1
        while new_lines and not new_lines[-1].strip():
            new_lines.pop()
    print(f"docs/rl.md {name}: {j - i} table lines -> {k}")
    return lines[:i] + new_lines + lines[end:]


def regen_rl() -> None:
    from gpuhours_dev.validation import rl

    blocks: list[tuple[str, Callable[[], str], bool]] = [
        ("report", rl.report, False),
        ("inferred_mean", rl.inferred_mean_report, True),
        ("streamed_twin", rl.streamed_at_twin_mean_report, True),
        ("run_drift", rl.run_drift_report, True),
        ("update_implied", rl.update_implied_mean_report, True),
        ("easyr1", rl.easyr1_update_report, True),
        ("phase_split", rl.phase_split_report, True),
    ]
    lines = RL_DOC.read_text(encoding="utf-8").split("\n")
    for name, make, indented in blocks:
        block = make()
        lines = replace_table_block(lines, _indent(block) if indented else block, name,
                                    "What the rows say:" if name == "report" else None)
    atomic_write_text(RL_DOC, "\n".join(lines))
    record = rl.rl_track_record(date.today().isoformat())
    atomic_write_text(RL_RECORD, record.model_dump_json(indent=2) + "\n")
    print(f"{RL_RECORD.relative_to(ROOT)}: {record.within} of {record.runs} within 25%")


def regen_generation() -> None:
    from gpuhours_dev.validation import generation_published as gp

    text = GENERATION_DOC.read_text(encoding="utf-8")
    starts = [m.start() for m in re.finditer(r"\n\d+ published rows \(", text)]
    end = text.find(GENERATION_END)
    if len(starts) != 1 or end < 0 or end < starts[0]:
        raise SystemExit(f"{GENERATION_DOC}: expected one line starting 'N published rows (' "
                         f"before {GENERATION_END.strip()!r}; found {len(starts)}")
    res = gp.results()
    report = gp.report(res).rstrip("\n")
    atomic_write_text(GENERATION_DOC, text[: starts[0] + 1] + report + "\n" + text[end:])
    print(f"docs/generation.md: report replaced ({report.splitlines()[0][:60]}...)")
    today = date.today().isoformat()
    for engine in GENERATION_ENGINES:
        record = gp.generation_track_record(engine, today, res)
        path = DATA / file_name(f"generation-{engine}")
        atomic_write_text(path, record.model_dump_json(indent=2) + "\n")
        print(f"{path.relative_to(ROOT)}: {record.within} of {record.runs} within 25%")


def main(argv: list[str]) -> None:
    which = argv or ["rl", "generation"]
    unknown = set(which) - {"rl", "generation"}
    if unknown:
        raise SystemExit(f"unknown document {sorted(unknown)}: expected rl or generation")
    if "rl" in which:
        regen_rl()
    if "generation" in which:
        regen_generation()


if __name__ == "__main__":
    main(sys.argv[1:])
