"""Rich tables for `gpuhours trace --module`: memory as the batch grows, the largest batch that
fits, and the roofline time per top-level module. Every column's basis is printed under it."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from gpuhours.report.text import esc
from gpuhours.report.units import gib, seconds, si
from gpuhours.trace.module_result import PARTS, ModuleTraceResult


def _g(n_bytes: float) -> str:
    """GiB without the unit, for table cells whose title says GiB."""
    return f"{n_bytes / 2**30:,.2f}"


def _ms(s: float) -> str:
    """Milliseconds in at most 6 characters (the column's title says ms)."""
    ms = s * 1e3
    if ms >= 100:
        return f"{ms:,.0f}"
    return f"{ms:.1f}" if ms >= 1 else f"{ms:.3f}"


_SHORT = {"parameters": "params", "gradients": "grads", "optimizer state": "optim",
          "activations": "activ.", "workspace": "work"}


def render_module_trace(r: ModuleTraceResult, console: Console) -> None:
    console.print(f"[bold]{esc(r.module)}[/bold] traced on fake tensors - "
                  + esc(f"inputs {', '.join(r.inputs)}; {r.precision}; {r.optimizer}; "
                        f"{r.total_params / 1e6:,.2f} M parameters, "
                        f"{r.trainable_params / 1e6:,.2f} M trainable (trace)"))
    for note in r.notes:
        console.print(f"[yellow]note:[/yellow] {esc(note)}")

    t = Table(title=f"One training step on {esc(r.gpu)} as the batch grows (GiB = 2^30 bytes)",
              title_justify="left")
    t.add_column("batch", justify="right")
    for part in PARTS:
        t.add_column(_SHORT[part], justify="right")
    t.add_column("on GPU", justify="right")
    t.add_column("fits", justify="left")
    for b in r.by_batch:
        mark = "[green]yes[/green]" if b.fits else "[red]no[/red]"
        t.add_row(f"{b.batch:,}", *(_g(b.parts_bytes.get(p, 0.0)) for p in PARTS),
                  _g(b.total_bytes), mark)
    console.print(t)
    console.print("[dim]parts at the step's peak: " + esc(r.sources["parts"]) + ". on GPU: "
                  "reserved (" + esc(r.sources["reserved"]) + ") + CUDA context "
                  f"{gib(r.by_batch[0].cuda_context_bytes)} (" + esc(r.sources["cuda_context"])
                  + "). fits: on GPU <= limit " + f"{gib(r.limit_bytes)} ("
                  + esc(r.sources["limit"]) + ").[/dim]")
    if r.largest_batch:
        at = next(b for b in r.by_batch if b.batch == r.largest_batch)
        console.print(f"largest batch that fits {esc(r.gpu)}: [bold]{r.largest_batch:,}[/bold] "
                      f"({_g(at.total_bytes)} of {gib(r.gpu_memory_bytes)}; "
                      f"{gib(r.headroom_bytes)} free; peak at {esc(at.peak_at)})")
    else:
        console.print(f"[red]batch 1 does not fit {esc(r.gpu)}[/red] within the limit of "
                      f"{gib(r.limit_bytes)}")
    console.print(f"[dim]basis: {esc(r.largest_basis)} ({r.traces} traces, "
                  f"{r.trace_wall_s:.1f} s)[/dim]")

    rl = r.roofline
    m = Table(title=f"Where the step's time would go on {esc(rl.device)} at batch {rl.batch:,} "
                    "(a roofline model)", title_justify="left", box=box.SIMPLE_HEAD)
    m.add_column("component", no_wrap=True)
    for col in ("params", "FLOP", "bytes", "fwd ms", "bwd ms", "ms", "%"):
        m.add_column(col, justify="right", no_wrap=True, min_width=4 if col == "%" else None)
    for row in rl.rows:
        params = "" if not row.params else (
            si(row.params) + ("" if row.trainable_params == row.params else
                              " fr." if not row.trainable_params else
                              f" ({si(row.trainable_params)} tr.)"))
        m.add_row(esc(row.module), params, si(row.forward_flops + row.backward_flops),
                  si(row.bytes, "B"), _ms(row.forward_s), _ms(row.backward_s),
                  _ms(row.time_s), f"{row.share:.0%}")
    m.add_row("[bold]step[/bold]", "", si(sum(x.forward_flops + x.backward_flops
                                              for x in rl.rows)),
              si(sum(x.bytes for x in rl.rows), "B"), "", "",
              f"[bold]{_ms(rl.step_time_s)}[/bold]", "100%")
    console.print(m)
    console.print("[dim]params: fr. frozen, tr. trainable; (loss, glue): the loss and the model's "
                  "own forward outside its children; FLOP: forward + backward; fwd ms, bwd ms, ms (with "
                  "the optimizer step's): roofline time.[/dim]")
    console.print(f"[dim]FLOPs and bytes: {esc(r.sources['flops'])}. Time: {esc(r.sources['time'])}"
                  f"; compute-bound {seconds(rl.compute_bound_s)}, memory-bound "
                  f"{seconds(rl.memory_bound_s)}. {esc(rl.note)}.[/dim]")
    console.print("[dim]efficiencies (estimate/assumptions.py): "
                  + esc("; ".join(rl.assumptions)) + "[/dim]")
    c = rl.compile
    console.print(f"with torch.compile: between [bold]{seconds(c.fastest_s)}[/bold] and "
                  f"[bold]{seconds(c.slowest_s)}[/bold] a step")
    console.print(f"[dim]{esc(c.basis)}[/dim]")
