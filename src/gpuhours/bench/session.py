"""Benchmark catalog-model setups on this machine and keep each in the ledger: one setup or a
sweep, a configuration that runs out of memory recorded as "does not fit"."""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuhours.bench.config import BenchSetup, StopRule
from gpuhours.bench.device import DeviceBackend
from gpuhours.bench.runner import BenchResult
from gpuhours.track.ledger import Ledger


@dataclass
class Outcome:
    """One configuration's fate: 'ok' with a result, 'does-not-fit', or 'failed' with why."""

    setup: BenchSetup
    status: str
    result: BenchResult | None = None
    ledger_id: int | None = None
    error: str | None = None


def is_out_of_memory(exc: BaseException) -> bool:
    """torch.OutOfMemoryError (CUDA, MPS), MemoryError (Python), or a CPU allocator failure."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and (
        "out of memory" in text.lower() or "DefaultCPUAllocator: can't allocate memory" in text
        or "MPS backend out of memory" in text)


def free_device_memory(backend: DeviceBackend) -> None:
    gc.collect()
    if backend.kind == "cuda":
        import torch

        torch.cuda.empty_cache()


def bench_setup(
    setup: BenchSetup,
    backend: DeviceBackend,
    rule: StopRule,
    environment: dict[str, Any],
    *,
    ledger: Ledger | None,
    peak_tflops: float | None = None,
    refresh_probe: bool = False,
    profile_to: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> Outcome:
    """Build the setup's model, measure it, store the outcome in the ledger (when given).

    Running out of memory is an outcome ('does-not-fit'), not an error."""
    from gpuhours.bench.model import model_config
    from gpuhours.bench.peak import resolve_peak

    cfg, arch, basis = model_config(setup)  # bad input fails here, before anything is stored
    peak = resolve_peak(backend, setup.training.precision, ledger, environment, peak_tflops,
                        refresh_probe)
    probe_ids = [peak.probe_id] if peak.probe_id is not None else []
    if ledger is not None and backend.catalog_gpu is None:
        # the bandwidth of a device without a catalog row, for its analytic estimate
        from gpuhours.bench.peak import probed
        from gpuhours.track.ledger import Probe

        copy = probed(ledger, backend, "copy", None, environment, refresh_probe)
        assert isinstance(copy, Probe)  # with a ledger, a probe is always stored
        probe_ids.append(copy.id)
    full_setup = {**setup.record(), "model_basis": basis}
    try:
        result = _build_and_measure(setup, backend, rule, environment, peak, full_setup,
                                    profile_to, progress)
    except Exception as e:
        if not is_out_of_memory(e):
            raise
        lines = str(e).strip().splitlines()
        outcome = Outcome(setup=setup, status="does-not-fit",
                          error=f"{type(e).__name__}: {lines[0][:300] if lines else '(no message)'}")
    else:
        outcome = Outcome(setup=setup, status="ok", result=result)
    # here the model, its optimizer and (after an OOM) the exception's frames are unreferenced:
    # release their memory before the next configuration of a sweep is built
    free_device_memory(backend)
    if ledger is not None:
        results = (outcome.result.ledger_results() if outcome.result is not None
                   else {"error": outcome.error})
        outcome.ledger_id = ledger.add_measurement(
            kind="bench", status=outcome.status, device_kind=backend.kind,
            device_key=backend.key, device_name=backend.name, model=arch.name, setup=full_setup,
            model_config=cfg, environment=environment, results=results, probe_ids=probe_ids)
    return outcome


def _build_and_measure(setup: BenchSetup, backend: DeviceBackend, rule: StopRule,
                       environment: dict[str, Any], peak: Any, full_setup: dict[str, Any],
                       profile_to: Path | None, progress: Callable[[str], None] | None
                       ) -> BenchResult:
    """Build, train and measure; everything it allocates is local to this call."""
    from gpuhours.bench import model as bench_model
    from gpuhours.bench.runner import Trainer, make_optimizer, measure

    built = bench_model.build(setup, backend.torch_device)
    full_setup.update(attention=built.attention, total_params=built.total_params,
                      trainable_params=built.trainable_params)
    params = [p for p in built.model.parameters() if p.requires_grad]
    optimizer = make_optimizer(params, setup.training.optimizer, setup.training.optimizer_impl,
                               setup.learning_rate)

    def loss_fn(model: Any, batch: Any) -> Any:
        return model(**batch).loss

    eager = Trainer(built.model, optimizer, built.make_batch, loss_fn, backend,
                    setup.training.precision, setup.training.grad_accum)
    timed = eager
    if setup.compiled:
        import torch

        timed = Trainer(torch.compile(built.model), optimizer, built.make_batch, loss_fn,
                        backend, setup.training.precision, setup.training.grad_accum)
    result = measure(timed, backend, setup=full_setup, rule=rule, peak=peak,
                     environment=environment, counting_trainer=eager,
                     set_checkpointing=built.set_checkpointing,
                     checkpointing=setup.training.checkpointing, profile_to=profile_to,
                     progress=progress)
    if setup.compiled:
        result = result.model_copy(update={"warnings": [
            *result.warnings, "compiled: FLOPs and the memory split were counted on the "
            "eager model (the compiled graph may keep fewer tensors)"]})
    return result
