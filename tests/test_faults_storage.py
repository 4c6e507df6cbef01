"""Fault injection: `storage prune --yes` never crosses a mount point and reports what it really
removed; special files (a FIFO named trainer_state.json, /dev/zero as a model, a huge sparse
file) never hang or exhaust memory (gpuhours issue 12, third item).

Mount points are real (a bind mount of the same filesystem, which st_dev cannot see, and a
tmpfs, which it can); they need root and are skipped with the reason otherwise. Commands that
would hang or allocate without end before the fix run in a subprocess with a time limit and an
address-space limit, so that a regression fails the test instead of the machine."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import InputError
from gpuhours.storage import pruning as prune_mod
from gpuhours.storage import scan as scan_mod
from gpuhours.storage.pruning import prune
from gpuhours.storage.retention import RetentionPolicy
from gpuhours.storage.scan import scan_checkpoint
from test_storage_helpers import make_checkpoint

LATER = 4_000_000_000.0  # every checkpoint settled
runner = CliRunner()


def policy(keep_last: int = 1) -> RetentionPolicy:
    return RetentionPolicy(keep_last=keep_last)


def _mounts_under(path: Path) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    return [p for p in points if p.startswith(str(path) + "/")]


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[object]:
    """mount(args..., target): runs `mount` (root only; skips otherwise); unmounts everything
    below tmp_path at the end, wherever a rename moved it."""

    def do(*args: str) -> None:
        done = subprocess.run(["mount", *args], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount here ({done.stderr.strip() or done.returncode}); "
                        "the mount-point cases need root")

    yield do
    for point in reversed(_mounts_under(tmp_path)):
        subprocess.run(["umount", "-l", point], check=False)


def _tree(root: Path) -> tuple[Path, Path]:
    """run/checkpoint-100..300 and a folder outside the root with a precious file."""
    for step in (100, 200, 300):
        make_checkpoint(root / "run", step)
    outside = root.parent / f"{root.name}-outside"
    outside.mkdir()
    (outside / "precious.bin").write_bytes(b"p" * 1000)
    return root / "run", outside


@pytest.mark.parametrize("kind", ["bind", "tmpfs"])
def test_prune_never_crosses_a_mount_point_inside_a_checkpoint(tmp_path: Path, mount: object,
                                                                kind: str) -> None:
    root = tmp_path / "root"
    run, outside = _tree(root)
    target = run / "checkpoint-100" / "mounted"
    target.mkdir()
    if kind == "bind":  # same filesystem: st_dev is the same, only the mount table tells
        mount("--bind", str(outside), str(target))  # type: ignore[operator]
    else:
        mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(target))  # type: ignore[operator]
        (target / "precious.bin").write_bytes(b"t" * 1000)
    result = runner.invoke(app, ["storage", "prune", str(root), "--keep-last", "1", "--yes",
                                 "--settle-s", "0"], env={"COLUMNS": "250", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    assert (target / "precious.bin").read_bytes()[:1] in (b"p", b"t")  # untouched
    assert (outside / "precious.bin").exists()
    assert (run / "checkpoint-100").is_dir() and not (run / "checkpoint-200").exists()
    assert "holds a mount point" in result.output
    assert "Removed 1 checkpoint(s)" in result.output  # checkpoint-200, and nothing else


def test_a_mount_that_appears_after_the_checks_stops_the_delete(tmp_path: Path, mount: object,
                                                                monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    """The re-check before removal is made to miss the mount (as if it appeared right after):
    the delete itself meets it, stops before entering it, and the count says what it deleted."""
    root = tmp_path / "root"
    run, outside = _tree(root)
    real_root = str(root.resolve())
    stale = scan_checkpoint(real_root, "run/checkpoint-100")
    target = run / "checkpoint-100" / "zz-mounted"  # walked after the checkpoint's files
    target.mkdir()
    mount("--bind", str(outside), str(target))  # type: ignore[operator]
    monkeypatch.setattr(prune_mod, "scan_checkpoint",
                        lambda r, rel, marker="trainer_state.json":
                        stale if rel == "run/checkpoint-100" else scan_checkpoint(r, rel, marker))
    # the mount table read by the plan's scan misses it too (a bind mount of the same
    # filesystem has the same st_dev): the plan removes checkpoint-100 and -200
    monkeypatch.setattr(scan_mod, "mount_points_under", lambda root: frozenset(), raising=False)
    r = prune(str(root), policy(), yes=True, now=LATER)
    assert (outside / "precious.bin").read_bytes() == b"p" * 1000
    by_path = {x.path: x for x in r.removals}
    stopped = by_path["run/checkpoint-100"]
    assert stopped.outcome == "failed" and "mount point" in stopped.detail
    assert by_path["run/checkpoint-200"].outcome == "removed"
    assert [x.path for x in r.removed] == ["run/checkpoint-200"]
    # what the failed removal deleted before it stopped is counted, not hidden: exactly the
    # checkpoint's own files that are gone (4 before), nothing inside the mount
    (trash,) = [p for p in run.iterdir() if p.name.startswith(".gpuhours-trash-checkpoint-100")]
    left = [p for p in trash.rglob("*") if p.is_file() and "zz-mounted" not in p.parts]
    assert stopped.files_removed == 4 - len(left)
    assert f"{stopped.files_removed} file(s)" in stopped.detail
    assert r.partly_removed == ([stopped] if stopped.files_removed else [])


def test_removed_count_and_bytes_are_what_was_deleted(tmp_path: Path) -> None:
    root = tmp_path / "root"
    run, _ = _tree(root)
    files_200 = [p for p in (run / "checkpoint-200").rglob("*") if p.is_file()]
    r = prune(str(root), policy(), yes=True, now=LATER)
    removed = {x.path: x for x in r.removed}
    assert set(removed) == {"run/checkpoint-100", "run/checkpoint-200"}
    assert removed["run/checkpoint-200"].files_removed == len(files_200)
    plan_bytes = {d.path: d.bytes for d in r.plan.to_remove}
    assert all(x.bytes_removed == plan_bytes[p] for p, x in removed.items())


# --- special files ---------------------------------------------------------------------------


def _limited() -> None:
    """In the child: at most 2 GiB of address space (a read of /dev/zero fails, not the host)."""
    resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))


def gpuhours(*args: str, timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
    """The CLI in a child process with a time and memory limit; a hang is a test failure."""
    try:
        return subprocess.run([sys.executable, "-m", "gpuhours.cli", *args], capture_output=True,
                              text=True, timeout=timeout_s, preexec_fn=_limited,
                              env={**os.environ, "COLUMNS": "250", "NO_COLOR": "1"})
    except subprocess.TimeoutExpired:
        pytest.fail(f"gpuhours {' '.join(args)} hung for {timeout_s} s")


def _one_error(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    for needle in needles:
        assert needle in done.stderr, done.stderr


def test_a_fifo_named_trainer_state_json_does_not_hang_the_report(tmp_path: Path) -> None:
    run = tmp_path / "run"
    make_checkpoint(run, 100)
    make_checkpoint(run, 200, state=False)
    os.mkfifo(run / "checkpoint-200" / "trainer_state.json")
    done = gpuhours("storage", "report", str(tmp_path), "--keep-last", "1", "--settle-s", "0",
                    timeout_s=20)
    assert done.returncode == 0, done.stderr
    assert "FIFO" in done.stdout and "not a regular file" in done.stdout
    pr = gpuhours("storage", "prune", str(tmp_path), "--keep-last", "1", "--settle-s", "0",
                  "--yes", timeout_s=20)
    assert pr.returncode == 0, pr.stderr
    assert (run / "checkpoint-200").is_dir()  # kept: its state cannot be read


def test_a_fifo_as_hf_log_or_metrics_file_is_an_error_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "trainer_state.json"
    os.mkfifo(fifo)
    _one_error(gpuhours("doctor", "--hf-log", str(fifo), timeout_s=20),
               str(fifo), "FIFO (named pipe), not a regular file")
    make_checkpoint(tmp_path / "run", 100, metric=0.5)
    _one_error(gpuhours("storage", "report", str(tmp_path / "run"), "--metric", "eval_loss",
                        "--metrics-file", str(fifo), timeout_s=20), "FIFO")


def test_dev_zero_as_a_model_path_is_an_error_not_a_memory_exhaustion() -> None:
    _one_error(gpuhours("estimate", "--model", "/dev/zero", "--gpu", "h100-sxm", timeout_s=30),
               "/dev/zero", "character device")


def test_a_huge_sparse_config_json_is_refused_before_reading(tmp_path: Path) -> None:
    huge = tmp_path / "config.json"
    with huge.open("wb") as f:
        f.truncate(2**40)  # 1 TiB, sparse: nothing on disk
    _one_error(gpuhours("estimate", "--model", str(huge), "--gpu", "h100-sxm", timeout_s=30),
               str(huge), "1,099,511,627,776 bytes")


def test_a_huge_trainer_state_is_refused_before_reading(tmp_path: Path) -> None:
    run = tmp_path / "run"
    make_checkpoint(run, 100)
    make_checkpoint(run, 200, state=False)
    with (run / "checkpoint-200" / "trainer_state.json").open("wb") as f:
        f.truncate(2**40)
    done = gpuhours("storage", "report", str(tmp_path), "--keep-last", "1", "--settle-s", "0",
                    timeout_s=30)
    _one_error(done, "trainer_state.json", "1,099,511,627,776 bytes")


def test_safe_reader_directly(tmp_path: Path) -> None:
    from gpuhours.files import read_user_text

    (tmp_path / "ok.json").write_text("{}")
    assert read_user_text(tmp_path / "ok.json", "x", 10) == "{}"
    with pytest.raises(InputError, match="more than the 1 bytes"):
        read_user_text(tmp_path / "ok.json", "x", 1)
    with pytest.raises(InputError, match="is a directory"):
        read_user_text(tmp_path, "x", 10)
    with pytest.raises(FileNotFoundError):
        read_user_text(tmp_path / "missing", "x", 10)
    (tmp_path / "bad").write_bytes(b"\xff\xfe")
    with pytest.raises(InputError, match="not UTF-8"):
        read_user_text(tmp_path / "bad", "x", 10)
