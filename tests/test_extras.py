"""The [bench] extra's tested versions: one set of ranges in pyproject.toml, extras.py and CI's
constraints, and the run-time warning outside them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuhours import extras
from gpuhours.extras import (
    BENCH_EXTRA,
    SupportedRange,
    UntestedVersionWarning,
    release_numbers,
    untested_versions,
)

ROOT = Path(__file__).resolve().parent.parent
TESTED = {"torch": "2.13.0", "transformers": "5.23.0", "peft": "0.21.2"}


def test_pyproject_declares_the_tested_ranges() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    declared = sorted(project["optional-dependencies"]["bench"])
    assert declared == sorted(f"{s.package}{s.specifier}" for s in BENCH_EXTRA)


def test_ci_constraints_pin_the_tested_versions() -> None:
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$",
                           (ROOT / ".ci" / "constraints.txt").read_text("utf-8"), re.M))
    for supported in BENCH_EXTRA:
        assert release_numbers(pins[supported.package]) == release_numbers(supported.tested)
        assert supported.contains(supported.tested)
    for tool in ("pytest", "hypothesis", "ruff", "mypy", "types-PyYAML", "numpy"):
        assert tool in pins


def test_release_numbers_ignore_local_and_dev_labels() -> None:
    assert release_numbers("2.13.0+cpu") == (2, 13, 0)
    assert release_numbers("2.14.0.dev20260101+cu128") == (2, 14, 0)
    assert release_numbers("5.23") == (5, 23)


@pytest.mark.parametrize(("version", "inside"), [
    ("2.13.0", True), ("2.13.0+cpu", True), ("2.13.0+cu128", True), ("2.13.4", True),
    ("2.12.1", False), ("2.14.0", False), ("2.14.0+cpu", False), ("3.0", False),
])
def test_range_contains(version: str, inside: bool) -> None:
    assert SupportedRange("torch", tested="2.13.0", minimum="2.13", below="2.14").contains(version) is inside


def test_tested_versions_raise_no_message() -> None:
    assert untested_versions(TESTED) == []
    assert untested_versions({"torch": "2.13.0+cpu", "transformers": None, "peft": None}) == []


def test_an_untested_torch_is_named_with_the_tested_versions() -> None:
    messages = untested_versions({**TESTED, "torch": "2.15.0+cu130"})
    assert len(messages) == 1
    assert "torch 2.15.0+cu130 is installed" in messages[0]
    assert "tested with torch 2.13.0" in messages[0]
    assert "torch>=2.13,<2.14" in messages[0]
    assert "torch 2.13.0, transformers 5.23.0, peft 0.21.2" in messages[0]


def test_warning_not_exception_and_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extras, "_checked", False)
    monkeypatch.setattr(extras, "installed_versions", lambda: {**TESTED, "peft": "0.30.0"})
    with pytest.warns(UntestedVersionWarning, match=r"peft 0\.30\.0 is installed.*tested with peft 0\.21\.2"):
        extras.warn_untested_versions()
    extras.warn_untested_versions()  # already checked: no second warning (filterwarnings=error)


def test_the_installed_extra_is_the_tested_one() -> None:
    """The environment the suite runs in (CI: .ci/constraints.txt) is inside the tested ranges, so
    trace, bench and track run here without the warning."""
    assert untested_versions(extras.installed_versions()) == []
