"""The peak a benchmark's MFU is measured against, and the probes that measure a device's rates.

- A GPU found in the catalog: its datasheet dense peak for the step's matmul precision (catalog).
- Anything else (a CPU, an Apple GPU, a GPU not in the catalog): a short matmul probe, n x n
  by n x n in the step's matmul dtype, timed over several repetitions; the median rate is the
  peak, labelled measured, and kept in the ledger as a device probe (with its spread) so that
  later runs and estimates use the same figure.
- A copy probe (bytes read + written per second by `y.copy_(x)`) measures memory bandwidth, for
  the analytic estimate of a device that has no catalog row.
"""

from __future__ import annotations

import statistics
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict

from gpuhours.bench.device import DeviceBackend
from gpuhours.track.ledger import Ledger, Probe

#: the dtype whose matmul rate bounds each precision's step
MATMUL_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "bf16-amp": "bfloat16",
                "fp16-amp": "float16"}
#: a probe younger than this, of the same device and torch version, is reused from the ledger
PROBE_REUSE = timedelta(days=7)


class PeakRate(BaseModel):
    """FLOP/s that MFU is relative to, and where the figure came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    flops_per_s: float
    basis: str          # 'catalog', 'measured' or 'input'
    source: str
    probe_id: int | None = None


class ProbeResult(BaseModel):
    """One probe's repetitions: value = median rate; min and max of the repetitions."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    probe: str
    dtype: str | None
    value: float
    unit: str
    min_value: float
    max_value: float
    reps: int
    size: int


def matmul_probe(backend: DeviceBackend, dtype: str, n: int | None = None,
                 reps: int = 8) -> ProbeResult:
    """Median FLOP/s of an n x n @ n x n matmul in `dtype` (2 n^3 FLOPs each) on the device.

    On a CPU the size is 2048 unless one such matmul would take over PROBE_MATMUL_MAX_S (bf16
    on a CPU without AVX-512 is emulated, ~100x slower): then the largest power of two down to
    256 that does not, from a 256 x 256 trial. The size is in the result and the source."""
    import torch

    dt = getattr(torch, dtype)
    if n is None and backend.kind == "cpu":
        n = _cpu_matmul_size(torch, dt)
    n = n or 8192
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(device=backend.torch_device, dtype=dt)
    b = torch.randn(n, n, generator=gen).to(device=backend.torch_device, dtype=dt)
    rates = _timed(backend, lambda: torch.mm(a, b), 2.0 * n**3, reps)
    return _result("matmul", dtype, "flop/s", rates, n)


#: longest a single probe matmul may take on a CPU, s (assumption: keeps a probe of 2 warm-up
#: and 8 timed matmuls under ~10 s; each matmul still runs for much longer than its launch)
PROBE_MATMUL_MAX_S = 1.0


def _cpu_matmul_size(torch: Any, dt: Any) -> int:
    """The CPU probe's size: 2048, or less where one matmul would take over PROBE_MATMUL_MAX_S."""
    trial = torch.ones(256, 256, dtype=dt)
    torch.mm(trial, trial)  # thread pools, kernel selection
    t0 = time.perf_counter()
    torch.mm(trial, trial)
    rate = 2.0 * 256**3 / max(time.perf_counter() - t0, 1e-9)
    n = 2048
    while n > 256 and 2.0 * n**3 / rate > PROBE_MATMUL_MAX_S:
        n //= 2
    return n


def copy_probe(backend: DeviceBackend, mib: int = 256, reps: int = 8) -> ProbeResult:
    """Median bytes/s of `y.copy_(x)` over `mib` MiB (read + written: 2 x size per copy)."""
    import torch

    numel = mib * 2**20 // 4
    x = torch.ones(numel, dtype=torch.float32, device=backend.torch_device)
    y = torch.empty_like(x)
    rates = _timed(backend, lambda: y.copy_(x), 2.0 * numel * 4, reps)
    return _result("copy", None, "bytes/s", rates, mib * 2**20)


def _timed(backend: DeviceBackend, op: Any, work: float, reps: int) -> list[float]:
    for _ in range(2):  # warm-up: thread pools, caches, kernel selection
        op()
    backend.synchronize()
    rates = []
    for _ in range(reps):
        t0 = time.perf_counter()
        op()
        backend.synchronize()
        rates.append(work / (time.perf_counter() - t0))
    return rates


def _result(probe: str, dtype: str | None, unit: str, rates: list[float], size: int) -> ProbeResult:
    return ProbeResult(probe=probe, dtype=dtype, value=statistics.median(rates), unit=unit,
                       min_value=min(rates), max_value=max(rates), reps=len(rates), size=size)


def probe_source(p: Probe) -> str:
    d = p.details
    what = (f"{d.get('size')}x{d.get('size')} {p.dtype} matmul" if p.probe == "matmul"
            else f"copy of {int(d.get('size', 0)) // 2**20} MiB")
    return (f"measured: ledger probe #{p.id}, {what} on {p.device_name}, median of "
            f"{d.get('reps')} repetitions (range {d.get('min_value', 0):.3g}-"
            f"{d.get('max_value', 0):.3g} {p.unit}), {p.created_utc[:10]}")


def probed(ledger: Ledger | None, backend: DeviceBackend, probe: str, dtype: str | None,
           environment: dict[str, Any], refresh: bool = False) -> Probe | ProbeResult:
    """A recent matching probe from the ledger, or a new one (stored when there is a ledger)."""
    if ledger is not None and not refresh:
        for p in ledger.probes(device_key=backend.key, probe=probe, dtype=dtype):
            age = datetime.now(timezone.utc) - datetime.fromisoformat(p.created_utc)
            if age < PROBE_REUSE and p.details.get("torch") == environment.get("torch"):
                return p
            break
    result = matmul_probe(backend, dtype or "float32") if probe == "matmul" else copy_probe(backend)
    if ledger is None:
        return result
    probe_id = ledger.add_probe(
        device_kind=backend.kind, device_key=backend.key, device_name=backend.name,
        hostname=str(environment.get("hostname", "")), probe=probe, dtype=dtype,
        value=result.value, unit=result.unit,
        details={**result.model_dump(), "torch": environment.get("torch"),
                 "torch_threads": environment.get("torch_threads"),
                 "device_memory_bytes": (environment.get("device_total_memory_bytes")
                                         if backend.kind == "cuda"
                                         else environment.get("ram_bytes"))})
    return ledger.probe(probe_id)


def resolve_peak(backend: DeviceBackend, precision: str, ledger: Ledger | None,
                 environment: dict[str, Any], given_tflops: float | None = None,
                 refresh: bool = False) -> PeakRate:
    """The peak FLOP/s for MFU: given by the user, else the catalog's for a catalog GPU, else a
    matmul probe of this device (measured)."""
    if given_tflops is not None:
        return PeakRate(flops_per_s=given_tflops * 1e12, basis="input",
                        source=f"--peak-tflops {given_tflops:g} given by the user")
    if backend.catalog_gpu is not None:
        from gpuhours import catalog
        from gpuhours.estimate.timing import peak_flops

        spec = catalog.gpu(backend.catalog_gpu)
        value = peak_flops(spec, precision)
        return PeakRate(flops_per_s=value, basis="catalog",
                        source=f"catalog: {spec.name} dense {precision} peak {value / 1e12:g} "
                               f"TFLOPS ({spec.source})")
    dtype = MATMUL_DTYPE[precision]
    p = probed(ledger, backend, "matmul", dtype, environment, refresh)
    if isinstance(p, Probe):
        return PeakRate(flops_per_s=p.value, basis="measured", source=probe_source(p),
                        probe_id=p.id)
    return PeakRate(flops_per_s=p.value, basis="measured",
                    source=f"measured: {p.size}x{p.size} {dtype} matmul on {backend.name}, median "
                           f"of {p.reps} (range {p.min_value:.3g}-{p.max_value:.3g} flop/s); "
                           "not stored (no ledger)")
