"""transformers' MoE expert loop by release (walk p9 F24): 4.51 loops over every expert,
Mixtral/Qwen2-MoE from 4.52 and Qwen3-MoE from 4.53 over the experts hit, 5.x over none
(grouped kernels). Worked by hand from HF_GENERATE_HOST_PER_EXPERT_S (79 us)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.generation import hf_generate_experts_looped
from gpuhours.resolve import resolve_model


def test_experts_looped_by_release() -> None:
    qwen3, _ = resolve_model("qwen3-30b-a3b")  # 128 experts, 8 a token
    assert hf_generate_experts_looped(qwen3, "4.51.3", 1) == 128
    assert hf_generate_experts_looped(qwen3, "4.52", 1) == 128  # Qwen3-MoE's came in 4.53
    assert hf_generate_experts_looped(qwen3, "4.53.1", 1) == pytest.approx(8)
    # 8 tokens of top-8 over 128: 128 (1 - (120/128)^8) = 51.0 distinct experts expected
    assert hf_generate_experts_looped(qwen3, "4.53", 8) == pytest.approx(
        128 * (1 - (120 / 128) ** 8))
    assert hf_generate_experts_looped(qwen3, "5.0", 8) == 0


def _json(version: str) -> dict:
    r = CliRunner().invoke(app, ["generation", "--model", "qwen3-30b-a3b", "--gpu", "h100",
                                 "--engine", "hf-generate", "--batch", "1",
                                 "--hf-transformers-version", version, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _step_s(version: str) -> float:
    return _json(version)["decode_step_s_first"]["value"]


def test_a_decode_step_loses_the_empty_experts_from_4_53() -> None:
    # the same step but for 128 - 8 experts a layer not looped: 48 x 120 x 79 us
    gone = _step_s("4.51.3") - _step_s("4.53")
    assert gone == pytest.approx(48 * 120 * A.HF_GENERATE_HOST_PER_EXPERT_S.value, rel=1e-6)


def test_the_per_expert_constant_is_listed_only_where_a_loop_runs() -> None:
    def listed(version: str) -> bool:
        return any(a["name"] == "hf_generate_host_per_expert_s"
                   for a in _json(version)["assumptions"])

    assert listed("4.51.3") and listed("4.53") and not listed("5.0")
