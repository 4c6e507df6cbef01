"""Every command's --help at 80 columns (the width when piped) keeps each option name whole: no
line longer than 80, nothing cut with '…' (issue 18: Rich's option tables cut
--images-per-example to --images-per-exa…)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app

COMMANDS = [[], ["estimate"], ["fit"], ["generation"], ["plan"], ["compare"], ["trace"],
            ["bench"], ["bench-data"], ["doctor"], ["report"], ["ledger", "list"],
            ["storage", "prune"], ["export", "mlflow"], ["catalog", "models"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "gpuhours")
def test_help_keeps_every_option_name_whole_at_80_columns(command: list[str]) -> None:
    r = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert "…" not in r.output
    assert max(len(line) for line in r.output.splitlines()) <= 80
    assert "--help" in r.output


def test_the_longest_option_names_are_printed_whole() -> None:
    r = CliRunner().invoke(app, ["estimate", "--help"], env={"COLUMNS": "80"})
    for name in ("--images-per-example", "--inter-node-gb-per-s", "--usd-per-gpu-hour",
                 "--checkpointing / --no-checkpointing", "--tokens-per-example"):
        assert name in r.output
