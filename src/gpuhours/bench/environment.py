"""The environment a measurement was taken in: host, CPU, device, driver and library versions."""

from __future__ import annotations

import os
import platform
import socket
import sys
from importlib import metadata
from typing import Any

from gpuhours.bench.device import DeviceBackend, cpu_model_name


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def ram_bytes() -> int | None:
    """Physical memory of the host, bytes (POSIX sysconf), None where unknown."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def collect(backend: DeviceBackend) -> dict[str, Any]:
    """Everything that can change a measurement, as plain JSON values."""
    import torch

    from gpuhours.extras import warn_untested_versions

    warn_untested_versions()
    env: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu_model": cpu_model_name(),
        "cpu_count": os.cpu_count(),
        "ram_bytes": ram_bytes(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "transformers": _version("transformers"),
        "peft": _version("peft"),
        "gpuhours": _version("gpuhours"),
        "device_kind": backend.kind,
        "device_name": backend.name,
        "device_key": backend.key,
        "catalog_gpu": backend.catalog_gpu,
        "timing_method": backend.timing_method,
    }
    env.update({f"device_{k}" if not k.startswith(("device_", "nvml", "driver")) else k: v
                for k, v in backend.facts.items()})
    return env
