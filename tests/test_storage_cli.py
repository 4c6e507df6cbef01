"""`gpuhours storage report` and `gpuhours storage prune` end to end, through typer's CliRunner:
the classification by kind with exact byte counts, dry run versus --yes, JSON, and bad input
(one paragraph naming the path or field, exit code 2, no traceback, nothing on stdout)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from gpuhours.cli import app
from test_storage_helpers import make_checkpoint

runner = CliRunner()


def run(*args: str) -> Result:
    return runner.invoke(app, ["storage", *args], env={"COLUMNS": "200", "NO_COLOR": "1"})


def run_json(*args: str, exit_code: int = 0) -> Any:
    result = run(*args, "--json")
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code == exit_code, result.output
    return json.loads(result.stdout)


def assert_user_error(result: Result, where: str, pattern: str) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"crashed with {result.exception!r}")
    assert "Traceback" not in result.output
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    message = result.stderr
    assert where in message, message
    assert re.search(pattern, message, re.S), message
    assert "\n\n" not in message.strip()


def _old(path: Path) -> None:
    """Set every mtime below `path` an hour back, so the default settle window has passed."""
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            os.utime(Path(dirpath) / name, (os.path.getatime(Path(dirpath) / name),
                                            os.path.getmtime(Path(dirpath) / name) - 3600),
                     follow_symlinks=False)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A project directory with every kind, sizes chosen for exact sums."""
    run_dir = tmp_path / "outputs" / "run1"
    for step, loss in [(100, 0.9), (200, 0.4), (300, 0.6), (400, 0.7)]:
        make_checkpoint(run_dir, step, metric=loss, payload=b"w" * 1000)
    (tmp_path / "outputs" / "final.ckpt").write_bytes(b"c" * 10)
    (tmp_path / ".cache" / "images").mkdir(parents=True)
    (tmp_path / ".cache" / "images" / "a.png").write_bytes(b"i" * 300)
    (tmp_path / "image_cache").mkdir()
    (tmp_path / "image_cache" / "b.bin").write_bytes(b"i" * 200)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.bin").write_bytes(b"t" * 4000)
    (tmp_path / "shards.parquet").write_bytes(b"p" * 50)
    (tmp_path / "wandb").mkdir()
    (tmp_path / "wandb" / "run.txt").write_bytes(b"l" * 70)
    (tmp_path / "train.log").write_bytes(b"l" * 30)
    (tmp_path / "README.md").write_bytes(b"r" * 5)
    _old(tmp_path)
    return tmp_path


def _checkpoint_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink()
               and ("checkpoint-" in str(p.relative_to(root)) or p.suffix == ".ckpt"))


def test_report_sizes_by_kind(tree):
    data = run_json("report", str(tree))
    kinds = {k["kind"]: k for k in data["kinds"]}
    assert kinds["checkpoints"]["bytes"] == _checkpoint_bytes(tree)
    assert kinds["caches"]["bytes"] == 500 and kinds["caches"]["files"] == 2
    assert kinds["datasets"]["bytes"] == 4050
    assert kinds["logs"]["bytes"] == 100
    assert kinds["other"]["bytes"] == 5
    assert data["total_bytes"] == sum(k["bytes"] for k in data["kinds"])
    # the default policy shown: keep the last 3
    actions = {d["step"]: d["action"] for d in data["retention"]["decisions"]}
    assert actions == {100: "remove", 200: "keep", 300: "keep", 400: "keep"}
    one = next(d for d in data["retention"]["decisions"] if d["step"] == 100)
    assert data["retention"]["remove_bytes"] == one["bytes"]


def test_report_terminal_names_the_units_and_what_it_frees(tree):
    result = run("report", str(tree), "--keep-last", "1", "--metric", "eval_loss")
    assert result.exit_code == 0, result.output
    assert "checkpoints" in result.stdout and "KiB" in result.stdout
    assert "would remove 2 checkpoint(s)" in result.stdout  # 100 and 300; 200 best, 400 newest
    assert "Classification" in result.stdout


def test_prune_dry_run_changes_nothing_then_yes_removes(tree):
    before = sorted(p.name for p in (tree / "outputs" / "run1").iterdir())
    data = run_json("prune", str(tree), "--keep-last", "1", "--keep-best", "1", "--metric",
                    "eval_loss")
    assert data["applied"] is False and data["removals"] == []
    assert sorted(p.name for p in (tree / "outputs" / "run1").iterdir()) == before
    text = run("prune", str(tree), "--keep-last", "1", "--metric", "eval_loss")
    assert "Dry run, nothing removed" in text.stdout
    data = run_json("prune", str(tree), "--keep-last", "1", "--metric", "eval_loss", "--yes")
    assert [r["path"] for r in data["removals"]] == ["outputs/run1/checkpoint-100",
                                                     "outputs/run1/checkpoint-300"]
    assert sorted(p.name for p in (tree / "outputs" / "run1").iterdir()) == [
        "checkpoint-200", "checkpoint-400"]
    assert (tree / "data" / "train.bin").exists() and (tree / ".cache" / "images").exists()


def test_prune_keeps_fresh_checkpoints_under_the_default_settle_window(tmp_path):
    for step in (1, 2, 3):
        make_checkpoint(tmp_path / "run", step)  # just written: mtime now
    data = run_json("prune", str(tmp_path), "--keep-last", "1", "--yes")
    assert data["removals"] == []
    assert all(any("modified" in r for r in d["reasons"]) for d in data["plan"]["decisions"])


def test_mode_max(tree):
    data = run_json("prune", str(tree), "--keep-last", "1", "--metric", "eval_loss", "--mode",
                    "max")
    kept = {d["step"] for d in data["plan"]["decisions"] if d["action"] == "keep"}
    assert kept == {100, 400}


# --- bad input ------------------------------------------------------------------------------

def test_dir_missing(tmp_path):
    assert_user_error(run("report", str(tmp_path / "nope")), "DIR", r"nope: no such directory")


def test_dir_is_a_file(tmp_path):
    f = tmp_path / "f.txt"
    f.write_text("x")
    assert_user_error(run("prune", str(f), "--keep-last", "1"), "DIR", r"f.txt: is a file")


@pytest.mark.parametrize(("args", "where"), [
    (("--keep-last", "-1"), "--keep-last"),
    (("--keep-last", "1", "--keep-best", "-2", "--metric", "eval_loss"), "--keep-best"),
])
def test_negative_counts(tree, args, where):
    assert_user_error(run("prune", str(tree), *args), where, r"expected a whole number >= 0, got -")


def test_prune_needs_keep_last(tree):
    assert_user_error(run("prune", str(tree)), "--keep-last", r"prune needs --keep-last N")


def test_keep_best_needs_metric(tree):
    assert_user_error(run("prune", str(tree), "--keep-last", "1", "--keep-best", "2"),
                      "--keep-best", r"needs --metric")


def test_bad_mode(tree):
    assert_user_error(run("report", str(tree), "--metric", "eval_loss", "--mode", "lowest"),
                      "--mode", r"expected min or max, got 'lowest'")


def test_unknown_metric_in_every_checkpoint(tree):
    assert_user_error(run("prune", str(tree), "--keep-last", "1", "--metric", "eval_bleu"),
                      "--metric", r"'eval_bleu' is in no checkpoint.*eval_loss")


def test_malformed_trainer_state(tree):
    state = tree / "outputs" / "run1" / "checkpoint-200" / "trainer_state.json"
    state.write_text('{"log_history": [}')
    _old(tree)
    assert_user_error(run("report", str(tree)), str(state), r"not valid JSON \(.* line 1")


@pytest.mark.parametrize(("content", "field", "pattern"), [
    ({"log_history": {"step": 1}}, "'log_history'", r"expected a list"),
    ({"log_history": [{"step": 200, "eval_loss": "low"}]}, "'log_history[0].eval_loss'",
     r"expected a number, got 'low'"),
    ([1, 2], "trainer_state.json", r"expected a JSON object"),
    ({"best_model_checkpoint": 5}, "'best_model_checkpoint'", r"expected a path or null"),
])
def test_trainer_state_with_a_wrong_field(tree, content, field, pattern):
    state = tree / "outputs" / "run1" / "checkpoint-200" / "trainer_state.json"
    state.write_text(json.dumps(content))
    _old(tree)
    result = run("prune", str(tree), "--keep-last", "1", "--metric", "eval_loss")
    assert_user_error(result, field, pattern)
    assert "checkpoint-200/trainer_state.json" in result.stderr


def test_malformed_metrics_file(tree, tmp_path_factory):
    f = tmp_path_factory.mktemp("m") / "metrics.json"
    f.write_text("{oops")
    assert_user_error(run("report", str(tree), "--metric", "score", "--metrics-file", str(f)),
                      "--metrics-file", r"metrics.json: not valid JSON")


def test_storage_commands_do_not_import_torch(tree):
    code = ("import sys; from typer.testing import CliRunner; import gpuhours.cli as c; "
            f"r = CliRunner().invoke(c.app, ['storage', 'report', {str(tree)!r}, '--json']); "
            "assert r.exit_code == 0, r.output; "
            "print(sorted(m for m in ('torch', 'transformers', 'peft') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=120)
    assert out.stdout.strip() == "[]"
