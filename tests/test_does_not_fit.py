"""'Does not fit' is a verdict, not bad input: exit code 1 in every command (2 is bad input),
and with --json the result is JSON all the same."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import DOES_NOT_FIT_EXIT_CODE

#: Llama-2-7B full fine-tuning on one 24 GB card: 16 bytes/param of state alone is ~100 GiB
TOO_BIG = ["--model", "llama-2-7b", "--gpu", "rtx-4090", "--batch", "1", "--seq", "512"]


def test_estimate_that_does_not_fit_exits_1_with_the_reason() -> None:
    r = CliRunner().invoke(app, ["estimate", *TOO_BIG])
    assert r.exit_code == DOES_NOT_FIT_EXIT_CODE == 1
    assert "--batch" in r.stderr and "needs" in r.stderr and "gpuhours fit" in r.stderr
    assert r.stdout == ""


def test_estimate_json_that_does_not_fit_is_still_json() -> None:
    r = CliRunner().invoke(app, ["estimate", *TOO_BIG, "--json"])
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert data["memory"]["fits"] is False
    assert data["memory"]["total_bytes"]["value"] > data["memory"]["device_bytes"]["value"]


def test_fit_with_nothing_that_fits_exits_1() -> None:
    r = CliRunner().invoke(app, ["fit", "--model", "llama-2-70b", "--gpu", "t4", "--precision",
                                 "fp16-mixed", "--json"])
    assert r.exit_code == 1
    assert json.loads(r.stdout)["largest_micro_batch"] is None


def test_bad_input_is_still_2() -> None:
    r = CliRunner().invoke(app, ["estimate", *TOO_BIG, "--batch", "0"])
    assert r.exit_code == 2


def test_a_plan_phase_that_does_not_fit_exits_1(tmp_path) -> None:
    plan = tmp_path / "p.yaml"
    plan.write_text("project: p\nhardware: {gpu: rtx-4090}\nphases:\n"
                    "  - {name: sft, kind: finetune, model: llama-2-7b, method: full,\n"
                    "     tokens: 1.0e+9, seq_len: 512, micro_batch: 1}\n")
    r = CliRunner().invoke(app, ["plan", str(plan), "--no-doc"])
    assert r.exit_code == 1, r.output
    assert "line 4" in r.stderr and "sft" in r.stderr and "needs" in r.stderr
