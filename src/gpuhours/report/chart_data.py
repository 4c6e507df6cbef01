"""The series the budget's charts plot, taken from the budget as `gpuhours plan --json` emits it
(`Budget.model_dump(mode="json")`), so that a chart and the JSON cannot disagree.

Pure functions over that dict; no plotting library here. Both the HTML page (report/html.py,
plotly) and the living document's PNGs (report/charts.py, matplotlib) draw these series. Every
point carries the basis of its number: 'formula', 'catalog', 'assumed' or 'measured', and a
source that says which formula, price row or plan line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuhours.catalog.billing import bill

#: the budget formula's terms, in the order of `Budget.formula`
RUN_TERMS = ("once", "per_seed", "single_seed")
#: a phase's memory parts as the estimator reports them (estimate.estimator.MemoryReport);
#: not all are alive at the peak, so they do not add up to the total
MEMORY_PARTS = ("weights_bytes", "gradients_bytes", "master_weights_bytes", "optimizer_bytes",
                "activations_bytes", "logits_bytes", "optimizer_temporaries_bytes",
                "gathered_bytes", "allocator_reserve_bytes", "cuda_context_bytes")
GIB = 2**30


@dataclass(frozen=True)
class Point:
    """One bar or point: `label` on the axis, `series` (a phase, a provider kind), the value
    in `unit`, and where the value came from."""

    label: str
    series: str
    value: float
    unit: str
    basis: str
    source: str


def value(x: Any) -> Any:
    """A figure's value ({value, unit, basis, source} in the budget's JSON); other values as
    they are."""
    return x["value"] if isinstance(x, dict) and "value" in x else x


def basis_kind(basis: str) -> str:
    """'formula: analytic estimate ...' -> 'formula'."""
    return basis.split(":", 1)[0].strip()


def runs_of(phase: dict[str, Any], seeds: int) -> int:
    """How many times a phase runs in the budget formula."""
    return seeds if phase["runs"] == "per_seed" else 1


def term_label(runs: str, seeds: int) -> str:
    return {"once": "one-time", "per_seed": f"per-seed x {seeds}",
            "single_seed": "single-seed"}[runs]


def contingency_label(b: dict[str, Any]) -> str:
    return f"contingency {value(b['contingency_percent']):g}%"


def phase_gpu_hours(b: dict[str, Any]) -> list[Point]:
    """Each phase's GPU hours in the budget (per run x runs), under its formula term, then the
    contingency: they add up to `total_gpu_hours`."""
    out = []
    for p in b["phases"]:
        n = runs_of(p, b["seeds"])
        line = f", plan line {p['line']}" if p.get("line") else ""
        per_run = value(p["gpu_hours_per_run"])
        out.append(Point(term_label(p["runs"], b["seeds"]), p["name"],
                         per_run * n, "GPU h", basis_kind(p["basis"]),
                         f"{per_run:,.4g} GPU h per run x {n} run(s){line}; "
                         f"{p['basis']}"))
    out.append(Point(contingency_label(b), "contingency", value(b["contingency_gpu_hours"]),
                     "GPU h", "assumed", f"{value(b['contingency_percent']):g}% of "
                                         f"{value(b['subtotal_gpu_hours']):,.4g}"
                                         f" GPU h (the plan's contingency)"))
    return out


def cheapest_on_demand(b: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """GPU type -> its cost line with the lowest on-demand total (the plan's own price when it
    states one)."""
    best: dict[str, dict[str, Any]] = {}
    for c in b["costs"]:
        if c["on_demand_usd"] is None:
            continue
        gpu = c.get("gpu") or b["gpu"]
        if gpu not in best or c["on_demand_usd"] < best[gpu]["on_demand_usd"]:
            best[gpu] = c
    return best


def phase_usd(b: dict[str, Any]) -> tuple[list[Point], list[str]]:
    """Each phase's dollars at the cheapest on-demand price of its GPU type, then the
    contingency's; for every priced GPU type they add up to that cost line's `on_demand_usd`.
    Also the phases left out because their GPU type has no price."""
    best = cheapest_on_demand(b)
    out, unpriced = [], []
    contingency_usd, sources = 0.0, []
    share = value(b["contingency_percent"]) / 100
    for p in b["phases"]:
        gpu = p.get("gpu") or b["gpu"]
        c = best.get(gpu)
        if c is None:
            unpriced.append(p["name"])
            continue
        # whole instances of the row (catalog.billing), as the cost line bills each phase
        factor = bill(p["gpus"], c.get("gpus_per_instance", 1)).factor
        hours = value(p["gpu_hours_per_run"]) * runs_of(p, b["seeds"]) * factor
        price = c["usd_per_gpu_hour"]
        where = f"{c['provider']} {c['instance']}, as of {c['as_of']}"
        billed = f" (billed: x {factor:g} whole instances)" if factor != 1 else ""
        out.append(Point(term_label(p["runs"], b["seeds"]), p["name"], hours * price, "USD",
                         "formula", f"{hours:,.4g} GPU h{billed} x ${price:g}/GPU-h on-demand "
                                    f"({where}; catalog price)"))
        contingency_usd += hours * share * price
        if where not in sources:
            sources.append(where)
    if out:
        out.append(Point(contingency_label(b), "contingency", contingency_usd, "USD", "formula",
                         f"{value(b['contingency_percent']):g}% of the phases' GPU h x the same "
                         f"prices "
                         f"({'; '.join(sources)})"))
    return out, unpriced


def provider_costs(b: dict[str, Any]) -> list[Point]:
    """The whole budget's dollars per price row: on-demand and spot (catalog price x the GPU
    hours of that GPU type, contingency included)."""
    out = []
    for c in b["costs"]:
        label = f"{c['provider']} {c['instance']}"
        flags = f"; flags: {'; '.join(c['flags'])}" if c.get("flags") else ""
        for series, total, rate in (("on-demand", c["on_demand_usd"], c["usd_per_gpu_hour"]),
                                    ("spot", c["spot_usd"], c["spot_usd_per_gpu_hour"])):
            if total is None:
                continue
            basis = "assumed" if c["provider"] == "plan" else "formula"
            billed = f", {c['billing']}" if c.get("billing") else ""
            out.append(Point(label, series, total, "USD", basis,
                             f"billed GPU h x ${rate:g}/GPU-h ({c['kind']} price as of "
                             f"{c['as_of']}{billed}){flags}"))
    return out


def phase_memory(b: dict[str, Any]) -> list[Point]:
    """Each training phase's memory per GPU by part, then its total (the peak nvidia-smi would
    show) and the device's memory, in bytes."""
    out = []
    for p in b["phases"]:
        mem = (p.get("details") or {}).get("memory")
        if not isinstance(mem, dict):
            continue
        for part in (*MEMORY_PARTS, "total_bytes", "device_bytes"):
            f = mem.get(part)
            if not isinstance(f, dict):
                continue
            label = part.removesuffix("_bytes").replace("_", " ")
            source = f["source"]
            if part == "total_bytes":
                label = "total (peak)"
                source += f"; the peak is at the {mem.get('peak_phase', 'step')}"
            out.append(Point(label, p["name"], f["value"], "bytes", f["basis"], source))
    return out


@dataclass(frozen=True)
class BurnDown:
    """One phase's plan against actual, in GPU hours left of one run's budget by optimizer
    step: the plan's straight line, what tracked runs spent, and the projection at their
    measured rate (below zero: an overrun)."""

    phase: str
    budget_gpu_hours: float
    steps_planned: float | None
    steps_done: int
    spent_gpu_hours: float
    projected_gpu_hours: float | None
    basis: str


def burn_downs(b: dict[str, Any]) -> list[BurnDown]:
    out = []
    for p in b["phases"]:
        a = p.get("actual")
        if not a or not a["runs"]:
            continue
        planned = a["steps_planned"] or value((p.get("details") or {}).get("optimizer_steps"))
        budget = value(a.get("budgeted_gpu_hours")) if a.get("budgeted_gpu_hours") else None
        out.append(BurnDown(p["name"], budget if budget is not None else
                            value(p["gpu_hours_per_run"]), planned, a["steps_done"],
                            value(a["gpu_hours_spent"]), value(a["projected_gpu_hours"]),
                            a["basis"]))
    return out


#: at most this many sweeps on a page, the newest first
MAX_SWEEPS = 8


def bench_sweeps(measurements: list[Any]) -> list[dict[str, Any]]:
    """Micro-batch sweeps in the ledger: benchmarks of one model, setup and device that differ
    only in micro-batch, at two or more micro-batches (the newest measurement of each). Each
    point keeps its ledger id; `measurements` is `Ledger.measurements()` (newest first).

    Returns plain data: [{label, device, model, points: [{micro_batch, status, tokens_per_s,
    peak_memory_bytes, memory_basis, ledger_id, created_utc}]}], newest sweep first."""
    import json

    groups: dict[str, dict[str, Any]] = {}
    for m in measurements:
        if m.kind != "bench" or m.status not in ("ok", "does-not-fit"):
            continue
        setup = {k: v for k, v in m.setup.items() if k != "micro_batch"}
        key = json.dumps([m.device_key, m.model, m.model_config, setup], sort_keys=True,
                         default=str)
        g = groups.setdefault(key, {"setup": m.setup, "device": m.device_name, "model": m.model,
                                    "points": {}})
        batch = m.setup.get("micro_batch")
        if batch is None or batch in g["points"]:
            continue  # an older measurement of a micro-batch already seen
        g["points"][batch] = {
            "micro_batch": batch, "status": m.status, "tokens_per_s": m.tokens_per_s,
            "peak_memory_bytes": m.peak_memory_bytes,
            "memory_basis": str(m.results.get("peak_memory_basis") or
                                (m.results.get("memory") or {}).get("basis") or "measured"),
            "ledger_id": m.id, "created_utc": m.created_utc}
    out = []
    for g in groups.values():
        if len(g["points"]) < 2:
            continue
        s = g["setup"]
        ckpt = ", checkpointing" if s.get("checkpointing") else ""
        out.append({"label": f"{g['model']} {s.get('method')} {s.get('precision')} seq "
                             f"{s.get('seq_len')}{ckpt} on {g['device']}",
                    "device": g["device"], "model": g["model"],
                    "points": sorted(g["points"].values(), key=lambda p: p["micro_batch"])})
    return out[:MAX_SWEEPS]
