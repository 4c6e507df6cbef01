"""Predicted against measured saving, per fix, for the slow-training example.

For each repetition: run the example as written (tracked), ask the doctor what each fix is worth
(library call, the same as `gpuhours doctor RUN`), then run it again with each fix alone (the
setting the doctor named: its num_workers, packing, its save interval) and measure the saving as
the difference of the two runs' total step wall time (measured, ledger). The table goes to
docs/doctor.md between the measured-table markers (atomic write), and to stdout.

    python examples/slow_training/measure.py --reps 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import train  # noqa: E402

from gpuhours.doctor.diagnose import diagnose, view_from_ledger  # noqa: E402
from gpuhours.track.ledger import Ledger  # noqa: E402
from gpuhours.track.runs import run_steps  # noqa: E402

DOC = Path(__file__).resolve().parents[2] / "docs" / "doctor.md"
BEGIN, END = "<!-- measured-table -->", "<!-- /measured-table -->"


def total_s(ledger: str, run_id: int) -> float:
    with Ledger.open(ledger) as book:
        return sum(s.wall_s for s in run_steps(book, run_id))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--docs", type=int, default=240)
    ap.add_argument("--no-doc", action="store_true", help="print only; leave docs/ alone")
    a = ap.parse_args()
    ledger = str(Path(tempfile.mkdtemp(prefix="doctor_measure_")) / "ledger.sqlite")
    rows: dict[str, dict[str, list[float]]] = {}
    order: list[list[str]] = []
    base_totals: list[float] = []
    for rep in range(a.reps):
        base = train.train(ledger, a.docs, 0, False, train.SAVE_EVERY, phase="baseline")
        base_s = total_s(ledger, base)
        base_totals.append(base_s)
        with Ledger.open(ledger) as book:
            d = diagnose(view_from_ledger(book, base, None, None, None))
        order.append([f.rule for f in d.findings])
        for f in d.findings:
            ch = f.change
            fixed = train.train(ledger, a.docs, int(ch.get("num_workers", 0)),
                                bool(ch.get("packing", False)),
                                int(ch.get("save_steps", train.SAVE_EVERY)), phase=f.rule)
            r = rows.setdefault(f"{f.rule} ({', '.join(f'{k}={v}' for k, v in ch.items())})",
                                {"pred": [], "meas": []})
            r["pred"].append(f.saved_s_per_step.value * d.planned_steps)
            r["meas"].append(base_s - total_s(ledger, fixed))
        print(f"rep {rep + 1}: baseline {base_s:.2f} s; doctor's order {order[-1]}", flush=True)
    lines = [f"Measured on {os.cpu_count()} CPU cores, torch threads 1, {a.docs} documents, "
             f"{a.reps} repetitions; baseline run {statistics.mean(base_totals):.2f} s of step "
             f"wall time (range {min(base_totals):.2f}-{max(base_totals):.2f}). Doctor's ranking "
             f"in each repetition: {'; '.join(' > '.join(o) for o in order)}.", "",
             "| fix (setting the doctor named) | predicted saving, s | measured saving, s "
             "(range) | predicted / measured | within 30% |", "|---|---|---|---|---|"]
    for name, r in rows.items():
        p, m = statistics.mean(r["pred"]), statistics.mean(r["meas"])
        ratio = p / m if m else float("inf")
        lines.append(f"| {name} | {p:.2f} (range {min(r['pred']):.2f}-{max(r['pred']):.2f}) | "
                     f"{m:.2f} ({min(r['meas']):.2f}-{max(r['meas']):.2f}) | {ratio:.2f} | "
                     f"{'yes' if abs(ratio - 1) <= 0.3 else 'NO'} |")
    ranked = sorted(rows, key=lambda k: -statistics.mean(rows[k]["meas"]))
    lines += ["", f"Ranked by measured saving: {' > '.join(k.split(' ')[0] for k in ranked)}."]
    table = "\n".join(lines)
    print(table)
    if not a.no_doc:
        text = DOC.read_text()
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        tmp = DOC.with_suffix(".md.tmp")
        tmp.write_text(f"{head}{BEGIN}\n{table}\n{END}{tail}")
        tmp.replace(DOC)


if __name__ == "__main__":
    main()
