"""Rich tables for estimates, fits and catalogs. Every number sits beside its basis."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from gpuhours.estimate.estimator import TrainingEstimate
from gpuhours.estimate.figures import Figure
from gpuhours.estimate.fit import Candidate, FitResult
from gpuhours.report.units import gib, pct, seconds, si, usd


def _basis(f: Figure) -> str:
    return f"[dim]{f.basis}: {f.source}[/dim]"


def render_training(e: TrainingEstimate, console: Console) -> None:
    s = e.setup
    console.print(
        f"[bold]{e.model}[/bold] on {e.num_gpus} x [bold]{e.gpu}[/bold] - {s['method']}, "
        f"{s['precision']}, micro-batch {s['micro_batch']} x seq {s['seq_len']} x accumulation "
        f"{s['grad_accum']}, checkpointing {'on' if s['checkpointing'] else 'off'}, "
        f"ZeRO {s['zero_stage']}, {s['optimizer']}")
    console.print(f"[dim]model: {e.model_basis}[/dim]")

    m = e.memory
    mem = Table(title="Memory per GPU (GiB = 2^30 bytes)", title_justify="left")
    mem.add_column("part")
    mem.add_column("size", justify="right")
    mem.add_column("basis", overflow="fold")
    rows = [("weights", m.weights_bytes), ("gradients", m.gradients_bytes),
            ("fp32 master weights", m.master_weights_bytes),
            ("optimizer state", m.optimizer_bytes), ("activations", m.activations_bytes),
            ("logits and loss", m.logits_bytes),
            ("optimizer temporaries", m.optimizer_temporaries_bytes),
            ("peak of live tensors", m.tensors_bytes),
            ("allocator reserve", m.allocator_reserve_bytes),
            ("CUDA context", m.cuda_context_bytes)]
    for name, fig in rows:
        if fig.value:
            mem.add_row(name, gib(fig.value), _basis(fig))
    verdict = "[green]fits[/green]" if m.fits else "[red]does not fit[/red]"
    mem.add_row("[bold]total[/bold]", f"[bold]{gib(m.total_bytes.value)}[/bold]",
                f"{verdict} in {gib(m.device_bytes.value)}; peak at {m.peak_phase}")
    console.print(mem)

    t = Table(title="Step time and throughput", title_justify="left")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_column("basis", overflow="fold")
    t.add_row("model FLOPs per token", si(e.model_flops_per_token.value, "FLOP"),
              _basis(e.model_flops_per_token))
    if e.hardware_flops_per_token.value != e.model_flops_per_token.value:
        t.add_row("hardware FLOPs per token", si(e.hardware_flops_per_token.value, "FLOP"),
                  _basis(e.hardware_flops_per_token))
    labels = {"matmul_s": "matmuls", "attention_s": "attention kernels",
              "memory_bound_s": "memory-bound work", "launch_floor_s": "launch floor (not added)",
              "optimizer_s": "optimizer step",
              "communication_s": "communication (not added)",
              "communication_exposed_s": "communication not hidden"}
    for key, fig in e.step_time_breakdown_s.items():
        if fig.value > 0:
            t.add_row(f"  {labels.get(key, key)}", seconds(fig.value), _basis(fig))
    t.add_row("[bold]step time[/bold]", f"[bold]{seconds(e.step_time_s.value)}[/bold]",
              f"bottleneck: [bold]{e.bottleneck}[/bold]")
    t.add_row("tokens/s per GPU", f"{e.tokens_per_s_per_gpu.value:,.0f}",
              _basis(e.tokens_per_s_per_gpu))
    if e.num_gpus > 1:
        t.add_row("tokens/s, all GPUs", f"{e.tokens_per_s.value:,.0f}", _basis(e.tokens_per_s))
    t.add_row("GEMM efficiency", pct(e.gemm_efficiency.value), _basis(e.gemm_efficiency))
    t.add_row("MFU", pct(e.mfu.value), _basis(e.mfu))
    if e.hfu.value != e.mfu.value:
        t.add_row("HFU (with recomputation)", pct(e.hfu.value), _basis(e.hfu))
    console.print(t)

    if e.totals is not None:
        tot = e.totals
        w = Table(title="The whole run", title_justify="left")
        w.add_column("quantity")
        w.add_column("value", justify="right")
        w.add_column("basis", overflow="fold")
        w.add_row("tokens", si(tot.tokens.value), _basis(tot.tokens))
        w.add_row("optimizer steps", f"{tot.optimizer_steps.value:,.0f}",
                  _basis(tot.optimizer_steps))
        w.add_row("[bold]GPU hours[/bold]", f"[bold]{tot.gpu_hours.value:,.1f}[/bold]",
                  _basis(tot.gpu_hours))
        w.add_row(f"wall clock on {e.num_gpus} GPU(s)", f"{tot.wall_clock_hours.value:,.1f} h",
                  _basis(tot.wall_clock_hours))
        console.print(w)
        if tot.cost_usd:
            c = Table(title=f"Cost at catalog prices for {e.gpu} (prices change: check the date)",
                      title_justify="left")
            for col in ("provider", "instance", "$/GPU-h", "on-demand", "spot $/GPU-h", "spot",
                        "price as of"):
                c.add_column(col, justify="right" if "$" in col or col in ("on-demand", "spot")
                             else "left")
            for r in tot.cost_usd:
                c.add_row(f"{r.provider} ({r.provider_kind})", r.instance,
                          usd(r.on_demand_usd_per_gpu_hour), usd(r.on_demand_usd),
                          usd(r.spot_usd_per_gpu_hour), usd(r.spot_usd), r.as_of)
            console.print(c)
        else:
            console.print(f"[dim]No catalog price for {e.gpu}.[/dim]")
    for warning in e.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    console.print("[dim]Assumptions used:[/dim]")
    for a in e.assumptions:
        console.print(f"[dim]  - {a}[/dim]")


def _describe(c: Candidate) -> str:
    return (f"{c.method}, ckpt {'on' if c.checkpointing else 'off'}, ZeRO {c.zero_stage}, "
            f"{c.num_gpus} x {c.gpu}")


def _candidate_row(table: Table, c: Candidate) -> None:
    table.add_row(c.change, _describe(c), f"{c.micro_batch} x {c.grad_accum}",
                  gib(c.memory_total_bytes),
                  "[green]yes[/green]" if c.fits else "[red]no[/red]",
                  f"{c.tokens_per_s_per_gpu:,.0f}")


def render_fit(r: FitResult, console: Console) -> None:
    req = r.requested
    limit = gib(req.memory_limit_bytes)
    verdict = "[green]fits[/green]" if req.fits else "[red]does not fit[/red]"
    console.print(f"As given: {gib(req.memory_total_bytes)} per GPU, {verdict} in {limit} "
                  f"({pct(r.headroom_fraction)} headroom left free).")
    if r.largest_micro_batch is not None:
        console.print(f"Largest micro-batch that fits: [bold]{r.largest_micro_batch}[/bold]")
        if r.effective_batch is not None:
            console.print(f"Effective batch {r.effective_batch}: micro-batch "
                          f"{r.largest_micro_batch} x accumulation "
                          f"[bold]{r.grad_accum_for_effective_batch}[/bold] x {req.num_gpus} "
                          f"GPU(s)")
    else:
        console.print("[red]Nothing fits at micro-batch 1.[/red]")
    table = Table(title="Configurations", title_justify="left")
    for col in ("change", "setup", "micro x accum", "memory/GPU", "fits", "tokens/s/GPU"):
        table.add_column(col, overflow="fold")
    if r.fastest is not None:
        _candidate_row(table, r.fastest.model_copy(update={"change": "fastest that fits: "
                                                           + r.fastest.change}))
    for c in r.alternatives:
        _candidate_row(table, c)
    if r.fastest is not None or r.alternatives:
        console.print(table)
    console.print(f"[dim]{r.candidates_evaluated} configurations evaluated; memory from "
                  f"estimate/memory.py (formula), speed from estimate/timing.py (roofline with "
                  f"assumed efficiencies).[/dim]")
