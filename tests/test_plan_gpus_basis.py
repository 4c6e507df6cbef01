"""A plan phase that does not give `gpus` runs on the hardware's whole count (gpus_per_node x
nodes): the result, the terminal report, the living document and the schema say so."""

from __future__ import annotations

import textwrap
from pathlib import Path

from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.plan.budget import evaluate
from gpuhours.plan.load import load_plan
from gpuhours.plan.schema import Plan

PLAN = """\
project: gpus-basis
hardware: {gpu: h100-sxm, gpus_per_node: 4, nodes: 2}
phases:
  - {name: open, kind: finetune, model: qwen2-0.5b, method: lora, seq_len: 512,
     micro_batch: 4, tokens: 1e7}
  - {name: given, kind: finetune, model: qwen2-0.5b, method: lora, seq_len: 512,
     micro_batch: 4, tokens: 1e7, gpus: 2}
"""


def test_a_phase_without_gpus_says_where_its_count_came_from(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(textwrap.dedent(PLAN))
    b = evaluate(load_plan(path))
    open_, given = b.phases
    assert open_.gpus == 8  # 4 per node x 2 nodes
    assert open_.gpus_basis == "hardware.gpus_per_node 4 x nodes 2 (not given for the phase)"
    assert given.gpus == 2 and given.gpus_basis == ""
    out = CliRunner().invoke(app, ["plan", str(path), "--no-doc"], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert ("GPUs of open: 8, from hardware.gpus_per_node 4 x nodes 2 (not given for the phase)"
            in out.stdout)
    assert "GPUs of given" not in out.stdout


def test_the_schema_says_what_a_missing_gpus_means() -> None:
    from gpuhours.plan.schema import FinetunePhase

    text = FinetunePhase.model_fields["gpus"].description or ""
    assert "gpus_per_node x nodes" in text
    assert Plan.model_json_schema()  # still a valid schema


def test_a_phase_on_more_gpus_than_the_hardware_is_warned(tmp_path: Path) -> None:
    # 4 x 2 = 8 h100-sxm in the plan's hardware; a phase on 16 of them is costed on 16, and
    # says the hardware has 8; a phase on its own GPU type is not the hardware's to count
    path = tmp_path / "plan.yaml"
    path.write_text(textwrap.dedent(PLAN) + (
        "  - {name: big, kind: finetune, model: qwen2-0.5b, method: lora, seq_len: 512,\n"
        "     micro_batch: 4, tokens: 1e7, gpus: 16}\n"
        "  - {name: other, kind: finetune, model: qwen2-0.5b, method: lora, seq_len: 512,\n"
        "     micro_batch: 4, tokens: 1e7, gpus: 16, gpu: a100-80gb}\n"))
    b = evaluate(load_plan(path))
    big = next(p for p in b.phases if p.name == "big")
    assert big.gpus == 16
    over = [w for w in b.warnings if "more than the plan's hardware" in w]
    assert len(over) == 1 and over[0].startswith("big: uses 16 GPUs")
    assert "gpus_per_node 4 x nodes 2 = 8" in over[0]
