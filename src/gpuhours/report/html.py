"""The budget as one self-contained HTML page: `gpuhours report PLAN.yaml --html out.html`.

The page holds plotly.js itself (no network fetch: a Content-Security-Policy forbids any), the
budget exactly as `gpuhours plan --json` emits it, the ledger's bench sweeps, and the plotly
figures drawn from them (report/chart_data.py), all in one `<script type="application/json">`
block. Every string from the plan, the catalog or the ledger is escaped: HTML-escaped in the
tables, escaped for plotly's own tag subset in the charts (which would otherwise bold `<b>x</b>`),
and the embedded JSON has `<`, `>` and `&` as \\u escapes, so no name can close the script.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from typing import Any

from gpuhours.report import chart_data as cd
from gpuhours.report.units import instance_billed

DATA_ELEMENT_ID = "gpuhours-data"
#: no fetch of any kind: scripts and styles inline only, images as data: URLs
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'unsafe-inline'; "
                           "style-src 'unsafe-inline'; img-src data:; font-src data:")
BASIS_COLOURS = {"formula": "#1f77b4", "catalog": "#2ca02c", "assumed": "#ff7f0e",
                 "measured": "#9467bd", "input": "#8c564b", "trace": "#17becf"}


def esc(text: object) -> str:
    """Text for HTML (element content and attribute values)."""
    return html.escape(str(text), quote=True)


def plot_text(text: object) -> str:
    """Text for a plotly label: plotly reads a subset of HTML tags in labels and decodes
    entities, so escaping < > & shows the text as written."""
    return html.escape(str(text), quote=False)


def script_json(data: Any) -> str:
    """JSON safe inside a <script> element: no `</script>`, no `<!--`, no line separators
    that older parsers end a string at."""
    text = json.dumps(data, allow_nan=False, separators=(",", ":"))
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                         ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(raw, escaped)
    return text


# --- figures (plotly specs as plain data) -------------------------------------------------------

#: a phase keeps its colour in every chart (plotly's default cycles by trace, so a phase left
#: out of one chart would shift the others); no grey, which is the contingency's
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#bcbd22", "#17becf", "#393b79", "#e7ba52", "#637939", "#843c39", "#7b4173",
           "#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363", "#9c9ede")
CONTINGENCY_COLOUR = "#aaaaaa"


def _colours(series: list[str], order: list[str]) -> dict[str, str]:
    """Colour by position in `order` (the plan's phases), else by position among `series`."""
    out = {}
    for i, name in enumerate(series):
        at = order.index(name) if name in order else len(order) + i
        out[name] = CONTINGENCY_COLOUR if name == "contingency" else PALETTE[at % len(PALETTE)]
    return out


def _hover(p: cd.Point, shown: str) -> str:
    return plot_text(f"{p.series}: {shown} ({p.basis}: {p.source})")


def _stacked(points: list[cd.Point], title: str, unit_title: str, scale: float,
             shown: Any, order: list[str] | None = None) -> dict[str, Any]:
    """Bars stacked by series over the points' labels; `scale` converts the values to the
    axis unit; each bar keeps its exact value in customdata. `order`: the names whose
    colours stay put from chart to chart."""
    labels = list(dict.fromkeys(p.label for p in points))
    names = list(dict.fromkeys(p.series for p in points))
    colours = _colours(names, order or [])
    traces = []
    for series in names:
        mine = [p for p in points if p.series == series]
        traces.append({"type": "bar", "name": plot_text(series),
                       "x": [plot_text(p.label) for p in mine],
                       "y": [p.value / scale for p in mine],
                       "customdata": [p.value for p in mine],
                       "hovertext": [_hover(p, shown(p.value)) for p in mine],
                       "hoverinfo": "text", "marker": {"color": colours[series]}})
    return {"data": traces, "layout": {
        "title": {"text": plot_text(title)}, "barmode": "stack",
        "xaxis": {"categoryorder": "array", "categoryarray": [plot_text(x) for x in labels]},
        "yaxis": {"title": {"text": unit_title}}, "margin": {"t": 50, "b": 110},
        "legend": {"orientation": "h", "y": -0.3, "traceorder": "normal"}, "hoverlabel": {"align": "left"}}}


def _grouped(points: list[cd.Point], title: str, unit_title: str, scale: float,
             shown: Any, order: list[str] | None = None) -> dict[str, Any]:
    fig = _stacked(points, title, unit_title, scale, shown, order)
    fig["layout"]["barmode"] = "group"
    return fig


def _burn_down(bd: list[cd.BurnDown]) -> dict[str, Any]:
    traces = []
    for d in bd:
        name = plot_text(d.phase)
        end = d.steps_planned or d.steps_done
        traces.append({"type": "scatter", "mode": "lines", "name": f"{name}: plan",
                       "x": [0, end], "y": [d.budget_gpu_hours, 0.0],
                       "line": {"dash": "dot"}, "hoverinfo": "text",
                       "hovertext": [plot_text(f"{d.phase}: {d.budget_gpu_hours:,.2f} GPU h "
                                               f"budgeted per run (the plan's estimate)")] * 2})
        left = d.budget_gpu_hours - d.spent_gpu_hours
        traces.append({"type": "scatter", "mode": "lines+markers", "name": f"{name}: spent",
                       "x": [0, d.steps_done], "y": [d.budget_gpu_hours, left],
                       "hoverinfo": "text", "hovertext": [plot_text(
                           f"{d.phase}: {d.spent_gpu_hours:,.3f} GPU h spent over "
                           f"{d.steps_done} steps ({d.basis})")] * 2})
        if d.projected_gpu_hours is not None and d.steps_planned:
            traces.append({"type": "scatter", "mode": "lines", "name": f"{name}: projected",
                           "x": [d.steps_done, d.steps_planned],
                           "y": [left, d.budget_gpu_hours - d.projected_gpu_hours],
                           "line": {"dash": "dash"}, "hoverinfo": "text",
                           "hovertext": [plot_text(
                               f"{d.phase}: projected {d.projected_gpu_hours:,.2f} GPU h at "
                               f"the measured rate ({d.basis})")] * 2})
    return {"data": traces, "layout": {
        "title": {"text": "Plan against actual: GPU hours left of one run's budget"},
        "xaxis": {"title": {"text": "optimizer steps"}},
        "yaxis": {"title": {"text": "GPU h left (below 0: overrun)"}}, "margin": {"t": 50}}}


def _sweep(sweeps: list[dict[str, Any]], key: str, title: str, unit: str,
           scale: float) -> dict[str, Any]:
    traces = []
    for s in sweeps:
        pts = [p for p in s["points"] if p["status"] == "ok" and p[key] is not None]
        traces.append({"type": "scatter", "mode": "lines+markers", "name": plot_text(s["label"]),
                       "x": [p["micro_batch"] for p in pts], "y": [p[key] / scale for p in pts],
                       "customdata": [p[key] for p in pts], "hoverinfo": "text",
                       "hovertext": [plot_text(
                           f"micro-batch {p['micro_batch']}: {p[key] / scale:,.4g} {unit} "
                           f"(measured: ledger #{p['ledger_id']}, {p['created_utc']}"
                           + (f"; {p['memory_basis']}" if key == "peak_memory_bytes" else "")
                           + ")") for p in pts]})
    return {"data": traces, "layout": {
        "title": {"text": title}, "xaxis": {"title": {"text": "micro-batch"}, "type": "log",
                                             "dtick": 0.30102999566398},
        "yaxis": {"title": {"text": unit}}, "margin": {"t": 50, "b": 110},
        "legend": {"orientation": "h", "y": -0.3}}}


def figures(b: dict[str, Any], sweeps: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The page's plotly figures by element id, from the budget JSON and the sweeps."""
    phases = [p["name"] for p in b["phases"]]
    figs = {"chart-gpu-hours": _stacked(
        cd.phase_gpu_hours(b), f"GPU hours by phase: {cd.value(b['total_gpu_hours']):,.1f} GPU h",
        "GPU hours", 1.0, lambda v: f"{v:,.2f} GPU h", phases)}
    usd_points, _ = cd.phase_usd(b)
    if usd_points:
        figs["chart-usd"] = _stacked(usd_points, "Dollars by phase at the cheapest on-demand "
                                                  "price", "USD", 1.0, lambda v: f"${v:,.0f}",
                                     phases)
    providers = cd.provider_costs(b)
    if providers:
        figs["chart-providers"] = _grouped(providers, "Cost of the budget by price row",
                                           "USD", 1.0, lambda v: f"${v:,.0f}")
    memory = cd.phase_memory(b)
    if memory:
        figs["chart-memory"] = _grouped(memory, "Memory per GPU by part (GiB = 2^30 bytes)",
                                        "GiB", cd.GIB, lambda v: f"{v / cd.GIB:,.2f} GiB", phases)
    bd = cd.burn_downs(b)
    if bd:
        figs["chart-burn-down"] = _burn_down(bd)
    if sweeps:
        figs["chart-sweep-tokens"] = _sweep(sweeps, "tokens_per_s", "Bench sweeps: tokens/s "
                                            "by micro-batch (measured)", "tokens/s", 1.0)
        figs["chart-sweep-memory"] = _sweep(sweeps, "peak_memory_bytes", "Bench sweeps: peak "
                                            "memory by micro-batch (measured)", "GiB", cd.GIB)
    return figs


# --- the page -----------------------------------------------------------------------------------

def _table(headers: Iterable[str], rows: Iterable[Iterable[object]], cls: str = "") -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{esc(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _money(v: float | None) -> str:
    return "-" if v is None else f"${v:,.0f}"


def _chart(fig_id: str, figs: dict[str, Any], note: str = "") -> str:
    if fig_id not in figs:
        return f'<p class="none">{esc(note)}</p>' if note else ""
    return f'<div class="chart" id="{esc(fig_id)}"></div>'


def _sections(b: dict[str, Any], sweeps: list[dict[str, Any]], figs: dict[str, Any],
              ledger_note: str) -> list[str]:
    seeds = b["seeds"]
    phase_rows = [[p["name"], p["kind"], cd.term_label(p["runs"], seeds), p["gpu"] or b["gpu"],
                   f"{p['gpus']} ({p['gpus_basis']})" if p.get("gpus_basis") else p["gpus"],
                   f"{cd.value(p['gpu_hours_per_run']):,.2f}",
                   f"{cd.value(p['wall_hours_per_run']):,.2f}",
                   p["bottleneck"], p["basis"], p["formula"]] for p in b["phases"]]
    _, unpriced = cd.phase_usd(b)
    out = [
        "<h2>Phases</h2>",
        f'<p class="formula">{esc(b["formula"])} (formula: the plan\'s budget formula)</p>',
        _chart("chart-gpu-hours", figs),
        _chart("chart-usd", figs, "No catalog price for the plan's GPUs: no dollars."),
        (f'<p class="none">Left out of the dollars (no price for their GPU type): '
         f'{esc(", ".join(unpriced))}.</p>' if unpriced and "chart-usd" in figs else ""),
        _table(["phase", "kind", "runs", "GPU", "GPUs", "GPU h per run", "wall h per run",
                "bottleneck", "basis", "formula"], phase_rows, "phases"),
        "<h2>Cost by provider</h2>",
        _chart("chart-providers", figs, "No price rows for the plan's GPUs."),
        _table(["GPU", "provider", "instance", "$/GPU-h", "on-demand", "spot $/GPU-h", "spot",
                "as of", "flags"],
               [[c.get("gpu", ""), f"{c['provider']} ({c['kind']})",
                 instance_billed(c["instance"], c.get("billing", "")),
                 "-" if c["usd_per_gpu_hour"] is None else f"${c['usd_per_gpu_hour']:g}",
                 _money(c["on_demand_usd"]),
                 "-" if c["spot_usd_per_gpu_hour"] is None else f"${c['spot_usd_per_gpu_hour']:g}",
                 _money(c["spot_usd"]), c["as_of"], "; ".join(c.get("flags") or [])]
                for c in b["costs"]], "costs"),
        '<p class="basis">Totals: catalog price per GPU-hour x the GPU hours billed on that GPU '
        'type, contingency included (formula): each phase pays whole instances, ceil(its GPUs / '
        'GPUs per instance); prices are the catalog\'s, read on the date shown.</p>',
        "<h2>Memory per GPU</h2>",
        _chart("chart-memory", figs, "No training phase with a memory estimate."),
        '<p class="basis">Parts are not all alive at once: the total is the peak (tensors at '
        'the moment named, the allocator reserve and the CUDA context); GiB = 2^30 bytes.</p>',
        "<h2>Plan against actual</h2>",
        _chart("chart-burn-down", figs, "No tracked runs of this project's phases "
                                        f"({ledger_note}): nothing spent yet."),
        "<h2>Bench sweeps</h2>",
        _chart("chart-sweep-tokens", figs, f"No micro-batch sweep in the ledger ({ledger_note})."),
        _chart("chart-sweep-memory", figs),
        "<h2>Expectation checks</h2>",
        _table(["phase", "stated against physics"],
               [[p["name"], c] for p in b["phases"] for c in p["checks"]] or [["-", "none"]],
               "checks"),
        "<h3>Warnings: where the plan's own figures disagree with physics</h3>",
        "<ul>" + "".join(f"<li>{esc(w)}</li>" for w in b["warnings"]) + "</ul>"
        if b["warnings"] else '<p class="none">none</p>',
        "<h2>Assumptions and sources</h2>",
        _table(["what", "basis and source"], _sources(b, sweeps), "sources"),
    ]
    return [s for s in out if s]


def _sources(b: dict[str, Any], sweeps: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for a in b["assumptions"]:
        name, _, source = a.partition(": ")
        rows.append([name, f"assumed: {source}"])
    rows.append(["wall clock", f"formula: {b['wall_clock_basis']}"])
    for p in b["phases"]:
        rows.append([f"phase {p['name']}", f"{p['basis']}; {p['formula']}"])
        for k, f in (p.get("storage") or {}).items():
            rows.append([f"phase {p['name']}, storage {k}", f"{f['basis']}: {f['source']}"])
    if b.get("electricity_basis"):
        rows.append(["electricity", f"formula: {b['electricity_basis']}"])
    seen = set()
    for p in cd.phase_memory(b):
        if p.label not in seen:
            seen.add(p.label)
            rows.append([f"memory, {p.label}", f"{p.basis}: {p.source}"])
    for s in sweeps:
        ids = ", ".join(f"#{p['ledger_id']}" for p in s["points"])
        rows.append([f"sweep {s['label']}", f"measured: ledger {ids}"])
    return rows


_STYLE = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1100px;
color:#222;padding:0 1em}
h1{font-size:1.6em}h2{margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85em;margin:1em 0;width:100%}
th,td{border:1px solid #ddd;padding:.3em .5em;text-align:left;vertical-align:top}
th{background:#f5f5f5}.chart{height:460px}.none,.basis{color:#666}
.formula{font-family:ui-monospace,monospace;background:#f8f8f8;padding:.5em}
.summary{font-size:1.1em}
"""

_SCRIPT = """
(function () {
  var data = JSON.parse(document.getElementById('DATA_ELEMENT_ID').textContent);
  var ids = Object.keys(data.figures);
  var config = {displaylogo: false, responsive: true};
  Promise.all(ids.map(function (id) {
    var f = data.figures[id];
    return Plotly.newPlot(id, f.data, f.layout, config);
  })).then(function () {
    document.body.setAttribute('data-rendered', String(ids.length));
  }, function (e) {
    document.body.setAttribute('data-render-error', String(e));
  });
})();
""".replace("DATA_ELEMENT_ID", DATA_ELEMENT_ID)


def render_page(b: dict[str, Any], sweeps: list[dict[str, Any]], plotly_js: str,
                ledger_note: str = "no ledger") -> str:
    """The page's HTML. `b`: the budget as `plan --json` emits it; `plotly_js`: plotly.js."""
    if "</script" in plotly_js.lower():
        raise ValueError("plotly.js holds '</script', which would end its element early")
    figs = figures(b, sweeps)
    data = {"budget": b, "sweeps": sweeps, "figures": figs}
    best = cd.cheapest_on_demand(b)
    money = "; ".join(f"{gpu}: {_money(c['on_demand_usd'])} at {c['provider']} ({c['as_of']})"
                      for gpu, c in best.items()) or "no catalog price"
    summary = (f"<p class=\"summary\"><b>{cd.value(b['total_gpu_hours']):,.0f} GPU hours</b> "
               f"on {esc(b['gpu'])} ({b['seeds']} seed(s), {cd.value(b['contingency_percent']):g}"
               f"% contingency included); wall clock {cd.value(b['wall_clock_hours']):,.0f} h; "
               f"cheapest "
               f"on-demand: {esc(money)}. {len(b['warnings'])} warning(s).</p>")
    title = f"Compute budget: {b['project']}"
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta name="generator" content="{GENERATOR}">',
        f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title><style>{_STYLE}</style>",
        f"<script>{plotly_js}</script></head><body>",
        f"<h1>{esc(title)}</h1>",
        '<p class="basis">Written by <code>gpuhours report</code> from the same budget as '
        "<code>gpuhours plan --json</code>; every number's basis (formula, catalog, assumed, "
        "measured) is beside it or in its hover text.</p>",
        summary, *_sections(b, sweeps, figs, ledger_note),
        f'<script type="application/json" id="{DATA_ELEMENT_ID}">{script_json(data)}</script>',
        f"<script>{_SCRIPT}</script>", "</body></html>", ""])


#: the page's <meta name="generator">, by which a later `report --html` knows its own output
GENERATOR = "gpuhours report"


def is_report_page(head: bytes) -> bool:
    """Whether the start of a file is a page this command wrote: its generator meta, or, in
    pages written before it had one, the title every page has after its style."""
    if not head.lstrip().startswith(b"<!DOCTYPE html>"):
        return False
    return (f'<meta name="generator" content="{GENERATOR}">'.encode() in head
            or b"<title>Compute budget: " in head)


def write_report(budget: Any, path: Any, ledger: Any = None, ledger_note: str = "no ledger"
                 ) -> dict[str, Any]:
    """Write the page for `budget` (a gpuhours.plan.results.Budget) at `path`, atomically;
    with a `ledger`, its bench sweeps too. Needs plotly (the `report` extra). Returns what the
    page shows: {path, figures (their ids), sweeps (how many), bytes}."""
    from plotly.offline import get_plotlyjs

    from gpuhours.files import atomic_write_text

    sweeps = cd.bench_sweeps(ledger.measurements()) if ledger is not None else []
    b = budget.model_dump(mode="json")
    page = render_page(b, sweeps, get_plotlyjs(), ledger_note)
    atomic_write_text(path, page)
    return {"path": str(path), "figures": list(figures(b, sweeps)), "sweeps": len(sweeps),
            "bytes": len(page.encode())}
