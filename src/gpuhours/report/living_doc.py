"""COMPUTE_BUDGET.md, the living budget document.

The body is regenerated from the plan each time. Two parts are the user's and the past's, and
are carried over byte for byte: the notes section, and the version history, to which a run only
ever appends (one entry when something changed: a phase's numbers, the budget formula, the
catalog's prices, the project's name or plan file; none otherwise). The numbers of the last
version, the project and the plan file are kept in a comment at the end of the file, so that the
next run can say what changed, and so that a document is never taken over by another project's
plan (`default_document_path` gives each plan its own).

Under faults: writes are atomic (gpuhours.files: a temporary file in the same folder, fsync,
rename; the file's mode kept; a symlink written through to its target; a read-only file
refused); runs that update documents in one folder at once take turns (an exclusive `flock` on
the folder, so that no history entry is lost and no lock file is left beside the document); text
from the plan (a phase named like a marker comment) is neutralised in the regenerated parts, and
the markers are found from the end of the file, so notes that quote them are kept as written.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path, PurePosixPath
from typing import Any

from gpuhours.errors import InputError
from gpuhours.files import atomic_write_text, read_user_text
from gpuhours.plan.results import Budget, CostLine
from gpuhours.report.units import usd

NOTES_BEGIN, NOTES_END = "<!-- gpuhours:notes:begin -->", "<!-- gpuhours:notes:end -->"
HISTORY_BEGIN, HISTORY_END = "<!-- gpuhours:history:begin -->", "<!-- gpuhours:history:end -->"
STATE_PREFIX = "<!-- gpuhours:state "
STATE_RE = re.compile(r"<!-- gpuhours:state (\{.*\}) -->\s*\Z", re.S)
DEFAULT_NOTES = "(Your notes: gpuhours keeps this section as you write it.)"
#: the document of the first plan in a folder; the others get `<plan stem>.budget.md`
DOCUMENT_NAME = "COMPUTE_BUDGET.md"
PLAN_DOCUMENT_SUFFIX = ".budget.md"
#: a phase's GPU hours "changed" when they moved by more than this share or 0.05 h
RELATIVE_CHANGE = 0.005
#: far above any real document (the examples' are ~10 KB), far below what would exhaust memory
MAX_DOCUMENT_BYTES = 64 * 2**20
#: how long a run waits for another one writing documents in the same folder
LOCK_WAIT_S = 60.0
_VERSION_RE = re.compile(r"\d+\.\d+\.\d+")
_TITLE_RE = re.compile(r"\A# Compute budget: (.*)$", re.M)
_GENERATED_RE = re.compile(r"Generated from `([^`\n]*)`")


@dataclass(frozen=True)
class Owner:
    """Whose document it is: the project's name and the plan file (relative to the document's
    folder, '/'-separated). `legacy`: read from the title and the "Generated from" line of a
    document written before the state recorded them (the plan is then a file name only)."""

    project: str | None
    plan: str | None
    legacy: bool = False


@dataclass(frozen=True)
class Previous:
    notes: str
    history: list[str]
    state: dict[str, Any]
    owner: Owner
    text: str


def _neutral(text: str) -> str:
    """Plan text that cannot open or close an HTML comment (so never forms a marker)."""
    return text.replace("<!--", "&lt;!--").replace("-->", "--&gt;")


def _state_error(path: Path, why: str) -> InputError:
    return InputError(str(path), f"its state comment (the last line) {why}.",
                      "Restore it from version control, or move the file aside.")


def _parse(text: str, path: Path) -> Previous:
    """The carried-over parts of a document's text. Markers are searched from the end: the
    state is the last line, the history the last marked block before it, the notes end at the
    last end marker before the history and begin at the first begin marker, so notes may quote
    any marker."""
    at = text.rfind(STATE_PREFIX)
    state_match = STATE_RE.match(text, at) if at >= 0 else None
    hist_end = text.rfind(HISTORY_END, 0, at) if state_match else -1
    hist_begin = text.rfind(HISTORY_BEGIN, 0, hist_end) if hist_end >= 0 else -1
    notes_end = text.rfind(NOTES_END, 0, hist_begin) if hist_begin >= 0 else -1
    notes_begin = text.find(NOTES_BEGIN, 0, notes_end) if notes_end >= 0 else -1
    if state_match is None or notes_begin < 0:
        raise InputError(str(path), "exists but was not written by gpuhours (its notes, history "
                                    "or state markers are missing), so it is left untouched.",
                         "Move it aside or pass --out to write elsewhere.")
    try:
        state = json.loads(state_match.group(1))
    except json.JSONDecodeError as e:
        raise _state_error(path, f"is not valid JSON ({e.msg})") from None
    phases = state.get("phases", {}) if isinstance(state, dict) else None
    if not isinstance(phases, dict) or not all(
            isinstance(p, dict) and isinstance(p.get("gpu_hours"), int | float)
            for p in phases.values()):
        raise _state_error(path, "is not what gpuhours writes (no phases with GPU hours)")
    if not _VERSION_RE.fullmatch(str(state.get("version", "1.0.0"))):
        raise _state_error(path, f"has a version {state.get('version')!r}, not like 1.2.0")
    history = text[hist_begin + len(HISTORY_BEGIN):hist_end]
    notes = text[notes_begin + len(NOTES_BEGIN):notes_end]
    if "project" in state or "plan" in state:
        owner = Owner(state.get("project"), state.get("plan"))
    else:  # written before the state said whose it is
        title, generated = _TITLE_RE.search(text), _GENERATED_RE.search(text)
        owner = Owner(title.group(1).strip() if title else None,
                      PurePosixPath(generated.group(1)).name if generated else None, legacy=True)
    entries = [line for line in history.strip("\n").split("\n") if line.strip()]
    return Previous(notes=notes.strip("\n"), history=entries, state=state, owner=owner, text=text)


def read_previous(path: Path) -> Previous | None:
    """The carried-over parts of an existing document, or None when there is none."""
    try:
        text = read_user_text(path, str(path), MAX_DOCUMENT_BYTES, "budget document")
    except FileNotFoundError:
        return None
    # a checkout with CRLF line endings (git's autocrlf) is the same document
    return _parse(text.replace("\r\n", "\n"), Path(path))


def plan_reference(plan_path: str | Path, document: Path) -> str:
    """The plan file as the document records it: relative to the document's folder.

    `plan_path` is a path from the working directory (as given on the command line) or, when
    no such file exists, from the document's folder."""
    folder = os.path.dirname(os.path.realpath(document))
    plan = os.path.realpath(plan_path if os.path.exists(plan_path) else
                            os.path.join(folder, plan_path))
    try:
        return PurePosixPath(Path(os.path.relpath(plan, folder))).as_posix()
    except ValueError:  # another drive (Windows)
        return Path(plan).as_posix()


def _same_plan(owner: Owner, reference: str) -> bool:
    if owner.plan is None:
        return False
    if owner.legacy:
        return owner.plan == PurePosixPath(reference).name
    return owner.plan == reference


def _belongs_to(prev: Previous, document: Path, plan_path: Path, project: str) -> bool:
    """Whether `plan_path` (of `project`) may take `document` as its default document."""
    if _same_plan(prev.owner, plan_reference(plan_path, document)):
        return True
    if prev.owner.plan is None:  # a legacy document without a "Generated from" line
        return prev.owner.project == project
    # the plan it records is gone: this plan of the same project replaced (renamed) it
    recorded = document.parent / prev.owner.plan
    return prev.owner.project == project and not recorded.exists()


def default_document_path(plan_path: Path, project: str) -> Path:
    """Where `gpuhours plan PLAN` writes its living document when no --out is given.

    The rule, beside the plan file, first that applies:

    1. `<plan stem>.budget.md` if it exists (this plan's own document, from an earlier run);
    2. `COMPUTE_BUDGET.md` if it does not exist, or belongs to this plan: it records this plan
       file; or the plan file it records is gone and its project is `project` (the plan was
       renamed); or it is not a gpuhours document, or is a damaged one (then writing to it
       fails with the reason, and the file is left as it is);
    3. otherwise `<plan stem>.budget.md` (COMPUTE_BUDGET.md is another plan's).

    So the first plan run in a folder keeps COMPUTE_BUDGET.md, and every other plan there gets
    a document named after its file: examples/pixelis.yaml writes examples/COMPUTE_BUDGET.md,
    examples/qwen2-0.5b-experiments.yaml writes examples/qwen2-0.5b-experiments.budget.md.
    A document written before documents recorded their plan belongs to the plan named in its
    "Generated from" line (compared by file name). `--out PATH` chooses any other path; a
    document of another project and plan is refused there (update_living_document)."""
    plan_path = Path(plan_path)
    own = plan_path.with_name(plan_path.stem + PLAN_DOCUMENT_SUFFIX)
    if own.exists() or own.is_symlink():
        return own
    shared = plan_path.with_name(DOCUMENT_NAME)
    try:
        prev = read_previous(shared)
    except InputError:
        return shared
    if prev is None or _belongs_to(prev, shared, plan_path, project):
        return shared
    return own


def state_of(b: Budget, version: str, plan: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "version": version,
        "project": b.project,
        "total_gpu_hours": round(b.total_gpu_hours, 3),
        "phases": {r.name: {"gpu_hours": round(r.gpu_hours_per_run, 3),
                            "gpus": r.gpus,
                            "wall_hours": round(r.wall_hours_per_run, 3),
                            "digest": r.config_digest,
                            "basis": r.basis.split(":")[0],
                            "spent": None if r.actual is None else round(
                                r.actual.gpu_hours_spent, 3),
                            "projected": None if r.actual is None or
                            r.actual.projected_gpu_hours is None else round(
                                r.actual.projected_gpu_hours, 3),
                            **({"budgeted": round(r.actual.budgeted_gpu_hours, 3)}
                               if r.actual is not None
                               and r.actual.budgeted_gpu_hours is not None
                               and round(r.actual.budgeted_gpu_hours, 3)
                               != round(r.gpu_hours_per_run, 3) else {})}
                   for r in b.phases},
    }
    if b.micro_benchmarks:
        out["micro_benchmarks"] = {
            str(m.ledger_id): {"device": m.device, "date": m.measured_utc[:10],
                               "phases": sorted({u.split(":")[0] for u in m.used_for})}
            for m in b.micro_benchmarks}
    if plan is not None:
        out["plan"] = plan
    if not b.actuals_looked_up:
        out["actuals_looked_up"] = False
    return out


def _keep_unread_actuals(state: dict[str, Any], previous: dict[str, Any]) -> dict[str, Any]:
    """A state whose tracked runs were not looked up (--no-calibrate, no ledger) keeps the
    previous state's actuals: nothing is known to have changed about them."""
    if state.get("actuals_looked_up", True):
        return state
    old = previous.get("phases", {})
    phases = {n: {**p, **{k: old[n][k] for k in ("spent", "projected", "budgeted")
                          if n in old and k in old[n]}}
              for n, p in state["phases"].items()}
    return {**state, "phases": phases}


def _moved(old: float, new: float) -> bool:
    return abs(new - old) > max(0.05, RELATIVE_CHANGE * max(abs(old), abs(new)))


def versioned_baseline(state: dict[str, Any]) -> dict[str, Any]:
    """The numbers of a document's last version: what a rewrite at the same version (numbers
    that moved less than a version records) keeps as `versioned`, else the state's own. Changes
    are measured from it, so that many small moves add up to a version instead of drifting
    past the history unrecorded."""
    kept = state.get("versioned")
    if isinstance(kept, dict) and isinstance(kept.get("phases"), dict):
        return kept
    return {"total_gpu_hours": state.get("total_gpu_hours", 0.0),
            "phases": {n: {k: p.get(k) for k in ("gpu_hours", "gpus", "wall_hours")}
                       for n, p in state.get("phases", {}).items()}}


def _digest_scheme(fingerprint: Any) -> str:
    """The scheme of a phase's settings fingerprint (plan/phases.py DIGEST_SCHEME, or '' for
    the earlier one of every field, defaults included)."""
    text = str(fingerprint or "")
    return text.split(":", 1)[0] + ":" if ":" in text else ""


def _same_numbers(now: dict[str, Any], last: dict[str, Any]) -> bool:
    """Whether a state's numbers are the last version's (versioned_baseline form); a figure the
    last version's state did not record (an earlier release's) is not compared."""
    if now.get("total_gpu_hours") != last.get("total_gpu_hours"):
        return False
    phases = now.get("phases", {})
    if set(phases) != set(last.get("phases", {})):
        return False
    return all(last["phases"][n].get(k) is None or phases[n].get(k) == last["phases"][n].get(k)
               for n in phases for k in ("gpu_hours", "gpus", "wall_hours"))


def what_changed(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Sentences naming each phase whose numbers changed since the last version, and why: its
    GPU hours, its GPUs or its wall clock moved, or its settings changed (even where the GPU
    hours did not move), or its tracked actuals appeared, moved or are no longer found."""
    out = []
    base = versioned_baseline(old)
    old_phases, new_phases = old.get("phases", {}), new["phases"]
    for name, now in new_phases.items():
        before = old_phases.get(name)
        if before is None:
            out.append(f"{name} added: {now['gpu_hours']:,.1f} GPU h")
            continue
        if now.get("spent") is not None and before.get("spent") != now["spent"]:
            projected = now.get("projected")
            budgeted = now.get("budgeted", now["gpu_hours"])  # a grid: one experiment's
            tail = (f", projected {projected:,.1f} against {budgeted:,.1f} budgeted"
                    if projected is not None else "")
            out.append(f"{name}: {now['spent']:,.2f} GPU h spent in tracked runs{tail}")
        elif before.get("spent") is not None and now.get("spent") is None:
            out.append(f"{name}: the {before['spent']:,.2f} GPU h of tracked runs shown before "
                       f"are not in this run's ledger (another ledger, or none)")
        # fingerprints of two schemes are not comparable: no settings change is read from them
        settings_changed = (before.get("digest") != now["digest"]
                            and _digest_scheme(before.get("digest")) == _digest_scheme(
                                now["digest"]))
        then = base["phases"].get(name, before)
        gpus_then, gpus_now = then.get("gpus"), now.get("gpus")
        if gpus_then is not None and gpus_then != gpus_now:
            out.append(f"{name}: {gpus_then} -> {gpus_now} GPUs, wall clock "
                       f"{then.get('wall_hours') or 0:,.1f} -> {now['wall_hours']:,.1f} h")
        elif (then.get("wall_hours") is not None
              and _moved(then["wall_hours"], now["wall_hours"])
              and not _moved(then["gpu_hours"], now["gpu_hours"])):
            out.append(f"{name}: wall clock {then['wall_hours']:,.1f} -> "
                       f"{now['wall_hours']:,.1f} h")
        if not _moved(then["gpu_hours"], now["gpu_hours"]):
            if settings_changed:
                out.append(f"{name}: the plan's settings for it changed ("
                           f"{now['gpu_hours']:,.1f} GPU h)")
            continue
        before = {**before, "gpu_hours": then["gpu_hours"]}
        if settings_changed:
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
    old_mb, new_mb = old.get("micro_benchmarks", {}), new.get("micro_benchmarks", {})
    for key, m in new_mb.items():
        if key not in old_mb:
            out.append(f"micro-benchmark ledger #{key} ({m['device']}, {m['date']}) replaces "
                       f"assumed figures of {', '.join(m['phases'])}")
    out += [f"micro-benchmark ledger #{key} no longer used" for key in old_mb
            if key not in new_mb]
    if not out and _moved(float(base.get("total_gpu_hours") or 0.0), new["total_gpu_hours"]):
        out.append("the budget formula changed (seeds or contingency), or its phases moved a "
                   f"little each since v{old.get('version', '1.0.0')}")
    return out


def _owner_changes(owner: Owner, project: str, reference: str) -> list[str]:
    out = []
    if owner.project is not None and owner.project != project:
        out.append(f"project renamed {owner.project!r} -> {project!r}")
    if owner.plan is not None and not _same_plan(owner, reference):
        out.append(f"now generated from {reference} (was {owner.plan})")
    return out


def _cost_cells(c: CostLine) -> list[str]:
    return [f"{c.provider} ({c.kind})", c.instance, usd(c.usd_per_gpu_hour), usd(c.on_demand_usd),
            usd(c.spot_usd_per_gpu_hour), usd(c.spot_usd), c.as_of]


#: the cost table's columns that are prices, not totals: provider, instance, $/GPU-h, spot
#: $/GPU-h, as of
_PRICE_COLUMNS = (0, 1, 2, 4, 6)


def _prices_in(text: str) -> dict[tuple[str, str], tuple[str, ...]]:
    """(provider, instance) -> the price cells of the cost table in a document's text."""
    begin = text.find("\n## Cost\n")
    end = text.find("\n## ", begin + 1)
    end = len(text) if end < 0 else end
    rows: dict[tuple[str, str], tuple[str, ...]] = {}
    for line in text[begin:end].splitlines() if begin >= 0 else []:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| ") or len(cells) != 7 or cells[0] == "provider" \
                or set(cells[0]) <= {"-"}:
            continue
        rows[(cells[0], cells[1])] = tuple(cells[i] for i in _PRICE_COLUMNS)
    return rows


def _price_changes(old_text: str, b: Budget) -> list[str]:
    """A sentence when the cost table's prices differ from the document's (the catalog or the
    plan's own price changed); totals that moved with the GPU hours are not price changes."""
    old = _prices_in(old_text)
    new = {}
    for c in b.costs:
        cells = [_neutral(x) for x in _cost_cells(c)]
        new[(cells[0], cells[1])] = tuple(cells[i] for i in _PRICE_COLUMNS)
    if old == new:
        return []
    moved = [f"{k[0]} {k[1]} {old[k][2]} -> {new[k][2]} per GPU-h" for k in new
             if k in old and old[k][2] != new[k][2]]
    added, removed = len(new.keys() - old.keys()), len(old.keys() - new.keys())
    parts = moved[:3] + ([f"{len(moved) - 3} more"] if len(moved) > 3 else [])
    parts += [f"{added} price row(s) added"] if added else []
    parts += [f"{removed} price row(s) removed"] if removed else []
    return ["prices changed" + (": " + ", ".join(parts) if parts else " (spot prices or dates)")]


def _bump(version: str) -> str:
    major, minor, _ = (int(x) for x in version.split("."))
    return f"{major}.{minor + 1}.0"


def _image(charts: dict[str, str] | None, key: str, alt: str) -> list[str]:
    """A chart's Markdown image line (its file beside the document), or nothing."""
    if not charts or key not in charts:
        return []
    from urllib.parse import quote

    return ["", f"![{alt}]({quote(charts[key])})"]


def render(b: Budget, plan: str, version: str, day: date, notes: str,
           history: list[str], state: dict[str, Any],
           charts: dict[str, str] | None = None) -> str:
    """The document's text. `plan`: the plan file as the document records it (plan_reference:
    relative to the document's folder). `charts`: chart key -> PNG file name beside the
    document (None: matplotlib is not installed, and the document says how to get them)."""
    lines = [
        f"# Compute budget: {b.project}",
        "",
        "HEADER",
        "",
        f"**Version {version}** ({day.isoformat()}). Generated from `{plan}`.",
        "",
        "## Executive summary",
        "",
        f"- **{b.total_gpu_hours:,.0f} GPU hours** on {b.gpu} ({b.seeds} seed(s), "
        f"{b.contingency_percent:g}% contingency included).",
        f"- Wall clock: {b.wall_clock_hours:,.0f} h ({b.wall_clock_basis}).",
    ]
    if b.costs and len(b.gpu_hours_by_gpu) > 1:
        parts, total = [], 0.0
        for name, hours in b.gpu_hours_by_gpu.items():
            best = min((c for c in b.costs if c.gpu == name and c.on_demand_usd is not None),
                       key=lambda c: c.on_demand_usd or 0, default=None)
            if best is None:
                parts.append(f"{name} {hours:,.0f} GPU h: no price")
                continue
            total += best.on_demand_usd or 0.0
            parts.append(f"{name} {hours:,.0f} GPU h at {usd(best.on_demand_usd)} "
                         f"({best.provider}, as of {best.as_of})")
        lines.append(f"- GPU types: {'; '.join(parts)}; cheapest on-demand in all: "
                     f"{usd(total)}.")
    elif b.costs:
        cheapest = min((c for c in b.costs if c.on_demand_usd is not None),
                       key=lambda c: c.on_demand_usd or 0, default=None)
        if cheapest is not None:
            lines.append(f"- Cheapest on-demand price in the catalog: {usd(cheapest.on_demand_usd)}"
                         f" ({cheapest.provider}, {cheapest.instance}, as of {cheapest.as_of}).")
    biggest = max(b.phases, key=lambda r: r.gpu_hours_per_run)
    lines.append(f"- Largest phase per run: {biggest.name}, {biggest.gpu_hours_per_run:,.1f} GPU h"
                 f", bound by {biggest.bottleneck}.")
    lines.append(f"- {len(b.warnings)} warning(s) about the plan's assumptions (below).")
    if charts is None:
        from gpuhours.report.charts import CHARTS_ENV, INSTALL_HINT, charts_off

        lines.append(f"- Charts are off ({CHARTS_ENV}=off)." if charts_off() else
                     f"- Charts beside the tables need matplotlib: `{INSTALL_HINT}`.")
    lines += ["", "## Hardware", "", f"- {b.num_gpus} x {b.gpu} (plan: `hardware`).", "",
              "## Phases", ""]
    lines += ["| phase | kind | runs | GPU h per run | wall h per run | GPUs | bottleneck |",
              "|---|---|---|---|---|---|---|"]
    for r in b.phases:
        lines.append(f"| {r.name} | {r.kind} | {r.runs.replace('_', ' ')} | "
                     f"{r.gpu_hours_per_run:,.1f} | {r.wall_hours_per_run:,.1f} | {r.gpus} | "
                     f"{r.bottleneck} |")
    lines += _image(charts, "gpu-hours", "GPU hours by phase and budget term")
    for r in b.phases:
        where = f" (plan line {r.line})" if r.line else ""
        lines += ["", f"### {r.name}{where}", "",
                  f"- Setup: {', '.join(f'{k} {v}' for k, v in r.setup.items()) or '-'}",
                  f"- Formula: {r.formula}", f"- Basis: {r.basis}"]
        if r.gpus_basis:
            lines.append(f"- GPUs: {r.gpus}, {r.gpus_basis}")
        lines += [f"- Storage, {k}: {f.value / 1e9:,.2f} GB ({f.basis}: {f.source})"
                  for k, f in r.storage.items()]
        if r.actual is not None:
            from gpuhours.report.budget_terminal import actual_text

            lines.append(f"- Actual: {actual_text(r)}")
        lines += [f"- Check: {c}" for c in r.checks]
        lines += [f"- Warning: {w}" for w in r.warnings]
    lines += _image(charts, "memory", "Memory per GPU by part")
    lines += micro_benchmark_section(b)
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
        lines += ["| " + " | ".join(_cost_cells(c)) + " |" for c in b.costs]
        billed = [f"- Whole instances, {c.provider} {c.instance}: {c.billing} (each phase "
                  f"pays ceil(its GPUs / {c.gpus_per_instance}) instances)"
                  for c in b.costs if c.billing]
        if billed:
            lines += ["", *billed]
        flagged = [f"- Price flag, {c.provider} {c.instance}: {flag}"
                   for c in b.costs for flag in c.flags]
        if flagged:
            lines += ["", *flagged]
        lines += _image(charts, "cost", "Cost by price row, on-demand and spot")
    else:
        lines.append(f"No catalog price for {b.gpu}.")
    if b.electricity_kwh is not None:
        money = f", {usd(b.electricity_usd)}" if b.electricity_usd is not None else ""
        lines += ["", f"Electricity: {b.electricity_kwh:,.0f} kWh{money} ({b.electricity_basis})."]
    lines += ["", "## Warnings about the plan's assumptions", ""]
    lines += [f"- {w}" for w in b.warnings] or ["- none"]
    lines += ["", "## Assumptions used", ""] + [f"- {a}" for a in b.assumptions]
    # text from the plan and the catalog cannot form a marker or end a comment
    lines = [_neutral(line) for line in lines]
    lines[2] = (f"<!-- written by `gpuhours plan {_neutral(plan)}`; regenerated on every run "
                f"except the notes section and the version history, which are kept -->")
    state_json = json.dumps(state, sort_keys=True).replace("<", "\\u003c").replace(">", "\\u003e")
    lines += ["", "## Notes", "", NOTES_BEGIN, notes, NOTES_END, "",
              "## Version history", "", HISTORY_BEGIN, *history, HISTORY_END, "",
              f"{STATE_PREFIX}{state_json} -->", ""]
    return "\n".join(lines)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1000 * seconds:,.1f}"


def micro_benchmark_section(b: Budget) -> list[str]:
    """The measurements of the ledger that set figures of this budget, with what each measured
    (seed 000's "micro-benchmark" section, from real runs instead of simulated ones)."""
    lines = ["", "## Micro-benchmarks", ""]
    if not b.micro_benchmarks:
        return lines + [
            "None yet: every step time above is the formula's, at assumed efficiencies (see "
            "each phase's basis). `gpuhours bench` with a phase's model and setup on the GPU "
            "it will run on records a short real run in the ledger; the next `gpuhours plan` "
            "uses it in place of the assumption and bumps this document's version."]
    lines += ["Measured runs of the ledger that set figures above in place of assumed ones. "
              "Every figure in this table is measured; step parts are medians over the timed "
              "steps.", "",
              "| ledger # | date (UTC) | device | model, setup | step ms (median, CV) | "
              "parts, ms | peak memory | tokens/s | MFU |",
              "|---|---|---|---|---|---|---|---|---|"]
    for m in b.micro_benchmarks:
        cv = f", CV {100 * m.step_time_cv:.1f}%" if m.step_time_cv is not None else ""
        steps = f" over {m.steps_timed} steps" if m.steps_timed else ""
        parts = "; ".join(f"{k} {_ms(v)}" for k, v in m.step_parts_s.items()) or "-"
        peak = ("-" if m.peak_memory_bytes is None
                else f"{m.peak_memory_bytes / 2**30:,.2f} GiB")
        rate = "-" if m.tokens_per_s is None else f"{m.tokens_per_s:,.0f}"
        mfu = "-" if m.mfu is None else f"{100 * m.mfu:.1f}%"
        lines.append(f"| {m.ledger_id} | {m.measured_utc[:16].replace('T', ' ')} | {m.device} | "
                     f"{m.model}, {m.setup} | {_ms(m.step_time_median_s)}{cv}{steps} | "
                     f"{parts} | {peak} | {rate} | {mfu} |")
    lines.append("")
    for m in b.micro_benchmarks:
        basis = f"; peak memory: {m.peak_memory_basis}" if m.peak_memory_basis else ""
        lines.append(f"- #{m.ledger_id} sets {'; '.join(m.used_for)}{basis}.")
    return lines


def _write_charts(b: Budget, path: Path) -> dict[str, str] | None:
    """The PNG charts beside the document (report/charts.py), when matplotlib is installed."""
    from gpuhours.report import charts

    if charts.charts_off() or not charts.matplotlib_installed():
        return None
    return charts.write_charts(b.model_dump(mode="json"), path)


_VERSION_DAY = re.compile(r"\*\*Version [0-9.]+\*\* \((\d{4}-\d{2}-\d{2})\)")


def _rerender_unchanged(b: Budget, path: Path, prev: Previous, version: str,
                        reference: str) -> bool:
    """A document whose numbers did not change, but whose text this release renders otherwise
    (a new line or column, a billing rule, a basis reworded), is rewritten at the same version
    and date, its notes and history kept: the header's promise that the body is regenerated on
    every run. False when the text is already what this release writes."""
    found = _VERSION_DAY.search(prev.text)
    day = date.fromisoformat(found.group(1)) if found else date.today()
    from urllib.parse import quote

    from gpuhours.report import charts

    shown = {k: charts.chart_path(path, k).name for k in charts.CHART_SUFFIXES
             if f"]({quote(charts.chart_path(path, k).name)})" in prev.text}
    state = _keep_unread_actuals(state_of(b, version, reference), prev.state)
    baseline = versioned_baseline(prev.state)
    if not _same_numbers(versioned_baseline(state), baseline):
        state["versioned"] = baseline  # numbers moved below a version: keep the last's
    text = render(b, reference, version, day, prev.notes, prev.history, state, shown or None)
    if text == prev.text:
        return False
    _refuse_read_only(path, ["the document's layout (this release renders it otherwise)"])
    fresh = _write_charts(b, path)  # None with charts off: the links already there are kept
    atomic_write_text(path, render(b, reference, version, day, prev.notes, prev.history, state,
                                   fresh if fresh is not None else shown or None))
    return True


def _small_moves(old: dict[str, Any], b: Budget) -> str | None:
    """What moved below the threshold a version records since the last version (`old`: its
    numbers, versioned_baseline), or None if nothing did: the total, and each phase that moved
    at all (rounded as the state keeps them)."""
    before = float(old.get("total_gpu_hours", 0.0))
    phases = old.get("phases", {})
    moved = [f"{r.name} {phases[r.name]['gpu_hours']:,.2f} -> {r.gpu_hours_per_run:,.2f}"
             for r in b.phases if r.name in phases
             and round(r.gpu_hours_per_run, 3) != phases[r.name]["gpu_hours"]]
    if round(b.total_gpu_hours, 3) == round(before, 3) and not moved:
        return None
    return (f"total {before:,.1f} -> {b.total_gpu_hours:,.1f} GPU h ({'; '.join(moved)} GPU h "
            f"per run), each phase within {100 * RELATIVE_CHANGE:g}% or 0.05 GPU h, below what "
            "a new version records")


def _restore_charts(b: Budget, path: Path, text: str) -> None:
    """A current document whose charts were deleted gets them back (nothing else changes)."""
    from urllib.parse import quote

    from gpuhours.report import charts

    keys = [k for k in charts.CHART_SUFFIXES
            if f"]({quote(charts.chart_path(path, k).name)})" in text
            and not charts.chart_path(path, k).exists()]
    if keys and not charts.charts_off() and charts.matplotlib_installed():
        charts.write_charts(b.model_dump(mode="json"), path)


@dataclass(frozen=True)
class DocUpdate:
    path: Path
    version: str
    changes: list[str]
    written: bool
    #: a rewrite at the same version whose numbers moved by less than a version records
    #: (each phase within RELATIVE_CHANGE or 0.05 GPU h): what moved, for the user to see
    small_moves: str | None = None


@contextmanager
def folder_lock(document: Path, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold an exclusive lock on the document's folder (flock on the folder itself, so no lock
    file is left beside the document): runs that update a document there take turns, and none
    reads a history that another is about to extend. Without flock (Windows, some network file
    systems) the block runs unlocked."""
    folder = Path(os.path.realpath(document)).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd: int | None = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) |
                                 getattr(os, "O_CLOEXEC", 0))
    except OSError:
        fd = None  # the write will fail with its own clear error
    try:
        if fd is not None and sys.platform != "win32":
            import fcntl

            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise InputError(str(document), f"another gpuhours run has been "
                                                        f"writing in {folder} for {wait_s:g} s.",
                                         "Try again when it has finished.") from None
                    time.sleep(0.02)
                except OSError:
                    break  # no flock on this file system
        yield
    finally:
        if fd is not None:
            os.close(fd)  # releases the lock


def _refuse_read_only(path: Path, changes: list[str]) -> None:
    try:
        st = os.stat(path)  # the target of a symlink
    except FileNotFoundError:
        return
    if st.st_mode & 0o222 == 0 or not os.access(path, os.W_OK):
        raise InputError(str(path), f"is read-only (mode {stat.S_IMODE(st.st_mode):04o}), so "
                                    f"gpuhours left it as it was; it does not yet record: "
                                    f"{'; '.join(changes)}.",
                         "Make it writable (chmod u+w) to update it, or pass --out another path.")


def _refuse_other_owner(prev: Previous, path: Path, project: str, reference: str) -> None:
    """A document is refused to a plan of another project and another plan file (one of the
    two changing is a rename, recorded in the history)."""
    owner = prev.owner
    if owner.project in (None, project) or _same_plan(owner, reference):
        return
    theirs = f"project {owner.project!r}" + (f", plan {owner.plan}" if owner.plan else "")
    raise InputError(str(path), f"is the budget document of {theirs}; this is project "
                                f"{project!r}, plan {reference}. It was left as it is.",
                     "Pass --out with another path for this plan's document (or leave --out "
                     "out: each plan then gets its own, see `default_document_path`).")


def update_living_document(b: Budget, path: Path, plan_path: str,
                           today: date | None = None) -> DocUpdate:
    """Write or update the living document at `path`; append a history entry only when
    something changed. Refuses (InputError) a document of another project and plan, a
    read-only document that would change, and a file gpuhours did not write."""
    day = today or date.today()
    path = Path(path)
    with folder_lock(path):
        prev = read_previous(path)
        reference = plan_reference(plan_path, path)
        if prev is None:
            version = "1.0.0"
            state = state_of(b, version, reference)
            entry = (f"- **v{version}** ({day.isoformat()}): first budget from the plan: "
                     f"{b.total_gpu_hours:,.1f} GPU h.")
            atomic_write_text(path, render(b, reference, version, day, DEFAULT_NOTES, [entry],
                                           state, _write_charts(b, path)))
            return DocUpdate(path, version, ["first budget"], True)
        _refuse_other_owner(prev, path, b.project, reference)
        old_version = str(prev.state.get("version", "1.0.0"))
        changes = what_changed(prev.state, _keep_unread_actuals(
            state_of(b, old_version, reference), prev.state))
        changes += _owner_changes(prev.owner, b.project, reference)
        changes += _price_changes(prev.text, b)
        if not changes:
            if _rerender_unchanged(b, path, prev, old_version, reference):
                return DocUpdate(path, old_version, [], True,
                                 _small_moves(versioned_baseline(prev.state), b))
            _restore_charts(b, path, prev.text)
            return DocUpdate(path, old_version, [], False)
        _refuse_read_only(path, changes)
        version = _bump(old_version)
        state = _keep_unread_actuals(state_of(b, version, reference), prev.state)
        total_before = float(versioned_baseline(prev.state).get("total_gpu_hours") or 0.0)
        entry = _neutral(f"- **v{version}** ({day.isoformat()}): " + "; ".join(changes) +
                         f". Total {total_before:,.1f} -> {b.total_gpu_hours:,.1f} GPU h.")
        atomic_write_text(path, render(b, reference, version, day, prev.notes,
                                       [*prev.history, entry], state, _write_charts(b, path)))
        return DocUpdate(path, version, changes, True)
