"""`estimate`/`fit` options for a GPTQ/AWQ base and LoRA's trainable embeddings (issue 14):
the CLI gives the same figures as the library, and a conflict is exit code 2 naming the option."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.estimate.memory import training_memory
from gpuhours.setup import Training

runner = CliRunner()


def _run(*args: str):
    return runner.invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


def test_estimate_takes_the_base_and_the_embeddings() -> None:
    r = _run("estimate", "--model", "qwen-7b", "--gpu", "a100-80gb", "--method", "lora",
             "--lora-trainable-embeddings", "--seq", "256", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["setup"]["lora_trainable_embeddings"] is True
    t = Training(model="qwen-7b", method="lora", lora_trainable_embeddings=True, seq_len=256)
    assert d["memory"]["weights_bytes"]["value"] == pytest.approx(
        training_memory(t.arch, t).weights_bytes)
    r = _run("estimate", "--model", "qwen-7b", "--gpu", "a100-80gb", "--method", "qlora",
             "--base-quant", "gptq-int4", "--precision", "fp16", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["setup"]["base_quant"] == "gptq-int4"


def test_a_quantised_base_without_qlora_is_refused_by_option() -> None:
    r = _run("estimate", "--model", "qwen-7b", "--gpu", "a100-80gb", "--base-quant",
             "gptq-int4")
    assert r.exit_code == 2
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert "--base-quant" in r.output and "qlora" in r.output


def test_fit_takes_them_too() -> None:
    r = _run("fit", "--model", "qwen-7b", "--gpu", "a100-80gb", "--method", "qlora",
             "--base-quant", "gptq-int4", "--precision", "fp16", "--seq", "512", "--json")
    assert r.exit_code == 0, r.output
