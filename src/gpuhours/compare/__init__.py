"""`gpuhours compare`: one training job ranked across GPU types, GPU counts, providers and
on-demand/spot, by dollars or by wall clock; doubtful price rows flagged.

    from gpuhours.compare import Amount, compare_training
    from gpuhours import catalog, Training

    result = compare_training(Training(model="qwen2.5-7b", method="lora"), catalog.gpus(),
                              [1, 2, 4, 8], catalog.prices(), Amount(tokens=1e9))
    result.cheapest, result.fastest, result.offers[0].cost_usd

No torch here; the CLI (gpuhours.compare.cli) only parses, calls compare_training and prints.
"""

from __future__ import annotations

from gpuhours.compare.rank import (
    KNOWN_PRICE_CHANGES,
    STALE_AFTER_DAYS,
    Amount,
    Comparison,
    Excluded,
    Flag,
    Offer,
    SetupEstimate,
    cheapest_instance,
    compare_training,
    given_price_rows,
    price_flags,
)

__all__ = [
    "KNOWN_PRICE_CHANGES",
    "STALE_AFTER_DAYS",
    "Amount",
    "Comparison",
    "Excluded",
    "Flag",
    "Offer",
    "SetupEstimate",
    "cheapest_instance",
    "compare_training",
    "given_price_rows",
    "price_flags",
]
