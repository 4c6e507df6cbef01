"""One pass over a directory tree: bytes by kind, the checkpoints in it, the links, the trash.

The walk uses os.scandir and never follows a symbolic link: a link is counted as a link (its own
size), its target is read only to know whether it points at a checkpoint inside the tree. Nor
does it cross a mount point (another filesystem, st_dev, or a bind mount, /proc/self/mountinfo;
like `du -x`): a mount point is listed, not entered, and a checkpoint that holds one is kept.

Classification, first rule that matches wins, by the path relative to DIR:
1. trash: below a directory named `.gpuhours-trash-*` (left by an interrupted prune).
2. checkpoints: below a directory named `checkpoint-<step>` or `tmp-checkpoint-<step>` (Hugging
   Face Trainer), `checkpoint_<step>`, `global_step<step>` (DeepSpeed), `checkpoints`, `ckpt` or
   `ckpts`.
3. caches: below a directory whose name ends in `cache` or `caches` (`.cache`, `__pycache__`,
   `image_cache`, `ImageCache`).
4. logs: below `logs`, `log`, `wandb`, `mlruns`, `tensorboard`, `tb_logs` or `lightning_logs`.
5. datasets: below `data`, `dataset`, `datasets` or a directory whose name contains `dataset`.
   A rule matches when any directory of the path matches, however deep; rules 1-5 beat 6-8.
6. a file named `*.ckpt` or with `checkpoint` or `ckpt` in its name: checkpoints.
7. `*.log` or `events.out.tfevents*`: logs.
8. `*.parquet`, `*.arrow`, `*.jsonl`, `*.tfrecord`, `*.npy`, `*.npz`, `*.csv`, `*.tsv`: datasets.
Everything else is `other`; symbolic links are `links` whatever their name.
Directory names are compared in lower case.

Checkpoints kept as single files (`checkpoint_step_500.pt`, `epoch_3.ckpt`,
`epoch=2-step=1000-val_loss=0.23.ckpt`) are found too, outside checkpoint directories and
outside caches, logs and datasets: a file with a checkpoint extension whose name carries a step
or an epoch (`flat_checkpoint_name`). Files of one directory whose names differ only in their
numbers form one series (`run`), ordered by step (by epoch when the names carry no step).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from typing import Literal

from gpuhours.files import file_type
from gpuhours.storage._fs import TRASH_PREFIX, mount_points_under

Kind = Literal["checkpoints", "caches", "datasets", "logs", "other", "trash", "links"]
KINDS: tuple[Kind, ...] = ("checkpoints", "caches", "datasets", "logs", "other", "trash", "links")

#: a Hugging Face Trainer checkpoint directory; `tmp-` is the Trainer's staging name
CHECKPOINT_DIR_RE = re.compile(r"(tmp-)?checkpoint-(\d+)")
_CHECKPOINT_DIRS_RE = re.compile(r"(tmp-)?checkpoint[-_]\d+|global_step\d+|checkpoints|ckpts?")
_LOG_DIRS = frozenset({"logs", "log", "wandb", "mlruns", "tensorboard", "tb_logs",
                       "lightning_logs"})
_DATA_DIRS = frozenset({"data", "dataset", "datasets"})
_DATA_SUFFIXES = (".parquet", ".arrow", ".jsonl", ".tfrecord", ".npy", ".npz", ".csv", ".tsv")
#: lower rank wins; directory rules
_RANK = {"trash": 0, "checkpoints": 1, "caches": 2, "logs": 3, "datasets": 4}
_NONE = 99


def _dir_rank(name: str) -> int:
    if name.startswith(TRASH_PREFIX):
        return _RANK["trash"]
    low = name.lower()
    if _CHECKPOINT_DIRS_RE.fullmatch(low):
        return _RANK["checkpoints"]
    if low.endswith("cache") or low.endswith("caches"):
        return _RANK["caches"]
    if low in _LOG_DIRS:
        return _RANK["logs"]
    if low in _DATA_DIRS or "dataset" in low:
        return _RANK["datasets"]
    return _NONE


_KIND_OF_RANK: dict[int, Kind] = {0: "trash", 1: "checkpoints", 2: "caches", 3: "logs",
                                  4: "datasets"}


def file_kind(name: str) -> Kind:
    """Kind of a file by its name alone (rules 6-8), for a file below no classified directory."""
    low = name.lower()
    if low.endswith(".ckpt") or "checkpoint" in low or "ckpt" in low \
            or flat_checkpoint_name(name) is not None:
        return "checkpoints"
    if low.endswith(".log") or low.startswith("events.out.tfevents"):
        return "logs"
    if low.endswith(_DATA_SUFFIXES):
        return "datasets"
    return "other"


@dataclass
class KindTotal:
    files: int = 0
    #: apparent size, st_size (what `ls` and `du --apparent-size` show)
    bytes: int = 0
    #: allocated, st_blocks x 512 (what `du` shows); hard-linked files counted once
    disk_bytes: int = 0


@dataclass
class CheckpointDir:
    """A `checkpoint-<step>` directory and what the walk saw inside it."""

    rel_path: str
    run: str
    step: int
    staging: bool
    files: int = 0
    bytes: int = 0
    #: allocated bytes of files with a single link (freed when the checkpoint is removed)
    single_link_disk_bytes: int = 0
    #: files with more than one hard link: (st_dev, st_ino) -> (st_nlink, disk bytes, seen here)
    shared_inodes: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    newest_mtime: float = 0.0
    has_marker: bool = False
    lock_files: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    #: links inside the tree whose target lies in this checkpoint
    linked_from: list[str] = field(default_factory=list)
    #: mount points in it (another filesystem or a bind mount): never crossed, never removed
    mount_points: list[str] = field(default_factory=list)
    #: a checkpoint kept as one file (`epoch_3.ckpt`), not a checkpoint-<step> directory
    flat: bool = False
    #: a flat file's epoch, when its name carries one
    epoch: int | None = None
    #: False when `step` is the epoch (a flat file named by epoch alone)
    step_in_name: bool = True
    #: metrics written in a flat file's name (`val_loss=0.23`)
    name_metrics: dict[str, float] = field(default_factory=dict)


#: extensions of a checkpoint kept as one file (torch, Lightning, safetensors, pickles)
FLAT_CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".safetensors", ".pth.tar", ".pkl")
_STEP_RE = re.compile(r"(?:^|[^a-z])(?:global_step|global-step|step|steps|iter|iteration|it)"
                      r"[_=-]?(\d+)(?![a-z])")
_EPOCH_RE = re.compile(r"(?:^|[^a-z])(?:epoch|ep)[_=-]?(\d+)(?![a-z])")
#: `checkpoint_500.pt`, `ckpt-500.pt`, `model_500.pt`: a bare number after the word is a step
_BARE_STEP_RE = re.compile(r"^(?:checkpoint|ckpt|model|weights|state)[_-](\d+)$")
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_METRIC_RE = re.compile(r"([A-Za-z][A-Za-z0-9_./]*)=(" + _NUMBER + r")(?=$|[-_ ,])")
_NUMBERS_RE = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class FlatName:
    """What a checkpoint file's name says: step, epoch, metrics, and its series' pattern."""

    step: int | None
    epoch: int | None
    metrics: dict[str, float]
    #: the name with its numbers replaced by `*`: files of one series share it
    pattern: str

    @property
    def order(self) -> int:
        """The number that orders the series: the step, or the epoch without one."""
        return self.step if self.step is not None else self.epoch or 0


def flat_checkpoint_name(name: str) -> FlatName | None:
    """The step/epoch/metrics of a checkpoint file's name, or None when it is not one: a
    checkpoint extension (FLAT_CHECKPOINT_SUFFIXES) and a step or an epoch in the name
    (`step_500`, `step=500`, `global_step500`, `iter_500`, `epoch_3`, `epoch=3`, or a bare
    number after checkpoint/ckpt/model/weights/state). `last.ckpt` or `best.pt` name no step
    and are not part of a series (never removed). Lower case compared; `key=value` pairs
    other than step and epoch are metrics (`val_loss=0.23`)."""
    low = name.lower()
    suffix = next((x for x in sorted(FLAT_CHECKPOINT_SUFFIXES, key=len, reverse=True)
                   if low.endswith(x)), None)
    if suffix is None:
        return None
    stem = low[:-len(suffix)]
    step_m = _STEP_RE.search(stem)
    epoch_m = _EPOCH_RE.search(stem)
    bare = _BARE_STEP_RE.fullmatch(stem) if step_m is None and epoch_m is None else None
    if step_m is None and epoch_m is None and bare is None:
        return None
    step = int(step_m.group(1)) if step_m else int(bare.group(1)) if bare else None
    metrics = {}
    for key, value in _METRIC_RE.findall(name[:-len(suffix)]):
        if key.lower() not in ("step", "epoch", "global_step", "iter", "iteration", "it", "ep",
                               "steps"):
            metrics[key] = float(value)
    # metric values first (a sign and a decimal point are part of them), then other numbers
    raw_stem = name[:-len(suffix)]
    pattern = _NUMBERS_RE.sub("*", _METRIC_RE.sub(lambda m: f"{m.group(1)}=*", raw_stem)) \
        + name[-len(suffix):]
    return FlatName(step=step, epoch=int(epoch_m.group(1)) if epoch_m else None,
                    metrics=metrics, pattern=pattern)


@dataclass
class LinkInfo:
    rel_path: str
    target: str
    #: the target's path relative to DIR when it resolves inside DIR, else None
    target_rel: str | None


@dataclass
class Scan:
    root: str
    kinds: dict[str, KindTotal]
    checkpoints: list[CheckpointDir]
    links: list[LinkInfo]
    trash_dirs: list[str]
    unreadable: list[str]
    files: int
    dirs: int
    #: mount points below the root, not entered (paths relative to it)
    mount_points: list[str] = field(default_factory=list)


#: names inside a checkpoint that mean a writer holds it
_LOCK_SUFFIXES = (".lock", ".tmp", ".partial", ".incomplete")


def scan(root: str, marker: str = "trainer_state.json") -> Scan:
    """Walk `root` (a real directory path, see _fs.resolve_root) without following links or
    crossing mount points."""
    return _walk(root, [(root, "", _NONE, None, os.stat(root).st_dev)], marker)


def scan_checkpoint(root: str, rel_path: str, marker: str = "trainer_state.json") -> CheckpointDir | None:
    """One checkpoint directory read again from disk (None when it is gone or not one)."""
    name = rel_path.rsplit("/", 1)[-1]
    m = CHECKPOINT_DIR_RE.fullmatch(name)
    full = os.path.join(root, rel_path)
    try:
        st = os.lstat(full)
    except OSError:
        return None
    if m is None or not stat.S_ISDIR(st.st_mode):
        return None
    owner = CheckpointDir(rel_path=rel_path, run=rel_path.rsplit("/", 1)[0] if "/" in rel_path
                          else ".", step=int(m.group(2)), staging=bool(m.group(1)),
                          newest_mtime=st.st_mtime)
    try:
        parent_dev = os.lstat(os.path.dirname(full)).st_dev
    except OSError:
        return None
    if st.st_dev != parent_dev or full in mount_points_under(os.path.dirname(full)):
        owner.mount_points.append(rel_path)  # the checkpoint itself is mounted here
        return owner
    _walk(root, [(full, rel_path, _RANK["checkpoints"], owner, st.st_dev)], marker)
    return owner


def _walk(root: str, stack: list[tuple[str, str, int, CheckpointDir | None, int]],
          marker: str) -> Scan:
    """The walk of `scan`. Each stack item is (absolute path, path relative to root, rank of
    the strongest directory rule above it, the checkpoint it belongs to, its st_dev)."""
    kinds = {k: KindTotal() for k in KINDS}
    checkpoints: list[CheckpointDir] = []
    links: list[LinkInfo] = []
    trash_dirs: list[str] = []
    unreadable: list[str] = []
    seen_inodes: set[tuple[int, int]] = set()
    mounts = mount_points_under(stack[0][0]) if stack else frozenset()
    mount_points: list[str] = []
    n_files = n_dirs = 0
    while stack:
        path, rel, rank, owner, dev = stack.pop()
        try:
            it = os.scandir(path)
        except OSError as err:
            unreadable.append(rel or ".")
            if owner is not None:
                owner.unreadable.append(f"{rel or '.'}: {err.strerror}")
            continue
        with it:
            for e in it:
                child_rel = f"{rel}/{e.name}" if rel else e.name
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError as err:
                    unreadable.append(child_rel)
                    if owner is not None:
                        owner.unreadable.append(f"{child_rel}: {err.strerror}")
                    continue
                mode = st.st_mode
                if st.st_dev != dev or (mounts and e.path in mounts):
                    # another filesystem or a bind mount: not ours to walk (or to remove)
                    mount_points.append(child_rel)
                    holder = owner
                    m = CHECKPOINT_DIR_RE.fullmatch(e.name) if owner is None else None
                    if m and stat.S_ISDIR(mode) and rank != _RANK["trash"]:
                        # a checkpoint that is itself a mount point: listed, and kept
                        holder = CheckpointDir(rel_path=child_rel, run=rel or ".",
                                               step=int(m.group(2)), staging=bool(m.group(1)),
                                               newest_mtime=st.st_mtime)
                        checkpoints.append(holder)
                    if holder is not None:
                        holder.mount_points.append(child_rel)
                    continue
                if stat.S_ISLNK(mode):
                    links.append(_link(root, path, e.name, child_rel))
                    k = kinds["links"]
                    k.files += 1
                    k.bytes += st.st_size
                    continue
                if stat.S_ISDIR(mode):
                    n_dirs += 1
                    child_rank = min(rank, _dir_rank(e.name))
                    child_owner = owner
                    if owner is not None:
                        owner.newest_mtime = max(owner.newest_mtime, st.st_mtime)
                    elif child_rank != _RANK["trash"]:
                        m = CHECKPOINT_DIR_RE.fullmatch(e.name)
                        if m:
                            child_owner = CheckpointDir(rel_path=child_rel, run=rel or ".",
                                                        step=int(m.group(2)),
                                                        staging=bool(m.group(1)),
                                                        newest_mtime=st.st_mtime)
                            checkpoints.append(child_owner)
                    if e.name.startswith(TRASH_PREFIX) and rank != _RANK["trash"]:
                        trash_dirs.append(child_rel)
                    stack.append((e.path, child_rel, child_rank, child_owner, st.st_dev))
                    continue
                n_files += 1
                if owner is None and rank in (_NONE, _RANK["checkpoints"]) \
                        and stat.S_ISREG(mode):
                    flat = flat_checkpoint_name(e.name)
                    if flat is not None:
                        checkpoints.append(_flat_checkpoint(child_rel, rel, flat, st))
                kind = _KIND_OF_RANK[rank] if rank != _NONE else file_kind(e.name)
                k = kinds[kind]
                k.files += 1
                k.bytes += st.st_size
                disk = st.st_blocks * 512
                if st.st_nlink > 1:
                    key = (st.st_dev, st.st_ino)
                    if key not in seen_inodes:
                        seen_inodes.add(key)
                        k.disk_bytes += disk
                else:
                    k.disk_bytes += disk
                if owner is not None:
                    _add_to_checkpoint(owner, e.name, rel, st, disk, marker)
    checkpoints.sort(key=lambda c: (c.run, c.step, c.rel_path))
    _attach_links(checkpoints, links)
    return Scan(root=root, kinds={k: v for k, v in kinds.items()}, checkpoints=checkpoints,
                links=links, trash_dirs=sorted(trash_dirs), unreadable=sorted(unreadable),
                files=n_files, dirs=n_dirs, mount_points=sorted(mount_points))


def _flat_checkpoint(rel_path: str, rel_dir: str, flat: FlatName, st: os.stat_result
                     ) -> CheckpointDir:
    """A checkpoint file as the retention rules see a checkpoint: one file, its own marker
    (there is no trainer state to wait for: the settle window alone says it is written)."""
    c = CheckpointDir(rel_path=rel_path, run=f"{rel_dir or '.'}/{flat.pattern}",
                      step=flat.order, staging=False, files=1, bytes=st.st_size,
                      newest_mtime=st.st_mtime, has_marker=True, flat=True, epoch=flat.epoch,
                      step_in_name=flat.step is not None, name_metrics=dict(flat.metrics))
    disk = st.st_blocks * 512
    if st.st_nlink > 1:
        c.shared_inodes[(st.st_dev, st.st_ino)] = [st.st_nlink, disk, 1]
    else:
        c.single_link_disk_bytes = disk
    return c


def scan_flat_checkpoint(root: str, rel_path: str) -> CheckpointDir | None:
    """One checkpoint file read again from disk (None when it is gone, a link, or no longer a
    regular file named as a checkpoint)."""
    name = rel_path.rsplit("/", 1)[-1]
    flat = flat_checkpoint_name(name)
    try:
        st = os.lstat(os.path.join(root, rel_path))
    except OSError:
        return None
    if flat is None or not stat.S_ISREG(st.st_mode):
        return None
    return _flat_checkpoint(rel_path, rel_path.rsplit("/", 1)[0] if "/" in rel_path else "",
                            flat, st)


def _add_to_checkpoint(owner: CheckpointDir, name: str, rel_dir: str, st: os.stat_result,
                       disk: int, marker: str) -> None:
    owner.files += 1
    owner.bytes += st.st_size
    owner.newest_mtime = max(owner.newest_mtime, st.st_mtime)
    if st.st_nlink > 1:
        entry = owner.shared_inodes.setdefault((st.st_dev, st.st_ino), [st.st_nlink, disk, 0])
        entry[2] += 1
    else:
        owner.single_link_disk_bytes += disk
    if rel_dir == owner.rel_path and name == marker:
        if stat.S_ISREG(st.st_mode):
            owner.has_marker = True
        else:  # a FIFO would block its reader forever, a device would never end
            owner.unreadable.append(f"{rel_dir}/{name}: a {file_type(st.st_mode)}, not a "
                                    "regular file")
    if name.lower().endswith(_LOCK_SUFFIXES) or name.lower() == "lock":
        owner.lock_files.append(f"{rel_dir}/{name}")


def _link(root: str, directory: str, name: str, rel: str) -> LinkInfo:
    """A symbolic link: its target as written, and where it resolves relative to `root`.
    realpath only reads links; nothing is opened or changed through them."""
    full = os.path.join(directory, name)
    try:
        target = os.readlink(full)
    except OSError:
        target = ""
    resolved = os.path.realpath(full)
    inside = resolved.startswith(root + os.sep)
    return LinkInfo(rel_path=rel, target=target,
                    target_rel=os.path.relpath(resolved, root).replace(os.sep, "/") if inside
                    else None)


def _attach_links(checkpoints: list[CheckpointDir], links: list[LinkInfo]) -> None:
    """Mark each checkpoint that a link inside the tree points at (or into)."""
    if not links or not checkpoints:
        return
    by_path = {c.rel_path: c for c in checkpoints}
    for link in links:
        if link.target_rel is None:
            continue
        # a link inside a checkpoint that points into the same checkpoint protects nothing
        parts = link.target_rel.split("/")
        for i in range(1, len(parts) + 1):
            c = by_path.get("/".join(parts[:i]))
            if c is not None:
                if not link.rel_path.startswith(c.rel_path + "/"):
                    c.linked_from.append(link.rel_path)
                break
