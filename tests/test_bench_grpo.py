"""`gpuhours bench --workload grpo` on this CPU: one real GRPO step of a tiny policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app

pytest.importorskip("torch")
pytest.importorskip("peft")

TINY = ["--model", "qwen2.5-0.5b", "--set", "num_hidden_layers=2", "--set", "hidden_size=64",
        "--set", "intermediate_size=128", "--set", "num_attention_heads=4",
        "--set", "num_key_value_heads=2", "--set", "vocab_size=512", "--precision", "fp32",
        "--threads", "1", "--workload", "grpo", "--prompt-tokens", "8", "--output-tokens", "8"]
PARTS = ["rollout generation", "reward", "old-policy log-probs", "reference model",
         "policy update"]
runner = CliRunner()


@pytest.mark.parametrize("method", ["full", "lora"])
def test_one_grpo_step_is_timed_part_by_part(tmp_path: Path, method: str) -> None:
    from gpuhours.track.ledger import Ledger

    ledger = tmp_path / "l.sqlite"
    r = runner.invoke(app, ["bench", *TINY, "--method", method, "--prompts", "2",
                            "--generations", "3", "--batch", "2", "--ledger", str(ledger),
                            "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)["result"]
    assert list(res["parts_s"]) == PARTS
    assert all(v > 0 for v in res["parts_s"].values())
    assert res["step_s"] == pytest.approx(sum(res["parts_s"].values()))
    # 2 prompts x 3 responses of 8 + 8 tokens
    assert res["sequences"] == 6 and res["tokens_per_step"] == 6 * 16
    with Ledger.open(ledger, create=False) as book:
        (m,) = book.measurements()
    assert m.kind == "grpo" and m.setup["method"] == method
    assert m.step_time_median_s == pytest.approx(res["step_s"])


def test_a_group_of_one_is_refused() -> None:
    r = runner.invoke(app, ["bench", *TINY, "--generations", "1", "--no-ledger"])
    assert r.exit_code == 2, r.output
    assert "--generations" in r.output and "Traceback" not in r.output
