"""`gpuhours compare`: one job priced across GPUs, counts, providers and on-demand/spot.

Numbers are held to hand arithmetic on the estimator's own step time: wall clock = steps x step
time, dollars = wall clock x GPUs billed (whole instances) x the row's price per GPU-hour. Price
rows are built inline (the catalog's prices.csv is not touched).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import date, timedelta
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from gpuhours.catalog.schema import GpuSpec, PriceRow
from gpuhours.cli import app
from gpuhours.compare.rank import (
    STALE_AFTER_DAYS,
    Amount,
    cheapest_instance,
    compare_training,
    parse_counts,
    price_flags,
)
from gpuhours.errors import FieldError
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.estimator import estimate_training
from gpuhours.estimate.fit import setup_label
from gpuhours.setup import Hardware, Training

TODAY = date(2026, 11, 23)
runner = CliRunner()


def row(provider: str = "p", gpus_per_instance: int = 8, on_demand: float | None = 2.0,
        spot: float | None = None, gpu: str = "toy", as_of: date = TODAY, notes: str = "",
        instance: str | None = None) -> PriceRow:
    """A price row per GPU-hour, as catalog/data/prices.csv holds them."""
    return PriceRow(provider=provider, provider_kind="cloud", gpu=gpu,
                    instance=instance or f"{provider}-{gpus_per_instance}x",
                    gpus_per_instance=gpus_per_instance, region="r",
                    on_demand_usd_per_gpu_hour=on_demand, spot_usd_per_gpu_hour=spot,
                    source=f"test row {provider}", as_of=as_of, notes=notes)


def step_time_s(t: Training, gpu: GpuSpec, n: int) -> float:
    """The estimator's step time of `t` on `n` x `gpu`, no amount of work given."""
    return estimate_training(t, Hardware(gpu=gpu, num_gpus=n)).step_time_s.value


@pytest.fixture
def job(tiny: ModelArch) -> Training:
    """The tiny model, full fine-tuning, 8 sequences of 128 tokens per GPU per step."""
    return Training(arch=tiny, micro_batch=8, seq_len=128)


# Hand-worked dollars ---------------------------------------------------------------------
def test_one_gpu_on_an_eight_gpu_only_provider_pays_eight(job: Training,
                                                          toy_gpu: GpuSpec) -> None:
    # 1,024,000 tokens / (8 x 128 tokens per step) = 1000 steps exactly on one GPU
    result = compare_training(job, [toy_gpu], [1], [row(gpus_per_instance=8, on_demand=2.0)],
                              Amount(tokens=1_024_000), today=TODAY)
    (offer,) = result.offers
    wall_h = 1000 * step_time_s(job, toy_gpu, 1) / 3600
    assert offer.wall_clock_hours.value == pytest.approx(wall_h, rel=1e-12)
    assert (offer.instances, offer.billed_gpus) == (1, 8)
    assert offer.billed_gpu_hours.value == pytest.approx(8 * wall_h, rel=1e-12)
    assert offer.cost_usd.value == pytest.approx(8 * wall_h * 2.0, rel=1e-12)  # not 1 x
    assert "p-8x" in offer.cost_usd.source and "2026-11-22" not in offer.cost_usd.source
    assert result.estimates[0].gpu_hours.value == pytest.approx(wall_h, rel=1e-12)  # used


def test_one_gpu_instances_are_priced_as_such(job: Training, toy_gpu: GpuSpec) -> None:
    rows = [row("small", gpus_per_instance=1, on_demand=3.0),
            row("small", gpus_per_instance=8, on_demand=2.0)]
    result = compare_training(job, [toy_gpu], [1, 8], rows, Amount(tokens=8_192_000),
                              today=TODAY)
    by_count = {o.num_gpus: o for o in result.offers}
    # one GPU: a 1-GPU instance at $3 beats 8 GPUs billed at $2
    one = by_count[1]
    wall1_h = 8000 * step_time_s(job, toy_gpu, 1) / 3600  # 8,192,000 / 1024 tokens per step
    assert (one.instance, one.billed_gpus) == ("small-1x", 1)
    assert one.cost_usd.value == pytest.approx(wall1_h * 1 * 3.0, rel=1e-12)
    # eight GPUs: one 8-GPU instance, not eight 1-GPU instances
    eight = by_count[8]
    wall8_h = 1000 * step_time_s(job, toy_gpu, 8) / 3600  # 8,192,000 / 8192 tokens per step
    assert (eight.instance, eight.instances, eight.billed_gpus) == ("small-8x", 1, 8)
    assert eight.cost_usd.value == pytest.approx(wall8_h * 8 * 2.0, rel=1e-12)


@pytest.mark.parametrize(("count", "instance", "instances", "billed"), [
    (1, "p-1x", 1, 1),    # $3 x 1 < $2.5 x 4 < $2 x 8
    (2, "p-4x", 1, 4),    # 1-GPU instances are not joined over the network; $2.5 x 4 < $2 x 8
    (4, "p-4x", 1, 4),
    (8, "p-8x", 1, 8),    # $2 x 8 < $2.5 x 4 x 2 instances
    (16, "p-8x", 2, 16),  # larger than a node (8): node-sized instances
])
def test_cheapest_instance_shape(count: int, instance: str, instances: int,
                                 billed: int) -> None:
    rows = [row(gpus_per_instance=1, on_demand=3.0), row(gpus_per_instance=4, on_demand=2.5),
            row(gpus_per_instance=8, on_demand=2.0)]
    choice = cheapest_instance(rows, count, 8, "on-demand")
    assert choice is not None
    assert (choice.row.instance, choice.instances, choice.billed_gpus) == (
        instance, instances, billed)


def test_spot_picks_its_own_shape_and_rows_without_spot_give_none() -> None:
    rows = [row(gpus_per_instance=1, on_demand=3.0, spot=None),
            row(gpus_per_instance=8, on_demand=2.0, spot=0.5)]
    choice = cheapest_instance(rows, 1, 8, "spot")
    assert choice is not None and choice.row.gpus_per_instance == 8  # the only spot shape
    assert choice.usd_per_hour == pytest.approx(8 * 0.5)
    assert cheapest_instance(rows[:1], 1, 8, "spot") is None


def test_given_price_is_billed_per_gpu_used(job: Training, toy_gpu: GpuSpec) -> None:
    from gpuhours.compare.rank import given_price_rows

    rows = given_price_rows([toy_gpu], [1, 2], 1.5, TODAY)
    result = compare_training(job, [toy_gpu], [1, 2], rows, Amount(tokens=2_048_000),
                              today=TODAY)
    for offer in result.offers:
        assert offer.provider == offer.provider_kind == "given"
        assert offer.billed_gpus == offer.num_gpus
        steps = 2_048_000 / (1024 * offer.num_gpus)
        wall_h = steps * step_time_s(job, toy_gpu, offer.num_gpus) / 3600
        assert offer.cost_usd.value == pytest.approx(wall_h * offer.num_gpus * 1.5, rel=1e-12)
        assert offer.cost_usd.basis == "input"


# Ranking ---------------------------------------------------------------------------------
def test_ranked_by_dollars_then_by_wall_clock(job: Training, toy_gpu: GpuSpec) -> None:
    rows = [row("a", 8, on_demand=2.0, spot=0.7), row("b", 1, on_demand=4.0, spot=1.0)]
    args = (job, [toy_gpu], [1, 2, 4, 8], rows, Amount(tokens=8_192_000))
    by_usd = compare_training(*args, today=TODAY, top=100)
    usd = [o.cost_usd.value for o in by_usd.offers]
    assert usd == sorted(usd) and [o.rank for o in by_usd.offers] == list(
        range(1, len(usd) + 1))
    assert by_usd.cheapest == by_usd.offers[0]
    # provider b sells 1-GPU instances only: counts 2, 4 and 8 are not offered there
    assert {(o.provider, o.num_gpus) for o in by_usd.offers if o.provider == "b"} == {("b", 1)}
    assert len(by_usd.offers) == by_usd.offers_total == 4 * 2 + 2
    by_wall = compare_training(*args, today=TODAY, top=3, by="wall")
    walls = [o.wall_clock_hours.value for o in by_wall.offers]
    assert walls == sorted(walls) and len(walls) == 3 and by_wall.offers_total == 10
    assert by_wall.fastest is not None and by_wall.fastest.num_gpus == 8
    # equal wall clock: the cheaper first (spot at $0.7 before on-demand at $2)
    assert [o.pricing for o in by_wall.offers[:2]] == ["spot", "on-demand"]


# Flags -----------------------------------------------------------------------------------
def test_spot_equal_to_on_demand_is_suspicious() -> None:
    flags = price_flags(row(on_demand=6.98, spot=6.98), TODAY)
    assert [(f.kind, f.short) for f in flags] == [("suspicious", "spot=od")]
    assert "spot = on-demand" in flags[0].text
    assert price_flags(row(on_demand=6.98, spot=2.0), TODAY) == []


@pytest.mark.parametrize(("age_days", "short"), [
    (STALE_AFTER_DAYS, None), (STALE_AFTER_DAYS + 1, "stale 12mo"), (800, "stale 26mo")])
def test_a_row_older_than_the_threshold_is_stale(age_days: int, short: str | None) -> None:
    flags = price_flags(row(as_of=TODAY - timedelta(days=age_days)), TODAY)
    assert [f.short for f in flags] == ([short] if short else [])
    if short:
        assert flags[0].kind == "stale" and "months ago" in flags[0].text


def test_a_row_read_before_a_known_price_change_is_stale() -> None:
    before = row("aws", gpu="h100-sxm", as_of=date(2025, 5, 1))
    flags = price_flags(before, date(2025, 7, 1))
    assert [(f.kind, f.short) for f in flags] == [("stale", "pre-change")]
    assert "45%" in flags[0].text and "source" in flags[0].text
    after = row("aws", gpu="h100-sxm", as_of=date(2025, 6, 2))
    assert price_flags(after, date(2025, 7, 1)) == []
    assert price_flags(row("lambda", gpu="h100-sxm", as_of=date(2025, 5, 1)),
                       date(2025, 7, 1)) == []  # another provider's price did not change


def test_notes_that_doubt_a_row_are_flagged() -> None:
    flags = price_flags(row(notes="SUSPICIOUS: cheaper than the 40GB part. GPU-only price"),
                        TODAY)
    assert {(f.kind, f.short) for f in flags} == {("suspicious", "doubted"),
                                                  ("partial", "GPU only")}


def test_flags_reach_the_offers(job: Training, toy_gpu: GpuSpec) -> None:
    old = TODAY - timedelta(days=400)
    result = compare_training(job, [toy_gpu], [1], [row(on_demand=2.0, spot=2.0, as_of=old)],
                              Amount(tokens=1_024_000), today=TODAY)
    for offer in result.offers:  # both the on-demand and the spot offer of that row
        assert {f.short for f in offer.flags} == {"spot=od", "stale 13mo"}


# Exclusions ------------------------------------------------------------------------------
def test_setups_that_do_not_fit_are_excluded_and_counted(toy_gpu: GpuSpec) -> None:
    # 1.3e9 parameters, full fine-tuning in bf16-mixed: 16 bytes each = 20.8 GB of state, on
    # a 10 GB GPU: no count fits at ZeRO 0 (the state is replicated on every GPU)
    t = Training(params=1.3e9, micro_batch=1, seq_len=128)
    result = compare_training(t, [toy_gpu], [1, 2], [row()], Amount(tokens=1e6), today=TODAY)
    assert result.offers == [] and result.estimates == []
    assert [(x.num_gpus, x.reason) for x in result.excluded] == [(1, "does not fit"),
                                                                 (2, "does not fit")]
    assert "GiB per GPU" in result.excluded[0].detail
    # ZeRO-3 over 8 GPUs shards the state (20.8 GB / 8): it fits there, and only there
    t3 = t.model_copy(update={"zero_stage": 3})
    sharded = compare_training(t3, [toy_gpu], [1, 8], [row()], Amount(tokens=1e6),
                               today=TODAY)
    assert [o.num_gpus for o in sharded.offers] == [8]
    assert [(x.num_gpus, x.reason) for x in sharded.excluded] == [(1, "does not fit")]


def test_a_gpu_without_a_price_is_excluded_as_such(job: Training, toy_gpu: GpuSpec) -> None:
    result = compare_training(job, [toy_gpu], [1], [row(gpu="other")],
                              Amount(tokens=1_024_000), today=TODAY)
    assert [x.reason for x in result.excluded] == ["no price"]
    assert len(result.estimates) == 1 and result.offers == []


# Library input errors --------------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "field"), [
    ({"amount": Amount()}, "tokens"),
    ({"amount": Amount(steps=10), "counts": [1, 2]}, "steps"),
    ({"by": "fast"}, "by"),
    ({"top": 0}, "top"),
])
def test_library_errors_name_the_field(job: Training, toy_gpu: GpuSpec,
                                       kwargs: dict[str, Any], field: str) -> None:
    args: dict[str, Any] = {"amount": Amount(tokens=1e6), "counts": [1], **kwargs}
    with pytest.raises(FieldError) as caught:
        compare_training(job, [toy_gpu], args.pop("counts"), [row()], args.pop("amount"),
                         today=TODAY, **args)
    assert field in caught.value.fields


def test_parse_counts() -> None:
    assert parse_counts("1, 2,4,8,2") == [1, 2, 4, 8]
    with pytest.raises(FieldError, match="whole GPU counts"):
        parse_counts("1,two")
    with pytest.raises(FieldError, match="between 1 and"):
        parse_counts("0")


# The command -----------------------------------------------------------------------------
def run(*args: str, columns: int = 200) -> Result:
    return runner.invoke(app, ["compare", *args],
                         env={"COLUMNS": str(columns), "NO_COLOR": "1"})


JOB = ("--model", "qwen2-0.5b", "--method", "lora", "--batch", "8", "--seq", "512",
       "--tokens", "1e9")


def test_json_is_valid_and_every_figure_has_its_basis() -> None:
    result = run(*JOB, "--gpu", "h100-sxm,a100-80gb,rtx-4090", "--top", "5", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["kind"] == "compare" and len(data["offers"]) == 5
    assert data["offers_total"] > 5
    for offer in data["offers"]:
        for figure in ("step_time_s", "wall_clock_hours", "billed_gpu_hours", "cost_usd"):
            assert offer[figure]["source"] and offer[figure]["basis"]
        assert offer["price_source"] and offer["price_as_of"]
        assert offer["billed_gpus"] >= offer["num_gpus"]
        assert offer["cost_usd"]["value"] == pytest.approx(
            offer["billed_gpu_hours"]["value"] * offer["usd_per_gpu_hour"], rel=1e-12)
    costs = [o["cost_usd"]["value"] for o in data["offers"]]
    assert costs == sorted(costs)
    assert data["cheapest"] == data["offers"][0]


def test_catalog_spot_equal_on_demand_row_is_flagged_in_json() -> None:
    # catalog/data/prices.csv: azure Standard_NC40ads_H100_v5 lists spot = on-demand = 6.98
    data = json.loads(run(*JOB, "--gpu", "h100-nvl", "--gpus", "1", "--json").stdout)
    azure = [o for o in data["offers"] if o["provider"] == "azure"]
    assert azure and all("spot=od" in {f["short"] for f in o["flags"]} for o in azure)


def test_table_fits_80_columns_and_names_its_basis() -> None:
    result = run(*JOB, "--top", "30", columns=80)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    text = result.stdout
    for needed in ("Cheapest:", "Fastest:", "Excluded, ", "Basis: wall h", "Prices: ",
                   "as of", "od = on-demand"):
        assert needed in text, needed


def test_usd_per_gpu_hour_adds_a_given_row() -> None:
    data = json.loads(run(*JOB, "--gpu", "h100-sxm", "--gpus", "2", "--provider", "given",
                          "--usd-per-gpu-hour", "2", "--json").stdout)
    (offer,) = data["offers"]
    assert (offer["provider"], offer["billed_gpus"]) == ("given", 2)
    gpu_h = [e for e in data["estimates"] if e["num_gpus"] == 2][0]["gpu_hours"]["value"]
    assert offer["cost_usd"]["value"] == pytest.approx(gpu_h * 2.0, rel=1e-12)


def test_nothing_fits_exits_1_and_still_prints_json() -> None:
    result = run("--model", "llama-2-7b", "--gpu", "rtx-4090", "--gpus", "1", "--tokens",
                 "1e9", "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["offers"] == [] and data["excluded"][0]["reason"] == "does not fit"


@pytest.mark.parametrize(("args", "option", "pattern"), [
    (("--gpus", "0"), "--gpus", "between 1 and"),
    (("--gpus", "1,x"), "--gpus", "whole GPU counts"),
    (("--gpu", "h100-sxn"), "--gpu", "Did you mean: h100-sxm"),
    (("--by", "fast"), "--by", "usd, wall"),
    (("--top", "0"), "--top", "at least 1"),
    (("--usd-per-gpu-hour", "-1"), "--usd-per-gpu-hour", "positive price"),
    (("--provider", "awz"), "--provider", "known: aws"),
    (("--steps", "100"), "--steps", "different job on each GPU count"),
    (("--zero", "5"), "--zero", "0, 1, 2 or 3"),
])
def test_bad_input_exits_2_with_the_option_named(args: tuple[str, ...], option: str,
                                                 pattern: str) -> None:
    base = ["--model", "qwen2-0.5b", "--gpu", "h100-sxm"]
    if "--steps" not in args:
        base += ["--tokens", "1e9"]
    if "--gpu" in args:
        base = base[:2] + base[4:]
    result = run(*base, *args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert option in result.stderr and pattern in result.stderr, result.stderr


def test_a_bad_amount_is_one_error_not_a_gpu_left_out() -> None:
    # every catalog GPU: the V100 (no bf16) must not hide the real mistake
    result = run("--model", "qwen2-0.5b", "--tokens", "-5")
    assert result.exit_code == 2 and result.stdout == ""
    assert "--tokens: expected a positive number" in result.stderr, result.stderr


def test_no_amount_is_an_error_naming_the_ways() -> None:
    result = run("--model", "qwen2-0.5b")
    assert result.exit_code == 2 and "--tokens/--steps/--examples" in result.stderr


# Light import ----------------------------------------------------------------------------
def _fresh(script: str) -> Any:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_library_imports_neither_torch_nor_typer() -> None:
    loaded = _fresh("""
        import json, sys
        import gpuhours.compare.rank as rank
        from gpuhours import catalog
        from gpuhours.setup import Training
        gpus = [catalog.gpu("h100-sxm")]
        result = rank.compare_training(Training(model="qwen2-0.5b"), gpus, [1, 8],
                                       rank.candidate_prices(gpus, [1, 8]),
                                       rank.Amount(tokens=1e9))
        assert result.offers
        print(json.dumps(sorted(m for m in ("torch", "transformers", "peft", "typer")
                                if m in sys.modules)))
    """)
    assert loaded == []


def test_the_command_is_loaded_only_when_used() -> None:
    assert _fresh("""
        import json, sys
        import gpuhours.cli
        print(json.dumps("gpuhours.compare.cli" in sys.modules))
    """) is False


def test_a_setup_left_open_is_chosen_on_each_gpu_and_count():
    """issue 16's review: Mixtral-8x7B on 64 H100s does not fit at the defaults (micro-batch 1,
    ZeRO 0: 47B parameters' state), and `compare` left it out where `estimate` chooses a setup.
    Left open, each count gets estimate's chooser: the row is in, at estimate's GPU hours."""
    from gpuhours.estimate.fit import chosen_setup

    t = Training(model="mixtral-8x7b", seq_len=4096)
    h100 = Hardware(gpu="h100").gpu
    amount = Amount(tokens=1e11)
    given = compare_training(t, [h100], [64], [], amount, today=TODAY)
    assert not given.estimates and given.excluded[0].reason == "does not fit"
    open_ = compare_training(t, [h100], [64], [], amount, today=TODAY, keep=[])
    (e,) = open_.estimates
    assert e.fits and e.setup_chosen and e.setup_chosen.startswith("setup chosen by gpuhours")
    found = chosen_setup(t, Hardware(gpu="h100", num_gpus=64), search_layouts=True, keep=[])
    assert found is not None
    direct = estimate_training(found[0], Hardware(gpu="h100", num_gpus=64), tokens=1e11)
    assert direct.totals is not None
    assert e.gpu_hours.value == pytest.approx(direct.totals.gpu_hours.value)


def test_the_setup_chosen_is_shown_in_short_as_the_sentence_begins():
    """compare prints each count's chosen setup in the chooser's own words (fit.setup_label,
    the start of chosen_setup's sentence), not the sentence cut at a phrase."""
    from rich.console import Console

    from gpuhours.compare.render import render_comparison

    t = Training(model="mixtral-8x7b", seq_len=4096)
    h100 = Hardware(gpu="h100").gpu
    c = compare_training(t, [h100], [64], [], Amount(tokens=1e11), today=TODAY, keep=[])
    (e,) = c.estimates
    assert e.setup_label and e.setup_chosen == (
        f"setup chosen by gpuhours: {e.setup_label} (" + e.setup_chosen.split(" (", 1)[1])
    console = Console(record=True, width=400)
    render_comparison(c, console)
    line = next(x for x in console.export_text().splitlines() if "Setup chosen on" in x)
    assert f"64 x {h100.name}: {e.setup_label}." in line and "the fastest of" not in line


def test_setup_label_by_hand():
    llama = Training(model="llama-2-70b", seq_len=4096, micro_batch=1, zero_stage=1, tp=4, pp=2,
                     virtual_stages=8, grad_accum=4)
    assert setup_label(llama, 2048) == (
        "micro-batch 1, checkpointing off, ZeRO 1, tp 4, pp 2, interleaved: 8 virtual stages a "
        "rank, data parallel 256, 4 micro-batches per step")
    plain = Training(model="qwen2.5-0.5b", micro_batch=4, grad_accum=8, checkpointing=True)
    assert setup_label(plain, 2) == (
        "micro-batch 4, checkpointing on, ZeRO 0, accumulation 8")


def test_no_chosen_setup_line_when_the_top_rows_took_theirs_as_given():
    """The README's LoRA comparison: counts that did not fit as given got the chooser's setup
    (unpriced ones among them), the top rows did not: no line of chosen setups, where an empty
    one was printed (': .')."""
    args = ["compare", "--model", "qwen2.5-7b", "--method", "lora", "--batch", "4", "--seq",
            "2048", "--checkpointing", "--tokens", "1e9"]
    data = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    assert any(e.get("setup_chosen") for e in data["estimates"])
    top = {(o["gpu"], o["num_gpus"]) for o in data["offers"][:3]}
    assert not any(e.get("setup_chosen") for e in data["estimates"]
                   if (e["gpu"], e["num_gpus"]) in top)
    text = CliRunner().invoke(app, args, env={"COLUMNS": "200"}).stdout
    assert "Setup chosen on" not in text and ": ." not in text
