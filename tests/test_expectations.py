"""Expectations a plan states are checked against physics and against each other: the seeds'
own figures (examples/) make the warnings show."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuhours.plan.budget import evaluate
from gpuhours.plan.load import load_plan

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _phase(plan: str, name: str):
    budget = evaluate(load_plan(EXAMPLES / plan))
    return next(p for p in budget.phases if p.name == name)


def test_seed_004_throughput_and_steps_per_hour_disagree_with_each_other() -> None:
    # 1,900 steps/h x 1,024 tokens / 3,600 s = 540 tokens/s, not the stated 225: 2.4x
    p = _phase("qwen2-0.5b-experiments.yaml", "experiments")
    own = [w for w in p.warnings if "own figures disagree" in w]
    assert len(own) == 1
    assert "imply 426 tokens per step" in own[0]  # 225 x 3600 / 1900 = 426.3
    assert "1/2.4 the tokens per step of the setup (1,024.0)" in own[0]


def test_seed_002_steps_are_examples_not_optimizer_steps() -> None:
    # 600K examples x 3 epochs / (micro-batch 4 x accumulation 2) = 225,000 steps, not 1.8M
    p = _phase("h100-phase1a.yaml", "phase1a")
    assert p.details["optimizer_steps"] == 225_000
    assert any("states 1,800,000.0 steps; physics gives 225,000.0 steps" in w
               for w in p.warnings)


def test_seed_001_hours_per_steps_forget_the_eight_gpus() -> None:
    # 5,000 steps at 1,000 per 35 h on 8 GPUs = 175 h x 8 = 1,400 GPU h, not 175
    p = _phase("pixelis.yaml", "rft")
    own = [w for w in p.warnings if "own figures disagree" in w]
    assert len(own) == 1
    assert "1,398.6 GPU hours, 8.0x the stated GPU hours (175.0)" in own[0]


@pytest.mark.parametrize("field", ["steps", "steps_per_hour"])
def test_new_expectations_are_strict_positive_numbers(field: str) -> None:
    from gpuhours.errors import InputError
    from gpuhours.plan.load import parse_plan

    text = (EXAMPLES / "h100-phase1a.yaml").read_text()
    assert "      steps: 1800000" in text
    text = text.replace("      steps: 1800000", f"      {field}: -1", 1)
    with pytest.raises(InputError, match=rf"{field}.*greater than 0"):
        parse_plan(text, "plan.yaml")


def test_seed_004_throughput_ratio_reads_physics_against_the_stated_figure() -> None:
    # the plan states 225 tokens/s per GPU; physics gives about 4,948: physics is ~22x the
    # stated figure, as the GPU-hours line of the same check says it ("1/2.4 of it" when
    # physics is below what was stated)
    p = _phase("qwen2-0.5b-experiments.yaml", "experiments")
    line = next(w for w in p.warnings if "states 225 tokens/s per GPU" in w)
    physics = float(line.split("physics gives ")[1].split(" tokens/s")[0].replace(",", ""))
    ratio = physics / 225
    assert ratio > 10
    assert f"({ratio:.1f}x of it)" in line
