"""Shared fixtures: a tiny hand-countable architecture and a GPU row built inline."""

from __future__ import annotations

import pytest

from gpuhours.catalog.schema import DenseTflops, GpuSpec
from gpuhours.estimate.arch import ModelArch


@pytest.fixture
def tiny() -> ModelArch:
    """d=64, 2 layers, 4 heads of 16, 2 kv heads, SwiGLU 128, vocab 1000, untied."""
    return ModelArch(name="tiny", model_type="llama", hidden_size=64, num_layers=2, num_heads=4,
                     num_kv_heads=2, head_dim=16, intermediate_size=128, vocab_size=1000,
                     tie_embeddings=False, gated_mlp=True)


@pytest.fixture
def toy_gpu() -> GpuSpec:
    """Round numbers for hand arithmetic: 100 TFLOPS bf16, 1000 GB/s, 10 GB, NVLink 400 GB/s."""
    return GpuSpec(name="toy", full_name="toy", vendor="NVIDIA", generation="ampere",
                   memory_gb=10, memory_bw_gb_per_s=1000,
                   dense_tflops=DenseTflops(fp32=10, bf16=100, fp16=100), tdp_w=100,
                   interconnect="nvlink", interconnect_gb_per_s_two_way=400, source="test",
                   as_of="2026-01-01")


@pytest.fixture(autouse=True)
def _no_budget_charts(monkeypatch: pytest.MonkeyPatch) -> None:
    """COMPUTE_BUDGET.md's PNG charts (matplotlib, ~0.4 s each here) are off but in their own
    tests (tests/test_report_html.py), which turn them on."""
    monkeypatch.setenv("GPUHOURS_CHARTS", "off")


@pytest.fixture(autouse=True)
def _no_user_ledger(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
                    ) -> None:
    """A ledger in the directory the tests run from (./.gpuhours/ledger.sqlite, where a user's
    `gpuhours bench` writes) or named by the caller's $GPUHOURS_LEDGER must not change what the
    commands under test answer: each test gets an empty one unless it names its own."""
    monkeypatch.setenv("GPUHOURS_LEDGER",
                       str(tmp_path_factory.mktemp("ledger") / "ledger.sqlite"))
