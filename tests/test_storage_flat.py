"""Checkpoints kept as single files (`checkpoint_step_500.pt`, `epoch_3.ckpt`, Lightning's
`epoch=2-step=1000-val_loss=0.23.ckpt`): names read, series formed, retention decided and
carried out like checkpoint directories, with the same safety (links, settle window)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuhours.storage.pruning import prune, remove_checkpoint_file
from gpuhours.storage.retention import RetentionPolicy
from gpuhours.storage.scan import flat_checkpoint_name
from test_storage_helpers import LATER, snapshot


@pytest.mark.parametrize(("name", "step", "epoch", "metrics", "pattern"), [
    ("checkpoint_step_500.pt", 500, None, {}, "checkpoint_step_*.pt"),
    ("epoch_3.ckpt", None, 3, {}, "epoch_*.ckpt"),
    ("model-step=1000.ckpt", 1000, None, {}, "model-step=*.ckpt"),
    ("epoch=2-step=500-val_loss=0.23.ckpt", 500, 2, {"val_loss": 0.23},
     "epoch=*-step=*-val_loss=*.ckpt"),
    ("epoch=3-val_acc=0.91.ckpt", None, 3, {"val_acc": 0.91}, "epoch=*-val_acc=*.ckpt"),
    ("epoch=4-val_loss=-1.5e-2.ckpt", None, 4, {"val_loss": -0.015}, "epoch=*-val_loss=*.ckpt"),
    ("checkpoint_7.pt", 7, None, {}, "checkpoint_*.pt"),
    ("global_step100.pt", 100, None, {}, "global_step*.pt"),
    ("model_epoch12.pth", None, 12, {}, "model_epoch*.pth"),
    ("iteration_0042.pth.tar", 42, None, {}, "iteration_*.pth.tar"),
])
def test_names_that_are_checkpoints(name: str, step: int | None, epoch: int | None,
                                    metrics: dict[str, float], pattern: str) -> None:
    f = flat_checkpoint_name(name)
    assert f is not None
    assert (f.step, f.epoch, f.pattern) == (step, epoch, pattern)
    assert f.metrics == pytest.approx(metrics)
    assert f.order == (step if step is not None else epoch)


@pytest.mark.parametrize("name", [
    "last.ckpt", "best.pt", "model.safetensors", "optimizer.pt", "batch_3.pt", "steps.pt",
    "stepper_3.pt", "checkpoint_step_500.txt", "epoch_3.ckpt.tmp", "data_00012.bin",
    # the shards of one model are not a series of checkpoints
    "model-00001-of-00003.safetensors", "pytorch_model-00001-of-00002.bin"])
def test_names_that_are_not(name: str) -> None:
    assert flat_checkpoint_name(name) is None


def _file(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(size))
    return path


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for step, size in [(100, 100), (200, 200), (300, 300), (400, 400)]:
        _file(tmp_path / "ckpts" / f"checkpoint_step_{step}.pt", size)
    for epoch in range(4):
        _file(tmp_path / "ckpts" / f"epoch_{epoch}.ckpt", 50)
    for epoch, step, loss in [(0, 100, "0.50"), (1, 200, "0.23"), (2, 300, "0.31")]:
        _file(tmp_path / "lightning" / f"epoch={epoch}-step={step}-val_loss={loss}.ckpt", 70)
    _file(tmp_path / "lightning" / "last.ckpt", 70)
    _file(tmp_path / "data" / "checkpoint_step_5.pt", 10)  # a dataset directory: never
    _file(tmp_path / "image_cache" / "epoch_1.ckpt", 10)  # nor a cache
    return tmp_path


def _plan(tree: Path, **kwargs: object) -> dict[str, str]:
    r = prune(str(tree), RetentionPolicy.model_validate(kwargs), now=LATER)
    return {d.path: d.action for d in r.plan.decisions}


def test_each_series_keeps_its_newest(tree: Path) -> None:
    actions = _plan(tree, keep_last=1)
    assert actions == {
        "ckpts/checkpoint_step_100.pt": "remove", "ckpts/checkpoint_step_200.pt": "remove",
        "ckpts/checkpoint_step_300.pt": "remove", "ckpts/checkpoint_step_400.pt": "keep",
        "ckpts/epoch_0.ckpt": "remove", "ckpts/epoch_1.ckpt": "remove",
        "ckpts/epoch_2.ckpt": "remove", "ckpts/epoch_3.ckpt": "keep",
        "lightning/epoch=0-step=100-val_loss=0.50.ckpt": "remove",
        "lightning/epoch=1-step=200-val_loss=0.23.ckpt": "remove",
        "lightning/epoch=2-step=300-val_loss=0.31.ckpt": "keep"}


def test_the_best_by_the_metric_in_the_name_is_kept(tree: Path) -> None:
    r = prune(str(tree), RetentionPolicy(keep_last=1, metric="val_loss"), now=LATER)
    by = {d.path: d for d in r.plan.decisions}
    best = by["lightning/epoch=1-step=200-val_loss=0.23.ckpt"]
    assert best.action == "keep" and best.reasons == ["best by val_loss"]
    assert best.metric == pytest.approx(0.23) and best.flat and best.epoch == 1
    assert by["lightning/epoch=0-step=100-val_loss=0.50.ckpt"].action == "remove"
    # the series without the metric keep their newest only
    assert by["ckpts/epoch_3.ckpt"].step_in_name is False and by["ckpts/epoch_3.ckpt"].step == 3
    # removal frees the files' bytes: 100 + 200 + 300 + 3 x 50 + 70
    assert r.plan.remove_bytes == 820


def test_yes_removes_exactly_the_planned_files(tree: Path) -> None:
    before = snapshot(tree)
    r = prune(str(tree), RetentionPolicy(keep_last=2), yes=True, now=LATER)
    removed = {x.path for x in r.removed}
    assert removed == {"ckpts/checkpoint_step_100.pt", "ckpts/checkpoint_step_200.pt",
                       "ckpts/epoch_0.ckpt", "ckpts/epoch_1.ckpt",
                       "lightning/epoch=0-step=100-val_loss=0.50.ckpt"}
    assert sum(x.bytes_removed for x in r.removed) == 100 + 200 + 50 + 50 + 70
    after = snapshot(tree)
    assert set(before) - set(after) == removed
    assert all(after[p] == before[p] for p in after)  # nothing else changed


def test_a_recent_file_is_kept_and_a_linked_one_too(tree: Path) -> None:
    recent = tree / "ckpts" / "checkpoint_step_100.pt"
    os.utime(recent, (LATER - 1, LATER - 1))  # modified a second before "now": being written
    os.symlink("epoch=0-step=100-val_loss=0.50.ckpt", tree / "lightning" / "best.ckpt")
    r = prune(str(tree), RetentionPolicy(keep_last=1), yes=True, now=LATER)
    by = {d.path: d for d in r.plan.decisions}
    assert any("modified" in x for x in by["ckpts/checkpoint_step_100.pt"].reasons)
    assert any("a link points at it" in x
               for x in by["lightning/epoch=0-step=100-val_loss=0.50.ckpt"].reasons)
    assert recent.exists() and (tree / "lightning" / "epoch=0-step=100-val_loss=0.50.ckpt").exists()


def test_a_file_swapped_for_a_link_is_not_removed(tmp_path: Path) -> None:
    target = _file(tmp_path / "outside" / "keep.bin", 5)
    d = tmp_path / "root" / "ckpts"
    _file(d / "checkpoint_step_1.pt", 5)
    (d / "checkpoint_step_1.pt").unlink()
    os.symlink(target, d / "checkpoint_step_1.pt")
    root = os.path.realpath(tmp_path / "root")
    x = remove_checkpoint_file(root, "ckpts/checkpoint_step_1.pt", RetentionPolicy(keep_last=1),
                               now=LATER)
    assert x.outcome == "skipped" and target.exists()
    assert os.path.islink(d / "checkpoint_step_1.pt")


def test_a_metric_in_no_name_is_an_error_naming_the_files(tree: Path) -> None:
    from gpuhours.errors import FieldError

    with pytest.raises(FieldError, match="names of 11 checkpoint files") as e:
        prune(str(tree), RetentionPolicy(keep_last=1, metric="val_acc"), now=LATER)
    assert "val_loss" in str(e.value)  # what the names do carry
