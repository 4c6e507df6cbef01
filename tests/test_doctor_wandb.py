"""`gpuhours doctor --wandb-run DIR` (gpuhours.doctor.wandblog): a W&B run of a Hugging Face
Trainer, written for real by wandb in offline mode (WANDB_DIR in tmp_path), with what the
Trainer's WandbCallback logs (transformers integrations/integration_utils.py: the
TrainingArguments as config; each log as a history row with train/ and eval/ keys and
train/global_step; train_runtime, train_samples_per_second, total_flos in the summary).

The independent check: the same run's trainer_state.json, written by hand with the same
figures, read by `--hf-log`, gives the same diagnosis.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.doctor.wandblog import last_runtime_s, recorded_gpus, trainer_state_of
from gpuhours.track.wandb_file import WandbRun, read_wandb_run, wait_until_complete

wandb = pytest.importorskip("wandb")

#: 100 optimizer steps in 1,000 s; micro-batch 4 x accumulation 2 on 1 GPU = 8 samples per
#: step, so train_samples_per_second = 100 x 8 / 1000 = 0.8; evaluation every 25 steps, 30 s
#: each: 4 x 30 = 120 s, 12% of the run time
ARGS = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "max_steps": 100,
        "eval_strategy": "steps", "eval_steps": 25, "save_strategy": "steps", "save_steps": 50,
        "logging_steps": 25, "learning_rate": 2e-4, "bf16": True}
FINAL = {"train_runtime": 1000.0, "train_samples_per_second": 0.8,
         "train_steps_per_second": 0.1, "train_loss": 1.9, "total_flos": 3.0e15}
runner = CliRunner()


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name, value in (("WANDB_MODE", "offline"), ("WANDB_SILENT", "true"),
                        ("WANDB_DIR", str(tmp_path)), ("WANDB_DISABLE_GIT", "true"),
                        ("WANDB_CONFIG_DIR", str(tmp_path / "wbconfig")),
                        ("WANDB_CACHE_DIR", str(tmp_path / "wbcache"))):
        monkeypatch.setenv(name, value)


def trainer_rows(last_step: int = 100) -> list[dict[str, Any]]:
    """The history rows WandbCallback.on_log writes: a training log every 25 steps, an
    evaluation every 25 steps."""
    rows: list[dict[str, Any]] = []
    for step in range(25, last_step + 1, 25):
        rows.append({"train/loss": 2.0 - step / 1000, "train/learning_rate": 2e-4,
                     "train/epoch": step / 100, "train/global_step": step})
        rows.append({"eval/loss": 2.1 - step / 1000, "eval/runtime": 30.0,
                     "eval/samples_per_second": 10.0, "train/epoch": step / 100,
                     "train/global_step": step})
    return rows


def write_run(tmp_path: Path, rows: list[dict[str, Any]], summary: dict[str, Any],
              config: dict[str, Any] | None = None, run_id: str = "hf1") -> Path:
    run = wandb.init(project="hf", id=run_id, name="sft", mode="offline", dir=str(tmp_path),
                     config=ARGS if config is None else config,
                     settings=wandb.Settings(console="off", x_disable_stats=True, silent=True))
    for row in rows:
        run.log(row)
    for k, v in summary.items():
        run.summary[k] = v
    run.finish()
    (folder,) = (tmp_path / "wandb").glob(f"offline-run-*-{run_id}")
    assert wait_until_complete(folder)  # wandb's core process writes the log after finish()
    return folder


def trainer_state(tmp_path: Path) -> Path:
    """The trainer_state.json of the same run, as the Trainer writes it at the end."""
    history = [{("eval_" + k[5:] if k.startswith("eval/") else k.removeprefix("train/")): v
                for k, v in row.items() if k != "train/global_step"}
               | {"step": row["train/global_step"]} for row in trainer_rows()]
    state = {"global_step": 100, "max_steps": 100, "train_batch_size": 4, "eval_steps": 25,
             "save_steps": 50, "logging_steps": 25, "total_flos": FINAL["total_flos"],
             "log_history": [*history, {**FINAL, "step": 100}]}
    path = tmp_path / "out" / "trainer_state.json"
    path.parent.mkdir()
    path.write_text(json.dumps(state), encoding="utf-8")
    return path


def doctor_json(*args: str) -> dict[str, Any]:
    r = runner.invoke(app, ["doctor", *args, "--json"])
    assert r.exit_code == 0, r.output
    data: dict[str, Any] = json.loads(r.stdout)
    return data


def test_wandb_run_is_diagnosed_as_its_trainer_state(tmp_path: Path) -> None:
    folder = write_run(tmp_path, trainer_rows(), FINAL)
    setup = ["--model", "qwen2.5-0.5b", "--gpu", "a100-80gb", "--seq", "512"]
    got = doctor_json("--wandb-run", str(folder), *setup)
    want = doctor_json("--hf-log", str(trainer_state(tmp_path)), *setup)
    assert got["source"] == f"--wandb-run {folder}"
    assert got["notes"][0].startswith("read from the W&B run hf1 (hf/sft)")
    for key in ("steps_recorded", "planned_steps", "time_shares", "step_time_mean_s",
                "measured_gpu_hours_planned", "findings", "options", "usd_per_gpu_hour"):
        assert got[key] == want[key], key
    assert got["notes"][1:] == want["notes"]
    # by hand: 1000 s / 100 steps; evaluation 120 s of 1000
    assert got["step_time_mean_s"]["value"] == pytest.approx(10.0)
    assert got["time_shares"]["eval"]["value"] == pytest.approx(0.12)
    assert "evaluation" in [f["rule"] for f in got["findings"]]


def test_unfinished_run_is_timed_by_wandbs_clock(tmp_path: Path) -> None:
    folder = write_run(tmp_path, trainer_rows(50), {}, run_id="hf2")
    runtime_s = last_runtime_s(read_wandb_run(folder))
    assert runtime_s is not None and runtime_s > 0
    got = doctor_json("--wandb-run", str(folder))
    assert got["steps_recorded"] == 50 and got["planned_steps"] == 100  # max_steps of config
    figure = got["measured_gpu_hours_planned"]
    assert figure["basis"] == "formula" and "W&B's _runtime" in figure["source"]
    assert figure["value"] == pytest.approx(runtime_s / 50 * 100 / 3600)


def test_not_a_trainer_run_and_bad_input_exit_2(tmp_path: Path) -> None:
    folder = write_run(tmp_path, [{"loss": 1.0}, {"loss": 0.9}], {}, config={}, run_id="x1")
    r = runner.invoke(app, ["doctor", "--wandb-run", str(folder)])
    assert r.exit_code == 2 and "has no train/global_step" in r.output
    r = runner.invoke(app, ["doctor", "--wandb-run", str(tmp_path / "nothing")])
    assert r.exit_code == 2 and "does not exist" in r.output
    r = runner.invoke(app, ["doctor", "--wandb-run", str(tmp_path)])  # the parent folder
    assert r.exit_code == 2 and "no run-<id>.wandb file" in r.output
    (log,) = folder.glob("*.wandb")
    data = bytearray(log.read_bytes())
    data[40] ^= 0xFF  # one flipped byte inside the first record
    log.write_bytes(bytes(data))
    r = runner.invoke(app, ["doctor", "--wandb-run", str(folder)])
    assert r.exit_code == 2 and "CRC-32" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["doctor", "--wandb-run", str(folder), "--hf-log", "x.json"])
    assert r.exit_code == 2 and "(one)" in r.output


def test_trainer_state_of_hand_built_run() -> None:
    run = WandbRun(path=Path("x.wandb"), run_id="r", config={**ARGS, "max_steps": -1,
                                                              "eval_strategy": "epoch"},
                   summary=dict(FINAL), history=trainer_rows(50))
    state = trainer_state_of(run, "w")
    assert state["global_step"] == 50 and state["max_steps"] == 50  # finished: as run
    assert "eval_steps" not in state  # evaluation by epoch: no step interval
    assert state["train_batch_size"] == 4 and state["save_steps"] == 50
    assert state["log_history"][1] == {"step": 25, "eval_loss": 2.075, "eval_runtime": 30.0,
                                       "eval_samples_per_second": 10.0, "epoch": 0.25}
    assert state["log_history"][-1] == {**FINAL, "step": 50}


def test_gpus_recorded_by_wandb_are_used(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"gpu_type": "NVIDIA H100 80GB HBM3", "gpu_count": 8}
    run = WandbRun(path=Path("x.wandb"), run_id="g", project="p", config=ARGS,
                   summary=dict(FINAL), history=trainer_rows(), environment=env)
    assert recorded_gpus(run) == (8, "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr("gpuhours.doctor.wandblog.read_wandb_run", lambda *a, **k: run)
    got = doctor_json("--wandb-run", "somewhere")
    assert got["device"] == "h100-sxm"
    # 1000 s / 100 steps x 100 planned steps x 8 GPUs / 3600
    assert got["measured_gpu_hours_planned"]["value"] == pytest.approx(1000 * 8 / 3600)
    assert any("GPUs: 8, W&B's count" in n for n in got["notes"])
    given = doctor_json("--wandb-run", "somewhere", "--gpus", "2")
    assert given["measured_gpu_hours_planned"]["value"] == pytest.approx(1000 * 2 / 3600)
