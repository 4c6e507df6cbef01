"""How the whole-run question has fared against published runs: the track record `estimate`
prints beside a pretraining total (issue 16).

The figures are not a model: they are the plain question's table in docs/validation.md
("Pretraining GPU hours, the plain question"), each published run's GPU hours over the
estimate of the setup gpuhours chose for it, summarised when that table was last generated
(scripts/validate.py writes catalog/data/track_record.json beside docs/validation.md). Nothing
in the estimate is scaled by them: they say how far published runs have landed from a
prediction of this kind, so a planner can read the prediction as the physics of the steps and
the spread as what real runs added (stacks, evaluations, restarts beyond the modelled rate,
ramped batches; docs/validation.md 'What remains off').
"""

from __future__ import annotations

import json
import statistics
from functools import lru_cache
from importlib import resources

from pydantic import BaseModel, ConfigDict, ValidationError

from gpuhours.errors import InputError

FILE = "track_record.json"

#: the question the record is of: full training of a model on this many GPUs or more with a
#: whole-run amount; the published runs of the table use 16 to 16,384 GPUs
MIN_GPUS = 16


class TrackRecord(BaseModel):
    """The plain question against published pretraining runs (ratios: published GPU hours /
    predicted, dimensionless)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    question: str
    runs: int
    within: int
    tolerance: float
    median_ratio: float
    p10_ratio: float
    p90_ratio: float
    slower_than_predicted: int
    table: str
    as_of: str

    def text(self) -> str:
        """One paragraph for the terminal."""
        return (f"Track record of this question ({self.question}): against {self.runs} "
                f"published runs, {self.within} came within {self.tolerance:.0%} of the "
                f"published GPU hours; {self.slower_than_predicted} took longer than "
                f"predicted. Published / predicted: median {self.median_ratio:.2f}x, 10th-90th "
                f"percentile {self.p10_ratio:.2f}x-{self.p90_ratio:.2f}x (measured: "
                f"{self.table}, as of {self.as_of}). The prediction is not scaled by these.")


def summarise(published_over_predicted: list[float], tolerance: float, question: str,
              table: str, as_of: str) -> TrackRecord:
    """The record of a table's rows from each row's published / predicted ratio: how many lie
    within `tolerance` of the prediction (|predicted / published - 1| <= tolerance, the
    table's own test), the median and the 10th and 90th percentiles (statistics.quantiles,
    inclusive method)."""
    ratios = list(published_over_predicted)
    if len(ratios) < 2 or any(r <= 0 for r in ratios):
        raise ValueError("need at least two positive ratios")
    deciles = statistics.quantiles(ratios, n=10, method="inclusive")
    return TrackRecord(
        question=question, runs=len(ratios),
        within=sum(abs(1 / r - 1) <= tolerance + 1e-12 for r in ratios),
        tolerance=tolerance, median_ratio=round(statistics.median(ratios), 4),
        p10_ratio=round(deciles[0], 4), p90_ratio=round(deciles[8], 4),
        slower_than_predicted=sum(r > 1 for r in ratios), table=table, as_of=as_of)


@lru_cache(maxsize=1)
def load() -> TrackRecord:
    """The record shipped with the package (catalog/data/track_record.json)."""
    ref = resources.files("gpuhours.catalog").joinpath("data", FILE)
    label = f"gpuhours/catalog/data/{FILE}"
    try:
        return TrackRecord.model_validate(json.loads(ref.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError) as exc:
        raise InputError(label, f"the shipped track record could not be read ({exc}).",
                         "Reinstall gpuhours, or regenerate it with scripts/validate.py.") from None


def applies(method: str, num_gpus: int, has_amount: bool) -> bool:
    """Whether a setup is the question the record is of: full training (not adapters) of a
    whole run (an amount of work given) on MIN_GPUS or more."""
    return has_amount and method == "full" and num_gpus >= MIN_GPUS
