"""Rich tables for a trace and for a fit confirmed by a trace. Every number beside its basis."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from gpuhours.report.text import esc
from gpuhours.report.units import gib, pct, seconds, si
from gpuhours.trace.accounting import ROLES
from gpuhours.trace.result import PeakPlace, TraceFigure, TraceResult

if TYPE_CHECKING:
    from gpuhours.trace.confirm import FitConfirmation


def _basis(f: TraceFigure) -> str:
    return f"[dim]{esc(f.basis)}, {esc(f.source)}[/dim]"


def _where(p: PeakPlace | None) -> str:
    if p is None:
        return "-"
    step = "warm-up" if p.step == 0 else f"step {p.step}"
    return esc(f"{step}, {p.phase}, {p.module or '-'}, {p.op}")


def _setup_line(r: TraceResult) -> str:
    s = r.setup
    lora = f" rank {s['lora_rank']} on {s['lora_targets']}" if s["method"] != "full" else ""
    accum = f" x accumulation {s['grad_accum']}" if s["grad_accum"] != 1 else ""
    return (f"[bold]{esc(r.model)}[/bold] traced - " + esc(
            f"{s['method']}{lora}, {s['precision']} (as "
            f"{r.precision_as_traced}), micro-batch {s['micro_batch']} x seq {s['seq_len']}"
            f"{accum}, checkpointing {'on' if s['checkpointing'] else 'off'}, {s['optimizer']} "
            f"({s['optimizer_impl']}), {s['steps']} step(s)"))


def render_trace(r: TraceResult, console: Console) -> None:
    """The trace of one setup: peak and where, breakdown, allocator model, FLOPs, roofline."""
    console.print(_setup_line(r))
    console.print(f"[dim]model: {esc(r.model_basis)}; {r.total_params.value / 1e9:.3f} B parameters, "
                  f"{r.trainable_params.value / 1e6:,.1f} M trainable (trace)[/dim]")
    for note in r.notes:
        console.print(f"[yellow]note:[/yellow] {esc(note)}")

    mem = Table(title="Memory of live tensors (GiB = 2^30 bytes)", title_justify="left")
    for col, just in (("part", "left"), ("at the peak", "right"), ("own maximum", "right")):
        mem.add_column(col, justify=just)  # type: ignore[arg-type]
    for role in ROLES:
        at = r.at_peak_bytes.get(role)
        mx = r.max_over_step_bytes.get(role)
        if at is None and mx is None:
            continue
        mem.add_row(role, gib(at.value) if at else "-", gib(mx.value) if mx else "-")
    mem.add_row("[bold]peak of live tensors[/bold]", f"[bold]{gib(r.peak_bytes.value)}[/bold]",
                "")
    console.print(mem)
    console.print(f"peak at: [bold]{_where(r.peak_where)}[/bold]")
    console.print(f"[dim]basis: {esc(r.peak_bytes.basis)}, {esc(r.peak_bytes.source)}[/dim]")

    t = Table(title="Peaks of the step, and what a GPU would reserve", title_justify="left")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_column("basis", overflow="fold")
    last = max((p.step for p in r.phase_peaks), default=0)
    for p in r.phase_peaks:
        if p.step == last:  # earlier steps only built up the state the last one has
            t.add_row(f"peak in {p.phase}", gib(p.peak_bytes.value),
                      f"[dim]trace: {_where(p.where)}[/dim]")
    t.add_row("after the last step", gib(r.persistent_bytes.value), _basis(r.persistent_bytes))
    a = r.allocator
    t.add_row("allocated, peak (rounded blocks)", gib(a.peak_allocated_bytes.value),
              _basis(a.peak_allocated_bytes))
    t.add_row("[bold]reserved, peak[/bold]", f"[bold]{gib(a.peak_reserved_bytes.value)}[/bold]",
              _basis(a.peak_reserved_bytes))
    if r.analytic_memory is not None:
        m = r.analytic_memory
        t.add_row("analytic peak of live tensors", gib(m.tensors_bytes.value),
                  f"[dim]formula ({m.precision}), {m.tensors_bytes.source}: {pct(m.error)} "
                  f"vs the trace; peak at {m.phase}[/dim]")
    console.print(t)
    console.print(f"[dim]{a.note}[/dim]")

    f = r.flops
    ft = Table(title="FLOPs of one step", title_justify="left")
    ft.add_column("quantity")
    ft.add_column("value", justify="right")
    ft.add_column("basis", overflow="fold")
    ft.add_row("[bold]traced[/bold]", f"[bold]{si(f.traced_flops.value, 'FLOP')}[/bold]",
               _basis(f.traced_flops))
    for phase, fig in f.by_phase_flops.items():
        ft.add_row(f"  {phase}", si(fig.value, "FLOP"), "[dim]trace[/dim]")
    ft.add_row("analytic, full S x S attention", si(f.analytic_full_attention_flops.value, "FLOP"),
               _basis(f.analytic_full_attention_flops))
    ft.add_row("analytic, causal half (as estimate reports)", si(f.analytic_flops.value, "FLOP"),
               _basis(f.analytic_flops))
    ft.add_row("traced / analytic (full S x S)", f"{f.ratio:.3f}", "[dim]ratio[/dim]")
    console.print(ft)
    console.print(f"[dim]{f.convention}[/dim]")

    if r.roofline is not None:
        rl = r.roofline
        rt = Table(title=f"Step time on {esc(rl.device)}: a roofline per operator (a model)",
                   title_justify="left")
        for col in ("operator", "calls", "FLOPs", "bytes", "time", "bound"):
            rt.add_column(col, justify="left" if col in ("operator", "bound") else "right")
        for op in rl.top_ops:
            rt.add_row(esc(op.op), f"{op.calls:,}", si(op.flops), si(op.bytes, "B"),
                       seconds(op.time_s), op.bound)
        console.print(rt)
        console.print(f"step time at datasheet peaks: [bold]{seconds(rl.peak_time_s.value)}"
                      f"[/bold] (compute-bound {seconds(rl.compute_bound_s)}, memory-bound "
                      f"{seconds(rl.memory_bound_s)}, {rl.operators:,} operators)")
        console.print(f"at assumed efficiencies: [bold]"
                      f"{seconds(rl.assumed_efficiency_time_s.value)}[/bold]")
        console.print(f"[dim]{rl.assumed_efficiency_time_s.basis}: "
                      f"{rl.assumed_efficiency_time_s.source}; {rl.note}[/dim]")
    console.print(f"[dim]traced in {r.trace_wall_s:.1f} s, max resident memory "
                  f"{r.max_rss_bytes / 2**20:,.0f} MiB[/dim]")


def render_confirmation(c: FitConfirmation, console: Console) -> None:
    """`gpuhours fit --trace`: the analytic answer beside the trace of the chosen setup."""
    t = Table(title=f"Checked by a trace: micro-batch {c.micro_batch} on {esc(c.gpu)}",
              title_justify="left")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_column("basis", overflow="fold")
    t.add_row("analytic peak of live tensors", gib(c.analytic_tensors_bytes.value),
              _basis(c.analytic_tensors_bytes))
    t.add_row("traced peak of live tensors", gib(c.traced_peak_bytes.value),
              _basis(c.traced_peak_bytes))
    t.add_row("reserved by the allocator", gib(c.reserved_bytes.value), _basis(c.reserved_bytes))
    t.add_row("CUDA context", gib(c.cuda_context_bytes.value), _basis(c.cuda_context_bytes))
    t.add_row("[bold]total per GPU[/bold]", f"[bold]{gib(c.total_bytes.value)}[/bold]",
              _basis(c.total_bytes))
    t.add_row("limit (device x (1 - headroom))", gib(c.limit_bytes.value), _basis(c.limit_bytes))
    console.print(t)
    colour = "green" if c.fits_by_trace else "red"
    console.print(f"[{colour}]{esc(c.verdict)}[/{colour}]")
    for note in c.notes:
        console.print(f"[yellow]note:[/yellow] {esc(note)}")
