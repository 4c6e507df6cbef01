"""COMPUTE_BUDGET.md, the living budget document.

The body is regenerated from the plan each time. Two parts are the user's and the past's, and
are carried over byte for byte: the notes section, and the version history, to which a run only
ever appends (one entry when some number changed, none otherwise). The numbers of the last
version are kept in a comment at the end of the file, so that the next run can say what changed.
Writes are atomic (a temporary file in the same folder, fsync, rename).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from gpuhours.errors import InputError
from gpuhours.files import atomic_write_text
from gpuhours.plan.results import Budget
from gpuhours.report.units import usd

NOTES_BEGIN, NOTES_END = "<!-- gpuhours:notes:begin -->", "<!-- gpuhours:notes:end -->"
HISTORY_BEGIN, HISTORY_END = "<!-- gpuhours:history:begin -->", "<!-- gpuhours:history:end -->"
STATE_RE = re.compile(r"<!-- gpuhours:state (\{.*\}) -->\s*\Z", re.S)
DEFAULT_NOTES = "(Your notes: gpuhours keeps this section as you write it.)"
#: a phase's GPU hours "changed" when they moved by more than this share or 0.05 h
RELATIVE_CHANGE = 0.005


@dataclass(frozen=True)
class Previous:
    notes: str
    history: list[str]
    state: dict[str, Any]


def _between(text: str, begin: str, end: str) -> str | None:
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        return None
    return text[i + len(begin):j]


def read_previous(path: Path) -> Previous | None:
    """The carried-over parts of an existing document, or None when there is none."""
    if not path.exists():
        return None
    text = path.read_text(encoding="utf-8")
    notes = _between(text, NOTES_BEGIN, NOTES_END)
    history = _between(text, HISTORY_BEGIN, HISTORY_END)
    state = STATE_RE.search(text)
    if notes is None or history is None or state is None:
        raise InputError(str(path), "exists but was not written by gpuhours (its notes, history "
                                    "or state markers are missing), so it is left untouched.",
                         "Move it aside or pass --out to write elsewhere.")
    try:
        parsed = json.loads(state.group(1))
    except json.JSONDecodeError as e:
        raise InputError(str(path), f"its state comment is not valid JSON ({e.msg}).",
                         "Restore it from version control, or move the file aside.") from None
    entries = [line for line in history.strip("\n").split("\n") if line.strip()]
    return Previous(notes=notes.strip("\n"), history=entries, state=parsed)


def state_of(b: Budget, version: str) -> dict[str, Any]:
    return {
        "version": version,
        "total_gpu_hours": round(b.total_gpu_hours, 3),
        "phases": {r.name: {"gpu_hours": round(r.gpu_hours_per_run, 3),
                            "digest": r.config_digest,
                            "basis": r.basis.split(":")[0],
                            "spent": None if r.actual is None else round(
                                r.actual.gpu_hours_spent, 3),
                            "projected": None if r.actual is None or
                            r.actual.projected_gpu_hours is None else round(
                                r.actual.projected_gpu_hours, 3)} for r in b.phases},
    }


def _moved(old: float, new: float) -> bool:
    return abs(new - old) > max(0.05, RELATIVE_CHANGE * max(abs(old), abs(new)))


def what_changed(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Sentences naming each phase whose numbers changed, and why."""
    out = []
    old_phases, new_phases = old.get("phases", {}), new["phases"]
    for name, now in new_phases.items():
        before = old_phases.get(name)
        if before is None:
            out.append(f"{name} added: {now['gpu_hours']:,.1f} GPU h")
            continue
        if now.get("spent") is not None and before.get("spent") != now["spent"]:
            projected = now.get("projected")
            tail = (f", projected {projected:,.1f} against {now['gpu_hours']:,.1f} budgeted"
                    if projected is not None else "")
            out.append(f"{name}: {now['spent']:,.2f} GPU h spent in tracked runs{tail}")
        if not _moved(before["gpu_hours"], now["gpu_hours"]):
            continue
        if before.get("digest") != now["digest"]:
            why = "the plan's settings for it changed"
        elif before.get("basis") != now["basis"]:
            why = f"basis {before.get('basis')} -> {now['basis']}"
            if now["basis"] == "measured":
                why = "efficiency measured"
        else:
            why = "the estimator changed"
        out.append(f"{name} {before['gpu_hours']:,.1f} -> {now['gpu_hours']:,.1f} GPU h: {why}")
    for name in old_phases:
        if name not in new_phases:
            out.append(f"{name} removed")
    if not out and _moved(float(old.get("total_gpu_hours", 0.0)), new["total_gpu_hours"]):
        out.append("the budget formula changed (seeds or contingency)")
    return out


def _bump(version: str) -> str:
    major, minor, _ = (int(x) for x in version.split("."))
    return f"{major}.{minor + 1}.0"


def render(b: Budget, plan_path: str, version: str, day: date, notes: str,
           history: list[str], state: dict[str, Any]) -> str:
    lines = [
        f"# Compute budget: {b.project}",
        "",
        f"<!-- written by `gpuhours plan {plan_path}`; regenerated on every run except the notes "
        f"section and the version history, which are kept -->",
        "",
        f"**Version {version}** ({day.isoformat()}). Generated from `{plan_path}`.",
        "",
        "## Executive summary",
        "",
        f"- **{b.total_gpu_hours:,.0f} GPU hours** on {b.gpu} ({b.seeds} seed(s), "
        f"{b.contingency_percent:g}% contingency included).",
        f"- Wall clock: {b.wall_clock_hours:,.0f} h ({b.wall_clock_basis}).",
    ]
    if b.costs:
        cheapest = min((c for c in b.costs if c.on_demand_usd is not None),
                       key=lambda c: c.on_demand_usd or 0, default=None)
        if cheapest is not None:
            lines.append(f"- Cheapest on-demand price in the catalog: {usd(cheapest.on_demand_usd)}"
                         f" ({cheapest.provider}, {cheapest.instance}, as of {cheapest.as_of}).")
    biggest = max(b.phases, key=lambda r: r.gpu_hours_per_run)
    lines.append(f"- Largest phase per run: {biggest.name}, {biggest.gpu_hours_per_run:,.1f} GPU h"
                 f", bound by {biggest.bottleneck}.")
    lines.append(f"- {len(b.warnings)} warning(s) about the plan's assumptions (below).")
    lines += ["", "## Hardware", "", f"- {b.num_gpus} x {b.gpu} (plan: `hardware`).", "",
              "## Phases", ""]
    lines += ["| phase | kind | runs | GPU h per run | wall h per run | GPUs | bottleneck |",
              "|---|---|---|---|---|---|---|"]
    for r in b.phases:
        lines.append(f"| {r.name} | {r.kind} | {r.runs.replace('_', ' ')} | "
                     f"{r.gpu_hours_per_run:,.1f} | {r.wall_hours_per_run:,.1f} | {r.gpus} | "
                     f"{r.bottleneck} |")
    for r in b.phases:
        where = f" (plan line {r.line})" if r.line else ""
        lines += ["", f"### {r.name}{where}", "",
                  f"- Setup: {', '.join(f'{k} {v}' for k, v in r.setup.items()) or '-'}",
                  f"- Formula: {r.formula}", f"- Basis: {r.basis}"]
        lines += [f"- Storage, {k}: {f.value / 1e9:,.2f} GB ({f.basis}: {f.source})"
                  for k, f in r.storage.items()]
        if r.actual is not None:
            from gpuhours.report.budget_terminal import _actual_text

            lines.append(f"- Actual: {_actual_text(r)}")
        lines += [f"- Check: {c}" for c in r.checks]
        lines += [f"- Warning: {w}" for w in r.warnings]
    lines += ["", "## Budget", "", f"{b.formula}", ""]
    for name, g in b.grids.items():
        lines += [f"Grid {name}: makespan {g.makespan_hours:,.1f} h on {g.schedule_gpus} GPU(s), "
                  f"{g.days:,.1f} days at {g.hours_per_day:g} h/day; the essential set (priority "
                  f"<= {g.reduced_priority}): {g.reduced_gpu_hours:,.1f} GPU h, "
                  f"{g.reduced_days:,.1f} days.", ""]
    if b.storage_total is not None:
        lines += ["## Storage", "", f"{b.storage_total.value / 1e9:,.1f} GB on disk "
                  f"({b.storage_total.basis}: {b.storage_total.source}).", ""]
    lines += ["## Cost", ""]
    if b.costs:
        lines += ["| provider | instance | $/GPU-h | on-demand | spot $/GPU-h | spot | as of |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {c.provider} ({c.kind}) | {c.instance} | {usd(c.usd_per_gpu_hour)} | "
                  f"{usd(c.on_demand_usd)} | {usd(c.spot_usd_per_gpu_hour)} | {usd(c.spot_usd)} | "
                  f"{c.as_of} |" for c in b.costs]
    else:
        lines.append(f"No catalog price for {b.gpu}.")
    if b.electricity_kwh is not None:
        money = f", {usd(b.electricity_usd)}" if b.electricity_usd is not None else ""
        lines += ["", f"Electricity: {b.electricity_kwh:,.0f} kWh{money} ({b.electricity_basis})."]
    lines += ["", "## Warnings about the plan's assumptions", ""]
    lines += [f"- {w}" for w in b.warnings] or ["- none"]
    lines += ["", "## Assumptions used", ""] + [f"- {a}" for a in b.assumptions]
    lines += ["", "## Notes", "", NOTES_BEGIN, notes, NOTES_END, "",
              "## Version history", "", HISTORY_BEGIN, *history, HISTORY_END, "",
              f"<!-- gpuhours:state {json.dumps(state, sort_keys=True)} -->", ""]
    return "\n".join(lines)


@dataclass(frozen=True)
class DocUpdate:
    path: Path
    version: str
    changes: list[str]
    written: bool


def update_living_document(b: Budget, path: Path, plan_path: str,
                           today: date | None = None) -> DocUpdate:
    """Write or update COMPUTE_BUDGET.md; append a history entry only when numbers changed."""
    day = today or date.today()
    prev = read_previous(path)
    if prev is None:
        version = "1.0.0"
        state = state_of(b, version)
        entry = (f"- **v{version}** ({day.isoformat()}): first budget from the plan: "
                 f"{b.total_gpu_hours:,.1f} GPU h.")
        atomic_write_text(path, render(b, plan_path, version, day, DEFAULT_NOTES, [entry], state))
        return DocUpdate(path, version, ["first budget"], True)
    old_version = str(prev.state.get("version", "1.0.0"))
    candidate = state_of(b, old_version)
    changes = what_changed(prev.state, candidate)
    if not changes:
        return DocUpdate(path, old_version, [], False)
    version = _bump(old_version)
    state = state_of(b, version)
    total_before = float(prev.state.get("total_gpu_hours", 0.0))
    entry = (f"- **v{version}** ({day.isoformat()}): " + "; ".join(changes) +
             f". Total {total_before:,.1f} -> {b.total_gpu_hours:,.1f} GPU h.")
    atomic_write_text(path, render(b, plan_path, version, day, prev.notes, [*prev.history, entry],
                              state))
    return DocUpdate(path, version, changes, True)
