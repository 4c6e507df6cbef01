"""One training job priced across GPU types, GPU counts, providers and on-demand/spot, ranked
by dollars or by wall clock.

For each candidate (GPU, count) the analytic estimator gives memory (does it fit?), step time
and wall clock; for each provider that sells that GPU, the cheapest instance shape that holds
the GPUs is billed for the whole job: you pay whole instances, so one GPU used on an 8-GPU-only
provider pays 8. Price rows that look wrong are flagged (spot equal to on-demand, a row read
more than a year ago or before a known price change, a note that says the row is suspect).

Pure library: no torch, no typer. Every figure carries its basis (`Figure`); every offer its
price row's source and date.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Literal

from pydantic import BaseModel, ConfigDict

from gpuhours.catalog.billing import bill
from gpuhours.catalog.price_flags import (  # noqa: F401  (re-exported: compare's API)
    KNOWN_PRICE_CHANGES,
    NOTE_MARKERS,
    STALE_AFTER_DAYS,
    Flag,
    PriceChange,
    price_flags,
)
from gpuhours.catalog.schema import GpuSpec, PriceRow
from gpuhours.errors import FieldError, InputError
from gpuhours.estimate.figures import Figure, formula, given
from gpuhours.setup import Hardware, Training

#: the provider name of the price given with --usd-per-gpu-hour
GIVEN_PROVIDER = "given"

Pricing = Literal["on-demand", "spot"]
RankBy = Literal["usd", "wall"]
RANK_BY: tuple[RankBy, ...] = ("usd", "wall")
#: the GPU counts compared when none are given: one node's usual data-parallel sizes
DEFAULT_COUNTS: tuple[int, ...] = (1, 2, 4, 8)


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Amount(_Out):
    """The job's amount of work, stated one way (as `gpuhours estimate` takes it)."""

    tokens: float | None = None
    steps: float | None = None
    examples: float | None = None
    epochs: float | None = None
    tokens_per_example: float | None = None
    packed: bool = False


class SetupEstimate(_Out):
    """The job on `num_gpus` x `gpu` (data parallel): time and memory, from the estimator."""

    gpu: str
    num_gpus: int
    fits: bool
    memory_per_gpu_bytes: Figure
    device_bytes: Figure
    step_time_s: Figure
    bottleneck: str
    tokens: Figure
    optimizer_steps: Figure
    wall_clock_hours: Figure
    gpu_hours: Figure
    #: the setup gpuhours chose on these GPUs when the question left it open (estimate's
    #: chooser: estimate/fit.py chosen_setup), with why; None: the setup as given
    setup_chosen: str | None = None
    #: that setup in short (estimate/fit.py setup_label); None: the setup as given
    setup_label: str | None = None


class Excluded(_Out):
    """A (GPU, count) left out of the ranking, and why."""

    gpu: str
    num_gpus: int
    reason: Literal["does not fit", "cannot estimate", "no price", "no instance shape"]
    detail: str


class Offer(_Out):
    """The job on one instance shape of one provider at one pricing kind."""

    rank: int
    gpu: str
    num_gpus: int
    provider: str
    provider_kind: str
    region: str
    instance: str
    gpus_per_instance: int
    instances: int
    #: GPUs paid for: instances x GPUs per instance (>= num_gpus)
    billed_gpus: int
    pricing: Pricing
    usd_per_gpu_hour: float
    #: the estimate's step time, with its source (roofline and efficiency assumed)
    step_time_s: Figure
    wall_clock_hours: Figure
    #: GPU hours paid for: wall clock x billed GPUs
    billed_gpu_hours: Figure
    cost_usd: Figure
    price_source: str
    price_as_of: date
    flags: list[Flag]


class Comparison(_Out):
    """Everything `gpuhours compare` reports."""

    kind: Literal["compare"] = "compare"
    model: str
    model_basis: str
    setup: dict[str, object]
    amount: Amount
    ranked_by: RankBy
    today: date
    stale_after_days: int
    offers_total: int
    #: the best `top` offers, ranked
    offers: list[Offer]
    cheapest: Offer | None
    fastest: Offer | None
    estimates: list[SetupEstimate]
    excluded: list[Excluded]
    assumptions: list[str]


# Parsing the candidate lists -------------------------------------------------------------
def parse_counts(text: str) -> list[int]:
    """'1,2,4,8' -> [1, 2, 4, 8] (GPU counts, each >= 1, duplicates dropped, order kept)."""
    counts: list[int] = []
    for part in text.split(","):
        try:
            n = int(part.strip())
        except ValueError:
            raise FieldError("num_gpus", f"expected whole GPU counts separated by commas, such "
                                         f"as 1,2,4,8; got {text!r}.") from None
        if n < 1 or n > 1_000_000:
            raise FieldError("num_gpus", f"a GPU count must be between 1 and 1000000, got {n}.")
        if n not in counts:
            counts.append(n)
    return counts


def parse_names(text: str, field: str = "gpu") -> list[str]:
    """'a100-80gb, h100' -> ['a100-80gb', 'h100']; an empty part is an error keyed by
    `field`."""
    names = [part.strip() for part in text.split(",")]
    if not all(names):
        raise FieldError(field, f"expected names separated by commas, got {text!r}.")
    return names


def given_price_rows(gpus: Iterable[GpuSpec], counts: Iterable[int], usd_per_gpu_hour: float,
                     today: date) -> list[PriceRow]:
    """Price rows named 'given' for a user's price (USD per GPU-hour, on-demand), billed per
    GPU used: one row per GPU and count, an "instance" of exactly that many GPUs."""
    if not math.isfinite(usd_per_gpu_hour) or usd_per_gpu_hour <= 0:
        raise FieldError("usd_per_gpu_hour", f"expected a positive price in USD, got "
                                             f"{usd_per_gpu_hour!r}.")
    return [PriceRow(provider=GIVEN_PROVIDER, provider_kind="marketplace", gpu=g.name,
                     instance=f"your price, {n} GPU", gpus_per_instance=n, region="-",
                     on_demand_usd_per_gpu_hour=usd_per_gpu_hour,
                     source="--usd-per-gpu-hour", as_of=today,
                     notes="price given by the user, per GPU-hour, billed per GPU used")
            for g in gpus for n in counts]


def candidate_prices(gpus: Sequence[GpuSpec], counts: Sequence[int],
                     providers: Sequence[str] | None = None,
                     usd_per_gpu_hour: float | None = None,
                     today: date | None = None) -> list[PriceRow]:
    """The catalog's price rows of `gpus`, plus the 'given' rows of `usd_per_gpu_hour`, kept to
    `providers` when given (names as in the catalog, or 'given'; unknown ones are an error)."""
    from gpuhours import catalog

    names = {g.name for g in gpus}
    rows = [r for r in catalog.prices() if r.gpu in names]
    if usd_per_gpu_hour is not None:
        rows += given_price_rows(gpus, counts, usd_per_gpu_hour,
                                 date.today() if today is None else today)
    if providers is None:
        return rows
    known = sorted({r.provider for r in catalog.prices()} | {GIVEN_PROVIDER})
    providers = [name.lower() for name in providers]
    for name in providers:
        if name not in known:
            raise FieldError("provider", f"unknown provider {name!r}; known: "
                                         f"{', '.join(known)}.",
                             "'given' is the price of --usd-per-gpu-hour.")
    return [r for r in rows if r.provider in providers]


# Price rows: flags and instance shapes ---------------------------------------------------
@dataclass(frozen=True)
class InstanceChoice:
    """A number of instances of one price row's shape, holding the job's GPUs."""

    row: PriceRow
    instances: int
    billed_gpus: int
    usd_per_gpu_hour: float

    @property
    def usd_per_hour(self) -> float:
        """Dollars per hour of wall clock for all instances."""
        return self.billed_gpus * self.usd_per_gpu_hour


def cheapest_instance(rows: Sequence[PriceRow], num_gpus: int, gpus_per_node: int,
                      pricing: Pricing) -> InstanceChoice | None:
    """The cheapest way one provider's rows hold `num_gpus` GPUs at `pricing`, or None.

    One instance of at least `num_gpus` GPUs; for a job larger than a node (`gpus_per_node`,
    as the estimate assumes), ceil(num_gpus / shape) instances of node-sized shapes (billing.bill,
    as every command bills). Smaller
    shapes joined over the network are not offered: the estimate does not model them. Dollars
    per hour = instances x GPUs per instance x price per GPU-hour; ties go to fewer instances.
    """
    choices = []
    for row in rows:
        price = row.on_demand_usd_per_gpu_hour if pricing == "on-demand" \
            else row.spot_usd_per_gpu_hour
        b = bill(num_gpus, row.gpus_per_instance)
        if price is None or b.spans_network(gpus_per_node):
            continue
        choices.append(InstanceChoice(row, b.instances, b.billed_gpus, price))
    if not choices:
        return None
    return min(choices, key=lambda c: (c.usd_per_hour, c.instances, c.row.instance))


# The estimates --------------------------------------------------------------------------
def estimate_setup(training: Training, hardware: Hardware, amount: Amount,
                   keep: Sequence[str] | None = None) -> SetupEstimate:
    """The job on `hardware`: memory, step time and, from the amount, wall clock and GPU hours
    (the analytic estimator, gpuhours.estimate.estimator; no calibration).

    `keep`: the setup was left open but for these fields (micro_batch, checkpointing,
    zero_stage: `gpuhours estimate`'s rule): the fastest setup that fits these GPUs is chosen
    where the setup as given does not fit, or, for full pretraining on several GPUs with
    nothing of the batch given (keep empty), always (estimate/fit.py chosen_setup, layouts
    searched); None: the setup as given."""
    from gpuhours.estimate.estimator import estimate_training

    e = estimate_training(training, hardware, **amount.model_dump())
    why = label = None
    if keep is not None:
        from gpuhours.estimate.fit import batch_left_open, chosen_setup, setup_label

        batch_open = batch_left_open(training, hardware.num_gpus, not keep,
                                     amount.examples is None)
        if not e.memory.fits or batch_open:
            found = chosen_setup(training, hardware, search_layouts=True, keep=keep)
            if found is not None:
                training, why = found
                label = setup_label(training, hardware.num_gpus)
                e = estimate_training(training, hardware, **amount.model_dump())
    assert e.totals is not None  # the amount is checked to be given by compare_training
    return SetupEstimate(
        gpu=hardware.gpu.name, num_gpus=hardware.num_gpus, fits=e.memory.fits,
        memory_per_gpu_bytes=e.memory.total_bytes, device_bytes=e.memory.device_bytes,
        step_time_s=e.step_time_s, bottleneck=e.bottleneck, tokens=e.totals.tokens,
        optimizer_steps=e.totals.optimizer_steps, wall_clock_hours=e.totals.wall_clock_hours,
        gpu_hours=e.totals.gpu_hours, setup_chosen=why, setup_label=label)


def _check_amount(training: Training, amount: Amount, counts: Sequence[int],
                  hardware: Hardware) -> None:
    """Bad amounts are errors up front, not a 'cannot estimate' on every GPU."""
    from gpuhours.estimate.estimator import training_amount

    if amount.tokens is None and amount.steps is None and amount.examples is None:
        raise FieldError(("tokens", "steps", "examples"), "compare prices a whole job: give its "
                         "size as tokens, steps, or examples (with epochs).")
    if amount.steps is not None and len(counts) > 1:
        raise FieldError(("steps", "num_gpus"), "a number of optimizer steps is a different "
                         "job on each GPU count (each step trains on every GPU's micro-batches),"
                         " so it cannot rank several counts.",
                         "Give the job as tokens or examples, or a single GPU count.")
    training_amount(training, hardware, **amount.model_dump())


def _offer(rank: int, setup: SetupEstimate, choice: InstanceChoice, pricing: Pricing,
           today: date) -> Offer:
    row = choice.row
    wall_h = setup.wall_clock_hours.value
    billed_h = wall_h * choice.billed_gpus
    price_basis = (f"{row.provider} {row.instance} ({row.gpus_per_instance} GPU/instance) "
                   f"{pricing} ${choice.usd_per_gpu_hour:g}/GPU-h, as of "
                   f"{row.as_of.isoformat()}, source: {row.source}")
    price_kind = given if row.provider == GIVEN_PROVIDER else _catalog_figure
    return Offer(
        rank=rank, gpu=setup.gpu, num_gpus=setup.num_gpus, provider=row.provider,
        provider_kind=GIVEN_PROVIDER if row.provider == GIVEN_PROVIDER else row.provider_kind,
        region=row.region, instance=row.instance, gpus_per_instance=row.gpus_per_instance,
        instances=choice.instances, billed_gpus=choice.billed_gpus, pricing=pricing,
        usd_per_gpu_hour=choice.usd_per_gpu_hour, step_time_s=setup.step_time_s,
        wall_clock_hours=setup.wall_clock_hours,
        billed_gpu_hours=formula(billed_h, "GPU h", f"wall clock x {choice.billed_gpus} GPUs "
                                 f"billed ({choice.instances} x {row.gpus_per_instance}-GPU "
                                 f"instance)"),
        cost_usd=price_kind(billed_h * choice.usd_per_gpu_hour, "USD",
                            f"billed GPU h x {price_basis}"),
        price_source=row.source, price_as_of=row.as_of, flags=price_flags(row, today))


def _catalog_figure(value: float, unit: str, source: str) -> Figure:
    return Figure(value=value, unit=unit, basis="catalog", source=source)


def _sort_key(offer: Offer, by: RankBy) -> tuple[float, float, str, int, str, str]:
    usd, wall = offer.cost_usd.value, offer.wall_clock_hours.value
    first, second = (usd, wall) if by == "usd" else (wall, usd)
    return (first, second, offer.gpu, offer.num_gpus, offer.provider, offer.pricing)


def rank_offers(offers: Sequence[Offer], by: RankBy) -> list[Offer]:
    """`offers` ordered by dollars (then wall clock) or by wall clock (then dollars), each
    given its rank (1 = best)."""
    ordered = sorted(offers, key=lambda o: _sort_key(o, by))
    return [o.model_copy(update={"rank": i}) for i, o in enumerate(ordered, start=1)]


def compare_training(
    training: Training,
    gpus: Sequence[GpuSpec],
    counts: Sequence[int],
    price_rows: Sequence[PriceRow],
    amount: Amount,
    *,
    by: str = "usd",
    top: int = 15,
    today: date | None = None,
    gpus_per_node: int | None = None,
    inter_node_gb_per_s_one_way: float | None = None,
    keep: Sequence[str] | None = None,
) -> Comparison:
    """Rank the job `training` x `amount` over every (GPU, count) of `gpus` x `counts` that
    fits in memory, every provider row of `price_rows` for that GPU, and on-demand and spot.

    Multi-GPU is data parallel with the Training's ZeRO stage; micro-batch and accumulation
    are per GPU, so the effective batch grows with the count. With `keep` (the setup left
    open but for those fields), each GPU type and count gets the setup `gpuhours estimate`
    would choose on it (estimate_setup), layouts included. Dollars are for whole instances
    (cheapest_instance). `top` limits `offers`; `cheapest` and `fastest` are over all offers.
    `today` (default: the local date) dates the stale flags.
    """
    today = date.today() if today is None else today
    if by not in RANK_BY:
        raise FieldError("by", f"expected one of {', '.join(RANK_BY)}, got {by!r}.")
    if top < 1:
        raise FieldError("top", f"expected at least 1 row, got {top}.")
    if not gpus:
        raise FieldError("gpu", "no GPU to compare.")
    if not counts:
        raise FieldError("num_gpus", "no GPU count to compare.")
    node: dict[str, object] = {}
    if gpus_per_node is not None:
        node["gpus_per_node"] = gpus_per_node
    if inter_node_gb_per_s_one_way is not None:
        node["inter_node_gb_per_s_one_way"] = inter_node_gb_per_s_one_way
    _check_amount(training, amount, counts,
                  Hardware.model_validate({"gpu": gpus[0], "num_gpus": counts[0], **node}))

    estimates: list[SetupEstimate] = []
    excluded: list[Excluded] = []
    offers: list[Offer] = []
    first_error: InputError | None = None
    for gpu in gpus:
        rows = [r for r in price_rows if r.gpu == gpu.name]
        for count in counts:
            hardware = Hardware.model_validate({"gpu": gpu, "num_gpus": count, **node})
            try:
                setup = estimate_setup(training, hardware, amount, keep)
            except InputError as exc:  # e.g. no matmul rate at this precision on this GPU
                first_error = first_error or exc
                excluded.append(Excluded(gpu=gpu.name, num_gpus=count,
                                         reason="cannot estimate", detail=exc.message))
                continue
            if not setup.fits:
                excluded.append(Excluded(
                    gpu=gpu.name, num_gpus=count, reason="does not fit",
                    detail=f"needs {setup.memory_per_gpu_bytes.value / 2**30:.1f} GiB per GPU, "
                           f"has {setup.device_bytes.value / 2**30:.1f} GiB"))
                continue
            estimates.append(setup)
            found = _offers_of(setup, rows, hardware.gpus_per_node, today)
            if not found:
                excluded.append(_unpriced(gpu.name, count, rows))
            offers += found
    if not estimates and first_error is not None and \
            all(x.reason == "cannot estimate" for x in excluded):
        raise first_error  # the same bad input everywhere: say it once, as an error
    rank_by: RankBy = "usd" if by == "usd" else "wall"
    ranked = rank_offers(offers, rank_by)
    return Comparison(
        model=training.model or training.arch.name, model_basis=training.model_basis,
        setup=training.choices(), amount=amount, ranked_by=rank_by,
        today=today, stale_after_days=STALE_AFTER_DAYS, offers_total=len(ranked),
        offers=ranked[:top],
        cheapest=min(ranked, key=lambda o: _sort_key(o, "usd"), default=None),
        fastest=min(ranked, key=lambda o: _sort_key(o, "wall"), default=None),
        estimates=estimates, excluded=excluded,
        assumptions=_assumptions(any(e.setup_chosen for e in estimates)))


def _offers_of(setup: SetupEstimate, rows: Sequence[PriceRow], gpus_per_node: int,
               today: date) -> list[Offer]:
    """One offer per (provider, region) and pricing kind: its cheapest instance shape."""
    by_provider: dict[tuple[str, str], list[PriceRow]] = {}
    for row in rows:
        by_provider.setdefault((row.provider, row.region), []).append(row)
    found = []
    for provider_rows in by_provider.values():
        for pricing in ("on-demand", "spot"):
            choice = cheapest_instance(provider_rows, setup.num_gpus, gpus_per_node, pricing)
            if choice is not None:
                found.append(_offer(0, setup, choice, pricing, today))
    return found


def _unpriced(gpu: str, count: int, rows: Sequence[PriceRow]) -> Excluded:
    if not rows:
        return Excluded(gpu=gpu, num_gpus=count, reason="no price",
                        detail="no price row for this GPU (give one with --usd-per-gpu-hour)")
    largest = max(r.gpus_per_instance for r in rows)
    return Excluded(gpu=gpu, num_gpus=count, reason="no instance shape",
                    detail=f"the largest instance priced holds {largest} GPU(s); several small "
                           f"instances over the network are not modelled")


def _assumptions(chosen: bool = False) -> list[str]:
    first = ("the setup left open is chosen on each GPU type and count as `gpuhours estimate` "
             "chooses it (micro-batch, accumulation for the default global batch, "
             "checkpointing, ZeRO, the parallel layout); where it is not, multi-GPU is data "
             "parallel with the setup's ZeRO stage" if chosen else
             "multi-GPU is data parallel with the setup's ZeRO stage; micro-batch and "
             "accumulation are per GPU, so the effective batch grows with the GPU count")
    return [
        first,
        "you pay whole instances for the whole wall clock: billed GPUs = instances x GPUs per "
        "instance; the cheapest shape that holds the GPUs is chosen per provider and pricing",
        "spot runs as long as on-demand: preemption and restarts are not modelled",
        "step time is analytic (gpuhours estimate without a ledger's calibration)",
        f"a price row read more than {STALE_AFTER_DAYS} days ago is flagged stale (assumption:"
        f" GPU prices move by tens of percent a year)",
    ]
