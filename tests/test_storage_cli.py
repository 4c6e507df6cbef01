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


# --- storage evict ----------------------------------------------------------------------------

def _aged(path: Path, size: int, hours_ago: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    t = path.stat().st_mtime - hours_ago * 3600
    os.utime(path, (t, t))
    return path


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    for i in range(1, 6):  # f1 oldest; 1,000 bytes each
        _aged(tmp_path / "img" / f"f{i}.png", 1000, hours_ago=6 - i)
    return tmp_path


def test_evict_dry_run_then_yes_removes_the_least_recently_used(cache):
    before = sorted(p.name for p in (cache / "img").iterdir())
    data = run_json("evict", str(cache), "--max-size", "2.5kB")  # 2,500 bytes
    # 5,000 bytes: the three oldest go to reach 2,000 <= 2,500
    assert [f["path"] for f in data["files"]] == ["img/f1.png", "img/f2.png", "img/f3.png"]
    assert data["bytes_before"] == 5000 and data["bytes_after"] == 2000
    assert data["applied"] is False and data["max_bytes"] == 2500
    assert sorted(p.name for p in (cache / "img").iterdir()) == before
    assert "Dry run, nothing removed" in run("evict", str(cache), "--max-size", "2500").stdout
    data = run_json("evict", str(cache), "--max-size", "2.5kB", "--yes")
    assert data["evicted_bytes"] == 3000
    assert sorted(p.name for p in (cache / "img").iterdir()) == ["f4.png", "f5.png"]


def test_evict_says_when_the_cap_cannot_be_met(cache):
    _aged(cache / "img" / "writing.png", 700, hours_ago=0)  # inside the 60 s settle window
    data = run_json("evict", str(cache), "--max-size", "500", "--yes", exit_code=1)
    assert data["over_cap"] is True and data["bytes_after"] == 700 and data["too_recent"] == 1
    assert [p.name for p in (cache / "img").iterdir()] == ["writing.png"]


@pytest.mark.parametrize(("args", "where", "pattern"), [
    (("--max-size", "5 gigs"), "--max-size", r"expected a size such as 5GB"),
    (("--max-size", "5GB", "--settle-s", "-1"), "--settle-s", r"expected seconds >= 0"),
])
def test_evict_bad_input(cache, args, where, pattern):
    assert_user_error(run("evict", str(cache), *args), where, pattern)


# --- storage consolidate ----------------------------------------------------------------------

def _batches(tmp_path: Path) -> tuple[list[str], Any]:
    import torch

    g = torch.Generator().manual_seed(0)
    parts = [{"images": torch.randn(n, 3, 4, 4, generator=g), "labels": torch.arange(n) + 10 * i}
             for i, n in enumerate((4, 5, 6))]
    parts[1]["images"][0, 0, 0, 0] = float("nan")  # a NaN must verify too (bitwise compare)
    paths = []
    for i, p in enumerate(parts):
        torch.save(p, tmp_path / f"batch_{i}.pt")
        paths.append(str(tmp_path / f"batch_{i}.pt"))
    return paths, parts


def test_consolidate_pt_batches_into_one_loadable_file(tmp_path):
    import torch

    paths, parts = _batches(tmp_path)
    dest = tmp_path / "dataset_v1.pt"
    data = run_json("consolidate", *paths, "--into", str(dest))
    assert data["format"] == "torch" and data["applied"] is False and not dest.exists()
    assert data["bytes"] == sum(os.path.getsize(p) for p in paths)
    data = run_json("consolidate", *paths, "--into", str(dest), "--yes")
    assert data["result"]["removed"] == paths and not any(os.path.exists(p) for p in paths)
    merged = torch.load(dest, weights_only=True)
    assert merged["images"].shape == (15, 3, 4, 4) and merged["labels"].shape == (15,)
    assert torch.equal(merged["labels"], torch.cat([p["labels"] for p in parts]))
    assert torch.allclose(merged["images"], torch.cat([p["images"] for p in parts]),
                          equal_nan=True)
    index = json.loads(Path(data["result"]["index"]).read_text())
    assert index["layout"] == "concat"
    assert [p["rows"]["images"] for p in index["parts"]] == [4, 5, 6]


def test_parts_of_different_shapes_are_kept_as_a_list(tmp_path):
    import torch

    a, b = torch.ones(2, 3), torch.zeros(4, 5)
    torch.save(a, tmp_path / "a.pt")
    torch.save(b, tmp_path / "b.pt")
    data = run_json("consolidate", str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), "--into",
                    str(tmp_path / "all.pt"), "--yes", "--keep-originals")
    assert data["result"]["removed"] == [] and (tmp_path / "a.pt").exists()
    merged = torch.load(tmp_path / "all.pt", weights_only=True)
    assert isinstance(merged, list) and torch.equal(merged[0], a) and torch.equal(merged[1], b)


def test_a_failed_verification_deletes_nothing(tmp_path, monkeypatch):
    import torch

    from gpuhours.storage.torch_merge import TorchMerge

    paths, _ = _batches(tmp_path)
    before = {p: Path(p).read_bytes() for p in paths}
    real_write = TorchMerge.write

    def lossy_write(self, parts, out):  # a merge that silently drops the last row of a part
        real_write(self, parts, out)
        out.seek(0)
        out.truncate()
        merged = {k: v for k, v in torch.load(parts[0], weights_only=True).items()}
        merged = {k: torch.cat([v, v[:-1]]) for k, v in merged.items()}
        torch.save(merged, out)

    monkeypatch.setattr(TorchMerge, "write", lossy_write)
    dest = tmp_path / "out.pt"
    assert_user_error(run("consolidate", *paths, "--into", str(dest), "--yes"), str(dest),
                      r"verification failed .*originals kept")
    assert not dest.exists()
    assert {p: Path(p).read_bytes() for p in paths} == before


def test_a_pickle_needing_code_is_refused_unless_allowed(tmp_path):
    import datetime

    import torch

    days = [datetime.date(2026, 11, 1), datetime.date(2026, 11, 2)]
    files = [str(tmp_path / f"d_{i}.pt") for i in range(2)]
    for f, day in zip(files, days, strict=True):
        torch.save({"day": day}, f)  # a date is not in torch's weights_only allow-list
    assert_user_error(run("consolidate", *files, "--into", str(tmp_path / "d.pt"), "--yes"),
                      "d_0.pt", r"weights_only=True.*--unsafe-pickle")
    assert all(os.path.exists(f) for f in files) and not (tmp_path / "d.pt").exists()
    data = run_json("consolidate", *files, "--into", str(tmp_path / "d.pt"), "--yes",
                    "--unsafe-pickle")
    assert data["result"]["removed"] == files
    assert torch.load(tmp_path / "d.pt", weights_only=False) == [{"day": d} for d in days]


def test_consolidate_bytes_and_bad_input(tmp_path):
    for i in range(3):
        (tmp_path / f"part_{i}.jsonl").write_text(f'{{"i": {i}}}\n')
    files = [str(tmp_path / f"part_{i}.jsonl") for i in range(3)]
    data = run_json("consolidate", *files, "--into", str(tmp_path / "all.jsonl"), "--yes")
    assert data["format"] == "bytes"
    assert (tmp_path / "all.jsonl").read_text() == '{"i": 0}\n{"i": 1}\n{"i": 2}\n'
    assert not any(os.path.exists(f) for f in files)
    (tmp_path / "x.jsonl").write_text("x")
    assert_user_error(run("consolidate", str(tmp_path / "x.jsonl"), "--into",
                          str(tmp_path / "all.jsonl")), "all.jsonl", r"already exists")
    assert_user_error(run("consolidate", str(tmp_path / "nope.pt"), "--into",
                          str(tmp_path / "n.pt")), "nope.pt", r"no such file")
    assert_user_error(run("consolidate", str(tmp_path / "x.jsonl"), "--into",
                          str(tmp_path / "y"), "--format", "zip"), "--format", r"expected auto")


def test_the_order_given_is_said_when_the_numbers_disagree(tmp_path):
    for n in (1, 2, 10):
        (tmp_path / f"batch_{n}.bin").write_bytes(b"x")
    files = sorted(str(tmp_path / f"batch_{n}.bin") for n in (1, 2, 10))  # as a glob sorts
    r = run("consolidate", *files, "--into", str(tmp_path / "all.bin"))
    assert r.exit_code == 0 and "not by the numbers in the names" in r.stdout
