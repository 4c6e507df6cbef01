"""The budget: every phase evaluated, then the project formula of the seeds made explicit:
one-time + per-seed x seeds + single-seed, + contingency; wall clock, dollars, electricity."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from gpuhours import catalog
from gpuhours.catalog.schema import GpuSpec
from gpuhours.errors import FieldError, InputError, UnknownNameError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.figures import Figure
from gpuhours.estimate.timing import gemm_efficiency_assumptions
from gpuhours.plan.grid import grid_phase
from gpuhours.plan.load import LoadedPlan
from gpuhours.plan.measured import micro_benchmarks, uses_by_id
from gpuhours.plan.phases import Context, compute_phase, plan_error
from gpuhours.plan.results import Budget, CostLine, GridSchedule, PhaseActual, PhaseResult
from gpuhours.plan.schema import GridPhase, HardwareSpec, TrainingSettings


def _runs_multiplier(runs: str, seeds: int) -> int:
    return seeds if runs == "per_seed" else 1


def evaluate(loaded: LoadedPlan, ledger: Any = None, calibrate: bool = True) -> Budget:
    """Evaluate every phase of a plan and assemble its budget; with a ledger, training phases
    are calibrated by the nearest matching measurement (unless not `calibrate`: the ledger then
    only names the devices it measured) and tracked runs are set against their phases."""
    plan = loaded.plan
    line = f", line {loaded.gpu_line}" if loaded.gpu_line else ""
    gpu = _gpu(plan.hardware.gpu, ledger, f"{loaded.path}{line}, hardware.gpu")
    ctx = Context(plan=plan, gpu=gpu, lines=loaded.phase_lines, path=loaded.path,
                  ledger=ledger if calibrate else None, field_lines=loaded.field_lines)
    results: list[PhaseResult] = []
    grids: dict[str, GridSchedule] = {}
    gpus_by_name = {gpu.name: gpu}
    uses: dict[int, list[str]] = {}
    for phase in plan.phases:
        start = len(ctx.used_measurements)
        phase_ctx = ctx
        if phase.gpu is not None:
            phase_gpu = _phase_gpu(loaded, phase, ledger)
            gpus_by_name[phase_gpu.name] = phase_gpu
            phase_ctx = replace(ctx, gpu=phase_gpu)
        try:
            if isinstance(phase, GridPhase):
                result, schedule = grid_phase(phase_ctx, phase)
                grids[phase.name] = schedule
            else:
                result = compute_phase(phase_ctx, phase)
        except FieldError as e:
            # a hardware setting the estimate refused (a rate no run survives): named by its
            # own key and line under `hardware:`, as hardware.gpu is, not by the phase
            hardware_only = set(HardwareSpec.model_fields) - set(TrainingSettings.model_fields)
            if e.fields and set(e.fields) <= hardware_only:
                key = e.fields[0]
                at = loaded.hardware_lines.get(key)
                raise InputError(f"{loaded.path}{f', line {at}' if at else ''}, hardware.{key}",
                                 f"{e.message} (phase {phase.name!r})", e.hint) from None
            # a setup field the estimate refused (fp8 on an A100, an overlap the layout cannot
            # run): named by the plan's file, line, phase and key, as the loader's errors are
            raise plan_error(phase_ctx, phase, e) from None
        results.append(result)
        uses_by_id(ctx.used_measurements[start:], phase.name, uses)
    if ledger is not None and calibrate:
        results = _with_actuals(results, ledger, plan.project, grids)

    def total(runs: str) -> float:
        return sum(r.gpu_hours_per_run for r in results if r.runs == runs)

    one_time, per_seed, single = total("once"), total("per_seed"), total("single_seed")
    subtotal = one_time + per_seed * plan.seeds + single
    contingency = subtotal * plan.contingency_percent / 100
    grand = subtotal + contingency
    formula = (f"one-time {one_time:,.1f} + per-seed {per_seed:,.1f} x {plan.seeds} seeds + "
               f"single-seed {single:,.1f} = {subtotal:,.1f} GPU h; + {plan.contingency_percent:g}% "
               f"contingency {contingency:,.1f} = {grand:,.1f} GPU h")
    wall = sum(r.wall_hours_per_run * _runs_multiplier(r.runs, plan.seeds) for r in results)
    wall *= 1 + plan.contingency_percent / 100

    # each GPU type's share of the total: its phases' hours x runs, contingency included
    by_gpu: dict[str, float] = {}
    for r in results:
        share = r.gpu_hours_per_run * _runs_multiplier(r.runs, plan.seeds)
        by_gpu[r.gpu or gpu.name] = by_gpu.get(r.gpu or gpu.name, 0.0) + share
    by_gpu = {k: v * (1 + plan.contingency_percent / 100) for k, v in by_gpu.items()}
    # each phase billed on its own GPUs: whole instances (catalog.billing), contingency included
    runs_of_gpu: dict[str, list[tuple[float, int]]] = {}
    for r in results:
        share = r.gpu_hours_per_run * _runs_multiplier(r.runs, plan.seeds)
        runs_of_gpu.setdefault(r.gpu or gpu.name, []).append(
            (share * (1 + plan.contingency_percent / 100), r.gpus))
    costs = [line for name, parts in runs_of_gpu.items()
             for line in _costs(plan.hardware.usd_per_gpu_hour, name, parts,
                                plan.hardware.gpus_per_node)]
    if len(by_gpu) > 1:  # say which GPU type each price is for
        costs = [c.model_copy(update={"instance": f"{c.instance} [{c.gpu}]"}) for c in costs]
    kwh = usd = None
    elec_basis = None
    if all(gpus_by_name[name].tdp_w for name in by_gpu):
        kwh = sum(hours * (gpus_by_name[name].tdp_w or 0) / 1000 for name, hours in by_gpu.items())
        tdps = ", ".join(f"{name} {gpus_by_name[name].tdp_w:g} W" for name in by_gpu)
        elec_basis = (f"GPU hours x TDP ({tdps}; catalog): the GPUs alone at full "
                      f"power; host, cooling and idle time are not counted")
        if plan.hardware.electricity_usd_per_kwh is not None:
            usd = kwh * plan.hardware.electricity_usd_per_kwh
    warnings = [f"{r.name}: {w}" for r in results for w in r.warnings]
    if ledger is not None and calibrate:
        from gpuhours.track.runs import unmatched_runs

        warnings += unmatched_runs(ledger, plan.project, [r.name for r in results])
    hw = plan.hardware
    # a phase on more of the plan's GPU type than its hardware declares: costed as asked, said
    warnings += [f"{r.name}: uses {r.gpus} GPUs, more than the plan's hardware has ({gpu.name}: "
                 f"gpus_per_node {hw.gpus_per_node} x nodes {hw.nodes} = {hw.num_gpus}); it is "
                 f"costed on {r.gpus}: raise hardware.nodes if the project has them, or give "
                 f"the phase fewer `gpus`"
                 for r in results if (r.gpu or gpu.name) == gpu.name and r.gpus > hw.num_gpus]
    priced = {c.gpu for c in costs}
    warnings += [f"no catalog price for {name} ({hours:,.1f} GPU h): the costs leave it out; "
                 f"hardware.usd_per_gpu_hour prices every GPU type of the plan"
                 for name, hours in by_gpu.items() if name not in priced]
    storage_total = _storage_total(results, plan.seeds)
    return Budget(
        project=plan.project, gpu=gpu.name, num_gpus=plan.hardware.num_gpus, seeds=plan.seeds,
        phases=results, one_time_gpu_hours=one_time, per_seed_gpu_hours=per_seed,
        single_seed_gpu_hours=single, subtotal_gpu_hours=subtotal,
        contingency_percent=plan.contingency_percent, contingency_gpu_hours=contingency,
        total_gpu_hours=grand, formula=formula, wall_clock_hours=wall,
        wall_clock_basis="phases one after another, each on its own GPUs, runs repeated per "
                         "seed, contingency included",
        costs=costs, gpu_hours_by_gpu=by_gpu, electricity_kwh=kwh, electricity_usd=usd,
        electricity_basis=elec_basis,
        grids=grids, storage_total=storage_total, warnings=warnings,
        # the estimator's shared constants, then what each phase used beyond them (its
        # engine's decode constants, an rl phase's defaults), each once
        assumptions=list(dict.fromkeys([f"{a.name} = {a.value:g} {a.unit}: {a.basis}" for a in (
            *gemm_efficiency_assumptions(gpu), A.GEMM_HALF_WIDTH,
            A.ATTENTION_EFFICIENCY_RATIO, A.BANDWIDTH_EFFICIENCY, A.COMM_OVERLAP,
            A.CUDA_CONTEXT_BYTES)] + [a for r in results for a in r.assumptions])),
        micro_benchmarks=micro_benchmarks(ledger, uses) if uses else [],
        actuals_looked_up=ledger is not None and calibrate,
    )


def grid_run_budget(grid: GridSchedule, steps_planned: int | None) -> tuple[float, str]:
    """The plan's GPU hours for one tracked run of a grid phase (a run is one experiment), and
    what they are: the experiment planned for the run's steps; else the run's planned steps at
    the grid's GPU hours per step (its step-counted experiments together); else, with no
    planned steps, the grid's mean experiment."""
    trained = [row for row in grid.rows if row.steps]
    if steps_planned:
        same = [row for row in trained if round(row.steps or 0) == steps_planned]
        if same:
            return same[0].gpu_hours, (f"experiment {same[0].name!r} of the grid ("
                                       f"{steps_planned:,} steps, as the run plans)")
        if trained:
            per_step = (sum(row.gpu_hours for row in trained)
                        / sum(row.steps or 0.0 for row in trained))
            return steps_planned * per_step, (f"{steps_planned:,} steps of the grid at its "
                                              f"{per_step:.3g} GPU h per step")
    return (sum(row.gpu_hours for row in grid.rows) / len(grid.rows),
            f"one experiment of the grid (the mean of its {len(grid.rows)}; the run gives no "
            "planned steps)")


def _with_actuals(results: list[PhaseResult], ledger: Any, project: str,
                  grids: dict[str, GridSchedule] | None = None) -> list[PhaseResult]:
    """Attach what tracked runs tagged with this project and a phase's name have spent. A
    tracked run of a grid phase is one of its experiments: its projection is compared with one
    experiment's GPU hours (the grid's mean), not the whole grid's."""
    from gpuhours.track.runs import actuals_by_phase

    expected = {r.name: {k: r.setup.get(k) for k in ("hidden_size", "num_layers",
                                                      "vocab_size", "method", "gpu")}
                for r in results if r.setup}
    actuals = actuals_by_phase(ledger, project, expected)
    out = []
    for r in results:
        a = actuals.get(r.name)
        if a is None:
            out.append(r)
            continue
        budget, what = r.gpu_hours_per_run, "one run of the phase"
        grid = (grids or {}).get(r.name)
        if grid is not None and grid.rows:
            budget, what = grid_run_budget(grid, a.steps_planned)
        over = None if a.projected_gpu_hours is None else a.projected_gpu_hours - budget
        out.append(r.model_copy(update={"actual": PhaseActual(
            runs=a.runs, gpu_hours_spent=a.gpu_hours_spent, steps_done=a.steps_done,
            steps_planned=a.steps_planned, projected_gpu_hours=a.projected_gpu_hours,
            overrun_gpu_hours=over, basis=a.basis, budgeted_gpu_hours=budget,
            budgeted_basis=what, other_setup_runs=a.other_setup_runs,
            other_setup_reasons=list(a.other_setup_reasons))}))
    return out


def _storage_total(results: list[PhaseResult], seeds: int) -> Figure | None:
    """Bytes on disk for the whole project: each dataset once; checkpoints, rollouts and logs
    once per run (seeds keep their own)."""
    if not any(r.storage for r in results):
        return None
    total = 0.0
    parts = []
    for r in results:
        runs = _runs_multiplier(r.runs, seeds)
        for name, f in r.storage.items():
            n = 1 if name == "dataset" else runs
            total += n * f.value
            parts.append(f"{r.name} {name}{f' x {n}' if n > 1 else ''}")
    stated = any(f.basis == "assumed" for r in results for f in r.storage.values())
    return Figure(value=total, unit="bytes", basis="assumed" if stated else "formula",
                  source="datasets once, per-run parts x runs: " + ", ".join(parts))


def _gpu(name: str, ledger: Any, where: str) -> GpuSpec:
    """A catalog GPU by name or alias; with a ledger, also a device measured there by `gpuhours
    bench` (a CPU, an Apple chip: its probes give the peaks and bandwidth), as `estimate` takes
    one. An error names the plan, line and field."""
    try:
        return catalog.gpu(name)
    except UnknownNameError as e:
        if ledger is not None and ledger.probes(device_key=name):
            from gpuhours.track.calibration import measured_device

            try:
                return measured_device(ledger, name)
            except InputError as err:
                raise InputError(where, err.message, err.hint) from None
        raise InputError(where, e.message, "Use a name from `gpuhours catalog gpus`, or a "
                         "device key measured by `gpuhours bench` with --ledger.") from None


def _phase_gpu(loaded: LoadedPlan, phase: Any, ledger: Any = None) -> GpuSpec:
    """The GPU a phase names (see _gpu)."""
    line = loaded.phase_lines.get(phase.name)
    return _gpu(phase.gpu, ledger, f"{loaded.path}{f', line {line}' if line else ''}, phase "
                                   f"{phase.name!r}, field 'gpu'")


def _costs(own_price: float | None, gpu_name: str, parts: list[tuple[float, int]],
           gpus_per_node: int = 8) -> list[CostLine]:
    """The cost lines of one GPU type: `parts` are (GPU hours used, GPUs) of each phase on it.
    Each phase pays whole instances of a price row (catalog.billing.bill: ceil(GPUs / GPUs per
    instance)); the plan's own price is per GPU used. Cheapest on-demand total first."""
    used_h = sum(h for h, _ in parts)
    if own_price is not None:
        return [CostLine(gpu=gpu_name, provider="plan", kind="stated", instance="-",
                         on_demand_usd=used_h * own_price, spot_usd=None,
                         usd_per_gpu_hour=own_price, spot_usd_per_gpu_hour=None,
                         as_of="as stated in the plan", billed_gpu_hours=used_h)]
    from datetime import date

    from gpuhours.catalog.billing import bill, spans_network_flag
    from gpuhours.catalog.price_flags import price_flags
    from gpuhours.report.units import hours as hours_text

    today = date.today()
    try:
        listed = catalog.prices(gpu_name)
    except UnknownNameError:  # a device measured by bench (a CPU): no catalog price
        listed = []
    lines = []
    for r in listed:
        bills = [bill(n, r.gpus_per_instance) for _, n in parts]
        billed_h = sum(b.billed_gpu_hours(h) for b, (h, _) in zip(bills, parts, strict=True))
        flags = [f.text for f in price_flags(r, today)]
        flags += sorted({spans_network_flag(b) for b in bills if b.spans_network(gpus_per_node)})
        od, spot = r.on_demand_usd_per_gpu_hour, r.spot_usd_per_gpu_hour
        billing = "" if billed_h <= used_h * (1 + 1e-9) else (
            f"{hours_text(billed_h)} GPU h billed for {hours_text(used_h)} used")
        lines.append(CostLine(
            gpu=gpu_name, provider=r.provider, kind=r.provider_kind, instance=r.instance,
            on_demand_usd=None if od is None else billed_h * od,
            spot_usd=None if spot is None else billed_h * spot,
            usd_per_gpu_hour=od, spot_usd_per_gpu_hour=spot, as_of=r.as_of.isoformat(),
            gpus_per_instance=r.gpus_per_instance, billed_gpu_hours=billed_h, billing=billing,
            flags=flags))
    return sorted(lines, key=lambda c: (c.on_demand_usd is None, c.on_demand_usd or 0.0,
                                        c.spot_usd or math.inf))
