"""`gpuhours fit --from FILE`: the setup of another tool's config, as `estimate --from` reads it
(gpuhours.importers), with the options given winning and the warnings saying what was used.

The independent check: `fit --from FILE` answers exactly what `fit` answers with the same setup
typed as options (the file's effective batch, micro-batch x accumulation x GPUs, worked by hand).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from gpuhours.cli import app

# written after axolotl's examples/llama-3/lora-8b.yml, on a catalog model small enough that
# several configurations fit an A100
AXOLOTL = """\
base_model: Qwen/Qwen2.5-0.5B
adapter: lora
lora_r: 8
lora_target_linear: true
sequence_len: 1024
micro_batch_size: 2
gradient_accumulation_steps: 4
num_epochs: 3
bf16: true
gradient_checkpointing: true
optimizer: adamw_torch
"""

#: the same setup as options (axolotl bf16 = weights in bf16; adamw_torch = foreach AdamW)
SAME_AS_OPTIONS = ["--model", "qwen2.5-0.5b", "--method", "lora", "--lora-rank", "8",
                   "--lora-targets", "all-linear", "--seq", "1024", "--batch", "2",
                   "--precision", "bf16", "--checkpointing", "--optimizer", "adamw",
                   "--optimizer-impl", "foreach"]

runner = CliRunner()


def fit_json(*args: str) -> dict[str, Any]:
    r = runner.invoke(app, ["fit", "--gpu", "a100-80gb", "--json", *args],
                      env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    data: dict[str, Any] = json.loads(r.stdout)
    return data


def setup_file(tmp_path: Path, text: str = AXOLOTL) -> str:
    p = tmp_path / "lora.yml"
    p.write_text(text, encoding="utf-8")
    return str(p)


def test_fit_from_equals_the_same_setup_typed(tmp_path: Path) -> None:
    path = setup_file(tmp_path)
    got = fit_json("--from", path)
    # effective batch by hand: micro_batch_size 2 x gradient_accumulation_steps 4 x 1 GPU = 8
    want = fit_json(*SAME_AS_OPTIONS, "--effective-batch", "8")
    warnings = got.pop("warnings")
    assert got == want
    assert got["effective_batch"] == 8
    assert got["requested"]["method"] == "lora" and got["requested"]["checkpointing"] is True
    assert warnings[0].startswith(f"setup read from {path} (axolotl)")
    assert any("effective batch 8 = the file's micro-batch 2 x accumulation 4 x 1 GPU(s)" in w
               for w in warnings)
    # fit counts no amount of work: the file's epochs are said unused, not silently dropped
    assert any("not used by fit: epochs=3" in w for w in warnings)


def test_flags_given_win_and_are_named(tmp_path: Path) -> None:
    path = setup_file(tmp_path)
    got = fit_json("--from", path, "--method", "full", "--gpus", "2", "--seq", "512")
    # the file's LoRA rank is unused by full fine-tuning; given as flags with --method full, a
    # rank is refused as a conflict, so the flags leave it out
    no_lora = [a for i, a in enumerate(SAME_AS_OPTIONS) if a not in ("--lora-rank", "--lora-targets")
               and SAME_AS_OPTIONS[i - 1] not in ("--lora-rank", "--lora-targets")]
    want = fit_json(*no_lora, "--method", "full", "--gpus", "2", "--seq", "512",
                    "--effective-batch", "16")
    warnings = got.pop("warnings")
    assert got == want
    # per-GPU micro-batch 2 x accumulation 4 x 2 GPUs = 16
    assert got["effective_batch"] == 16
    assert got["requested"]["method"] == "full" and got["requested"]["num_gpus"] == 2
    replaced = next(w for w in warnings if "the command line replaces" in w)
    assert "method" in replaced and "seq_len" in replaced


def test_effective_batch_given_wins_over_the_files_accumulation(tmp_path: Path) -> None:
    got = fit_json("--from", setup_file(tmp_path), "--effective-batch", "32")
    assert got["effective_batch"] == 32
    assert any("not used: accumulation 4: --effective-batch" in w for w in got["warnings"])


def test_terminal_output_lists_the_warnings(tmp_path: Path) -> None:
    path = setup_file(tmp_path)
    r = runner.invoke(app, ["fit", "--gpu", "a100-80gb", "--from", path],
                      env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    assert "warning: setup read from" in r.stdout and "not used by fit: epochs=3" in r.stdout


def test_without_from_the_json_is_unchanged() -> None:
    assert "warnings" not in fit_json(*SAME_AS_OPTIONS)


def test_bad_setup_file_is_exit_2_naming_it(tmp_path: Path) -> None:
    p = tmp_path / "x.yml"
    p.write_text("just: [a, list\n", encoding="utf-8")
    r = runner.invoke(app, ["fit", "--gpu", "a100-80gb", "--from", str(p)],
                      env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert r.exit_code == 2
    assert str(p) in r.output and "Traceback" not in r.output
    missing = runner.invoke(app, ["fit", "--gpu", "a100-80gb", "--from",
                                  str(tmp_path / "none.yml")])
    assert missing.exit_code == 2 and "no such file" in missing.output
