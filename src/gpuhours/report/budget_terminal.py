"""The plan's budget in the terminal: phases, the formula with its numbers, cost, warnings.
Names and notes come from the user's plan: each goes through `esc` (report/text.py). A table too
wide for the console gets its bases as numbered footnotes (report/tables.py), unless `wide`."""

from __future__ import annotations

from rich.console import Console

from gpuhours.plan.results import Budget, PhaseResult
from gpuhours.report.tables import Col, Notes, print_table
from gpuhours.report.text import esc, print_price_flags
from gpuhours.report.units import instance_billed, usd

RUNS = {"once": "once", "per_seed": "per seed", "single_seed": "single seed"}


#: the phases table: the phase name is the plan's (a name the user types back); a bottleneck
#: explained at length goes to a note like a basis, a short one stays
_PHASE_COLS = (Col("phase", "name"), Col("kind", "name"), Col("runs", stack=True),
               Col("GPU h", "number", "right"), Col("wall h", "number", "right"),
               Col("GPUs", "number", "right"), Col("bottleneck", "basis"), Col("basis", "basis"))
_COST_COLS = (Col("provider"), Col("instance", stack=True),
              Col("$/GPU-h", "number", "right"),
              Col("on-demand", "number", "right"), Col("spot $/GPU-h", "number", "right"),
              Col("spot", "number", "right"), Col("as of", "number"))


def render_budget(b: Budget, console: Console, wide: bool = False) -> None:
    """The budget: phases, formula, wall clock, grids, cost, energy, storage, actuals, checks,
    warnings. `wide`: bases in the phases table however long the lines."""
    notes = Notes()
    console.print(f"[bold]{esc(b.project)}[/bold]: {b.num_gpus} x {esc(b.gpu)}, {b.seeds} "
                  "seed(s)")
    phases = [[esc(r.name), esc(r.kind), RUNS[r.runs], f"{r.gpu_hours_per_run:,.1f}",
               f"{r.wall_hours_per_run:,.1f}", str(r.gpus), esc(r.bottleneck),
               f"[dim]{esc(r.basis)}[/dim]"] for r in b.phases]
    print_table(console, _PHASE_COLS, phases, notes=notes, wide=wide,
                title="Phases (GPU hours of one run, overheads included)")
    by_basis: dict[str, list[str]] = {}
    for r in b.phases:
        if r.gpus_basis:
            by_basis.setdefault(f"{r.gpus}, from {r.gpus_basis}", []).append(r.name)
    for text, names in by_basis.items():
        console.print(f"[dim]GPUs of {esc(', '.join(names))}: {esc(text)}; give the phase "
                      f"`gpus` to set its own.[/dim]")
    console.print(f"[bold]Budget[/bold]: {esc(b.formula)}")
    console.print(f"Wall clock: {b.wall_clock_hours:,.1f} h ({esc(b.wall_clock_basis)}).")
    for name, g in b.grids.items():
        console.print(f"Grid [bold]{esc(name)}[/bold]: {len(g.rows)} experiments, "
                      f"{sum(r.gpu_hours for r in g.rows):,.1f} GPU h, makespan "
                      f"{g.makespan_hours:,.1f} h on {g.schedule_gpus} GPU(s) = {g.days:,.1f} "
                      f"days at {g.hours_per_day:g} h/day; priority <= {g.reduced_priority}: "
                      f"{g.reduced_gpu_hours:,.1f} GPU h, {g.reduced_days:,.1f} days.")
    if b.costs:
        cost = [[esc(f"{row.provider} ({row.kind})"),
                 esc(instance_billed(row.instance, row.billing)),
                 usd(row.usd_per_gpu_hour), usd(row.on_demand_usd),
                 usd(row.spot_usd_per_gpu_hour), usd(row.spot_usd), esc(row.as_of)]
                for row in b.costs]
        hours = (f"{b.total_gpu_hours:,.0f} GPU h" if len(b.gpu_hours_by_gpu) < 2 else
                 ", ".join(f"{h:,.0f} GPU h on {name}" for name, h in b.gpu_hours_by_gpu.items()))
        print_table(console, _COST_COLS, cost, notes=notes, wide=wide,
                    title=f"Cost of {hours}, whole instances billed per phase (prices change: "
                          "check the date)")
        print_price_flags(console, ((row.provider, row.instance, row.flags) for row in b.costs))
    else:
        console.print(f"[dim]No catalog price for {esc(b.gpu)}; set hardware.usd_per_gpu_hour."
                      "[/dim]")
    if b.electricity_kwh is not None:
        money = f", {usd(b.electricity_usd)}" if b.electricity_usd is not None else ""
        console.print(f"Electricity: {b.electricity_kwh:,.0f} kWh{money} "
                      f"({esc(b.electricity_basis)}).")
    if b.storage_total is not None:
        console.print(f"Storage: {b.storage_total.value / 1e9:,.1f} GB on disk at the peak "
                      f"([dim]{esc(b.storage_total.basis)}: {esc(b.storage_total.source)}"
                      "[/dim]).")
        for r in b.phases:
            if r.storage:
                parts = ", ".join(f"{k} {f.value / 1e9:,.1f} GB" for k, f in r.storage.items())
                console.print(f"  {esc(r.name)}: {esc(parts)}")
    for m in b.micro_benchmarks:
        console.print(f"measured: ledger #{m.ledger_id} ({esc(m.device)}, "
                      f"{m.measured_utc[:10]}) sets {esc('; '.join(m.used_for))}")
    for r in b.phases:
        if r.actual is not None:
            console.print(f"actual {esc(r.name)}: {esc(actual_text(r))}")
    for r in b.phases:
        for check in r.checks:
            console.print(f"[dim]check {esc(r.name)}: {esc(check)}[/dim]")
    for warning in b.warnings:
        console.print(f"[yellow]warning[/yellow] {esc(warning)}")


def actual_text(r: PhaseResult) -> str:
    """Plan against actual for one phase, in words (the terminal and the living document)."""
    a = r.actual
    assert a is not None
    text = (f"{a.gpu_hours_spent:,.2f} GPU h spent over {a.steps_done:,} steps in {a.runs} "
            f"tracked run(s)")
    if a.projected_gpu_hours is not None and a.overrun_gpu_hours is not None:
        sign = "overrun" if a.overrun_gpu_hours > 0 else "saving"
        budget = r.gpu_hours_per_run if a.budgeted_gpu_hours is None else a.budgeted_gpu_hours
        share = abs(a.overrun_gpu_hours) / budget if budget else 0.0
        per = f" for {a.budgeted_basis}" if a.budgeted_basis else ""
        text += (f"; projected {a.projected_gpu_hours:,.2f} GPU h at the measured rate against "
                 f"{budget:,.2f} budgeted{per}: {sign} of "
                 f"{abs(a.overrun_gpu_hours):,.2f} GPU h ({100 * share:.0f}%)")
    text += f" ({a.basis})"
    if a.other_setup_runs:
        text += (f"; {a.other_setup_runs} tracked run(s) of another setup not counted: "
                 + ", ".join(a.other_setup_reasons))
    return text
