"""Terminal rendering of `bench --workload inference`: the latency table by backend and batch,
the drift table against eager, and the bases. Nothing here computes a figure."""

from __future__ import annotations

from rich.console import Console

from gpuhours.bench.inference import InferenceResult, summary_lines
from gpuhours.report.tables import Col, Notes, print_table
from gpuhours.report.text import esc
from gpuhours.report.units import seconds


def _rate(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}" if x >= 1 else f"{x:.3g}"


def render_inference(r: InferenceResult, console: Console, ledger_path: str | None) -> None:
    p = console.print
    p(f"[bold]inference: {esc(r.model)}[/bold] ({r.params:,} parameters; {esc(r.model_basis)})",
      highlight=False)
    p(f"  inputs  {esc('; '.join(r.inputs))} (B = batch)", highlight=False)
    notes = Notes()
    cols = (Col("backend", "name"), Col("batch", "number", "right"),
            Col("p50/sample", "number", "right"), Col("p95/sample", "number", "right"),
            Col("samples/s", "number", "right"), Col("calls", "number", "right"),
            Col("median CV", "number", "right"))
    rows = []
    for b in r.backends:
        if b.status != "ok":
            rows.append([esc(b.backend), "-", "-", "-", "-", "-", "[red]failed[/red]"])
            continue
        for t in b.timings:
            cv = (f"{t.median_cv:.1%}" if t.median_cv is not None else "-") \
                + ("" if t.converged else " [yellow]*[/yellow]")
            rows.append([esc(b.backend), str(t.batch), seconds(t.sample_latency_p50_s),
                         seconds(t.sample_latency_p95_s), _rate(t.samples_per_s), str(t.calls),
                         cv])
    print_table(console, cols, rows, notes=notes,
                title="Latency by backend and batch (measured)")
    not_converged = [f"{b.backend} b{t.batch}" for b in r.backends for t in b.timings
                     if not t.converged]
    if not_converged:
        p(f"  [yellow]*[/yellow] not converged: stopped at the time limit ({r.max_seconds:g} s "
          f"per backend) before the median's CV fell under {r.target_cv:.0%}: "
          f"{esc(', '.join(not_converged))}", highlight=False)
    else:
        p(f"  every median converged: its CV under {r.target_cv:.0%} within {r.max_seconds:g} s "
          "per backend", highlight=False)
    drift_cols = (Col("backend", "name"), Col("runs on", "name"),
                  Col("max |diff|", "number", "right"), Col("max |eager|", "number", "right"),
                  Col("top-1 agree", "number", "right"))
    drift_rows = []
    for b in r.backends:
        if b.status != "ok" or b.drift is None or b.backend == "eager":
            continue
        d = b.drift
        agree = (f"{d.top1_agreement:.1%} of {d.top1_rows}" if d.top1_agreement is not None
                 else "-")
        drift_rows.append([esc(b.backend), esc(_short(b.runs_on)), f"{d.max_abs_diff:.3g}",
                           f"{d.max_abs_eager:.3g}", agree])
    if drift_rows:
        print_table(console, drift_cols, drift_rows, notes=notes,
                    title="Outputs against eager on the same inputs (measured)")
    for b in r.backends:
        if b.status != "ok":
            p(f"  [red]{esc(b.backend)} failed[/red]: {esc(b.error)}", highlight=False)
        elif b.backend == "compile":
            firsts = ", ".join(f"b{t.batch} {seconds(t.first_call_s)}" for t in b.timings)
            p(f"  compile: first call per batch (compilation, untimed): {firsts}",
              highlight=False)
        elif b.prepare_s:
            prep = ", ".join(f"{k.removesuffix('_s')} {seconds(v)}" for k, v in b.prepare_s.items())
            p(f"  {esc(b.backend)}: {esc(prep)} (untimed); {esc(b.prepare_basis)}",
              highlight=False)
    for t_line in summary_lines(r):
        p(f"  {esc(t_line)}", highlight=False)
    p(f"  timing: {esc(r.timing_basis)}", highlight=False)
    p(f"  drift: {esc(r.drift_basis)}", highlight=False)
    if r.ledger_ids:
        p(f"  ledger #{', #'.join(map(str, r.ledger_ids))} in {esc(ledger_path)}",
          highlight=False)


def _short(provider: str) -> str:
    """An ONNX Runtime provider's short name: CPUExecutionProvider -> ORT CPU."""
    return ("ORT " + provider.removesuffix("ExecutionProvider")) if provider.endswith(
        "ExecutionProvider") else provider
