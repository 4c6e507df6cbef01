"""What a plan evaluates to: per-phase results and the budget (pydantic, for JSON output).

In Python each quantity is a float; in JSON (`plan --json`, `model_dump(mode="json")`, what the
HTML page and the charts read) each is a figure, {value, unit, basis, source}, as `estimate
--json` prints them: the serializers below say where each came from. Counts and ids (GPUs,
seeds, runs, ledger ids, micro-batches) stay numbers, and so do the price rows (`costs[]`),
each of which names its provider, instance and date, as estimate's `totals.cost_usd[]` does.
"""

from __future__ import annotations

from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, Field, FieldSerializationInfo, field_serializer

from gpuhours.estimate.figures import BasisKind, Figure


def _fig(value: float | None, unit: str, basis: str, source: str) -> dict[str, Any] | None:
    """A quantity as JSON: {value, unit, basis, source}; None stays None."""
    if value is None:
        return None
    kind = basis if basis in get_args(BasisKind) else "formula"
    return Figure(value=value, unit=unit, basis=kind, source=source).model_dump(  # type: ignore[arg-type]
        mode="json")


def basis_kind_of(basis: str) -> str:
    """'formula: analytic estimate ...' -> 'formula' (a phase's basis begins with its kind)."""
    return basis.split(":", 1)[0].strip()


#: phase details that are counts or ids, not quantities: left as numbers in JSON
DETAIL_COUNTS = frozenset({"experiments", "generation_batch_per_gpu", "rollout_gpus",
                           "train_gpus", "rollout_tensor_parallel", "update_micro_batch",
                           "grpo_calibration_ledger_id", "rollout_waves",
                           # a paged engine's batch (plan/rl_paged.py)
                           "rollout_admissions", "rollout_preemptions",
                           "rollout_peak_running_sequences"})
#: the unit of a phase detail by its name (else by its suffix: _s, _hours, _bytes)
_DETAIL_UNITS = {"tokens": "tokens", "optimizer_steps": "steps", "steps": "steps",
                 "rollout_kv_cache_tokens": "tokens", "rollout_recomputed_tokens": "tokens",
                 "rollout_decode_steps": "steps",
                 "tokens_per_s_per_gpu": "tokens/s", "mfu": "fraction of peak FLOP/s",
                 "rollout_share": "fraction of step time",
                 "generation_rounds_per_step": "generation rounds a step",
                 "rollout_memory_utilisation": "fraction of device memory",
                 "reduced_gpu_hours": "GPU hours", "downtime_gpu_hours": "GPU hours",
                 "gpu_hours_by_benchmark": "GPU hours"}


def _detail_unit(key: str) -> str:
    if key in _DETAIL_UNITS:
        return _DETAIL_UNITS[key]
    for suffix, unit in (("_s", "s"), ("_hours", "hours"), ("_bytes", "bytes")):
        if key.endswith(suffix):
            return unit
    return "number"


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PhaseResult(_Out):
    """One phase: GPU hours of one run (before and after its overheads), wall clock on its GPUs,
    the bottleneck, and where the number came from."""

    name: str
    kind: str
    runs: str
    line: int | None
    gpus: int
    #: where `gpus` came from when the phase did not give it ("" when it did): e.g.
    #: "hardware.gpus_per_node 8 x nodes 1 (not given for the phase)"
    gpus_basis: str = ""
    gpu_hours_per_run_base: float
    overheads: dict[str, float]
    gpu_hours_per_run: float
    wall_hours_per_run: float
    bottleneck: str
    basis: str
    formula: str
    setup: dict[str, Any]
    warnings: list[str]
    #: the author's stated figures beside physics, whether or not they disagree
    checks: list[str]
    #: bytes on disk by part (checkpoints retained, dataset, rollouts, logs), each with basis
    storage: dict[str, Figure]
    actual: PhaseActual | None = None
    details: dict[str, Any]
    #: fingerprint of the phase's settings, for the living document's "what changed"
    config_digest: str
    #: the catalog GPU the phase runs on (the plan's unless the phase names its own)
    gpu: str = ""
    #: the estimate's own figures behind some `details` (step time, MFU, memory...), for their
    #: basis and source in JSON; not printed themselves
    detail_figures: dict[str, Figure] = Field(default={}, exclude=True)
    #: a detail's own basis where the phase knows it, by key: (kind, source) with kind one of
    #: figures.BasisKind (an assumed default, the plan's input, a measured part, a formula);
    #: details without one take the phase's basis
    detail_bases: dict[str, tuple[str, str]] = Field(default={}, exclude=True)
    #: the assumptions the phase used beyond the estimator's shared ones ("name = value unit:
    #: basis"), for the plan's list
    assumptions: list[str] = Field(default=[], exclude=True)

    @field_serializer("gpu_hours_per_run_base", "gpu_hours_per_run", "wall_hours_per_run",
                      when_used="json")
    def _hours_json(self, value: float, info: FieldSerializationInfo) -> dict[str, Any] | None:
        what = {"gpu_hours_per_run_base": ("GPU hours", "before the phase's overheads"),
                "gpu_hours_per_run": ("GPU hours", "overheads included"),
                "wall_hours_per_run": ("hours", "GPU hours per run / the phase's GPUs (a grid: "
                                                "its makespan)")}[info.field_name]
        return _fig(value, what[0], basis_kind_of(self.basis),
                    f"{self.formula} ({what[1]}; {self.basis})")

    @field_serializer("overheads", when_used="json")
    def _overheads_json(self, value: dict[str, float]) -> dict[str, Any]:
        return {k: _fig(v, "fraction", "input", f"the plan's overheads.{k}")
                for k, v in value.items()}

    @field_serializer("details", when_used="json")
    def _details_json(self, value: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, v in value.items():
            fig = self.detail_figures.get(key)
            if fig is not None and fig.value == v:
                out[key] = fig.model_dump(mode="json")
            elif (isinstance(v, int | float) and not isinstance(v, bool)
                  and key not in DETAIL_COUNTS):
                kind, source = self.detail_bases.get(key, (basis_kind_of(self.basis),
                                                           self.basis))
                out[key] = _fig(v, _detail_unit(key), kind,
                                f"plan/phases.py, phase {self.name!r}: {source}")
            elif isinstance(v, dict) and v and all(
                    isinstance(x, int | float) and not isinstance(x, bool) for x in v.values()):
                # a quantity by name (an eval phase's GPU hours by benchmark)
                out[key] = {k: _fig(x, _detail_unit(key), basis_kind_of(self.basis),
                                    f"plan/phases.py, phase {self.name!r}, {k}: {self.basis}")
                            for k, x in v.items()}
            else:
                out[key] = v
        return out


class PhaseActual(_Out):
    """Plan against actual: what tracked runs of this phase spent, and the projection."""

    runs: int
    gpu_hours_spent: float
    steps_done: int
    steps_planned: int | None
    projected_gpu_hours: float | None
    #: projected minus budgeted GPU hours of one run (positive: an overrun)
    overrun_gpu_hours: float | None
    basis: str
    #: what the projection is compared with: the GPU hours of one run of the phase, or of one
    #: experiment of a grid (a tracked run is one experiment); None: the phase's per run
    budgeted_gpu_hours: float | None = None
    budgeted_basis: str = ""

    @field_serializer("gpu_hours_spent", when_used="json")
    def _spent_json(self, value: float) -> dict[str, Any] | None:
        return _fig(value, "GPU hours", "measured", f"tracked runs in the ledger: {self.basis}")

    @field_serializer("projected_gpu_hours", "overrun_gpu_hours", when_used="json")
    def _projected_json(self, value: float | None, info: FieldSerializationInfo
                        ) -> dict[str, Any] | None:
        what = ("spent + steps left at the measured rate" if info.field_name ==
                "projected_gpu_hours" else
                f"projected - budgeted GPU hours of {self.budgeted_basis or 'one run'}")
        return _fig(value, "GPU hours", "formula", f"{what}: {self.basis}")

    @field_serializer("budgeted_gpu_hours", when_used="json")
    def _budgeted_json(self, value: float | None) -> dict[str, Any] | None:
        return _fig(value, "GPU hours", "formula", f"the plan's GPU hours of "
                                                   f"{self.budgeted_basis or 'one run'}")
    #: tracked runs under this phase's name of another setup (model, method, device): not
    #: counted, and why
    other_setup_runs: int = 0
    other_setup_reasons: list[str] = []


class GridRow(_Out):
    name: str
    priority: int
    gpu_hours: float
    basis: str
    #: the experiment's optimizer steps (None for an evaluation-only entry)
    steps: float | None = None

    @field_serializer("gpu_hours", when_used="json")
    def _hours_json(self, value: float) -> dict[str, Any] | None:
        return _fig(value, "GPU hours", basis_kind_of(self.basis), self.basis)

    @field_serializer("steps", when_used="json")
    def _steps_json(self, value: float | None) -> dict[str, Any] | None:
        return _fig(value, "optimizer steps", "formula",
                    "the experiment's steps, or its tokens / the tokens of a step "
                    "(plan/grid.py training_amount)")


class GridSchedule(_Out):
    rows: list[GridRow]
    schedule_gpus: int
    makespan_hours: float
    days: float
    hours_per_day: float
    reduced_priority: int
    reduced_gpu_hours: float
    reduced_makespan_hours: float
    reduced_days: float

    @field_serializer("makespan_hours", "days", "hours_per_day", "reduced_gpu_hours",
                      "reduced_makespan_hours", "reduced_days", when_used="json")
    def _schedule_json(self, value: float, info: FieldSerializationInfo
                       ) -> dict[str, Any] | None:
        name = info.field_name
        if name == "hours_per_day":
            return _fig(value, "hours/day", "input", "the grid's hours_per_day")
        unit = "days" if name.endswith("days") else "GPU hours" if "gpu" in name else "hours"
        kept = (f"experiments of priority <= {self.reduced_priority}"
                if name.startswith("reduced") else "every experiment")
        return _fig(value, unit, "formula", f"plan/grid.py: {kept}, longest first on "
                                            f"{self.schedule_gpus} GPU(s), {self.hours_per_day:g} "
                                            "h/day")


class CostLine(_Out):
    #: the GPU type these GPU hours run on (a plan may use several)
    gpu: str = ""
    provider: str
    kind: str
    instance: str
    on_demand_usd: float | None
    spot_usd: float | None
    usd_per_gpu_hour: float | None
    spot_usd_per_gpu_hour: float | None
    as_of: str
    #: GPUs per instance of the price row; each phase pays whole instances of it
    #: (gpuhours.catalog.billing), 1 for the plan's own price (per GPU used)
    gpus_per_instance: int = 1
    #: GPU hours paid for: each phase's GPU hours x billed GPUs / its GPUs (contingency
    #: included); the dollars price these
    billed_gpu_hours: float = 0.0
    #: e.g. "5,000 GPU h billed for 625 used"; "" when every billed GPU is used
    billing: str = ""
    #: what is doubtful about the price row (gpuhours.catalog.price_flags)
    flags: list[str] = []


class MicroBenchmark(_Out):
    """A measurement of the ledger that set figures of this budget in place of assumed ones
    (`gpuhours bench`): what ran, where and when, and what it measured. Every figure here is
    measured; `peak_memory_basis` says which statistic the peak is."""

    ledger_id: int
    measured_utc: str
    kind: str
    device: str
    model: str
    setup: str
    steps_timed: int | None
    step_time_median_s: float | None
    step_time_cv: float | None
    #: the medians of the step's parts (data, forward, backward, optimizer; or a GRPO step's
    #: rollout, scoring and update), seconds
    step_parts_s: dict[str, float]
    peak_memory_bytes: int | None
    peak_memory_basis: str | None
    tokens_per_s: float | None
    mfu: float | None
    #: "phase: what it set", one per phase and figure
    used_for: list[str]

    @field_serializer("step_time_median_s", "step_time_cv", "peak_memory_bytes", "tokens_per_s",
                      "mfu", "step_parts_s", when_used="json")
    def _measured_json(self, value: Any, info: FieldSerializationInfo) -> Any:
        where = f"ledger #{self.ledger_id}, {self.device}, {self.measured_utc}"
        unit = {"step_time_median_s": "s", "step_time_cv": "fraction (std / median)",
                "peak_memory_bytes": "bytes", "tokens_per_s": "tokens/s",
                "mfu": "fraction of peak FLOP/s"}.get(info.field_name, "s")
        if info.field_name == "step_parts_s":
            return {k: _fig(v, "s", "measured", f"{where}: median") for k, v in value.items()}
        if info.field_name == "peak_memory_bytes" and self.peak_memory_basis:
            where += f": {self.peak_memory_basis}"
        return _fig(value, unit, "measured", where)


class Budget(_Out):
    """The project formula of the seeds, made explicit."""

    project: str
    gpu: str
    num_gpus: int
    seeds: int
    phases: list[PhaseResult]
    one_time_gpu_hours: float
    per_seed_gpu_hours: float
    single_seed_gpu_hours: float
    subtotal_gpu_hours: float
    contingency_percent: float
    contingency_gpu_hours: float
    total_gpu_hours: float
    formula: str
    wall_clock_hours: float
    wall_clock_basis: str
    costs: list[CostLine]
    #: GPU hours (contingency included) by the GPU type the phases run on
    gpu_hours_by_gpu: dict[str, float] = {}
    electricity_kwh: float | None
    electricity_usd: float | None
    electricity_basis: str | None
    grids: dict[str, GridSchedule]
    storage_total: Figure | None
    warnings: list[str]
    assumptions: list[str]
    #: the ledger's measurements that set figures of this budget (empty without a ledger)
    micro_benchmarks: list[MicroBenchmark] = []
    #: whether tracked runs were looked up in a ledger (not with --no-calibrate or no ledger):
    #: without, a phase's missing actuals say nothing about its runs
    actuals_looked_up: bool = False

    @field_serializer("one_time_gpu_hours", "per_seed_gpu_hours", "single_seed_gpu_hours",
                      "subtotal_gpu_hours", "contingency_gpu_hours", "total_gpu_hours",
                      when_used="json")
    def _totals_json(self, value: float) -> dict[str, Any] | None:
        return _fig(value, "GPU hours", "formula", f"the budget formula: {self.formula}")

    @field_serializer("contingency_percent", when_used="json")
    def _contingency_json(self, value: float) -> dict[str, Any] | None:
        return _fig(value, "percent", "input", "the plan's contingency_percent")

    @field_serializer("wall_clock_hours", when_used="json")
    def _wall_json(self, value: float) -> dict[str, Any] | None:
        return _fig(value, "hours", "formula", self.wall_clock_basis)

    @field_serializer("gpu_hours_by_gpu", when_used="json")
    def _by_gpu_json(self, value: dict[str, float]) -> dict[str, Any]:
        return {k: _fig(v, "GPU hours", "formula", f"the phases on {k}: GPU hours per run x "
                                                   "runs, contingency included")
                for k, v in value.items()}

    @field_serializer("electricity_kwh", "electricity_usd", when_used="json")
    def _electricity_json(self, value: float | None, info: FieldSerializationInfo
                          ) -> dict[str, Any] | None:
        if info.field_name == "electricity_kwh":
            return _fig(value, "kWh", "formula", self.electricity_basis or "")
        return _fig(value, "USD", "formula", "electricity_kwh x the plan's "
                                             "hardware.electricity_usd_per_kwh")
