"""H100 throughput against the published rows (docs/validation.md, "Training throughput on
H100"). No constant is set from these rows; they check gemm_efficiency.hopper as assumed."""

from __future__ import annotations

import pytest

from gpuhours.estimate import assumptions as A
from gpuhours_dev.validation import hopper_comparisons


@pytest.fixture(scope="module")
def rows():
    return hopper_comparisons()


def test_every_h100_row_is_expressed_or_says_why(rows):
    # all 147 H100 rows of shared/reference/validation/throughput.csv
    assert len(rows) == 147
    for c in rows:
        assert (c.predicted is None) == (c.skipped is not None), c.label
    # the bulk waits for fp8 matmuls and model parallelism (TP/PP/CP/EP)
    reasons = [c.skipped for c in rows if c.skipped]
    assert sum("fp8" in r for r in reasons) == 91
    assert sum("parallelism" in r for r in reasons) == 17


def test_expressible_rows_within_10_percent(rows):
    expressed = {c.label: c for c in rows if c.error is not None}
    # NeMo Automodel LoRA rows, 1 x DGX-H100, bf16, 2 x 4096 x accumulation 16 (mock data):
    # measured 12,472.87 and 14,110.05 tokens/s. Before the host term (issue 14) the estimate
    # was 17% and 12% above them; with it, -2.3% and -5.0%. These rows were not used to set
    # the host term (assumptions.HOST_S_PER_OP, HOST_GPU_OVERLAP_P: the H100 bench run).
    assert set(expressed) == {"Llama3 8B seq 4096 x1 H100-80GB",
                              "Qwen2.5 7B seq 4096 x1 H100-80GB"}
    for c in expressed.values():
        assert c.error is not None
        assert abs(c.error) < 0.10, c.label
    assert A.GEMM_EFFICIENCY_BY_GENERATION["hopper"].value == 0.72
