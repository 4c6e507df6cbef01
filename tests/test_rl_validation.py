"""The rl phase against published RL steps (scripts/gpuhours_dev/validation/rl.py, docs/rl.md).

One constant was set from these rows (the driver's rate, from rows 12 and 14, 1-based); the
floor below is today's result, held so that a change that makes it worse fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuhours_dev.validation import rl

DOC = Path(__file__).resolve().parents[1] / "docs" / "rl.md"


def test_every_case_names_a_real_row_and_states_its_assumptions():
    data = rl.rows()
    assert len(data) == 40
    for c in rl.CASES:
        assert data[c.row]["step_time_s"], c.row
        assert c.assumed


def test_published_rl_steps_floor():
    results = {}
    for c in rl.CASES:
        predicted, why = rl.predict(c)
        measured = float(rl.rows()[c.row]["step_time_s"])
        results[c.row] = None if predicted is None else predicted / measured - 1
    errors = [e for e in results.values() if e is not None]
    assert len(errors) == 29
    assert sum(abs(e) <= 0.25 for e in errors) >= 14
    # 9: the verl 7B row on 128 H20s went from +97% to +128% when the batch's transfer through
    # verl's driver was counted (+152% with the H20's decode bandwidth of 1.9 TB/s); its assumed
    # mean response (a quarter of the maximum) is what
    # is off (test_verl_inferred_means_agree_across_gpu_counts); the three fully-async 7B rows
    # at that mean too (+483% to +1009%: test_streamed_rows_at_their_twins_mean); EasyR1's
    # Qwen2.5-VL-3B and 7B (1/2) rows, -66% and -50% (docs/rl.md: the update and a part of the
    # step the model does not hold)
    assert sum(e < -0.5 or e > 1.0 for e in errors) <= 9
    # EasyR1's rows fast, none by more than 3x; the 7B on 8 L20s (a catalog row added for
    # it) within 25%
    assert all(-0.67 < results[row] < 0 for row in (18, 19, 20, 21))
    assert abs(results[21]) <= 0.25
    # verl's fully-async 30B-A3B row (streamed rollouts on 96 GPUs, 32 train): within 25%
    assert abs(results[17]) <= 0.25
    # the rows whose source states the mean response (NeMo-RL): none off by 2x
    stated = [e for row, e in results.items()
              if e is not None and rl.rows()[row]["response_tokens_mean"]]
    assert len(stated) == 10 and all(-0.5 < e < 1.0 for e in stated)
    assert sum(abs(e) <= 0.25 for e in stated) >= 8
    # the NeMo-RL Llama-3.1-8B H100 rows: a tail-led step, colocated and async; Qwen3-32B on
    # 32 H100s with Megatron's TP4 PP4 (vLLM's memory share as NeMo-RL sets it, 0.6 colocated and
    # 0.8 dedicated: the colocated 8B step then runs 2 waves, not 3, and is -14%, was -3% at 0.5)
    assert abs(results[0]) < 0.15 and abs(results[1]) < 0.10 and abs(results[3]) < 0.10
    # the GB200 Qwen3-32B colocated step (+32% at a 0.5 share, +10% at NeMo-RL's 0.6)
    assert abs(results[8]) < 0.15
    # OpenRLHF's vLLM rows, each engine given the table's generation micro batch per call
    # (rollout_batch): 7B, 13B and the 70B on 16 GPUs with TP-2 engines
    assert all(abs(results[row]) <= 0.25 for row in (27, 30, 32))
    # DeepSpeed-Chat / OpenRLHF without Ray (HF generate at 2-8 sequences): within 2x
    assert all(-0.5 < results[row] < 1.0 for row in (23, 24, 25, 28))


def test_every_row_is_expressed_or_says_why_not():
    cased = {c.row for c in rl.CASES}
    assert not cased & set(rl.NOT_EXPRESSED)
    assert cased | set(rl.NOT_EXPRESSED) == set(range(len(rl.rows())))
    assert all(len(why) > 20 for why in rl.NOT_EXPRESSED.values())


def test_the_doc_holds_the_current_table():
    assert rl.report() in DOC.read_text(encoding="utf-8")


def test_the_doc_holds_the_inferred_mean_diagnostic():
    table = "\n".join("  " + line for line in rl.inferred_mean_report().split("\n"))
    assert table in DOC.read_text(encoding="utf-8")
    # it covers the rows that state no mean but measured the old-log-prob pass
    assert table.count("\n") == 5


def test_the_driver_rate_is_the_fit_of_the_tuned_rows():
    from gpuhours.estimate import assumptions as A

    intercept, moved, rate = rl.driver_rate_fit()
    # 107.71 s on 32 GPUs, 53.92 on 128: b = 53.79 / (1/32 - 1/128) = 2,295 s, a = 35.99 s
    assert intercept == pytest.approx(35.99, abs=0.01)
    assert moved == pytest.approx(8192 * 1_384_448)
    assert A.RL_DRIVER_BYTES_PER_S.value == pytest.approx(rate, rel=0.005)
    # held out: the same recipe on 64 GPUs, a + b/64 against its measured 70.26 s
    assert intercept + (107.71 - intercept) * 32 / 64 == pytest.approx(70.26, rel=0.03)


def test_verl_inferred_means_agree_across_gpu_counts():
    """With the driver's transfer counted, the mean response that makes each verl 7B row's
    old-log-prob pass take its measured time is one mean for the three GPU counts of the one
    recipe (it was 2,600 / 3,432 / 5,264 tokens without it)."""
    means = [int(line.split("|")[3].replace(",", ""))
             for line in rl.inferred_mean_report().split("\n")[2:]
             if line.split("|")[1].strip() in ("12", "13", "14")]
    assert len(means) == 3 and max(means) / min(means) < 1.10


def test_streamed_rows_at_their_twins_mean():
    """verl's fully-async rows at the mean inferred for their synchronous twin: the doc holds
    the table; the trainer's intake of the padded batch from the message queue (30 s for the
    7B rows, whatever the mean: 8,192 sequences padded to 256 + 28,672 tokens) is held out
    against the trainer's measured 'gen' (21-33 s), and the update is what is off."""
    table = rl.streamed_at_twin_mean_report()
    assert "\n".join("  " + line for line in table.split("\n")) in DOC.read_text(encoding="utf-8")
    assert table.count("\n") == 5
    for line in table.split("\n")[2:5]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        intake, gen = float(cells[8].rstrip(" s")), float(cells[9].rstrip(" s"))
        assert 0.6 < intake / gen < 1.5
