"""Small things a user trips on: a doubled basis label, a job of minutes printed as 0.0 GPU
hours, an error that blames the wrong part, a LoRA option silently ignored, an output path
whose typo would become a folder tree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.report.units import hours

runner = CliRunner()
GEN = ["generation", "--model", "qwen2.5-7b", "--gpu", "h100-sxm"]


def invoke(args: list[str]):
    return runner.invoke(app, args, env={"COLUMNS": "200", "NO_COLOR": "1"})


def test_no_basis_says_input_twice() -> None:
    out = invoke([*GEN, "--batch", "8", "--sequences", "1000"]).stdout
    assert "input: input:" not in out
    data = json.loads(invoke([*GEN, "--batch", "8", "--sequences", "1000", "--json"]).stdout)
    assert data["batch"]["basis"] == "input" and not data["batch"]["source"].startswith("input")


def test_hours_keep_three_significant_figures_below_ten() -> None:
    assert hours(0.0133) == "0.0133" and hours(2.5) == "2.5" and hours(1234.56) == "1,234.6"
    assert hours(9.876) == "9.88" and hours(0.0) == "0.0"
    out = invoke([*GEN, "--sequences", "1000"]).stdout
    line = next(x for x in out.splitlines() if x.startswith("GPU hours"))
    assert "0.0 for" not in line and "for 1,000 sequences" in line


def test_too_many_layers_blame_the_layers_not_the_embeddings() -> None:
    r = invoke(["estimate", "--params", "7e9", "--layers", "1000", "--gpu", "h100-sxm"])
    assert r.exit_code == 2
    text = " ".join(r.stderr.split())
    # hidden 4096 (the standard shape of 7B), vocabulary 32000: embeddings 2 x 32000 x 4096
    assert "the embeddings take 2.62e+08 and 1000 layers of hidden size 4096 at least" in text
    assert "embeddings alone" not in text


@pytest.mark.parametrize("command", [["estimate"], ["fit"], ["compare", "--tokens", "1e9"]])
def test_lora_rank_with_full_fine_tuning_is_refused(command: list[str]) -> None:
    r = invoke([*command, "--model", "qwen2-0.5b", "--gpu", "h100-sxm", "--method", "full",
                "--lora-rank", "8"])
    assert r.exit_code == 2, r.output
    assert "--lora-rank/--method" in r.stderr and "no LoRA adapters" in r.stderr


def test_lora_rank_with_lora_is_taken() -> None:
    r = invoke(["estimate", "--model", "qwen2-0.5b", "--gpu", "h100-sxm", "--method", "lora",
                "--lora-rank", "8", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["setup"]["lora_rank"] == 8


def test_an_output_in_a_missing_folder_is_refused(tmp_path: Path) -> None:
    plan = Path(__file__).resolve().parents[1] / "examples" / "h100-phase1a.yaml"
    target = tmp_path / "typo" / "deeper" / "BUDGET.md"
    r = invoke(["plan", str(plan), "--out", str(target)])
    assert r.exit_code == 2, r.output
    assert "--out" in r.stderr and "does not exist" in " ".join(r.stderr.split())
    assert not (tmp_path / "typo").exists()
    r = invoke(["report", str(plan), "--html", str(tmp_path / "typo" / "r.html")])
    assert r.exit_code == 2 and "--html" in r.stderr
    assert not (tmp_path / "typo").exists()
