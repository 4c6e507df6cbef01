"""A plan phase's `from:`: a training tool's config fills the settings the phase leaves unset."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuhours.errors import InputError
from gpuhours.plan.budget import evaluate
from gpuhours.plan.load import load_plan
from test_importers import AXOLOTL  # noqa: E402  (tests/ is on the path under pytest)


def _plan(tmp_path: Path, phase: dict) -> Path:
    (tmp_path / "lora-8b.yml").write_text(AXOLOTL)
    plan = {"project": "from-test", "hardware": {"gpu": "a100-80gb"},
            "phases": [{"name": "sft", "kind": "finetune", "examples": 2000, "epochs": 1,
                        **phase}]}
    f = tmp_path / "plan.yaml"
    f.write_text(yaml.safe_dump(plan, sort_keys=False))
    return f


def test_a_phase_takes_its_setup_from_an_axolotl_file(tmp_path: Path) -> None:
    r = evaluate(load_plan(_plan(tmp_path, {"from": "lora-8b.yml"}))).phases[0]
    s = r.setup
    assert (s["model"], s["method"], s["micro_batch"], s["seq_len"], s["grad_accum"]) == (
        "llama-3-8b", "qlora", 2, 4096, 4)
    assert s["checkpointing"] is True
    assert r.warnings[0].startswith("setup read from lora-8b.yml (axolotl)")
    assert any("load_in_8bit=true -> base_quant int8-bnb" in w for w in r.warnings)


def test_the_phases_own_settings_win_over_the_file(tmp_path: Path) -> None:
    r = evaluate(load_plan(_plan(tmp_path, {"from": "lora-8b.yml", "micro_batch": 1,
                                            "seq_len": 2048}))).phases[0]
    assert (r.setup["micro_batch"], r.setup["seq_len"], r.setup["grad_accum"]) == (1, 2048, 4)


def test_a_missing_file_names_the_plan_line_and_field(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="field 'from'") as caught:
        evaluate(load_plan(_plan(tmp_path, {"from": "nope.yml"})))
    assert "plan.yaml, line" in str(caught.value)
