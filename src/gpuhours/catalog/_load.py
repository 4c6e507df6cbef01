"""Catalog files parsed into validated rows; each error names the file, the row or line, and why.

YAML is read with `yaml.safe_load`, CSV with the csv module, JSON with the json module; rows are
validated by the pydantic models of `schema.py`. Nothing here knows where the files live.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from gpuhours.errors import InputError
from gpuhours.yamlio import compose

Model = TypeVar("Model", bound=BaseModel)

CONFIG_HINT = (
    "Pass a catalog model name, a path to a Hugging Face config.json, "
    "or a directory that contains one."
)


def describe_validation_error(exc: ValidationError) -> str:
    """One line per failed field: 'field.sub: what was wrong'."""
    parts = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "(row)"
        parts.append(f"{field}: {err['msg']}")
    return "; ".join(parts)


def parse_yaml_rows(text: str, label: str, model: type[Model]) -> list[Model]:
    """Rows of `model` from a YAML list; `label` names the file in errors."""
    node, data = compose(text, label)
    if not isinstance(data, list) or not isinstance(node, yaml.SequenceNode):
        raise InputError(label, "expected a YAML list of rows at the top level.")
    rows = []
    for index, (item, item_node) in enumerate(zip(data, node.value, strict=True), start=1):
        name = item.get("name") if isinstance(item, dict) else None
        where = f"{label}, row {index}" + (f" ({name!r})" if name else "")
        where += f", line {item_node.start_mark.line + 1}"
        try:
            rows.append(model.model_validate(item))
        except ValidationError as exc:
            raise InputError(where, describe_validation_error(exc)) from None
    return rows


def parse_csv_rows(text: str, label: str, model: type[Model]) -> list[Model]:
    """Rows of `model` from a CSV whose header is exactly the model's fields, in order.

    An empty cell means "not set": the field's default applies (None for optional numbers).
    """
    reader = csv.DictReader(io.StringIO(text))
    expected = list(model.model_fields)
    if reader.fieldnames != expected:
        raise InputError(
            f"{label}, line 1",
            f"columns {reader.fieldnames} are not the expected {expected}.",
        )
    rows = []
    for record in reader:
        where = f"{label}, line {reader.line_num}"
        if None in record:
            raise InputError(where, f"more values than the {len(expected)} columns.")
        values = {key: value for key, value in record.items() if value not in ("", None)}
        try:
            rows.append(model.model_validate(values, strict=False))  # CSV cells are text
        except ValidationError as exc:
            raise InputError(where, describe_validation_error(exc)) from None
    return rows


def parse_config_json(text: str, label: str) -> dict[str, Any]:
    """A Hugging Face config.json as a dict; malformed JSON names line, column and expectation."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{label}, line {exc.lineno}, column {exc.colno}",
            f"malformed JSON: {exc.msg}.",
            "A config.json must be one JSON object, as written by transformers.",
        ) from None
    if not isinstance(data, dict):
        raise InputError(
            label,
            f"expected a JSON object (a Hugging Face config.json), found a {type(data).__name__}.",
        )
    return data


def read_config_json(path: Path) -> dict[str, Any]:
    """The config.json at `path`, or in the directory `path`."""
    if path.is_dir():
        path = path / "config.json"
    from gpuhours.files import CONFIG_MAX_BYTES, read_user_bytes

    try:  # bounded: a FIFO, /dev/zero or a huge file is an error, not a hang
        text = read_user_bytes(path, str(path), CONFIG_MAX_BYTES, "config.json").decode("utf-8")
    except FileNotFoundError:
        raise InputError(str(path), "no such file.", CONFIG_HINT) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(str(path), f"cannot be read: {exc}.", CONFIG_HINT) from None
    return parse_config_json(text, str(path))
