"""Whole-instance billing (gpuhours.catalog.billing), the same in every command that prints
dollars: estimate, generation, plan, compare and doctor.

Dollars are hand-worked from catalog/data/prices.csv rows (as of 2026-11-22): a100-80gb at
lambda gpu_8x_a100_80gb_sxm4 (8 GPUs, $1.79/GPU-h on demand), azure Standard_ND96amsr_A100_v4
(8 GPUs, $4.09625 on demand, $0.450587 spot) and runpod '1x A100-80GB-SXM (SECURE)' (1 GPU,
$1.89).
"""

from __future__ import annotations

import json
import textwrap
from datetime import date
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuhours import catalog
from gpuhours.catalog.billing import bill, cheapest_on_demand
from gpuhours.catalog.schema import PriceRow
from gpuhours.cli import app
from gpuhours.doctor.diagnose import price_per_gpu_hour
from gpuhours.estimate.estimator import cost_rows
from gpuhours.plan.budget import evaluate
from gpuhours.plan.load import load_plan

runner = CliRunner()


def row(gpus_per_instance: int, on_demand: float, spot: float | None = None,
        name: str = "p") -> PriceRow:
    return PriceRow(provider=name, provider_kind="cloud", gpu="a100-80gb",
                    instance=f"{name}-{gpus_per_instance}x", gpus_per_instance=gpus_per_instance,
                    region="r", on_demand_usd_per_gpu_hour=on_demand,
                    spot_usd_per_gpu_hour=spot, source="test row", as_of=date(2026, 11, 22))


def test_bill_counts_whole_instances() -> None:
    assert (bill(1, 8).instances, bill(1, 8).billed_gpus) == (1, 8)
    assert (bill(9, 8).instances, bill(9, 8).billed_gpus) == (2, 16)
    assert (bill(8, 8).instances, bill(8, 8).billed_gpus, bill(8, 8).note) == (1, 8, "")
    assert bill(4, 1).billed_gpus == 4 and bill(4, 1).spans_network(8)
    assert not bill(16, 8).spans_network(8)  # node-sized instances: as the estimate assumes
    assert bill(1, 8).note == "8 GPUs billed for 1 used"
    assert bill(9, 8).note == "16 GPUs billed for 9 used, 2 instances"
    with pytest.raises(ValueError):
        bill(0, 8)


def test_cost_rows_bill_one_gpu_on_an_8_gpu_instance_for_8() -> None:
    # 625 GPU h used on 1 GPU: 8-GPU instance -> 5,000 GPU h billed; x $1.79 = $8,950;
    # spot $0.450587 x 5,000 = $2,252.935; the 1-GPU row: 625 x $1.89 = $1,181.25
    rows = cost_rows(625.0, [row(8, 1.79, 0.450587, "eight"), row(1, 1.89, None, "one")], 1)
    one, eight = rows  # cheapest on-demand total first
    assert one.provider == "one" and one.on_demand_usd == pytest.approx(1181.25)
    assert one.billing == "" and one.billed_gpu_hours == pytest.approx(625)
    assert eight.on_demand_usd == pytest.approx(8950.0)
    assert eight.spot_usd == pytest.approx(2252.935)
    assert (eight.instances, eight.billed_gpus, eight.billed_gpu_hours) == (1, 8, 5000.0)
    assert eight.billing == "8 GPUs billed for 1 used"
    # 12 GPUs for 100 GPU h: 2 x 8 = 16 billed, 133.33 GPU h x $2 = $266.67; the 1-GPU shape
    # spans 12 instances over the network: flagged
    twelve = cost_rows(100.0, [row(8, 2.0), row(1, 2.0, name="q")], 12)
    assert twelve[0].on_demand_usd == pytest.approx(200.0)
    assert any("joined over the network" in f for f in twelve[0].flags)
    assert twelve[1].on_demand_usd == pytest.approx(100 * 16 / 12 * 2.0)


def test_estimate_and_compare_bill_one_gpu_the_same() -> None:
    job = ["--model", "qwen2.5-7b", "--gpu", "a100-80gb", "--method", "lora", "--batch", "4",
           "--seq", "2048", "--checkpointing", "--tokens", "1e9"]
    est = json.loads(runner.invoke(app, ["estimate", *job, "--json"]).stdout)
    cmp = json.loads(runner.invoke(app, ["compare", *job, "--gpus", "1", "--json",
                                         "--top", "100"]).stdout)
    hours = est["totals"]["gpu_hours"]["value"]
    lam = next(c for c in est["totals"]["cost_usd"] if c["instance"] == "gpu_8x_a100_80gb_sxm4")
    assert lam["on_demand_usd"] == pytest.approx(hours * 8 * 1.79)
    azure = next(c for c in est["totals"]["cost_usd"]
                 if c["instance"] == "Standard_ND96amsr_A100_v4")
    assert azure["spot_usd"] == pytest.approx(hours * 8 * 0.450587)
    offer = next(o for o in cmp["offers"] if o["instance"] == "gpu_8x_a100_80gb_sxm4")
    assert offer["cost_usd"]["value"] == pytest.approx(lam["on_demand_usd"])
    # the printed table says so
    out = runner.invoke(app, ["estimate", *job], env={"COLUMNS": "200"}).stdout
    assert "gpu_8x_a100_80gb_sxm4 [8 GPUs billed for 1 used]" in out


def test_plan_bills_each_phase_in_whole_instances(tmp_path: Path) -> None:
    # 100 GPU h on 1 GPU, no contingency: lambda's 8-GPU row 100 x 8 x $1.79 = $1,432;
    # runpod's 1-GPU row 100 x $1.89 = $189
    p = tmp_path / "plan.yaml"
    p.write_text(textwrap.dedent("""\
        project: billing
        hardware: {gpu: a100-80gb}
        phases:
          - {name: scripts, kind: fixed, gpu_hours: 100, gpus: 1}
        """))
    b = evaluate(load_plan(p))
    lam = next(c for c in b.costs if c.instance == "gpu_8x_a100_80gb_sxm4")
    assert lam.on_demand_usd == pytest.approx(1432.0)
    assert lam.billed_gpu_hours == pytest.approx(800.0)
    assert lam.billing == "800.0 GPU h billed for 100.0 used"
    run = next(c for c in b.costs if c.instance == "1x A100-80GB-SXM (SECURE)")
    assert run.on_demand_usd == pytest.approx(189.0) and run.billing == ""
    assert b.costs[0].on_demand_usd == min(c.on_demand_usd for c in b.costs
                                           if c.on_demand_usd is not None)


def test_doctor_prices_a_gpu_used_at_its_whole_instance() -> None:
    gpu = catalog.gpu("a100-80gb")
    # one GPU: runpod's 1-GPU row at $1.89 beats lambda's 8-GPU row at 8 x $1.79 = $14.32
    price, basis = price_per_gpu_hour(gpu, None, {}, 1)
    assert price == pytest.approx(1.89) and "runpod" in basis
    # eight GPUs: lambda's $1.79 per GPU-hour, all eight used
    price, basis = price_per_gpu_hour(gpu, None, {}, 8)
    assert price == pytest.approx(1.79) and "gpu_8x_a100_80gb_sxm4" in basis
    found = cheapest_on_demand([row(8, 1.79), row(2, 2.5)], 3)
    # 3 GPUs: 8 x $1.79 = $14.32 an hour vs 2 x 2 x $2.5 = $10
    assert found is not None and found[0].gpus_per_instance == 2
