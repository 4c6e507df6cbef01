"""Remove the checkpoints a retention plan marks, safely.

How a checkpoint is removed: its path is checked again (every component below DIR a real
directory, no link), its completeness is checked again (a writer may have come back), it is
renamed to `.gpuhours-trash-<name>-<random>` in the same directory (one atomic rename, made
durable by an fsync of the directory), and only then are its files deleted, without following
links (shutil.rmtree unlinks a link, never its target). An interruption at any point leaves
either the whole checkpoint under its own name or a trash directory that no tool takes for a
checkpoint; the kept checkpoints are never touched. The next `prune --yes` deletes leftover trash.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import sys
import time
from typing import Literal

from pydantic import BaseModel, ConfigDict

from gpuhours.storage._fs import TRASH_PREFIX, is_within, resolve_root
from gpuhours.storage.retention import RetentionPlan, RetentionPolicy, assess, incomplete_reasons
from gpuhours.storage.scan import CHECKPOINT_DIR_RE, scan, scan_checkpoint


class Removal(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    outcome: Literal["removed", "skipped", "failed"]
    detail: str = ""


class PruneResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    root: str
    plan: RetentionPlan
    #: False: nothing was changed (a dry run)
    applied: bool
    removals: list[Removal]
    #: trash left by an interrupted earlier prune, deleted now (with --yes) or pending
    trash: list[Removal]

    @property
    def failed(self) -> bool:
        return any(r.outcome == "failed" for r in self.removals + self.trash)


def prune(directory: str, policy: RetentionPolicy, yes: bool = False,
          now: float | None = None) -> PruneResult:
    """The retention plan for `directory`; with `yes`, carry it out."""
    root = resolve_root(directory)
    s = scan(root, policy.marker)
    plan = assess(s, policy, time.time() if now is None else now)
    if not yes:
        return PruneResult(root=root, plan=plan, applied=False, removals=[],
                           trash=[Removal(path=t, outcome="skipped", detail="pending")
                                  for t in s.trash_dirs])
    trash = [_delete_trash(root, t) for t in s.trash_dirs]
    removals = [remove_checkpoint(root, d.path, policy, now) for d in plan.to_remove]
    return PruneResult(root=root, plan=plan, applied=True, removals=removals, trash=trash)


def remove_checkpoint(root: str, rel_path: str, policy: RetentionPolicy,
                      now: float | None = None) -> Removal:
    """Remove one checkpoint directory below `root` (a real path), by rename then delete.

    The parent directory is opened component by component with O_NOFOLLOW, and the rename and
    the delete are made relative to that descriptor: a directory swapped for a link after the
    checks cannot redirect them outside `root`."""
    name = os.path.basename(rel_path)
    if not CHECKPOINT_DIR_RE.fullmatch(name) or not is_within(root, rel_path):
        return Removal(path=rel_path, outcome="skipped",
                       detail="no longer a checkpoint directory reached without links")
    # a writer may have come back since the plan was made: look again
    fresh = scan_checkpoint(root, rel_path, policy.marker)
    if fresh is None:
        return Removal(path=rel_path, outcome="skipped", detail="no longer a directory")
    reasons = incomplete_reasons(fresh, policy, time.time() if now is None else now)
    if reasons:
        return Removal(path=rel_path, outcome="skipped", detail="incomplete now: " + reasons[0])
    trash = f"{TRASH_PREFIX}{name}-{secrets.token_hex(4)}"
    try:
        parent_fd = _open_dir_nofollow(root, os.path.dirname(rel_path))
    except OSError as e:
        return Removal(path=rel_path, outcome="skipped",
                       detail=f"its directory cannot be opened without following links ({e.strerror})")
    try:
        st = os.lstat(name, dir_fd=parent_fd)
        if not stat.S_ISDIR(st.st_mode):
            return Removal(path=rel_path, outcome="skipped", detail="no longer a directory")
        try:
            os.rename(name, trash, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
            os.fsync(parent_fd)
        except OSError as e:
            return Removal(path=rel_path, outcome="failed", detail=f"rename: {e.strerror}")
        try:
            _rmtree_at(parent_fd, trash, os.path.join(root, os.path.dirname(rel_path), trash))
        except OSError as e:
            return Removal(path=rel_path, outcome="failed",
                           detail=f"renamed to {trash}, delete failed: {e.strerror}")
    finally:
        os.close(parent_fd)
    return Removal(path=rel_path, outcome="removed")


def _open_dir_nofollow(root: str, rel_dir: str) -> int:
    """A descriptor of root/rel_dir, opened one component at a time, refusing links."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in [p for p in rel_dir.split("/") if p]:
            child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _rmtree_at(parent_fd: int, name: str, full_path: str) -> None:
    """Delete directory `name` inside the directory open as `parent_fd`, links not followed.
    Python < 3.11 has no rmtree(dir_fd=...): the path is used (rmtree never follows links
    inside the tree either way)."""
    if sys.version_info >= (3, 11):
        shutil.rmtree(name, dir_fd=parent_fd)
    else:  # pragma: no cover - the project runs 3.11
        shutil.rmtree(full_path)


def _delete_trash(root: str, rel_path: str) -> Removal:
    """Finish deleting a trash directory that an interrupted prune left."""
    name = os.path.basename(rel_path)
    if not name.startswith(TRASH_PREFIX) or not is_within(root, rel_path):
        return Removal(path=rel_path, outcome="skipped", detail="not a trash directory")
    try:
        parent_fd = _open_dir_nofollow(root, os.path.dirname(rel_path))
        try:
            _rmtree_at(parent_fd, name, os.path.join(root, rel_path))
        finally:
            os.close(parent_fd)
    except OSError as e:
        return Removal(path=rel_path, outcome="failed", detail=e.strerror or str(e))
    return Removal(path=rel_path, outcome="removed", detail="left by an interrupted prune")
