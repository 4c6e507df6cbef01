"""Every printed cost flags its doubtful price rows (issue 11): estimate, generation, plan."""

from __future__ import annotations

import json
from datetime import date

import pytest
from typer.testing import CliRunner

from gpuhours.catalog.schema import PriceRow
from gpuhours.cli import app
from gpuhours.estimate.estimator import cost_rows


def _row(**over) -> PriceRow:
    base = dict(provider="acme", provider_kind="cloud", gpu="a100-80gb", instance="x8",
                gpus_per_instance=8, region="-", on_demand_usd_per_gpu_hour=2.0,
                spot_usd_per_gpu_hour=1.0, source="test", as_of=date.today())
    return PriceRow.model_validate({**base, **over})


def test_cost_rows_carry_the_flags_of_their_price_rows():
    fresh, old, same = (_row(), _row(as_of=date(2020, 1, 1)),
                        _row(spot_usd_per_gpu_hour=2.0))
    flags = {r.on_demand_usd_per_gpu_hour and i: r.flags
             for i, r in enumerate(cost_rows(10.0, [fresh, old, same]))}
    texts = [" ".join(f) for f in flags.values()]
    assert any(t.startswith("stale: read 2020-01-01") for t in texts)
    assert any(t.startswith("suspicious: spot = on-demand") for t in texts)
    assert sum(t == "" for t in texts) == 1


def test_estimate_json_flags_the_catalogs_doubted_rows():
    # the price catalog's notes mark GCP's a2-ultragpu rows SUSPICIOUS
    result = CliRunner().invoke(app, ["estimate", "--model", "qwen2.5-7b", "--gpu", "a100-80gb",
                                      "--method", "lora", "--tokens", "1e8", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["totals"]["cost_usd"]
    doubted = [r for r in rows if r["instance"].startswith("a2-ultragpu")]
    assert doubted and all(any(f.startswith("suspicious") for f in r["flags"])
                           for r in doubted)
    assert any(not r["flags"] for r in rows)


@pytest.mark.parametrize("args", [
    ["estimate", "--model", "qwen2.5-7b", "--gpu", "a100-80gb", "--method", "lora",
     "--tokens", "1e8"],
])
def test_the_terminal_output_says_price_flag(args):
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "price flag gcp a2-ultragpu" in " ".join(result.output.split())
