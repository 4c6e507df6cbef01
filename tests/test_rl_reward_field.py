"""An rl phase's unknown reward model is named by its own field, `reward.model`, not by the
policy's `model` (walk p9 F19)."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from gpuhours.cli import app


def test_unknown_reward_model_names_reward_model(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({
        "project": "rm", "hardware": {"gpu": "h100-sxm", "gpus_per_node": 8, "nodes": 1},
        "phases": [{"name": "grpo", "kind": "rl", "model": "qwen2.5-7b", "method": "lora",
                    "checkpointing": True, "steps": 10, "prompts_per_step": 16,
                    "generations_per_prompt": 4, "prompt_tokens": 256, "response_tokens": 256,
                    "reward": {"kind": "model", "model": "nope-7b"}}]}, sort_keys=False))
    r = CliRunner().invoke(app, ["plan", str(plan)], env={"COLUMNS": "200"})
    assert r.exit_code == 2, r.output
    assert "phase 'grpo', field 'reward.model'" in r.output
    assert "nope-7b" in r.output and "field 'model'" not in r.output
    assert "Traceback" not in r.output
