"""Each phase of a plan -> GPU hours of one run, with its formula, bottleneck and basis.

Training phases go through the analytic estimator (estimate/estimator.py); generation through
estimate/generation.py; stated hours keep the basis "assumed" with the plan's line.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuhours.catalog.schema import GpuSpec
from gpuhours.errors import DoesNotFit, FieldError, InputError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.estimator import TrainingEstimate, estimate_training
from gpuhours.estimate.figures import BasisKind, Figure
from gpuhours.estimate.generation import (
    estimate_generation,
    max_batch_by_memory,
    rollout_precision,
    scoring_time_s,
)
from gpuhours.estimate.lengths import check_generation_context
from gpuhours.estimate.timing import check_fp8, peak_flops
from gpuhours.estimate.track_record import TrackRecord
from gpuhours.estimate.track_record import load as load_track_record
from gpuhours.estimate.weight_formats import released_weights
from gpuhours.plan.results import PhaseResult
from gpuhours.plan.rl_async import overlapped_bottleneck, pipelined_step_s
from gpuhours.plan.rl_images import (
    actor_image_prep_s,
    engine_images_s,
    validation_dataset_prep_s,
)
from gpuhours.plan.rl_inflight import inflight_step
from gpuhours.plan.rl_padding import (
    padded_micro_batch_tokens,
    padding_factor,
    padding_text,
    sequences_per_packed_micro_batch,
)
from gpuhours.plan.rl_paged import PagedBatch, paged_batch
from gpuhours.plan.rl_reward_host import RewardHost, reward_host
from gpuhours.plan.rl_rollout_room import rollout_room_hint
from gpuhours.plan.rl_scoring import expert_scoring_s, ref_offload_s, vision_scoring_s
from gpuhours.plan.rl_scoring_host import scoring_pass_s
from gpuhours.plan.rl_train import critic_added_s, role_split_text, role_updates_s
from gpuhours.plan.rl_validation import validation_per_step_s, validation_rollout_s
from gpuhours.plan.schema import (
    EvalPhase,
    FinetunePhase,
    FixedPhase,
    GridPhase,
    OnlinePhase,
    Plan,
    PretrainPhase,
    RLPhase,
    TrainingSettings,
)
from gpuhours.plan.storage import phase_storage, stated_storage
from gpuhours.resolve import resolve_model
from gpuhours.setup import CHOICE_FIELDS, Generation, Hardware, Training

#: a stated figure and physics disagree when their ratio leaves [1/2, 2]
DISAGREEMENT_RATIO = 2.0
#: training MFU outside this range is not seen in published runs (shared/reference/validation:
#: 39-74% on A100s; single GPUs with small models reach less)
PLAUSIBLE_MFU = (0.05, 0.75)



@dataclass(frozen=True)
class Context:
    """What every phase needs: the plan, its GPU, and the phase's line in the file."""

    plan: Plan
    gpu: GpuSpec
    lines: dict[str, int]
    path: str = "plan"
    #: a gpuhours.track.ledger.Ledger to calibrate training phases from, or None
    ledger: Any = None
    #: what each phase's `from:` file gave and could not give, by phase name (warnings)
    imported: dict[str, list[str]] = field(default_factory=dict)
    #: `from:` files as read, by path: each is read once per plan (a grid's experiments and
    #: every phase may name the same file); `setup_data` holds each one's loaded contents (an
    #: rl phase maps a verl config's rollout settings from them)
    setups: dict[str, Any] = field(default_factory=dict)
    setup_data: dict[str, Any] = field(default_factory=dict)
    #: (ledger id, what it set) for every measurement that calibrated a figure, in order: the
    #: budget lists them as its micro-benchmarks, each with the phases it set
    used_measurements: list[tuple[int, str]] = field(default_factory=list)
    #: the line of each key of each phase (plan/load.py), by phase name
    field_lines: dict[str, dict[str, int]] = field(default_factory=dict)


#: the prefix of a fingerprint of the settings the plan gives (DIGEST_SCHEME); a document's
#: state written before it fingerprinted every field, defaults included, so a release that
#: added a field changed every phase's fingerprint: the two are not compared
DIGEST_SCHEME = "given:"


def digest(obj: Any) -> str:
    """A short fingerprint of a phase's settings as the plan gives them (fields left out are
    not in it, so a release's new field or default does not read as the user's change)."""
    # pydantic's own JSON (fields in schema order): 5x faster than dumping to Python and then
    # to JSON, which was half the time of a 100,000-experiment grid
    text = obj.model_dump_json(exclude_unset=True) if hasattr(obj, "model_dump_json") else (
        json.dumps(obj, sort_keys=True))
    return DIGEST_SCHEME + hashlib.sha256(text.encode()).hexdigest()[:12]


def _where(ctx: Context, phase: Any) -> str:
    """The plan, the phase's line and the phase."""
    return _field_where(ctx, phase)


def _field_where(ctx: Context, phase: Any, *fields: str) -> str:
    """Where a phase's setting is at fault: the plan, the line of the first field the phase
    itself sets (else the phase's line: a field from `defaults:` or left to its default), the
    phase, and each field named."""
    own = ctx.field_lines.get(phase.name, {})
    line = next((own[f.split(".")[0]] for f in fields if f.split(".")[0] in own),
                ctx.lines.get(phase.name))
    named = ", ".join(f"field {f!r}" for f in fields)
    return (f"{ctx.path}" + (f", line {line}" if line else "") + f", phase {phase.name!r}"
            + (f", {named}" if named else ""))


def plan_error(ctx: Context, phase: Any, e: Exception) -> InputError:
    """A library error (keyed by setup field) as a plan error: the plan, line, phase, field."""
    if isinstance(e, ValidationError):
        first = e.errors()[0]
        cause = (first.get("ctx") or {}).get("error")
        if not isinstance(cause, InputError):
            field = str(first["loc"][-1]) if first["loc"] else "settings"
            return InputError(_field_where(ctx, phase, field),
                              f"{first['msg']} (got {first.get('input')!r}).")
        e = cause
    assert isinstance(e, InputError)
    if e.fields:
        return InputError(_field_where(ctx, phase, *e.fields), e.message, e.hint)
    return InputError(f"{_where(ctx, phase)}, {e.where}", e.message, e.hint)


def merged(ctx: Context, settings: TrainingSettings, *extra: TrainingSettings | None) -> dict:
    """Defaults, then the phase, then overrides: the last one that sets a field wins. A layer's
    `from:` file fills the settings below that layer's own (what it read and could not use is
    kept in ctx.imported for the phase's warnings)."""
    out: dict[str, Any] = {}
    for layer in (ctx.plan.defaults, settings, *extra):
        if layer is None:
            continue
        if layer.from_ is not None:
            out.update(_imported(ctx, settings, layer.from_))
        for key, value in layer.model_dump(exclude_none=True).items():
            if key in TrainingSettings.model_fields and key != "from_":
                out[key] = value
    return out


def _from_path(ctx: Context, name: str) -> Path:
    """A `from:` file's path: as given when absolute, else beside the plan."""
    return Path(name) if Path(name).is_absolute() else Path(ctx.path).parent / name


def _imported(ctx: Context, phase: Any, name: str) -> dict[str, Any]:
    """The TrainingSettings a `from:` file gives, and its notes recorded for the phase."""
    from gpuhours.importers import load_setup_data, parse_setup

    path = _from_path(ctx, name)
    got = ctx.setups.get(str(path))
    if got is None:
        try:
            data, lines = load_setup_data(path)
            ctx.setup_data[str(path)] = data
            got = ctx.setups[str(path)] = parse_setup(data, str(path),
                                                      path.expanduser().parent, lines)
        except InputError as e:
            # the setup file's own place (its line and key) stays in the message
            raise InputError(_field_where(ctx, phase, "from"), f"{e.where}: {e.message}",
                             e.hint) from None
    fields = {k: v for k, v in got.fields.items() if k in TrainingSettings.model_fields}
    if "num_gpus" in got.fields and "gpus" not in fields:
        fields["gpus"] = got.fields["num_gpus"]
    notes = ctx.imported.setdefault(getattr(phase, "name", ""), [])
    note = f"setup read from {name} ({got.format}): " + "; ".join(got.used)
    if note not in notes:
        notes.append(note)
        notes += [f"{name}: not used: {u}" for u in got.unused]
    return fields


def _arch(ctx: Context, phase: Any, s: dict[str, Any]) -> tuple[ModelArch, str]:
    if not s.get("model") and not s.get("params"):
        raise InputError(_where(ctx, phase), "needs a `model` (or `params`), in the phase or in "
                                             "`defaults`.")
    try:
        if s.get("model") and s.get("params"):
            return resolve_model(s["model"])  # the phase's model wins over a default size
        return resolve_model(s.get("model"), s.get("params"))
    except InputError as e:
        raise plan_error(ctx, phase, e) from None


def training_setup(ctx: Context, phase: Any, s: dict[str, Any]) -> tuple[Training, Hardware, str]:
    """The estimator's inputs for a training phase with settings `s` (defaults merged)."""
    arch, basis = _arch(ctx, phase, s)
    # unset fields take Training's defaults: the same as estimate's and every command's
    fields = {k: s[k] for k in CHOICE_FIELDS if k in s}
    try:
        t = Training.model_validate({"arch": arch, "model": s.get("model"),
                                     "model_basis": basis, **fields})
    except (InputError, ValidationError) as e:
        raise plan_error(ctx, phase, e) from None
    hw_plan = ctx.plan.hardware
    gpus = s.get("gpus") or hw_plan.num_gpus
    hw = Hardware(gpu=ctx.gpu, num_gpus=gpus, gpus_per_node=hw_plan.gpus_per_node,
                  inter_node_gb_per_s_one_way=hw_plan.inter_node_gb_per_s_one_way,
                  host_us_per_op=hw_plan.host_us_per_op, pcie_lanes=hw_plan.pcie_lanes,
                  interruptions_per_gpu_hour=hw_plan.interruptions_per_gpu_hour)
    return t, hw, basis


def estimate_phase(ctx: Context, t: Training, hw: Hardware, model_basis: str,
              **amount: Any) -> TrainingEstimate:
    """The analytic estimate, calibrated by the ledger's nearest matching measurement if any."""
    measured: dict[str, Any] = {}
    if ctx.ledger is not None:
        from gpuhours.track.calibration import calibration_kwargs

        measured = calibration_kwargs(ctx.ledger, hw, t, ctx.used_measurements)
    return estimate_training(t, hw, model_basis, **amount, **measured)


def training_basis(e: TrainingEstimate) -> str:
    """'measured: ...' when a ledger measurement set the efficiency or (for a host-led step)
    the host's cost per operator, 'formula: ...' otherwise."""
    host = e.step_time_breakdown_s["host_s"]
    exposed = e.step_time_breakdown_s["host_exposed_s"].value
    host_measured = host.basis == "measured" and exposed > 0.5 * e.step_time_s.value
    if e.gemm_efficiency.basis == "measured":
        return (f"measured: analytic estimate at {_pct(e.mfu.value)} MFU, efficiency "
                f"{e.gemm_efficiency.source}"
                + (f"; host {host.source}" if host.basis == "measured" else ""))
    if host_measured:
        return (f"measured: analytic estimate at {_pct(e.mfu.value)} MFU, host-led; host "
                f"{host.source}")
    return f"formula: analytic estimate at {_pct(e.mfu.value)} MFU (efficiency assumed)"


def check_fits(ctx: Context, phase: Any, e: TrainingEstimate, what: str = "") -> None:
    """A DoesNotFit verdict when e's memory exceeds the GPU; `what` describes the micro-batch
    (default: e's micro_batch x seq_len)."""
    if not e.memory.fits:
        what = what or f"micro-batch {e.setup['micro_batch']} x seq {e.setup['seq_len']}"
        raise DoesNotFit(
            _where(ctx, phase),
            f"{what} needs "
            f"{e.memory.total_bytes.value / 2**30:.1f} GiB per GPU; {e.gpu} has "
            f"{e.memory.device_bytes.value / 2**30:.1f} GiB.",
            _fit_hint(e.setup))


def _fit_hint(setup: dict[str, Any]) -> str:
    """The changes that could make a setup fit, leaving out those it already has (the hint
    told a run with checkpointing on to turn it on)."""
    ways = []
    if int(setup.get("micro_batch") or 1) > 1:
        ways.append("lower micro_batch")
    if not setup.get("checkpointing"):
        ways.append("turn on checkpointing")
    if setup.get("method") == "full":
        ways.append("use LoRA")
    elif setup.get("method") == "lora":
        ways.append("use QLoRA")
    if int(setup.get("zero_stage") or 0) < 3:
        ways.append("shard the training state (ZeRO-3)")
    ways.append("use more or larger GPUs")
    text = ", ".join(ways[:-1]) + f" or {ways[-1]}" if len(ways) > 1 else ways[0]
    return text[0].upper() + text[1:] + " (`gpuhours fit` shows what fits)."


def _setup_summary(t: Training, hw: Hardware) -> dict[str, Any]:
    return {"model": t.arch.name, "hidden_size": t.arch.hidden_size,
            "num_layers": t.arch.num_layers, "vocab_size": t.arch.vocab_size,
            "method": t.method, "precision": t.precision,
            "micro_batch": t.micro_batch, "seq_len": t.seq_len, "grad_accum": t.grad_accum,
            "checkpointing": t.checkpointing, "zero_stage": t.zero_stage,
            "gpus": hw.num_gpus, "gpu": hw.gpu.name,
            # the layout and kernels where they are not plain data parallelism's defaults
            **{k: v for k, v in (("tp", t.tp), ("pp", t.pp), ("cp", t.cp), ("ep", t.ep),
                                 ("virtual_stages", t.virtual_stages)) if v > 1},
            **({"kernels": t.kernels} if t.kernels != "eager" else {})}


def _implied_mfu(tokens_per_s_per_gpu: float, e: TrainingEstimate) -> float:
    return tokens_per_s_per_gpu * e.model_flops_per_token.value / peak_flops(
        _gpu_of(e), str(e.setup["precision"]))


def _gpu_of(e: TrainingEstimate) -> GpuSpec:
    from gpuhours import catalog

    return catalog.gpu(e.gpu)


def check_expectations(phase: Any, e: TrainingEstimate | None, gpu_hours: float,
                       wall_hours: float, gpus: int, steps: float | None = None
                       ) -> tuple[list[str], list[str]]:
    """Compare what the author believes with physics, and the author's figures with each other:
    (warnings beyond 2x, saying which is implausible; every comparison, for the record).

    `steps` is the phase's optimizer steps by physics (None where a phase has none)."""
    x = phase.expect
    if x is None:
        return [], []
    out: list[str] = []
    checks: list[str] = []
    if x.tokens_per_s is not None and e is not None:
        physics = e.tokens_per_s_per_gpu.value
        ratio = x.tokens_per_s / physics
        checks.append(f"stated {x.tokens_per_s:,.0f} tokens/s per GPU, physics "
                      f"{physics:,.0f} (ratio {ratio:.2g})")
        if not 1 / DISAGREEMENT_RATIO <= ratio <= DISAGREEMENT_RATIO:
            mfu = _implied_mfu(x.tokens_per_s, e)
            # _disagreement takes physics / stated, as the loop below passes it
            out.append(_disagreement(f"{x.tokens_per_s:,.0f} tokens/s per GPU", physics,
                                     "tokens/s", 1 / ratio, mfu, e))
    steps_per_hour = (3600 / e.step_time_s.value if e is not None
                      else steps / wall_hours if steps and wall_hours > 0 else None)
    for label, expected, physics_or_none in (("hours", x.hours, wall_hours),
                                             ("GPU hours", x.gpu_hours, gpu_hours),
                                             ("steps", x.steps, steps),
                                             ("steps per hour", x.steps_per_hour,
                                              steps_per_hour)):
        if expected is None or not physics_or_none or physics_or_none <= 0:
            continue
        physics = physics_or_none
        ratio = expected / physics
        checks.append(f"stated {expected:,.1f} {label}, physics {physics:,.1f} "
                      f"(ratio {ratio:.2g})")
        if not 1 / DISAGREEMENT_RATIO <= ratio <= DISAGREEMENT_RATIO:
            # the throughput the stated figure implies, at the same work; steps are a count,
            # not a speed, so no MFU follows from them
            speed = {"hours": 1 / ratio, "GPU hours": 1 / ratio, "steps per hour": ratio}
            implied = None if e is None or label not in speed else e.mfu.value * speed[label]
            out.append(_disagreement(f"{expected:,.1f} {label}", physics, label, 1 / ratio,
                                     implied, e))
    own, own_checks = _stated_against_each_other(x, gpus, e)
    return out + own, checks + own_checks


def _stated_against_each_other(x: Any, gpus: int, e: TrainingEstimate | None
                               ) -> tuple[list[str], list[str]]:
    """The author's own figures set against each other, physics aside: each pair that implies
    the same quantity twice (seed 004: 225 tokens/s and 1,900 steps/h of 1,024 tokens; seed
    001: 30-40 h per 1,000 steps on 8 GPUs and 150-200 GPU hours for 5,000 steps)."""
    pairs: list[tuple[str, float, str, float]] = []
    if x.tokens_per_s is not None and x.steps_per_hour is not None and e is not None:
        implied = x.tokens_per_s * gpus * 3600 / x.steps_per_hour
        pairs.append((f"{x.tokens_per_s:,.0f} tokens/s per GPU and {x.steps_per_hour:,.0f} "
                      f"steps/h imply {implied:,.0f} tokens per step", implied,
                      "tokens per step of the setup", e.tokens_per_step.value))
    if x.steps is not None and x.steps_per_hour is not None and x.hours is not None:
        pairs.append((f"{x.steps:,.0f} steps at {x.steps_per_hour:,.1f} steps/h take "
                      f"{x.steps / x.steps_per_hour:,.1f} h", x.steps / x.steps_per_hour,
                      "stated hours", x.hours))
    if x.hours is not None and x.gpu_hours is not None:
        pairs.append((f"{x.hours:,.1f} h on {gpus} GPUs are {x.hours * gpus:,.1f} GPU hours",
                      x.hours * gpus, "stated GPU hours", x.gpu_hours))
    if (x.steps is not None and x.steps_per_hour is not None and x.gpu_hours is not None
            and x.hours is None):
        implied = x.steps / x.steps_per_hour * gpus
        pairs.append((f"{x.steps:,.0f} steps at {x.steps_per_hour:,.1f} steps/h on {gpus} "
                      f"GPUs are {implied:,.1f} GPU hours", implied, "stated GPU hours",
                      x.gpu_hours))
    out, checks = [], []
    for text, implied, other_label, other in pairs:
        ratio = implied / other
        checks.append(f"stated figures: {text}; {other_label} {other:,.1f} (ratio {ratio:.2g})")
        if not 1 / DISAGREEMENT_RATIO <= ratio <= DISAGREEMENT_RATIO:
            how = f"{ratio:.1f}x" if ratio >= 1 else f"1/{1 / ratio:.1f}"
            out.append(f"the plan's own figures disagree: {text}, {how} the {other_label} "
                       f"({other:,.1f}); at least one of them is wrong.")
    return out, checks


def _disagreement(stated: str, physics: float, unit: str, ratio: float, mfu: float | None,
                  e: TrainingEstimate | None) -> str:
    """The warning for a stated figure physics disagrees with; `ratio` is physics / stated."""
    how = f"{ratio:.1f}x" if ratio >= 1 else f"1/{1 / ratio:.1f}"
    text = f"the plan states {stated}; physics gives {physics:,.1f} {unit} ({how} of it)."
    if mfu is not None and e is not None:
        lo, hi = PLAUSIBLE_MFU
        verdict = ("implausibly low: the hardware would idle most of the time" if mfu < lo else
                   "implausibly high: no published run reaches it" if mfu > hi else
                   "plausible, so the estimate's efficiency assumption should be checked by a "
                   "benchmark (gpuhours bench)")
        text += (f" The stated figure implies an MFU of {100 * mfu:.2g}% on {e.gpu}: {verdict}; "
                 f"the estimate assumes {100 * e.mfu.value:.0f}%.")
    return text


def _with_overheads(ctx: Context, phase: Any, base: float) -> tuple[float, dict[str, float]]:
    chosen = {name: ctx.plan.overheads[name] for name in phase.overheads}
    factor = math.prod(1 + v for v in chosen.values())
    return base * factor, chosen


def default_gpus_basis(ctx: Context, phase: Any) -> str:
    """Where a training or rl phase's GPU count came from when neither the phase, the plan's
    defaults nor a from: file gives `gpus` (training_setup: the hardware's whole count); ""
    when one does, or for a phase kind that states its own (grid, online, fixed, eval)."""
    if not isinstance(phase, TrainingSettings) or isinstance(phase, GridPhase):
        return ""
    if merged(ctx, phase).get("gpus") is not None:
        return ""
    hw = ctx.plan.hardware
    return (f"hardware.gpus_per_node {hw.gpus_per_node} x nodes {hw.nodes} (not given for the "
            f"phase)")


def phase_result(ctx: Context, phase: Any, gpus: int, base_gpu_hours: float, bottleneck: str,
            basis: str, formula: str, setup: dict[str, Any], warnings: list[str],
            details: dict[str, Any] | None = None, e: TrainingEstimate | None = None,
            storage: dict[str, Figure] | None = None, write_s: float = 0.0,
            steps: float | None = None) -> PhaseResult:
    if write_s:
        # the GPUs wait while a checkpoint is written (synchronous saves)
        base_gpu_hours += write_s * gpus / 3600
        details = {**(details or {}), "checkpoint_write_s": write_s}
        formula += (f" + {write_s / 3600:.3g} h of checkpoint writes x {gpus} GPUs (lower "
                    f"bound at {ctx.plan.hardware.disk_write_gb_per_s:g} GB/s)")
    gpu_hours, chosen = _with_overheads(ctx, phase, base_gpu_hours)
    wall = gpu_hours / gpus
    gpus_basis = default_gpus_basis(ctx, phase)
    disagreements, checks = check_expectations(phase, e, gpu_hours, wall, gpus, steps)
    record = (details or {}).get("track_record")
    if record is not None:  # how published runs landed against this kind of prediction
        checks = [*checks, TrackRecord.model_validate(record).text()]
    warnings = ctx.imported.get(phase.name, []) + warnings + disagreements
    if chosen:
        formula += " x " + " x ".join(f"(1 + {v:g} {k})" for k, v in chosen.items())
    return PhaseResult(
        name=phase.name, kind=phase.kind, runs=phase.runs, line=ctx.lines.get(phase.name),
        gpus=gpus, gpus_basis=gpus_basis, gpu_hours_per_run_base=base_gpu_hours,
        overheads=chosen,
        gpu_hours_per_run=gpu_hours, wall_hours_per_run=wall, bottleneck=bottleneck,
        basis=basis, formula=formula, setup=setup, warnings=warnings, checks=checks,
        storage=storage or {}, details=details or {},
        config_digest=digest(phase), gpu=ctx.gpu.name,
        detail_figures=_estimate_figures(e) if e is not None else {},
    )


def _estimate_figures(e: TrainingEstimate) -> dict[str, Figure]:
    """The estimate's figures behind a phase's details, for their basis and source in JSON."""
    out = {"step_time_s": e.step_time_s, "tokens_per_s_per_gpu": e.tokens_per_s_per_gpu,
           "mfu": e.mfu, "memory_per_gpu_bytes": e.memory.total_bytes}
    if e.totals is not None:
        out |= {"tokens": e.totals.tokens, "optimizer_steps": e.totals.optimizer_steps}
        if e.totals.downtime_gpu_hours is not None:
            out["downtime_gpu_hours"] = e.totals.downtime_gpu_hours
    return out


# --- the phase kinds ------------------------------------------------------------------------

#: settings whose absence leaves a training phase's setup for gpuhours to choose
_SETUP_FIELDS = ("micro_batch", "checkpointing", "zero_stage")
_LAYOUT_FIELDS = ("tp", "pp", "cp", "ep")
#: overlaps a phase may set while leaving the layout open: the search keeps them as set
_OVERLAP_FIELDS = ("tp_comm_overlap", "moe_a2a_overlap")


def _chosen_if_open(ctx: Context, s: dict[str, Any], t: Training, hw: Hardware,
                    model_basis: str, e: TrainingEstimate, warnings: list[str],
                    pretraining: bool = False, **amount: Any
                    ) -> tuple[Training, TrainingEstimate]:
    """A phase that does not fit with the defaults and leaves micro-batch, checkpointing, ZeRO
    stage or the layout open, or a full pretraining phase on several GPUs that gives nothing
    of the batch (micro-batch, accumulation, checkpointing, ZeRO), gets the fastest setup that
    fits (estimate/fit.py chosen_setup, the layout searched too when the phase gives none, a
    layout only Megatron-Core runs costed on its kernel path unless the phase names kernels,
    as is a layout the phase gives), as `gpuhours estimate` does; the sentence
    saying what was chosen and why joins the phase's warnings. What the plan states is kept
    (and check_fits refuses the setup when nothing with it fits)."""
    from gpuhours.estimate.fit import batch_left_open, chosen_setup, layout_on_megatron

    t_layout, note = layout_on_megatron(t, "kernels" not in s)
    if note:
        warnings.append(note.replace("--kernels", "kernels"))
        t, e = t_layout, estimate_phase(ctx, t_layout, hw, model_basis, **amount)
    # nothing of the batch given for full training: the defaults' one sequence a GPU is a
    # global batch nobody chose, so the setup is chosen even where it fits (as estimate does)
    batch_open = batch_left_open(
        t, hw.num_gpus, not any(k in s for k in (*_SETUP_FIELDS, "grad_accum")), pretraining)
    layout_given = any(k in s for k in _LAYOUT_FIELDS)
    if (e.memory.fits and not batch_open) or (
            all(k in s for k in _SETUP_FIELDS)
            and (layout_given or e.memory.fits or hw.num_gpus == 1 or not pretraining)):
        return t, e

    found = chosen_setup(t, hw, search_layouts=not layout_given,
                         fixed_overlaps=tuple(k for k in _OVERLAP_FIELDS if k in s),
                         keep=[k for k in _SETUP_FIELDS if k in s],
                         kernels_open="kernels" not in s)
    if found is None:
        return t, e
    chosen, why = found
    warnings.append(f"{why} Set micro_batch, grad_accum, checkpointing or zero_stage (and "
                    f"tp, pp, cp, ep) in the plan to choose yourself.")
    return chosen, estimate_phase(ctx, chosen, hw, model_basis, **amount)


def finetune(ctx: Context, phase: FinetunePhase) -> PhaseResult:
    s = merged(ctx, phase)
    t, hw, model_basis = training_setup(ctx, phase, s)
    warnings: list[str] = []
    work: dict[str, Any]
    if phase.tokens is not None:
        work = dict(tokens=phase.tokens * phase.epochs)
        amount = f"{phase.tokens:.3g} tokens x {phase.epochs:g} epochs"
    elif phase.packed:
        examples = phase.examples or 0.0
        packed_tpe = phase.tokens_per_example or float(t.seq_len)
        work = dict(examples=examples, epochs=phase.epochs, tokens_per_example=packed_tpe,
                    packed=True)
        amount = (f"{examples:,.0f} examples x {packed_tpe:,.0f} tokens x {phase.epochs:g} "
                  f"epochs, packed")
    else:
        work = dict(examples=phase.examples, epochs=phase.epochs)
        amount = (f"{phase.examples:,.0f} examples x {phase.epochs:g} epochs, each padded to "
                  f"{t.seq_len} tokens")
    e = estimate_phase(ctx, t, hw, model_basis, **work)
    t, e = _chosen_if_open(ctx, s, t, hw, model_basis, e, warnings, **work)
    if phase.tokens is None and not phase.packed:
        tpe = phase.tokens_per_example
        if tpe is not None and tpe > t.seq_len:
            warnings.append(f"tokens_per_example {tpe:,.0f} exceeds seq_len {t.seq_len}: "
                            f"examples are truncated.")
        elif tpe is not None and tpe < 0.8 * t.seq_len:
            waste = 1 - tpe / t.seq_len
            warnings.append(f"{100 * waste:.0f}% of the computed tokens are padding (mean "
                            f"{tpe:,.0f} of {t.seq_len}); packing (packed: true) would cut "
                            f"this phase to about {100 * (1 - waste):.0f}% of its GPU hours.")
    check_fits(ctx, phase, e)
    unique_tokens = phase.tokens if phase.tokens is not None else (
        (phase.examples or 0.0) * (phase.tokens_per_example or t.seq_len))
    return _training_result(ctx, phase, e, t, hw, amount, warnings, unique_tokens)


def pretrain(ctx: Context, phase: PretrainPhase) -> PhaseResult:
    s = merged(ctx, phase)
    t, hw, model_basis = training_setup(ctx, phase, s)
    e = estimate_phase(ctx, t, hw, model_basis, tokens=phase.tokens)
    warnings: list[str] = []
    t, e = _chosen_if_open(ctx, s, t, hw, model_basis, e, warnings, pretraining=True,
                           tokens=phase.tokens)
    check_fits(ctx, phase, e)
    return _training_result(ctx, phase, e, t, hw, f"{phase.tokens:.3g} tokens", warnings,
                            phase.tokens)


def _training_result(ctx: Context, phase: Any, e: TrainingEstimate, t: Training, hw: Hardware,
                     amount: str, warnings: list[str], dataset_tokens: float) -> PhaseResult:
    assert e.totals is not None
    steps = e.totals.optimizer_steps.value
    storage, write_s = phase_storage(phase, t, dataset_tokens, steps,
                                     e.totals.wall_clock_hours.value,
                                     disk_write_gb_per_s=ctx.plan.hardware.disk_write_gb_per_s)
    formula = (f"{amount} -> {steps:,.0f} steps x {e.step_time_s.value:.3g} s x "
               f"{hw.num_gpus} GPUs / 3600")
    setup = _setup_summary(t, hw)
    basis = training_basis(e)
    down = e.totals.downtime_gpu_hours
    if down is not None and down.value >= 0.01 * e.totals.gpu_hours.value:
        warnings = warnings + [
            f"expected downtime: {down.value:,.0f} GPU h more "
            f"({down.value / e.totals.gpu_hours.value:.1%} of the phase's) for restarts, lost work "
            f"and checkpoint writes, not in the phase's GPU hours ({down.source}); "
            f"hardware.interruptions_per_gpu_hour sets the rate, 0 leaves it out."]
    details = {"tokens": e.totals.tokens.value, "optimizer_steps": steps,
               "step_time_s": e.step_time_s.value, "tokens_per_s_per_gpu":
               e.tokens_per_s_per_gpu.value, "mfu": e.mfu.value,
               "memory_per_gpu_bytes": e.memory.total_bytes.value,
               # expected restarts, lost work and checkpoint writes (estimate/goodput.py), not
               # in the phase's GPU hours; hardware.interruptions_per_gpu_hour sets the rate
               "downtime_gpu_hours": (e.totals.downtime_gpu_hours.value
                                      if e.totals.downtime_gpu_hours is not None else 0.0),
               # each part with its basis, for the report's memory chart (gpuhours report)
               "memory": e.memory.model_dump(mode="json")}
    record = e.totals.track_record
    # a pretraining phase on 16+ GPUs (the table's question; not a fine-tuning phase): how
    # published runs landed (measured)
    if record is not None and phase.kind == "pretrain":
        details["track_record"] = record.model_dump(mode="json")
    return phase_result(ctx, phase, hw.num_gpus, e.totals.gpu_hours.value, e.bottleneck, basis,
                   formula, setup, warnings + e.warnings, details, e, storage, write_s,
                   steps=steps)


def _paged_text(paged: PagedBatch) -> str:
    """How a paged engine's batch ran, for the basis."""
    d = paged.details()
    return (f"; paged KV cache of {paged.cache_tokens:,.0f} tokens: each sequence admitted at "
            f"the tokens it has, {d['rollout_preemptions']:,.0f} preempted and recomputed, "
            f"{d['rollout_decode_steps']:,.0f} decode steps (plan/rl_paged.py)")


def _verl_rl_fields(ctx: Context, phase: RLPhase) -> RLPhase:
    """An rl phase whose `from:` (its own, else the defaults') is a verl trainer config: the
    settings verl gives for the rollouts, the reference and the mini-batches taken into the
    phase's own fields where the phase leaves them unset (the phase's own value wins, said in a
    note), and the file's notes put in the phase's terms, not `estimate`'s (walk p18 F7: a
    verl config's TP 2, share 0.6, 4 mini-batches and reference offload were dropped)."""
    name = phase.from_ or ctx.plan.defaults.from_
    if name is None:
        return phase
    path = _from_path(ctx, name)
    s = merged(ctx, phase)  # reads the file once (errors name `from`), records its notes
    got = ctx.setups.get(str(path))
    if got is None or got.format != "verl":
        return phase
    from gpuhours.importer_verl import rl_settings

    mapped, skipped = rl_settings(ctx.setup_data[str(path)], phase.prompts_per_step,
                                  phase.reference_model)
    notes = ctx.imported.setdefault(phase.name, [])
    # the estimate's words do not fit a phase that costs the rollouts and packs its sequences
    notes[:] = [n for n in notes if "`estimate` prices the policy update" not in n
                and "use_remove_padding=true: padding removal" not in n
                and "use_dynamic_bsz=true: micro-batches made by a token budget" not in n]
    taken, kept = [], []
    update: dict[str, Any] = {}
    for field_name, value, source in mapped:
        if field_name in phase.model_fields_set:
            own = getattr(phase, field_name)
            if own != value:
                kept.append(f"{source} (the phase's {field_name} {own!r} kept)")
        else:
            update[field_name] = value
            taken.append(f"{source} -> {field_name} {value!r}")
    if "seq_len" in s:
        kept.append(f"seq_len {s['seq_len']} (max_prompt_length + max_response_length): the "
                    f"phase's sequences are prompt_tokens + response_tokens, {phase.prompt_tokens}"
                    f" + {phase.response_tokens} on average, packed as verl's "
                    "use_remove_padding packs them")
    if taken:
        notes.append(f"{name}: rl fields from verl: " + "; ".join(taken))
    notes += [f"{name}: not taken: {k}" for k in (*kept, *skipped)]
    if not update:
        return phase
    try:
        return RLPhase.model_validate({**phase.model_dump(exclude_unset=True, by_alias=True),
                                       **update})
    except ValidationError as e:
        first = e.errors()[0]
        field_name = str(first["loc"][0]) if first["loc"] else "from"
        source = next((src for f, _, src in mapped if f == field_name), "")
        raise InputError(_field_where(ctx, phase, "from"),
                         f"{name}: verl's {source or 'settings'} as the phase's "
                         f"{field_name}: {first['msg']}.",
                         f"Set {field_name} in the phase to override it.") from None


def rl(ctx: Context, phase: RLPhase) -> PhaseResult:
    """One synchronous GRPO/PPO step: generate G responses to each prompt, score them (the
    policy's old log-probs, the reference model, a reward model, PPO's critic), update the
    policy (and critic) `policy_epochs` times, and send the new weights to the engine.

    - Rollouts: each engine GPU generates its share of the step's sequences in waves as large
      as its KV cache allows (the engine's memory share depends on the placement). A wave lasts
      as long as the larger of its work (every sequence at the mean length) and its tail (the
      longest response decoded one token per step, alone): a synchronous step waits for it.
    - Placement: colocated, every stage runs on all GPUs in turn; dedicated, `rollout_gpus` run
      the engine while the rest train, each side idle while the other works, unless
      `async_rollout` overlaps them (one step off-policy): then the slower side sets the step;
      actor, the actor's ranks generate on their own `actor_gpus` (OpenRLHF Ray without vLLM)
      while the other roles' GPUs wait (`details.idle_gpu_s`), then every part runs in turn.
    - Streamed rollouts (`partial_rollout`, verl's fully_async_policy): the engines never wait
      for a wave's longest response; the step's rollouts are its sequences' work at the mean
      length, produced while the trainer trains, and the trainer pulls them from the queue.
    - Weight sync: the policy's bf16 weights to the engine each step, over the GPUs' link.
    """
    given = phase  # the plan's own settings: the digest of "what changed" follows them
    phase = _verl_rl_fields(ctx, phase)
    s = merged(ctx, phase)
    longest = phase.max_response_tokens or phase.response_tokens
    seq = phase.prompt_tokens + phase.response_tokens
    seq_max = phase.prompt_tokens + longest
    gpus_total = s.get("gpus") or ctx.plan.hardware.num_gpus
    dedicated = phase.placement == "dedicated"
    # `actor`: the actor's ranks generate on their own GPUs while the other roles' GPUs wait
    # (OpenRLHF Ray without vLLM; plan/rl_train.py): the rollouts hold actor_gpus, every GPU
    # of the phase holds a role that scores or trains
    on_actor = phase.placement == "actor"
    rollout_gpus = (phase.rollout_gpus if dedicated else phase.actor_gpus if on_actor
                    else gpus_total)
    assert rollout_gpus is not None
    train_gpus = gpus_total - rollout_gpus if dedicated else gpus_total
    if train_gpus < 1:
        raise InputError(_field_where(ctx, phase, "rollout_gpus"),
                         f"{rollout_gpus} rollout GPUs leave none of the phase's {gpus_total} "
                         f"GPUs to train on.", "Give the phase more `gpus`, or fewer "
                         "`rollout_gpus`.")
    if on_actor and phase.engine != "hf-generate":
        raise InputError(_field_where(ctx, phase, "engine", "placement"),
                         f"placement: actor is each actor rank generating with HF generate "
                         f"(OpenRLHF's Ray roles without vLLM); the engine is {phase.engine}"
                         + ("" if "engine" in phase.model_fields_set else " (the default)")
                         + ".", "Set engine: hf-generate, or use placement: dedicated with "
                         "rollout_gpus for vLLM or SGLang engines of their own.")
    packed = "micro_batch" not in s  # the plan leaves the update's batching to the framework
    if not packed and phase.update_tokens_per_gpu is not None:
        raise InputError(_field_where(ctx, phase, "update_tokens_per_gpu"),
                         f"update_tokens_per_gpu ({phase.update_tokens_per_gpu}) packs the "
                         f"update's micro-batches by tokens, and the phase (or the plan's "
                         f"defaults) also sets micro_batch ({s['micro_batch']}).",
                         "Give one of the two: micro_batch (sequences), or "
                         "update_tokens_per_gpu (tokens, verl's dynamic batches).")
    pads = phase.pad_packed_to_longest  # NeMo-RL under PP (plan/rl_padding.py)
    if pads and (not packed or int(s.get("pp") or 1) < 2):
        raise InputError(_field_where(ctx, phase, "pad_packed_to_longest"),
                         "pad_packed_to_longest pads packed micro-batches to the batch's "
                         "longest, which NeMo-RL does only with pipeline parallelism; the phase "
                         + (f"sets micro_batch ({s['micro_batch']}), so its micro-batches are "
                            "not packed." if not packed else
                            f"runs pp {int(s.get('pp') or 1)}."),
                         "Leave micro_batch unset (packed by update_tokens_per_gpu) and set "
                         "pp > 1, or drop pad_packed_to_longest.")
    # the sequences of one mini-batch (optimizer step) each data-parallel rank holds: the
    # accumulation covers them (walk finding F10: grad_accum 1 was shown for 8 micro-batches)
    cp = int(s.get("cp") or 1)
    given_max = seq_max  # the context check and the messages speak of the lengths given
    if cp > 1:
        # Megatron-Core's context parallelism cuts every sequence into 2 x cp chunks, so the
        # frameworks pad each to a multiple of at least 2 x cp, the figure taken here (a lower
        # end: NeMo-RL's CP recipes pad to tp x 2 x cp, make_sequence_length_divisible_by in
        # dapo-deepseek-v3-64n8g.yaml @v0.6.0; verl to the CP group's alignment): the mean
        # and the longest sequence costed so padded
        seq, seq_max = (2 * cp * math.ceil(n / (2 * cp)) for n in (seq, seq_max))
    # tokens the language model sees a sequence beside the text: a vision-language example's
    # image tokens (and prompt tuning's virtual tokens). verl's token budget counts them (its
    # input_ids hold the image pads: ppo_max_token_len_per_gpu packs by attention_mask), and
    # they take context positions: both the packing and the context check count them
    probe_t = training_setup(ctx, phase, {**s, "seq_len": seq, "gpus": train_gpus})[0]
    extra = probe_t.llm_seq_len - probe_t.seq_len
    longest_given = given_max + extra  # image tokens included
    # (the actor's own GPUs when it has them: plan/rl_train.py)
    ranks = max(1, (phase.actor_gpus or train_gpus)
                // (cp * int(s.get("tp") or 1) * int(s.get("pp") or 1)))
    per_rank = max(1, (phase.prompts_per_step * phase.generations_per_prompt)
                   // (phase.mini_batches * ranks))
    accum_given = s.get("grad_accum") is not None
    if not packed and not accum_given:
        s = {**s, "grad_accum": math.ceil(per_rank / s["micro_batch"])}
    if packed:
        # the budget is per GPU: a context-parallel (verl: Ulysses) group of cp GPUs shares one
        # micro-batch of cp x the budget (volcengine/verl@df340d70 dp_actor.py: max_token_len =
        # ppo_max_token_len_per_gpu x ulysses_sequence_parallel_size; megatron_actor.py: x
        # context_parallel_size), and each of its GPUs holds 1/cp of every sequence
        # the default budget (an assumption, not the user's) grows to hold the longest sequence
        budget = phase.update_tokens_per_gpu or max(A.RL_UPDATE_TOKENS_PER_MICRO_BATCH.value,
                                                    math.ceil((seq_max + extra) / cp))
        if budget * cp < seq_max + extra:
            raise InputError(_field_where(ctx, phase, "update_tokens_per_gpu"),
                             f"a micro-batch of {budget * cp:,.0f} tokens (update_tokens_per_gpu"
                             f" {budget:,.0f} x cp {cp}) cannot hold the longest sequence, "
                             f"{longest_given:,} tokens (prompt + max_response_tokens"
                             + (f" + {extra:,} image tokens" if extra else "") + ")"
                             + (f", {seq_max + extra:,} padded to a multiple of 2 x cp"
                                if seq_max + extra != longest_given else "")
                             + "; verl refuses it too (its token-budget packing asserts the "
                             "same).",
                             "Raise update_tokens_per_gpu to at least "
                             f"{math.ceil((seq_max + extra) / cp):,}, or use more context "
                             "parallelism.")
        # verl packs each mini-batch apart (dp_actor.py update_policy splits by
        # ppo_mini_batch_size, then packs each split by tokens): no micro-batch holds more than
        # one data-parallel rank's share of a mini-batch; a sequence is its image tokens too
        micro = max(1, min(int(budget * cp // (seq + extra)), per_rank))
        s = {**s, "micro_batch": micro,
             "grad_accum": s.get("grad_accum") or math.ceil(per_rank / micro)}
    try:
        t, hw, model_basis = training_setup(ctx, phase, {**s, "seq_len": seq,
                                                         "gpus": train_gpus})
    except InputError as err:
        # the micro-batch and the accumulation the phase derived (not the user's) refused:
        # the fields they come from are at fault (walk p18: "field 'grad_accum'" was named
        # for prompts_per_step: 1e9)
        derived = [f for f, own in (("grad_accum", accum_given), ("micro_batch", not packed))
                   if not own and f"field '{f}'" in err.where]
        if not derived:
            raise
        raise InputError(_field_where(ctx, phase, "prompts_per_step", "generations_per_prompt",
                                      "mini_batches"),
                         f"{phase.prompts_per_step:,} prompts x {phase.generations_per_prompt} "
                         f"responses over {ranks} data-parallel rank(s) and "
                         f"{phase.mini_batches} mini-batch(es) are {per_rank:,} sequences a "
                         f"rank an optimizer step, which make the derived {derived[0]} "
                         f"{s.get(derived[0])!r}: {err.message}",
                         "Give fewer prompts_per_step (or generations_per_prompt), or more "
                         "mini_batches.") from None
    if t.arch.max_positions and longest_given > t.arch.max_positions:
        # both lengths make the sum; the longer is named first, and its line given
        response = "max_response_tokens" if phase.max_response_tokens else "response_tokens"
        images = t.images_per_example * t.image_tokens_per_image
        sizes = {"prompt_tokens": phase.prompt_tokens, response: longest,
                 "images_per_example": images}
        fields = tuple(sorted((k for k, v in sizes.items() if v), key=lambda k: -sizes[k]))
        raise InputError(_field_where(ctx, phase, *fields),
                         f"a {phase.prompt_tokens:,}-token prompt"
                         + (f", {t.images_per_example:,} image(s) of "
                            f"{t.image_tokens_per_image:,} tokens ({images:,} tokens)"
                            if images else "")
                         + (f", {extra - images:,} virtual tokens" if extra > images else "")
                         + f" and a {longest:,}-token response ({longest_given:,} tokens) "
                         f"exceed {t.arch.name}'s {t.arch.max_positions:,}-token "
                         "context (max_position_embeddings).",
                         "Shorten one of them" + (", use fewer or smaller images" if images
                                                  else "")
                         + ", or give a config.json whose max_position_embeddings states the "
                         "context the run uses.")
    sequences = phase.prompts_per_step * phase.generations_per_prompt
    steps = phase.steps if phase.steps is not None else math.ceil(
        (phase.prompts or 0) * (phase.epochs or 0) / phase.prompts_per_step)

    # rollouts: KV sized for the longest response, in the engine's share of memory
    share = phase.rollout_memory_utilisation or (
        A.GENERATION_MEMORY_UTILISATION.value if dedicated
        else A.COLOCATED_ROLLOUT_MEMORY_UTILISATION.value)
    tp = phase.rollout_tensor_parallel
    if rollout_gpus % tp:
        raise InputError(_field_where(ctx, phase, "rollout_tensor_parallel"),
                         f"{rollout_gpus} rollout GPUs do not split into engines of {tp}.")
    engines = rollout_gpus // tp
    per_gpu = math.ceil(sequences / engines)  # per engine (one GPU when tp = 1)
    if phase.engine in ("tensorrt-llm", "lmdeploy"):
        # estimate/trtllm.py models TensorRT-LLM 0.5-0.6's GptSession: a built engine holds
        # its weights (no per-step weight sync) and runs static batches (no streamed refill);
        # estimate/lmdeploy.py models LMDeploy 0.1's TurboMind, which loads a converted
        # workspace once (no weight update between requests)
        name = ("TensorRT-LLM 0.5-0.6's GptSession, whose built engine" if phase.engine ==
                "tensorrt-llm" else "LMDeploy 0.1's TurboMind, whose converted workspace")
        raise InputError(_field_where(ctx, phase, "engine"),
                         f"the {phase.engine} engine is modelled as {name} holds its weights: "
                         "RL rollouts that take the policy's new weights every step are not "
                         "expressed with it.",
                         "use engine: vllm, sglang or hf-generate (an eval phase can use "
                         f"{phase.engine})")
    if phase.engine == "hf-generate" and phase.rollout_precision == "fp8":
        # vLLM's and SGLang's quantization='fp8' quantises the synced bf16 policy on load;
        # transformers runs fp8 only as FP8Linear over a block-fp8 checkpoint (estimate/hf_fp8.py)
        raise InputError(_field_where(ctx, phase, "rollout_precision"),
                         "fp8 rollouts are an engine quantising the synced bf16 policy (vLLM, "
                         "SGLang: quantization='fp8'); transformers' generate runs the policy "
                         "as trained (its FP8Linear needs a block-fp8 checkpoint).",
                         "use engine: vllm or sglang, or rollout_precision: bf16")
    try:
        # the engine prefills the image tokens too (issue 15; the tower's forward is added
        # below: plan/rl_images.py)
        probe = Generation(arch=t.arch, prompt_tokens=phase.prompt_tokens + t.llm_seq_len - seq,
                           output_tokens=phase.response_tokens, engine=phase.engine,
                           hf_transformers_version=phase.rollout_transformers_version,
                           cuda_graphs=phase.rollout_cuda_graphs,
                           max_num_seqs=phase.rollout_max_num_seqs,
                           async_scheduling=phase.rollout_async_scheduling,
                           returns_logprobs=phase.rollout_returns_logprobs,
                           tensor_parallel=tp, gpus_per_node=hw.gpus_per_node,
                           inter_node_gb_per_s_one_way=hw.inter_node_gb_per_s_one_way,
                           weight_bytes_per_param=(
                               1.0 if phase.rollout_precision == "fp8" else 2.0),
                           # W8A8: fp8 GEMMs, not 8-bit weights dequantised into bf16 GEMMs
                           matmul_precision=("fp8" if phase.rollout_precision == "fp8"
                                             else "bf16"))
    except InputError as err:
        field = ("rollout_transformers_version" if isinstance(err, FieldError)
                 and "hf_transformers_version" in err.fields else "rollout_cuda_graphs"
                 if isinstance(err, FieldError) and "cuda_graphs" in err.fields
                 else "rollout_async_scheduling"
                 if isinstance(err, FieldError) and "async_scheduling" in err.fields
                 else "rollout_returns_logprobs"
                 if isinstance(err, FieldError) and "returns_logprobs" in err.fields
                 else "rollout_tensor_parallel")
        raise InputError(_field_where(ctx, phase, field), err.message, err.hint
                         ) from None
    streamed = phase.partial_rollout
    # one sequence of the longest response must fit (vLLM refuses to start when max_model_len
    # does not), and HF generate's static batch holds every sequence at the longest; a stream's
    # running sequences are at every stage of their lives, and vLLM's paged cache holds only
    # the tokens each has: the cache is taken at prompt + mean response a sequence (an
    # assumption; docs/rl.md). A synchronous batch on a paged engine is replayed below
    kv_probe = probe if streamed else probe.model_copy(update={"output_tokens": longest})
    try:
        cap = max_batch_by_memory(t.arch, kv_probe, ctx.gpu, share)
    except InputError as err:
        # name what would fit, tried on the same memory cap (plan/rl_rollout_room.py; walk F1)
        field, hint = rollout_room_hint(kv_probe, ctx.gpu, share, rollout_gpus, dedicated,
                                        _runs_fp8(ctx.gpu))
        set_by = ("rollout_memory_utilisation" if phase.rollout_memory_utilisation else
                  f"the default for {phase.placement} rollouts")
        # the share the user set is what is at fault, first; then the hint's field
        raise DoesNotFit(_field_where(ctx, phase, *(
            ("rollout_memory_utilisation", field) if phase.rollout_memory_utilisation
            and field != "rollout_memory_utilisation" else (field,))),
                         f"{err.message.rstrip('.')} (the engine's share: {share:g} of the "
                         f"GPU, {set_by}).", hint) from None
    if phase.rollout_batch is not None:
        # the framework hands the engine this many sequences per blocking generate call
        # (OpenRLHF 0.2: one make_experience per micro_rollout_batch_size prompts), so no
        # wave is larger, whatever the KV cache would hold
        cap = min(cap, phase.rollout_batch)
    matmul = rollout_precision(ctx.gpu, t.precision)
    # fp8 W8A8 rollouts: the engine's GEMMs at the fp8 rate (scoring stays the trainer's)
    gen_matmul = "fp8-mixed" if phase.rollout_precision == "fp8" else matmul
    try:
        # a stream that may run several steps' rollouts at once (rollout_steps_in_flight:
        # NeMo-RL's max_trajectory_age_steps) fills its engines with all of them
        in_flight = per_gpu * (phase.rollout_steps_in_flight if streamed else 1)
        work = estimate_generation(probe.model_copy(update={"batch": min(cap, in_flight)}),
                                   ctx.gpu, gen_matmul)
    except InputError as err:
        raise InputError(_field_where(ctx, phase, "rollout_precision"), err.message
                         ) from None
    tail = estimate_generation(probe.model_copy(update={"batch": 1, "output_tokens": longest}),
                               ctx.gpu, gen_matmul)
    waves = math.ceil(per_gpu / work.batch)
    paged = None if streamed else paged_batch(probe, ctx.gpu, share, per_gpu, longest,
                                              phase.rollout_batch, gen_matmul)
    if paged is not None:
        # a paged cache admits each request at the tokens it has (vLLM; SGLang with a
        # reserve for what it may still generate), not at its longest response, and preempts
        # when the cache runs out (plan/rl_paged.py). `work`: the batch a generate call hands
        # the engine, for the report (decode bound, batch); at the mean length no more fit
        # than max_batch_by_memory of the probe
        work = estimate_generation(probe.model_copy(update={"batch": min(
            phase.rollout_batch or per_gpu, max_batch_by_memory(t.arch, probe, ctx.gpu,
                                                                share))}),
            ctx.gpu, gen_matmul)
        rollout_s = paged.seconds
        tail_led = paged.tail_led and longest > phase.response_tokens
    elif streamed:
        # a new sequence takes each finished one's place, and a response still running at a
        # weight sync goes on after it (verl fully_async_policy partial_rollout: the rollouter's
        # sleep/resume around the sync): the engine stays full, no wave waits for its tail
        rollout_s = per_gpu / work.batch * work.batch_time_s
        tail_led = False
    else:
        rollout_s = max(waves * work.batch_time_s,
                        (waves - 1) * work.batch_time_s + tail.batch_time_s)
        tail_led = tail.batch_time_s > work.batch_time_s

    # a vision-language rollout: the engine's tower at prefill, once a prompt, and the images
    # prepared on each GPU's host first when the workers do it (plan/rl_images.py)
    if phase.image_prep_by_workers and t.image_grid is None:
        raise InputError(_field_where(ctx, phase, "image_prep_by_workers"),
                         "image_prep_by_workers prepares each prompt's images, and this setup "
                         "has none.", "Set images_per_example (and image_pixels) on a "
                         "vision-language model, or drop image_prep_by_workers.")
    engine_prompts = math.ceil(phase.prompts_per_step / engines)
    # HF generate expands pixel_values with num_return_sequences and runs the tower for each
    # sequence (generation/utils.py _expand_inputs_for_generation)
    rollout_tower_s, rollout_prep_s = engine_images_s(
        t, ctx.gpu, matmul, engine_prompts, tp, phase.image_prep_by_workers,
        tower_runs_per_prompt=(phase.generations_per_prompt if phase.engine == "hf-generate"
                               else 1))
    rollout_s += rollout_tower_s + rollout_prep_s
    # DAPO's dynamic sampling: the whole generation again until the step's batch is kept
    rollout_s *= phase.generation_rounds_per_step

    # scoring passes over whole sequences, on the training GPUs, in micro-batches of
    # score_budget tokens a data-parallel group
    score_budget = (phase.scoring_tokens_per_gpu or phase.update_tokens_per_gpu
                    or A.RL_UPDATE_TOKENS_PER_MICRO_BATCH.value) * cp
    if phase.scoring_tokens_per_gpu is not None and score_budget < seq_max + extra:
        # verl's log_prob_max_token_len_per_gpu packs by the same rearrange_micro_batches,
        # which asserts the budget holds the longest sequence, as for the update's
        raise InputError(_field_where(ctx, phase, "scoring_tokens_per_gpu"),
                         f"a scoring micro-batch of {score_budget:,.0f} tokens "
                         f"(scoring_tokens_per_gpu {phase.scoring_tokens_per_gpu:,} x cp {cp}) "
                         f"cannot hold the longest sequence, {seq_max + extra:,} tokens; verl "
                         "refuses it too (its token-budget packing asserts the same).",
                         "Raise scoring_tokens_per_gpu to at least "
                         f"{math.ceil((seq_max + extra) / cp):,}, or leave it unset.")
    stages = int(s.get("pp") or 1)
    score_ranks = max(1, train_gpus // (cp * int(s.get("tp") or 1) * stages))

    def score(arch: ModelArch, tower_gpu_s: float = 0.0) -> float:
        # t.llm_seq_len: a vision-language model's image tokens are scored too (issue 15);
        # the host issuing each micro-batch's forward beside the GPU (plan/rl_scoring_host.py)
        gpu_s = scoring_time_s(arch, sequences, t.llm_seq_len, ctx.gpu, matmul) / train_gpus
        # the policy's expert-parallel traffic (a scoring model's own layout is not modelled)
        ep_s = (expert_scoring_s(t, arch, hw, sequences * t.llm_seq_len / score_ranks, stages)
                if arch is t.arch else 0.0)
        return scoring_pass_s(t, arch, hw, gpu_s, tower_gpu_s, sequences, score_ranks,
                              score_budget, stages) + ep_s

    # a vision-language policy's scoring forwards run its vision tower too (plan/rl_scoring.py)
    tower_s = vision_scoring_s(t, sequences, ctx.gpu, matmul) / train_gpus
    old_logprob_s = score(t.arch, tower_s) if phase.old_logprob_pass else 0.0
    ref_s = score(t.arch, tower_s) if phase.reference_model else 0.0
    # each actor worker prepares its share's images before its first pass (plan/rl_images.py)
    actor_prep_s = (actor_image_prep_s(t, phase.prompts_per_step, phase.generations_per_prompt,
                                       score_ranks) if phase.image_prep_by_workers else 0.0)
    reward_s = 0.0
    reward_arch: ModelArch | None = None
    if phase.reward.kind == "model":
        try:  # the reward model's own field, not the policy's `model` (walk p9 F19)
            reward_arch, _ = resolve_model(phase.reward.model)
        except InputError as err:
            raise InputError(_field_where(ctx, phase, "reward.model"), err.message,
                             err.hint) from None
        reward_s = score(reward_arch)
    def longest_batch(tt: Training) -> TrainingEstimate:
        """The micro-batch's memory when it holds the longest sequences (padded); padded to
        the longest packed micro-batch (pad_packed_to_longest), that many tokens at most."""
        tokens = (padded_micro_batch_tokens(budget * cp, tt.micro_batch, seq_max + extra)
                  if pads else tt.micro_batch * (seq + extra))
        return estimate_phase(ctx, tt.model_copy(update={
            "seq_len": seq_max, "micro_batch": max(1, int(tokens // (seq_max + extra)))}), hw,
            model_basis)

    e = estimate_phase(ctx, t, hw, model_basis, tokens=sequences * seq)
    while packed and t.micro_batch > 1 and not (e.memory.fits and longest_batch(t).memory.fits):
        # the framework packs fewer tokens per micro-batch until they fit
        half = t.micro_batch // 2
        t = t.model_copy(update={"micro_batch": half, "grad_accum": t.grad_accum if accum_given
                                 else math.ceil(per_rank / half)})
        e = estimate_phase(ctx, t, hw, model_basis, tokens=sequences * seq)
    held = f"{'packed ' if packed else ''}micro-batch of {t.micro_batch} sequences"
    # NeMo-RL under PP: every packed micro-batch padded to the longest (plan/rl_padding.py);
    # its padded tokens computed at the real ones' rate in the update and the log-prob passes
    pad_factor = (padding_factor(budget * cp, t.micro_batch, seq + extra, seq_max + extra)
                  if pads else 1.0)
    score_pad_factor = (padding_factor(score_budget, sequences_per_packed_micro_batch(
        score_budget, seq + extra), seq + extra, seq_max + extra) if pads else 1.0)
    old_logprob_s *= score_pad_factor
    ref_s *= score_pad_factor
    if seq_max == seq and not pads:
        check_fits(ctx, phase, e, f"a {held} of {seq:,} tokens")
    else:
        padded = longest_batch(t)
        check_fits(ctx, phase, padded, (
            f"a {held} ({seq:,} tokens each on average; its memory taken at the longest, "
            f"{seq_max:,} tokens, as the same tokens in {padded.setup['micro_batch']} "
            f"sequence(s))"))
    update_s = (phase.policy_epochs * sequences * t.llm_seq_len * pad_factor
                / e.tokens_per_s.value)
    # PPO's critic at its own ZeRO stage and offload (DeepSpeed-Chat's --critic_zero_stage):
    # its update estimated with them, at the policy's micro-batches
    critic_own = (phase.critic_training.model_dump(exclude_none=True)
                  if phase.critic_training is not None else {})
    critic_setup = {**s, "micro_batch": t.micro_batch, "grad_accum": t.grad_accum, **critic_own}
    critic_update_s, concurrent_critic = update_s, False
    if critic_own:
        ct, chw, cbasis = training_setup(ctx, phase, {**critic_setup, "seq_len": seq,
                                                      "gpus": train_gpus})
        ce = estimate_phase(ctx, ct, chw, cbasis, tokens=sequences * seq)
        check_fits(ctx, phase, ce, "the critic's micro-batch at its own ZeRO stage and offload")
        critic_update_s = phase.policy_epochs * sequences * ct.llm_seq_len / ce.tokens_per_s.value
    if (not dedicated and phase.engine != "hf-generate" and not phase.offload_between_phases
            and phase.refit_offload == "none"):
        if on_actor:  # the engine shares the actor's GPUs with the actor's own shards only
            _check_colocated_split(ctx, phase, estimate_phase(
                ctx, *training_setup(ctx, phase, {**s, "seq_len": seq, "gpus": rollout_gpus}),
                tokens=sequences * seq), share)
        else:
            dp = hw.num_gpus // (t.tp * t.pp * t.cp)
            _check_colocated_split(ctx, phase, e, share, reward_arch, ce if critic_own else None,
                                   t.tp * t.pp * (dp if t.zero_stage == 3 else 1))
    if phase.actor_gpus is not None:  # each trained role on GPUs of its own (plan/rl_train.py)
        def role_update_s(gpus: int, critic: bool = False) -> tuple[float, Training]:
            rt, rhw, rbasis = training_setup(ctx, phase, {**(critic_setup if critic else s),
                                                          "seq_len": seq, "gpus": gpus})
            re_ = estimate_phase(ctx, rt, rhw, rbasis, tokens=sequences * seq)
            check_fits(ctx, phase, re_)
            return (float(phase.policy_epochs * sequences * rt.llm_seq_len * pad_factor
                          / re_.tokens_per_s.value), rt)

        roles = role_updates_s(_where(ctx, phase), phase, role_update_s, sequences, train_gpus,
                               ctx.plan.hardware.gpus_per_node)
        update_s, critic_update_s, concurrent_critic = (roles.policy_s, roles.critic_s,
                                                        roles.concurrent)
    unscaled_update_s = update_s
    grpo = _grpo_calibration(ctx, hw, t)
    if grpo is not None:  # a GRPO step measured on this device: each part as measured / physics
        scale = grpo.scales.get
        if phase.engine == grpo.engine:  # the host's image preparation is no GPU work
            rollout_s = ((rollout_s - rollout_prep_s) * scale("rollout generation", 1.0)
                         + rollout_prep_s)
        old_logprob_s *= scale("old-policy log-probs", 1.0)
        # a reward model scores like the reference: one forward over every sequence
        ref_s, reward_s = (x * scale("reference model", 1.0) for x in (ref_s, reward_s))
        update_s *= scale("policy update", 1.0)
    critic_value_s = (score(t.arch) * (grpo.scales.get("reference model", 1.0) if grpo else 1.0)
                      if phase.critic else 0.0)
    critic_update_s = critic_update_s * update_s / unscaled_update_s if phase.critic else 0.0
    critic_s = critic_value_s + critic_added_s(update_s, critic_update_s, concurrent_critic)
    sync_s = weight_sync_s(t.arch, hw, dedicated, gpus_total, phase.weight_sync_every_rank,
                           fp8_refit_cast_s(t.arch, hw) if phase.refit_fp8_cast else 0.0)
    sleep_s = 0.0
    if phase.rollout_sleep_offload:  # the engine's weights down and up around each rollout
        sleep_s = _engine_sleep_s(ctx, phase, t, hw, tp)
        sync_s += sleep_s
    try:
        offload_s = (host_offload_s(e, hw, phase.old_logprob_pass, phase.critic)
                     if phase.offload_between_phases else 0.0)
    except InputError as err:  # a GPU without a PCIe host link figure (GB200's NVLink-C2C)
        raise InputError(_field_where(ctx, phase, "offload_between_phases"), err.message
                         ) from None
    # refit_offload: the trainer's weights and optimizer state out of the engine's way and back
    refit_s = _refit_offload_s(ctx, phase, e, hw)
    offload_s += refit_s
    ref_copy_s, ref_added_s = _ref_offload_s(ctx, phase, t, hw, sequences, train_gpus, ref_s)
    ref_s += ref_added_s
    validation_s = 0.0
    if phase.validation_every_steps and phase.validation_prompts:
        val_prompts = math.ceil(phase.validation_prompts / engines)
        validation_s = validation_per_step_s(validation_rollout_s(
            probe, cap, val_prompts, longest, ctx.gpu, gen_matmul, share)
            + sum(engine_images_s(t, ctx.gpu, matmul, val_prompts, tp,
                                  phase.image_prep_by_workers))
            + (validation_dataset_prep_s(t, phase.validation_prompts)
               if phase.image_prep_by_workers else 0.0),
            sync_s, phase.validation_every_steps)
    # before the first of the scoring passes (the update when there is none)
    if phase.old_logprob_pass:
        old_logprob_s += actor_prep_s
    elif phase.reference_model:
        ref_s += actor_prep_s
    else:
        update_s += actor_prep_s
    # Qwen2-VL's M-RoPE positions travel as 4 rows a sequence (plan/rl_driver.py)
    position_rows = _position_rows(t)
    driver = (_driver_transfers_s(phase, sequences, longest, position_rows)
              if phase.single_controller else {})
    if driver and t.image_grid is not None:  # the batch's images travel with it (rl_driver.py)
        driver = _with_images_s(driver, phase, t, train_gpus)
    # each phase's time as the framework's timer counts it: its transfer through the driver too;
    # streamed, the trainer pulls the step's rollouts from the message queue itself
    # (fully_async_trainer.py _get_samples_from_queue, inside its "gen" timer), beside the engines
    intake_s = driver.get("rollout generation", 0.0) if streamed else 0.0
    rollout_s += 0.0 if streamed else driver.get("rollout generation", 0.0)
    old_logprob_s += driver.get("old-policy log-probs", 0.0)
    ref_s += driver.get("reference model", 0.0)
    reward_s += driver.get("reward model", 0.0)
    update_s += driver.get("policy update", 0.0)
    critic_s += driver.get("critic", 0.0)

    # a rule reward's host work (plan/rl_reward_host.py): on the rollout side, where the
    # frameworks score (NeMo-RL inside its generation, in the one-step-off collector too); each
    # generation round scores its batch
    reward_host_part = (reward_host(phase.reward.verifier, phase.reward.workers or 1,
                                    phase.reward.per_response, sequences, phase.response_tokens,
                                    rollout_s / phase.generation_rounds_per_step)
                        if phase.reward.kind == "rule" else
                        RewardHost(0.0, 0.0, "a reward model scores the responses (its forward "
                                             "in the reward model part): no rule on the host"))
    reward_host_s = reward_host_part.critical_s * phase.generation_rounds_per_step
    rollout_side = rollout_s + reward_host_s

    train_side = intake_s + old_logprob_s + ref_s + reward_s + update_s + critic_s + offload_s
    inflight = None
    if not dedicated:
        step_s = rollout_side + train_side + sync_s
    elif phase.in_flight_weight_updates:
        # NeMo-RL's collector: prompt groups take slots as earlier groups finish, the refit
        # stalls the running responses (plan/rl_inflight.py); the rollout side's seconds
        # beyond the engines' (the reward's host work, a driver's transfer) taken as spread
        # over the engines' time
        if phase.engine != "vllm" or paged is None:
            # the collector's in-flight refit needs vLLM V1's AsyncLLM (async_utils.py
            # prepare_for_refit: async_engine), replayed under V1's admission rule
            raise InputError(_field_where(ctx, phase, "in_flight_weight_updates", "engine"),
                             "in_flight_weight_updates replays NeMo-RL's collector on vLLM "
                             f"V1's async engine; the engine is {phase.engine}.",
                             "Set engine: vllm, or drop in_flight_weight_updates.")
        inflight = inflight_step(probe, ctx.gpu, share, engines, phase.prompts_per_step,
                                 phase.generations_per_prompt, longest,
                                 phase.rollout_steps_in_flight, train_side, sync_s, gen_matmul,
                                 rollout_side / paged.seconds)
        step_s = inflight.step_s
    elif phase.async_rollout:
        step_s = max(rollout_side, train_side) + sync_s
    else:  # local updates on the prompts already finished overlap the rest (plan/rl_async.py)
        step_s = pipelined_step_s(rollout_side, train_side, sync_s, phase.updates_per_sync)
    step_s += validation_s  # inside the step's timer, every validation_every_steps steps
    # `actor` placement: the reference, reward and critic GPUs wait while the actor generates
    idle_gpu_s = (gpus_total - rollout_gpus) * rollout_s if on_actor else 0.0
    parts = {"rollout generation": rollout_s, "rollout intake": intake_s,
             "old-policy log-probs": old_logprob_s,
             "reward host": reward_host_s,
             "reference model": ref_s, "reward model": reward_s, "policy update": update_s,
             "critic": critic_s, "host offload": offload_s, "weight sync": sync_s,
             "validation": validation_s}
    bottleneck = max(parts, key=lambda k: parts[k])
    if dedicated and phase.async_rollout:
        # the side that sets max(rollout, training side) names the bound, not the longest
        # single part (a one-step-off step whose log-prob passes and update outlast its
        # rollouts read "rollout generation": plan/rl_async.py overlapped_bottleneck)
        bottleneck = overlapped_bottleneck(rollout_side, {
            k: parts[k] for k in ("rollout intake", "old-policy log-probs", "reference model",
                                  "reward model", "policy update", "critic", "host offload")},
            {k: parts[k] for k in ("weight sync", "validation")})
    if inflight is not None:
        # the rollouts bound the step when the trainer waits for its batch at all (a
        # millionth of the step: the replay's float noise)
        rollout_bound = inflight.trainer_wait_s > 1e-6 * inflight.step_s
        bottleneck = overlapped_bottleneck(rollout_side if rollout_bound else 0.0, {
            k: parts[k] for k in ("rollout intake", "old-policy log-probs", "reference model",
                                  "reward model", "policy update", "critic", "host offload")},
            {k: parts[k] for k in ("weight sync", "validation")})
        tail_led = tail_led and rollout_bound
    if bottleneck == "rollout generation" and tail_led:
        bottleneck = "rollout generation (waiting for the longest response)"
    base = steps * step_s * gpus_total / 3600
    shown = " + ".join(f"{v:.3g} s {k}" for k, v in parts.items() if v > 0)
    overlap = ("max(rollout, training side) + sync" if phase.async_rollout else "sum")
    if dedicated and not phase.async_rollout and phase.updates_per_sync > 1:
        k = phase.updates_per_sync
        overlap = (f"{k} local updates a sync: max(rollout, rollout/{k} + {k - 1}/{k} x "
                   f"training side) + training side/{k} + sync")
    if streamed:
        overlap = ("streamed: max(the engines' production at the mean length, training side) "
                   "+ sync")
    if inflight is not None:
        overlap = (f"NeMo-RL's collector with in-flight weight updates replayed "
                   f"(plan/rl_inflight.py): {phase.prompts_per_step * phase.rollout_steps_in_flight}"
                   f" prompt groups in flight, each freeing its slot when its longest response "
                   f"ends, the refit stalling the running responses; the engines busy "
                   f"{inflight.engine_busy_s:.3g} s a step, the trainer waiting "
                   f"{inflight.trainer_wait_s:.3g} s for its batch; the step's batch alone "
                   f"{rollout_side:.3g} s")
    formula = (f"{steps:,.0f} steps x {step_s:.3g} s ({shown}; {overlap}) x {gpus_total} GPUs "
               f"/ 3600; {sequences} sequences of {phase.prompt_tokens} + "
               f"{phase.response_tokens} (longest {longest}) tokens per step; rollouts on "
               f"{rollout_gpus} GPU(s) ({phase.placement}"
               f"{f', engines of {tp}' if tp > 1 else ''}), training on {train_gpus}"
               f"{f' in packed micro-batches of {t.micro_batch} sequences' if packed else ''}")
    if pads:
        formula += "; " + padding_text(padded_micro_batch_tokens(budget * cp, t.micro_batch,
                                                                 seq_max + extra),
                                       t.micro_batch, seq + extra, pad_factor, score_pad_factor)
    if phase.actor_gpus is not None:
        formula += f"; {role_split_text(phase.actor_gpus, phase.critic_gpus)}"
    if on_actor:
        formula += (f"; the rollouts on the actor's {rollout_gpus} GPUs while the other "
                    f"{gpus_total - rollout_gpus} wait: {idle_gpu_s:.3g} idle GPU-s a step")
    if driver:
        formula += (f"; the batch through one driver (single controller, padded to "
                    f"{phase.padded_prompt_tokens or phase.prompt_tokens} + {longest} tokens): "
                    f"{sum(driver.values()):.3g} s "
                    f"at {A.RL_DRIVER_BYTES_PER_S.value / 1e9:g} GB/s ({A.RL_DRIVER_BYTES_PER_S.name}, "
                    f"fitted to verl's H20 steps), within the parts")
        if t.image_grid is not None:
            formula += (f", the batch's images with it ({A.RL_IMAGE_BYTES_PER_PIXEL.value:g} bytes "
                        f"a pixel, {A.RL_IMAGE_BYTES_PER_PIXEL.name}: decoded, assumed RGB)")
    if phase.reward.kind == "rule":
        formula += f"; {reward_host_part.text}"
    if rollout_tower_s:
        formula += (f"; the engines' vision tower at prefill, {rollout_tower_s:.3g} s a step "
                    f"(plan/rl_images.py)")
    if phase.image_prep_by_workers:
        formula += (f"; the workers' image preparation inside the step at "
                    f"{A.RL_IMAGE_PREP_S_PER_MEGAPIXEL.value:g} s a megapixel "
                    f"({A.RL_IMAGE_PREP_S_PER_MEGAPIXEL.name}: measured on one CPU, "
                    f"an assumption for this host)")
    per_engine = f"engine of {tp} GPUs" if tp > 1 else "GPU"
    batch_text = (f"up to {paged.peak_running} running per {per_engine}" if paged is not None
                  else f"batch {work.batch} per {per_engine}")
    roofline = (f"generation roofline ({phase.engine}, {batch_text} in "
                f"{share:g} of its memory, decode {work.decode_bound}-bound"
             f"{_paged_text(paged) if paged is not None else ''}"
             f"{'; the longest response sets each wave' if tail_led and paged is None else ''}"
             f"{'; the step waits for the longest response' if tail_led and paged else ''}"
                f"{_engine_host_text(phase)})")
    update_basis = training_basis(e)
    basis = (f"{'measured' if grpo is not None else 'formula'}: {roofline} + policy update, "
             f"{update_basis.replace(': ', ' ', 1)}")
    if grpo is not None:
        basis += f"; {grpo.basis}"
    warnings = list(e.warnings)
    released = released_weights(s.get("model"))
    if released is not None and phase.rollout_precision == "bf16":
        # the engine gets the trainer's bf16 weights each step (weight_formats.py: the recipes
        # dequantise the checkpoint first); the released format is generation's default only
        warnings.append(f"{t.arch.name} is released with {released.format.upper()} "
                        f"{released.quantised} ({released.bits_per_weight:g} bits); the rollouts "
                        f"take the bf16 policy the trainer syncs, as RL recipes dequantise it "
                        f"first (`gpuhours generation` sizes the release).")
    if on_actor and phase.engine == "hf-generate" and t.zero_stage == 3:
        warnings.append("placement actor with ZeRO-3: HF generate from sharded weights gathers "
                        "each layer's parameters on every forward, which the rollouts here do not "
                        "cost; OpenRLHF refuses the pair (examples/train_ppo_ray.py @dbdd43b0: "
                        "ZeRO-3 only with vLLM engines).")
    if on_actor and idle_gpu_s > 0:
        warnings.append(f"placement actor: {gpus_total - rollout_gpus} of the phase's "
                        f"{gpus_total} GPUs wait {rollout_s:,.0f} s of each {step_s:,.0f} s step "
                        f"while the actor generates ({idle_gpu_s / (step_s * gpus_total):.0%} of "
                        f"the phase's GPU hours); dedicated rollout GPUs (vLLM) would let them "
                        f"work.")
    if phase.policy_epochs > 1 and not phase.old_logprob_pass:
        warnings.append(f"policy_epochs {phase.policy_epochs} with old_logprob_pass false: "
                        "every epoch after the first needs the old policy's log-probs for "
                        "PPO's clipped ratio, and no pass computes them here; the step takes "
                        "them from the rollout engine (its returned log-probs), or it is "
                        "missing a forward over every sequence.")
    if phase.max_response_tokens is None:
        warnings.append("max_response_tokens not given: every response is assumed as long as "
                        "the mean; a synchronous step waits for its longest response.")
    if work.decode_bound == "memory bandwidth" and work.batch < 16:
        warnings.append(f"only {work.batch} sequences per rollout GPU at a time: decode reads "
                        f"all the weights for each token of a few sequences (weight-bound); "
                        f"more prompts per step or fewer rollout GPUs use them better.")
    details = {"steps": steps, "step_time_s": step_s, **{k.replace(" ", "_").replace("-", "_")
                                                          + "_s": v for k, v in parts.items()},
               "rollout_share": rollout_s / step_s, "generation_batch_per_gpu": work.batch,
               **({"generation_rounds_per_step": phase.generation_rounds_per_step}
                  if phase.generation_rounds_per_step > 1 else {}),
               # waves and their tail play no part in a stream (the engines stay full): left out;
               # a paged engine runs no waves: its admissions and preemptions instead
               **({} if streamed else {"rollout_tail_s": tail.batch_time_s}),
               **({} if streamed or paged is not None else {"rollout_waves": waves}),
               **({} if paged is None else paged.details()),
               **({} if inflight is None else {
                   "rollout_inflight_engine_busy_s": inflight.engine_busy_s,
                   "rollout_inflight_trainer_wait_s": inflight.trainer_wait_s,
                   "rollout_inflight_peak_running_sequences": inflight.peak_running,
                   "rollout_inflight_preemptions": inflight.preemptions,
                   "rollout_inflight_prefill_s": inflight.prefill_s,
                   "rollout_inflight_decode_steps": inflight.decode_steps}),
               "rollout_gpus": rollout_gpus, "train_gpus": train_gpus,
               # GPU-seconds a step the roles off the actor's GPUs wait for its rollouts
               **({"idle_gpu_s": idle_gpu_s} if on_actor else {}),
               "rollout_tensor_parallel": tp, "update_micro_batch": t.micro_batch,
               # pad_packed_to_longest: tokens computed per real token (update, log-prob passes)
               "update_padding_factor": pad_factor, "logprob_padding_factor": score_pad_factor,
               "rollout_memory_utilisation": share,
               "grpo_calibration_ledger_id": grpo.ledger_id if grpo else None,
               "driver_transfer_s": sum(driver.values()),
               # a rule reward's host work: all of it (CPU-seconds over the workers) and its
               # source; what the step waits for is reward_host_s (plan/rl_reward_host.py)
               "reward_host_total_s": (reward_host_part.total_s
                                       * phase.generation_rounds_per_step),
               "reward_host_basis": reward_host_part.text,
               # a vision-language rollout's tower at prefill and the hosts' image preparation
               # (plan/rl_images.py), within the rollout and the first scoring pass
               "rollout_vision_tower_s": rollout_tower_s, "rollout_image_prep_s": rollout_prep_s,
               "actor_image_prep_s": actor_prep_s,
               # ref_offload's host-to-GPU copies, overlapped with the reference pass
               "ref_offload_copy_s": ref_copy_s,
               # refit_offload: the trainer's weights and optimizer state down and up (in
               # host_offload_s, the step's "host offload" part)
               "refit_offload_s": refit_s,
               # rollout_sleep_offload: the engine's weights down and up (in weight_sync_s)
               "engine_sleep_wake_s": sleep_s,
               # PPO's critic: its values forward (a scoring pass) and its whole update (with
               # critic_gpus, only what outlasts the actor's update is in critic_s)
               "critic_value_pass_s": critic_value_s, "critic_update_s": critic_update_s,
               **{"driver_" + k.replace(" ", "_").replace("-", "_") + "_s": v
                  for k, v in driver.items()}}
    # how published RL steps landed against this model (measured; estimate/track_record.py)
    details["track_record"] = load_track_record("rl").model_dump(mode="json")
    storage, write_s = phase_storage(
        phase, t, (phase.prompts or steps * phase.prompts_per_step) * phase.prompt_tokens, steps,
        base / gpus_total, rollouts=steps * sequences, rollout_tokens=seq,
        disk_write_gb_per_s=ctx.plan.hardware.disk_write_gb_per_s)
    result = phase_result(ctx, phase, gpus_total, base, bottleneck, basis, formula,
                          _setup_summary(t, hw), warnings, details, None, storage, write_s,
                          steps=steps)
    # the rule reward's host seconds carry their own source (a timing on another CPU)
    kind: BasisKind = "assumed" if reward_host_part.total_s > 0 else "formula"
    reward_host_total_s = reward_host_part.total_s * phase.generation_rounds_per_step
    return result.model_copy(update={
        "detail_figures": {
            "reward_host_s": Figure(value=reward_host_s, unit="s", basis=kind,
                                    source=f"plan/rl_reward_host.py: {reward_host_part.text}"),
            "reward_host_total_s": Figure(value=reward_host_total_s, unit="s", basis=kind,
                                          source=f"plan/rl_reward_host.py, every response's "
                                          f"scoring summed over the workers: "
                                          f"{reward_host_part.text}")},
        "config_digest": digest(given),
        "detail_bases": _rl_detail_bases(phase, grpo, roofline, update_basis, share, dedicated,
                                         hw, gpus_total, details),
        "assumptions": [assumption_text(a) for a in _rl_assumptions(
            phase, packed, dedicated, bool(driver), t.image_grid is not None)]})


def _rl_assumptions(phase: RLPhase, packed: bool, dedicated: bool, driver: bool,
                    images: bool) -> list[Any]:
    """The assumptions an rl phase's figures rest on: its engine's decode constants, the
    engine's memory share and the update's token budget where the plan leaves them to their
    defaults, the weight sync's collective efficiency, the driver's rate."""
    used = engine_assumptions(phase.engine)
    if phase.rollout_memory_utilisation is None:
        used.append(A.GENERATION_MEMORY_UTILISATION if dedicated
                    else A.COLOCATED_ROLLOUT_MEMORY_UTILISATION)
    if (packed and phase.update_tokens_per_gpu is None) or (
            phase.scoring_tokens_per_gpu is None and phase.update_tokens_per_gpu is None):
        used.append(A.RL_UPDATE_TOKENS_PER_MICRO_BATCH)
    used.append(A.COLLECTIVE_EFFICIENCY)  # the weight sync (and colocated, its gather)
    if driver:
        used.append(A.RL_DRIVER_BYTES_PER_S)
        if images:
            used.append(A.RL_IMAGE_BYTES_PER_PIXEL)
    if phase.image_prep_by_workers:
        used.append(A.RL_IMAGE_PREP_S_PER_MEGAPIXEL)
    return used


def _rl_detail_bases(phase: RLPhase, grpo: Any, roofline: str, update_basis: str, share: float,
                     dedicated: bool, hw: Hardware, gpus_total: int,
                     details: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Each rl detail's own basis (kind, source): the plan's inputs as input, defaults as
    assumed, the parts a GRPO measurement on this device scales as measured, the rest by the
    formula that makes them (not the phase's whole basis for every figure)."""
    from gpuhours.estimate.timing import link_bandwidth_bytes_per_s

    out: dict[str, tuple[str, str]] = {}
    # the parts a GRPO calibration scales: physics x (measured / physics) of the same part
    scaled = ({"rollout_generation_s": "rollout generation",
               "old_policy_log_probs_s": "old-policy log-probs",
               "reference_model_s": "reference model", "reward_model_s": "reference model",
               "policy_update_s": "policy update", "critic_s": "reference model"}
              if grpo is not None else {})
    if grpo is not None and phase.engine != grpo.engine:
        scaled.pop("rollout_generation_s")
    for key, part in scaled.items():
        out[key] = ("measured", f"physics x the {part} part's measured / physics scale "
                                f"{grpo.scales.get(part, 1.0):.3g} ({grpo.basis})")
    out.setdefault("rollout_generation_s", ("formula", roofline))
    out.setdefault("rollout_tail_s", ("formula", "the longest response decoded alone, "
                                                 f"{roofline}"))
    out.setdefault("policy_update_s", (update_basis.split(":", 1)[0],
                                       update_basis.split(":", 1)[1].strip()))
    for key in ("old_policy_log_probs_s", "reference_model_s", "reward_model_s",
                "critic_value_pass_s"):
        out.setdefault(key, ("formula", "a forward pass over every sequence at the trainer's "
                                        "rate, in packed micro-batches (plan/rl_scoring.py)"))
    if dedicated:
        path = hw.model_copy(update={"num_gpus": max(hw.num_gpus, gpus_total)})
        _, link = link_bandwidth_bytes_per_s(path)
        sync = (f"the policy's bf16 weights / the {link} link x {A.COLLECTIVE_EFFICIENCY.name} "
                f"{A.COLLECTIVE_EFFICIENCY.value:g} (rank 0's broadcast to the engines, "
                "weight_sync_s)")
    else:
        sync = ("the policy's bf16 weights gathered over the GPUs' link and copied in device "
                "memory (weight_sync_s)")
    if phase.rollout_sleep_offload:
        sync += " + the engine's sleep and wake (plan/rl_engine_sleep.py)"
    out["weight_sync_s"] = ("formula", sync)
    if phase.rollout_memory_utilisation is not None:
        out["rollout_memory_utilisation"] = ("input", "the plan's rollout_memory_utilisation")
    else:
        a = (A.GENERATION_MEMORY_UTILISATION if dedicated
             else A.COLOCATED_ROLLOUT_MEMORY_UTILISATION)
        out["rollout_memory_utilisation"] = ("assumed", f"{a.name}, the default for "
                                                        f"{phase.placement} rollouts: {a.basis}")
    if phase.steps is not None:
        out["steps"] = ("input", "the plan's steps")
    else:
        out["steps"] = ("formula", "ceil(prompts x epochs / prompts_per_step)")
    if "generation_rounds_per_step" in details:
        out["generation_rounds_per_step"] = ("input", "the plan's generation_rounds_per_step")
    if grpo is not None:
        out["step_time_s"] = ("measured", f"the parts' sum as the phase adds them, its "
                                          f"calibrated parts from {grpo.basis}")
        out["rollout_share"] = ("measured", "rollout_generation_s / step_time_s")
        for key, part in (("critic_value_pass_s", "reference model"),
                          ("critic_update_s", "policy update")):
            out[key] = ("measured", f"physics x the {part} part's measured / physics scale "
                                    f"{grpo.scales.get(part, 1.0):.3g} ({grpo.basis})")
    # the rest: each by the model that makes it, never the calibration's label
    made_by = {
        "step_time_s": "the parts as the placement adds them (the phase's formula)",
        "rollout_share": "rollout_generation_s / step_time_s",
        "rollout_intake_s": "the trainer pulling a stream's rollouts through the driver "
                            "(plan/rl_driver.py)",
        "host_offload_s": "the trainer's state to host memory and back (estimate/offload.py, "
                          "plan/rl_refit_offload.py)",
        "critic_s": "PPO's critic: its values pass and what its update outlasts the actor's "
                    "(plan/rl_train.py)",
        "critic_update_s": update_basis.split(":", 1)[1].strip(),
        "validation_s": "a validation rollout every validation_every_steps steps "
                        "(plan/rl_validation.py)",
        "update_padding_factor": "plan/rl_padding.py", "logprob_padding_factor":
        "plan/rl_padding.py", "driver_transfer_s": f"the batch through one driver at "
        f"{A.RL_DRIVER_BYTES_PER_S.name} (plan/rl_driver.py)",
        "rollout_vision_tower_s": "plan/rl_images.py", "rollout_image_prep_s":
        "plan/rl_images.py", "actor_image_prep_s": "plan/rl_images.py",
        "ref_offload_copy_s": "the reference's weights host to GPU (ref_offload)",
        "refit_offload_s": "plan/rl_refit_offload.py",
        "engine_sleep_wake_s": "plan/rl_engine_sleep.py"}
    for key, v in details.items():
        if key not in out and isinstance(v, int | float) and not isinstance(v, bool):
            out[key] = ("formula", made_by.get(key, f"{roofline} (plan/rl_paged.py)"
                                   if key.startswith("rollout_") else "the phase's formula"))
    return out


def assumption_text(a: Any) -> str:
    """An assumption as the plan's list writes it."""
    return f"{a.name} = {a.value:g} {a.unit}: {a.basis}"


def engine_assumptions(engine: str) -> list[Any]:
    """The constants an engine's decode steps are costed with (estimate/generation.py): its host
    step, per sequence and per layer, its KV passes, and the bandwidth's width term."""
    return [A.DECODE_HOST_STEP_S[engine], A.DECODE_HOST_PER_SEQUENCE_S[engine],
            A.DECODE_HOST_PER_LAYER_S[engine], A.DECODE_KV_PASSES[engine],
            A.DECODE_BANDWIDTH_HALF_WIDTH, A.BANDWIDTH_EFFICIENCY]


def _pct(fraction: float) -> str:
    """A percentage for a basis: whole above 1%, two figures below (0.014% is not 0%)."""
    return f"{100 * fraction:.0f}%" if 100 * fraction >= 1 else f"{100 * fraction:.2g}%"


def _runs_fp8(gpu: GpuSpec) -> bool:
    """Whether the GPU runs fp8 matmuls (rollout_precision fp8 is possible there)."""
    try:
        check_fp8(gpu)
    except InputError:
        return False
    return True


def _check_colocated_split(ctx: Context, phase: RLPhase, e: TrainingEstimate, share: float,
                           reward_arch: ModelArch | None = None,
                           critic: TrainingEstimate | None = None, shards: int = 1) -> None:
    """Colocated, every trained or scoring model stays on each GPU while the engine generates
    in its `share` of the memory (vLLM's gpu_memory_utilization is a fraction of the whole
    GPU; verl, OpenRLHF and TRL keep each role resident unless it is offloaded): all must fit.
    The policy's weights, master copy and optimizer moments; PPO's critic's alike (`critic`,
    its own estimate where it has its own ZeRO stage, else the policy's: the policy's size); a
    reward model's
    weights in bf16 over `shards` GPUs (the policy's tensor and pipeline groups, times its
    data-parallel ranks under ZeRO-3). The reference model is not
    counted: NeMo-RL keeps its weights in host memory and loads them for its pass
    (megatron_policy_worker.py reference_state_dict @108bffda), verl's scripts offload it
    (ref.fsdp_config.param_offload), an adapter policy's is its own base. A verdict (exit 1),
    not bad input. HF generate runs in the trainer's own model and is not checked here."""
    from gpuhours.estimate.params import count_params

    m = e.memory
    policy = m.weights_bytes.value + m.master_weights_bytes.value + m.optimizer_bytes.value
    parts = [("the policy's weights, master copy and optimizer state", policy)]
    if phase.critic:
        cm = (critic or e).memory
        parts.append(("PPO's critic's", cm.weights_bytes.value + cm.master_weights_bytes.value
                      + cm.optimizer_bytes.value))
    if reward_arch is not None:
        parts.append(("the reward model's bf16 weights",
                      2.0 * count_params(reward_arch).total / shards))
    resident = sum(b for _, b in parts)
    device = m.device_bytes.value
    left = (1 - share) * device
    if resident > left:
        listed = " + ".join(f"{what} {b / 2**30:.1f}" for what, b in parts)
        raise DoesNotFit(
            _field_where(ctx, phase, "rollout_memory_utilisation"),
            f"colocated, the engine's share ({share:g} of {device / 2**30:.1f} GiB) leaves "
            f"{left / 2**30:.1f} GiB per GPU, and what stays resident during rollouts needs "
            f"{resident / 2**30:.1f} GiB ({listed} GiB).",
            "Lower rollout_memory_utilisation, shard the trainer over more GPUs (ZeRO-3), set "
            "offload_between_phases or ref_offload, or use dedicated rollout GPUs.")


def _ref_offload_s(ctx: Context, phase: RLPhase, t: Training, hw: Hardware,
                   sequences: int, train_gpus: int, compute_s: float) -> tuple[float, float]:
    """(copy seconds, seconds added to the reference pass) of `ref_offload`
    (plan/rl_scoring.py ref_offload_s): the rank's bf16 shard up once per micro-batch over the
    host link, what exceeds the pass's compute added."""
    if not (phase.ref_offload and phase.reference_model):
        return 0.0, 0.0
    from gpuhours.estimate.offload import host_link_bytes_per_s
    from gpuhours.estimate.params import count_params

    try:
        link = host_link_bytes_per_s(hw.gpu.generation, hw.gpu.name, hw.pcie_lanes)
    except InputError as err:  # a GPU without a PCIe host link figure (GB200's NVLink-C2C)
        raise InputError(_field_where(ctx, phase, "ref_offload"), err.message) from None
    budget = (phase.scoring_tokens_per_gpu or phase.update_tokens_per_gpu
              or A.RL_UPDATE_TOKENS_PER_MICRO_BATCH.value)
    copy_s, added_s, _ = ref_offload_s(params=count_params(t.arch).total, shards=train_gpus,
                                       sequences_per_gpu=sequences / train_gpus,
                                       tokens_per_sequence=t.llm_seq_len, budget_tokens=budget,
                                       link_bytes_per_s=link, compute_s=compute_s)
    return copy_s, added_s


def _with_images_s(driver: dict[str, float], phase: RLPhase, t: Training,
                   ranks: int) -> dict[str, float]:
    """The driver's seconds by part with a vision-language batch's decoded images added
    (plan/rl_driver.py image_transfers_bytes), at the driver's rate; an image given by its
    tokens is taken at its resized size (its patches' pixels)."""
    from gpuhours.plan import rl_driver as d

    assert t.arch.vision is not None  # a grid implies a tower
    pixels = t.image_pixels or t.image_grid.patches * t.arch.vision.patch_size ** 2
    images = d.image_transfers_bytes(list(driver), phase.prompts_per_step,
                                     phase.generations_per_prompt, ranks, t.images_per_example,
                                     pixels)
    rate = A.RL_DRIVER_BYTES_PER_S.value
    return {part: s + images[part] / rate for part, s in driver.items()}


def _position_rows(t: Training) -> int:
    """Rows of position_ids a sequence of setup `t` carries: 4 for a Qwen2-VL / Qwen2.5-VL
    tower's M-RoPE (rl_driver.MROPE_POSITION_ROWS), else 1."""
    from gpuhours.estimate.vision import VisionTower
    from gpuhours.plan.rl_driver import MROPE_POSITION_ROWS

    return MROPE_POSITION_ROWS if isinstance(t.arch.vision, VisionTower) else 1


def _driver_transfers_s(phase: RLPhase, sequences: int, longest: int,
                        position_rows: int = 1) -> dict[str, float]:
    """Seconds each part of a single-controller step spends moving the padded batch through
    the driver (src/gpuhours/plan/rl_driver.py: the bytes; assumptions.RL_DRIVER_BYTES_PER_S:
    the rate, fitted to verl's H20 rows). Every sequence travels padded to the prompt
    (`padded_prompt_tokens`, else the mean prompt) plus the longest response: verl pads to
    `response_length`, whatever a response holds; `position_rows` rows of position_ids a
    sequence (4 for Qwen2-VL's M-RoPE: rl_driver.MROPE_POSITION_ROWS)."""
    from gpuhours.plan import rl_driver as d

    rate = A.RL_DRIVER_BYTES_PER_S.value
    p = phase.padded_prompt_tokens or phase.prompt_tokens
    r = position_rows
    out = {"rollout generation": d.rollout_return_bytes(sequences, p, longest, r) / rate,
           # once a step whatever policy_epochs: the epochs loop inside the workers over the
           # batch they hold (verl dp_actor.update_policy: `for _ in range(ppo_epochs)`)
           "policy update": d.update_bytes(sequences, p, longest, phase.reference_model,
                                           r) / rate}
    if phase.old_logprob_pass:
        out["old-policy log-probs"] = d.scoring_pass_bytes(sequences, p, longest, 2, r) / rate
    if phase.reference_model:
        out["reference model"] = d.scoring_pass_bytes(sequences, p, longest, 1, r) / rate
    if phase.reward.kind == "model":
        out["reward model"] = d.scoring_pass_bytes(sequences, p, longest, 1, r) / rate
    if phase.critic:  # the values back from its forward, then the batch to its update
        out["critic"] = (d.scoring_pass_bytes(sequences, p, longest, 1, r)
                         + d.update_bytes(sequences, p, longest, phase.reference_model, r)
                         ) / rate
    return out


def _grpo_calibration(ctx: Context, hw: Hardware, t: Training) -> Any:
    """The part scales of the nearest GRPO step measured on this device (`gpuhours bench
    --workload grpo`), or None without a ledger or such a measurement."""
    if ctx.ledger is None:
        return None
    from gpuhours.track.calibration import find_grpo_calibration

    found = find_grpo_calibration(ctx.ledger, hw, t)
    if found is not None:
        parts = ", ".join(f"{part} x{scale:.3g}" for part, scale in found.scales.items())
        ctx.used_measurements.append((found.ledger_id, f"the GRPO step's parts ({parts})"))
    return found


def host_offload_s(e: TrainingEstimate, hw: Hardware, old_logprob_pass: bool,
                   critic: bool) -> float:
    """Seconds a step spends moving the trained model's state between host and GPU when it
    waits in host memory between phases (EasyR1 @8460e817 verl/workers/fsdp_workers.py: with
    actor.offload.offload_params, `load_fsdp_model` before and `offload_fsdp_model` after the
    weight sync to vLLM, the old-log-prob pass and the update; with offload_optimizer,
    `load_fsdp_optimizer` / `offload_fsdp_optimizer` around the update only).

    Each GPU moves its own shard of the weights (with their master copy) and of the optimizer
    moments, as the training estimate holds them, each way once per phase that needs them, at
    the host link's achievable rate (estimate/offload.py: PCIe by GPU generation x the copy
    efficiency); the copies are not overlapped with compute (`.to(device)` before the phase
    runs). PPO's critic (offloaded alike, the policy's size) adds its forward and update."""
    from gpuhours.estimate.offload import host_link_bytes_per_s

    weights = e.memory.weights_bytes.value + e.memory.master_weights_bytes.value
    optimizer = e.memory.optimizer_bytes.value
    trips = 2 + (1 if old_logprob_pass else 0)  # weight sync, update (+ old log-probs)
    moved = 2 * (trips * weights + optimizer)
    if critic:  # its values pass and its update: the weights twice, its moments once
        moved += 2 * (2 * weights + optimizer)
    return moved / host_link_bytes_per_s(hw.gpu.generation, hw.gpu.name, hw.pcie_lanes)


def _refit_offload_s(ctx: Context, phase: RLPhase, e: TrainingEstimate, hw: Hardware) -> float:
    """Seconds a step spends on `refit_offload` (plan/rl_refit_offload.py): each GPU's bf16
    weight shard down to pinned host memory and up again, and its optimizer state (the moments,
    and the share of the master copy the choice names, as the training estimate shards them)
    down to pageable host memory and up again, at the host link's rate (estimate/offload.py),
    the pageable copies PAGEABLE_COPY_SLOWDOWN times slower."""
    if phase.refit_offload == "none":
        return 0.0
    from gpuhours.estimate.offload import PAGEABLE_COPY_SLOWDOWN, host_link_bytes_per_s
    from gpuhours.plan.rl_refit_offload import optimizer_state_bytes_moved, refit_offload_s

    try:
        link = host_link_bytes_per_s(hw.gpu.generation, hw.gpu.name, hw.pcie_lanes,
                                     field="refit_offload")
    except InputError as err:  # a GPU without a PCIe host link figure
        raise InputError(_field_where(ctx, phase, "refit_offload"), err.message) from None
    optimizer = optimizer_state_bytes_moved(phase.refit_offload,
                                            e.memory.optimizer_bytes.value,
                                            e.memory.master_weights_bytes.value)
    return refit_offload_s(e.memory.weights_bytes.value, optimizer, link,
                           PAGEABLE_COPY_SLOWDOWN.value)


def _engine_sleep_s(ctx: Context, phase: RLPhase, t: Training, hw: Hardware, tp: int) -> float:
    """Seconds of one sleep/wake cycle of a level-1 sleeping engine (plan/rl_engine_sleep.py):
    each GPU's share of the engine's weights (the policy's parameters at the rollout's bytes
    per weight over the engine's tensor parallelism) down and up over the host link."""
    from gpuhours.estimate.offload import host_link_bytes_per_s
    from gpuhours.estimate.params import count_params
    from gpuhours.plan.rl_engine_sleep import engine_weight_bytes_per_gpu, sleep_wake_s

    per_weight = 1.0 if phase.rollout_precision == "fp8" else 2.0
    weights = engine_weight_bytes_per_gpu(count_params(t.arch).total, per_weight, tp)
    try:
        link = host_link_bytes_per_s(hw.gpu.generation, hw.gpu.name, hw.pcie_lanes,
                                     field="rollout_sleep_offload")
    except InputError as err:  # a GPU without a PCIe host link figure
        raise InputError(_field_where(ctx, phase, "rollout_sleep_offload"), err.message
                         ) from None
    return sleep_wake_s(weights, link)


def _engine_host_text(phase: RLPhase) -> str:
    """What the rollout engine's host work per decode step is costed as, when a setting changes
    it: vLLM's async scheduling prepares the next step while the GPU runs this one, so its host
    step (DECODE_HOST_STEP_S) is hidden behind the GPU's work; DAPO's repeated generation."""
    parts = []
    if phase.rollout_async_scheduling:
        parts.append("; async scheduling: the engine's host step beside the GPU's work, not "
                     "after it (rollout_async_scheduling)")
    if phase.generation_rounds_per_step > 1:
        parts.append(f"; x {phase.generation_rounds_per_step:g} generation rounds a step "
                     "(generation_rounds_per_step)")
    return "".join(parts)


def weight_sync_s(arch: ModelArch, hw: Hardware, dedicated: bool,
                  phase_gpus: int | None = None, every_rank: bool = False,
                  engine_cast_s: float = 0.0) -> float:
    """Seconds to hand the updated policy's bf16 weights to the rollout engine each step.

    Dedicated engine GPUs receive them in an NCCL broadcast from the trainer's rank 0 to every
    engine GPU (OpenRLHF's broadcast_to_vllm over its model_update_group of rank 0 and all vLLM
    ranks; NeMo-RL's and verl's one-step-off refits alike): a pipelined broadcast carries the
    whole bytes over each link of its chain, so it lasts the bytes over the slowest link at
    collective efficiency. That link is the network when the phase's GPUs (`phase_gpus`, trainer
    and engines together) span nodes, since some engines then sit on a node other than rank 0's
    (25 GB/s a GPU by default, the plan's inter_node_gb_per_s_one_way), else the node's own
    link. With `every_rank` (the phase's weight_sync_every_rank: NeMo-RL's group is every
    training rank and every engine rank, whole nodes of them) the ring spans whole nodes and
    broadcast_ring_bytes_per_s gives its rate: every GPU still receives every byte. The
    engines' own work on what they receive (`engine_cast_s`: fp8_refit_cast_s) runs beside the
    broadcast of the next of the two packed buffers (NeMo-RL's packed_broadcast_consumer: each
    buffer's broadcast and unpacking on its own stream), so the refit lasts the longer of the
    two (the last buffer's tail left out). Colocated,
    the engine's copy is refreshed in device memory (read and write once at achievable
    bandwidth), after the trainer's shards are gathered over the link when it trains on
    several GPUs ((N-1)/N of the bytes, an all-gather).
    """
    from gpuhours.estimate.params import count_params
    from gpuhours.estimate.timing import link_bandwidth_bytes_per_s

    weights = count_params(arch).total * 2.0
    if dedicated:
        path = hw.model_copy(update={"num_gpus": max(hw.num_gpus, phase_gpus or 0)})
        link, _ = link_bandwidth_bytes_per_s(path)
        if every_rank and path.num_nodes > 1:
            link = broadcast_ring_bytes_per_s(path)
        return max(weights / (link * A.COLLECTIVE_EFFICIENCY.value), engine_cast_s)
    link, _ = link_bandwidth_bytes_per_s(hw)
    link *= A.COLLECTIVE_EFFICIENCY.value
    local = 2 * weights / (hw.gpu.memory_bw_gb_per_s * 1e9 * A.BANDWIDTH_EFFICIENCY.value)
    gather = (hw.num_gpus - 1) / hw.num_gpus * weights / link if hw.num_gpus > 1 else 0.0
    return local + gather


#: bytes of GPU memory traffic per weight of NeMo-RL's eager blockwise fp8 cast of a bf16
#: weight (nemo_rl/models/generation/vllm/quantization/fp8.py @108bffda, the same at v0.6.0:
#: load_weights -> cast_tensor_to_fp8_blockwise), counted op by op: v.to(torch.float) 2 read +
#: 4 written; the block permute's .contiguous() 4 + 4; torch.abs 4 + 4; torch.amax over each
#: block 4; data_hp * scale_fp 4 + 4; torch.clamp 4 + 4; .to(float8_e4m3fn) 4 + 1; the permute
#: back's reshape copy 1 + 1: 49 (the per-block scales, 1/16,384 of it, and vLLM's copy of the
#: GPU's fp8 shard into its parameter left out)
FP8_REFIT_CAST_BYTES_PER_WEIGHT = 49


def fp8_refit_cast_s(arch: ModelArch, hw: Hardware) -> float:
    """Seconds each fp8 engine GPU spends casting a refit's bf16 weights: NeMo-RL's
    load_weights casts every received linear weight, whole (the broadcast hands every GPU
    whole HF tensors; vLLM's weight loader takes its TP shard only after the cast), so each
    GPU casts the whole model's linear weights: (all parameters - embedding, LM head and norms)
    x FP8_REFIT_CAST_BYTES_PER_WEIGHT at the GPU's datasheet bandwidth x BANDWIDTH_EFFICIENCY.
    The router (a bf16 ReplicatedLinear) and the biases, not cast, are counted with them: a
    small upper end.
    DeepSeek-V3 on an H100: ~0.66e12 weights x 49 B / (3.35 TB/s x 0.8) = ~12 s."""
    from gpuhours.estimate.params import count_params

    c = count_params(arch)
    norms = c.num_layers * c.norms_per_layer + c.final_norm
    cast = max(0, c.total - c.embedding - c.lm_head - norms - c.vision)
    return (cast * FP8_REFIT_CAST_BYTES_PER_WEIGHT
            / (hw.gpu.memory_bw_gb_per_s * 1e9 * A.BANDWIDTH_EFFICIENCY.value))


def broadcast_ring_bytes_per_s(hw: Hardware) -> float:
    """Bytes/s an NCCL broadcast over whole nodes of `hw` delivers to every rank, before
    COLLECTIVE_EFFICIENCY: min(gpus_per_node x the network's per-GPU figure, the node's own GPU
    link).

    NCCL runs broadcast as a ring only and costs a ring's bus bandwidth as its channels x each
    channel's inter-node bandwidth (NVIDIA/nccl@5067397c src/graph/tuning.cc ncclTopoTuneModel:
    "(coll == ncclFuncBroadcast || ...) && a != NCCL_ALGO_RING) continue"; busBw = nChannels x
    bwInter beyond 2 nodes); the ring graph's search over nodes of several GPUs each with its
    NIC gives the channels different NICs to leave and enter a node by, as an all-reduce's
    rings have, so a node takes in the bytes once through all its NICs
    together (gpus_per_node x inter_node_gb_per_s_one_way) and forwards them to its GPUs over
    the node's link, every GPU receiving every byte once. A DGX-H100 (8 x 50 GB/s NICs, NVLink
    450 GB/s a direction): 400 GB/s, where one NIC is 50. The NIC count per node is taken
    as its GPU count (the per-GPU network figure is a NIC's share). An assumption from NCCL's
    ring design, not measured here; a ring over a group with one GPU on some node (OpenRLHF's
    rank 0 beside the engines) leaves that node by its one GPU's NIC: not this rate."""
    from gpuhours.estimate.timing import link_bandwidth_bytes_per_s

    node, _ = link_bandwidth_bytes_per_s(hw.model_copy(update={"num_gpus": hw.gpus_per_node}))
    return min(hw.gpus_per_node * hw.inter_node_gb_per_s_one_way * 1e9, node)


def online(ctx: Context, phase: OnlinePhase) -> PhaseResult:
    base = phase.duration_hours * phase.gpus * phase.utilisation
    line = ctx.lines.get(phase.name)
    return phase_result(ctx, phase, phase.gpus, base, "as stated (service time)",
                   f"assumed: the plan's duration and GPUs (line {line})",
                   f"{phase.duration_hours:g} h x {phase.gpus} GPUs x {phase.utilisation:g} "
                   f"utilisation", {"gpus": phase.gpus}, [],
                   storage=stated_storage(phase, phase.duration_hours))


def evaluation(ctx: Context, phase: EvalPhase) -> PhaseResult:
    line = ctx.lines.get(phase.name)
    if phase.gpu_hours is not None:
        return phase_result(ctx, phase, 1, phase.gpu_hours, "as stated",
                       f"assumed: the plan's GPU hours (line {line})",
                       f"{phase.gpu_hours:g} GPU h as stated", {}, [])
    s = merged(ctx, TrainingSettings(model=phase.model, params=phase.params))
    arch, model_basis = _arch(ctx, phase, s)
    total_s = 0.0
    rows = {}
    for b in phase.benchmarks:
        try:
            check_generation_context(arch.name, arch.max_positions, b.prompt_tokens,
                                     b.answer_tokens, "benchmarks")
        except FieldError as err:
            raise InputError(f"{_where(ctx, phase)}, field 'benchmarks' ({b.name})", err.message,
                             err.hint) from None
        try:
            setup = Generation(arch=arch, prompt_tokens=b.prompt_tokens,
                               output_tokens=b.answer_tokens, engine=phase.engine,
                               cuda_graphs=phase.cuda_graphs)
        except FieldError as err:
            raise InputError(_field_where(ctx, phase, "cuda_graphs"), err.message,
                             err.hint) from None
        gen = estimate_generation(setup, ctx.gpu)
        seconds = b.samples * phase.samples_per_prompt / gen.sequences_per_s
        rows[b.name] = seconds / 3600
        total_s += seconds
    formula = " + ".join(f"{name} {h:.3g}" for name, h in rows.items()) + " GPU h"
    return phase_result(ctx, phase, 1, total_s / 3600, "generation",
                   f"formula: generation roofline ({phase.engine}), {model_basis}", formula,
                   {"model": arch.name, "benchmarks": len(phase.benchmarks)}, [],
                   {"gpu_hours_by_benchmark": rows}).model_copy(update={
        "assumptions": [assumption_text(a) for a in (*engine_assumptions(phase.engine),
                                                     A.GENERATION_MEMORY_UTILISATION)]})


def fixed(ctx: Context, phase: FixedPhase) -> PhaseResult:
    line = ctx.lines.get(phase.name)
    return phase_result(ctx, phase, phase.gpus, phase.gpu_hours, "as stated",
                   f"assumed: the plan's GPU hours (line {line})",
                   f"{phase.gpu_hours:g} GPU h as stated", {"gpus": phase.gpus}, [])


#: phase kind -> its evaluation. A grid is evaluated by gpuhours.plan.grid.grid_phase (it also
#: returns the schedule), which builds on these; plan/budget.py dispatches the two.
PHASE_KINDS: dict[str, Any] = {"finetune": finetune, "pretrain": pretrain, "rl": rl,
                               "online": online, "eval": evaluation, "one_time": fixed,
                               "fixed": fixed}


def compute_phase(ctx: Context, phase: Any) -> PhaseResult:
    """The result of a phase of any kind but `grid` (see PHASE_KINDS)."""
    if phase.kind not in PHASE_KINDS:
        raise InputError(_where(ctx, phase), f"phase kind {phase.kind!r} is evaluated by "
                                             "gpuhours.plan.grid, not here.")
    return PHASE_KINDS[phase.kind](ctx, phase)
