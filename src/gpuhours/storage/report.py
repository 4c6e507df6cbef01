"""`storage report`: bytes by kind under a directory, and what a retention policy would remove.

Reads only; changes nothing. The classification rules are those of gpuhours.storage.scan.
"""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict

from gpuhours.storage._fs import resolve_root
from gpuhours.storage.retention import RetentionPlan, RetentionPolicy, assess
from gpuhours.storage.scan import KINDS, scan


class KindSize(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    files: int
    #: apparent size (st_size), bytes
    bytes: int
    #: allocated size (st_blocks x 512), bytes; hard links counted once
    disk_bytes: int


class LinkEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    target: str
    inside: bool


class StorageReport(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    root: str
    kinds: list[KindSize]
    total_files: int
    total_bytes: int
    total_disk_bytes: int
    retention: RetentionPlan
    links: list[LinkEntry]
    trash: list[str]
    unreadable: list[str]
    classification: str
    scan_s: float
    #: mount points below the root (another filesystem or a bind mount): not entered
    mount_points: list[str] = []


CLASSIFICATION = (
    "first match wins: below .gpuhours-trash-* = trash; below checkpoint-<n>, tmp-checkpoint-<n>, "
    "checkpoint_<n>, global_step<n>, checkpoints, ckpt(s) = checkpoints; below *cache(s) = "
    "caches; below logs, log, wandb, mlruns, tensorboard, tb_logs, lightning_logs = logs; below "
    "data, dataset(s), *dataset* = datasets; else by file name: *.ckpt, *checkpoint*, *ckpt*, "
    "a checkpoint file named by step or epoch (step_500.pt, epoch_3.pth) = checkpoints; "
    "*.log, events.out.tfevents* = logs; .parquet .arrow .jsonl .tfrecord .npy .npz "
    ".csv .tsv = datasets; else other. Symbolic links are links (never followed); mount points "
    "(other filesystems, bind mounts) are not entered.")


def storage_report(directory: str, policy: RetentionPolicy, now: float | None = None) -> StorageReport:
    """Sizes by kind under `directory` and the retention plan of `policy`, without changing
    anything."""
    root = resolve_root(directory)
    start = time.perf_counter()
    s = scan(root, policy.marker)
    plan = assess(s, policy, time.time() if now is None else now)
    elapsed = time.perf_counter() - start
    kinds = [KindSize(kind=k, files=s.kinds[k].files, bytes=s.kinds[k].bytes,
                      disk_bytes=s.kinds[k].disk_bytes) for k in KINDS]
    return StorageReport(
        root=root, kinds=kinds, total_files=sum(k.files for k in kinds),
        total_bytes=sum(k.bytes for k in kinds), total_disk_bytes=sum(k.disk_bytes for k in kinds),
        retention=plan,
        links=[LinkEntry(path=x.rel_path, target=x.target, inside=x.target_rel is not None)
               for x in s.links],
        trash=s.trash_dirs, unreadable=s.unreadable, classification=CLASSIFICATION,
        scan_s=elapsed, mount_points=s.mount_points)
