"""Calibration: the measured efficiency of a matching benchmark in the ledger, as the scale
factor the analytic estimator applies to its assumed compute efficiency. No torch.

The scale is solved, not guessed: for the measurement's own setup and device, it is the factor
s for which `estimate_training(..., efficiency_scale=s)` gives the measured median step time
(bisection: the estimated step time falls as s grows). Applied to a comparable setup it carries
the measured efficiency over, while the estimator's physics (FLOPs, bytes, the width factor)
still accounts for what differs.

Which measurement matches (DESIGN.md "calibration (efficiency per gpu/model/config)"):
- the same device: the catalog GPU, or the same CPU model and thread count (`device_key`);
- the same method (full, lora), gradient checkpointing, and matmul precision (fp32, bf16, fp16);
  not compiled (the estimator models eager PyTorch);
- a comparable model: hidden size within a factor of 2 and parameters within `max_size_ratio`;
- of those, the nearest: the same model_type first, then by log hidden size, log parameters,
  log tokens per micro-batch and log sequence length, plus the measurement's own relative
  p10-p90 spread (a noisy measurement is a weaker basis); the newest on a tie.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpuhours.catalog.schema import DenseTflops, GpuSpec
from gpuhours.errors import FieldError, InputError
from gpuhours.estimate.arch import ModelArch, from_hf_config
from gpuhours.estimate.estimator import TrainingEstimate, estimate_training
from gpuhours.estimate.params import count_params
from gpuhours.setup import Hardware, Training
from gpuhours.track.ledger import Ledger, Measurement

#: precision -> the dtype its matmuls run in; measurements calibrate setups of the same dtype
MATMUL_DTYPE = {"fp32": "fp32", "bf16": "bf16", "bf16-mixed": "bf16", "bf16-amp": "bf16",
                "fp16": "fp16", "fp16-mixed": "fp16", "fp16-amp": "fp16", "fp8-mixed": "fp8"}
_PROBE_DTYPE = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
#: bisection bounds for the efficiency scale
SCALE_BOUNDS = (1e-3, 1e3)


@dataclass(frozen=True)
class Calibration:
    """The measured efficiency of one ledger measurement relative to the analytic estimate."""

    efficiency_scale: float
    basis: str
    ledger_id: int
    device_name: str
    measured_utc: str
    measured_tokens_per_s: float
    analytic_tokens_per_s: float

    def estimator_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for estimate_training."""
        return {"efficiency_scale": self.efficiency_scale, "efficiency_basis": self.basis}


def training_of(m: Measurement) -> Training | None:
    """The analytic Training of a ledger measurement's setup, or None when it cannot be rebuilt
    (a measurement of a user's own model through the Python API has no config)."""
    if not m.model_config or m.setup.get("method") not in ("full", "lora"):
        return None
    try:
        arch = from_hf_config(m.model_config, name=m.model, where=f"ledger #{m.id}")
    except InputError:
        return None  # a model type the estimator refuses: this row calibrates nothing
    s = m.setup
    return Training(arch=arch, method=s["method"],
                    precision=s.get("precision_as_run", s["precision"]),
                    optimizer=s.get("optimizer", "adamw"),
                    optimizer_impl=s.get("optimizer_impl", "foreach"),
                    micro_batch=s["micro_batch"], seq_len=s["seq_len"],
                    grad_accum=s.get("grad_accum", 1), checkpointing=bool(s["checkpointing"]),
                    flash_attention=s.get("attention", "sdpa") == "sdpa",
                    lora_rank=s.get("lora_rank", 16),
                    lora_targets=s.get("lora_targets", "all-linear"))


#: a measured step whose host time (not hidden behind the GPU's) is more than this share of
#: it calibrates nothing: the GPU's efficiency hardly moves it
HOST_LED_FRACTION = 0.5


def efficiency_scale_for(t: Training, hw: Hardware, measured_step_time_s: float) -> float | None:
    """The efficiency scale s at which the analytic step time of `t` on `hw` equals the measured
    one. None when no s in SCALE_BOUNDS does: the estimate's non-compute parts alone (memory
    traffic, optimizer, the host's operators) take longer than the measurement, or compute would
    have to be more than 1000x slower than assumed; and None when, at the s found, the host's
    issuing of operators is most of the step: such a step measures the host, not the GPU's
    efficiency (HOST_LED_FRACTION)."""
    if not (measured_step_time_s > 0 and math.isfinite(measured_step_time_s)):
        raise ValueError(f"measured step time must be positive, got {measured_step_time_s!r}")

    def step_s(scale: float) -> float:
        return estimate_training(t, hw, "calibration", efficiency_scale=scale).step_time_s.value

    lo, hi = SCALE_BOUNDS
    # at the upper bound compute costs ~nothing: what is left is the non-compute floor (memory
    # traffic, optimizer, the host's operators). A measurement at or below it says nothing about
    # compute efficiency.
    if step_s(hi) >= measured_step_time_s * (1 - 1e-9) or step_s(lo) < measured_step_time_s:
        return None
    for _ in range(80):  # geometric bisection: 1e-6 of the log range in 80 halvings
        mid = math.sqrt(lo * hi)
        if step_s(mid) > measured_step_time_s:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-9:
            break
    scale = math.sqrt(lo * hi)
    e = estimate_training(t, hw, "calibration", efficiency_scale=scale)
    if e.step_time_breakdown_s["host_exposed_s"].value > HOST_LED_FRACTION * e.step_time_s.value:
        return None
    return scale


def _distance(a: ModelArch, t: Training, b: ModelArch, tb: Training, max_size_ratio: float
              ) -> float | None:
    """How far apart two setups are for calibration; None when not comparable."""
    hidden = abs(math.log(a.hidden_size / b.hidden_size))
    params = abs(math.log(count_params(a).total / count_params(b).total))
    if hidden > math.log(2) or params > math.log(max_size_ratio):
        return None
    tokens = abs(math.log(t.tokens_per_micro_batch / tb.tokens_per_micro_batch))
    seq = abs(math.log(t.seq_len / tb.seq_len))
    # another family (untied embeddings, other attention shapes and kernels) runs differently
    # at the same size: prefer the same model_type when one is within the limits
    family = 0.0 if a.model_type == b.model_type else 1.0
    return hidden + params + 0.5 * tokens + 0.5 * seq + family


def _spread(m: Measurement) -> float:
    """(p90 - p10) / median of the measurement's step times: a noisy measurement is a weaker
    basis than a steady one of a slightly different setup."""
    timing = m.results.get("timing") or {}
    median, p10, p90 = (timing.get(k) for k in ("median_s", "p10_s", "p90_s"))
    if not median or p10 is None or p90 is None:
        return 0.0
    return (p90 - p10) / median


def candidates(ledger: Ledger, device_key: str, t: Training, *, exclude_ids: Iterable[int] = (),
               max_size_ratio: float = 4.0) -> list[tuple[float, Measurement, Training]]:
    """Matching measurements with their distance, nearest first (newest first on a tie)."""
    excluded = set(exclude_ids)
    out = []
    for m in ledger.measurements(device_key=device_key, status="ok"):
        if m.id in excluded or m.kind != "bench" or m.setup.get("compiled"):
            continue
        if not m.step_time_median_s or not m.tokens_per_s:
            continue
        tm = training_of(m)
        if tm is None or tm.method != t.method or tm.checkpointing != t.checkpointing:
            continue
        if MATMUL_DTYPE[tm.precision] != MATMUL_DTYPE[t.precision]:
            continue
        d = _distance(t.arch, t, tm.arch, tm, max_size_ratio)
        if d is not None:
            out.append((d + _spread(m), m, tm))
    out.sort(key=lambda c: (c[0], -c[1].id))
    return out


@dataclass(frozen=True)
class HostCalibration:
    """The host's cost per eager operator, measured: a host-led step of the ledger."""

    host_us_per_op: float
    basis: str
    ledger_id: int
    host_share: float

    def estimator_kwargs(self) -> dict[str, Any]:
        return {"host_us_per_op": self.host_us_per_op, "host_basis": self.basis}


def host_us_per_op_of(m: Measurement, tm: Training, hw: Hardware) -> tuple[float, float] | None:
    """(host us per operator, host share of the step) that a measured step implies, or None
    when the setup is not host-led by the estimate, or its host was not the larger part (a
    GPU-led step hides the host: it says nothing).

    The estimate's GPU work G and optimizer time of the measured setup are taken as they are;
    the rest of the measured median is (H^p + G^p)^(1/p), solved for H, over the operators
    bench counted (or, for older rows, the estimator's count) less the optimizer's."""
    from gpuhours.estimate import assumptions as A
    from gpuhours.estimate.timing import host_ops_per_micro_batch, optimizer_ops

    if m.device_kind == "cpu" or not m.step_time_median_s:
        return None
    e = estimate_training(tm, hw.model_copy(update={"num_gpus": 1, "host_us_per_op": None}),
                          "calibration")
    parts = {k: v.value for k, v in e.step_time_breakdown_s.items()}
    # one step cannot tell a slow host from a slow GPU: only a setup whose step the estimate
    # itself calls host-led (a micro-batch too small to hide the host) measures the host
    if parts["host_exposed_s"] <= HOST_LED_FRACTION * e.step_time_s.value:
        return None
    gpu = parts["matmul_s"] + parts["attention_s"] + parts["memory_bound_s"]
    rest = m.step_time_median_s - parts["optimizer_s"] - parts["communication_exposed_s"]
    if rest <= gpu * 1.05:
        return None
    p = A.HOST_GPU_OVERLAP_P.value
    host_s = (rest ** p - gpu ** p) ** (1 / p)
    if host_s < gpu:
        return None
    counted = m.results.get("operators_per_step")
    ops = (counted - optimizer_ops(tm.arch, tm) if isinstance(counted, int) and counted > 0
           else tm.grad_accum * host_ops_per_micro_batch(tm.arch, tm))
    return host_s / ops * 1e6, (rest - gpu) / m.step_time_median_s


def find_host_calibration(ledger: Ledger, hw: Hardware, *, device_key: str | None = None,
                          exclude_ids: Iterable[int] = ()) -> HostCalibration | None:
    """The host's cost per operator on this device from its most host-led bench measurement
    (the host's time best isolated), or None when no measurement there was host-led."""
    key = device_key or hw.gpu.name
    excluded = set(exclude_ids)
    best: tuple[float, float, Measurement, Training] | None = None
    for m in ledger.measurements(device_key=key, status="ok"):
        if m.id in excluded or m.kind != "bench" or m.setup.get("compiled"):
            continue
        tm = training_of(m)
        if tm is None:
            continue
        found = host_us_per_op_of(m, tm, hw)
        if found is not None and (best is None or found[1] > best[1]):
            best = (*found, m, tm)
    if best is None:
        return None
    us, share, m, tm = best
    assert m.step_time_median_s is not None  # host_us_per_op_of needs it
    counted = m.results.get("operators_per_step")
    ops_text = (f"{counted:,} operators counted" if isinstance(counted, int)
                else "operators as the estimator counts them")
    basis = (f"measured: ledger #{m.id}, {m.device_name}, {m.created_utc[:10]}: {m.model_label} "
             f"{tm.method} batch {tm.micro_batch} x seq {tm.seq_len}, median "
             f"{m.step_time_median_s * 1e3:.1f} ms, host-led ({share:.0%} of the step beyond "
             f"the GPU's work), {ops_text}: {us:.1f} us per operator")
    return HostCalibration(host_us_per_op=us, basis=basis, ledger_id=m.id, host_share=share)


def find_calibration(ledger: Ledger, hw: Hardware, t: Training, *, device_key: str | None = None,
                     exclude_ids: Iterable[int] = (), max_size_ratio: float = 4.0
                     ) -> Calibration | None:
    """The calibration for setup `t` on `hw` from the nearest matching measurement, or None.

    `device_key` defaults to the catalog name of `hw.gpu` (for a CPU: 'cpu-<model>-<threads>t',
    the name `measured_device` gives its spec). The measurement is re-estimated on the same `hw`,
    so the scale is relative to the same peaks the target estimate uses."""
    key = device_key or hw.gpu.name
    host = (find_host_calibration(ledger, hw, device_key=key, exclude_ids=exclude_ids)
            if hw.host_us_per_op is None else None)
    if host is not None:  # the efficiency is solved beside the host the ledger measured
        hw = hw.model_copy(update={"host_us_per_op": host.host_us_per_op})
    for _, m, tm in candidates(ledger, key, t, exclude_ids=exclude_ids,
                               max_size_ratio=max_size_ratio):
        assert m.step_time_median_s is not None and m.tokens_per_s is not None
        hw_m = hw.model_copy(update={"num_gpus": 1})
        scale = efficiency_scale_for(tm, hw_m, m.step_time_median_s)
        if scale is None:
            continue
        analytic = estimate_training(tm, hw_m, "calibration").tokens_per_s_per_gpu.value
        timing = m.results.get("timing", {})
        spread = m.results.get("tokens_per_s_range") or [None, None]
        spread_text = (f", p10-p90 {spread[0]:,.0f}-{spread[1]:,.0f}" if spread[0] else "")
        basis = (f"calibrated: ledger #{m.id}, {m.device_name}, {m.created_utc[:10]}: "
                 f"{m.model_label} {tm.method} {tm.precision} batch {tm.micro_batch} x seq "
                 f"{tm.seq_len}{' checkpointing' if tm.checkpointing else ''} measured "
                 f"{m.tokens_per_s:,.0f} tokens/s (median of {timing.get('n_steps', '?')} steps"
                 f"{spread_text}) vs {analytic:,.0f} analytic: efficiency x{scale:.3g}")
        return Calibration(efficiency_scale=scale, basis=basis, ledger_id=m.id,
                           device_name=m.device_name, measured_utc=m.created_utc,
                           measured_tokens_per_s=m.tokens_per_s, analytic_tokens_per_s=analytic)
    return None


def calibration_kwargs(ledger: Ledger, hw: Hardware, t: Training,
                       used: list[tuple[int, str]] | None = None) -> dict[str, Any]:
    """estimate_training's keyword arguments from the ledger: the host's measured cost per
    operator (when the device has a host-led measurement and `hw` gives none) and the nearest
    matching measurement's efficiency (solved beside that host); empty when neither exists.

    `used`, when given, gets (ledger id, what it set) for each measurement that set a figure:
    the budget document lists them as its micro-benchmarks."""
    out: dict[str, Any] = {}
    if hw.host_us_per_op is None:
        host = find_host_calibration(ledger, hw)
        if host is not None:
            out.update(host.estimator_kwargs())
            if used is not None:
                used.append((host.ledger_id, "the host's cost per operator"))
            # the efficiency is solved beside this host (find_calibration need not look again)
            hw = hw.model_copy(update={"host_us_per_op": host.host_us_per_op})
    cal = find_calibration(ledger, hw, t)
    if cal is not None:
        out.update(cal.estimator_kwargs())
        if used is not None:
            used.append((cal.ledger_id, f"the GPU's efficiency (x{cal.efficiency_scale:.3g})"))
    return out


def calibrated_estimate(t: Training, hw: Hardware, model_basis: str, ledger: Ledger, *,
                        device_key: str | None = None, exclude_ids: Iterable[int] = (),
                        **amount: Any) -> tuple[TrainingEstimate, TrainingEstimate | None,
                                                Calibration | None]:
    """(analytic estimate, calibrated estimate or None, calibration or None): both estimates, so
    that a report can show the analytic figures beside the calibrated ones."""
    analytic = estimate_training(t, hw, model_basis, **amount)
    cal = find_calibration(ledger, hw, t, device_key=device_key, exclude_ids=exclude_ids)
    if cal is None:
        return analytic, None, None
    return analytic, estimate_training(t, hw, model_basis, **amount, **cal.estimator_kwargs()), cal


def measured_device(ledger: Ledger, device_key: str) -> GpuSpec:
    """The accelerator spec of a device without a catalog row (a CPU, an Apple GPU), from its
    newest probes in the ledger: matmul FLOP/s per dtype as the dense peaks, the copy probe as the
    memory bandwidth, the host's RAM as its memory. Every figure is measured; the source names
    the probes."""
    matmul = {}
    for p in ledger.probes(device_key=device_key, probe="matmul"):
        key = _PROBE_DTYPE.get(p.dtype or "")
        if key and key not in matmul:
            matmul[key] = p
    copies = ledger.probes(device_key=device_key, probe="copy")
    if not matmul or not copies:
        missing = "matmul probe" if not matmul else "copy (bandwidth) probe"
        raise FieldError("gpu", f"the ledger {ledger.path} has no {missing} of {device_key!r}.",
                         f"Run `gpuhours bench --device {device_key.split('-')[0]}` on that "
                         "machine first.")
    copy = copies[0]
    memory = copy.details.get("device_memory_bytes") or 0
    used = sorted([*matmul.values(), copy], key=lambda p: p.id)
    first = used[0]
    data: dict[str, Any] = dict(
        name=device_key, aliases=[], full_name=first.device_name,
        vendor="other", generation="cpu",
        memory_gb=memory / 1e9 if memory else 1e3,
        memory_bw_gb_per_s=copy.value / 1e9,
        dense_tflops=DenseTflops(**{k: p.value / 1e12 for k, p in matmul.items()}),
        interconnect="none",
        source="measured: " + ", ".join(f"ledger probe #{p.id} ({p.probe} {p.dtype or ''} "
                                        f"{p.value:.3g} {p.unit}, {p.created_utc[:10]})".replace(
                                            "  ", " ") for p in used),
        as_of=max(p.created_utc for p in used)[:10],
        notes="a device measured by gpuhours bench probes, not a catalog row"
              + ("" if memory else "; memory unknown (1000 GB assumed)"),
    )
    return GpuSpec.model_validate(data)


@dataclass(frozen=True)
class GenerationCalibration:
    """A measured HF generate decode step: the engine's host costs scaled to match it."""

    host_scale: float
    basis: str
    ledger_id: int


def find_generation_calibration(ledger: Ledger, gpu: GpuSpec, g: Any
                                ) -> GenerationCalibration | None:
    """The host scale at which the hf-generate estimate reproduces the measured decode step of
    the nearest (by parameter count) `bench --workload generate` row on `gpu`; None when there
    is none, or its step is no longer than the GPU's work alone (it says nothing of the host).
    The host's cost does not depend on the model's size per operator, so the scale carries to
    other models and batches on the same machine."""
    from gpuhours.estimate.generation import estimate_generation
    from gpuhours.setup import Generation

    if g.engine != "hf-generate":
        return None
    archs: dict[int, tuple[Measurement, ModelArch]] = {}
    for m in ledger.measurements(device_key=gpu.name, status="ok"):
        if m.kind == "generate" and m.model_config and m.step_time_median_s:
            try:
                archs[m.id] = (m, from_hf_config(m.model_config, name=m.model,
                                                 where=f"ledger #{m.id}"))
            except InputError:
                continue  # a model type the estimator refuses
    if not archs:
        return None
    target = count_params(g.arch).total
    m, arch = min(archs.values(), key=lambda ma: (
        abs(math.log(count_params(ma[1]).total / target)), -ma[0].id))
    s = m.setup
    measured = Generation(arch=arch, batch=s["batch"], prompt_tokens=s["prompt_tokens"],
                          output_tokens=s["output_tokens"], engine="hf-generate")
    assert m.step_time_median_s is not None

    def step_s(scale: float) -> float:
        e = estimate_generation(measured, gpu, host_scale=scale)
        return e.decode_s / max(1, measured.output_tokens)

    lo, hi = 1e-3, 1e3
    if step_s(lo) >= m.step_time_median_s or step_s(hi) <= m.step_time_median_s:
        return None
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        if step_s(mid) < m.step_time_median_s:
            lo = mid
        else:
            hi = mid
    scale = math.sqrt(lo * hi)
    basis = (f"calibrated: ledger #{m.id}, {m.device_name}, {m.created_utc[:10]}: {m.model_label} HF "
             f"generate batch {s['batch']}, {s['prompt_tokens']} + {s['output_tokens']} "
             f"tokens, decode step {m.step_time_median_s * 1e3:.1f} ms measured: engine host "
             f"costs x{scale:.3g}")
    return GenerationCalibration(host_scale=scale, basis=basis, ledger_id=m.id)


#: the parts of a GRPO step a `bench --workload grpo` row calibrates, as the plan's rl phase
#: names them; the reward is a rule on this machine (its time is Python's) and is not carried
GRPO_PARTS = ("rollout generation", "old-policy log-probs", "reference model", "policy update")


@dataclass(frozen=True)
class GrpoCalibration:
    """A measured GRPO step: each part's measured time over the physics' time for that step."""

    #: measured / predicted, by part (GRPO_PARTS)
    scales: dict[str, float]
    basis: str
    ledger_id: int
    #: the engine the rollout ran on: its scale carries only to rollouts on the same engine
    engine: str


def grpo_parts_s(t: Training, hw: Hardware, sequences: int, prompt_tokens: int,
                 response_tokens: int, engine: str = "hf-generate",
                 update_tokens_per_s: float | None = None) -> dict[str, float]:
    """The physics' time of each part of one colocated GRPO step on one device, as the plan's
    rl phase computes it for a step whose rollouts fit in one wave: `sequences` responses of
    `response_tokens` to prompts of `prompt_tokens` generated in one batch (the longer of the
    batch and of one sequence alone); the old policy and the reference scoring each sequence
    once (one forward, gpuhours.estimate.generation.scoring_time_s); the update at the
    training estimate's tokens/s (or `update_tokens_per_s`, a calibrated one). Seconds."""
    from gpuhours.estimate.generation import (
        estimate_generation,
        rollout_precision,
        scoring_time_s,
    )
    from gpuhours.setup import Generation

    seq = prompt_tokens + response_tokens
    matmul = rollout_precision(hw.gpu, t.precision)
    g = Generation(arch=t.arch, prompt_tokens=prompt_tokens, output_tokens=response_tokens,
                   engine=engine, batch=sequences)  # type: ignore[arg-type]
    work = estimate_generation(g, hw.gpu, matmul).batch_time_s
    alone = estimate_generation(g.model_copy(update={"batch": 1}), hw.gpu, matmul).batch_time_s
    score = scoring_time_s(t.arch, sequences, seq, hw.gpu, matmul) / hw.num_gpus
    if update_tokens_per_s is None:
        update_tokens_per_s = estimate_training(t.model_copy(update={"seq_len": seq}), hw,
                                                "calibration").tokens_per_s.value
    return {"rollout generation": max(work, alone), "old-policy log-probs": score,
            "reference model": score, "policy update": sequences * seq / update_tokens_per_s}


def find_grpo_calibration(ledger: Ledger, hw: Hardware, t: Training, *,
                          max_size_ratio: float = 4.0) -> GrpoCalibration | None:
    """The nearest `bench --workload grpo` row on `hw`'s device with `t`'s method and matmul
    dtype and a comparable model (as for training calibration: hidden size within 2x,
    parameters within `max_size_ratio`), as part scales; None when there is none.

    The predicted parts of the measured step use the same physics as the plan (`grpo_parts_s`,
    with the update at the ledger's training calibration when there is one, so that a scale
    is not applied twice): on the measured step itself the calibrated parts are the measured
    ones, and on a larger step on the same machine the physics carries what differs."""
    best: tuple[float, Measurement, Training] | None = None
    for m in ledger.measurements(device_key=hw.gpu.name, status="ok"):
        if m.kind != "grpo" or not m.model_config:
            continue
        s = m.setup
        tm = training_of(m)
        if tm is None or tm.method != t.method:
            continue
        if MATMUL_DTYPE[tm.precision] != MATMUL_DTYPE[t.precision]:
            continue
        seq = s["prompt_tokens"] + s["response_tokens"]
        # the measured update is one optimizer step over all the step's sequences in
        # micro-batches (bench/grpo.py, step 5), as the plan's rl phase now counts it (walk F10)
        tm = tm.model_copy(update={"seq_len": seq, "grad_accum": max(1, -(
            -s["prompts"] * s["generations"] // tm.micro_batch))})
        d = _distance(t.arch, t.model_copy(update={"seq_len": seq}), tm.arch, tm, max_size_ratio)
        if d is not None and (best is None or (d, -m.id) < (best[0], -best[1].id)):
            best = (d, m, tm)
    if best is None:
        return None
    _, m, tm = best
    s, measured = m.setup, m.results.get("parts_s") or {}
    hw1 = hw.model_copy(update={"num_gpus": 1})
    kwargs = calibration_kwargs(ledger, hw1, tm)
    update_rate = (estimate_training(tm, hw1, "calibration", **kwargs).tokens_per_s.value
                   if kwargs else None)
    predicted = grpo_parts_s(tm, hw1, s["prompts"] * s["generations"], s["prompt_tokens"],
                             s["response_tokens"], update_tokens_per_s=update_rate)
    scales = {part: measured[part] / predicted[part] for part in GRPO_PARTS
              if measured.get(part) and predicted[part] > 0}
    if not scales:
        return None
    shown = ", ".join(f"{part} x{scale:.3g}" for part, scale in scales.items())
    basis = (f"calibrated: ledger #{m.id}, {m.device_name}, {m.created_utc[:10]}: one GRPO "
             f"step of {m.model_label} {tm.method} ({s['prompts']} prompts x {s['generations']}, "
             f"{s['prompt_tokens']} + {s['response_tokens']} tokens, HF generate) measured "
             f"{m.step_time_median_s or 0:.3g} s; measured / physics: {shown}")
    return GrpoCalibration(scales=scales, basis=basis, ledger_id=m.id, engine="hf-generate")
