"""A generated sequence longer than the model's configured context is bad input in the
generation command and in a plan's eval phase, as it already was in a plan's RL phase (a walk's
finding: `--output-tokens 200000` on a 131,072-token model was costed as 107.7 minutes)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gpuhours.cli import app

runner = CliRunner()
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


def _generation(*args: str):
    return runner.invoke(app, ["generation", "--model", "qwen2.5-0.5b", "--gpu", "a100-80gb",
                               *args], env=ENV)


def test_prompt_and_output_above_the_context_are_refused_naming_the_flags() -> None:
    # qwen2.5-0.5b's config: max_position_embeddings 32,768; 512 + 32,257 = 32,769 is one over
    r = _generation("--prompt-tokens", "512", "--output-tokens", "32257")
    assert r.exit_code == 2, r.output
    message = " ".join(r.stderr.split())
    assert "--prompt-tokens/--output-tokens" in message and "32,768-token context" in message
    assert "Traceback" not in r.output
    # the longest output is what the run waits for, so it is the one checked
    r = _generation("--prompt-tokens", "512", "--output-tokens", "512",
                    "--max-output-tokens", "32257")
    assert r.exit_code == 2 and "--max-output-tokens" in r.stderr, r.output
    # exactly the context is allowed
    assert _generation("--prompt-tokens", "512", "--output-tokens", "32256").exit_code == 0


def test_an_eval_benchmark_above_the_context_names_the_plan_line(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("project: t\nhardware: {gpu: h100-sxm}\nphases:\n  - name: ev\n"
                    "    kind: eval\n    model: qwen2.5-0.5b\n    benchmarks:\n"
                    "      - {name: long, samples: 10, prompt_tokens: 40000, answer_tokens: 10}\n")
    r = runner.invoke(app, ["plan", str(plan), "--no-doc"], env=ENV)
    assert r.exit_code == 2, r.output
    message = " ".join(r.stderr.split())
    assert f"{plan}, line 4, phase 'ev', field 'benchmarks' (long)" in message
    assert "32,768-token context" in message


def test_kv_bytes_per_element_is_held_to_real_cache_formats() -> None:
    # as --weight-bytes-per-param: 0.1 or 3 bytes per cached element is no format (0.1 made
    # 21,143 sequences "fit" on an A100), while fp8 (1) and bf16 (2) are
    for bad in ("0.1", "3"):
        r = _generation("--kv-bytes-per-element", bad)
        assert r.exit_code == 2, r.output
        assert "--kv-bytes-per-element" in r.stderr and "no KV-cache format" in r.stderr
    for good in ("1", "2"):
        assert _generation("--kv-bytes-per-element", good).exit_code == 0


def test_a_slow_sequence_rate_keeps_its_significant_figures() -> None:
    # 17 sequences of 60,000 output tokens take ~2,000 s a wave on an A100: about 0.0086
    # sequences/s, which the table printed as "0.01" (and "0.00" for longer outputs)
    r = runner.invoke(app, ["generation", "--model", "qwen2.5-7b", "--gpu", "a100-80gb",
                            "--output-tokens", "60000"], env=ENV)
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.startswith("sequences/s"))
    value = line.split()[1]
    assert value.startswith("0.00") and len(value.rstrip("0").split(".")[1]) >= 4, line
