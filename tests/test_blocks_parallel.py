"""Per-GPU parameters of the mixed models (issue 15): with expert parallelism the routed
experts of the MoE layers are split, the dense first layers (DeepSeek) have none, and gpt-oss's
experts carry their biases. Sums over the ranks give the model back."""

from __future__ import annotations

import pytest

from gpuhours.estimate.parallel import Layout, local_params
from gpuhours.estimate.params import count_params
from gpuhours.resolve import resolve_model


@pytest.mark.parametrize("name", ["deepseek-v3", "gpt-oss-20b"])
def test_expert_parallel_split_gives_the_model_back(name: str) -> None:
    """ep 8: each GPU keeps the non-expert weights and an eighth of the experts; dense + 8 x
    expert share is the whole model (to within the layers' rounding, under one parameter a
    layer)."""
    arch = resolve_model(name)[0]
    counts = count_params(arch)
    one = local_params(arch, counts, Layout(ep=1))
    split = local_params(arch, counts, Layout(ep=8))
    assert split.dense == pytest.approx(one.dense, abs=1e-3)
    assert split.expert * 8 == pytest.approx(one.expert, rel=1e-12)
    assert one.total == pytest.approx(counts.total, abs=arch.num_layers)


def test_deepseek_v3_experts_by_hand() -> None:
    """58 MoE layers x 256 experts x 3 x 7168 x 2048 on one GPU; the 3 dense layers have none."""
    arch = resolve_model("deepseek-v3")[0]
    expert = local_params(arch, count_params(arch), Layout(ep=1)).expert
    assert expert == pytest.approx(58 * 256 * 3 * 7168 * 2048, rel=1e-12)


def test_gpt_oss_expert_biases_travel_with_the_experts() -> None:
    """gpt-oss-20b: 24 layers x 32 experts x (3 x 2880 x 2880 + 2 x 2880 + 2880)."""
    arch = resolve_model("gpt-oss-20b")[0]
    expert = local_params(arch, count_params(arch), Layout(ep=1)).expert
    assert expert == pytest.approx(24 * 32 * (3 * 2880 * 2880 + 3 * 2880), rel=1e-12)
