"""Issue 13's MoE rows at batch and tensor parallelism (generation_published.csv rows 410-462)
and the trial of expert-read rules over them (scripts/gpuhours_dev/validation/
moe_expert_reads.py): every row of each source table is present and expressed, held out; the
trial's efficiencies are hand-worked; the trial leaves the estimate as it found it."""

from __future__ import annotations

from collections import Counter

import pytest

from gpuhours.estimate import generation as G
from gpuhours.resolve import resolve_model
from gpuhours_dev.validation import generation_published as gp
from gpuhours_dev.validation import moe_expert_reads as trial

NEW = [str(n) for n in range(410, 463)]


def test_every_row_of_each_source_table_is_there() -> None:
    rows = {r["row"]: r for r in gp.rows()}
    by_source = Counter(rows[n]["source"].split(" (")[0] for n in NEW)
    # vllm#2542 "This PR" (batch 1-64); #3240 both tables (2 x 7); #3692 two tables x TP 4, 8 x
    # batch 8-64 (2 x 2 x 4); #4002 four blocks x batch 8-32 (4 x 3); InferenceX concurrency 8-64
    assert by_source == {"vllm-project/vllm pull/2542": 7, "vllm-project/vllm pull/3240": 14,
                         "vllm-project/vllm pull/3692": 16, "vllm-project/vllm pull/4002": 12,
                         "SemiAnalysisAI/InferenceX issues/870": 4}
    assert [int(rows[n]["batch"]) for n in NEW[:7]] == [1, 2, 4, 8, 16, 32, 64]


def test_the_new_rows_are_expressed_with_their_own_engine_and_held_out() -> None:
    rows = {r["row"]: r for r in gp.rows()}
    for n in NEW:
        x = gp.predict(rows[n])
        assert x.predicted is not None and x.error is not None, (n, x.why)
        assert n not in gp.TUNED and n not in gp.DEPENDENT
    # vLLM of 2024 ran the V0 engine; the DeepSeek rows are SGLang's
    assert {gp._engine(rows[n]) for n in NEW[:49]} == {"vllm-v0"}
    assert {gp._engine(rows[n]) for n in NEW[49:]} == {"sglang"}


def test_a_benchmark_latency_row_is_a_time_so_a_longer_prediction_reads_negative() -> None:
    # row 447: Mixtral 8x22B, 4 A100, batch 8, measured 5.79 s; the estimate is slower there
    row = {r["row"]: r for r in gp.rows()}["447"]
    x = gp.predict(row)
    assert x.predicted is not None and x.error is not None
    assert x.predicted > float(row["measured"]) and x.error < 0
    assert x.error == pytest.approx(float(row["measured"]) / x.predicted - 1)


def test_the_width_rule_is_the_estimates_own() -> None:
    # DeepSeek-V3 at TP 32: 0.80 x 224 / (224 + 500), by hand
    arch, _ = resolve_model("deepseek-v3", None)
    assert trial.expert_read_efficiency("width", arch, 32, 8) == pytest.approx(0.247514, abs=1e-6)
    assert G.decode_bandwidth_efficiency(arch, 32) == pytest.approx(0.247514, abs=1e-6)


def test_the_touched_width_rule_by_hand() -> None:
    # Mixtral 8x22B (8 experts, top 2, hidden 6144) at TP 8, 8 tokens: 8 x (1 - (6/8)^8)
    # = 7.199097 experts touched, d = 7.199097 x 768 = 5528.91, 0.80 x d / (d + 500) = 0.733653
    arch, _ = resolve_model("mixtral-8x22b", None)
    assert G.experts_touched(arch, 8) == pytest.approx(7.199097, abs=1e-6)
    assert trial.expert_read_efficiency("touched-hidden", arch, 8, 8) == pytest.approx(
        0.733653, abs=1e-6)


def test_one_experts_width_by_hand() -> None:
    # Mixtral 8x22B at TP 8: moe_intermediate_size 16384 / 8 = 2048, 0.80 x 2048 / 2548
    arch, _ = resolve_model("mixtral-8x22b", None)
    assert trial.expert_read_efficiency("expert-ffn", arch, 8, 8) == pytest.approx(
        0.643014, abs=1e-6)


def test_the_k_depth_rule_by_hand() -> None:
    # DeepSeek-V3 at TP 32: gate/up K = 7168 -> 7168 / 7543 = 0.950285; down K = 2048 / 32 = 64
    # -> 64 / 439 = 0.145786; by time 2/3 / 0.950285 + 1/3 / 0.145786 = 2.988002; 0.80 / that
    arch, _ = resolve_model("deepseek-v3", None)
    assert trial.expert_read_efficiency("k-depth", arch, 32, 8) == pytest.approx(
        0.267737, abs=1e-6)
    assert trial.expert_read_efficiency("none", arch, 32, 8) == pytest.approx(0.80)
    with pytest.raises(ValueError, match="unknown rule 'wide'"):
        trial.expert_read_efficiency("wide", arch, 32, 8)


def test_the_trial_puts_the_estimate_back() -> None:
    row = {r["row"]: r for r in gp.rows()}["455"]
    before = gp.predict(row).predicted
    with trial.expert_reads("none"):
        during = gp.predict(row).predicted
    assert before is not None and during is not None
    assert during < before  # experts read faster: a shorter batch
    assert gp.predict(row).predicted == before
