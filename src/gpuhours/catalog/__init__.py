"""The catalogs of gpuhours: accelerators, prices and model architectures, each row with its source.

    from gpuhours import catalog
    catalog.gpu("H100-80GB SXM").dense_tflops.bf16    # 989.5, dense; .source says from where
    catalog.prices("a100-80gb")                       # per-GPU-hour prices, on-demand and spot
    catalog.node("aws-p5").inter_node_gb_per_s_one_way  # 50.0 GB/s per GPU to other nodes
    entry, config = catalog.model("llama-3.1-8b")     # ModelEntry and its config.json as a dict
    entry, config = catalog.model("path/to/config.json")   # (None, dict) for one's own model

Names match exactly after lower-casing and turning spaces and underscores into hyphens, by the
canonical name or an alias; never by substring. An unknown name raises `UnknownNameError` with the
closest names and how to supply one's own. The data files (under `data/`) are read on first use.
This package never imports torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuhours.catalog import _tables
from gpuhours.catalog._load import read_config_json
from gpuhours.catalog.schema import DenseTflops, GpuSpec, ModelEntry, NodeSpec, PriceRow

__all__ = [
    "DenseTflops",
    "GpuSpec",
    "ModelEntry",
    "NodeSpec",
    "PriceRow",
    "gpu",
    "gpus",
    "model",
    "models",
    "node",
    "node_for_gpu",
    "nodes",
    "prices",
]


def gpu(name: str) -> GpuSpec:
    """The accelerator called `name` (canonical name or alias, e.g. 'h100', 'A100-80GB PCIe')."""
    return _tables.gpu_table()[1].lookup(name)


def gpus() -> list[GpuSpec]:
    """All accelerators, in catalog order."""
    return list(_tables.gpu_table()[0])


def node(name: str) -> NodeSpec:
    """The node type called `name` (canonical name or alias, e.g. 'dgx-h100', 'p4d.24xlarge')."""
    return _tables.node_table()[1].lookup(name)


def node_for_gpu(name: str, gpu_name: str) -> NodeSpec:
    """The node type `name`, checked to carry the GPU `gpu_name` (a catalog name or alias);
    a FieldError keyed by `node` otherwise."""
    from gpuhours.errors import FieldError, UnknownNameError

    try:
        spec = node(name)
    except UnknownNameError as e:
        raise FieldError("node", e.message, e.hint) from None
    canonical = _tables.gpu_table()[1].get(gpu_name)
    if canonical is None or canonical.name not in spec.gpus:
        raise FieldError("node", f"{spec.name} carries {', '.join(spec.gpus)}, not {gpu_name}.",
                         "Name a GPU the node carries (gpuhours catalog nodes), or give the "
                         "GPUs per node and the network per GPU of your own machines.")
    return spec


def nodes() -> list[NodeSpec]:
    """All node types, in catalog order."""
    return list(_tables.node_table()[0])


def prices(gpu_name: str | None = None) -> list[PriceRow]:
    """Price rows, per GPU-hour; only those of one accelerator when `gpu_name` is given.

    Prices are snapshots with an as_of date and go stale: see each row's notes.
    """
    rows = _tables.price_rows()
    if gpu_name is None:
        return list(rows)
    canonical = gpu(gpu_name).name
    return [row for row in rows if row.gpu == canonical]


def model(name_or_path: str | Path) -> tuple[ModelEntry | None, dict[str, Any]]:
    """A catalog model and its config.json, or (None, config) for one's own config.json.

    A catalog name, alias or Hugging Face id wins. Otherwise a string that looks like a path (ends
    in .json, contains a path separator, starts with '.' or '~') or names an existing file or
    directory is read as a config.json (a directory: the config.json inside it). Anything else is
    an unknown model name.
    """
    if isinstance(name_or_path, Path):
        return None, read_config_json(name_or_path)
    _, index = _tables.model_table()
    entry = index.get(name_or_path)
    if entry is None:
        path = Path(name_or_path).expanduser()
        if _looks_like_path(name_or_path) or path.exists():
            return None, read_config_json(path)
        entry = index.lookup(name_or_path)  # raises UnknownNameError with close matches
    return entry, _tables.model_config(entry)


def models() -> list[ModelEntry]:
    """All catalog models, in catalog order."""
    return list(_tables.model_table()[0])


def _looks_like_path(text: str) -> bool:
    return (
        text.lower().endswith(".json") or "/" in text or "\\" in text or text.startswith((".", "~"))
    )
