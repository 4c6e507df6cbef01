"""`gpuhours ledger list`: each kind of ledger row says what it measured in the setup column, and a
row without a sequence length (a module's images, an old row) shows no "None" (issue 18)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gpuhours.bench.inference import BackendResult, BatchTiming, InferenceResult
from gpuhours.bench.render import ledger_setup_label
from gpuhours.cli import app
from gpuhours.track.ledger import Ledger


def _timing(batch: int) -> BatchTiming:
    return BatchTiming(batch=batch, calls=20, first_call_s=0.5, batch_latency_p50_s=0.01 * batch,
                       batch_latency_p95_s=0.012 * batch, sample_latency_p50_s=0.01,
                       sample_latency_p95_s=0.012, samples_per_s=100.0, calls_cv=0.05,
                       median_cv=0.01, converged=True, stop_reason="target CV", timed_s=1.0)


def _inference(tokens_per_sample: int | None) -> InferenceResult:
    """What `bench --workload inference` returns for a vision module (no tokens per sample) or a
    catalog LM (tokens per sample = its sequence length)."""
    backends = [BackendResult(backend=name, status="ok", device_kind="cpu", device_key="cpu-x-2t",
                              device_name="X, 2 torch threads", runs_on="cpu",
                              timings=[_timing(1), _timing(8)])
                for name in ("eager", "onnxruntime-int8")]
    return InferenceResult(model="hybrid_vision", model_basis="your module", inputs=["images"],
                           params=1000, tokens_per_sample=tokens_per_sample, batches=[1, 8],
                           target_cv=0.05, max_seconds=10.0, threads=2, backends=backends,
                           timing_basis="wall clock", drift_basis="max |diff|")


def _ledger_of(tmp_path: Path, result: InferenceResult) -> Path:
    path = tmp_path / "ledger.sqlite"
    with Ledger.open(path) as book:
        for b, _, setup, results in result.ledger_rows():  # as bench's CLI stores them
            book.add_measurement(kind="inference", status="ok", device_kind=b.device_kind,
                                 device_key=b.device_key, device_name=b.device_name,
                                 model=result.model, setup=setup, model_config={},
                                 environment={}, results=results)
    return path


def _list(path: Path, columns: int = 200) -> str:
    r = CliRunner().invoke(app, ["ledger", "list", "--ledger", str(path)],
                           env={"COLUMNS": str(columns)})
    assert r.exit_code == 0, r.output
    return r.stdout


def test_inference_rows_of_a_module_say_backend_precision_and_batch(tmp_path: Path) -> None:
    path = _ledger_of(tmp_path, _inference(None))
    out = _list(path)
    for label in ("inference eager fp32 b1 ", "inference eager fp32 b8 ",
                  "inference onnxruntime-int8 int8 b1 ", "inference onnxruntime-int8 int8 b8 "):
        assert label in out, out
    narrow = _list(path, 80)
    assert "None" not in out + narrow
    assert all(len(line) <= 80 for line in narrow.splitlines())


def test_inference_rows_of_a_language_model_keep_their_sequence_length(tmp_path: Path) -> None:
    out = _list(_ledger_of(tmp_path, _inference(128)))
    assert "inference eager fp32 b8 s128 " in out, out


def test_labels_of_each_kind() -> None:
    train = {"method": "lora", "precision": "bf16-mixed", "micro_batch": 4, "seq_len": 512,
             "checkpointing": True}
    assert ledger_setup_label("bench", train) == "lora bf16-mixed b4 s512 ckpt"
    # bench's Python API (gpuhours.bench.run) stores no method, and None sizes when unknown
    assert ledger_setup_label("bench-api", {"precision": "fp32", "micro_batch": None,
                                            "seq_len": None}) == "fp32"
    assert ledger_setup_label("generate", {"precision": "fp32", "batch": 4, "prompt_tokens": 64,
                                           "output_tokens": 32}) == "generate fp32 b4 p64+32"
    assert ledger_setup_label("grpo", {"method": "lora", "prompts": 2, "generations": 4,
                                       "response_tokens": 16}) == "grpo lora 2x4 r16"
    assert ledger_setup_label("bench", {}) == "-"


def test_a_ledger_of_tracked_runs_says_so_under_an_empty_table(tmp_path: Path) -> None:
    # a plain-loop or Trainer run tracked into the ledger is not a measurement: `ledger list`
    # showed an empty table and nothing else; it now names the runs and how to read them
    from gpuhours.track.runs import start_run

    path = tmp_path / "ledger.sqlite"
    with Ledger.open(path) as book:
        for name in ("a", "b"):
            start_run(book, project="p", phase="sft", name=name, device_kind="cpu",
                      device_name="x", planned_steps=10, config={})
    r = CliRunner().invoke(app, ["ledger", "list", "--ledger", str(path)],
                           env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "2 tracked runs" in text and "ids 2, 1" in text and "gpuhours doctor" in text
    as_json = CliRunner().invoke(app, ["ledger", "list", "--ledger", str(path), "--json"])
    assert as_json.exit_code == 0 and as_json.output.strip() == "[]"  # measurements only
