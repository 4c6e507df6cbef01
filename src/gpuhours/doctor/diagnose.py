"""`gpuhours doctor`: a tracked run (ledger id) or a Hugging Face trainer_state.json, turned into
findings ranked by the GPU hours they save over the planned run, plus the options table."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, field_serializer

from gpuhours.catalog.schema import GpuSpec
from gpuhours.doctor import rules
from gpuhours.doctor.physics import OptionRow, arch_of, options_table, physics_findings, training_of
from gpuhours.doctor.rules import Finding, RunView
from gpuhours.errors import FieldError, InputError
from gpuhours.estimate.figures import Figure
from gpuhours.files import SMALL_JSON_MAX_BYTES, read_user_text
from gpuhours.track.ledger import Ledger
from gpuhours.track.runs import get_run, run_gpus, run_steps


class Diagnosis(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str
    device: str
    status: str
    steps_recorded: int
    planned_steps: int
    planned_basis: str
    #: fraction of recorded wall time per phase, 0-1 (measured): data_wait, compute, optimizer,
    #: eval, save, other
    time_shares: dict[str, float]
    step_time_mean_s: float
    measured_gpu_hours_planned: Figure
    usd_per_gpu_hour: float | None
    price_basis: str
    findings: list[Finding]
    options: list[OptionRow]
    notes: list[str]

    # in --json each quantity is a figure, {value, unit, basis, source}, like the other commands'
    @field_serializer("time_shares", when_used="json")
    def _shares_figures(self, value: dict[str, float]) -> dict[str, Any]:
        from gpuhours.estimate.candidate import figure_json

        return {k: figure_json(v, "fraction of recorded wall time", "measured",
                               f"the recorded steps' {k} time / their wall time (the run named by source)")
                for k, v in value.items()}

    @field_serializer("step_time_mean_s", when_used="json")
    def _step_figure(self, value: float) -> dict[str, Any]:
        from gpuhours.estimate.candidate import figure_json

        # as measured as the GPU hours made from it (assumed where the log's elapsed time is)
        return figure_json(value, "s", self.measured_gpu_hours_planned.basis,
                           "mean wall time of the recorded steps (the run named by source)")

    @field_serializer("usd_per_gpu_hour", when_used="json")
    def _price_figure(self, value: float | None) -> dict[str, Any] | None:
        from gpuhours.estimate.candidate import figure_json

        if value is None:
            return None
        given = self.price_basis.startswith("given")
        return figure_json(value, "USD per GPU-hour", "input" if given else "catalog",
                           self.price_basis)


def price_per_gpu_hour(gpu: GpuSpec | None, given: float | None,
                       config: dict[str, Any], num_gpus: int = 1) -> tuple[float | None, str]:
    """(USD per GPU-hour used, basis): the price given, else the run's config, else the
    catalog's cheapest on-demand way to hold `num_gpus` of `gpu` in whole instances
    (catalog.billing: one GPU on an 8-GPU-only instance pays 8, so its price per GPU-hour
    used is 8 x the row's); (None, why) when there is none."""
    if given is not None:
        if not (math.isfinite(given) and given > 0):
            raise FieldError("usd_per_gpu_hour", f"expected a positive price, got {given!r}.")
        return given, "given: --usd-per-gpu-hour"
    if config.get("usd_per_gpu_hour"):
        return float(config["usd_per_gpu_hour"]), "given: the run's config usd_per_gpu_hour"
    if gpu is not None:
        from gpuhours.catalog.billing import catalog_price_per_used_gpu_hour

        found = catalog_price_per_used_gpu_hour(gpu.name, num_gpus)
        if found is not None:
            return found
    return None, "no price: pass --usd-per-gpu-hour (or --gpu for a catalog price)"


def view_from_ledger(ledger: Ledger, run_id: int, planned_steps: int | None,
                     usd_per_gpu_hour: float | None, gpu: GpuSpec | None) -> RunView:
    run = get_run(ledger, run_id)
    steps = run_steps(ledger, run_id)
    if planned_steps is not None:
        planned, basis = planned_steps, "given: --planned-steps"
    elif run.planned_steps:
        planned, basis = run.planned_steps, "the tracker's planned_steps"
    else:
        planned, basis = len(steps), "no plan given: the steps recorded"
    # a catalog GPU's price applies to the run's findings only when the run was on a GPU
    num_gpus = run_gpus(run.config, f"run #{run_id} config num_gpus")
    price, price_basis = price_per_gpu_hour(gpu if run.device_kind == "cuda" else None,
                                            usd_per_gpu_hour, run.config, num_gpus)
    view = RunView(source=f"run #{run_id}", steps=steps, planned_steps=max(1, planned),
                   planned_basis=basis, config=run.config, device_kind=run.device_kind,
                   device_name=run.device_name, num_gpus=num_gpus,
                   usd_per_gpu_hour=price, price_basis=price_basis, status=run.status)
    rules.check_enough(view)
    return view


def diagnose(view: RunView, gpu: GpuSpec | None = None,
             loader_rates: list[dict[str, Any]] | None = None) -> Diagnosis:
    """All rules over one run; findings ranked by GPU hours saved, largest first."""
    rules.check_enough(view)
    found = [f for f in (rules.input_bound(view, loader_rates), rules.padding(view),
                         rules.checkpoint(view), rules.evaluation(view)) if f]
    more, notes = physics_findings(view, gpu)
    found += more
    found.sort(key=lambda f: -f.gpu_hours_saved.value)
    options: list[OptionRow] = []
    arch = arch_of(view)
    if gpu is not None and arch is not None:
        # a price per GPU used that came from the catalog depends on the GPU count: each
        # option's count is priced again in whole instances (None: priced from the catalog)
        given = view.device_kind == "cuda" and not view.price_basis.startswith("catalog")
        options = options_table(view, training_of(view, arch), gpu,
                                view.usd_per_gpu_hour if given else None, catalog_price=not given)
    elif gpu is None:
        notes.append("no options table: pass --gpu NAME to price the same work on one GPU "
                     "optimised and with DDP / FSDP / ZeRO-3 on 2, 4, 8 GPUs.")
    if view.status != "finished":
        notes.append(f"the run is '{view.status}': it was stopped or is still going; findings "
                     "use the steps recorded so far and are marked low-confidence.")
    if len(view.steps) < rules.LOW_CONFIDENCE_STEPS:
        notes.append(f"only {len(view.steps)} steps recorded: findings are low-confidence.")
    wall = sum(s.wall_s for s in view.steps)
    # fractions of wall time, keyed by phase name (no "_s": they are not seconds)
    shares = {k.removesuffix("_s"): sum(getattr(s, k) for s in view.steps) / wall if wall else 0.0
              for k in ("data_wait_s", "compute_s", "optimizer_s", "eval_s", "save_s")}
    shares["other"] = max(0.0, 1 - sum(shares.values()))
    mean_step = wall / len(view.steps)
    return Diagnosis(
        source=view.source, device=f"{view.device_kind} ({view.device_name})",
        status=view.status, steps_recorded=len(view.steps), planned_steps=view.planned_steps,
        planned_basis=view.planned_basis, time_shares=shares, step_time_mean_s=mean_step,
        measured_gpu_hours_planned=Figure(
            value=mean_step * view.planned_steps * view.num_gpus / 3600, unit="GPU h",
            basis="formula",
            source="measured mean step wall time x planned steps x GPUs / 3600 (a projection "
                   "over the planned run)"),
        usd_per_gpu_hour=view.usd_per_gpu_hour, price_basis=view.price_basis,
        findings=found, options=options, notes=notes)


def read_loader_rates(path: str | Path) -> list[dict[str, Any]]:
    """The rates of `gpuhours bench-data --json` output."""
    p = Path(path)
    try:
        data = json.loads(read_user_text(p, f"--bench-data {p}", SMALL_JSON_MAX_BYTES,
                                         "JSON file of `gpuhours bench-data --json`"))
        rates = data["rates"]
        for r in rates:
            if not (float(r["samples_per_s"]) > 0 and int(r["num_workers"]) >= 0):
                raise ValueError
    except FileNotFoundError:
        raise FieldError("bench_data", f"{p} does not exist.") from None
    except InputError:
        raise  # a FIFO, a device, a file too large: said as such
    except (OSError, ValueError, KeyError, TypeError):
        raise FieldError("bench_data", f"{p} is not the JSON of `gpuhours bench-data --json` "
                                               "(a 'rates' list with num_workers and "
                                               "samples_per_s).") from None
    return list(rates)
