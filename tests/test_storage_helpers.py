"""Helpers shared by the storage tests: build Hugging Face-style checkpoint trees and take
snapshots of directory trees (no tests here).

Files get their real mtime (now); the tests pass the library a `now` far in the future (LATER)
so that every file counts as settled, and set a file's mtime to LATER to make it "recent".
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

#: a "now" for the library at which every file written by the test has settled
LATER = time.time() + 100_000


def make_checkpoint(run: Path, step: int, *, state: bool = True, metric: float | None = None,
                    metric_name: str = "eval_loss", metric_step: int | None = None,
                    staging: bool = False, lock: bool = False, recent: bool = False,
                    payload: bytes | None = None, extra_state: dict[str, Any] | None = None) -> Path:
    """checkpoint-<step>/ with model.safetensors, optimizer.pt, and trainer_state.json whose
    log_history has `metric` at `metric_step` (default: the checkpoint's step)."""
    d = run / (("tmp-" if staging else "") + f"checkpoint-{step}")
    d.mkdir(parents=True)
    (d / "model.safetensors").write_bytes(payload if payload is not None else
                                          f"weights of step {step}".encode() * 50)
    (d / "optimizer.pt").write_bytes(f"optimizer of step {step}".encode() * 100)
    sub = d / "global_step"
    sub.mkdir()
    (sub / "shard_0.pt").write_bytes(b"s" * (step % 7 + 1))
    if state:
        history: list[dict[str, Any]] = [{"step": step, "loss": 1.0, "epoch": 0.5}]
        if metric is not None:
            history.append({"step": step if metric_step is None else metric_step,
                            metric_name: metric})
        (d / "trainer_state.json").write_text(json.dumps(
            {"global_step": step, "log_history": history, **(extra_state or {})}))
    if lock:
        (d / "save.lock").write_text("")
    if recent:
        os.utime(d / "optimizer.pt", (LATER - 1, LATER - 1))
    return d


def snapshot(root: Path) -> dict[str, str]:
    """{path relative to root: sha256 of a file | 'link -> target' | 'dir'}, links not followed."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = f"link -> {os.readlink(p)}"
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def subtree(snap: dict[str, str], prefix: str) -> dict[str, str]:
    return {k: v for k, v in snap.items() if k == prefix or k.startswith(prefix + "/")}
