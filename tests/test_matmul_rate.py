"""The per-product GEMM rate check (issue 14, point 5): data/matmul_microbench.csv and the rule
of gpuhours_dev/validation/matmul_rate.py, held to hand-worked numbers."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from gpuhours import catalog
from gpuhours.estimate import assumptions as A
from gpuhours.estimate import timing as T
from gpuhours_dev.validation.matmul_rate import (
    DATA,
    ada_median_r,
    derived_ada_efficiency,
    derived_geforce_blackwell_efficiency,
    rate_shares,
    scale,
)

HEADER = "catalog_gpu,device_as_reported,precision,tflops_best,sizes,torch,host,used," \
         "why_not_used,source\n"


def _rows() -> list[dict[str, str]]:
    with DATA.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_every_entry_names_its_issue_or_table_line_and_a_catalog_part():
    rows = _rows()
    assert len(rows) >= 40
    for r in rows:
        assert re.fullmatch(
            r"https://github\.com/zzc0721/torch-performance-test-data/issues/\d+"
            r"|zzc0721/torch-performance-test-data@9d828276 database\.md line \d+", r["source"]), r
        assert r["precision"] in ("bf16", "fp16"), r
        assert float(r["tflops_best"]) > 0
        if r["used"] == "yes":
            spec = catalog.gpu(r["catalog_gpu"])  # raises for a name the catalog lacks
            assert spec.generation in ("volta", "turing") or r["precision"] == "bf16", r
        else:
            assert r["used"] == "no" and r["why_not_used"], r


def test_rate_share_is_the_median_over_the_catalog_peak(tmp_path: Path):
    # three RTX 3090 entries, 76.34, 76.68 and 76.58 TFLOPS: median 76.58 of the catalog's
    # 71.2 (GA102's FP32-accumulate tensor rate) = 1.0756; an unused row does not count
    data = tmp_path / "m.csv"
    data.write_text(HEADER
                    + "rtx-3090,a,bf16,76.34,,,,yes,,x\n"
                    + "rtx-3090,b,bf16,76.68,,,,yes,,x\n"
                    + "rtx-3090,c,bf16,76.58,,,,yes,,x\n"
                    + ",d,bf16,999,,,,no,modded,x\n"
                    + "a100-80gb,e,bf16,264.53,,,,yes,,x\n", encoding="utf-8")
    shares = rate_shares(data)
    assert set(shares) == {"rtx-3090", "a100-80gb"}
    assert shares["rtx-3090"].r == pytest.approx(76.58 / 71.2)
    assert shares["rtx-3090"].r == pytest.approx(1.0756, abs=1e-4)
    # against the Ampere reference (A100 SXM4 80GB, 264.53 of 312 = 0.8479): 1.0756 / 0.8479
    assert scale(catalog.gpu("rtx-3090"), shares) == pytest.approx(1.2686, abs=1e-4)
    # a product with no entry keeps its generation's figure
    assert scale(catalog.gpu("a100-40gb"), shares) == 1.0


def test_ada_is_scaled_against_its_median_product(tmp_path: Path):
    data = tmp_path / "m.csv"
    data.write_text(HEADER + "rtx-4090,a,bf16,165.15,,,,yes,,x\n"
                    + "l40s,b,bf16,269.15,,,,yes,,x\n"
                    + "l4,c,bf16,59.4,,,,yes,,x\n", encoding="utf-8")
    shares = rate_shares(data)
    # r: 4090 165.15 / 165.15 = 1.0, L40S 269.15 / 362.05 = 0.7434, L4 59.4 / 121 = 0.4909;
    # the median product is the L40S, so the 4090's factor is 1 / 0.7434
    assert scale(catalog.gpu("rtx-4090"), shares) == pytest.approx(362.05 / 269.15)
    assert scale(catalog.gpu("l40s"), shares) == pytest.approx(1.0)


def test_adas_efficiency_is_the_one_derived_from_the_microbenchmarks():
    shares = rate_shares()
    # by hand from the data file: Ada products' r 1.0 (4090, median of six entries 164.4 of
    # 165.15 = 0.9955), 0.9551 (L20 114.14 of 119.5), 0.7434 (L40S), 0.4909 (L4): median
    # (0.7434 + 0.9551) / 2 = 0.8493; training share (0.80 / (264.53 / 312) + 0.71 /
    # (789.24 / 989.5)) / 2 = (0.9435 + 0.8902) / 2 = 0.9168; 0.8493 x 0.9168 = 0.7787 (Hopper
    # refitted 0.70 -> 0.71 on 2026-11-24 with its attention rates corrected: Ada 0.77 -> 0.78)
    assert derived_ada_efficiency(shares) == pytest.approx(0.7787, abs=5e-4)
    assert A.GEMM_EFFICIENCY_BY_GENERATION["ada"].value == round(derived_ada_efficiency(shares), 2)


def test_geforce_blackwells_efficiency_is_the_one_derived_from_the_microbenchmarks():
    shares = rate_shares()
    # by hand from the data file: six RTX 5090 entries, 178.86, 221.65, 236.03, 236.99, 240.05,
    # 242.18 TFLOPS: median (236.03 + 236.99) / 2 = 236.51 of the catalog's 209.5 = 1.1289; the
    # B200 (10.0) is not a 12.x product and does not count; x the training share 0.9168 = 1.0350
    assert shares["rtx-5090"].r == pytest.approx(236.51 / 209.5)
    assert derived_geforce_blackwell_efficiency(shares) == pytest.approx(1.0350, abs=5e-4)
    entry = A.GEMM_EFFICIENCY_BY_SM_MAJOR[("blackwell", 12)]
    assert entry.value == round(derived_geforce_blackwell_efficiency(shares), 2)
    # the RTX 5090 takes it; the data-centre parts keep the generation's assumption
    width = 4096 / (4096 + 128)
    assert T.gemm_efficiency(catalog.gpu("rtx-5090"), 4096) == pytest.approx(1.04 * width)
    assert T.gemm_efficiency(catalog.gpu("b200"), 4096) == pytest.approx(0.70 * width)
    # fp8: the data-centre share 0.55 x the 12.x clock headroom 1.04 / 0.70 = 0.817 -> 0.82
    assert T.fp8_gemm_efficiency(catalog.gpu("rtx-5090"), 4096) == pytest.approx(0.82 * width)
    assert T.fp8_gemm_efficiency(catalog.gpu("b200"), 4096) == pytest.approx(0.55 * width)


def test_each_product_runs_at_its_generation_figure_x_its_measured_rate_over_the_reference():
    width = 4096 / (4096 + 128)
    # RTX 3090: 3 entries, median 76.58 of its 71.2 TFLOPS peak = 1.0756; Ampere's figure is
    # about the A100 SXM4 80GB, 264.53 of 312 = 0.848: 0.80 x 1.0756 / 0.848 = 1.0147
    assert T.gemm_efficiency(catalog.gpu("rtx-3090"), 4096) == pytest.approx(
        0.80 * (76.58 / 71.2) / 0.848 * width)
    assert 0.80 * (76.58 / 71.2) / 0.848 == pytest.approx(1.0147, abs=1e-4)
    # RTX 4090: 6 entries 160.17 .. 173.31, median (163.09 + 165.71) / 2 = 164.40 of 165.15;
    # Ada's 0.78 is about the median Ada product, 0.849: 0.78 x 0.9955 / 0.849 = 0.9146
    assert T.gemm_efficiency(catalog.gpu("rtx-4090"), 4096) == pytest.approx(
        0.9146 * width, abs=1e-4)
    # a measured part that is not a GeForce card keeps its generation's figure: the L40S (one
    # entry, 0.743 of its peak), the H20 (0.96), the A100 SXM (the reference itself)
    assert T.gemm_efficiency(catalog.gpu("l40s"), 4096) == pytest.approx(0.78 * width)
    assert T.gemm_efficiency(catalog.gpu("h20"), 4096) == pytest.approx(0.71 * width)
    assert T.gemm_efficiency(catalog.gpu("a100-80gb"), 4096) == pytest.approx(0.80 * width)
    # no measurement (the A100 80GB PCIe), no reference (data-centre Blackwell), or an entry of
    # its own (GeForce Blackwell, derived from its own rate): factor 1
    assert T.product_matmul_factor(catalog.gpu("a100-80gb-pcie")) == 1.0
    assert T.product_matmul_factor(catalog.gpu("b200")) == 1.0
    assert T.product_matmul_factor(catalog.gpu("rtx-5090")) == 1.0


def test_the_catalog_rates_and_references_are_the_data_files_medians():
    shares = rate_shares()
    for name, share in shares.items():
        spec = catalog.gpu(name)
        if spec.generation in A.GEMM_REFERENCE_MATMUL_SHARE:
            assert spec.matmul_measured_tflops == pytest.approx(share.median_tflops, abs=0.01)
            if "GeForce" in spec.full_name:
                assert T.product_matmul_factor(spec) == pytest.approx(scale(spec, shares),
                                                                      rel=2e-3)
    assert A.GEMM_REFERENCE_MATMUL_SHARE["ampere"].value == pytest.approx(
        shares["a100-80gb"].r, abs=5e-4)
    assert A.GEMM_REFERENCE_MATMUL_SHARE["hopper"].value == pytest.approx(
        shares["h100-sxm"].r, abs=5e-4)
    assert A.GEMM_REFERENCE_MATMUL_SHARE["ada"].value == pytest.approx(
        ada_median_r(shares), abs=5e-4)
