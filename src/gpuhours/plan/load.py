"""Read a plan file: YAML (safe) -> Plan, with errors that name the file, line and field.

Before the schema sees a plan, its size is held to limits far above any real plan and far below
what would hang or overflow: a plan that passes them cannot make a budget of `inf` dollars, a
terminal line of megabytes, or a loop over millions of phases.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from dataclasses import field as dc_field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gpuhours.errors import InputError
from gpuhours.files import read_user_text
from gpuhours.plan.schema import Plan
from gpuhours.yamlio import compose, gc_paused

#: Limits of a plan. Assumption: each is 10x or more beyond any real plan (seed 004, the largest
#: of the seeds, has 63 experiments in one grid and 8 phases), and small enough that no product
#: of the plan's numbers overflows a float (1e15^5 is 1e75).
MAX_PLAN_BYTES = 64 * 2**20  # a 100,000-experiment grid is about 5 MB
MAX_PHASES = 1_000
MAX_EXPERIMENTS = 1_000_000
MAX_NAME_CHARS = 200  # project, phase, experiment and benchmark names
MAX_TEXT_CHARS = 10_000  # notes, paths, any other string
#: no plan quantity is larger: the biggest are token counts, ~4e13 for a frontier pretraining run
MAX_NUMBER = 1e15
#: fields with a tighter bound, and why
FIELD_MAX: dict[str, tuple[float, str]] = {
    "usd_per_gpu_hour": (1_000.0, "US$ per GPU-hour; the dearest catalog price is below $20"),
    "electricity_usd_per_kwh": (100.0, "US$ per kWh; grid power costs well under $1"),
    "seeds": (10_000, "seeds"),
    "gpus_per_node": (1_024, "GPUs in one node; the largest NVLink domains have 576"),
    "nodes": (1_000_000, "nodes"),
    "gpus": (1_000_000, "GPUs"),
    "schedule_gpus": (1_000_000, "GPUs"),
    "seq_len": (10_000_000, "tokens in one sequence"),
    "prompt_tokens": (10_000_000, "tokens in one prompt"),
    "answer_tokens": (10_000_000, "tokens in one answer"),
    "response_tokens": (10_000_000, "tokens in one response"),
}
MAX_GPUS = 1_000_000  # nodes x gpus_per_node
_NAME_KEYS = frozenset({"project", "name"})
_NUMBER = re.compile(r"[-+]?(?:\d[\d_]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _node_at(node: yaml.Node | None, loc: tuple[Any, ...]) -> yaml.Node | None:
    """The deepest YAML node along a pydantic error location (skipping union tags)."""
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if k.value == part), None)
            if match is None:
                continue  # a discriminator tag or a missing field: stay on the parent
            node = match
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                break
            node = node.value[part]
    return node


def _field_path(loc: tuple[Any, ...], data: Any) -> str:
    """phases[2] (sft).epochs style, with the phase name when known."""
    out = ""
    cursor = data
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            cursor = cursor[part] if isinstance(cursor, list) and part < len(cursor) else None
            if isinstance(cursor, dict) and isinstance(cursor.get("name"), str):
                out += f" ({cursor['name']})"
        elif isinstance(cursor, dict) and part in cursor:
            out += f".{part}" if out else str(part)
            cursor = cursor[part]
        elif isinstance(cursor, dict) and part in ("finetune", "pretrain", "rl", "online", "eval",
                                                     "one_time", "fixed", "grid"):
            continue  # discriminated-union tag
        else:
            out += f".{part}" if out else str(part)
            cursor = None
    return out or "(top level)"


@dataclass(frozen=True)
class LoadedPlan:
    """A validated plan, where it came from, and the line of each phase."""

    plan: Plan
    path: str
    phase_lines: dict[str, int]
    gpu_line: int | None = None
    #: the line of each key under `hardware:` (an error about a hardware setting names it)
    hardware_lines: dict[str, int] = dc_field(default_factory=dict)
    #: the line of each key of each phase, by phase name (an error the estimate finds in a
    #: phase's setting names that key's line, as the loader's own errors do)
    field_lines: dict[str, dict[str, int]] = dc_field(default_factory=dict)


def _phase_field_lines(node: yaml.Node | None) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    phases = _node_at(node, ("phases",))
    if isinstance(phases, yaml.SequenceNode):
        for item in phases.value:
            name = _node_at(item, ("name",))
            if isinstance(name, yaml.ScalarNode) and isinstance(item, yaml.MappingNode):
                out[name.value] = {key.value: key.start_mark.line + 1 for key, _ in item.value
                                   if isinstance(key, yaml.ScalarNode)}
    return out


def _phase_lines(node: yaml.Node | None) -> dict[str, int]:
    lines: dict[str, int] = {}
    phases = _node_at(node, ("phases",))
    if isinstance(phases, yaml.SequenceNode):
        for item in phases.value:
            name = _node_at(item, ("name",))
            if isinstance(name, yaml.ScalarNode):
                lines[name.value] = item.start_mark.line + 1
    return lines


def _hardware_lines(node: yaml.Node | None) -> dict[str, int]:
    hardware = _node_at(node, ("hardware",))
    if not isinstance(hardware, yaml.MappingNode):
        return {}
    return {key.value: key.start_mark.line + 1 for key, _ in hardware.value
            if isinstance(key, yaml.ScalarNode)}


def _shown(value: str) -> str:
    return repr(value) if len(value) <= 60 else f"{value[:40]!r}... ({len(value):,} characters)"


def _check_value(key: Any, value: Any) -> str | None:
    """What is wrong with one value of a plan, or None."""
    if isinstance(value, str):
        cap = MAX_NAME_CHARS if key in _NAME_KEYS else MAX_TEXT_CHARS
        if len(value) > cap:
            return f"{_shown(value)} is longer than the {cap:,} characters it may have."
        if key not in _NAME_KEYS and _NUMBER.fullmatch(value):
            # YAML 1.1 reads 1e300 (no dot) as a string; the schema would read it as a number
            value = float(value.replace("_", ""))
    if isinstance(value, float | int) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            return f"{value} is not a finite number."
        bound, what = FIELD_MAX.get(key, (MAX_NUMBER, ""))
        if abs(value) > bound:
            unit = f" ({what})" if what else ""
            return f"{value:g} is beyond the largest plausible value, {bound:g}{unit}."
    return None


def limit_problem(data: Any) -> tuple[tuple[Any, ...], str] | None:
    """The first place where a plan's data is beyond the limits above: (location, what is
    wrong), or None. Linear in the plan's size; an alias's container is checked once."""
    phases = data.get("phases") if isinstance(data, dict) else None
    if isinstance(phases, list) and len(phases) > MAX_PHASES:
        return ("phases",), f"{len(phases):,} phases; a plan may have {MAX_PHASES:,}."
    hardware = data.get("hardware") if isinstance(data, dict) else None
    if isinstance(hardware, dict):
        count = hardware.get("nodes", 1), hardware.get("gpus_per_node", 8)
        if all(isinstance(c, int) and c > 0 for c in count) and count[0] * count[1] > MAX_GPUS:
            return ("hardware", "nodes"), (f"{count[0]:,} nodes x {count[1]:,} GPUs per node "
                                           f"is more than {MAX_GPUS:,} GPUs.")
    seen: set[int] = set()
    stack: list[tuple[tuple[Any, ...], Any]] = [((), data)]
    while stack:
        loc, value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, list) and len(value) > MAX_EXPERIMENTS:
            return loc, f"{len(value):,} entries; a list in a plan may have {MAX_EXPERIMENTS:,}."
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(key, str) and len(key) > MAX_NAME_CHARS:
                return loc, f"the key {_shown(key)} is not a field of a plan."
            problem = _check_value(key, item)
            if problem:
                return (*loc, key), problem
            if isinstance(item, dict | list):
                stack.append(((*loc, key), item))
    return None


#: levels of the YAML node tree kept for every plan (the top, `phases`, a phase, its fields:
#: the lines of phases and of the GPU); an error deeper down reads the tree again in full
_NODE_DEPTH = 4


def duplicate_problem(data: dict[str, Any]) -> tuple[tuple[Any, ...], str] | None:
    """The second of two phases with one name, or of two experiments of a grid with one name
    (an experiment would be counted twice): its place and the problem, so that the error names
    that entry's own line; None when names are unique."""
    phases = data.get("phases")
    if not isinstance(phases, list):
        return None
    seen: dict[str, int] = {}
    for i, phase in enumerate(phases):
        if not isinstance(phase, dict):
            continue
        name = phase.get("name")
        if isinstance(name, str):  # another type is the schema's error, at its own line
            if name in seen:
                return (("phases", i, "name"), f"phase names must be unique: {name!r} is also "
                                              f"the name of phases[{seen[name]}]")
            seen[name] = i
        experiments = phase.get("experiments")
        if not isinstance(experiments, list):
            continue
        names: dict[str, int] = {}
        for j, e in enumerate(experiments):
            ename = e.get("name") if isinstance(e, dict) else None
            if not isinstance(ename, str):
                continue
            if ename in names:
                return (("phases", i, "experiments", j, "name"),
                        f"experiment names must be unique in a grid: {ename!r} is also "
                        f"the name of experiments[{names[ename]}]")
            names[ename] = j
    return None


def _line(node: yaml.Node | None, loc: tuple[Any, ...]) -> str:
    target = _node_at(node, loc)
    return f", line {target.start_mark.line + 1}" if target is not None else ""


def parse_plan(text: str, label: str) -> LoadedPlan:
    """Validate plan text; `label` names the file in errors."""
    node, data = compose(text, label, node_depth=_NODE_DEPTH)
    if not isinstance(data, dict):
        raise InputError(label, "expected a YAML mapping at the top level (project, hardware, "
                                "phases, ...).")
    try:
        with gc_paused():  # a grid of 100,000 experiments is 100,000 models
            problem = limit_problem(data) or duplicate_problem(data)
            if problem is not None:
                loc, message = problem
                full, _ = compose(text, label)
                raise InputError(f"{label}{_line(full, loc)}, {_field_path(loc, data)}", message)
            plan = Plan.model_validate(data)
        gpu = _node_at(node, ("hardware", "gpu"))
        return LoadedPlan(plan, label, _phase_lines(node),
                          gpu.start_mark.line + 1 if gpu is not None else None,
                          _hardware_lines(node), _phase_field_lines(node))
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        full, _ = compose(text, label)
        field = _field_path(loc, data)
        message = err["msg"].removeprefix("Value error, ")
        got = err.get("input")
        shown = "" if isinstance(got, dict | list) or err["type"] == "missing" else (
            f" (got {got!r})")
        more = f" ({exc.error_count() - 1} more error(s) after fixing this one)" if (
            exc.error_count() > 1) else ""
        raise InputError(f"{label}{_line(full, loc)}, {field}", f"{message}{shown}.{more}") \
            from None


def load_plan(path: str | Path) -> LoadedPlan:
    """Read and validate a plan file."""
    try:
        text = read_user_text(path, str(path), MAX_PLAN_BYTES, "plan file")
    except FileNotFoundError:
        raise InputError(str(path), "no such plan file.") from None
    return parse_plan(text, str(path))
