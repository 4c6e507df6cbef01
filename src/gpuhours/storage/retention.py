"""Checkpoint retention: which Hugging Face `checkpoint-<step>` directories, and which
checkpoint files (`checkpoint_step_500.pt`, `epoch=3-val_loss=0.23.ckpt`), to keep, and why.

Checkpoints are grouped by run (the directory that holds them; for files, the directory and the
name's pattern with its numbers left out, gpuhours.storage.scan). In each run the policy keeps:
- every incomplete checkpoint (see `incomplete_reasons`): a training process may be writing it;
- the newest complete checkpoint, by the step in its name, and the last `keep_last` (at least 1);
- with a metric, the best complete one and the best `keep_best` (at least 1); ties go to the
  newer step;
- a checkpoint that a symbolic link inside DIR points at, and the one the newest trainer state
  names as `best_model_checkpoint`;
- a checkpoint that holds a mount point (another filesystem, or a bind mount): what is mounted
  there is not ours, and a removal never crosses into it.
Every other complete checkpoint would be removed. Ordering is by step, not mtime: copying or
syncing a run rewrites mtimes, the step in the name stays (the Trainer's own numerical order).

A checkpoint's metric is the value of `metric` in the `log_history` entry of its
trainer_state.json whose `step` equals the checkpoint's step: the evaluation of that very model.
An evaluation at another step describes another model and is not used. A checkpoint file's
metric is the one its name carries (`val_loss=0.23`, as Lightning's ModelCheckpoint writes it);
a file is ordered by the step in its name, or by its epoch when it names no step. A metrics
file (`metrics_file`) can give the values instead, for both.
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpuhours.errors import FieldError, InputError
from gpuhours.estimate.assumptions import Assumption
from gpuhours.files import SMALL_JSON_MAX_BYTES, TRAINER_STATE_MAX_BYTES, read_user_text
from gpuhours.storage.scan import CheckpointDir, Scan

MetricMode = Literal["min", "max"]

#: A checkpoint with a file modified this recently is treated as still being written.
#: Assumption: a writer that pauses longer than this between two files (gathering a sharded
#: state before writing it) would be missed by this rule alone; the Trainer's layout is covered
#: by the trainer_state.json rule, which is written last.
DEFAULT_SETTLE_S = Assumption("settle_s", 300.0, "s",
                              "assumption: 5 minutes without a write means the writer is done")


class RetentionPolicy(BaseModel):
    """What to keep. Strict: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: the newest complete checkpoints kept per run; the newest is kept even at 0
    keep_last: int = Field(ge=0, le=1_000_000)
    #: the best complete checkpoints by `metric` kept per run; the best is kept even at 0
    keep_best: int = Field(default=0, ge=0, le=1_000_000)
    #: a key of the Trainer's log_history, e.g. eval_loss
    metric: str | None = None
    #: min: lower is better; max: higher is better; None: the Trainer's rule (greater_is_better
    #: defaults to False for a metric ending in "loss", True otherwise)
    mode: MetricMode | None = None
    #: a JSON file of {checkpoint path or name: number or {metric: number}}, instead of the
    #: trainer states
    metrics_file: str | None = None
    settle_s: float = Field(default=DEFAULT_SETTLE_S.value, ge=0, le=1e9)
    #: the file whose presence marks a finished checkpoint (the Trainer writes it last)
    marker: str = "trainer_state.json"

    @model_validator(mode="after")
    def _check(self) -> RetentionPolicy:
        if self.keep_best and not self.metric:
            raise FieldError("keep_best", "needs --metric: the name of the metric to rank "
                                            "checkpoints by, e.g. --metric eval_loss.")
        if self.metrics_file and not self.metric:
            raise FieldError("metrics_file", "needs --metric: which value of the file to use.")
        if self.mode and not self.metric:
            raise FieldError("mode", "needs --metric: the metric that min or max applies to.")
        if self.metric is not None and not self.metric.strip():
            raise FieldError("metric", "expected a metric name such as eval_loss, got ''.")
        if not self.marker or "/" in self.marker:
            raise FieldError("marker", f"expected a file name, got {self.marker!r}.")
        return self

    @property
    def resolved_mode(self) -> MetricMode | None:
        if self.metric is None:
            return None
        return self.mode or ("min" if self.metric.endswith("loss") else "max")

    def describe(self) -> str:
        text = f"keep the last {max(self.keep_last, 1)} complete checkpoints of each run"
        if self.metric:
            text += (f" and the best {max(self.keep_best, 1)} by {self.metric} "
                     f"({self.resolved_mode}imum is best)")
        return text + "; never an incomplete or linked one"


@dataclass(frozen=True)
class CheckpointFacts:
    """What the policy needs to know about one checkpoint (the input of `decide`)."""

    path: str
    run: str
    step: int
    incomplete: tuple[str, ...] = ()
    metric: float | None = None
    linked_from: tuple[str, ...] = ()
    named_best_by_trainer: bool = False
    mount_points: tuple[str, ...] = ()


class CheckpointDecision(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    run: str
    step: int
    files: int
    bytes: int
    metric: float | None
    action: Literal["keep", "remove"]
    #: why it is kept; empty when removed
    reasons: list[str]
    #: a checkpoint kept as one file (`epoch_3.ckpt`), not a checkpoint-<step> directory
    flat: bool = False
    #: a flat file's epoch, when its name carries one
    epoch: int | None = None
    #: False when `step` is the epoch (a file named by epoch alone)
    step_in_name: bool = True


class RetentionPlan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: RetentionPolicy
    policy_text: str
    decisions: list[CheckpointDecision]
    #: apparent bytes of the checkpoints to remove
    remove_bytes: int
    #: allocated bytes that removing them frees (a hard-linked file only when every link goes)
    frees_disk_bytes: int

    @property
    def to_remove(self) -> list[CheckpointDecision]:
        return [d for d in self.decisions if d.action == "remove"]


def decide(facts: Sequence[CheckpointFacts], policy: RetentionPolicy) -> list[list[str]]:
    """For each checkpoint, in the order given, the reasons to keep it; an empty list means
    remove. Pure: the rules of the module docstring, nothing else."""
    reasons: list[list[str]] = [[] for _ in facts]
    by_run: dict[str, list[int]] = defaultdict(list)
    for i, f in enumerate(facts):
        by_run[f.run].append(i)
    mode = policy.resolved_mode
    for indices in by_run.values():
        complete = [i for i in indices if not facts[i].incomplete]
        newest_first = sorted(complete, key=lambda i: (facts[i].step, facts[i].path), reverse=True)
        n_last = max(policy.keep_last, 1)
        for rank, i in enumerate(newest_first[:n_last]):
            reasons[i].append("newest" if rank == 0 else f"one of the last {n_last}")
        if policy.metric:
            scored = [i for i in complete if facts[i].metric is not None]
            sign = 1.0 if mode == "min" else -1.0
            ranked = sorted(scored, key=lambda i: (sign * (facts[i].metric or 0.0),
                                                   -facts[i].step, facts[i].path))
            n_best = max(policy.keep_best, 1)
            for rank, i in enumerate(ranked[:n_best]):
                reasons[i].append(f"best by {policy.metric}" if rank == 0
                                  else f"one of the best {n_best} by {policy.metric}")
        for i in indices:
            f = facts[i]
            reasons[i].extend(f"incomplete: {r}" for r in f.incomplete)
            if f.linked_from:
                reasons[i].append("a link points at it: " + ", ".join(f.linked_from[:3]))
            if f.named_best_by_trainer:
                reasons[i].append("the Trainer's best_model_checkpoint")
            if f.mount_points:
                reasons[i].append("holds a mount point (another filesystem or a bind mount), "
                                  "never crossed: " + ", ".join(f.mount_points[:3]))
    return reasons


def incomplete_reasons(c: CheckpointDir, policy: RetentionPolicy, now: float) -> list[str]:
    """Why a checkpoint may still be being written (empty: it is complete). The rule, any of:
    a `tmp-` name (the Trainer's staging directory); no marker file (trainer_state.json, which
    the Trainer writes after the weights, optimizer, scheduler and RNG state); a lock or
    temporary file inside (`*.lock`, `lock`, `*.tmp`, `*.partial`, `*.incomplete`); a file or
    directory in it modified less than `settle_s` seconds ago (or in the future); a part that
    could not be read.A checkpoint file has neither marker nor staging name (torch.save writes it in place):
    the settle window is its rule.
    """
    reasons = []
    if c.staging:
        reasons.append("tmp- name: the Trainer is still staging it")
    if not c.has_marker:
        reasons.append(f"no {policy.marker} (written last)")
    if c.lock_files:
        reasons.append(f"lock or temporary file {c.lock_files[0]}")
    age = now - c.newest_mtime
    if age < policy.settle_s:
        reasons.append(f"modified {max(age, 0):.0f} s ago (< {policy.settle_s:g} s)")
    if c.unreadable:
        reasons.append(f"could not read {c.unreadable[0]}")
    return reasons


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


@dataclass
class _State:
    metric: float | None
    metric_names: set[str]
    metric_steps: set[int]
    best_checkpoint: str | None


def _read_state(path: str, step: int, metric: str | None) -> _State:
    """The metric at `step` and the best_model_checkpoint of a trainer_state.json. Raises
    InputError naming the file and field when it is malformed; json.JSONDecodeError when it
    is not JSON (the caller decides whether a writer may be mid-write)."""
    text = read_user_text(path, path, TRAINER_STATE_MAX_BYTES, "trainer_state.json")
    data = json.loads(text)
    if not isinstance(data, dict):
        raise InputError(path, f"expected a JSON object (the Trainer's state), got "
                               f"{type(data).__name__}.")
    history = data.get("log_history", [])
    if not isinstance(history, list):
        raise InputError(f"{path}: field 'log_history'",
                         f"expected a list of log entries, got {type(history).__name__}.")
    value: float | None = None
    names: set[str] = set()
    steps: set[int] = set()
    for n, entry in enumerate(history):
        if not isinstance(entry, dict):
            raise InputError(f"{path}: field 'log_history[{n}]'",
                             f"expected an object, got {type(entry).__name__}.")
        entry_step = entry.get("step")
        if metric is not None and metric in entry:
            if not _is_number(entry[metric]):
                raise InputError(f"{path}: field 'log_history[{n}].{metric}'",
                                 f"expected a number, got {entry[metric]!r}.")
            if isinstance(entry_step, int | float) and not isinstance(entry_step, bool):
                steps.add(int(entry_step))
        if entry_step != step:
            continue
        names.update(k for k, v in entry.items() if _is_number(v) and k not in ("step", "epoch"))
        if metric is not None and metric in entry:
            value = float(entry[metric])
    best = data.get("best_model_checkpoint")
    if best is not None and not isinstance(best, str):
        raise InputError(f"{path}: field 'best_model_checkpoint'",
                         f"expected a path or null, got {best!r}.")
    if value is not None and not math.isfinite(value):
        value = None  # a diverged evaluation (NaN) cannot rank
    return _State(value, names, steps, best)


def _read_metrics_file(path: str, metric: str, checkpoints: Sequence[CheckpointDir]) -> dict[str, float]:
    """{checkpoint path: value} from a metrics file. Keys are a checkpoint's path relative to DIR
    or, when only one checkpoint has that name, its name."""
    try:
        data = json.loads(read_user_text(path, f"--metrics-file {path}", SMALL_JSON_MAX_BYTES,
                                         "metrics file (JSON)"))
    except FileNotFoundError:
        raise FieldError("metrics_file", f"{path}: no such file.") from None
    except json.JSONDecodeError as e:
        raise FieldError("metrics_file", f"{path}: not valid JSON ({e.msg} at line {e.lineno}, "
                                           f"column {e.colno}).") from None
    except (OSError, UnicodeDecodeError) as e:
        raise FieldError("metrics_file", f"{path}: cannot be read ({e}).") from None
    if not isinstance(data, dict):
        raise FieldError("metrics_file", f"{path}: expected a JSON object of {{checkpoint: "
                                           f"number or {{{metric!r}: number}}}}.")
    by_name: dict[str, list[str]] = defaultdict(list)
    for c in checkpoints:
        by_name[os.path.basename(c.rel_path)].append(c.rel_path)
    paths = {c.rel_path for c in checkpoints}
    values: dict[str, float] = {}
    for key, raw in data.items():
        v = raw.get(metric) if isinstance(raw, dict) else raw
        if isinstance(raw, dict) and metric not in raw:
            continue
        if not isinstance(v, int | float) or isinstance(v, bool):
            raise FieldError("metrics_file", f"{path}: key {key!r}: expected a number or an "
                                               f"object with a number {metric!r}, got {raw!r}.")
        key_path = key.strip("/")
        if key_path in paths:
            target = key_path
        elif len(by_name.get(key_path, [])) == 1:
            target = by_name[key_path][0]
        elif len(by_name.get(key_path, [])) > 1:
            raise FieldError("metrics_file", f"{path}: key {key!r} names checkpoints of several "
                                               f"runs ({', '.join(by_name[key_path][:3])}); use "
                                               "the path relative to DIR.")
        else:
            continue  # a checkpoint that is no longer there
        if math.isfinite(float(v)):
            values[target] = float(v)
    return values


def assess(s: Scan, policy: RetentionPolicy, now: float) -> RetentionPlan:
    """The retention plan for the checkpoints of a scan: reads each trainer state (and the
    metrics file), applies `decide`, counts what removal frees."""
    facts: list[CheckpointFacts] = []
    file_values = (_read_metrics_file(policy.metrics_file, policy.metric or "", s.checkpoints)
                   if policy.metrics_file else None)
    best_named: dict[str, tuple[int, str]] = {}  # run -> (step of the state, basename)
    metric_names: set[str] = set()
    metric_steps: set[int] = set()
    for c in s.checkpoints:
        reasons = incomplete_reasons(c, policy, now)
        value: float | None = None
        if c.flat:  # no trainer state: the metric, if any, is written in the file's name
            value = c.name_metrics.get(policy.metric) if policy.metric else None
            if value is not None and not math.isfinite(value):
                value = None
            if not reasons:
                metric_names |= set(c.name_metrics)
        elif c.has_marker:
            state_path = os.path.join(s.root, c.rel_path, policy.marker)
            try:
                st = _read_state(state_path, c.step, policy.metric)
            except json.JSONDecodeError as e:
                if not reasons:  # a settled checkpoint: the file is broken, not mid-write
                    raise InputError(state_path, f"is not valid JSON ({e.msg} at line {e.lineno}, "
                                                 f"column {e.colno}).",
                                     "Fix or move the file; gpuhours does not guess a "
                                     "checkpoint's state.") from None
                reasons.append(f"{policy.marker} is not valid JSON yet")
                st = _State(None, set(), set(), None)
            except (OSError, UnicodeDecodeError) as e:
                raise InputError(state_path, f"cannot be read ({e}).") from None
            value = st.metric
            if not reasons:
                metric_names |= st.metric_names
                metric_steps |= st.metric_steps
                if st.best_checkpoint and c.step >= best_named.get(c.run, (-1, ""))[0]:
                    best_named[c.run] = (c.step, os.path.basename(st.best_checkpoint.rstrip("/")))
        if file_values is not None:
            value = file_values.get(c.rel_path)
        facts.append(CheckpointFacts(path=c.rel_path, run=c.run, step=c.step,
                                     incomplete=tuple(reasons), metric=value,
                                     linked_from=tuple(c.linked_from),
                                     mount_points=tuple(c.mount_points)))
    facts = [replace(f, named_best_by_trainer=best_named.get(f.run, (0, ""))[1]
                     == os.path.basename(f.path)) for f in facts]
    if policy.metric:
        _check_metric_found(s, policy, facts, metric_names, metric_steps)
    reasons_of = decide(facts, policy)
    decisions = []
    removed: list[CheckpointDir] = []
    for c, f, why in zip(s.checkpoints, facts, reasons_of, strict=True):
        decisions.append(CheckpointDecision(path=c.rel_path, run=c.run, step=c.step, files=c.files,
                                            bytes=c.bytes, metric=f.metric,
                                            action="keep" if why else "remove", reasons=why,
                                            flat=c.flat, epoch=c.epoch,
                                            step_in_name=c.step_in_name))
        if not why:
            removed.append(c)
    return RetentionPlan(policy=policy, policy_text=policy.describe(), decisions=decisions,
                         remove_bytes=sum(c.bytes for c in removed),
                         frees_disk_bytes=freed_disk_bytes(removed))


def _check_metric_found(s: Scan, policy: RetentionPolicy, facts: Sequence[CheckpointFacts],
                        names: set[str], steps: set[int]) -> None:
    complete = [f for f in facts if not f.incomplete]
    if not complete or any(f.metric is not None for f in complete):
        return
    n_files = sum(1 for c in s.checkpoints if c.flat and c.rel_path in
                  {f.path for f in complete})
    where = f"--metrics-file {policy.metrics_file}" if policy.metrics_file else (
        f"the {policy.marker} of {len(complete) - n_files} complete checkpoint directories"
        + (f" and the names of {n_files} checkpoint files" if n_files else "")
        + f" under {s.root}")
    detail = ""
    if not policy.metrics_file:
        if steps:
            ckpt_steps = sorted({f.step for f in complete})
            detail = (f" It is logged at steps {_few(sorted(steps))} but at no checkpoint's step "
                      f"({_few(ckpt_steps)}): a checkpoint is scored only by the evaluation of "
                      "that step (make save_steps a multiple of eval_steps).")
        elif names:
            detail = f" Metrics logged at checkpoint steps: {', '.join(sorted(names)[:12])}."
        else:
            detail = " No metric is logged at any checkpoint's step."
    raise FieldError("metric", f"{policy.metric!r} is in no checkpoint: looked in {where}."
                                 f"{detail}")


def _few(values: Sequence[int]) -> str:
    return ", ".join(map(str, values[:6])) + (", ..." if len(values) > 6 else "")


def freed_disk_bytes(removed: Sequence[CheckpointDir]) -> int:
    """Allocated bytes freed by removing these checkpoints: single-link files, and a hard-linked
    file when all its links are among them."""
    total = sum(c.single_link_disk_bytes for c in removed)
    seen: dict[tuple[int, int], list[int]] = {}
    for c in removed:
        for key, (nlink, disk, count) in c.shared_inodes.items():
            entry = seen.setdefault(key, [nlink, disk, 0])
            entry[2] += count
    return total + sum(disk for nlink, disk, count in seen.values() if count >= nlink)
