"""A plan phase may name a setting as Hugging Face's TrainingArguments does
(`per_device_train_batch_size` beside `micro_batch`, `gradient_accumulation_steps` beside
`grad_accum`, `gradient_checkpointing` beside `checkpointing`); both names at once is an error
(issue 18)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuhours.errors import InputError
from gpuhours.plan.budget import evaluate
from gpuhours.plan.load import load_plan


def _plan(tmp_path: Path, settings: dict, where: str = "phase") -> Path:
    phase = {"name": "sft", "kind": "finetune", "model": "qwen2-0.5b", "method": "lora",
             "seq_len": 512, "examples": 2000}
    plan: dict = {"project": "hf-names", "hardware": {"gpu": "a100-80gb"}, "phases": [phase]}
    if where == "phase":
        phase.update(settings)
    else:
        plan["defaults"] = settings
    f = tmp_path / "plan.yaml"
    f.write_text(yaml.safe_dump(plan, sort_keys=False))
    return f


@pytest.mark.parametrize("where", ["phase", "defaults"])
def test_hugging_face_names_are_the_same_settings(tmp_path: Path, where: str) -> None:
    hf = evaluate(load_plan(_plan(tmp_path, {"per_device_train_batch_size": 4,
                                             "gradient_accumulation_steps": 8,
                                             "gradient_checkpointing": True}, where))).phases[0]
    ours = evaluate(load_plan(_plan(tmp_path, {"micro_batch": 4, "grad_accum": 8,
                                               "checkpointing": True}, where))).phases[0]
    assert (hf.setup["micro_batch"], hf.setup["grad_accum"], hf.setup["checkpointing"]) == (
        4, 8, True)
    assert hf.gpu_hours_per_run == ours.gpu_hours_per_run


def test_both_names_at_once_is_an_error_naming_the_phase(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="`micro_batch` and `per_device_train_batch_size` name "
                                         "the same setting") as caught:
        load_plan(_plan(tmp_path, {"micro_batch": 4, "per_device_train_batch_size": 2}))
    assert "plan.yaml" in str(caught.value)


def test_a_bad_value_under_the_hugging_face_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="per_device_train_batch_size"):
        load_plan(_plan(tmp_path, {"per_device_train_batch_size": 0}))


def test_the_schema_lists_both_names() -> None:
    from gpuhours.plan.schema import Plan

    defs = Plan.model_json_schema()["$defs"]
    for phase in ("FinetunePhase", "PretrainPhase", "RLPhase", "TrainingSettings"):
        props = defs[phase]["properties"]
        assert props["per_device_train_batch_size"]["anyOf"] == props["micro_batch"]["anyOf"]
        assert "gradient_accumulation_steps" in props and "gradient_checkpointing" in props
