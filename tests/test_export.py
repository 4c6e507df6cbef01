"""`gpuhours export wandb|mlflow` (gpuhours.track.export) against the real packages in their
local modes: W&B offline (WANDB_DIR in tmp_path, read back from the run's .wandb log by
gpuhours.track.wandb_file) and MLflow's file: store in tmp_path (read back by MlflowClient).

The ledger is built through its public API with hand-set values, so each exported figure is
checked against the number written, not against the exporter's own output. Nothing here may
reach the network: W&B offline and silent, MLflow telemetry off.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import InputError
from gpuhours.track.export import (
    export_to_mlflow,
    export_to_wandb,
    from_measurement,
    ledger_exports,
    wandb_local_runs,
)
from gpuhours.track.ledger import Ledger
from gpuhours.track.runs import StepRecord, add_steps, finish_run, start_run
from gpuhours.track.wandb_file import read_wandb_run

pytest.importorskip("wandb")
pytest.importorskip("mlflow")

#: 1,500 timed steps: W&B's log of them spans several 32 KiB blocks (records split over blocks)
STEP_TIMES_S = [0.49 + (i % 4) / 100 for i in range(1500)]
RESULTS = {"step_time_median_s": 0.505, "step_time_p90_s": 0.517, "tokens_per_s": 16_223.8,
           "mfu": 0.41, "peak_memory_bytes": 21_474_836_480, "step_times_s": STEP_TIMES_S,
           "memory": {"weights_bytes": 988_000_000, "basis": "measured: ..."},
           "timing": {"p10_s": 0.493, "target_cv": 0.02, "stable": True},
           "estimated_prefill_s": 0.125, "timing_basis": "measured: cuda events"}
SETUP = {"method": "lora", "precision": "bf16", "micro_batch": 4, "seq_len": 2048,
         "grad_accum": 1, "checkpointing": True, "compiled": False,
         "config_overrides": {"num_hidden_layers": 2}}
#: a tracked run's steps: (wall_s, tokens_real)
STEPS = [(1.0, 4000), (0.8, 3000), (1.2, 5000)]


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name, value in (("WANDB_MODE", "offline"), ("WANDB_SILENT", "true"),
                        ("WANDB_DIR", str(tmp_path / "wb")), ("WANDB_DISABLE_GIT", "true"),
                        ("WANDB_CONFIG_DIR", str(tmp_path / "wbconfig")),
                        ("WANDB_CACHE_DIR", str(tmp_path / "wbcache")),
                        ("MLFLOW_DISABLE_TELEMETRY", "true"), ("DO_NOT_TRACK", "true")):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture
def ledger_file(tmp_path: Path) -> Path:
    """Measurement 1 (a bench row of an H100) and tracked run 1 (3 steps on CPU)."""
    path = tmp_path / "ledger.sqlite"
    with Ledger.open(path) as book:
        book.add_measurement(
            kind="bench", status="ok", device_kind="cuda", device_key="cuda-h100-80gb",
            device_name="NVIDIA H100 80GB HBM3", model="qwen2.5-0.5b", setup=SETUP,
            model_config={}, environment={"hostname": "node1", "catalog_gpu": "h100-sxm",
                                          "torch": "2.13.0"},
            results=RESULTS, created_utc="2026-11-20T10:00:00+00:00")
        run_id = start_run(book, project="proj", phase="sft", name="sft-try", device_kind="cpu",
                           device_name="cpu", planned_steps=100,
                           config={"micro_batch": 2, "seq_len": 1024},
                           created_utc="2026-11-21T09:00:00+00:00", hostname="node2")
        add_steps(book, run_id, [StepRecord(step=i + 1, started_s=float(i), wall_s=w,
                                            compute_s=w / 2, tokens_real=t)
                                 for i, (w, t) in enumerate(STEPS)])
        finish_run(book, run_id, "finished", {"steps": 3, "wall_s": 3.0})
    return path


def records(path: Path, refs: list[str] | None = None) -> Any:
    with Ledger.open(path, create=False) as book:
        return ledger_exports(book, refs)


def test_measurement_record_holds_the_ledgers_numbers(ledger_file: Path) -> None:
    m = records(ledger_file, ["m1"])[0]
    assert m.metrics["tokens_per_s"] == 16_223.8 and m.metrics["mfu"] == 0.41
    assert m.metrics["memory.weights_bytes"] == 988_000_000
    assert m.metrics["timing.p10_s"] == 0.493
    # the benchmark's target and its estimate are not measurements
    assert "timing.target_cv" not in m.metrics and "estimated_prefill_s" not in m.metrics
    assert m.metrics["predicted_prefill_s"] == 0.125
    assert m.series["step_time_s"] == list(enumerate(STEP_TIMES_S))
    assert m.params["micro_batch"] == 4 and m.params["gpu"] == "h100-sxm"
    assert m.params["config_overrides.num_hidden_layers"] == 2
    assert m.tags["gpuhours.ledger_id"] == "measurement 1"
    assert m.tags["gpuhours.date"] == "2026-11-20T10:00:00+00:00"


def test_tracked_run_record(ledger_file: Path) -> None:
    r = records(ledger_file, ["r1"])[0]
    # tokens/s by hand: (4000 + 3000 + 5000) / (1.0 + 0.8 + 1.2) = 4000
    assert r.metrics["tokens_per_s"] == pytest.approx(4000.0)
    assert r.metrics["step_time_median_s"] == 1.0
    assert r.metrics["summary.wall_s"] == 3.0
    assert r.series["step_time_s"] == [(1, 1.0), (2, 0.8), (3, 1.2)]
    assert r.series["compute_s"] == [(1, 0.5), (2, 0.4), (3, 0.6)]
    assert r.params["phase"] == "sft" and r.params["planned_steps"] == 100


def test_run_key_is_stable_and_differs_between_ledgers(ledger_file: Path, tmp_path: Path
                                                       ) -> None:
    first = [r.run_key for r in records(ledger_file)]
    assert first == [r.run_key for r in records(ledger_file)]
    assert first[0].startswith("gpuhours-m1-") and first[1].startswith("gpuhours-r1-")
    other = tmp_path / "other.sqlite"
    with Ledger.open(other) as book:  # measurement 1 of another ledger: another row
        book.add_measurement(kind="bench", status="ok", device_kind="cpu", device_key="cpu-x",
                             device_name="cpu", model="qwen2.5-0.5b", setup=SETUP,
                             model_config={}, environment={"hostname": "node3"},
                             results=RESULTS, created_utc="2026-11-22T10:00:00+00:00")
    assert records(other)[0].run_key != first[0]


def test_bad_run_reference(ledger_file: Path) -> None:
    with pytest.raises(InputError, match="expected a ledger id"):
        records(ledger_file, ["x1"])
    with pytest.raises(InputError, match="no measurement #7"):
        records(ledger_file, ["7"])


def test_wandb_offline_round_trip_and_idempotent(ledger_file: Path, tmp_path: Path) -> None:
    runs = records(ledger_file)
    where = tmp_path / "wb"
    first = export_to_wandb(runs, offline=True, directory=where)
    assert [o.status for o in first] == ["exported", "exported"]
    again = export_to_wandb(runs, offline=True, directory=where)
    assert [o.status for o in again] == ["already", "already"]
    folders = wandb_local_runs(where, runs[0].run_key)
    assert len(folders) == 1 and folders[0].name.startswith("offline-run-")
    # read back the run W&B wrote and compare with the numbers put in the ledger
    w = read_wandb_run(folders[0])
    assert w.run_id == runs[0].run_key and w.project == "gpuhours"
    assert {"gpuhours", "measured", "ledger-measurement-1"} <= set(w.tags)
    assert w.summary["tokens_per_s"] == 16_223.8
    assert w.summary["peak_memory_bytes"] == 21_474_836_480
    assert w.summary["predicted_prefill_s"] == 0.125
    assert w.config["micro_batch"] == 4 and w.config["precision"] == "bf16"
    assert w.config["gpuhours"]["gpuhours.basis"] == "measured"
    assert w.config["gpuhours"]["gpuhours.device"] == "NVIDIA H100 80GB HBM3"
    assert [(row["_step"], row["step_time_s"]) for row in w.history] == list(
        enumerate(STEP_TIMES_S))
    tracked = read_wandb_run(wandb_local_runs(where, runs[1].run_key)[0])
    assert [row["tokens_real"] for row in tracked.history] == [4000, 3000, 5000]


def test_mlflow_file_store_round_trip_and_idempotent(ledger_file: Path, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    uri = (tmp_path / "mlruns").as_uri()
    runs = records(ledger_file)
    assert [o.status for o in export_to_mlflow(runs, tracking_uri=uri)] == ["exported"] * 2
    assert [o.status for o in export_to_mlflow(runs, tracking_uri=uri)] == ["already"] * 2
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("gpuhours")
    assert exp is not None
    found = client.search_runs([exp.experiment_id])
    assert len(found) == 2  # exported twice, stored once
    m = next(r for r in found if r.data.tags["gpuhours.ledger_id"] == "measurement 1")
    assert m.data.metrics["tokens_per_s"] == 16_223.8 and m.data.metrics["mfu"] == 0.41
    assert m.data.metrics["predicted_prefill_s"] == 0.125
    assert m.data.params["seq_len"] == "2048" and m.data.params["method"] == "lora"
    assert m.data.tags["gpuhours.source"] == "gpuhours bench measurement"
    history = client.get_metric_history(m.info.run_id, "step_time_s")
    assert sorted((h.step, h.value) for h in history) == list(enumerate(STEP_TIMES_S))
    # the file store is allowed for the export only
    import os

    assert "MLFLOW_ALLOW_FILE_STORE" not in os.environ


runner = CliRunner()


def test_cli_wandb_offline_and_mlflow(ledger_file: Path, tmp_path: Path) -> None:
    r = runner.invoke(app, ["export", "wandb", "--ledger", str(ledger_file), "--offline",
                            "--dir", str(tmp_path / "wb"), "--run", "m1", "--json"])
    assert r.exit_code == 0, r.output
    assert [o["status"] for o in json.loads(r.stdout)] == ["exported"]
    r = runner.invoke(app, ["export", "mlflow", "--ledger", str(ledger_file), "--run", "r1",
                            "--tracking-uri", (tmp_path / "ml").as_uri()],
                      env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "1 exported, 0 already there" in r.stdout and "run 1 -> gpuhours-r1-" in r.stdout


def test_cli_errors_exit_2(ledger_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                           ) -> None:
    r = runner.invoke(app, ["export", "mlflow", "--ledger", str(tmp_path / "none.sqlite")])
    assert r.exit_code == 2 and "no ledger at" in r.output
    r = runner.invoke(app, ["export", "mlflow", "--ledger", str(ledger_file), "--run", "9"])
    assert r.exit_code == 2 and "--run 9" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["export", "wandb", "--ledger", str(ledger_file), "--offline",
                            "--dir", str(tmp_path / "wb"), "--project", "a/b"])
    assert r.exit_code == 2 and "Invalid project name" in r.output
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if the extra were not installed
    r = runner.invoke(app, ["export", "wandb", "--ledger", str(ledger_file), "--offline"])
    assert r.exit_code == 2 and "pip install 'gpuhours[export]'" in r.output


def test_measurement_without_step_times(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "l.sqlite") as book:
        book.add_measurement(kind="bench", status="does-not-fit", device_kind="cpu",
                             device_key="cpu", device_name="cpu", model="m", setup={},
                             model_config={}, environment={}, results={})
        m = from_measurement(book.measurement(1), book.path)
    assert m.series == {} and m.metrics == {} and m.params["status"] == "does-not-fit"


def test_online_without_a_wandb_login_is_exit_2(ledger_file: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # online mode with no API key anywhere: W&B refuses before any request is made
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    r = runner.invoke(app, ["export", "wandb", "--ledger", str(ledger_file), "--dir",
                            str(tmp_path / "wb")])
    assert r.exit_code == 2, r.output
    assert "could not check whether run" in r.output and "--offline" in r.output
    assert not wandb_local_runs(tmp_path / "wb", records(ledger_file)[0].run_key)


def test_a_run_still_running_is_not_exported(ledger_file: Path) -> None:
    """Exported mid-run, a run's key would stand for its first steps for good (a later export
    finds the key and skips it): it waits until it has finished."""
    with Ledger.open(ledger_file) as book:
        live = start_run(book, project="proj", phase="sft", name="live", device_kind="cpu",
                         device_name="cpu", planned_steps=10, config={})
        add_steps(book, live, [StepRecord(step=1, started_s=0.0, wall_s=1.0)])
    assert [r.ledger_ref for r in records(ledger_file)] == ["measurement 1", "run 1"]
    # asked for by ref (a run killed by the system stays marked running): exported as it is
    assert [r.ledger_ref for r in records(ledger_file, ["r2"])] == ["run 2"]
    with Ledger.open(ledger_file) as book:
        finish_run(book, live, "finished", {})
    assert [r.ledger_ref for r in records(ledger_file)] == ["measurement 1", "run 1", "run 2"]
