"""Absurd input is refused with exit code 2 (or warned about where the run really does it):
amounts far beyond any real run, fractional steps, GPU figures far beyond any accelerator,
bytes per weight that describe no format, and examples longer than --seq unpacked."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app

runner = CliRunner()
BASE = ["estimate", "--model", "qwen2-0.5b", "--gpu", "h100-sxm"]
GEN = ["generation", "--model", "qwen2.5-7b", "--gpu", "h100-sxm"]


def refused(args: list[str], option: str, pattern: str) -> None:
    r = runner.invoke(app, args, env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and r.stdout == ""
    assert option in r.stderr and pattern in r.stderr, r.stderr


@pytest.mark.parametrize(("args", "option", "pattern"), [
    (["--tokens", "1e30"], "--tokens", "more than 1e+15 tokens"),
    (["--tokens", "2e15"], "--tokens", "more than 1e+15 tokens"),
    (["--steps", "0.5"], "--steps", "a whole number of optimizer steps, got 0.5"),
    (["--steps", "1000.5"], "--steps", "a whole number of optimizer steps, got 1000.5"),
    (["--steps", "2e12"], "--steps", "more than 1e+12"),
    (["--examples", "1000", "--epochs", "1e7"], "--epochs", "more than 1e+06"),
    # the largest catalog peak is GB200's 2,500 dense bf16 TFLOPS: 10x that is the ceiling
    (["--peak-tflops", "1e9"], "--peak-tflops", "more than 10x the largest in the GPU catalog "
                                                 "(2500, gb200)"),
    (["--memory-gb", "1e5"], "--memory-gb", "more than 10x"),
])
def test_estimate_refuses_absurd_numbers(args: list[str], option: str, pattern: str) -> None:
    refused([*BASE, *args], option, pattern)


def test_the_limits_let_real_runs_through() -> None:
    # Llama 3's 15.6T tokens, a 24,000 TFLOPS GPU (10x less than the ceiling's reach), 1e6 steps
    for args in (["--tokens", "15.6T"], ["--steps", "1e6"],
                 ["--peak-tflops", "24000", "--tokens", "1e9"]):
        r = runner.invoke(app, [*BASE, *args, "--json"])
        assert r.exit_code == 0, r.output


@pytest.mark.parametrize("w", ["3", "0.3", "1.5", "0.25"])
def test_generation_refuses_bytes_per_weight_of_no_format(w: str) -> None:
    refused([*GEN, "--weight-bytes-per-param", w], "--weight-bytes-per-param",
            "bytes per weight is no format the estimate knows")


@pytest.mark.parametrize("w", ["2", "1", "0.56", "0.5", "4"])
def test_generation_takes_the_formats_it_costs(w: str) -> None:
    r = runner.invoke(app, [*GEN, "--weight-bytes-per-param", w, "--json"])
    assert r.exit_code == 0, r.output


def test_unpacked_examples_longer_than_seq_warn_what_is_dropped() -> None:
    # 1,000 examples of 5,000 tokens cut to 2,048: 5e6 given, 2.048e6 trained, 2.952e6 dropped
    r = runner.invoke(app, [*BASE, "--seq", "2048", "--examples", "1000",
                            "--tokens-per-example", "5000", "--json"])
    assert r.exit_code == 0, r.output
    e = json.loads(r.stdout)
    assert e["totals"]["tokens"]["value"] == pytest.approx(2.048e6)
    warning = next(w for w in e["warnings"] if "longer than --seq 2048" in w)
    assert "at least 2.95e+06 of the 5e+06 tokens given are dropped (59%" in warning
    packed = json.loads(runner.invoke(app, [*BASE, "--seq", "2048", "--examples", "1000",
                                            "--tokens-per-example", "5000", "--packed",
                                            "--json"]).stdout)
    assert packed["totals"]["tokens"]["value"] >= 5e6
    assert not any("longer than --seq" in w for w in packed["warnings"])
