"""The optional `[bench]` extra (torch, transformers, peft): the versions gpuhours is tested with,
and a warning when the installed ones lie outside them.

pyproject.toml's `bench` extra declares the same ranges (tests/test_extras.py holds them equal)
and CI installs exactly the `tested` versions (.ci/constraints.txt). trace, bench and track call
`warn_untested_versions()` when they first import torch, so that a torch installed by hand (a
CUDA build of another release, a nightly) still runs, with a warning that says what was tested.
Light: imports no torch; versions are read from the installed distributions' metadata.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata


class UntestedVersionWarning(UserWarning):
    """torch, transformers or peft is installed at a version outside the tested range."""


@dataclass(frozen=True)
class SupportedRange:
    """One package of the extra: the version CI runs, and the release series it stands for."""

    package: str
    #: the exact version CI installs and the tests run against
    tested: str
    #: lowest release in range (inclusive)
    minimum: str
    #: first release out of range (exclusive)
    below: str

    @property
    def specifier(self) -> str:
        """The PEP 440 specifier pyproject.toml declares, e.g. '>=2.13,<2.14'."""
        return f">={self.minimum},<{self.below}"

    def contains(self, version: str) -> bool:
        """Whether `version` (local labels such as '+cpu' or '+cu128' ignored) is in range."""
        release = release_numbers(version)
        width = max(len(release), len(release_numbers(self.minimum)), len(release_numbers(self.below)))
        return (_padded(release_numbers(self.minimum), width) <= _padded(release, width)
                < _padded(release_numbers(self.below), width))


#: a minor series of each, tested at its newest release when this was written
BENCH_EXTRA: tuple[SupportedRange, ...] = (
    SupportedRange("torch", tested="2.13.0", minimum="2.13", below="2.14"),
    SupportedRange("transformers", tested="5.23.0", minimum="5.23", below="5.24"),
    SupportedRange("peft", tested="0.21.2", minimum="0.21", below="0.22"),
)


def release_numbers(version: str) -> tuple[int, ...]:
    """The release segment of a version string: '2.13.0+cpu' -> (2, 13, 0); '2.14.0.dev1' -> (2, 14, 0).
    Pre- and post-release tags count as their release."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", version)
    return tuple(int(part) for part in match.group(1).split(".")) if match else ()


def _padded(numbers: tuple[int, ...], width: int) -> tuple[int, ...]:
    return numbers + (0,) * (width - len(numbers))


def installed_versions() -> dict[str, str | None]:
    """The installed version of each package of the extra, None where it is not installed."""
    versions: dict[str, str | None] = {}
    for supported in BENCH_EXTRA:
        try:
            versions[supported.package] = metadata.version(supported.package)
        except metadata.PackageNotFoundError:
            versions[supported.package] = None
    return versions


def untested_versions(installed: Mapping[str, str | None]) -> list[str]:
    """One message for each installed package outside its range; [] when all are in range.
    Packages that are not installed are not reported here (their import fails on its own)."""
    messages = []
    for supported in BENCH_EXTRA:
        version = installed.get(supported.package)
        if version is None or supported.contains(version):
            continue
        messages.append(
            f"{supported.package} {version} is installed, but gpuhours is tested with "
            f"{supported.package} {supported.tested} (its [bench] extra requires "
            f"{supported.package}{supported.specifier}); trace, bench and track may fail or give "
            f"other figures. Tested together: {tested_summary()}.")
    return messages


def tested_summary() -> str:
    """'torch 2.13.0, transformers 5.23.0, peft 0.21.2'."""
    return ", ".join(f"{s.package} {s.tested}" for s in BENCH_EXTRA)


_checked = False


def warn_untested_versions() -> None:
    """Warn (UntestedVersionWarning, shown on stderr by default) once per process for each
    package of the extra installed outside its tested range. Never raises."""
    global _checked
    if _checked:
        return
    _checked = True
    for message in untested_versions(installed_versions()):
        warnings.warn(message, UntestedVersionWarning, stacklevel=2)
