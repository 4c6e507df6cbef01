"""Ledger measurements as JSON (every field) or CSV (one flat row each, units in the headers)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from gpuhours.track.ledger import Measurement

#: CSV columns: the measurement's summary fields, then its setup; the full record is in JSON.
CSV_COLUMNS = (
    "id", "created_utc", "kind", "status", "device_kind", "device_key", "device_name", "hostname",
    "model", "method", "precision", "micro_batch", "seq_len", "grad_accum", "checkpointing",
    "compiled", "optimizer", "steps_timed", "step_time_median_s", "step_time_p90_s",
    "step_time_cv", "tokens_per_s", "model_flops_per_step", "peak_flops_per_s",
    "peak_flops_basis", "mfu", "peak_memory_bytes", "probe_ids", "config_overrides",
)


def flat_row(m: Measurement) -> dict[str, Any]:
    """One measurement as a flat dict with the CSV columns."""
    row: dict[str, Any] = {}
    for col in CSV_COLUMNS:
        if col == "probe_ids":
            row[col] = " ".join(str(i) for i in m.probe_ids)
        elif col == "config_overrides":  # the --set changes that made a variant of the model
            row[col] = " ".join(f"{k}={v}" for k, v in
                                (m.setup.get("config_overrides") or {}).items())
        elif hasattr(m, col):
            row[col] = getattr(m, col)
        elif col in m.setup:
            row[col] = m.setup[col]
        else:
            row[col] = m.results.get(col)
    return row


def is_export(head: bytes) -> bool:
    """Whether the start of a file is an earlier export: CSV whose header starts as ours,
    or a JSON list that is empty or whose first record has a measurement's keys."""
    text = head.decode("utf-8", errors="replace")
    if text.split("\n", 1)[0].rstrip("\r").startswith("id,created_utc,kind,status,"):
        return True  # this release's columns, or an earlier release's
    body = text.lstrip()
    if not body.startswith("["):
        return False
    rest = body[1:].lstrip()
    return rest.startswith("]") or (rest.startswith("{") and '"created_utc"' in rest
                                    and '"kind"' in rest)


def to_json(rows: list[Measurement]) -> str:
    return json.dumps([m.as_dict() for m in rows], indent=2, sort_keys=True, default=str) + "\n"


def to_csv(rows: list[Measurement]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(CSV_COLUMNS), lineterminator="\n")
    writer.writeheader()
    for m in rows:
        writer.writerow(flat_row(m))
    return buf.getvalue()
