"""YAML read once with its line numbers: the data and the node tree, errors naming the line."""

from __future__ import annotations

from typing import Any

import yaml

from gpuhours.errors import InputError

#: the C loader, when PyYAML has it, is ~10x faster (catalogs are read on every command)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def compose(text: str, label: str) -> tuple[yaml.Node | None, Any]:
    """(node tree, data) of YAML text, safely loaded; `label` names the file in errors."""
    try:
        node = yaml.compose(text, Loader=_LOADER)
        data = _LOADER(text).construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{label}, line {mark.line + 1}, column {mark.column + 1}" if mark else label
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(where, f"not valid YAML: {problem}.") from None
    return node, data
