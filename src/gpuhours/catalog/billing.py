"""How a job's GPUs are billed at one price row: whole instances.

A provider sells instances, not GPUs: a price row of the catalog is an instance's price divided
by its GPUs (`PriceRow.gpus_per_instance`), so a job on fewer GPUs than an instance holds still
pays for all of them, and a job on more pays for ceil(GPUs / GPUs per instance) instances.
Every command that prints dollars (estimate, generation, plan, compare, doctor) bills through
`bill`, so that the same job costs the same everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from gpuhours.catalog.schema import PriceRow


@dataclass(frozen=True)
class Bill:
    """`used_gpus` GPUs run on instances of `gpus_per_instance` GPUs each."""

    used_gpus: int
    gpus_per_instance: int
    #: ceil(used_gpus / gpus_per_instance)
    instances: int
    #: instances x gpus_per_instance (>= used_gpus)
    billed_gpus: int

    @property
    def factor(self) -> float:
        """GPU hours paid for per GPU hour used: billed GPUs / used GPUs (>= 1)."""
        return self.billed_gpus / self.used_gpus

    def billed_gpu_hours(self, used_gpu_hours: float) -> float:
        """GPU hours paid for: the GPU hours used (wall clock x used GPUs) x billed / used."""
        return used_gpu_hours * self.factor

    def spans_network(self, gpus_per_node: int) -> bool:
        """True when the job's GPUs, which the estimate places `gpus_per_node` to a node, span
        several instances of a smaller shape joined only by the network."""
        return self.gpus_per_instance < min(self.used_gpus, gpus_per_node)

    @property
    def note(self) -> str:
        """'' when every billed GPU is used, else e.g. '8 GPUs billed for 1 used' (with ', 2
        instances' when there are several)."""
        if self.billed_gpus == self.used_gpus:
            return ""
        several = f", {self.instances} instances" if self.instances > 1 else ""
        return f"{self.billed_gpus} GPUs billed for {self.used_gpus} used{several}"


def bill(used_gpus: int, gpus_per_instance: int) -> Bill:
    """The whole instances that hold `used_gpus` GPUs: ceil(used / per instance) of them.

    >>> bill(1, 8).billed_gpus, bill(9, 8).instances, bill(4, 1).billed_gpus
    (8, 2, 4)
    """
    if used_gpus < 1 or gpus_per_instance < 1:
        raise ValueError(f"GPU counts must be >= 1, got {used_gpus} used on instances of "
                         f"{gpus_per_instance}")
    instances = math.ceil(used_gpus / gpus_per_instance)
    return Bill(used_gpus, gpus_per_instance, instances, instances * gpus_per_instance)


def spans_network_flag(b: Bill) -> str:
    """The price flag of a row whose small instances must be joined over the network."""
    return (f"{b.instances} instances of {b.gpus_per_instance} GPU(s) joined over the network; "
            f"the estimate assumes its nodes' own links (NVLink or PCIe) between the GPUs of "
            f"a node (gpuhours compare leaves such rows out)")


def cheapest_on_demand(rows: Iterable[PriceRow], used_gpus: int) -> tuple[PriceRow, Bill] | None:
    """The row whose whole instances cost least per hour for `used_gpus` GPUs on demand
    (price per GPU-hour x billed GPUs; ties to fewer GPUs billed), with its bill; None when no
    row has an on-demand price."""
    priced = [(r, bill(used_gpus, r.gpus_per_instance)) for r in rows
              if r.on_demand_usd_per_gpu_hour is not None]
    if not priced:
        return None
    return min(priced, key=lambda rb: ((rb[0].on_demand_usd_per_gpu_hour or 0.0) * rb[1].factor,
                                       rb[1].billed_gpus, rb[0].provider, rb[0].instance))


def per_used_gpu_hour_text(row: PriceRow, b: Bill) -> str:
    """'$1.79/GPU-h x 8 GPUs billed for 1 used = $14.32 per GPU-hour used' (or the price alone
    when every billed GPU is used)."""
    price = row.on_demand_usd_per_gpu_hour or 0.0
    if not b.note:
        return f"${price:g}/GPU-h"
    return f"${price:g}/GPU-h x {b.note} = ${price * b.factor:.4g} per GPU-hour used"


def catalog_price_per_used_gpu_hour(gpu_name: str, used_gpus: int) -> tuple[float, str] | None:
    """(USD per GPU-hour used, basis) at the catalog's cheapest on-demand way to hold
    `used_gpus` of the GPU in whole instances (cheapest_on_demand); None without a price."""
    from gpuhours import catalog

    found = cheapest_on_demand(catalog.prices(gpu_name), used_gpus)
    if found is None:
        return None
    row, b = found
    return ((row.on_demand_usd_per_gpu_hour or 0.0) * b.factor,
            f"catalog: cheapest on-demand for {used_gpus} x {gpu_name} in whole instances, "
            f"{row.provider} {row.instance}, {per_used_gpu_hour_text(row, b)}, as of "
            f"{row.as_of}")
