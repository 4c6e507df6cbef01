"""A one-phase RL plan written to a file and evaluated: the helper the rl phase's tests share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpuhours.plan.budget import evaluate
from gpuhours.plan.load import load_plan


def grpo_plan(project: str) -> dict[str, Any]:
    """The plan the rl phase's tests start from: GRPO of Qwen2.5-7B with LoRA on one node of 8
    A100-80GB, 32 prompts x 8 generations of 1,024 tokens after 512, a rule reward."""
    return {
        "project": project,
        "hardware": {"gpu": "a100-80gb", "gpus_per_node": 8, "nodes": 1},
        "defaults": {"model": "qwen2.5-7b", "method": "lora", "checkpointing": True},
        "phases": [{"name": "grpo", "kind": "rl", "steps": 100, "prompts_per_step": 32,
                    "generations_per_prompt": 8, "prompt_tokens": 512,
                    "response_tokens": 1024, "reward": {"kind": "rule"}}],
    }


def write_rl_plan(tmp_path: Path, base: dict[str, Any], **phase: Any) -> Path:
    """`base` (a plan whose first phase is the rl phase) with `phase`'s keys over that phase,
    written to tmp_path/plan.yaml."""
    plan = {**base, "phases": [{**base["phases"][0], **phase}]}
    f = tmp_path / "plan.yaml"
    f.write_text(yaml.safe_dump(plan, sort_keys=False))
    return f


def run_rl_phase(tmp_path: Path, base: dict[str, Any], **phase: Any) -> Any:
    """The evaluated phase (a PhaseResult) of `write_rl_plan`'s plan."""
    return evaluate(load_plan(write_rl_plan(tmp_path, base, **phase))).phases[0]
