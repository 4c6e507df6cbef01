"""Qwen's README figures ("memory (GB)", type not stated) are compared as a device-level
reading: the estimate's reserved bytes plus a fixed part fitted on the Qwen-7B rows at
256-2048 tokens (finetune.QWEN_FIXED_FIT_ROWS). The fit's rows are those, read from the CSV
here; the other Qwen rows are held out, and the other sources' unstated figures keep the
reserved comparison."""

from __future__ import annotations

import statistics

import pytest

from gpuhours.estimate.memory import training_memory
from gpuhours_dev.validation import _rows
from gpuhours_dev.validation.finetune import (
    DATA,
    GB,
    QWEN_FIXED_FIT_ROWS,
    _predicted_memory,
    map_row,
    memory_figure,
    qwen_fixed_bytes,
)

GIB = 2**30


@pytest.fixture(scope="module")
def rows():
    return _rows(DATA)


def test_the_fit_rows_are_the_qwen_7b_rows_up_to_2048_tokens(rows):
    picked = {i for i, r in enumerate(rows, start=1)
              if r["source"].startswith("QwenLM/Qwen README.md")
              and r["model"] in ("Qwen-7B", "Qwen-7B-Chat-Int4") and r["n_gpus"] == "1"
              and int(r["seq_len"]) <= 2048 and r["peak_mem_reserved_gb"]}
    assert picked == QWEN_FIXED_FIT_ROWS


def test_the_fixed_part_is_the_median_gap_of_those_rows(rows):
    gaps = []
    for i in sorted(QWEN_FIXED_FIT_ROWS):
        r = rows[i - 1]
        m = map_row(i, r)
        assert m.training is not None
        # the README's 'G' read as 10^9 bytes (the dataset's unit note)
        measured = float(r["peak_mem_reserved_gb"]) * GB
        gaps.append(measured - training_memory(m.training.arch, m.training, 1).reserved_bytes)
    assert qwen_fixed_bytes() == pytest.approx(statistics.median(gaps))
    # a part that does not grow with the model: between 1 and 3 GiB
    assert 1 * GIB < qwen_fixed_bytes() < 3 * GIB


def test_a_held_out_row_is_reserved_plus_the_fixed_part(rows):
    m = map_row(101, rows[100])  # Qwen-1.8B LoRA at 256 tokens: not a fit row
    assert 101 not in QWEN_FIXED_FIT_ROWS and m.training is not None
    fig = memory_figure(rows[100])
    assert fig is not None and fig.kind == "device" and "fitted" in fig.what
    t = m.training
    expected = training_memory(t.arch, t, 1).reserved_bytes + qwen_fixed_bytes()
    assert _predicted_memory(fig.kind, t, 1, m.gpu, None, fig.fixed_bytes) == \
        pytest.approx(expected)


def test_other_unstated_figures_keep_the_reserved_comparison(rows):
    # torchtune's README table (#324) states no type either: compared with reserved, no fit
    fig = memory_figure(rows[323])
    assert fig is not None and fig.kind == "unstated" and fig.fixed_bytes is None
