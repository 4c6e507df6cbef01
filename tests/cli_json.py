"""`gpuhours estimate --json` run in-process, its object read back: shared by the tests that
hold a CLI flag to the figures it moves."""
from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner

from gpuhours.cli import app

runner = CliRunner()

#: Llama-3.2-3B full fine-tuning in bf16 on an A100-80GB, 2 x 4,096 tokens a micro-batch
LLAMA_3B_FULL = ("--model", "llama-3.2-3b", "--gpu", "a100-80gb", "--method", "full",
                 "--precision", "bf16", "--batch", "2", "--seq", "4096")


def estimate_json(*args: str) -> dict[str, Any]:
    """The estimate's JSON object for these arguments; the command must exit 0."""
    result = runner.invoke(app, ["estimate", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)
