"""`gpuhours generation` against published generation throughput
(scripts/gpuhours_dev/validation/generation_published.py, docs/generation.md).

Fourteen rows set constants (gp.TUNED) and are counted apart, as are the rows that share a tuned
row's mechanism (gp.DEPENDENT); the rest are held out. The tests hold the doc to the script's
output, recount the summary from the rows, check that each tuned constant is its rows' fit, and
that no row repeats one the generation.csv constants were fitted on."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from gpuhours_dev.validation import generation_published as gp

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "generation.md"
TUNING_CSV = ROOT / "scripts" / "gpuhours_dev" / "validation" / "data" / "generation.csv"


@pytest.fixture(scope="module")
def results() -> list[gp.Result]:
    return gp.results()


def test_the_doc_holds_the_current_table() -> None:
    assert gp.report() in DOC.read_text(encoding="utf-8")


def test_every_row_has_a_source_a_unit_and_a_known_quantity() -> None:
    known = {"output_tokens_per_s", "output_tokens_per_s_ambiguous",
             "output_tokens_per_s_per_gpu", "total_tokens_per_s", "ttft_ms",
             "decode_step_ms", "request_latency_s"}
    data = gp.rows()
    assert [int(r["row"]) for r in data] == list(range(1, len(data) + 1))
    for r in data:
        assert r["source"] and r["unit"] and r["notes"], r["row"]
        assert r["metric"] in known, r["row"]
        assert float(r["measured"]) > 0, r["row"]


def test_no_row_repeats_a_row_the_constants_were_fitted_on() -> None:
    # generation.csv holds bf16 rows only
    with TUNING_CSV.open(newline="", encoding="utf-8") as f:
        tuned = {(r["model"], r["engine"], r["input_tokens"], r["concurrency"], "bf16")
                 for r in csv.DictReader(f)}
    assert len(tuned) == 15
    for r in gp.rows():
        key = (r["model"], r["engine"], r["input_tokens"], r["batch"], r["precision"])
        assert key not in tuned, r["row"]


def test_every_row_is_predicted_or_says_why_not(results: list[gp.Result]) -> None:
    for x in results:
        native = x.predicted is not None
        proxy = x.proxy_predicted is not None
        assert not (native and proxy), x.row["row"]
        if not native:
            assert x.why, x.row["row"]
        if proxy or x.why.startswith(x.row["engine"] + " is not modelled"):
            assert x.row["engine"] not in gp.MODELLED


def test_error_sign_by_hand() -> None:
    # a rate predicted at twice the measured one is +100%; a time predicted at half the
    # measured one is the same +100% (the estimate twice as fast)
    assert gp._error(200.0, 100.0, "output_tokens_per_s") == pytest.approx(1.0)
    assert gp._error(5.0, 10.0, "ttft_ms") == pytest.approx(1.0)
    assert gp._error(75.0, 100.0, "total_tokens_per_s") == pytest.approx(-0.25)
    assert gp._error(5.0, 10.0, "decode_step_ms") == pytest.approx(1.0)
    assert gp._error(2.0, 1.0, "request_latency_s") == pytest.approx(-0.5)


def test_summary_counts_are_computed_from_the_rows(results: list[gp.Result]) -> None:
    # recount from measured and predicted values, not from Result.error
    def err(value: float, r: dict[str, str]) -> float:
        m = float(r["measured"])
        times = ("ttft_ms", "decode_step_ms", "request_latency_s")
        return m / value - 1 if r["metric"] in times else value / m - 1

    native = [err(x.predicted, x.row) for x in results
              if x.predicted is not None and x.row["row"] not in gp.TUNED
              and x.row["row"] not in gp.DEPENDENT]
    # rows 128-130 share tuned row 127's expert loop, rows 276-284 (even) tuned row 274's
    # empty-expert launches, rows 25, 26 and 61 tuned rows 22, 23 and 55's Marlin terms,
    # rows 171-175 (odd) tuned row 169's FP8Linear host time, rows 285-288 rows 127's and
    # 169's, rows 172-176 (even) tuned row 170's GPTQModel linear host time: expressed,
    # counted apart, not held out
    dependent = [err(x.predicted, x.row) for x in results
                 if x.predicted is not None and x.row["row"] in gp.DEPENDENT]
    assert len(dependent) == 33  # + TensorRT-LLM's 12 fp8 rows (FP8_MATMULS chosen on them)
    proxy = [err(x.proxy_predicted, x.row) for x in results if x.proxy_predicted is not None]
    s = gp.summary(results)
    # the tuned rows (SGLang's host step with the H20's bandwidth: 6; vLLM V0's and SGLang's
    # host time per running sequence; transformers' host time per expert; SGLang's Marlin MoE
    # launch per empty expert; the dequantisation rate and a quantised GEMM's fixed time: 4;
    # the eager host time per kernel: one eager/graph pair, 2; transformers' FP8Linear host
    # time, 1; GPTQModel's linear host time under transformers, 1) are expressed but counted
    # apart
    assert s["tuned"] == len(gp.TUNED) == 18
    assert s["rows"] == len(gp.rows()) == (len(native) + s["tuned"] + len(dependent)
                                           + len(proxy) + s["not_expressed"])
    assert s["dependent"]["n"] == len(dependent)
    assert s["dependent"]["within"] == sum(abs(e) <= 0.25 for e in dependent)
    assert s["native"]["n"] == len(native) and s["proxy"]["n"] == len(proxy)
    assert s["native"]["within"] == sum(abs(e) <= 0.25 for e in native)
    assert s["proxy"]["within"] == sum(abs(e) <= 0.25 for e in proxy)
    assert s["native"]["worst"] == pytest.approx(max(native, key=abs))
    ordered = sorted(abs(e) for e in native)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    assert s["native"]["median_abs"] == pytest.approx(median)
    # and the headline the doc prints says the same
    head = " ".join(gp.report().split("\n\n")[0].splitlines())
    numbers = [int(n) for n in re.findall(r"(\d+) (?:published rows|tuned,|sharing|of them "
                                          r"within|held-out rows|of engines|within 25%|not "
                                          r"expressed)", head)]
    assert numbers == [s["rows"], s["tuned"], s["dependent"]["n"], s["dependent"]["within"],
                       s["native"]["n"], s["native"]["within"], s["proxy"]["n"],
                       s["proxy"]["within"], s["not_expressed"]]


def test_sglang_host_step_and_h20_bandwidth_are_the_fit_on_their_rows() -> None:
    """The two constants are the least-squares optimum on the six SGLang 1-token rows, on a
    grid of 0.01 ms x 10 GB/s around them (a constant moved off its fit fails here)."""
    from gpuhours import catalog
    from gpuhours.estimate import assumptions as A

    h = A.DECODE_HOST_STEP_S["sglang"].value
    bw = catalog.gpu("h20").decode_bw_gb_per_s
    assert gp.GPUS["H20 96GB"][1] == {}  # the catalog's h20, as the CLI resolves it
    assert (h, bw) == (1.13e-3, 1900.0)
    hosts = [round(h + i * 1e-5, 7) for i in range(-3, 4)]
    bws = [bw + i * 10.0 for i in range(-3, 4)]
    assert gp.fit_sglang_h20(hosts, bws) == (h, bw)
    # the tuned rows are the fit's residuals: all within 7%
    data = {r["row"]: r for r in gp.rows()}
    for row in gp.H20_FIT_ROWS:
        err = gp.predict(data[row]).error
        assert err is not None and abs(err) < 0.07, row


def test_generation_cli_on_the_h20_uses_the_bandwidth_its_rows_were_fitted_with() -> None:
    """`gpuhours generation -g h20` is what the H20 rows validate: row 91 (SGLang, Qwen3-8B,
    1-token prompt, 2,048 out, batch 1) measured 81.7 tokens/s; with the datasheet's 4.0 TB/s
    and the same host step the CLI said 152 (+86%). The figure says it is an assumption."""
    import json

    from typer.testing import CliRunner

    from gpuhours.cli import app

    res = CliRunner().invoke(app, ["generation", "-m", "qwen3-8b", "-g", "h20", "--engine",
                                   "sglang", "--prompt-tokens", "1", "--output-tokens", "2048",
                                   "--batch", "1", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert abs(data["output_tokens_per_s"]["value"] / 81.7 - 1) < 0.07
    assert data["bandwidth_gb_per_s"]["value"] == 1900.0
    assert data["bandwidth_gb_per_s"]["basis"] == "assumed"
    used = {a["name"]: a for a in data["assumptions"]}
    assert used["h20.decode_bw_gb_per_s"]["value"] == 1900.0
    assert "65, 73, 81, 91, 101, 111" in used["h20.decode_bw_gb_per_s"]["source"]
    assert used["h20.decode_bw_gb_per_s"]["basis"] == "assumed"
    # another Hopper keeps its datasheet figure
    res = CliRunner().invoke(app, ["generation", "-m", "qwen3-8b", "-g", "h100-sxm", "--json"])
    other = json.loads(res.output)["bandwidth_gb_per_s"]
    assert (other["value"], other["basis"]) == (3350.0, "catalog")


def test_the_doc_holds_the_current_h20_breakdown() -> None:
    """docs/generation.md's breakdown of the Qwen3 1-token rows (indented under its bullet) is
    the script's output today."""
    doc = DOC.read_text(encoding="utf-8")
    table = gp.h20_breakdown()
    assert "\n".join("  " + line if line else "" for line in table.split("\n")) in doc
    # the straight line it prints is fitted on the six dense SGLang rows: 1.51 ms, 1.38 TB/s
    assert "1.51 ms + weight bytes / 1.38 TB/s" in table


def test_the_h20_is_the_catalogs_with_the_fitted_bandwidth() -> None:
    """The H20 rows use the catalog's h20 unchanged (reported 148 dense bf16 TFLOPS, 296 fp8,
    96 GB, 4.0 TB/s), as `generation --gpu h20` does; the generation model decodes on it at
    the catalog's decode_bw_gb_per_s (1.9 TB/s, fitted on H20_FIT_ROWS, its source says so)."""
    from gpuhours.estimate.generation import decode_bandwidth_gb_per_s
    from gpuhours.resolve import resolve_gpu

    name, overrides, _ = gp.GPUS["H20 96GB"]
    gpu = resolve_gpu(name, **overrides)
    assert name == "h20" and overrides == {}
    assert (gpu.dense_tflops.bf16, gpu.dense_tflops.fp8, gpu.memory_gb) == (148, 296, 96)
    assert gpu.memory_bw_gb_per_s == 4000.0
    bw, source = decode_bandwidth_gb_per_s(gpu)
    assert bw == 1900.0 and source is not None and "fit_sglang_h20" in source
    # a bandwidth the user sets is theirs
    assert decode_bandwidth_gb_per_s(resolve_gpu("h20", bandwidth_gb_per_s=3100.0)) == (
        3100.0, "given by the user (--bandwidth-gb-per-s)")


def test_the_marlin_moe_launch_is_row_274s_and_holds_on_the_other_gptq_moe_rows(
        results: list[gp.Result]) -> None:
    """sglang_marlin_moe_empty_launch_s is set from row 274 alone (Qwen3-30B-A3B GPTQ-Int4,
    1-token prompt: its residual is under 1%); the other 11 GPTQ-Int4 MoE rows (longer prompts,
    Qwen3-235B-A22B on 4 H20s) set nothing and were +81%..+1134% without the launches."""
    from gpuhours.estimate import assumptions as A

    assert A.SGLANG_MARLIN_MOE_EMPTY_LAUNCH_S.value == pytest.approx(2.4e-6)
    assert "274" in gp.TUNED
    moe = {x.row["row"]: x.error for x in results if x.row["precision"] == "gptq-int4"
           and x.row["model"] in ("Qwen3-30B-A3B", "Qwen3-235B-A22B")}
    tuned = moe.pop("274")
    assert tuned is not None and abs(tuned) < 0.01
    assert len(moe) == 11
    assert all(e is not None and abs(e) <= 0.25 for e in moe.values()), moe


def test_the_quantised_gemm_constants_are_their_rows_fit_and_hold_on_the_h20s_awq_rows(
        results: list[gp.Result]) -> None:
    """dequant_weights_per_sm_cycle and quantised_gemm_fixed_s are the least-squares optimum
    on rows 22, 23, 55 and 56 (vLLM 0.6.3, Qwen2.5-7B and -72B GPTQ/AWQ-Int4 on A100s) on a
    grid of 0.1 x 0.5 us around them. Held out, another GPU (the H20: 78 SMs), engine (SGLang
    0.4.6) and model family: the 24 Qwen3 AWQ rows were 12 within 25% (+29%..+42% at prompts
    to 14K) when only bytes were costed; with both, all 24, none beyond +21%."""
    from gpuhours.estimate import assumptions as A

    rate, fixed = A.DEQUANT_WEIGHTS_PER_SM_CYCLE.value, A.QUANTISED_GEMM_FIXED_S.value
    assert (rate, fixed) == (14.9, 5e-6)
    assert gp.DEQUANT_FIT_ROWS == ("22", "23", "55", "56")
    assert all(r in gp.TUNED for r in gp.DEQUANT_FIT_ROWS)
    rates = [round(rate + i / 10, 1) for i in range(-3, 4)]
    fixeds = [round(fixed + i * 0.5e-6, 8) for i in range(-2, 3)]
    assert gp.fit_quantised_gemm(rates, fixeds) == (rate, fixed)
    awq = [x.error for x in results if x.row["precision"] == "awq-int4"
           and x.row["gpu"] == "H20 96GB" and x.row["engine"] == "sglang"]
    assert len(awq) == 24 and all(e is not None for e in awq)
    assert all(e is not None and abs(e) <= 0.25 for e in awq)
    assert max(e for e in awq if e is not None) < 0.22


def test_the_fp8_linear_host_time_is_the_fit_on_its_row() -> None:
    """assumptions.HF_FP8_LINEAR_HOST_S is the bisection on row 169 (Qwen3-0.6B-FP8 under
    transformers 4.51.3), to the microsecond: a constant moved off its fit fails here."""
    from gpuhours.estimate import assumptions as A

    assert gp.HF_FP8_FIT_ROW in gp.TUNED
    assert gp.fit_hf_fp8_linear_host() == pytest.approx(A.HF_FP8_LINEAR_HOST_S.value,
                                                        abs=1e-6)


def test_the_gptqmodel_linear_host_time_is_the_fit_on_its_row() -> None:
    """assumptions.HF_GPTQMODEL_LINEAR_HOST_S is the bisection on row 170 (Qwen3-0.6B
    GPTQ-Int8 under transformers 4.51.3 and GPTQModel 2.2.0), to the microsecond: a constant
    moved off its fit fails here."""
    from gpuhours.estimate import assumptions as A

    assert gp.HF_GPTQMODEL_FIT_ROW in gp.TUNED
    assert gp.fit_hf_gptqmodel_linear_host() == pytest.approx(
        A.HF_GPTQMODEL_LINEAR_HOST_S.value, abs=1e-6)


def test_the_transformers_gptq_and_awq_rows_are_expressed_with_their_library(
        results: list[gp.Result]) -> None:
    """The 24 Qwen3 rows of transformers 4.51.3 with GPTQModel 2.2.0 (8-bit) or AutoAWQ 0.2.9
    (4-bit) are costed with Generation.hf_quant_linear naming their library; none is left
    unexpressed."""
    quant = [x for x in results if x.row["engine"] == "hf-generate"
             and x.row["precision"] in ("gptq-int8", "awq-int4")]
    assert len(quant) == 24
    assert all(x.predicted is not None for x in quant)
    assert {gp._hf_quant_stack(x.row)[0] for x in quant  # type: ignore[index]
            } == {"gptqmodel-2.2.0", "autoawq-0.2.9"}


def test_the_shipped_generation_track_records_are_current():
    """What `gpuhours generation` prints for each engine (estimate/track_record.py) is this
    harness's held-out record of that engine as scripts/regen_docs.py writes it: stale when the
    model moved and the script was not run (the date aside); the engines' rows add up to the
    held-out tally."""
    from gpuhours.estimate.track_record import GENERATION_ENGINES, load

    total = 0
    for engine in GENERATION_ENGINES:
        shipped = load(f"generation-{engine}")
        assert shipped == gp.generation_track_record(engine, shipped.as_of), (
            f"track_record_generation-{engine}.json is stale: run python scripts/regen_docs.py")
        total += shipped.runs
    assert total == gp.summary(gp.results())["native"]["n"]
