"""How a kind of prediction has fared against published runs: the track record `estimate` and
`plan` print beside a pretraining total (issues 16) and a plan's RL phase (issue 13).

The figures are not a model: they summarise a validation table, each published figure over
the prediction for it, when that table was last generated:
- "pretraining": docs/validation.md's plain question (published GPU hours over the estimate of
  the setup gpuhours chose), written by scripts/validate.py;
- "rl": docs/rl.md's held-out rows (measured step time over the plan's), written by
  scripts/regen_docs.py.
Each lives in catalog/data/track_record_<kind>.json. Nothing in a prediction is scaled by them:
they say how far published runs have landed from predictions of this kind, so a planner can
read the prediction as the physics and the spread as what real runs added (docs/validation.md
and docs/rl.md, 'What remains off').
"""

from __future__ import annotations

import json
import statistics
from functools import lru_cache
from importlib import resources

from pydantic import BaseModel, ConfigDict, ValidationError

from gpuhours.errors import InputError

#: generation's records are per engine: its held-out rows mix GPUs, batches and releases, but an
#: engine's host and kernels are what set most of its misses
GENERATION_ENGINES = ("vllm", "sglang", "hf-generate", "tensorrt-llm", "lmdeploy")
KINDS = ("pretraining", "rl", *(f"generation-{e}" for e in GENERATION_ENGINES))


def file_name(kind: str) -> str:
    """The shipped file of a record kind (catalog/data/)."""
    if kind not in KINDS:
        raise ValueError(f"unknown track record {kind!r}: expected one of {KINDS}")
    return f"track_record_{kind}.json"


#: the question the record is of: full training of a model on this many GPUs or more with a
#: whole-run amount; the published runs of the table use 16 to 16,384 GPUs
MIN_GPUS = 16


class TrackRecord(BaseModel):
    """The plain question against published pretraining runs (ratios: published GPU hours /
    predicted, dimensionless)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    question: str
    #: what the published figure is: "GPU hours", "step time", "throughput"
    measure: str
    #: True for a rate (throughput): a ratio below 1 is a run slower than predicted
    higher_is_faster: bool = False
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
                f"published {self.measure}; {self.slower_than_predicted} ran slower than "
                f"predicted. Published / predicted: median {self.median_ratio:.2f}x, 10th-90th "
                f"percentile {self.p10_ratio:.2f}x-{self.p90_ratio:.2f}x (measured: "
                f"{self.table}, as of {self.as_of}). The prediction is not scaled by these.")


def summarise(published_over_predicted: list[float], tolerance: float, question: str,
              measure: str, table: str, as_of: str, higher_is_faster: bool = False
              ) -> TrackRecord:
    """The record of a table's rows from each row's published / predicted ratio: how many lie
    within `tolerance` of the prediction (|predicted / published - 1| <= tolerance, the
    table's own test), how many ran slower (a ratio above 1 for a time, below 1 for a rate:
    `higher_is_faster`), the median and the 10th and 90th percentiles
    (statistics.quantiles, inclusive method)."""
    ratios = list(published_over_predicted)
    if len(ratios) < 2 or any(r <= 0 for r in ratios):
        raise ValueError("need at least two positive ratios")
    deciles = statistics.quantiles(ratios, n=10, method="inclusive")
    return TrackRecord(
        question=question, measure=measure, runs=len(ratios),
        within=sum(abs(1 / r - 1) <= tolerance + 1e-12 for r in ratios),
        tolerance=tolerance, median_ratio=round(statistics.median(ratios), 4),
        p10_ratio=round(deciles[0], 4), p90_ratio=round(deciles[8], 4),
        higher_is_faster=higher_is_faster,
        slower_than_predicted=sum((r < 1) if higher_is_faster else (r > 1) for r in ratios),
        table=table, as_of=as_of)


@lru_cache(maxsize=len(KINDS))
def load(kind: str = "pretraining") -> TrackRecord:
    """The record of `kind` shipped with the package (catalog/data/)."""
    name = file_name(kind)
    ref = resources.files("gpuhours.catalog").joinpath("data", name)
    label = f"gpuhours/catalog/data/{name}"
    try:
        return TrackRecord.model_validate(json.loads(ref.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError) as exc:
        raise InputError(label, f"the shipped track record could not be read ({exc}).",
                         "Reinstall gpuhours, or regenerate it with scripts/validate.py.") from None


def for_engine(engine: str) -> TrackRecord | None:
    """The generation record of `engine` (the published rows of vLLM's V0 releases are in
    vLLM's record; None for an engine without one)."""
    engine = "vllm" if engine == "vllm-v0" else engine
    return load(f"generation-{engine}") if engine in GENERATION_ENGINES else None


def applies(method: str, num_gpus: int, has_amount: bool) -> bool:
    """Whether a setup is the question the record is of: full training (not adapters) of a
    whole run (an amount of work given) on MIN_GPUS or more."""
    return has_amount and method == "full" and num_gpus >= MIN_GPUS
