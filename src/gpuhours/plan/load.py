"""Read a plan file: YAML (safe) -> Plan, with errors that name the file, line and field."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gpuhours.errors import InputError
from gpuhours.plan.schema import Plan
from gpuhours.yamlio import compose


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


def _phase_lines(node: yaml.Node | None) -> dict[str, int]:
    lines: dict[str, int] = {}
    phases = _node_at(node, ("phases",))
    if isinstance(phases, yaml.SequenceNode):
        for item in phases.value:
            name = _node_at(item, ("name",))
            if isinstance(name, yaml.ScalarNode):
                lines[name.value] = item.start_mark.line + 1
    return lines


def parse_plan(text: str, label: str) -> LoadedPlan:
    """Validate plan text; `label` names the file in errors."""
    node, data = compose(text, label)
    if not isinstance(data, dict):
        raise InputError(label, "expected a YAML mapping at the top level (project, hardware, "
                                "phases, ...).")
    try:
        gpu = _node_at(node, ("hardware", "gpu"))
        return LoadedPlan(Plan.model_validate(data), label, _phase_lines(node),
                          gpu.start_mark.line + 1 if gpu is not None else None)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        target = _node_at(node, loc)
        line = f", line {target.start_mark.line + 1}" if target is not None else ""
        field = _field_path(loc, data)
        message = err["msg"].removeprefix("Value error, ")
        got = err.get("input")
        shown = "" if isinstance(got, dict | list) or err["type"] == "missing" else (
            f" (got {got!r})")
        more = f" ({exc.error_count() - 1} more error(s) after fixing this one)" if (
            exc.error_count() > 1) else ""
        raise InputError(f"{label}{line}, {field}", f"{message}{shown}.{more}") from None


def load_plan(path: str | Path) -> LoadedPlan:
    """Read and validate a plan file."""
    p = Path(path)
    if not p.is_file():
        raise InputError(str(path), "no such plan file." if not p.exists() else "not a file.")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(str(path), f"not UTF-8 text ({exc.reason} at byte {exc.start}).") from None
    return parse_plan(text, str(path))
