"""A step measured on one device carried to another through the roofline (issue 17).

Same-device calibration (track/calibration.py) solves the compute efficiency of the device that
ran the benchmark. Across devices that efficiency does not carry: an RTX 4090's GEMMs say little
about an H100's. What does carry is the measured step itself, split as the physics splits it:

- on the measured device A, the estimate of the measured setup has a compute-bound part C_A
  (matmuls, attention), a memory-bound part M_A (elementwise work and the optimizer's traffic)
  and, on a GPU, the host's time beside them and the exposed communication. The ratio r is
  the factor on C_A + M_A at which that estimate gives the measured step;
- on the target device B the compute-bound part of the target setup is C_B x r_c and the
  memory-bound part M_B x r_m, combined with B's own host time as the estimator combines them
  (assumptions.HOST_GPU_OVERLAP_P) plus B's exposed communication.

Which of the two parts the residual belongs to one measurement cannot tell. The central figure
takes it as proportional (r_c = r_m = r); the range puts all of it in the compute part (r_m = 1)
or all of it in the memory part (r_c = 1). A wide range says the two devices' balance of
FLOP/s to bandwidth differs much, and the measurement decides little: measure on B.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuhours.errors import FieldError, InputError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.estimator import TrainingEstimate, estimate_training
from gpuhours.setup import Hardware, Training


@dataclass(frozen=True)
class Transfer:
    """A measured step carried to another device: seconds per optimizer step on one GPU."""

    step_s: float
    low_s: float
    high_s: float
    #: measured device work / its estimate: how far the measured device ran from the physics
    residual: float
    analytic_step_s: float
    tokens_per_s_per_gpu: float
    basis: str
    ledger_id: int | None

    def as_json(self) -> dict[str, Any]:
        """The figures as the rest of the JSON output gives them: value, unit, basis, source
        (a measured step carried by formula: basis 'formula', the measurement in the source)."""
        from gpuhours.estimate.figures import formula

        rng = "the range of the residual's attribution (module doc)"
        figures = {
            "step_time_s": formula(self.step_s, "s", self.basis),
            "step_time_low_s": formula(self.low_s, "s", rng),
            "step_time_high_s": formula(self.high_s, "s", rng),
            "tokens_per_s_per_gpu": formula(self.tokens_per_s_per_gpu, "tokens/s",
                                            "tokens per step per GPU / transferred step time"),
            "residual": formula(self.residual, "ratio", "measured step / the physics of the "
                                "measuring device's work, for the measured setup"),
            "analytic_step_time_s": formula(self.analytic_step_s, "s",
                                            "the estimate of this setup, not transferred")}
        return {"ledger_id": self.ledger_id,
                **{k: v.model_dump(mode="json") for k, v in figures.items()}}


def _parts(e: TrainingEstimate) -> tuple[float, float, float, float, float]:
    """(compute-bound, memory-bound elementwise, optimizer, host seconds issued, exposed
    communication) of an estimate's step."""
    b = {k: v.value for k, v in e.step_time_breakdown_s.items()}
    return (b["matmul_s"] + b["attention_s"], b["memory_bound_s"], b["optimizer_s"],
            b["host_s"], b["communication_exposed_s"])


def _step_s(e: TrainingEstimate, r_compute: float, r_memory: float) -> float:
    """The step of estimate `e` with its compute-bound part x r_compute and its memory-bound
    parts x r_memory, the host combined as the estimator combines it (timing.py)."""
    compute, memory, optimizer, host, comm = _parts(e)
    gpu = r_compute * compute + r_memory * memory
    if host > 0:
        p = A.HOST_GPU_OVERLAP_P.value
        gpu = (host ** p + gpu ** p) ** (1 / p)
    return gpu + r_memory * optimizer + comm


def _solve(step_of_ratio: object, measured_s: float) -> float | None:
    """The ratio at which `step_of_ratio(ratio)` (increasing) gives `measured_s`, by geometric
    bisection over [1e-4, 1e4]; None when no ratio there does."""
    f = step_of_ratio
    lo, hi = 1e-4, 1e4
    if not f(lo) <= measured_s <= f(hi):  # type: ignore[operator]
        return None
    for _ in range(100):
        mid = (lo * hi) ** 0.5
        if f(mid) < measured_s:  # type: ignore[operator]
            lo = mid
        else:
            hi = mid
    return (lo * hi) ** 0.5


def transfer_step(measured_step_s: float, measured: Training, on: Hardware, target: Training,
                  to: Hardware, *, source: str = "a measured step",
                  ledger_id: int | None = None) -> Transfer:
    """Carry `measured_step_s` of setup `measured` on `on` (one device) to setup `target` on
    `to` (see the module doc). The ratios are solved so that the measured setup's own estimate,
    so scaled, gives the measured step (the host's overlap included): carried to the same device
    and setup, every attribution gives the measurement back. Raises ValueError for a step that
    is not positive or that no ratio reproduces."""
    if not measured_step_s > 0:
        raise ValueError(f"the measured step must be positive, got {measured_step_s!r}")
    a = estimate_training(measured, on.model_copy(update={"num_gpus": 1}), "transfer")
    b = estimate_training(target, to, "transfer")
    r = _solve(lambda x: _step_s(a, x, x), measured_step_s)
    if r is None:
        raise ValueError(f"{measured_step_s:.4g} s is outside what scaling the device's work "
                         f"can give ({_step_s(a, 1e-4, 1e-4):.4g} s and up)")
    attributions = [(r, r)]
    r_c = _solve(lambda x: _step_s(a, x, 1.0), measured_step_s)
    if r_c is not None:  # the whole residual in the compute part
        attributions.append((r_c, 1.0))
    r_m = _solve(lambda x: _step_s(a, 1.0, x), measured_step_s)
    if r_m is not None:  # the whole residual in the memory part
        attributions.append((1.0, r_m))
    steps = [_step_s(b, rc, rm) for rc, rm in attributions]
    central = steps[0]
    compute_a, memory_a, optimizer_a, host_a, _ = _parts(a)
    tokens = target.tokens_per_micro_batch * target.grad_accum
    basis = (f"transferred: {source} ({measured_step_s:.4g} s, {r:.3g}x the physics of that "
             f"device's work: compute {compute_a:.3g} s + memory-bound "
             f"{memory_a + optimizer_a:.3g} s" + (f", host {host_a:.3g} s beside it"
                                                  if host_a else "")
             + f") carried to {to.gpu.name} by its own roofline; range: the residual all in "
               f"the compute part or all in the memory-bound part (where the residual sits, "
               f"not a confidence interval: 1- to 2-thread CPU transfers were within 13% for "
               f"the same setup, 28% for another; docs/bench.md)")
    return Transfer(step_s=central, low_s=min(steps), high_s=max(steps), residual=r,
                    analytic_step_s=b.step_time_s.value, tokens_per_s_per_gpu=tokens / central,
                    basis=basis, ledger_id=ledger_id)


def transfer_measurement(ledger: Any, measurement_id: int, target: Training, to: Hardware
                         ) -> Transfer:
    """Carry ledger measurement `measurement_id` (a training bench of the same model, on any
    device: a catalog GPU or a machine the ledger measured) to `target` on `to`. Errors name
    the field `transfer_from`."""
    from gpuhours import catalog
    from gpuhours.estimate.params import count_params
    from gpuhours.track.calibration import measured_device, training_of

    try:
        m = ledger.measurement(measurement_id)
    except InputError as err:  # the ledger names its own "ID": here it is the flag's value
        raise FieldError("transfer_from", err.message, err.hint) from None
    measured = training_of(m) if m.kind == "bench" else None
    if measured is None or not m.step_time_median_s:
        raise FieldError("transfer_from", f"ledger #{m.id} is not a training step of a model "
                         f"gpuhours can rebuild (kind {m.kind!r}, model {m.model!r}).",
                         "Give a `gpuhours bench` training measurement: `gpuhours ledger list`.")

    def shape(t: Training) -> tuple[int, int, int, int]:
        return (t.arch.hidden_size, t.arch.num_layers, t.arch.vocab_size,
                count_params(t.arch).total)

    if shape(measured) != shape(target):
        raise FieldError("transfer_from", f"ledger #{m.id} measured {m.model} (hidden "
                         f"{measured.arch.hidden_size}, {measured.arch.num_layers} layers); "
                         f"this setup is {target.arch.name} (hidden {target.arch.hidden_size}, "
                         f"{target.arch.num_layers} layers).",
                         "A transfer carries a step of the same model to another device.")
    try:
        device = catalog.gpu(m.device_key)
    except InputError:
        device = measured_device(ledger, m.device_key)
    source = (f"ledger #{m.id}, {m.model} {measured.method} {measured.precision} batch "
              f"{measured.micro_batch} x seq {measured.seq_len} on {m.device_name} "
              f"({m.device_key}), {m.created_utc[:10]}")
    return transfer_step(m.step_time_median_s, measured, Hardware(gpu=device), target, to,
                         source=source, ledger_id=m.id)
