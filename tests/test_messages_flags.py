"""Messages name only options the command has, and every command offers close GPU names."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.track.ledger import Ledger

runner = CliRunner()


def err(args: list[str]) -> str:
    r = runner.invoke(app, args, env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    return " ".join(r.stderr.split())


def test_global_batch_with_a_batch_names_grad_accum() -> None:
    text = err(["estimate", "--model", "llama-2-70b", "--gpu", "a100-80gb", "--gpus", "64",
                "--seq", "4096", "--global-batch", "64", "--batch", "2"])
    assert "--batch and --grad-accum" in text and "--accum." not in text


def test_the_chosen_setup_names_grad_accum() -> None:
    r = runner.invoke(app, ["estimate", "--model", "llama-2-70b", "--gpu", "a100-80gb",
                            "--gpus", "64", "--seq", "4096", "--json"])
    assert r.exit_code == 0, r.output
    assert "Give --batch, --grad-accum, --checkpointing or --zero" in r.stdout
    assert "--accum," not in r.stdout


@pytest.mark.parametrize("args", [
    ["compare", "--model", "qwen2-0.5b", "--gpu", "h100-sxm,foo", "--tokens", "1e9"],
    ["catalog", "prices", "--gpu", "foo"],
])
def test_priced_commands_do_not_offer_options_they_lack(args: list[str]) -> None:
    text = err(args)
    assert "unknown GPU 'foo'" in text and "--gpu" in text
    assert "--peak-tflops" not in text and "--memory-gb" not in text
    assert "gpuhours catalog gpus" in text


def test_generation_names_only_its_own_gpu_option() -> None:
    text = err(["generation", "--model", "qwen2-0.5b", "--gpu", "h1000"])
    assert "Did you mean: h100-sxm, h800, h200?" in text
    assert "--peak-tflops" not in text and "--bandwidth-gb-per-s" in text


@pytest.mark.parametrize("command", ["estimate", "fit"])
def test_estimate_and_fit_offer_close_names(command: str) -> None:
    text = err([command, "--model", "qwen2-0.5b", "--gpu", "h1000"])
    assert "Did you mean: h100-sxm, h800, h200?" in text


def test_estimate_with_a_ledger_offers_close_names(tmp_path) -> None:
    path = tmp_path / "ledger.sqlite"
    Ledger.open(path, create=True)
    text = err(["estimate", "--model", "qwen2-0.5b", "--gpu", "h1000", "--ledger", str(path)])
    assert "Did you mean: h100-sxm, h800, h200?" in text
    assert "gpuhours ledger list" in text
