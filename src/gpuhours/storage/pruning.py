"""Remove the checkpoints a retention plan marks, safely.

How a checkpoint is removed: its path is checked again (every component below DIR a real
directory, no link), its completeness is checked again (a writer may have come back), it is
renamed to `.gpuhours-trash-<name>-<random>` in the same directory (one atomic rename, made
durable by an fsync of the directory), and only then are its files deleted, without following
links (a link is unlinked, never its target) and without crossing a mount point: every directory
is opened relative to its parent with O_NOFOLLOW and must lie on the root's filesystem (st_dev)
and mount (the mount id, /proc/self/fdinfo), or the deletion stops before touching anything in
it. An interruption at any point leaves either the whole checkpoint under its own name or a trash
directory that no tool takes for a checkpoint; the kept checkpoints are never touched. The next
`prune --yes` deletes leftover trash. Each removal counts the files and bytes it really deleted,
and the report says exactly that, also for a removal that stopped half-way.

A checkpoint kept as one file (`epoch_3.ckpt`) is looked at again the same way and unlinked
relative to its directory, opened without following links: one atomic step, no trash.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import time
from typing import Literal

from pydantic import BaseModel, ConfigDict

from gpuhours.storage._fs import TRASH_PREFIX, is_within, mount_id, resolve_root
from gpuhours.storage.retention import RetentionPlan, RetentionPolicy, assess, incomplete_reasons
from gpuhours.storage.scan import CHECKPOINT_DIR_RE, scan, scan_checkpoint, scan_flat_checkpoint


class Removal(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    outcome: Literal["removed", "skipped", "failed"]
    detail: str = ""
    #: what was really deleted (a failed removal may have deleted part of the checkpoint)
    files_removed: int = 0
    bytes_removed: int = 0


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

    @property
    def removed(self) -> list[Removal]:
        """The checkpoints removed whole."""
        return [r for r in self.removals if r.outcome == "removed"]

    @property
    def partly_removed(self) -> list[Removal]:
        """Removals that failed after deleting some files."""
        return [r for r in self.removals + self.trash
                if r.outcome != "removed" and r.files_removed]


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
    removals = [remove_checkpoint_file(root, d.path, policy, now) if d.flat
                else remove_checkpoint(root, d.path, policy, now) for d in plan.to_remove]
    return PruneResult(root=root, plan=plan, applied=True, removals=removals, trash=trash)


def remove_checkpoint(root: str, rel_path: str, policy: RetentionPolicy,
                      now: float | None = None) -> Removal:
    """Remove one checkpoint directory below `root` (a real path), by rename then delete.

    The parent directory is opened component by component with O_NOFOLLOW, and the rename and
    the delete are made relative to that descriptor: a directory swapped for a link after the
    checks cannot redirect them outside `root`, and a mount point met on the way stops them."""
    name = os.path.basename(rel_path)
    if not CHECKPOINT_DIR_RE.fullmatch(name) or not is_within(root, rel_path):
        return Removal(path=rel_path, outcome="skipped",
                       detail="no longer a checkpoint directory reached without links")
    # a writer may have come back, or something been mounted, since the plan was made: look again
    fresh = scan_checkpoint(root, rel_path, policy.marker)
    if fresh is None:
        return Removal(path=rel_path, outcome="skipped", detail="no longer a directory")
    if fresh.mount_points:
        return Removal(path=rel_path, outcome="skipped",
                       detail=f"holds a mount point now ({fresh.mount_points[0]}): never crossed")
    reasons = incomplete_reasons(fresh, policy, time.time() if now is None else now)
    if reasons:
        return Removal(path=rel_path, outcome="skipped", detail="incomplete now: " + reasons[0])
    trash = f"{TRASH_PREFIX}{name}-{secrets.token_hex(4)}"
    try:
        fence = _fence(root)
        parent_fd = _open_dir_nofollow(root, os.path.dirname(rel_path), fence)
    except OSError as e:
        return Removal(path=rel_path, outcome="skipped",
                       detail=f"its directory cannot be opened without following links or "
                              f"crossing a mount point ({e.strerror})")
    tally = _Tally()
    try:
        try:
            _check_dir(parent_fd, name, fence)
        except OSError as e:
            return Removal(path=rel_path, outcome="skipped", detail=e.strerror or str(e))
        try:
            os.rename(name, trash, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
            os.fsync(parent_fd)
        except OSError as e:
            return Removal(path=rel_path, outcome="failed", detail=f"rename: {e.strerror}")
        try:
            _delete_tree(parent_fd, trash, fence, tally)
        except (OSError, RecursionError) as e:
            return Removal(path=rel_path, outcome="failed", files_removed=tally.files,
                           bytes_removed=tally.bytes,
                           detail=f"renamed to {trash}; {_deleted(tally)} before the delete "
                                  f"stopped: {getattr(e, 'strerror', None) or e}")
    finally:
        os.close(parent_fd)
    return Removal(path=rel_path, outcome="removed", files_removed=tally.files,
                   bytes_removed=tally.bytes)


def remove_checkpoint_file(root: str, rel_path: str, policy: RetentionPolicy,
                           now: float | None = None) -> Removal:
    """Remove one checkpoint file below `root` (a real path): looked at again (still a regular
    file named as a checkpoint, reached without links, settled), then unlinked relative to its
    directory opened component by component with O_NOFOLLOW (a directory swapped for a link
    after the checks cannot redirect the unlink). One unlink is atomic: no trash step."""
    name = os.path.basename(rel_path)
    if not is_within(root, rel_path):
        return Removal(path=rel_path, outcome="skipped",
                       detail="no longer a checkpoint file reached without links")
    fresh = scan_flat_checkpoint(root, rel_path)
    if fresh is None:
        return Removal(path=rel_path, outcome="skipped",
                       detail="no longer a regular checkpoint file")
    reasons = incomplete_reasons(fresh, policy, time.time() if now is None else now)
    if reasons:
        return Removal(path=rel_path, outcome="skipped", detail="incomplete now: " + reasons[0])
    try:
        fence = _fence(root)
        parent_fd = _open_dir_nofollow(root, os.path.dirname(rel_path), fence)
    except OSError as e:
        return Removal(path=rel_path, outcome="skipped",
                       detail=f"its directory cannot be opened without following links or "
                              f"crossing a mount point ({e.strerror})")
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            return Removal(path=rel_path, outcome="skipped", detail="no longer a regular file")
        os.unlink(name, dir_fd=parent_fd)
        os.fsync(parent_fd)
    except FileNotFoundError:
        return Removal(path=rel_path, outcome="skipped", detail="gone already")
    except OSError as e:
        return Removal(path=rel_path, outcome="failed", detail=f"unlink: {e.strerror}")
    finally:
        os.close(parent_fd)
    return Removal(path=rel_path, outcome="removed", files_removed=1, bytes_removed=st.st_size)


def _deleted(tally: _Tally) -> str:
    return f"{tally.files} file(s), {tally.bytes:,} bytes deleted"


class _Tally:
    """Files and bytes deleted so far."""

    def __init__(self) -> None:
        self.files = 0
        self.bytes = 0


def _fence(root: str) -> tuple[int, int | None]:
    """(st_dev, mount id) of `root`: what every directory deleted below it must share."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return os.fstat(fd).st_dev, mount_id(fd)
    finally:
        os.close(fd)


def _crossing(fd: int, fence: tuple[int, int | None]) -> bool:
    """True when the open directory `fd` lies on another filesystem or mount than `fence`."""
    if os.fstat(fd).st_dev != fence[0]:
        return True
    mid = mount_id(fd) if fence[1] is not None else None
    return mid is not None and mid != fence[1]


def _mount_error(name: str) -> OSError:
    return OSError(errno.EXDEV, f"{name} is a mount point (another filesystem or a bind "
                                "mount); not crossed")


def _check_dir(parent_fd: int, name: str, fence: tuple[int, int | None]) -> None:
    """Raise OSError unless `name` in `parent_fd` is a directory (not a link) inside `fence`."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
    except OSError as e:
        raise OSError(e.errno, "no longer a directory reached without links") from None
    try:
        if _crossing(fd, fence):
            raise _mount_error(name)
    finally:
        os.close(fd)


def _open_dir_nofollow(root: str, rel_dir: str, fence: tuple[int, int | None]) -> int:
    """A descriptor of root/rel_dir, opened one component at a time, refusing links and mount
    points."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in [p for p in rel_dir.split("/") if p]:
            child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = child
            if _crossing(fd, fence):
                raise _mount_error(part)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _delete_tree(parent_fd: int, name: str, fence: tuple[int, int | None], tally: _Tally) -> None:
    """Delete directory `name` of the directory open as `parent_fd`, and everything in it.

    Links are unlinked, never followed (each directory is opened with O_NOFOLLOW relative to its
    parent). A directory on another filesystem or mount than `fence` raises OSError(EXDEV)
    before anything in it is touched; what was deleted until then is in `tally`."""
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
    try:
        if _crossing(fd, fence):
            raise _mount_error(name)
        with os.scandir(fd) as it:
            entries = list(it)
        for e in entries:
            st = e.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                _delete_tree(fd, e.name, fence, tally)
                continue
            if st.st_dev != fence[0]:  # a file mounted over one of ours
                raise _mount_error(e.name)
            os.unlink(e.name, dir_fd=fd)
            tally.files += 1
            tally.bytes += st.st_size
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)


def _delete_trash(root: str, rel_path: str) -> Removal:
    """Finish deleting a trash directory that an interrupted prune left."""
    name = os.path.basename(rel_path)
    if not name.startswith(TRASH_PREFIX) or not is_within(root, rel_path):
        return Removal(path=rel_path, outcome="skipped", detail="not a trash directory")
    tally = _Tally()
    try:
        fence = _fence(root)
        parent_fd = _open_dir_nofollow(root, os.path.dirname(rel_path), fence)
        try:
            _delete_tree(parent_fd, name, fence, tally)
        finally:
            os.close(parent_fd)
    except (OSError, RecursionError) as e:
        detail = getattr(e, "strerror", None) or str(e)
        if tally.files:
            detail = f"{_deleted(tally)} before the delete stopped: {detail}"
        return Removal(path=rel_path, outcome="failed", detail=detail, files_removed=tally.files,
                       bytes_removed=tally.bytes)
    return Removal(path=rel_path, outcome="removed", detail="left by an interrupted prune",
                   files_removed=tally.files, bytes_removed=tally.bytes)
