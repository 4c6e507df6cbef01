"""`gpuhours bench --workload inference` on this CPU: seed 003's model in miniature
(examples/hybrid_vision.py) under eager and ONNX Runtime (fp32 and int8), a tiny Qwen2-shaped
catalog model through the torch.export-based ONNX exporter; the median's standard error by
hand; --module/--input parsing and its errors. torch.compile is left out: compiling even the
miniature takes about 30 s on this 2-core VM."""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuhours.bench.latency import Z_975, median_cv, median_standard_error, stop_reason
from gpuhours.cli import app
from gpuhours.cli_common import where_of
from gpuhours.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
HYBRID = ["--module", str(ROOT / "examples" / "hybrid_vision.py") + ":build",
          "--input", "images=float32[B,3,224,224]"]
runner = CliRunner()


# the median's standard error (McKean-Schrader) ------------------------------------------------
def test_median_standard_error_by_hand() -> None:
    # n = 11: c = round(6 - 1.959964 * sqrt(11/4)) = round(2.750) = 3, so the 3rd and 9th of
    # 1..11 bound the interval: SE = (9 - 3) / (2 * 1.959964) = 1.53064; median 6
    xs = [float(v) for v in (7, 1, 11, 3, 9, 5, 2, 10, 4, 8, 6)]
    assert median_standard_error(xs) == pytest.approx(6 / (2 * Z_975))
    assert median_standard_error(xs) == pytest.approx(1.53064, rel=1e-5)
    assert median_cv(xs) == pytest.approx(1.53064 / 6, rel=1e-5)
    # n = 10: c = round(5.5 - 1.959964 * sqrt(2.5)) = round(2.401) = 2: the 2nd and 9th
    assert median_standard_error([float(v) for v in range(1, 11)]) == pytest.approx(
        7 / (2 * Z_975))
    assert math.isinf(median_standard_error([1.0, 2.0]))


def test_median_standard_error_matches_the_normal_theory() -> None:
    # for normal samples the median's standard error is sqrt(pi/2) * sigma / sqrt(n) = 0.0627
    # at n = 400, sigma = 1 (the asymptotic variance pi sigma^2 / 2n); averaged over 50 samples
    rng = random.Random(1)
    ses = [median_standard_error([rng.gauss(10.0, 1.0) for _ in range(400)]) for _ in range(50)]
    assert statistics.fmean(ses) == pytest.approx(math.sqrt(math.pi / 2) / 20, rel=0.1)


def test_stop_reason_says_converged_or_time_limit() -> None:
    steady = [1.0 + 0.001 * (i % 3) for i in range(12)]
    assert stop_reason(steady, 0.5, 0.02, 60).startswith("converged: CV of the median")
    assert stop_reason(steady[:5], 0.5, 0.02, 60) is None  # fewer than 10 calls: go on
    noisy = [1.0, 3.0] * 6
    assert stop_reason(noisy, 0.5, 0.02, 60) is None
    late = stop_reason(noisy, 61.0, 0.02, 60)
    assert late is not None and late.startswith("time limit: 60 s passed after 12 calls")


def test_drift_by_hand() -> None:
    import numpy as np

    from gpuhours.bench.inference import drift_of

    eager = [np.array([[1.0, 2.0], [3.0, 0.0]])]
    other = [np.array([[1.5, 2.0], [2.0, 2.5]])]
    d = drift_of(eager, other, batch=2, classifier=True)
    # |diff| = [[0.5, 0], [1, 2.5]]; argmax rows: (1, 1) agree, (0, 1) do not
    assert d.max_abs_diff == pytest.approx(2.5)
    assert d.max_abs_eager == pytest.approx(3.0)
    assert d.top1_agreement == pytest.approx(0.5) and d.top1_rows == 2
    assert drift_of(eager, other, 2, classifier=False).top1_agreement is None


# --module and --input -------------------------------------------------------------------------
def test_input_specs_and_their_tensors() -> None:
    import torch

    from gpuhours.bench.module_spec import parse_input_spec, parse_inputs

    specs = parse_input_spec("images=float32[B,3,8,8]; ids=int64[B,5]<7")
    assert [s.text() for s in specs] == ["images=float32[B,3,8,8]", "ids=int64[B,5]<7"]
    x = parse_inputs(["images=fp16[B,3,8,8]", "ids=int64[B,5]<7", "mask=bool[2,B]"], batch=4)
    assert x["images"].shape == (4, 3, 8, 8) and x["images"].dtype == torch.float16
    assert x["ids"].shape == (4, 5) and x["ids"].dtype == torch.int64
    assert int(x["ids"].min()) >= 0 and int(x["ids"].max()) < 7
    assert x["mask"].shape == (2, 4) and x["mask"].dtype == torch.bool
    again = parse_inputs("images=fp16[B,3,8,8]", batch=4)  # one seeded generator: reproducible
    assert torch.equal(again["images"], x["images"])


@pytest.mark.parametrize(("spec", "message"), [
    ("images", r"expected NAME=DTYPE\[DIMS\]"),
    ("images=float8[B,3]", "unknown dtype 'float8'"),
    ("images=float32[1,3]", "has no B"),
    ("images=float32[B,-3]", "B or a positive whole number, got '-3'"),
    ("images=float32[B,3]<10", "bounds integer inputs only"),
    ("a=int64[B]; a=int64[B]", "a is given twice"),
])
def test_bad_input_specs_are_named(spec: str, message: str) -> None:
    from gpuhours.bench.module_spec import parse_input_spec

    with pytest.raises(InputError, match=message) as e:
        parse_input_spec(spec)
    assert e.value.fields == ("inputs",) and where_of(e.value) == "--input"


def test_load_module_by_file_and_by_dotted_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                ) -> None:
    from torch import nn

    from gpuhours.bench.module_spec import load_module

    (tmp_path / "mymodels.py").write_text(
        "import torch\n"
        "def good():\n    return torch.nn.Linear(2, 3)\n"
        "def bad():\n    return 42\n"
        "def broken():\n    raise RuntimeError('no weights here')\n"
        "NOT_CALLABLE = 3\n")
    assert isinstance(load_module(f"{tmp_path / 'mymodels.py'}:good"), nn.Linear)
    monkeypatch.chdir(tmp_path)
    assert isinstance(load_module("mymodels:good"), nn.Linear)
    for spec, message in [("mymodels:bad", "returned a int, expected a torch.nn.Module"),
                          ("mymodels:broken", "RuntimeError: no weights here"),
                          ("mymodels:missing", "has no attribute 'missing'"),
                          ("mymodels:NOT_CALLABLE", "is a int, not a factory"),
                          ("nowhere/x.py:build", "no such file"),
                          ("no_such_module_xyz:build", "cannot import"),
                          ("mymodels", "expected package.module:factory")]:
        with pytest.raises(InputError, match=message):
            load_module(spec)


# the command, end to end --------------------------------------------------------------------
def test_seed_003_miniature_under_eager_and_onnx_runtime(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    from gpuhours.track.ledger import Ledger

    ledger = tmp_path / "l.sqlite"
    r = runner.invoke(app, ["bench", "--workload", "inference", *HYBRID, "--batches", "1,2",
                            "--backend", "eager,onnxruntime", "--backend", "onnxruntime-int8",
                            "--max-seconds", "1.5", "--threads", "1", "--ledger", str(ledger),
                            "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    by = {b["backend"]: b for b in d["backends"]}
    assert list(by) == ["eager", "onnxruntime", "onnxruntime-int8"]
    assert all(b["status"] == "ok" for b in by.values())
    for b in by.values():
        assert [t["batch"] for t in b["timings"]] == [1, 2]
        for t in b["timings"]:
            assert t["calls"] >= 1 and t["sample_latency_p50_s"] > 0
            assert t["sample_latency_p50_s"] == pytest.approx(t["batch_latency_p50_s"] / t["batch"])
            assert t["batch_latency_p95_s"] >= t["batch_latency_p50_s"]
            # the verdict and its figure agree: converged exactly when the CV is under 2%
            assert t["converged"] == (t["median_cv"] is not None and t["median_cv"] < 0.02)
            assert t["stop_reason"].startswith("converged" if t["converged"] else "time limit")
    # fp32 ONNX Runtime computes the same function: float rounding only, same classes
    assert by["onnxruntime"]["drift"]["max_abs_diff"] < 1e-4
    assert by["onnxruntime"]["drift"]["top1_agreement"] == 1.0
    assert by["onnxruntime"]["drift"]["top1_rows"] == 2  # a [batch, classes] classifier
    # int8 weights change the outputs, measurably
    assert by["onnxruntime-int8"]["drift"]["max_abs_diff"] > 1e-4
    assert by["onnxruntime"]["prepare_basis"].startswith("torch.onnx.export")
    assert "quantize_dynamic" in by["onnxruntime-int8"]["prepare_basis"]
    with Ledger.open(ledger, create=False) as book:
        rows = book.measurements()
    assert sorted(m.id for m in rows) == sorted(d["ledger_ids"]) and len(rows) == 6
    assert {(m.setup["backend"], m.setup["micro_batch"]) for m in rows} == {
        (b, n) for b in by for n in (1, 2)}
    assert all(m.kind == "inference" and m.results["measured"] for m in rows)
    assert all(m.device_kind == "cpu" for m in rows)


def test_a_time_limit_too_short_to_converge_is_said(tmp_path: Path) -> None:
    r = runner.invoke(app, ["bench", "--workload", "inference", *HYBRID, "--batches", "1",
                            "--backend", "eager", "--target-cv", "0.0001", "--max-seconds",
                            "0.05", "--warmup", "0", "--threads", "1", "--no-ledger"])
    assert r.exit_code == 0, r.output
    assert "not converged" in r.output and "eager b1" in r.output


def test_a_catalog_model_goes_through_the_torch_export_exporter() -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    tiny = ["--model", "qwen2.5-0.5b", "--set", "num_hidden_layers=1", "--set", "hidden_size=32",
            "--set", "intermediate_size=64", "--set", "num_attention_heads=2",
            "--set", "num_key_value_heads=1", "--set", "vocab_size=128", "--seq", "8"]
    r = runner.invoke(app, ["bench", "--workload", "inference", *tiny, "--batches", "3",
                            "--backend", "eager,onnxruntime", "--max-seconds", "0.5",
                            "--threads", "1", "--no-ledger", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["inputs"] == ["input_ids=int64[B,8]<128"] and d["tokens_per_sample"] == 8
    ort = d["backends"][1]
    # transformers' masking code stops the TorchScript exporter (aten::diff); the other takes it
    assert ort["status"] == "ok" and "dynamo=True" in ort["prepare_basis"]
    # next-token logits: 3 sequences x 8 positions, exported at batch 2 and run at batch 3
    assert ort["drift"]["top1_rows"] == 24 and ort["drift"]["max_abs_diff"] < 1e-4


@pytest.mark.parametrize(("args", "where"), [
    ([*HYBRID, "--backend", "tensorrt"], "--backend"),
    ([*HYBRID, "--batches", "0,x"], "--batches"),
    ([*HYBRID, "--max-seconds", "0"], "--max-seconds"),
    ([*HYBRID, "--sweep", "batch=1,2"], "--sweep"),
    (HYBRID[:2], "--input"),
    ([*HYBRID, "--model", "qwen2.5-0.5b"], "--model/--module"),
    ([HYBRID[0], HYBRID[1], "--input", "pixels=float32[B,3,224,224]"], "--module"),
    ([HYBRID[0], HYBRID[1], "--input", "images=float32[3,224,224]"], "--input"),
])
def test_bad_inference_input_exits_2_naming_the_option(args: list[str], where: str) -> None:
    r = runner.invoke(app, ["bench", "--workload", "inference", "--backend", "eager",
                            "--max-seconds", "0.1", "--no-ledger", *args])
    assert r.exit_code == 2, r.output
    assert where in r.output and "Traceback" not in r.output


def test_the_python_api_takes_a_module_object() -> None:
    import torch

    from gpuhours.bench.device import cpu_backend
    from gpuhours.bench.inference import InferenceRule, measure_inference, module_model

    class TwoInputs(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(50, 8)
            self.out = torch.nn.Linear(8, 3)

        def forward(self, ids: torch.Tensor, scale: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"logits": self.out(self.emb(ids).mean(1) * scale), "none": None}

    torch.manual_seed(0)
    m = module_model(TwoInputs(), "ids=int64[B,6]<50; scale=float32[B,1]", "two-inputs")
    assert m.params == 50 * 8 + 8 * 3 + 3
    r = measure_inference(m, cpu_backend(torch.get_num_threads()), ["eager"], [1, 3],
                          InferenceRule(warmup=1, max_seconds=0.3))
    (eager,) = r.backends
    assert eager.status == "ok" and [t.batch for t in eager.timings] == [1, 3]
    # a [batch, classes] output is a classifier: 3 rows compared, all agreeing with themselves
    assert eager.drift is not None and eager.drift.top1_rows == 3
    assert eager.drift.max_abs_diff == 0.0
