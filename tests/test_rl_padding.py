"""pad_packed_to_longest: NeMo-RL under pipeline parallelism pads every packed micro-batch to the
longest of the batch (plan/rl_padding.py), worked by hand; where it cannot apply, an error
naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuhours.errors import InputError
from gpuhours.plan.rl_padding import (
    padded_micro_batch_tokens,
    padding_factor,
    sequences_per_packed_micro_batch,
)
from rl_plan import run_rl_phase

BASE: dict[str, Any] = {
    "project": "rl-pad",
    "hardware": {"gpu": "a100-80gb", "gpus_per_node": 8, "nodes": 1},
    "defaults": {"model": "qwen2.5-7b", "method": "full", "zero_stage": 1,
                 "checkpointing": True},
    "phases": [{"name": "grpo", "kind": "rl", "steps": 10, "prompts_per_step": 32,
                "generations_per_prompt": 8, "prompt_tokens": 512, "response_tokens": 1024,
                "max_response_tokens": 3584, "reward": {"kind": "rule"}, "pp": 2,
                "update_tokens_per_gpu": 4096, "scoring_tokens_per_gpu": 8192}],
}


def run(tmp_path: Path, **phase: Any) -> Any:
    return run_rl_phase(tmp_path, BASE, **phase)


def test_the_padded_micro_batch_by_hand():
    # NeMo-RL's 8B PP2 row: 4,096-token micro-batches holding 3 sequences of 127 + 1,019 =
    # 1,146 tokens, the longest 4,096: padded to the budget, 4,096 / 3,438 = 1.1914
    assert padded_micro_batch_tokens(4096, 3, 4096) == 4096
    assert padding_factor(4096, 3, 1146, 4096) == pytest.approx(4096 / 3438)
    # one sequence a micro-batch, the longest 2,000 under a 4,096 budget: padded to 2,000
    assert padded_micro_batch_tokens(4096, 1, 2000) == 2000
    assert padding_factor(4096, 1, 1500, 2000) == pytest.approx(4 / 3)
    # sequences all as long as the mean fill the budget's share: no padding
    assert padding_factor(4096, 2, 2048, 2048) == 1.0
    assert sequences_per_packed_micro_batch(8192, 1536) == 5
    assert sequences_per_packed_micro_batch(1000, 1536) == 1


def test_padding_costs_the_update_and_the_logprob_passes(tmp_path):
    """512 + 1,024 = 1,536 tokens a sequence, the longest 512 + 3,584 = 4,096. The update packs
    4,096 // 1,536 = 2 sequences (3,072 tokens) a micro-batch, padded to min(4,096, 2 x 4,096)
    = 4,096: x 4/3. The log-prob passes pack 8,192 // 1,536 = 5 (7,680 tokens), padded to
    8,192: x 16/15. The rollouts are untouched."""
    plain = run(tmp_path).details
    padded = run(tmp_path, pad_packed_to_longest=True)
    d = padded.details
    assert (plain["update_micro_batch"], d["update_micro_batch"]) == (2, 2)
    assert d["update_padding_factor"] == pytest.approx(4 / 3)
    assert d["logprob_padding_factor"] == pytest.approx(16 / 15)
    assert d["policy_update_s"] == pytest.approx(plain["policy_update_s"] * 4 / 3)
    assert d["old_policy_log_probs_s"] == pytest.approx(plain["old_policy_log_probs_s"] * 16 / 15)
    assert d["reference_model_s"] == pytest.approx(plain["reference_model_s"] * 16 / 15)
    assert d["rollout_generation_s"] == pytest.approx(plain["rollout_generation_s"])
    assert plain["update_padding_factor"] == 1.0
    # the formula says how many tokens were padding: 4,096 - 3,072 = 1,024 a micro-batch
    assert "4,096 tokens for 2 x 1,536 (1,024 padding" in padded.formula


def test_padding_where_it_cannot_apply_names_the_field(tmp_path):
    # micro-batches of sequences, not packed: nothing to pad to the longest packed one
    with pytest.raises(InputError, match="not packed") as caught:
        run(tmp_path, pad_packed_to_longest=True, update_tokens_per_gpu=None, micro_batch=2)
    assert "pad_packed_to_longest" in caught.value.where and "line" in caught.value.where
    # without pipeline parallelism NeMo-RL pads nothing to the longest
    with pytest.raises(InputError, match="runs pp 1") as caught:
        run(tmp_path, pad_packed_to_longest=True, pp=1)
    assert "pad_packed_to_longest" in caught.value.where


def test_the_padded_micro_batch_is_held_in_memory(tmp_path):
    """A 7B without recompute on an A100-80GB, 16,384-token budget: 10 sequences of 1,536 a
    micro-batch do not fit, 5 do (their memory taken at the longest: 7,680 tokens as one 4,096
    sequence). Padded, 5 sequences fill min(16,384, 5 x 4,096) = 16,384 tokens (4 x 4,096), as
    much as a micro-batch of 4 real 4,096-token sequences, which does not fit either: both halve
    to 2 (8,192 tokens)."""
    setup = {"update_tokens_per_gpu": 16384, "checkpointing": False}
    assert run(tmp_path, **setup).details["update_micro_batch"] == 5
    assert run(tmp_path, pad_packed_to_longest=True, **setup).details["update_micro_batch"] == 2
    # the same tokens of real sequences: every response at 3,584 (4,096 a sequence), 4 a budget
    full = run(tmp_path, response_tokens=3584, **setup).details["update_micro_batch"]
    assert full == 2
