"""transformers' `generate`: the rate of its KV-cache copies (issue 13;
scripts/gpuhours_dev/validation/hf_kv_rate.py, docs/generation.md).

The constant is the fit on its two tune rows; the check that sets nothing is the time per
decode step between each model's 14K- and 30K-prompt rows, which the doc quotes."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from gpuhours.estimate import assumptions as A
from gpuhours_dev.validation import hf_kv_rate as h

DOC = Path(__file__).resolve().parents[1] / "docs" / "generation.md"


def test_the_constants_are_the_fit_on_their_two_rows() -> None:
    """Around the constants, the least-squares fit on generation.csv rows 11 and 13 lands on
    them: a move of the rows, the count or the form moves it off the grid's centre."""
    host = A.DECODE_HOST_PER_LAYER_S["hf-generate"].value
    per_cycle = A.HF_KV_COPY_BYTES_PER_SM_CYCLE.value
    fitted = h.fit_hf_generate([host - 1e-5, host, host + 1e-5],
                               [per_cycle - 0.02, per_cycle, per_cycle + 0.02])
    assert fitted == (host, per_cycle)


def test_the_doc_holds_the_current_table() -> None:
    table = h.report()
    doc = DOC.read_text(encoding="utf-8")
    assert "\n".join("  " + line if line else "" for line in table.split("\n")) in doc


def test_the_cache_was_repeated_and_its_rate_is_flat_across_width_and_gpu() -> None:
    """What the doc reads off the table: under SDPA's count every model but Qwen3-0.6B runs a
    counted pass within 3% of their mean, on both GPUs and at every width; under
    flash-attention's 3 the rates spread 1.9x and fall as the group grows; Qwen3-0.6B's pass
    is under 40% of the others'."""
    rows = h.slopes()
    others = [s for s in rows if s.model != "Qwen3-0.6B"]
    sdpa = [s.bytes_per_s_per_pass(s.sdpa_passes) for s in others]
    mean = statistics.fmean(sdpa)
    assert all(abs(r / mean - 1) < 0.03 for r in sdpa)
    assert {s.gpu for s in others} == {"a100-80gb", "h20"}
    assert min(s.hidden_size for s in others) == 2048
    fa2 = {s.group: s.bytes_per_s_per_pass(3.0) for s in others}
    assert max(fa2.values()) / min(fa2.values()) > 1.9
    assert fa2[2] > fa2[4] > fa2[5] > fa2[8]
    small = next(s for s in rows if s.model == "Qwen3-0.6B")
    assert small.bytes_per_s_per_pass(small.sdpa_passes) < 0.4 * mean
    # the two GPUs: bandwidths 2x apart, SMs x clock within 2%
    a100 = next(s for s in others if s.gpu == "a100-80gb")
    h20 = next(s for s in others if s.gpu == "h20")
    assert h20.bandwidth_bytes_per_s / a100.bandwidth_bytes_per_s > 1.9
    assert h20.sm_cycles_per_s / a100.sm_cycles_per_s == pytest.approx(1.0, abs=0.02)
