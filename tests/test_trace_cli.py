"""`gpuhours trace` and `fit --trace`'s library function: output, bases, and bad input (a
one-paragraph message and exit code 2, never a traceback). Tiny models from config.json files
keep each trace well under a second."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

runner = CliRunner()
LLAMA = dict(model_type="llama", hidden_size=128, intermediate_size=344, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, vocab_size=500,
             max_position_embeddings=256, tie_word_embeddings=False)


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    return str(path)


def trace(*args: str):
    return runner.invoke(app, ["trace", *args])


def test_json_output_says_where_every_figure_came_from(tiny):
    r = trace("--model", tiny, "--batch", "2", "--seq", "64", "--method", "lora",
              "--lora-rank", "4", "--checkpointing", "--device-profile", "h100-sxm", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["peak_bytes"]["basis"] == "trace"
    assert out["allocator"]["peak_reserved_bytes"]["basis"] == "model of the allocator"
    assert out["roofline"]["peak_time_s"]["basis"] == "roofline model"
    assert out["flops"]["analytic_flops"]["basis"] == "formula"
    assert out["analytic_memory"]["tensors_bytes"]["basis"] == "formula"
    # the parts at the peak add up to the peak, and the allocator never reserves less
    assert sum(f["value"] for f in out["at_peak_bytes"].values()) == out["peak_bytes"]["value"]
    assert out["allocator"]["peak_reserved_bytes"]["value"] >= out["peak_bytes"]["value"]
    assert out["peak_where"]["step"] == 2 and out["peak_where"]["phase"]
    assert out["trainable_params"]["value"] < out["total_params"]["value"]


def test_terminal_output(tiny):
    r = trace("--model", tiny, "--batch", "2", "--seq", "64", "--precision", "bf16-mixed")
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())  # Rich wraps lines at the terminal width
    assert "peak of live tensors" in text
    assert "reserved, peak" in text and "model of the allocator" in text
    # bf16-mixed has no single-process equivalent: the output says what was traced instead
    assert "traced as bf16-amp" in text


@pytest.mark.parametrize(("args", "where", "message"), [
    ([], "--model", "a model is required"),
    (["--model", "no-such-model"], "--model", "unknown model"),
    (["--method", "qlora"], "--method", "bitsandbytes"),
    (["--batch", "0"], "--batch", "greater than or equal to 1"),
    (["--precision", "fp8"], "--precision", "Input should be"),
    (["--device-profile", "no-such-gpu"], "--device-profile", "unknown"),
    (["--optimizer", "sgd", "--optimizer-impl", "fused"], "--optimizer-impl", "fused"),
    (["--lora-targets", "attention", "--method", "lora", "--model", "gpt2"], "--lora-targets",
     "no modules named"),
])
def test_bad_input_is_one_paragraph_and_exit_code_2(tiny, args, where, message):
    if "--model" not in args and args != []:
        args = ["--model", tiny, *args]
    r = trace("--seq", "64", *args)
    assert r.exit_code == 2, r.output
    assert where in r.output and message in r.output
    assert "Traceback" not in r.output


def test_an_architecture_transformers_cannot_build_is_named(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, "model_type": "not-a-transformers-model"}))
    r = trace("--model", str(path), "--seq", "64")
    assert r.exit_code == 2, r.output
    out = " ".join(r.output.split())
    # refused when the config is read, before any model is traced (issue 15: exact or refused)
    assert "model_type 'not-a-transformers-model'" in out
    assert "could not build it" in out and "Covered model types" in out
    assert "--params" in out  # what to do instead


def test_a_config_transformers_rejects_is_named(tmp_path):
    path = tmp_path / "config.json"
    cfg = {**LLAMA, "hidden_size": 130}  # not a multiple of 4 heads
    path.write_text(json.dumps(cfg))
    # gpuhours reads the shape first and refuses it as transformers would (estimate/arch.py)
    r = trace("--model", str(path), "--seq", "64")
    assert r.exit_code == 2, r.output
    assert "config.json" in r.output
    assert "hidden_size (130) is not a multiple" in " ".join(r.output.split())
    # and transformers' own refusal, where a config gets that far, is named as such
    from gpuhours.errors import InputError
    from gpuhours.trace.build import _hf_config

    with pytest.raises(InputError) as caught:
        _hf_config(cfg, str(path))
    assert "transformers rejects this config.json" in caught.value.message
    assert "not a multiple of the number of attention heads" in caught.value.message


def test_a_step_that_fails_names_where(tiny, monkeypatch):
    """A failure inside the model's step becomes a message naming the phase, not a traceback."""
    import gpuhours.trace.step as step

    def broken(*args, **kwargs):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)")

    monkeypatch.setattr(step, "one_step", broken)
    r = trace("--model", tiny, "--seq", "64")
    assert r.exit_code == 2, r.output
    assert "the training step failed" in r.output and "shapes cannot be multiplied" in r.output


def test_learned_positions_limit_the_sequence():
    r = trace("--model", "gpt2", "--seq", "2048")
    assert r.exit_code == 2 and "1024 positions" in r.output


def test_confirm_fit_sets_the_trace_beside_the_analytic_answer(tiny, toy_gpu):
    from gpuhours.setup import Training
    from gpuhours.trace import confirm_fit

    t = Training(model=tiny, precision="bf16", micro_batch=4, seq_len=64)
    c = confirm_fit(t, toy_gpu)
    assert c.traced_peak_bytes.basis == "trace"
    assert c.reserved_bytes.basis == "model of the allocator"
    assert c.total_bytes.value == c.reserved_bytes.value + c.cuda_context_bytes.value
    assert c.fits_by_trace == (c.total_bytes.value <= c.limit_bytes.value)
    assert abs(c.error) < 0.05  # the analytic peak of this Llama-shaped model is within 5%
    assert "fits" in c.verdict


def test_confirm_fit_refuses_what_it_cannot_trace(tiny, toy_gpu):
    from gpuhours.errors import InputError
    from gpuhours.setup import Training
    from gpuhours.trace import confirm_fit

    with pytest.raises(InputError, match="ZeRO stage 3"):
        confirm_fit(Training(model=tiny, zero_stage=3, seq_len=64), toy_gpu)


def test_importing_the_trace_package_does_not_import_torch():
    """`gpuhours.trace`'s setup, results and rendering stay light (DESIGN.md principle 4)."""
    code = textwrap.dedent("""
        import sys
        import gpuhours.trace, gpuhours.trace.cli, gpuhours.trace.render
        import gpuhours.trace.allocator, gpuhours.trace.confirm
        print(sorted(m for m in ("torch", "transformers", "peft") if m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]"
