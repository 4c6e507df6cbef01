"""'Does not fit' is a verdict, not bad input: exit code 1 in every command (estimate, fit,
plan, generation; 2 is bad input), and with --json the result is JSON all the same."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import DOES_NOT_FIT_EXIT_CODE

#: Llama-2-7B full fine-tuning on one 24 GB card: 16 bytes/param of state alone is ~100 GiB
TOO_BIG = ["--model", "llama-2-7b", "--gpu", "rtx-4090", "--batch", "1", "--seq", "512"]


def test_estimate_that_does_not_fit_exits_1_with_the_reason() -> None:
    r = CliRunner().invoke(app, ["estimate", *TOO_BIG])
    assert r.exit_code == DOES_NOT_FIT_EXIT_CODE == 1
    # full fine-tuning of 7B on a 24 GB card: the state alone does not fit at micro-batch 1,
    # so the method is what to change, not the batch (estimate/fit.py setting_at_fault)
    assert r.stderr.startswith("error --method:"), r.stderr
    assert "needs" in r.stderr and "gpuhours fit" in r.stderr
    assert r.stdout == ""


def test_estimate_json_that_does_not_fit_is_still_json() -> None:
    r = CliRunner().invoke(app, ["estimate", *TOO_BIG, "--json"])
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert data["memory"]["fits"] is False
    assert data["memory"]["total_bytes"]["value"] > data["memory"]["device_bytes"]["value"]


def test_fit_with_nothing_that_fits_exits_1() -> None:
    r = CliRunner().invoke(app, ["fit", "--model", "llama-2-70b", "--gpu", "t4", "--precision",
                                 "fp16-mixed", "--json"])
    assert r.exit_code == 1
    assert json.loads(r.stdout)["largest_micro_batch"] is None


def test_bad_input_is_still_2() -> None:
    r = CliRunner().invoke(app, ["estimate", *TOO_BIG, "--batch", "0"])
    assert r.exit_code == 2


def test_a_plan_phase_that_does_not_fit_exits_1(tmp_path) -> None:
    plan = tmp_path / "p.yaml"
    plan.write_text("project: p\nhardware: {gpu: rtx-4090}\nphases:\n"
                    "  - {name: sft, kind: finetune, model: llama-2-7b, method: full,\n"
                    "     tokens: 1.0e+9, seq_len: 512, micro_batch: 1,\n"
                    "     checkpointing: true, zero_stage: 0}\n")
    r = CliRunner().invoke(app, ["plan", str(plan), "--no-doc"])
    assert r.exit_code == 1, r.output
    assert "line 4" in r.stderr and "sft" in r.stderr and "needs" in r.stderr


def test_generation_whose_weights_leave_no_room_exits_1_with_json() -> None:
    """A reviewer's case: `generation --model llama-3-70b --gpu h100 --json` exited 2 (bad
    input) with no JSON. Hand-worked: Llama-3-70B's KV cache is 80 layers x 8 KV heads x 128 x
    2 (K, V) x 2 bytes = 327,680 bytes per token, x (512 + 512) tokens = 335,544,320 per
    sequence; its 141.1 GB of bf16 weights exceed the engine's 0.9 of the H100's memory."""
    args = ["generation", "--model", "llama-3-70b", "--gpu", "h100", "--tensor-parallel", "1"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 1
    assert "--gpu" in r.stderr and "leave no room" in r.stderr and r.stdout == ""
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 1, r.output
    data = json.loads(r.stdout)
    assert data["fits"] is False and "leave no room" in data["reason"]
    assert data["kv_cache_bytes_per_sequence"]["value"] == 80 * 8 * 128 * 2 * 2 * 1024
    assert data["weights_bytes_per_gpu"]["value"] > data["engine_memory_bytes"]["value"]
    assert data["engine_memory_bytes"]["value"] == data["device_bytes"]["value"] * 0.9
    assert data["max_batch_by_memory"]["value"] == 0


def test_generation_batch_beyond_the_kv_cache_exits_1_with_json() -> None:
    """Qwen2.5-7B on an H100: (0.9 x 85,520,809,984 - 15,231,233,024 bytes of weights -
    5,100,273,664 of vLLM's profiling run: its dummy sampler run, 16,384 tokens x 3,584 x 2
    bytes of hidden states + 1,024 requests (vLLM V1's max_num_seqs on an H100) x 152,064
    logits x 32 bytes, above the forward's 16,384 x (2 x 3,584 + 3 x 18,944) x 2 =
    2,097,152,000) / (28 layers x 4 KV heads x 128 x 2 x 2 bytes x 1,024 tokens = 58,720,256)
    = 964.5: 964 sequences fit, not 100,000."""
    args = ["generation", "--model", "qwen2.5-7b", "--gpu", "h100-sxm", "--batch", "100000"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 1
    assert "--batch" in r.stderr and "at most 964 fit" in r.stderr
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert data["fits"] is False
    assert data["max_batch_by_memory"]["value"] == 964
    assert data["batch"]["value"] == 100000
    assert data["profile_reserve_bytes"]["value"] == 16_384 * 3_584 * 2 + 1_024 * 152_064 * 32


def test_generation_that_fits_says_so_in_json() -> None:
    r = CliRunner().invoke(app, ["generation", "--model", "qwen2.5-7b", "--gpu", "h100-sxm",
                                 "--json"])
    assert r.exit_code == 0
    assert json.loads(r.stdout)["fits"] is True


def test_hf_generate_that_does_not_fit_reports_the_cap_that_refused_it():
    """The JSON's batch that fits is the one the verdict names (transformers' generate: its
    peak, estimate/hf_generate_memory.py), not the KV-cache-only count vLLM would get."""
    import json as _json

    from typer.testing import CliRunner

    from gpuhours.cli import app

    r = CliRunner().invoke(app, ["generation", "--model", "qwen2.5-7b", "--engine",
                                 "hf-generate", "--gpu", "a100-80gb", "--prompt-tokens", "256",
                                 "--output-tokens", "256", "--batch", "2114", "--json"])
    assert r.exit_code == 1, r.output
    data = _json.loads(r.stdout)
    assert "at most 1,289 fit" in data["reason"]
    assert data["max_batch_by_memory"]["value"] == 1289
    assert data["engine_memory_bytes"]["value"] == data["device_bytes"]["value"]


def test_generation_chooses_the_tensor_parallelism_when_left_out() -> None:
    """Issue 16 review, defect 11: with --tensor-parallel left out, a model whose weights leave
    no room on one GPU got exit 1. Llama-3-70B's 141.1 GB of bf16 weights: one H100 (0.9 x
    80 GiB = 77 GB for the engine) holds none; 2 GPUs hold 70.6 GB each and leave a few GB of
    KV cache, 4 hold 35.3 GB each. The chooser takes, of the sizes within a node that fit, the
    fewest GPU seconds per sequence, and names it; the estimate is the one asked with that
    size."""
    args = ["generation", "--model", "llama-3-70b", "--gpu", "h100", "--json"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    tp = int(data["gpus"]["value"])
    assert tp in (2, 4, 8)
    assert data["setup_chosen"].startswith(f"tensor parallelism {tp} chosen by gpuhours")
    given = CliRunner().invoke(app, [*args, "--tensor-parallel", str(tp)])
    assert json.loads(given.stdout)["output_tokens_per_s"] == data["output_tokens_per_s"]
    per_sequence = {}
    for size in (2, 4, 8):
        d = json.loads(CliRunner().invoke(app, [*args, "--tensor-parallel", str(size),
                                                "--sequences", "1000"]).stdout)
        per_sequence[size] = d["gpu_hours"]["value"]
    assert per_sequence[tp] == min(per_sequence.values())


def test_generation_names_the_size_beyond_a_node() -> None:
    """Llama-3.1-405B in bf16 (811.7 GB) on A100-40GB: 8 GPUs of a node hold 101 GB each, more
    than 0.9 x 40 GB; the verdict names the smallest size that fits (across nodes)."""
    r = CliRunner().invoke(app, ["generation", "--model", "llama-3.1-405b", "--gpu",
                                 "a100-40gb"])
    assert r.exit_code == 1
    assert "--tensor-parallel 32" in r.stderr and "none within a node fits" in r.stderr
