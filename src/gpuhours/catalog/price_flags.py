"""What is doubtful about a price row of the catalog: stale, suspicious, partial.

Every command that prints a cost from the price catalog (estimate, plan, generation, compare)
flags its rows with `price_flags`, so a stale or doubtful price is never shown as if current.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Literal

from pydantic import BaseModel, ConfigDict

from gpuhours.catalog.schema import PriceRow

#: a price row read more than this many days before today is flagged "stale". Assumption: 12
#: months, because GPU-hour list prices move by tens of percent within a year (AWS cut P4/P5
#: on-demand prices by up to 45% in June 2025; see KNOWN_PRICE_CHANGES).
STALE_AFTER_DAYS = 365

@dataclass(frozen=True)
class PriceChange:
    """A provider's price change for one GPU: a row read before `effective` predates it."""

    provider: str
    gpu: str
    effective: date
    what: str
    source: str


_AWS_CUT = ("AWS on-demand price cut of up to 45% for P4d/P4de/P5/P5en instances",
            "AWS announcement, June 2025 (day not recorded here: first of the month used), as "
            "reported by usage.ai; cited in catalog/data/prices.csv notes")
#: price changes known to this library; rows read before one are flagged stale. Add a row when
#: a provider announces a change that the price catalog may not have caught yet.
KNOWN_PRICE_CHANGES: tuple[PriceChange, ...] = tuple(
    PriceChange("aws", gpu, date(2025, 6, 1), *_AWS_CUT)
    for gpu in ("a100-40gb", "a100-80gb", "h100-sxm", "h200")
)

#: words the price catalog's notes use for a row its author doubted (catalog/data/prices.csv
#: convention), and the flag each raises. Matched case-sensitively in the notes.
NOTE_MARKERS: tuple[tuple[str, Literal["stale", "suspicious", "partial"], str], ...] = (
    ("SUSPICIOUS", "suspicious", "doubted"),
    ("INCONSISTENT", "suspicious", "doubted"),
    ("likely stale", "stale", "dated"),
    ("GPU-only", "partial", "GPU only"),
    ("GPU portion only", "partial", "GPU only"),
    ("GPU attachment only", "partial", "GPU only"),
)



class Flag(BaseModel):
    """Something doubtful about a price row: `short` for a table cell, `text` in full."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["stale", "suspicious", "partial"]
    short: str
    text: str


def price_flags(row: PriceRow, today: date,
                changes: Sequence[PriceChange] = KNOWN_PRICE_CHANGES) -> list[Flag]:
    """What is doubtful about a price row, as of `today`: spot equal to on-demand, a row read
    more than STALE_AFTER_DAYS ago, a row read before a known price change, a note that marks
    it (NOTE_MARKERS)."""
    flags: list[Flag] = []
    od, spot = row.on_demand_usd_per_gpu_hour, row.spot_usd_per_gpu_hour
    if od is not None and spot is not None and spot == od:
        flags.append(Flag(kind="suspicious", short="spot=od",
                          text=f"suspicious: spot = on-demand (${od:g}/GPU-h); spot is usually "
                               f"far cheaper, so one of them is probably wrong"))
    age_days = (today - row.as_of).days
    if age_days > STALE_AFTER_DAYS:
        months = age_days * 12 // 365
        flags.append(Flag(kind="stale", short=f"stale {months}mo",
                          text=f"stale: read {row.as_of.isoformat()}, {months} months ago "
                               f"(more than {STALE_AFTER_DAYS} days)"))
    for change in changes:
        if (change.provider, change.gpu) == (row.provider, row.gpu) and \
                row.as_of < change.effective:
            flags.append(Flag(kind="stale", short="pre-change",
                              text=f"stale: read {row.as_of.isoformat()}, before the "
                                   f"{change.what} ({change.effective.isoformat()}; source: "
                                   f"{change.source})"))
    for marker, kind, short in NOTE_MARKERS:
        if marker in row.notes and all(f.short != short for f in flags):
            flags.append(Flag(kind=kind, short=short,
                              text=f"{kind}: the row's notes say {marker!r}: {row.notes}"))
    return flags
