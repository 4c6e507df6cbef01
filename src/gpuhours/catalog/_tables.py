"""The packaged catalog files, each read and checked once, on first use."""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import TYPE_CHECKING, Any

from gpuhours.catalog._load import parse_config_json, parse_csv_rows, parse_yaml_rows
from gpuhours.catalog._names import NameIndex
from gpuhours.catalog.schema import GpuSpec, ModelEntry, NodeSpec, PriceRow
from gpuhours.errors import InputError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

GPU_HOW_TO_ADD = (
    "Pass --peak-tflops/--memory-gb/--bandwidth-gb-per-s or add a row to a catalog file "
    "(gpuhours/catalog/data/gpus.yaml)."
)
MODEL_HOW_TO_ADD = (
    "Pass a path to a config.json (or a directory containing one), "
    "or add a row to gpuhours/catalog/data/models.yaml."
)

_HF_REPO_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def _data_dir() -> Traversable:
    return resources.files("gpuhours.catalog") / "data"


def _label(*parts: str) -> str:
    return "/".join(("gpuhours/catalog/data", *parts))


@functools.cache
def gpu_table() -> tuple[tuple[GpuSpec, ...], NameIndex[GpuSpec]]:
    """All accelerator rows, in file order, and their name index."""
    label = _label("gpus.yaml")
    rows = tuple(parse_yaml_rows((_data_dir() / "gpus.yaml").read_text("utf-8"), label, GpuSpec))
    index = NameIndex("GPU", GPU_HOW_TO_ADD, ((r.name, r.aliases, r) for r in rows), label)
    return rows, index


NODE_HOW_TO_ADD = ("Give --gpus-per-node and --inter-node-gb-per-s (a plan's hardware."
                   "gpus_per_node and inter_node_gb_per_s_one_way), or add a row to "
                   "gpuhours/catalog/data/nodes.yaml.")


@functools.cache
def node_table() -> tuple[tuple[NodeSpec, ...], NameIndex[NodeSpec]]:
    """All node types, in file order, and their name index; each row's GPUs are checked to be
    canonical names of gpus.yaml."""
    label = _label("nodes.yaml")
    rows = tuple(parse_yaml_rows((_data_dir() / "nodes.yaml").read_text("utf-8"), label,
                                 NodeSpec))
    _, gpus = gpu_table()
    for row in rows:
        for name in row.gpus:
            spec = gpus.get(name)
            if spec is None or spec.name != name:
                raise InputError(f"{label}, {row.name!r}",
                                 f"gpu {name!r} is not a canonical name in gpus.yaml.")
    index = NameIndex("node type", NODE_HOW_TO_ADD, ((r.name, r.aliases, r) for r in rows),
                      label)
    return rows, index


@functools.cache
def price_rows() -> tuple[PriceRow, ...]:
    """All price rows, each checked to name an accelerator by its canonical name."""
    label = _label("prices.csv")
    rows = tuple(parse_csv_rows((_data_dir() / "prices.csv").read_text("utf-8"), label, PriceRow))
    _, gpus = gpu_table()
    for row in rows:
        spec = gpus.get(row.gpu)
        if spec is None or spec.name != row.gpu:
            known = f"; its canonical name is {spec.name!r}" if spec else ""
            raise InputError(
                f"{label}, {row.provider} {row.instance!r}",
                f"gpu {row.gpu!r} is not a canonical name in gpus.yaml{known}.",
            )
    return rows


@functools.cache
def model_table() -> tuple[tuple[ModelEntry, ...], NameIndex[ModelEntry]]:
    """All model rows, in file order, and their name index (names, aliases, Hugging Face ids)."""
    label = _label("models.yaml")
    rows = tuple(
        parse_yaml_rows((_data_dir() / "models.yaml").read_text("utf-8"), label, ModelEntry)
    )
    for row in rows:
        if not (_data_dir() / "models" / row.config_file).is_file():
            raise InputError(
                f"{label}, {row.name!r}", f"config_file models/{row.config_file} does not exist."
            )
    entries = (
        (r.name, [*r.aliases, *([r.hf_id] if _HF_REPO_ID.match(r.hf_id) else [])], r) for r in rows
    )
    return rows, NameIndex("model", MODEL_HOW_TO_ADD, entries, label)


def model_config(entry: ModelEntry) -> dict[str, Any]:
    """The parsed config.json of a catalog model (a fresh dict on each call)."""
    text = (_data_dir() / "models" / entry.config_file).read_text("utf-8")
    return parse_config_json(text, _label("models", entry.config_file))
