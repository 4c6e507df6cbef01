"""README.md shows the current 80-column output of the main commands: each marked block equals
what the command prints now (scripts/readme_outputs.py regenerates them; issue 18)."""

from __future__ import annotations

import pytest

from readme_outputs import README, refreshed, shown_outputs  # scripts/ is on the test path


def test_the_readme_shows_the_main_commands() -> None:
    commands = [s.command.split()[1] for s in shown_outputs(README.read_text(encoding="utf-8"))]
    assert {"estimate", "fit", "plan", "compare"} <= set(commands)


def test_every_output_the_readme_shows_is_current() -> None:
    text = README.read_text(encoding="utf-8")
    _, stale = refreshed(text)
    if stale:
        pytest.fail("README.md shows stale output of: " + "; ".join(stale)
                    + ". Run `python scripts/readme_outputs.py` and commit README.md.")


def test_a_shown_block_is_80_columns_of_output_under_its_command() -> None:
    for shown in shown_outputs(README.read_text(encoding="utf-8")):
        first, *rest = shown.body.splitlines()
        assert first == f"$ {shown.command}"
        assert rest and max(len(line) for line in rest) <= 80, shown.command
        assert "…" not in shown.body
