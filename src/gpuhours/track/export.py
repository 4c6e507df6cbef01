"""Ledger records to Weights & Biases and MLflow: each benchmark measurement and each tracked run
becomes one run there, with the setup as parameters, the measured figures as metrics (the
per-step series where the ledger has them) and tags that say it is a gpuhours measurement, with
its ledger id, device and date.

Only measured figures are exported as measurements. The few estimates a ledger row carries
beside its measurement (a generation benchmark's `estimated_prefill_s`) are renamed
`predicted_*`, so that no dashboard shows them as measured.

Idempotent: each record has a stable key (`gpuhours-m3-1a2b3c4d`: measurement 3 of this ledger,
with a digest of its creation time, host, device and model, so that measurement 3 of another
ledger is another key). It is the W&B run id, and the MLflow tag `gpuhours.run_key`; a record
whose key is already there is skipped and said so.

wandb and mlflow are imported only here, inside the functions (the `export` extra); a missing
package is an InputError (exit code 2) naming the extra.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from gpuhours.errors import FieldError, InputError
from gpuhours.track.ledger import Ledger, Measurement
from gpuhours.track.runs import Run, StepRecord, get_run, list_runs, run_steps

EXTRA_HINT = "Install the export extra: pip install 'gpuhours[export]'."
#: W&B and MLflow project / experiment when none is given
DEFAULT_PROJECT = "gpuhours"
#: MLflow's tracking store when neither --tracking-uri nor $MLFLOW_TRACKING_URI is set
DEFAULT_MLFLOW_URI = "file:./mlruns"

#: top-level numbers of a measurement's results that are settings, not measured: not metrics
_SETTING_KEYS = ("repeats", "seed", "warmup_steps", "max_steps", "target_cv")
#: nested results of a measurement whose numbers are exported as `<group>.<key>` metrics
_MEASURED_GROUPS = ("memory", "phases_median_s", "timing")
#: a results key that holds an estimate, not a measurement, starts with one of these
_PREDICTED_PREFIXES = ("estimated_", "estimate_", "predicted_", "expected_", "physics_")
#: per-step series of a tracked run (StepRecord fields), exported with the step as its x
_STEP_SERIES = ("wall_s", "data_wait_s", "compute_s", "optimizer_s", "eval_s", "save_s",
                "samples", "tokens_real", "tokens_computed", "peak_memory_bytes",
                "device_util_pct")
#: environment entries of a measurement exported as parameters
_ENVIRONMENT_PARAMS = ("catalog_gpu", "torch", "transformers", "peft", "cuda_runtime",
                       "gpuhours", "python", "torch_threads", "cpu_model")

Scalar = str | int | float | bool


@dataclass(frozen=True)
class ExportRun:
    """One ledger record as it is exported. `series`: name -> [(step, value)]."""

    ledger_ref: str
    run_key: str
    name: str
    params: dict[str, Scalar]
    metrics: dict[str, float]
    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    created_utc: str = ""


@dataclass(frozen=True)
class ExportOutcome:
    """What happened to one record: `exported`, or `already` there (skipped)."""

    ledger_ref: str
    run_key: str
    status: str
    destination: str


# --- ledger records -> ExportRun ----------------------------------------------------------------


def run_key(prefix: str, record_id: int, created_utc: str, hostname: str, device: str,
            what: str) -> str:
    """The stable id of a ledger record in W&B and MLflow: `gpuhours-<prefix><id>-<digest>`,
    the digest (8 hex of SHA-1) over what makes the row itself, so that the same row exported
    twice has one key and row 3 of another ledger another."""
    digest = hashlib.sha1("|".join((prefix, str(record_id), created_utc, hostname, device,
                                    what)).encode()).hexdigest()[:8]
    return f"gpuhours-{prefix}{record_id}-{digest}"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _flat_params(values: dict[str, Any], prefix: str = "") -> dict[str, Scalar]:
    """Scalars as they are, nested dicts as `a.b`, lists and None as JSON text."""
    out: dict[str, Scalar] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat_params(value, f"{name}."))
        elif isinstance(value, (str, int, float, bool)):
            out[name] = value
        else:
            out[name] = json.dumps(value, sort_keys=True, default=str)
    return out


def _metric_name(key: str) -> str:
    """A results key as a metric name: estimates become `predicted_*`."""
    for prefix in _PREDICTED_PREFIXES:
        if key.startswith(prefix):
            return "predicted_" + key[len(prefix):]
    return key


def _source_tags(kind: str, ref: str, key: str, ledger_path: Path, device: str,
                 created_utc: str, status: str) -> dict[str, str]:
    return {"gpuhours.source": f"gpuhours {kind}", "gpuhours.basis": "measured",
            "gpuhours.ledger_id": ref, "gpuhours.ledger": str(ledger_path),
            "gpuhours.run_key": key, "gpuhours.device": device,
            "gpuhours.date": created_utc, "gpuhours.status": status}


def from_measurement(m: Measurement, ledger_path: Path) -> ExportRun:
    """A benchmark measurement: setup as parameters; the numbers of its results (and of its
    memory, phases_median_s and timing groups) as metrics, estimates among them renamed
    `predicted_*`; the timed steps' times (results.step_times_s) as the series
    `step_time_s`."""
    ref = f"measurement {m.id}"
    key = run_key("m", m.id, m.created_utc, m.hostname, m.device_key, m.model)
    params: dict[str, Scalar] = {"model": m.model, "kind": m.kind, "status": m.status,
                                 "device_kind": m.device_kind, "device": m.device_name,
                                 "gpu": m.environment.get("catalog_gpu") or m.device_name,
                                 "hostname": m.hostname}
    params.update(_flat_params({k: v for k, v in m.setup.items() if k != "model"}))
    params.update({f"env.{k}": v for k, v in _flat_params(
        {k: m.environment.get(k) for k in _ENVIRONMENT_PARAMS if m.environment.get(k)
         is not None}).items()})
    metrics: dict[str, float] = {}
    for k, v in m.results.items():
        if _is_number(v) and k not in _SETTING_KEYS:
            metrics[_metric_name(k)] = float(v)
    for group in _MEASURED_GROUPS:
        values = m.results.get(group)
        if isinstance(values, dict):
            # timing.target_cv is the benchmark's setting, not a measurement
            metrics.update({f"{group}.{k}": float(v) for k, v in values.items()
                            if _is_number(v) and not k.startswith("target")})
    times = m.results.get("step_times_s")
    series = {}
    if isinstance(times, list) and times and all(_is_number(t) for t in times):
        series["step_time_s"] = [(i, float(t)) for i, t in enumerate(times)]
    name = (f"{m.model} {m.setup.get('method', '')} b{m.setup.get('micro_batch', '?')} "
            f"s{m.setup.get('seq_len', '?')} #{m.id}").replace("  ", " ")
    return ExportRun(ledger_ref=ref, run_key=key, name=name, params=params, metrics=metrics,
                     series=series, created_utc=m.created_utc,
                     tags=_source_tags(f"{m.kind} measurement", ref, key, ledger_path,
                                       m.device_name, m.created_utc, m.status))


def from_tracked_run(run: Run, steps: list[StepRecord], ledger_path: Path) -> ExportRun:
    """A tracked training run: its config as parameters; its summary's numbers, and the median
    step time, tokens/s (real tokens / step wall time, summed) and peak memory of its step
    records as metrics; each step record field as a series over the steps."""
    ref = f"run {run.id}"
    key = run_key("r", run.id, run.created_utc, run.hostname, run.device_name, run.name)
    params: dict[str, Scalar] = {"project": run.project, "phase": run.phase,
                                 "device_kind": run.device_kind, "device": run.device_name,
                                 "hostname": run.hostname, "status": run.status}
    if run.planned_steps is not None:
        params["planned_steps"] = run.planned_steps
    params.update(_flat_params(run.config))
    metrics = {f"summary.{k}": float(v) for k, v in run.summary.items() if _is_number(v)}
    if steps:
        walls = [s.wall_s for s in steps]
        metrics["steps_recorded"] = float(len(steps))
        metrics["step_time_median_s"] = float(statistics.median(walls))
        real = [s.tokens_real for s in steps if s.tokens_real is not None]
        if len(real) == len(steps) and sum(walls) > 0:
            metrics["tokens_per_s"] = sum(real) / sum(walls)
        peaks = [s.peak_memory_bytes for s in steps if s.peak_memory_bytes is not None]
        if peaks:
            metrics["peak_memory_bytes"] = float(max(peaks))
    series: dict[str, list[tuple[int, float]]] = {}
    for name in _STEP_SERIES:
        points = [(s.step, float(getattr(s, name))) for s in steps
                  if _is_number(getattr(s, name))]
        if points:
            series["step_time_s" if name == "wall_s" else name] = points
    return ExportRun(ledger_ref=ref, run_key=key, name=run.name or f"{run.project}/{run.phase}",
                     params=params, metrics=metrics, series=series, created_utc=run.created_utc,
                     tags=_source_tags("tracked run", ref, key, ledger_path, run.device_name,
                                       run.created_utc, run.status))


def parse_ref(text: str) -> tuple[str, int]:
    """`3` or `m3`: measurement 3; `r3`: tracked run 3."""
    t = text.strip().lower()
    kind = "r" if t.startswith("r") else "m"
    digits = t[1:] if t[:1] in ("m", "r") else t
    if not digits.isdigit() or int(digits) < 1:
        raise FieldError("run", f"expected a ledger id: 3 or m3 (measurement 3, `gpuhours "
                                f"ledger list`) or r3 (tracked run 3), got {text!r}.")
    return kind, int(digits)


def ledger_exports(ledger: Ledger, refs: list[str] | None = None) -> list[ExportRun]:
    """The records to export: those of `refs` (parse_ref), else every measurement and every
    tracked run of the ledger not marked running, oldest first. A run still marked running is
    left out by default (its key would stand for the steps so far, and a later export of the
    finished run would find the key and skip it; `running_runs` names them); asked for by ref
    it is exported as it is (a run killed by the system stays marked running for good)."""
    path = ledger.path.resolve()
    if refs:
        out = []
        for ref in refs:
            kind, number = parse_ref(ref)
            try:
                if kind == "m":
                    out.append(from_measurement(ledger.measurement(number), path))
                    continue
                run = get_run(ledger, number)
            except InputError as e:  # named by the run asked for, not by the ledger's words
                raise FieldError("run", e.message, e.hint, given=ref) from None
            out.append(from_tracked_run(run, run_steps(ledger, number), path))
        return out
    measured = [from_measurement(m, path) for m in reversed(ledger.measurements())]
    tracked = [from_tracked_run(r, run_steps(ledger, r.id), path)
               for r in reversed(list_runs(ledger)) if r.status != "running"]
    return measured + tracked


def running_runs(ledger: Ledger) -> list[int]:
    """The ids of the ledger's tracked runs still running (not exported until they finish)."""
    return [r.id for r in list_runs(ledger) if r.status == "running"]


# --- destinations -------------------------------------------------------------------------------


def _require(module: str, package: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] != module.split(".")[0]:
            raise
        raise InputError(package, "is not installed: exporting needs it.", EXTRA_HINT) from None


def _rows_by_step(series: dict[str, list[tuple[int, float]]]) -> list[tuple[int, dict[str, float]]]:
    rows: dict[int, dict[str, float]] = {}
    for name, points in series.items():
        for step, value in points:
            rows.setdefault(step, {})[name] = value
    return sorted(rows.items())


def _wandb_tags(r: ExportRun) -> list[str]:
    """W&B tags are plain strings of at most 64 characters."""
    kind, _, number = r.ledger_ref.partition(" ")
    return ["gpuhours", "measured", f"ledger-{kind}-{number}", r.created_utc[:10]]


def wandb_local_runs(directory: Path, key: str) -> list[Path]:
    """Local W&B run directories of `key` under `directory`/wandb (offline or synced)."""
    return sorted(p for p in (directory / "wandb").glob(f"*run-*-{key}") if p.is_dir())


def _wandb_online_has(wandb: Any, entity: str | None, project: str, key: str) -> bool:
    """Whether the W&B server already has run `key` (online mode only; needs a login)."""
    path = f"{entity or '(your default entity)'}/{project}/{key}"
    try:
        api = wandb.Api()
        path = f"{entity or api.default_entity}/{project}/{key}"
        api.run(path)
    except Exception as e:  # wandb raises CommError / ValueError for a run it cannot find
        if "not found" in str(e).lower() or "could not find" in str(e).lower():
            return False
        # no API key (UsageError), no network, a server error: nothing was exported
        raise InputError("W&B", f"could not check whether run {path} exists: {e}",
                         "Log in (wandb login), or export with --offline.") from None
    return True


def export_to_wandb(runs: list[ExportRun], *, project: str = DEFAULT_PROJECT,
                    entity: str | None = None, offline: bool = False,
                    directory: str | Path | None = None) -> list[ExportOutcome]:
    """Each record as one W&B run with id = its run key: parameters and the gpuhours tags in
    the config (`gpuhours` holds the tags), metrics in the summary, series logged per step.

    `offline`: W&B's offline mode (also when $WANDB_MODE is offline): runs are written under
    `directory`/wandb/offline-run-*-<key>/ for `wandb sync`; a key already there is skipped.
    Online, a key the server has is skipped. `directory`: default $WANDB_DIR, else the current
    directory."""
    wandb = _require("wandb", "wandb")
    offline = offline or os.environ.get("WANDB_MODE", "").lower() in ("offline", "dryrun")
    where = Path(directory or os.environ.get("WANDB_DIR") or ".").expanduser().resolve()
    where.mkdir(parents=True, exist_ok=True)
    settings = wandb.Settings(console="off", x_disable_stats=True, silent=True,
                              disable_git=True, disable_code=True, x_disable_machine_info=True)
    outcomes = []
    for r in runs:
        there = wandb_local_runs(where, r.run_key)
        if there or (not offline and _wandb_online_has(wandb, entity, project, r.run_key)):
            outcomes.append(ExportOutcome(r.ledger_ref, r.run_key, "already",
                                          str(there[0]) if there else f"{project}/{r.run_key}"))
            continue
        try:
            run = wandb.init(project=project, entity=entity, id=r.run_key, name=r.name,
                             config={**r.params, "gpuhours": r.tags}, tags=_wandb_tags(r),
                             mode="offline" if offline else "online", dir=str(where),
                             settings=settings, resume="never", reinit="create_new")
        except wandb.errors.Error as e:  # a refused login, project or entity
            raise InputError("W&B", f"refused run {r.run_key} ({r.ledger_ref}): {e}",
                             "Check --project and --entity, or export with --offline.") from None
        try:
            for step, row in _rows_by_step(r.series):
                run.log(row, step=step)
            for k, v in r.metrics.items():
                run.summary[k] = v
        finally:
            run.finish()
        local = wandb_local_runs(where, r.run_key)
        if local and offline:  # its log is complete before `wandb sync` or a reader comes
            from gpuhours.track.wandb_file import wait_until_complete

            wait_until_complete(local[-1])
        outcomes.append(ExportOutcome(r.ledger_ref, r.run_key, "exported",
                                      str(local[-1]) if local else f"{project}/{r.run_key}"))
    return outcomes


@contextmanager
def _file_store_allowed(uri: str) -> Iterator[None]:
    """MLflow 3 refuses a file: store unless MLFLOW_ALLOW_FILE_STORE is set (it is in
    maintenance mode; mlflow-skinny has no database store): allow it for this export only."""
    name = "MLFLOW_ALLOW_FILE_STORE"
    local = uri.startswith("file:") or "://" not in uri
    before = os.environ.get(name)
    if local and before is None:
        os.environ[name] = "true"
    try:
        yield
    finally:
        if local and before is None:
            os.environ.pop(name, None)


def _created_ms(created_utc: str) -> int:
    try:
        return int(datetime.fromisoformat(created_utc).timestamp() * 1000)
    except ValueError:
        return 0


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def export_to_mlflow(runs: list[ExportRun], *, tracking_uri: str | None = None,
                     experiment: str = DEFAULT_PROJECT) -> list[ExportOutcome]:
    """Each record as one MLflow run in `experiment`: parameters, metrics (at step 0), series
    (one metric history per name, by step), and the gpuhours tags; a run whose tag
    gpuhours.run_key is the record's key is skipped. `tracking_uri`: default
    $MLFLOW_TRACKING_URI, else DEFAULT_MLFLOW_URI (a file: store; a sqlite: URI needs the full
    mlflow package)."""
    _require("mlflow", "mlflow-skinny")
    from mlflow.entities import Metric, Param
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_MLFLOW_URI
    outcomes = []
    try:
        with _file_store_allowed(uri):
            client = MlflowClient(tracking_uri=uri)
            found = client.get_experiment_by_name(experiment)
            experiment_id = found.experiment_id if found else client.create_experiment(experiment)
            for r in runs:
                done = client.search_runs([experiment_id], filter_string=(
                    f"tags.`gpuhours.run_key` = '{r.run_key}'"), max_results=1)
                if done:
                    outcomes.append(ExportOutcome(r.ledger_ref, r.run_key, "already",
                                                  f"{uri} run {done[0].info.run_id}"))
                    continue
                ms = _created_ms(r.created_utc)
                run = client.create_run(experiment_id, start_time=ms or None, run_name=r.name,
                                        tags={**r.tags, "mlflow.source.name": "gpuhours export"})
                run_id = run.info.run_id
                params = [Param(k[:250], str(v)[:6000]) for k, v in r.params.items()]
                metrics = [Metric(k, v, ms, 0) for k, v in r.metrics.items()]
                metrics += [Metric(name, value, ms, step) for name, points in r.series.items()
                            for step, value in points]
                for chunk in _chunks(params, 100):
                    client.log_batch(run_id, params=chunk)
                for chunk in _chunks(metrics, 1000):
                    client.log_batch(run_id, metrics=chunk)
                client.set_terminated(run_id, "FINISHED", end_time=ms or None)
                outcomes.append(ExportOutcome(r.ledger_ref, r.run_key, "exported",
                                              f"{uri} run {run_id}"))
    except MlflowException as e:
        hint = ("A sqlite: store needs the full mlflow package (pip install mlflow); the "
                "export extra's mlflow-skinny writes a file: store." if uri.startswith("sqlite")
                else "Check --tracking-uri.")
        raise FieldError("tracking_uri", f"MLflow refused it: {str(e).splitlines()[0]}", hint,
                         given=uri) from None
    return outcomes
