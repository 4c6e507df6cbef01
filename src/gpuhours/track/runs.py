"""Tracked training runs in the ledger: start a run, append its step records in batches, finish
it, read it back, and total the GPU hours spent per plan phase. Standard library only (no torch).

Every write is one ledger transaction (BEGIN IMMEDIATE ... COMMIT): a batch of steps is stored
whole or not at all, so a process killed mid-run leaves a consistent ledger whose run is still
'running' with the batches it had flushed.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpuhours.errors import InputError
from gpuhours.track.ledger import Ledger, dumps_json, now_utc

RUN_STATUSES = ("running", "finished", "failed")


@dataclass
class StepRecord:
    """One optimizer step of a tracked run, as measured. Times in seconds (wall clock,
    time.perf_counter); `wall_s` is the whole step, from the end of the previous step.

    tokens_real: non-padding tokens (attention mask, else labels != -100); tokens_computed: all
    token positions the model ran on (padding included). peak_memory_bytes is the CUDA
    allocator's peak during the step (memory_basis 'cuda-max-allocated') or the process's peak
    resident set so far (memory_basis 'process-peak-rss', CPU: a different quantity, labelled)."""

    step: int
    started_s: float
    wall_s: float
    data_wait_s: float = 0.0
    compute_s: float = 0.0
    optimizer_s: float = 0.0
    eval_s: float = 0.0
    save_s: float = 0.0
    save_bytes: int = 0
    samples: int | None = None
    tokens_real: int | None = None
    tokens_computed: int | None = None
    peak_memory_bytes: int | None = None
    memory_basis: str | None = None
    device_util_pct: float | None = None


_STEP_COLUMNS = tuple(StepRecord.__dataclass_fields__)


@dataclass(frozen=True)
class Run:
    """A tracked run as stored. `config` holds what the doctor needs to reason about the setup
    (micro_batch, seq_len, grad_accum, num_workers, save_steps, model config, gpu, price ...)."""

    id: int
    created_utc: str
    finished_utc: str | None
    status: str
    project: str
    phase: str
    name: str
    hostname: str
    device_kind: str
    device_name: str
    planned_steps: int | None
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


def check_run_fields(project: str, phase: str, planned_steps: int | None,
                     config: dict[str, Any] | None = None) -> None:
    """The checks of start_run, without writing: a tracker makes them before training starts.
    A config's num_gpus (the GPUs the run's step time is multiplied by) must be a whole
    number of at least 1."""
    if config is not None and "num_gpus" in config:
        run_gpus(config, "track config num_gpus")
    for label, value in (("project", project), ("phase", phase)):
        if not str(value).strip():
            raise InputError(f"track {label}", "must not be empty: runs are totalled per "
                                               "project and phase.")
    if planned_steps is not None and (isinstance(planned_steps, bool) or planned_steps < 1):
        raise InputError("track planned_steps", f"expected a positive step count, got "
                                                f"{planned_steps!r}.")


def run_gpus(config: dict[str, Any], where: str) -> int:
    """The GPUs a run's config records (num_gpus), checked: a whole number of at least 1; 1
    when it records none (a one-process run). A ledger written before the check may hold a
    whole number as a float or as digits (8.0, "8"): taken. InputError keyed by `where`
    otherwise."""
    value = config.get("num_gpus", 1)
    if value is None:
        return 1
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(where, f"expected a whole number of GPUs, at least 1, got {value!r}.",
                         "Pass config={'num_gpus': <GPUs the run used>} to the tracker.")
    return value


def _unstated_gpus(run_ids: list[int]) -> str:
    """What a phase's basis says of its runs that recorded no num_gpus (counted as 1 GPU)."""
    if not run_ids:
        return ""
    return (f"; assumed: 1 GPU for run(s) {', '.join(f'#{i}' for i in run_ids)}, whose config "
            f"records no num_gpus")


_INSERT_RUN = ("INSERT INTO runs (created_utc, status, project, phase, name, hostname, "
               "device_kind, device_name, planned_steps, config_json) "
               "VALUES (?, 'running', ?, ?, ?, ?, ?, ?, ?, ?)")


def _run_values(project: str, phase: str, name: str, device_kind: str, device_name: str,
                planned_steps: int | None, config: dict[str, Any],
                created_utc: str | None = None, hostname: str | None = None) -> tuple[Any, ...]:
    return (created_utc or now_utc(), project, phase, name, hostname or socket.gethostname(),
            device_kind, device_name, planned_steps, dumps_json(config))


def start_run(ledger: Ledger, *, project: str, phase: str, name: str, device_kind: str,
              device_name: str, planned_steps: int | None, config: dict[str, Any],
              created_utc: str | None = None, hostname: str | None = None,
              busy_timeout_s: float | None = None) -> int:
    """Append a run in state 'running'; returns its id. `busy_timeout_s`: how long to wait for
    another writer (default: the ledger's)."""
    check_run_fields(project, phase, planned_steps, config)
    values = _run_values(project, phase, name, device_kind, device_name, planned_steps, config,
                         created_utc, hostname)
    with ledger.transaction(busy_timeout_s) as db:
        cur = db.execute(_INSERT_RUN, values)
        return int(cur.lastrowid or 0)


_INSERT_STEPS = (f"INSERT INTO run_steps ({', '.join(('run_id',) + _STEP_COLUMNS)}) "
                 f"VALUES ({', '.join('?' for _ in range(len(_STEP_COLUMNS) + 1))})")


def add_steps(ledger: Ledger, run_id: int, steps: Iterable[StepRecord],
              busy_timeout_s: float | None = None) -> int:
    """Append step records in one transaction; returns how many."""
    rows = [(run_id, *(getattr(s, c) for c in _STEP_COLUMNS)) for s in steps]
    if not rows:
        return 0
    with ledger.transaction(busy_timeout_s) as db:
        db.executemany(_INSERT_STEPS, rows)
    return len(rows)


def finish_run(ledger: Ledger, run_id: int, status: str, summary: dict[str, Any],
               busy_timeout_s: float | None = None) -> None:
    """Mark a run finished or failed, with its summary."""
    if status not in RUN_STATUSES:
        raise ValueError(f"status {status!r} is not one of {RUN_STATUSES}")
    with ledger.transaction(busy_timeout_s) as db:
        db.execute("UPDATE runs SET status = ?, finished_utc = ?, summary_json = ? WHERE id = ?",
                   (status, now_utc(), dumps_json(summary), run_id))


_RUN_IDENTITY = ("project", "phase", "name", "created_utc")


def _same_run(db: Any, run_id: int, run_fields: dict[str, Any]) -> bool:
    """Whether the ledger's run `run_id` is the run `run_fields` describe (the fields a tracker
    started it with; a start time only where they hold one)."""
    row = db.execute(f"SELECT {', '.join(_RUN_IDENTITY)} FROM runs WHERE id = ?",
                     (run_id,)).fetchone()
    return _matches(row, run_fields)


def _matches(row: Any, run_fields: dict[str, Any]) -> bool:
    if row is None:
        return False
    return all(row[k] == run_fields[k] for k in _RUN_IDENTITY if k in run_fields)


def is_same_run(ledger: Ledger, run_id: int, run_fields: dict[str, Any]) -> bool:
    """_same_run through a ledger (a tracker's connection opened again by path: the file there
    may be another ledger now)."""
    rows = ledger.query(f"SELECT {', '.join(_RUN_IDENTITY)} FROM runs WHERE id = ?", [run_id])
    return _matches(rows[0] if rows else None, run_fields)


def insert_pending_run(ledger: Ledger, run_id: int | None, run_fields: dict[str, Any],
                       steps: list[StepRecord], finish: dict[str, Any] | None,
                       busy_timeout_s: float | None = None) -> int:
    """Records a tracker could not write while its run lasted (gpuhours.track.pending), added in
    one transaction: the run (when it has no id yet), its steps (a step already stored is left
    as it is), its final status. Returns how many step records were added.

    A run id is trusted only while the ledger's run of that id is the same run (project, phase,
    name and start time as the records hold them): a ledger moved aside and started afresh at
    the same path numbers other runs from 1, and the records must not join another project's
    run. Then they are added as a run of their own."""
    with ledger.transaction(busy_timeout_s) as db:
        if run_id is not None and not _same_run(db, run_id, run_fields):
            run_id = None
        if run_id is None:
            fields = dict(run_fields)
            check_run_fields(fields["project"], fields["phase"], fields.get("planned_steps"),
                             fields.get("config"))
            run_id = int(db.execute(_INSERT_RUN, _run_values(**fields)).lastrowid or 0)
        before = db.total_changes
        db.executemany(_INSERT_STEPS.replace("INSERT", "INSERT OR IGNORE", 1),
                       [(run_id, *(getattr(s, c) for c in _STEP_COLUMNS)) for s in steps])
        added = db.total_changes - before
        if finish is not None:
            db.execute("UPDATE runs SET status = ?, finished_utc = ?, summary_json = ? "
                       "WHERE id = ?", (finish["status"], now_utc(),
                                        dumps_json(finish["summary"]), run_id))
    return added


def _run(r: Any) -> Run:
    return Run(id=r["id"], created_utc=r["created_utc"], finished_utc=r["finished_utc"],
               status=r["status"], project=r["project"], phase=r["phase"], name=r["name"],
               hostname=r["hostname"], device_kind=r["device_kind"],
               device_name=r["device_name"], planned_steps=r["planned_steps"],
               config=json.loads(r["config_json"]), summary=json.loads(r["summary_json"]))


def get_run(ledger: Ledger, run_id: int) -> Run:
    rows = ledger.query("SELECT * FROM runs WHERE id = ?", [run_id])
    if not rows:
        known = ledger.query("SELECT id FROM runs ORDER BY id DESC LIMIT 5", [])
        hint = (f"Recent runs: {', '.join(str(k['id']) for k in known)}." if known else
                "No runs are tracked in it yet: track one with gpuhours.track (docs/doctor.md).")
        raise InputError("RUN", f"no tracked run #{run_id} in ledger {ledger.path}.", hint)
    return _run(rows[0])


def list_runs(ledger: Ledger, project: str | None = None) -> list[Run]:
    """Runs, newest first, optionally of one project."""
    if project is None:
        rows = ledger.query("SELECT * FROM runs ORDER BY id DESC", [])
    else:
        rows = ledger.query("SELECT * FROM runs WHERE project = ? ORDER BY id DESC", [project])
    return [_run(r) for r in rows]


def run_steps(ledger: Ledger, run_id: int) -> list[StepRecord]:
    rows = ledger.query(f"SELECT {', '.join(_STEP_COLUMNS)} FROM run_steps WHERE run_id = ? "
                          "ORDER BY step", [run_id])
    return [StepRecord(**{c: r[c] for c in _STEP_COLUMNS}) for r in rows]


# --- plan against actual -------------------------------------------------------------------------


@dataclass(frozen=True)
class PhaseActual:
    """What tracked runs of one plan phase have spent, and the projection at the measured rate.

    gpu_hours_spent: sum over the phase's runs of (recorded step wall time x GPUs) / 3600
    (measured); steps_done: recorded optimizer steps; steps_planned: the largest planned_steps
    among its runs (as given to the tracker), None if none was given; projected_gpu_hours:
    gpu_hours_spent / steps_done x steps_planned (formula: measured rate x planned steps)."""

    phase: str
    runs: int
    gpu_hours_spent: float
    steps_done: int
    steps_planned: int | None
    projected_gpu_hours: float | None
    basis: str
    #: tracked runs of this phase's name whose setup is not the plan's (not counted), and why
    other_setup_runs: int = 0
    other_setup_reasons: tuple[str, ...] = ()


#: config keys of a model's size in a Hugging Face config (gpt2 spells them its own way)
_SIZE_KEYS = {"hidden_size": ("hidden_size", "n_embd", "d_model"),
              "num_layers": ("num_hidden_layers", "n_layer", "num_layers"),
              "vocab_size": ("vocab_size",)}


def setup_mismatches(run: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """Why a tracked run is not of the plan phase's setup: its model's size, its method, its
    device kind or GPU type (each only when both sides say it). Empty: the same setup."""
    reasons = []
    cfg = run["config"]
    model_cfg = cfg.get("model_config") or {}
    for key, names in _SIZE_KEYS.items():
        ran = next((model_cfg[n] for n in names if isinstance(model_cfg.get(n), int)), None)
        planned = expected.get(key)
        if ran is not None and planned is not None and ran != planned:
            reasons.append(f"model {key} {ran} (planned {planned})")
            break
    if cfg.get("method") and expected.get("method") and cfg["method"] != expected["method"]:
        reasons.append(f"method {cfg['method']} (planned {expected['method']})")
    gpu = expected.get("gpu")
    if gpu and str(gpu).startswith("cpu-") and run["device_kind"] == "cpu":
        # a plan on a measured CPU device (bench's key cpu-<model>-<threads>t): the same CPU
        # model, and the same torch threads where the run recorded them
        from gpuhours.bench.device import slug

        model = f"cpu-{slug(run['device_name'])}-"
        threads = cfg.get("threads")
        ran_on = f"{model}{threads}t" if isinstance(threads, int) else None
        same = (ran_on == gpu) if ran_on is not None else str(gpu).startswith(model)
        if not same:
            reasons.append(f"ran on {ran_on or run['device_name']} (planned {gpu})")
    elif gpu and run["device_kind"] in ("cpu", "mps"):
        reasons.append(f"ran on {run['device_kind']} (planned {gpu})")
    elif gpu and run["device_kind"] == "cuda":
        from gpuhours.bench.device import catalog_gpu_for

        ran_on = catalog_gpu_for(run["device_name"])
        if ran_on is not None and ran_on != gpu:
            reasons.append(f"ran on {ran_on} (planned {gpu})")
    return reasons


def unmatched_runs(ledger: Ledger, project: str, phases: list[str]) -> list[str]:
    """Tracked runs a plan's totals leave out because their tags do not match it exactly: of
    this project under a phase name the plan lacks, or of a project whose name differs from
    this one only in case or spaces (a typo would otherwise go unseen)."""
    rows = ledger.query("SELECT project, phase, COUNT(*) AS n FROM runs GROUP BY project, phase")

    def norm(text: str) -> str:
        return "".join(text.split()).lower()

    out = []
    for r in rows:
        if r["project"] == project and r["phase"] not in phases:
            out.append(f"{r['n']} tracked run(s) of this project under phase {r['phase']!r}, "
                       f"which the plan does not have (phases: {', '.join(phases)})")
        elif r["project"] != project and norm(r["project"]) == norm(project):
            out.append(f"{r['n']} tracked run(s) of project {r['project']!r}, phase "
                       f"{r['phase']!r}: not counted, the plan's project is {project!r}")
    return out


def actuals_by_phase(ledger: Ledger, project: str,
                     expected: dict[str, dict[str, Any]] | None = None
                     ) -> dict[str, PhaseActual]:
    """{phase: PhaseActual} for the tracked runs of `project` (for `gpuhours plan`).

    `expected`: each phase's planned setup (model sizes, method, catalog GPU); a run of another
    setup (a CPU smoke test of a tiny model under the 8B phase's name) is counted apart and
    never projected."""
    rows = ledger.query(
        "SELECT r.phase AS phase, r.id AS id, r.planned_steps AS planned, r.config_json AS cfg, "
        "r.device_kind AS device_kind, r.device_name AS device_name, "
        "COUNT(s.step) AS steps, COALESCE(SUM(s.wall_s), 0) AS wall "
        "FROM runs r LEFT JOIN run_steps s ON s.run_id = r.id WHERE r.project = ? "
        "GROUP BY r.id ORDER BY r.id", [project])
    out: dict[str, PhaseActual] = {}
    apart: dict[str, list[str]] = {}
    unstated: dict[str, list[int]] = {}
    for r in rows:
        cfg = json.loads(r["cfg"])
        want = (expected or {}).get(r["phase"])
        if want is not None:
            why = setup_mismatches({"config": cfg, "device_kind": r["device_kind"],
                                    "device_name": r["device_name"]}, want)
            if why:
                apart.setdefault(r["phase"], []).append(f"run #{r['id']}: {'; '.join(why)}")
                continue
        try:
            gpus = run_gpus(cfg, f"ledger {ledger.path} run #{r['id']} config num_gpus")
        except InputError as e:  # an older ledger's value: this run apart, the plan goes on
            apart.setdefault(r["phase"], []).append(f"run #{r['id']}: {e.message}")
            continue
        if cfg.get("num_gpus") is None:
            unstated.setdefault(r["phase"], []).append(int(r["id"]))
        prev = out.get(r["phase"])
        hours = r["wall"] * gpus / 3600 + (prev.gpu_hours_spent if prev else 0.0)
        steps = int(r["steps"]) + (prev.steps_done if prev else 0)
        planned_values = [p for p in ((prev.steps_planned if prev else None), r["planned"])
                          if p is not None]
        planned = max(planned_values) if planned_values else None
        projected = hours / steps * planned if planned and steps else None
        out[r["phase"]] = PhaseActual(
            phase=r["phase"], runs=(prev.runs if prev else 0) + 1, gpu_hours_spent=hours,
            steps_done=steps, steps_planned=planned, projected_gpu_hours=projected,
            basis="measured: tracked step wall time x GPUs; projected = measured GPU h per step "
                  "x planned steps" + _unstated_gpus(unstated.get(r["phase"], [])))
    for phase, reasons in apart.items():
        prev = out.get(phase)
        base = prev or PhaseActual(phase=phase, runs=0, gpu_hours_spent=0.0, steps_done=0,
                                   steps_planned=None, projected_gpu_hours=None,
                                   basis="measured: no tracked run of the planned setup")
        out[phase] = PhaseActual(**{**base.__dict__, "other_setup_runs": len(reasons),
                                    "other_setup_reasons": tuple(reasons)})
    return out
