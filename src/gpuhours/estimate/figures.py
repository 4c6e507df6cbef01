"""A number with its unit and where it came from: formula, trace, measured, or assumed."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

BasisKind = Literal["formula", "trace", "measured", "assumed", "catalog", "input"]


class Figure(BaseModel):
    """One reported quantity. `basis` says how it was obtained, `source` which formula, file,
    ledger row or assumption."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: float
    unit: str
    basis: BasisKind
    source: str


def formula(value: float, unit: str, source: str) -> Figure:
    return Figure(value=value, unit=unit, basis="formula", source=source)


def assumed(value: float, unit: str, source: str) -> Figure:
    return Figure(value=value, unit=unit, basis="assumed", source=source)


def catalog(value: float, unit: str, source: str) -> Figure:
    return Figure(value=value, unit=unit, basis="catalog", source=source)


def given(value: float, unit: str, source: str) -> Figure:
    return Figure(value=value, unit=unit, basis="input", source=source)
