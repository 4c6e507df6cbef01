"""The plan's does-not-fit hint names only the changes a setup does not already have."""

from __future__ import annotations

from gpuhours.plan.phases import _fit_hint


def test_a_setup_with_checkpointing_is_not_told_to_turn_it_on():
    hint = _fit_hint({"micro_batch": 4, "checkpointing": True, "method": "lora",
                      "zero_stage": 2})
    assert "checkpointing" not in hint
    assert hint.startswith("Lower micro_batch, use QLoRA, shard the training state (ZeRO-3)")


def test_a_setup_with_every_change_made_is_told_to_use_more_gpus():
    hint = _fit_hint({"micro_batch": 1, "checkpointing": True, "method": "qlora",
                      "zero_stage": 3})
    assert hint == "Use more or larger GPUs (`gpuhours fit` shows what fits)."


def test_full_fine_tuning_without_checkpointing_gets_every_change():
    hint = _fit_hint({"micro_batch": 2, "checkpointing": False, "method": "full",
                      "zero_stage": 0})
    assert hint == ("Lower micro_batch, turn on checkpointing, use LoRA, shard the training "
                    "state (ZeRO-3) or use more or larger GPUs (`gpuhours fit` shows what fits).")
