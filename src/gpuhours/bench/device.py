"""The device a benchmark runs on: detection, naming, synchronisation, phase timers, allocator
statistics and vendor facts (nvml), behind one small interface per kind (CPU, CUDA, MPS).

torch is passed in or imported inside functions: importing this module does not import torch.
The CUDA backend takes the `torch.cuda` module and the `pynvml` module as arguments, so that its
arithmetic (event timing, allocator statistics, catalog matching) can be tested with stand-ins
on a machine without a GPU.
"""

from __future__ import annotations

import contextlib
import platform
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuhours.errors import FieldError, UnknownNameError


def slug(text: str) -> str:
    """Lower case, runs of other characters turned into one hyphen: 'AMD EPYC 9B14' -> 'amd-epyc-9b14'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def catalog_gpu_for(*names: str | None) -> str | None:
    """The catalog name of the first of `names` that is a catalog name or alias, exactly (after
    the catalog's normalisation); never by substring. None when no name matches."""
    from gpuhours import catalog

    for name in names:
        if not name:
            continue
        try:
            return catalog.gpu(name).name
        except UnknownNameError:
            continue
    return None


# --- timers ---------------------------------------------------------------------------------------


class WallTimer:
    """Phase times from time.perf_counter, with an optional synchronisation before each reading
    (MPS: the host waits for the queued GPU work, so that the time lands in the right phase)."""

    def __init__(self, synchronize: Any = None) -> None:
        self._sync = synchronize
        self._phases: dict[str, float] = {}
        if self._sync:
            self._sync()
        self._start = self._last = time.perf_counter()

    def mark(self, phase: str) -> None:
        """The time since the previous mark belongs to `phase` (summed over repeats)."""
        if self._sync:
            self._sync()
        now = time.perf_counter()
        self._phases[phase] = self._phases.get(phase, 0.0) + (now - self._last)
        self._last = now

    def finish(self) -> tuple[float, dict[str, float]]:
        """(step seconds, seconds per phase)."""
        return self._last - self._start, dict(self._phases)


class CudaEventTimer:
    """Phase times from CUDA events recorded on the current stream: no synchronisation between
    phases (the host runs ahead as in real training); one at the end of the step."""

    def __init__(self, cuda: Any) -> None:
        self._cuda = cuda
        self._events: list[tuple[str, Any]] = []
        self._start = cuda.Event(enable_timing=True)
        self._start.record()

    def mark(self, phase: str) -> None:
        event = self._cuda.Event(enable_timing=True)
        event.record()
        self._events.append((phase, event))

    def finish(self) -> tuple[float, dict[str, float]]:
        if not self._events:
            return 0.0, {}
        self._events[-1][1].synchronize()
        phases: dict[str, float] = {}
        previous = self._start
        for phase, event in self._events:
            phases[phase] = phases.get(phase, 0.0) + previous.elapsed_time(event) / 1e3  # ms -> s
            previous = event
        return self._start.elapsed_time(self._events[-1][1]) / 1e3, phases


# --- backends -------------------------------------------------------------------------------------


@dataclass
class AllocatorPeak:
    """The CUDA caching allocator's high-water marks since the last reset, bytes."""

    allocated_bytes: int
    reserved_bytes: int
    alloc_retries: int


@dataclass
class DeviceBackend:
    """What the runner needs of a device. `key` identifies the device for calibration: the
    catalog name of a GPU, or 'cpu-<model>-<threads>t' for a CPU."""

    kind: str
    torch_device: str
    name: str
    key: str
    catalog_gpu: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)

    def synchronize(self) -> None:
        """Wait for queued device work (nothing to wait for on a CPU)."""

    def timer(self) -> WallTimer | CudaEventTimer:
        return WallTimer()

    def reset_peak_memory(self) -> None:
        """Start a new allocator high-water mark (CUDA only)."""

    def allocator_peak(self) -> AllocatorPeak | None:
        return None

    @property
    def timing_method(self) -> str:
        return "time.perf_counter around each phase (CPU work is synchronous)"


@dataclass
class MpsBackend(DeviceBackend):
    mps: Any = None

    def synchronize(self) -> None:
        self.mps.synchronize()

    def timer(self) -> WallTimer:
        return WallTimer(self.mps.synchronize)

    @property
    def timing_method(self) -> str:
        return "time.perf_counter after torch.mps.synchronize() at each phase boundary"


@dataclass
class CudaBackend(DeviceBackend):
    cuda: Any = None
    index: int = 0

    def synchronize(self) -> None:
        self.cuda.synchronize(self.index)

    def timer(self) -> CudaEventTimer:
        return CudaEventTimer(self.cuda)

    def reset_peak_memory(self) -> None:
        self.cuda.reset_peak_memory_stats(self.index)

    def allocator_peak(self) -> AllocatorPeak:
        stats = self.cuda.memory_stats(self.index)
        return AllocatorPeak(
            allocated_bytes=int(self.cuda.max_memory_allocated(self.index)),
            reserved_bytes=int(self.cuda.max_memory_reserved(self.index)),
            alloc_retries=int(stats.get("num_alloc_retries", 0)),
        )

    @property
    def timing_method(self) -> str:
        return "CUDA events at each phase boundary, one synchronisation per step"


def cuda_backend(cuda: Any, index: int = 0, nvml: Any = None) -> CudaBackend:
    """The backend of CUDA device `index`: its name from torch and nvml, matched to the catalog by
    exact name or alias, and the facts nvml gives (driver, memory, power limit, clocks)."""
    props = cuda.get_device_properties(index)
    name = str(cuda.get_device_name(index))
    facts: dict[str, Any] = {
        "torch_device_name": name,
        "total_memory_bytes": int(props.total_memory),
        "compute_capability": f"{props.major}.{props.minor}",
        "multiprocessors": int(getattr(props, "multi_processor_count", 0)) or None,
    }
    facts.update(nvml_facts(nvml, props, index))
    catalog_name = catalog_gpu_for(name, facts.get("nvml_name"))
    key = catalog_name or f"cuda-{slug(name)}"
    return CudaBackend(kind="cuda", torch_device=f"cuda:{index}", name=name, key=key,
                       catalog_gpu=catalog_name, facts=facts, cuda=cuda, index=index)


def nvml_facts(nvml: Any, props: Any, index: int) -> dict[str, Any]:
    """Driver version, memory, power limit and clocks from NVML (pynvml), when it is installed.
    The device is found by its PCI bus id when torch reports one (CUDA_VISIBLE_DEVICES renumbers
    CUDA devices, not NVML's), else by index."""
    if nvml is None:
        return {"nvml": "pynvml not installed: driver and clocks not recorded"}
    try:
        nvml.nvmlInit()
    except Exception as e:  # an NVML error class per failure; any of them means "no facts"
        return {"nvml": f"nvmlInit failed: {e}"}
    try:
        bus = getattr(props, "pci_bus_id", None)
        if bus is not None:
            domain = getattr(props, "pci_domain_id", 0)
            device = getattr(props, "pci_device_id", 0)
            handle = nvml.nvmlDeviceGetHandleByPciBusId(f"{domain:08x}:{bus:02x}:{device:02x}.0")
        else:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        out: dict[str, Any] = {
            "nvml_name": _text(nvml.nvmlDeviceGetName(handle)),
            "driver_version": _text(nvml.nvmlSystemGetDriverVersion()),
            "nvml_memory_total_bytes": int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
        }
        for key, call in (("power_limit_w", lambda: nvml.nvmlDeviceGetPowerManagementLimit(handle)
                           / 1000),
                          ("sm_clock_max_mhz", lambda: nvml.nvmlDeviceGetMaxClockInfo(
                              handle, nvml.NVML_CLOCK_SM))):
            try:
                out[key] = call()
            except Exception:  # not supported on every board (NVML_ERROR_NOT_SUPPORTED)
                out[key] = None
        return out
    except Exception as e:
        return {"nvml": f"NVML query failed: {e}"}
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def cpu_model_name() -> str:
    """The CPU's model name: /proc/cpuinfo on Linux, sysctl on macOS, else platform's guess."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    if platform.system() == "Darwin":
        import subprocess

        try:
            return subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                                  text=True, timeout=5, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_backend(threads: int) -> DeviceBackend:
    name = cpu_model_name()
    return DeviceBackend(kind="cpu", torch_device="cpu", name=f"{name}, {threads} torch threads",
                         key=f"cpu-{slug(name)}-{threads}t",
                         facts={"cpu_model": name, "torch_threads": threads})


def detect(choice: str = "auto") -> DeviceBackend:
    """The backend for `choice` (auto: CUDA, then MPS, then CPU); an InputError when a device of
    the requested kind is not there."""
    import torch

    if choice not in ("auto", "cuda", "mps", "cpu"):
        raise FieldError("device", f"expected auto, cuda, mps or cpu, got {choice!r}.")
    cuda_ok = torch.cuda.is_available()
    mps_ok = bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available()
    if choice == "cuda" and not cuda_ok:
        built = torch.version.cuda
        raise FieldError("device", "no CUDA device is available"
                         + (f" (torch {torch.__version__} is built without CUDA)." if not built
                            else f" (torch {torch.__version__} with CUDA {built} sees none)."),
                         "Use --device cpu, or install a CUDA build of torch on a GPU machine.")
    if choice == "mps" and not mps_ok:
        raise FieldError("device", "no MPS (Apple GPU) device is available.", "Use --device cpu.")
    if choice == "cuda" or (choice == "auto" and cuda_ok):
        try:
            import pynvml as nvml  # type: ignore[import-not-found]
        except ImportError:
            nvml = None
        return cuda_backend(torch.cuda, torch.cuda.current_device(), nvml)
    if choice == "mps" or (choice == "auto" and mps_ok):
        name = cpu_model_name()
        return MpsBackend(kind="mps", torch_device="mps", name=f"{name} GPU (MPS)",
                          key=f"mps-{slug(name)}", facts={"chip": name}, mps=torch.mps)
    return cpu_backend(torch.get_num_threads())
