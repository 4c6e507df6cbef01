"""What a plan evaluates to: per-phase results and the budget (pydantic, for JSON output)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from gpuhours.estimate.figures import Figure


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
    #: tracked runs under this phase's name of another setup (model, method, device): not
    #: counted, and why
    other_setup_runs: int = 0
    other_setup_reasons: list[str] = []


class GridRow(_Out):
    name: str
    priority: int
    gpu_hours: float
    basis: str


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
