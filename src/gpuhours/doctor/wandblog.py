"""`gpuhours doctor --wandb-run DIR`: a Weights & Biases run of a Hugging Face Trainer, read after
the fact, judged as `--hf-log` judges a trainer_state.json.

The Trainer's WandbCallback (transformers integrations/integration_utils.py, WandbCallback
.setup and .on_log) logs the TrainingArguments and the model config as the run's config; each
Trainer log as a history row with its keys renamed (`loss` -> `train/loss`, `eval_runtime` ->
`eval/runtime`) and `train/global_step`; and train_runtime, train_samples_per_second,
train_steps_per_second, train_loss and total_flos into the summary under their own names. So
the run holds what trainer_state.json holds: it is turned back into one (trainer_state_of) and
diagnosed by gpuhours.doctor.hflog, the same rules, figures and options.

What W&B adds: its own clock (`_runtime`, seconds since wandb.init, of each history row), used
as the run time of a run that has not finished (no train_runtime), and the host's GPUs (type
and count) when W&B saw any, used when --gpu / --gpus are not given.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from gpuhours.catalog.schema import GpuSpec
from gpuhours.doctor.diagnose import Diagnosis
from gpuhours.errors import FieldError, InputError
from gpuhours.estimate.figures import Figure
from gpuhours.track.wandb_file import WandbRun, read_wandb_run

#: the Trainer's end-of-training figures, which WandbCallback puts in the summary as they are
FINAL_KEYS = ("train_runtime", "train_samples_per_second", "train_steps_per_second",
              "train_loss", "total_flos")
#: trainer_state.json keys taken from the TrainingArguments in the run's config
_STATE_FROM_ARGS = (("train_batch_size", "per_device_train_batch_size"),
                    ("eval_steps", "eval_steps"), ("save_steps", "save_steps"),
                    ("logging_steps", "logging_steps"))


def _whole(value: Any) -> int | None:
    """A positive whole number, else None (a float eval_steps is a share of the run)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return value


def trainer_state_of(run: WandbRun, where: str) -> dict[str, Any]:
    """The trainer_state.json of a run the Trainer logged to W&B: global_step (the largest
    train/global_step), max_steps (the config's, else global_step of a finished run), the
    batch and intervals of the config, log_history with the Trainer's own key names, and the
    summary's final figures as the last entry."""
    rows = [h for h in run.history if _whole(h.get("train/global_step")) is not None
            or h.get("train/global_step") == 0]
    if not rows:
        raise InputError(where, "has no train/global_step in its history: not a run logged by "
                                "the Hugging Face Trainer (report_to='wandb').",
                         "Track the run with gpuhours.track (docs/doctor.md), or give its "
                         "trainer_state.json with --hf-log.")
    history: list[dict[str, Any]] = []
    for h in rows:
        entry: dict[str, Any] = {"step": int(h["train/global_step"])}
        for key, value in h.items():
            if key.startswith("eval/"):
                entry["eval_" + key[len("eval/"):]] = value
            elif key.startswith("train/") and key != "train/global_step":
                entry[key[len("train/"):]] = value
        history.append(entry)
    global_step = max(e["step"] for e in history)
    final = {k: run.summary[k] for k in FINAL_KEYS if k in run.summary}
    if "train_runtime" in final:
        history.append({**final, "step": global_step})
    cfg = run.config
    state: dict[str, Any] = {"global_step": global_step, "log_history": history}
    if (planned := _whole(cfg.get("max_steps"))) is not None:
        state["max_steps"] = planned
    elif "train_runtime" in final:
        state["max_steps"] = global_step
    strategies = {"eval_steps": cfg.get("eval_strategy", cfg.get("evaluation_strategy")),
                  "save_steps": cfg.get("save_strategy")}
    for key, arg in _STATE_FROM_ARGS:
        if (value := _whole(cfg.get(arg))) is not None and strategies.get(key) in (None, "steps"):
            state[key] = value
    seen = [v for v in [run.summary.get("train/num_input_tokens_seen"),
                        *(h.get("train/num_input_tokens_seen") for h in run.history)]
            if isinstance(v, (int, float)) and v > 0]
    if seen:
        state["num_input_tokens_seen"] = max(seen)
    if "total_flos" in final:
        state["total_flos"] = final["total_flos"]
    return state


def recorded_gpus(run: WandbRun) -> tuple[int | None, str | None]:
    """(GPU count, GPU name) W&B recorded of the host, each None when it saw none."""
    env = run.environment
    try:
        count = int(env.get("gpu_count") or 0) or None
    except (TypeError, ValueError):
        count = None
    name = env.get("gpu_type") or None
    nvidia = env.get("gpu_nvidia")
    if not name and isinstance(nvidia, list) and nvidia and isinstance(nvidia[0], dict):
        name = nvidia[0].get("name") or None
    if count is None and isinstance(nvidia, list) and nvidia:
        count = len(nvidia)
    return count, (str(name) if name else None)


def last_runtime_s(run: WandbRun) -> float | None:
    """W&B's `_runtime` of the last history row: seconds from wandb.init to the last log."""
    times = [h["_runtime"] for h in run.history if isinstance(h.get("_runtime"), (int, float))]
    return float(max(times)) if times else None


def diagnose_wandb_run(directory: str | Path, gpu: GpuSpec | None = None,
                       usd_per_gpu_hour: float | None = None,
                       planned_steps: int | None = None, gpus: int | None = None,
                       elapsed_hours: float | None = None, model: str | None = None,
                       choices: dict[str, Any] | None = None,
                       defaulted: list[str] | None = None) -> Diagnosis:
    """Diagnose the W&B run in `directory` (wandb/offline-run-*/ or run-*/) as
    gpuhours.doctor.hflog.diagnose_hf_log diagnoses a trainer_state.json (same arguments).
    `gpus` None: the GPU count W&B recorded of the host, else 1; `gpu` None: the catalog GPU
    of the type W&B recorded, when the catalog has it."""
    from gpuhours.doctor.hflog import diagnose_hf_log

    where = f"--wandb-run {directory}"  # the diagnosis's source, as the CLI user gave it
    try:
        run = read_wandb_run(directory)
        state = trainer_state_of(run, str(directory))
    except InputError as e:  # keyed by the field (the CLI names the option: --wandb-run DIR)
        raise FieldError("wandb_run", e.message, e.hint, given=str(directory)) from None
    notes = [f"read from the W&B run {run.run_id} ({run.project}/{run.name or run.run_id}): the "
             "Trainer's logs as WandbCallback wrote them (train/*, eval/*, the summary's "
             "train_runtime), per_device_train_batch_size as the micro-batch"]
    count, name = recorded_gpus(run)
    if gpus is None:
        gpus = count or 1
        if count:
            notes.append(f"GPUs: {count}, W&B's count of the host's GPUs (assumed all used by "
                         "the run; pass --gpus)")
    if gpu is None and name:
        from gpuhours import catalog
        from gpuhours.bench.device import catalog_gpu_for

        match = catalog_gpu_for(name)
        if match is not None:
            gpu = catalog.gpu(match)
            notes.append(f"GPU: {gpu.name}, the catalog row of {name} (W&B's record of the host)")
        else:
            notes.append(f"W&B recorded the GPU as {name}, which the catalog does not have: pass "
                         "--gpu to compare with physics")
    wandb_clock = False
    if "train_runtime" not in run.summary and elapsed_hours is None:
        runtime_s = last_runtime_s(run)
        if runtime_s:
            elapsed_hours, wandb_clock = runtime_s / 3600, True
    with tempfile.TemporaryDirectory(prefix="gpuhours-wandb-") as folder:
        path = Path(folder) / "trainer_state.json"
        path.write_text(json.dumps(state), encoding="utf-8")
        try:
            d = diagnose_hf_log(path, gpu, usd_per_gpu_hour, planned_steps, gpus, elapsed_hours,
                                model, choices, defaulted)
        except FieldError:
            raise
        except InputError as e:  # said of the converted log: name the user's run instead
            if not e.where.startswith("--hf-log"):
                raise
            raise FieldError("wandb_run", e.message.replace("train_runtime entry", "train_runtime "
                             "in its summary"), e.hint, given=str(directory)) from None
    figure = d.measured_gpu_hours_planned
    if wandb_clock:
        notes.append("run time: W&B's _runtime of the last logged row (the run has no "
                     "train_runtime: unfinished), from wandb.init, so start-up is included")
        figure = Figure(value=figure.value, unit=figure.unit, basis="formula",
                        source=figure.source.replace(
                            "given: --elapsed-hours", "W&B's _runtime at the last logged row"))
    return d.model_copy(update={"source": where, "measured_gpu_hours_planned": figure,
                                "device": gpu.name if gpu is not None else d.device,
                                "notes": [*notes, *d.notes]})
