"""Checkpoint retention and prune: each safety rule with its own test, interruption (an
exception mid-loop, and SIGKILL of a real process), and a property-based test over generated
trees and policies.

The rules (gpuhours.storage.retention / prune): nothing outside DIR is removed; links are never
followed; the newest and the best complete checkpoint of each run are kept; an incomplete one
(tmp- name, no trainer_state.json, a lock file, a file modified within settle_s) is kept; a
checkpoint removed part-way never keeps a checkpoint's name.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuhours.errors import InputError
from gpuhours.storage import pruning as prune_mod
from gpuhours.storage.pruning import prune, remove_checkpoint
from gpuhours.storage.retention import CheckpointFacts, RetentionPolicy, decide
from gpuhours.storage.scan import scan
from test_storage_helpers import LATER, make_checkpoint, snapshot, subtree


def policy(**kw) -> RetentionPolicy:
    return RetentionPolicy(**{"keep_last": 1, **kw})


def names(root: Path, run: str = "run") -> set[str]:
    return {p.name for p in (root / run).iterdir()}


# --- the pure rules -------------------------------------------------------------------------

def test_decide_keeps_last_n_and_best_k_per_run():
    facts = [CheckpointFacts(path=f"r/checkpoint-{s}", run="r", step=s, metric=m)
             for s, m in [(100, 3.0), (200, 1.0), (300, 2.0), (400, 5.0), (500, 4.0)]]
    facts.append(CheckpointFacts(path="q/checkpoint-7", run="q", step=7))
    why = decide(facts, policy(keep_last=2, keep_best=2, metric="eval_loss"))
    kept = {f.path for f, w in zip(facts, why, strict=True) if w}
    # last 2: 500, 400; best 2 (min): 200 (1.0), 300 (2.0); run q: its only checkpoint
    assert kept == {"r/checkpoint-500", "r/checkpoint-400", "r/checkpoint-200",
                    "r/checkpoint-300", "q/checkpoint-7"}
    assert why[4][0] == "newest" and why[1][0] == "best by eval_loss"


def test_decide_mode_max_and_ties_prefer_newer():
    facts = [CheckpointFacts(path=f"checkpoint-{s}", run=".", step=s, metric=m)
             for s, m in [(1, 0.9), (2, 0.9), (3, 0.1)]]
    why = decide(facts, policy(keep_last=0, metric="eval_accuracy"))  # mode from the name: max
    assert [bool(w) for w in why] == [False, True, True]


def test_zero_means_still_the_newest_and_the_best(tmp_path):
    run = tmp_path / "run"
    for step, loss in [(100, 0.5), (200, 0.9), (300, 0.7)]:
        make_checkpoint(run, step, metric=loss)
    r = prune(str(tmp_path), policy(keep_last=0, keep_best=0, metric="eval_loss"), yes=True,
              now=LATER)
    assert names(tmp_path) == {"checkpoint-100", "checkpoint-300"}
    assert [x.outcome for x in r.removals] == ["removed"]


def test_metric_is_the_evaluation_at_the_checkpoint_step(tmp_path):
    run = tmp_path / "run"
    make_checkpoint(run, 100, metric=0.1, metric_step=90)  # evaluated another model
    make_checkpoint(run, 200, metric=0.5)
    make_checkpoint(run, 300, metric=0.9)
    plan = prune(str(tmp_path), policy(keep_last=1, metric="eval_loss"), now=LATER).plan
    by_step = {d.step: d for d in plan.decisions}
    assert by_step[100].metric is None and by_step[100].action == "remove"
    assert by_step[200].reasons == ["best by eval_loss"]


def test_trainer_best_model_checkpoint_is_kept(tmp_path):
    run = tmp_path / "run"
    make_checkpoint(run, 100)
    make_checkpoint(run, 200)
    make_checkpoint(run, 300, extra_state={"best_model_checkpoint": "/elsewhere/run/checkpoint-100"})
    prune(str(tmp_path), policy(keep_last=1), yes=True, now=LATER)
    assert names(tmp_path) == {"checkpoint-100", "checkpoint-300"}


# --- incomplete checkpoints -----------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "reason"), [
    (dict(staging=True), "tmp- name"),
    (dict(state=False), "no trainer_state.json"),
    (dict(lock=True), "lock or temporary file"),
    (dict(recent=True), "modified 1 s ago"),
])
def test_incomplete_checkpoint_is_never_removed(tmp_path, kwargs, reason):
    run = tmp_path / "run"
    make_checkpoint(run, 100, **kwargs)
    make_checkpoint(run, 200)
    make_checkpoint(run, 300)
    before = snapshot(tmp_path)
    r = prune(str(tmp_path), policy(keep_last=1), yes=True, now=LATER)
    prefix = "tmp-checkpoint-100" if kwargs.get("staging") else "checkpoint-100"
    d = next(d for d in r.plan.decisions if d.step == 100)
    assert d.action == "keep" and any(reason in x for x in d.reasons), d.reasons
    assert subtree(snapshot(tmp_path), f"run/{prefix}") == subtree(before, f"run/{prefix}")
    assert "checkpoint-200" not in names(tmp_path)


def test_incomplete_newest_does_not_count_as_newest(tmp_path):
    """A checkpoint being written is kept, and the newest *complete* one is kept as well."""
    run = tmp_path / "run"
    make_checkpoint(run, 100)
    make_checkpoint(run, 200)
    make_checkpoint(run, 300, state=False)
    prune(str(tmp_path), policy(keep_last=1), yes=True, now=LATER)
    assert names(tmp_path) == {"checkpoint-200", "checkpoint-300"}


def test_half_written_state_of_a_recent_checkpoint_is_incomplete_not_an_error(tmp_path):
    run = tmp_path / "run"
    make_checkpoint(run, 100)
    d = make_checkpoint(run, 200, recent=True)
    (d / "trainer_state.json").write_text('{"log_history": [{"st')
    os.utime(d / "trainer_state.json", (LATER - 1, LATER - 1))
    plan = prune(str(tmp_path), policy(keep_last=1), now=LATER).plan
    assert any("not valid JSON yet" in x for x in plan.decisions[1].reasons)


def test_writer_coming_back_between_plan_and_removal_is_skipped(tmp_path):
    run = tmp_path / "run"
    make_checkpoint(run, 100)
    make_checkpoint(run, 200)
    p = policy(keep_last=1)
    plan = prune(str(tmp_path), p, now=LATER).plan
    assert [d.step for d in plan.to_remove] == [100]
    (run / "checkpoint-100" / "save.lock").write_text("")  # a writer took it meanwhile
    r = remove_checkpoint(str(tmp_path.resolve()), "run/checkpoint-100", p, now=LATER)
    assert r.outcome == "skipped" and "incomplete now" in r.detail
    assert (run / "checkpoint-100" / "model.safetensors").exists()


# --- links and containment ------------------------------------------------------------------

def test_nothing_outside_dir_is_touched_and_links_are_not_followed(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    make_checkpoint(outside, 1)  # outside/checkpoint-1: a checkpoint, but not ours
    (outside / "data.bin").write_bytes(b"x" * 1000)
    run = root / "run"
    for step in (100, 200, 300):
        make_checkpoint(run, step)
    os.symlink(outside / "checkpoint-1", run / "checkpoint-50")  # named like a checkpoint
    os.symlink(outside, root / "outside-link")
    os.symlink(outside / "data.bin", run / "checkpoint-100" / "linked.bin")  # link inside one
    before_outside = snapshot(outside)
    r = prune(str(root), policy(keep_last=1), yes=True, now=LATER)
    assert snapshot(outside) == before_outside
    assert {d.path for d in r.plan.decisions} == {f"run/checkpoint-{s}" for s in (100, 200, 300)}
    assert names(root) == {"checkpoint-50", "checkpoint-300"}
    assert (run / "checkpoint-50").is_symlink() and (root / "outside-link").is_symlink()
    s = scan(str(root.resolve()))
    assert s.kinds["links"].files == 2 and s.kinds["links"].bytes < 200  # the links themselves


def test_checkpoint_a_link_points_at_is_kept(tmp_path):
    run = tmp_path / "run"
    for step in (100, 200, 300):
        make_checkpoint(run, step)
    os.symlink("run/checkpoint-100", tmp_path / "best")
    r = prune(str(tmp_path), policy(keep_last=1), yes=True, now=LATER)
    assert names(tmp_path) == {"checkpoint-100", "checkpoint-300"}
    assert any("a link points at it: best" in x for x in r.plan.decisions[0].reasons)


def test_a_path_through_a_link_is_refused_at_removal(tmp_path):
    """Even if a plan named a checkpoint reached through a link (or a directory was swapped
    for a link after the scan), removal checks every component again."""
    run = tmp_path / "run"
    make_checkpoint(run, 100)
    os.symlink("run", tmp_path / "alias")
    r = remove_checkpoint(str(tmp_path.resolve()), "alias/checkpoint-100", policy(), now=LATER)
    assert r.outcome == "skipped"
    assert (run / "checkpoint-100" / "trainer_state.json").exists()


def test_a_directory_swapped_for_a_link_after_the_checks_is_not_followed(tmp_path, monkeypatch):
    """The race: the path checks pass, then a directory on the way becomes a link to outside.
    The rename and the delete go through descriptors opened with O_NOFOLLOW, so they refuse."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    make_checkpoint(outside, 100)
    root.mkdir()
    os.symlink(outside, root / "run")  # what the swap leaves behind
    before = snapshot(outside)
    monkeypatch.setattr(prune_mod, "is_within", lambda root, rel: True)  # checks already passed
    r = remove_checkpoint(str(root.resolve()), "run/checkpoint-100", policy(), now=LATER)
    assert r.outcome == "skipped" and "without following links" in r.detail
    assert snapshot(outside) == before


def test_dir_given_as_a_link_is_resolved_once(tmp_path):
    run = tmp_path / "real" / "run"
    make_checkpoint(run, 100)
    make_checkpoint(run, 200)
    os.symlink(tmp_path / "real", tmp_path / "named")
    r = prune(str(tmp_path / "named"), policy(), yes=True, now=LATER)
    assert r.root == str((tmp_path / "real").resolve())
    assert {p.name for p in run.iterdir()} == {"checkpoint-200"}


# --- interruption ---------------------------------------------------------------------------

def _tree_for_interruption(root: Path) -> None:
    for step in (100, 200, 300, 400, 500):
        make_checkpoint(root / "run", step, payload=os.urandom(2000))


def test_exception_mid_loop_leaves_kept_checkpoints_whole(tmp_path, monkeypatch):
    _tree_for_interruption(tmp_path)
    before = snapshot(tmp_path)
    real_delete = prune_mod._delete_tree
    calls = []

    def failing_delete(parent_fd, name, fence, tally):
        if name.startswith(".gpuhours-trash-"):  # a checkpoint, not a folder inside one
            calls.append(name)
        if len(calls) == 2 and name.startswith(".gpuhours-trash-"):
            # the second checkpoint: delete one file, then fail
            os.unlink(os.path.join(name, "model.safetensors"), dir_fd=parent_fd)
            raise RuntimeError("interrupted")
        return real_delete(parent_fd, name, fence, tally)

    monkeypatch.setattr(prune_mod, "_delete_tree", failing_delete)
    with pytest.raises(RuntimeError, match="interrupted"):
        prune(str(tmp_path), policy(keep_last=2), yes=True, now=LATER)
    monkeypatch.setattr(prune_mod, "_delete_tree", real_delete)
    after = snapshot(tmp_path)
    for kept in ("run/checkpoint-400", "run/checkpoint-500", "run/checkpoint-300"):
        assert subtree(after, kept) == subtree(before, kept)
    # 100 is gone; 200 is half deleted under a trash name, never under its own
    s = scan(str(tmp_path.resolve()))
    assert sorted(c.step for c in s.checkpoints) == [300, 400, 500]
    assert len(s.trash_dirs) == 1 and "checkpoint-200" in s.trash_dirs[0]
    assert s.kinds["trash"].files > 0
    # the next prune finishes the trash and the policy
    r = prune(str(tmp_path), policy(keep_last=2), yes=True, now=LATER)
    assert [t.outcome for t in r.trash] == ["removed"]
    assert names(tmp_path) == {"checkpoint-400", "checkpoint-500"}
    after = snapshot(tmp_path)
    for kept in ("run/checkpoint-400", "run/checkpoint-500"):
        assert subtree(after, kept) == subtree(before, kept)


KILL_SCRIPT = textwrap.dedent("""
    import os, sys, time
    import gpuhours.storage.pruning as p
    from gpuhours.storage.retention import RetentionPolicy

    def slow_delete(parent_fd, name, fence, tally):
        # delete one file, say so, then wait to be killed
        os.unlink(os.path.join(name, "model.safetensors"), dir_fd=parent_fd)
        print("deleting", name, flush=True)
        time.sleep(120)

    p._delete_tree = slow_delete
    p.prune(sys.argv[1], RetentionPolicy(keep_last=2), yes=True, now=float(sys.argv[2]))
""")


def test_sigkill_mid_removal_leaves_kept_checkpoints_whole(tmp_path):
    _tree_for_interruption(tmp_path)
    before = snapshot(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, str(tmp_path), str(LATER)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("deleting"), proc.stderr.read() if proc.stderr else line
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
    assert proc.returncode == -signal.SIGKILL
    after = snapshot(tmp_path)
    for step in (200, 300, 400, 500):
        assert subtree(after, f"run/checkpoint-{step}") == subtree(before, f"run/checkpoint-{step}")
    s = scan(str(tmp_path.resolve()))
    assert sorted(c.step for c in s.checkpoints) == [200, 300, 400, 500]
    assert len(s.trash_dirs) == 1
    prune(str(tmp_path), policy(keep_last=2), yes=True, now=LATER)
    assert names(tmp_path) == {"checkpoint-400", "checkpoint-500"}


# --- bad input (library level; the CLI tests check the messages) ----------------------------

def test_malformed_state_of_a_settled_checkpoint_is_an_error(tmp_path):
    d = make_checkpoint(tmp_path / "run", 100)
    (d / "trainer_state.json").write_text("{not json")
    with pytest.raises(InputError, match=r"checkpoint-100/trainer_state.json.*not valid JSON"):
        prune(str(tmp_path), policy(), now=LATER)


def test_unknown_metric_everywhere_is_an_error_that_lists_what_there_is(tmp_path):
    make_checkpoint(tmp_path / "run", 100, metric=0.3)
    with pytest.raises(InputError, match=r"'eval_acc' is in no checkpoint.*eval_loss"):
        prune(str(tmp_path), policy(metric="eval_acc"), now=LATER)


def test_metric_logged_only_between_checkpoints_is_explained(tmp_path):
    make_checkpoint(tmp_path / "run", 500, metric=0.3, metric_step=300)
    with pytest.raises(InputError, match=r"logged at steps 300 but at no checkpoint's step \(500\)"):
        prune(str(tmp_path), policy(metric="eval_loss"), now=LATER)


def test_metrics_file_ranks_instead_of_states(tmp_path):
    run = tmp_path / "run"
    for step in (100, 200, 300):
        make_checkpoint(run, step)
    f = tmp_path.parent / f"{tmp_path.name}-metrics.json"
    f.write_text(json.dumps({"checkpoint-100": {"score": 0.9}, "run/checkpoint-200": 0.1}))
    plan = prune(str(tmp_path), policy(metric="score", metrics_file=str(f)), now=LATER).plan
    assert {d.step: d.action for d in plan.decisions} == {100: "keep", 200: "remove", 300: "keep"}


# --- property-based -------------------------------------------------------------------------

#: mostly complete checkpoints, so that the keep/remove rules have something to choose from
rarely = st.sampled_from([False] * 5 + [True])
checkpoint_spec = st.fixed_dictionaries({
    "step": st.integers(5, 40),
    "state": rarely.map(lambda b: not b),
    "metric": st.sampled_from([None, 0.1, 0.5, 0.9, 2.0, 3.0, 0.5, math.nan]),
    "staging": rarely,
    "lock": rarely,
    "recent": rarely,
})
tree_spec = st.fixed_dictionaries({
    "runs": st.lists(st.lists(checkpoint_spec, min_size=2, max_size=7,
                              unique_by=lambda c: (c["staging"], c["step"])),
                     min_size=1, max_size=2),
    "links": st.lists(st.sampled_from(["to_checkpoint", "out", "named_like_checkpoint_out",
                                       "inside_checkpoint_out", "dangling"]), max_size=4),
})
policy_spec = st.fixed_dictionaries({
    "keep_last": st.integers(0, 3),
    "keep_best": st.integers(0, 2),
    "metric": st.sampled_from([None, "eval_loss"]),
    "mode": st.sampled_from([None, "min", "max"]),
})


def _build(base: Path, tree: dict) -> tuple[Path, Path, set[str]]:
    root, outside = base / "root", base / "outside"
    make_checkpoint(outside, 7)
    (outside / "keep.txt").write_text("outside")
    complete_paths = []
    for r, checkpoints in enumerate(tree["runs"]):
        run = root / f"run{r}"
        run.mkdir(parents=True)
        for c in checkpoints:
            d = make_checkpoint(run, c["step"], state=c["state"], metric=c["metric"],
                                staging=c["staging"], lock=c["lock"], recent=c["recent"])
            complete_paths.append(d)
    root.mkdir(exist_ok=True)
    linked: set[str] = set()
    for i, kind in enumerate(tree["links"]):
        if kind == "to_checkpoint" and complete_paths:
            target = complete_paths[i % len(complete_paths)]
            os.symlink(target, root / f"link{i}")
            linked.add(target.relative_to(root).as_posix())
        elif kind == "out":
            os.symlink(outside, root / f"link{i}")
        elif kind == "named_like_checkpoint_out":
            # an old step: were links followed, the policy would pick it for removal
            os.symlink(outside / "checkpoint-7", root / "run0" / f"checkpoint-{i}")
        elif kind == "inside_checkpoint_out" and complete_paths:
            d = complete_paths[i % len(complete_paths)]
            os.symlink(outside / "keep.txt", d / f"out{i}.txt")
        elif kind == "dangling":
            os.symlink(base / "nowhere", root / f"link{i}")
    return root, outside, linked


def _expected_kept(tree: dict, pol: dict, linked: set[str]) -> set[str]:
    """An independent statement of the rules: the paths (relative to root) that must stay."""
    keep: set[str] = set()
    mode = pol["mode"] or "min"
    for r, checkpoints in enumerate(tree["runs"]):
        def path(c, r=r):
            return f"run{r}/" + ("tmp-" if c["staging"] else "") + f"checkpoint-{c['step']}"
        complete = [c for c in checkpoints
                    if c["state"] and not c["staging"] and not c["lock"] and not c["recent"]]
        keep |= {path(c) for c in checkpoints if c not in complete}
        keep |= {path(c) for c in sorted(complete, key=lambda c: -c["step"])[:max(pol["keep_last"], 1)]}
        if pol["metric"]:
            scored = [c for c in complete if c["metric"] is not None and not math.isnan(c["metric"])]
            sign = 1 if mode == "min" else -1
            best = sorted(scored, key=lambda c: (sign * c["metric"], -c["step"]))
            keep |= {path(c) for c in best[:max(pol["keep_best"], 1)]}
    return keep | linked


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=tree_spec, pol=policy_spec)
def test_prune_property(tree, pol):
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        root, outside, linked = _build(base, tree)
        before_root, before_outside = snapshot(root), snapshot(outside)
        all_checkpoints = {k for k, v in before_root.items() if v == "dir"
                           and k.rsplit("/", 1)[-1].split("checkpoint-")[0] in ("", "tmp-")
                           and k.count("/") == 1}
        p = RetentionPolicy(**{**pol, "metric": pol["metric"], "mode": pol["mode"]
                               if pol["metric"] else None,
                               "keep_best": pol["keep_best"] if pol["metric"] else 0})
        any_complete_scored = any(
            c["state"] and not c["staging"] and not c["lock"] and not c["recent"]
            and c["metric"] is not None and not math.isnan(c["metric"])
            for run in tree["runs"] for c in run)
        any_complete = any(c["state"] and not c["staging"] and not c["lock"] and not c["recent"]
                           for run in tree["runs"] for c in run)
        if p.metric and any_complete and not any_complete_scored:
            with pytest.raises(InputError, match="is in no checkpoint"):
                prune(str(root), p, yes=True, now=LATER)
            assert snapshot(root) == before_root
            return
        r = prune(str(root), p, yes=True, now=LATER)
        after_root = snapshot(root)
        # nothing outside changed; every link not inside a removed checkpoint is unchanged
        assert snapshot(outside) == before_outside
        removed = all_checkpoints - set(after_root)
        for k, v in before_root.items():
            if v.startswith("link") and not any(k.startswith(c + "/") for c in removed):
                assert after_root.get(k) == v
        assert not any(".gpuhours-trash-" in k for k in after_root)
        # exactly the expected checkpoints stay, each byte-identical
        kept = {k for k in all_checkpoints if k in after_root}
        expected = _expected_kept(tree, {**pol, "mode": p.resolved_mode}, linked)
        assert kept == expected & all_checkpoints
        for k in kept:
            assert subtree(after_root, k) == subtree(before_root, k)
        assert all(x.outcome == "removed" for x in r.removals)


# --- what removal frees, odd layouts ----------------------------------------------------------

def test_hard_linked_files_are_freed_only_when_every_link_goes(tmp_path):
    run = tmp_path / "run"
    a = make_checkpoint(run, 100, payload=b"w" * 8192)
    b = make_checkpoint(run, 200)
    make_checkpoint(run, 300)
    os.link(a / "model.safetensors", b / "same.safetensors")  # shared between 100 and 200
    s = scan(str(tmp_path.resolve()))
    only_100 = next(c for c in s.checkpoints if c.step == 100)
    both = [c for c in s.checkpoints if c.step in (100, 200)]
    from gpuhours.storage.retention import freed_disk_bytes

    shared = (a / "model.safetensors").stat().st_blocks * 512
    assert shared > 0
    assert freed_disk_bytes([only_100]) == only_100.single_link_disk_bytes
    assert freed_disk_bytes(both) == sum(c.single_link_disk_bytes for c in both) + shared
    plan = prune(str(tmp_path), policy(keep_last=1), now=LATER).plan
    assert plan.frees_disk_bytes == freed_disk_bytes(both)


def test_checkpoints_directly_in_dir(tmp_path):
    for step in (1, 2, 3):
        make_checkpoint(tmp_path, step)
    r = prune(str(tmp_path), policy(keep_last=2), yes=True, now=LATER)
    assert [d.run for d in r.plan.decisions] == [".", ".", "."]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-2", "checkpoint-3"]


def test_unreadable_part_keeps_the_checkpoint(tmp_path, monkeypatch):
    """A directory the walk cannot list (permission denied; simulated, as tests may run as
    root) makes its checkpoint incomplete: what cannot be seen cannot be judged settled."""
    import gpuhours.storage.scan as scan_mod

    run = tmp_path / "run"
    make_checkpoint(run, 100)
    make_checkpoint(run, 200)
    real_scandir = os.scandir

    def scandir(path):
        if str(path).endswith("checkpoint-100/global_step"):
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    monkeypatch.setattr(scan_mod.os, "scandir", scandir)
    plan = prune(str(tmp_path), policy(keep_last=1), now=LATER).plan
    assert plan.decisions[0].action == "keep"
    assert any("could not read run/checkpoint-100/global_step" in x
               for x in plan.decisions[0].reasons), plan.decisions[0].reasons


@pytest.mark.parametrize(("path", "kind"), [
    ("runs/exp1/checkpoint-5/model.safetensors", "checkpoints"),
    ("image_cache/checkpoint-5/model.safetensors", "checkpoints"),  # checkpoints beat caches
    ("data/.cache/x.bin", "caches"),                                # caches beat datasets
    ("wandb/latest/data/x.parquet", "logs"),                        # logs beat datasets
    ("model_checkpoint_3.pt", "checkpoints"),
    ("events.out.tfevents.123.host", "logs"),
    ("shard.parquet", "datasets"),
    ("temp/batch_0.pt", "other"),
    (".gpuhours-trash-checkpoint-5-0a1b2c3d/model.safetensors", "trash"),
])
def test_classification(tmp_path, path, kind):
    p = tmp_path / path
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(b"x" * 3)
    s = scan(str(tmp_path.resolve()))
    assert {k for k, v in s.kinds.items() if v.files} == {kind}
