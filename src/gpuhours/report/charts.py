"""PNG charts for the living document (COMPUTE_BUDGET.md), drawn with matplotlib's Agg backend
from the same series as the HTML page (report/chart_data.py), over the budget as `plan --json`
emits it.

Optional: matplotlib comes with the `report` extra; without it the document says how to get
them. The files are written atomically beside the document, named after it
(`COMPUTE_BUDGET.gpu-hours.png`), so that two plans' documents in one folder keep their own.
"""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path
from typing import Any

from gpuhours.files import atomic_write_bytes
from gpuhours.report import chart_data as cd

#: chart key -> the part of the file name after the document's stem
CHART_SUFFIXES = {"gpu-hours": ".gpu-hours.png", "cost": ".cost.png", "memory": ".memory.png"}
INSTALL_HINT = "pip install 'gpuhours[report]'"
#: set to "off" to leave the charts out (matplotlib draws each in ~0.4 s on a small machine;
#: the test suite, which writes hundreds of documents, turns them off but for their own tests)
CHARTS_ENV = "GPUHOURS_CHARTS"


def charts_off() -> bool:
    import os

    return os.environ.get(CHARTS_ENV, "").strip().lower() in ("off", "0", "no", "false")


def matplotlib_installed() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def chart_path(document: Path, key: str) -> Path:
    document = Path(document)
    return document.with_name(document.stem + CHART_SUFFIXES[key])


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    # no software version in the file: the same budget gives the same bytes
    fig.savefig(buf, format="png", dpi=90, metadata={"Software": None})
    return buf.getvalue()


def _bars(points: list[cd.Point], title: str, unit: str, scale: float, stacked: bool) -> Any:
    """Stacked vertical bars (a few short labels: the budget's terms) or grouped horizontal
    bars (long labels: price rows, memory parts), the legend below."""
    from matplotlib.figure import Figure

    labels = list(dict.fromkeys(p.label for p in points))
    series = list(dict.fromkeys(p.series for p in points))
    rows = max(1, -(-len(series) // 4))
    height = 3.6 + (0 if stacked else 0.22 * len(labels) * max(1, len(series)) ** 0.5)
    fig = Figure(figsize=(10, height + 0.25 * rows))
    # fixed margins (no tight bbox: it draws the figure twice): long labels on the left
    left = 0.08 if stacked else 0.34
    bottom = (0.75 + 0.25 * rows) / fig.get_figheight() + (0.06 if stacked else 0.04)
    ax = fig.add_axes((left, bottom, 0.97 - left, 0.9 - bottom))
    width = 0.8 if stacked else 0.8 / max(len(series), 1)
    base = [0.0] * len(labels)
    for i, name in enumerate(series):
        values = [0.0] * len(labels)
        for p in points:
            if p.series == name:
                values[labels.index(p.label)] = p.value / scale
        colour = "#aaaaaa" if name == "contingency" else f"C{i % 10}"
        if stacked:
            ax.bar(range(len(labels)), values, width, bottom=base, label=name, color=colour)
            base = [b + v for b, v in zip(base, values, strict=True)]
        else:
            ys = [y - 0.4 + width * (i + 0.5) for y in range(len(labels))]
            ax.barh(ys, values, width, label=name, color=colour)
    if stacked:
        ax.set_xticks(range(len(labels)), labels, fontsize=8)
        ax.set_ylabel(unit)
        ax.grid(axis="y", alpha=0.3)
    else:
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.invert_yaxis()  # the first row on top, as in the tables
        ax.set_xlabel(unit)
        ax.grid(axis="x", alpha=0.3)
    ax.set_title(title, fontsize=10)
    fig.legend(loc="lower center", ncols=min(4, len(series)), fontsize=7, frameon=False)
    return fig


def chart_pngs(b: dict[str, Any]) -> dict[str, bytes]:
    """The charts of budget `b` (the `plan --json` dict) as PNG bytes, by key."""
    out = {"gpu-hours": _png(_bars(
        cd.phase_gpu_hours(b), f"GPU hours by phase and budget term: "
                               f"{cd.value(b['total_gpu_hours']):,.1f} GPU h", "GPU hours", 1.0, True))}
    costs = cd.provider_costs(b)
    if costs:
        out["cost"] = _png(_bars(costs, "The budget's cost by price row (catalog price x GPU h)",
                                 "USD", 1.0, False))
    memory = cd.phase_memory(b)
    if memory:
        out["memory"] = _png(_bars(memory, "Memory per GPU by part (GiB = 2^30 bytes; parts are "
                                           "not all alive at the peak)", "GiB", cd.GIB, False))
    return out


def write_charts(b: dict[str, Any], document: Path) -> dict[str, str]:
    """Write the charts beside `document`, atomically; returns key -> file name (relative to
    the document's folder)."""
    written = {}
    for key, data in chart_pngs(b).items():
        path = chart_path(document, key)
        atomic_write_bytes(path, data)
        written[key] = path.name
    return written
