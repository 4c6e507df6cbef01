"""Atomic file writes: a temporary file in the same folder, flushed to disk, then renamed over
the target, so that a reader (or a crash) never sees half a file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from gpuhours.errors import InputError


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` atomically (UTF-8)."""
    path = Path(path).expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as e:
        raise InputError(str(path), f"cannot be written: {e.strerror}.") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
