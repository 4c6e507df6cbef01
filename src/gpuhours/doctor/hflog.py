"""`gpuhours doctor --hf-log trainer_state.json`: what an existing Hugging Face Trainer log can
tell after the fact.

A trainer_state.json has the step counts (global_step, max_steps), the intervals (logging,
evaluation, save), `log_history` (training losses, evaluation entries with eval_runtime, and at
the end train_runtime, train_samples_per_second and total_flos). So it can measure the share
of evaluation and the achieved FLOP/s; it cannot tell data waits, padding or the time of a
checkpoint save (no per-step timing): those are listed as not judged, with how to track them.

It does not say the model or the setup either: given them (`--model`, the setup options) and a
GPU, the run is compared with physics as a tracked run is (physics.py: the low-efficiency rule
and the options table), its step measured as run time minus evaluation over global_step.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

from gpuhours.catalog.schema import GpuSpec
from gpuhours.doctor.diagnose import Diagnosis, price_per_gpu_hour
from gpuhours.doctor.physics import (
    LOW_EFFICIENCY_RATIO,
    OptionRow,
    low_efficiency_vs,
    options_table,
)
from gpuhours.doctor.rules import (
    LOW_CONFIDENCE_STEPS,
    MIN_STEPS,
    TARGET_OVERHEAD_SHARE,
    Finding,
    RunView,
)
from gpuhours.errors import FieldError, InputError
from gpuhours.estimate.figures import Figure
from gpuhours.estimate.timing import peak_flops
from gpuhours.files import TRAINER_STATE_MAX_BYTES, read_user_text
from gpuhours.setup import Hardware, Training

#: the log's samples per optimizer step may differ from micro-batch x GPUs x accumulation by this
#: share of the accumulation (assumption: the Trainer rounds samples/s to 3 decimals, and an
#: epoch's last optimizer step may be partial, so samples / max_steps falls a little short)
ACCUM_TOLERANCE = 0.1


def read_trainer_state(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    where = f"--hf-log {p}"
    try:
        text = read_user_text(p, where, TRAINER_STATE_MAX_BYTES, "trainer_state.json")
    except FileNotFoundError:
        raise InputError(where, "does not exist.") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(where, f"is not valid JSON (line {e.lineno}, column {e.colno}: "
                                f"{e.msg}); a truncated file?",
                         "Give the trainer_state.json that the Trainer writes in each "
                         "checkpoint folder.") from None
    if not isinstance(data, dict) or not isinstance(data.get("log_history"), list) \
            or "global_step" not in data:
        raise InputError(where, "is not a Hugging Face trainer_state.json (expected an object "
                                "with global_step and a log_history list).",
                         "It is written as checkpoint-*/trainer_state.json.")
    return data


def checkpoint_rate(path: str | Path) -> tuple[float, str] | None:
    """(seconds per optimizer step, basis) from the checkpoints beside `path` when it is
    output_dir/checkpoint-N/trainer_state.json: each checkpoint's trainer_state.json is written
    when that checkpoint is saved, so the file times of two or more of them measure the rate
    between them (save time included). None with fewer than two."""
    p = Path(path)
    if not p.parent.name.startswith("checkpoint-"):
        return None
    points = []
    for f in p.parent.parent.glob("checkpoint-*/trainer_state.json"):
        try:
            step = int(json.loads(f.read_text(encoding="utf-8")).get("global_step") or 0)
            points.append((step, f.stat().st_mtime))
        except (OSError, ValueError, AttributeError):
            continue  # a checkpoint being written or a foreign file: not a time point
    points.sort()
    if len(points) < 2 or points[-1][0] <= points[0][0] or points[-1][1] <= points[0][1]:
        return None
    (s0, t0), (s1, t1) = points[0], points[-1]
    rate = (t1 - t0) / (s1 - s0)
    return rate, (f"measured: file times of {len(points)} checkpoint trainer_state.json files "
                  f"(steps {s0}-{s1} in {(t1 - t0) / 3600:.2f} h, checkpoint saves included)")


def samples_per_step(state: dict[str, Any], final: dict[str, Any], seq_len: int
                     ) -> tuple[float, str] | None:
    """Samples (sequences) per optimizer step over all GPUs, from the log, with its basis.

    The Trainer's train_samples_per_second x train_runtime is its num_train_samples (max_steps
    x total batch, or examples x epochs), over max_steps (transformers Trainer._inner_training_
    loop, speed_metrics); else num_input_tokens_seen (summed over processes) / global_step /
    `seq_len`, which assumes every sequence is `seq_len` tokens. None when the log has neither."""
    steps = int(state.get("max_steps") or state.get("global_step") or 0)
    rate, runtime = final.get("train_samples_per_second"), final.get("train_runtime")
    if rate and runtime and steps:
        return (float(rate) * float(runtime) / steps,
                "measured: train_samples_per_second x train_runtime / max_steps")
    seen, done = state.get("num_input_tokens_seen"), int(state.get("global_step") or 0)
    if seen and done:
        return (float(seen) / done / seq_len,
                f"measured: num_input_tokens_seen / global_step / {seq_len} tokens per sequence")
    return None


def seq_from_log(state: dict[str, Any], final: dict[str, Any]) -> tuple[int, str] | None:
    """Tokens per sequence from the log, with its basis: num_input_tokens_seen / global_step
    (tokens per step) over the samples per step of train_samples_per_second (samples_per_step).
    The Trainer counts every position by default (include_num_input_tokens_seen=True or "all")
    and only the real ones with "non_padding": then it is the mean length, shorter than the
    padded sequence. None when the log has no token count or no sample rate."""
    seen, done = state.get("num_input_tokens_seen"), int(state.get("global_step") or 0)
    found = samples_per_step(state, final, 1)
    if not seen or not done or found is None or not found[1].startswith(
            "measured: train_samples_per_second"):
        return None
    seq = round(float(seen) / done / found[0])
    return (seq, f"seq {seq}: measured, num_input_tokens_seen / global_step / {found[0]:.4g} "
                 "samples per step (padding included unless the Trainer counted non_padding)"
            ) if seq >= 1 else None


def hf_training(state: dict[str, Any], final: dict[str, Any], model: str,
                choices: dict[str, Any], gpus: int, defaulted: list[str]
                ) -> tuple[Training, list[str], list[str]]:
    """The run's setup as a Training, the basis of the figures taken from the log, and the
    fields still at their defaults (assumed).

    `choices`: Training fields as given (micro_batch and grad_accum absent when not given);
    `defaulted`: those of them the user left at their defaults. Sequence length: when not
    given, seq_from_log where the log counts tokens.
    Micro-batch: else the log's train_batch_size, the Trainer's batch per process
    (per_device_train_batch_size; one process per GPU under torchrun, accelerate or deepspeed).
    Accumulation: else the log's samples per step / (micro-batch x GPUs), which must be a whole
    number (within ACCUM_TOLERANCE); else 1, assumed."""
    given = dict(choices)
    batch, accum = given.pop("micro_batch", None), given.pop("grad_accum", None)
    for field, value in (("micro_batch", batch), ("grad_accum", accum)):
        if value is not None and value < 1:
            raise FieldError(field, f"expected a positive count, got {value}.")
    bases = []
    defaulted = list(defaulted)
    if "seq_len" in defaulted and (seq := seq_from_log(state, final)) is not None:
        given["seq_len"] = seq[0]
        defaulted.remove("seq_len")
        bases.append(seq[1])
    if batch is None:
        logged = state.get("train_batch_size")
        if not isinstance(logged, int) or isinstance(logged, bool) or logged < 1:
            raise FieldError("micro_batch", "the log has no train_batch_size to take the "
                                            "micro-batch from.",
                             "Pass --batch (sequences per GPU per micro-batch).")
        batch = logged
        bases.append(f"micro-batch {batch}: the log's train_batch_size (the Trainer's batch "
                     "per process, one process per GPU)")
    else:
        bases.append(f"micro-batch {batch}: given (--batch)")
    found = samples_per_step(state, final, int(given.get("seq_len") or 1))
    if found is not None:
        samples, source = found
        derived = samples / (batch * gpus)
        whole = max(1, round(derived))
        if abs(whole - derived) > ACCUM_TOLERANCE * whole:
            raise FieldError(("micro_batch", "num_gpus"), f"the log's {samples:.4g} samples per "
                             f"optimizer step ({source}) are not micro-batch {batch} x {gpus} "
                             f"GPU(s) x a whole number of accumulation steps ({derived:.3g}).",
                             "Pass --batch (per GPU) and --gpus as the run had them; a run of "
                             "one process over several GPUs (DataParallel) logs "
                             "train_batch_size as the sum over them.")
        if accum is not None and accum != whole:
            raise FieldError("grad_accum", f"{accum} conflicts with the log: its {samples:.4g} "
                             f"samples per step / (micro-batch {batch} x {gpus} GPU(s)) = "
                             f"{derived:.3g}.", "Leave --grad-accum out to take it from the log.")
        bases.append(f"accumulation {whole}: {samples:.4g} samples per step ({source}) / "
                     f"(micro-batch {batch} x {gpus} GPU(s))")
        accum = whole
    elif accum is None:
        accum = 1
        bases.append("accumulation 1: assumed (the log does not say its samples per step; "
                     "pass --grad-accum)")
    else:
        bases.append(f"accumulation {accum}: given (--grad-accum)")
    t = Training.model_validate(dict(model=model, micro_batch=batch, grad_accum=accum, **given))
    return t, bases, defaulted


def _shown(value: object) -> str:
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


def compare_with_physics(view: RunView, t: Training, bases: list[str], defaulted: list[str],
                         gpu: GpuSpec, measured_s: float, time_basis: str,
                         confidence: Literal["normal", "low"]
                         ) -> tuple[list[Finding], list[str], list[OptionRow]]:
    """The tracked run's physics for a log: the low-efficiency rule (physics.low_efficiency_vs)
    on `view.num_gpus` x `gpu` with `measured_s` per step, and the options table
    (physics.options_table). Returns (findings, notes, options)."""
    from gpuhours.api import estimate_training

    hw = Hardware(gpu=gpu, num_gpus=view.num_gpus)
    est = estimate_training(t, hw)
    expected = est.step_time_s.value
    assumed = ("; assumed (the defaults of `gpuhours estimate`, not in the log): "
               + ", ".join(f"{f} {_shown(getattr(t, f))}" for f in defaulted)) if defaulted else ""
    setup = (f"setup compared: {t.label()} ({t.model_basis}); {'; '.join(bases)}{assumed}; "
             f"{view.num_gpus} x {gpu.name} (given: --gpu; GPUs "
             f"{'given: --gpus' if view.num_gpus > 1 else 'one assumed: pass --gpus'})")
    what = (f"run time minus the eval_runtime entries / global_step (run time: {time_basis}; "
            "data waits, logging and checkpoint saves are in it: the log does not separate "
            "them)")
    found = low_efficiency_vs(view, measured_s, what, est, hw, [setup])
    # with a finding, its evidence says all this; without, the note says what was compared
    notes = [] if found else [
        f"compared with physics: {measured_s:.3f} s per step measured (evaluation left out) vs "
        f"the estimator's {expected:.3f} s (formula): {expected / measured_s:.0%} of its speed "
        f"(low-efficiency below {LOW_EFFICIENCY_RATIO:.0%}). {setup}."]
    if not est.memory.fits:
        from gpuhours.report.units import gib

        notes.append(f"the estimator says this setup needs {gib(est.memory.total_bytes.value)} "
                     f"per GPU, more than {gpu.name}'s {gib(est.memory.device_bytes.value)}: "
                     "the run had other settings; pass --precision, --checkpointing, --zero "
                     "as it had them.")
    findings = [found.model_copy(update={"confidence": confidence})] if found else []
    catalog_price = view.price_basis.startswith("catalog")
    return findings, notes, options_table(view, t, gpu,
                                          None if catalog_price else view.usd_per_gpu_hour,
                                          catalog_price=catalog_price)


def diagnose_hf_log(path: str | Path, gpu: GpuSpec | None = None,
                    usd_per_gpu_hour: float | None = None,
                    planned_steps: int | None = None, gpus: int = 1,
                    elapsed_hours: float | None = None, model: str | None = None,
                    choices: dict[str, Any] | None = None,
                    defaulted: list[str] | None = None) -> Diagnosis:
    """Read a trainer_state.json. Its time: the final train_runtime; else the file times of
    the checkpoints beside it; else `elapsed_hours` (the wall time of its steps) when given.
    `gpus`: processes of the run (the log does not say); GPU hours count all of them.

    With `model` (a catalog name or config.json path) and `gpu`, the run is compared with
    physics (compare_with_physics): `choices` are the Training fields given (hf_training fills
    micro-batch and accumulation from the log), `defaulted` those of them left at their
    defaults (said as assumed)."""
    state = read_trainer_state(path)
    where = f"--hf-log {path}"
    if gpus < 1:
        raise FieldError("num_gpus", f"expected a positive count, got {gpus}.")
    if elapsed_hours is not None and not (math.isfinite(elapsed_hours) and elapsed_hours > 0):
        raise FieldError("elapsed_hours", f"expected a positive time, got {elapsed_hours!r}.")
    history: list[dict[str, Any]] = [h for h in state["log_history"] if isinstance(h, dict)]
    steps_done = int(state.get("global_step") or 0)
    if steps_done < MIN_STEPS:
        raise InputError(where, f"records {steps_done} optimizer step(s); at least {MIN_STEPS} "
                                "are needed to judge a run.")
    final: dict[str, Any] = next((h for h in reversed(history) if "train_runtime" in h), {})
    time_basis = "the Trainer's train_runtime"
    if final:
        runtime_s = float(final["train_runtime"])
        if not runtime_s > 0:
            raise InputError(where, f"train_runtime {runtime_s!r} is not a positive time.")
    elif (found := checkpoint_rate(path)) is not None:
        runtime_s, time_basis = found[0] * steps_done, found[1]
    elif elapsed_hours is not None:
        runtime_s, time_basis = elapsed_hours * 3600, "given: --elapsed-hours"
    else:
        raise InputError(where, "has no train_runtime entry (the run had not finished when this "
                                "state was written) and no other checkpoint beside it to time "
                                "the steps by, so its time cannot be measured.",
                         "Pass --elapsed-hours H (the wall time of its steps so far), give the "
                         "trainer_state.json of the output folder once the run has finished, "
                         "or track the run with gpuhours.track.")
    planned = planned_steps or int(state.get("max_steps") or steps_done)
    planned_basis = ("given: --planned-steps" if planned_steps else "max_steps of the log"
                     if state.get("max_steps") else
                     "the steps the log records (it holds no max_steps; pass --planned-steps)")
    price, price_basis = price_per_gpu_hour(gpu, usd_per_gpu_hour, {}, gpus)
    evals = [float(h["eval_runtime"]) for h in history if "eval_runtime" in h]
    eval_total = sum(evals)
    step_s = runtime_s / steps_done
    confidence: Literal["normal", "low"] = "low" if steps_done < LOW_CONFIDENCE_STEPS else "normal"
    findings: list[Finding] = []
    notes: list[str] = []
    if evals and eval_total / runtime_s >= 0.03:
        base_step = (runtime_s - eval_total) / steps_done
        every_now = int(state.get("eval_steps") or max(1, round(steps_done / len(evals))))
        mean_eval = eval_total / len(evals)
        every_new = max(every_now + 1, math.ceil(mean_eval / (TARGET_OVERHEAD_SHARE * base_step)))
        saved_total = (planned // every_now - planned // every_new) * mean_eval
        hours = saved_total / 3600 * gpus
        findings.append(Finding(
            rule="evaluation", title="Evaluation takes a large share",
            evidence=[f"{len(evals)} evaluations, {mean_eval:.1f} s each (eval_runtime, "
                      f"measured by the Trainer): {eval_total / runtime_s:.0%} of the "
                      f"{runtime_s / 3600:.2f} h train_runtime"],
            fix=f"eval_steps={every_new} instead of {every_now}, or evaluate on a fixed subset",
            saved_s_per_step=Figure(value=saved_total / planned, unit="s/step", basis="measured",
                                    source="eval_runtime entries of the log"),
            gpu_hours_saved=Figure(value=hours, unit="GPU h", basis="measured",
                                   source=f"(evaluations now - after) over {planned} planned "
                                          f"steps x mean eval_runtime x {gpus} GPU(s)"),
            usd_saved=None if price is None else Figure(
                value=hours * price, unit="USD", basis="formula",
                source=f"GPU hours x {price:g} USD/GPU-h ({price_basis})"),
            confidence=confidence))
    flos = state.get("total_flos") or final.get("total_flos")
    if flos and gpu is not None:
        achieved = float(flos) / runtime_s / gpus
        peak = peak_flops(gpu, "bf16-mixed")
        notes.append(f"achieved {achieved / 1e12:.1f} TFLOP/s per GPU = {achieved / peak:.0%} "
                     f"of {gpu.name}'s dense bf16 peak (measured: the Trainer's total_flos, "
                     f"about 6 x params x tokens, / run time / {gpus} GPU(s); evaluation "
                     f"time included)")
    elif flos:
        notes.append(f"achieved {float(flos) / runtime_s / gpus / 1e12:.2f} TFLOP/s per GPU "
                     f"(total_flos / run time / {gpus} GPU(s)); pass --gpu to compare with its "
                     "peak.")
    options: list[OptionRow] = []
    if model is not None:
        t, bases, assumed = hf_training(state, final, model, choices or {}, gpus,
                                        defaulted or [])
        if gpu is None:
            notes.append("not compared with physics: pass --gpu NAME (the run's GPU) for the "
                         "low-efficiency check and the options table.")
        else:
            view = RunView(source=str(path), steps=[], planned_steps=planned,
                           planned_basis=planned_basis, device_kind="cuda",
                           device_name=gpu.name, num_gpus=gpus, usd_per_gpu_hour=price,
                           price_basis=price_basis)
            more, more_notes, options = compare_with_physics(
                view, t, bases, assumed, gpu, (runtime_s - eval_total) / steps_done,
                time_basis, confidence)
            findings += more
            notes += more_notes
    else:
        notes.append("not compared with physics: the log does not say the model or the setup. "
                     "Pass --model (and --seq, --precision, --checkpointing, --zero as the run "
                     "had them) with --gpu for the low-efficiency check and the options table "
                     "(one GPU optimised, DDP / ZeRO-2 / ZeRO-3 on 2, 4, 8 GPUs).")
    findings.sort(key=lambda f: -f.gpu_hours_saved.value)
    save_steps = state.get("save_steps")
    if save_steps:
        notes.append(f"{steps_done // int(save_steps)} checkpoint saves (every {save_steps} "
                     "steps) but the log has no timing of them: checkpoint overhead not judged.")
    notes.append("the log has no per-step timing: data waits, padding, checkpoint time and "
                 "memory were not judged. Track the next run with gpuhours.track.hf_callback "
                 "(docs/doctor.md) and run `gpuhours doctor RUN`.")
    return Diagnosis(
        source=str(path), device=gpu.name if gpu else "unknown (not in the log)",
        status="finished", steps_recorded=steps_done, planned_steps=planned,
        planned_basis=planned_basis,
        time_shares={"eval": eval_total / runtime_s, "other": 1 - eval_total / runtime_s},
        step_time_mean_s=step_s,
        measured_gpu_hours_planned=Figure(
            value=step_s * planned / 3600 * gpus, unit="GPU h",
            basis="assumed" if time_basis.startswith("given") else "formula",
            source=f"run time / global_step x planned steps / 3600 x {gpus} GPU(s) "
                   f"(run time: {time_basis}; GPUs: "
                   f"{'given: --gpus' if gpus > 1 else 'one process assumed: pass --gpus'})"),
        usd_per_gpu_hour=price, price_basis=price_basis, findings=findings, options=options,
        notes=notes)
