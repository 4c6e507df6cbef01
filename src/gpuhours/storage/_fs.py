"""Filesystem helpers that the rest of gpuhours.storage relies on for safety: atomic writes,
containment checks that never follow a link, and the root directory check."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from typing import BinaryIO

from gpuhours.errors import InputError

#: Name prefix of a directory being deleted by gpuhours. A checkpoint is renamed to this before
#: its files are removed, so a half-deleted checkpoint never carries a checkpoint's name.
TRASH_PREFIX = ".gpuhours-trash-"


def resolve_root(path: str, option: str = "DIR") -> str:
    """The real, absolute path of the directory the user named; an InputError when it does not
    exist or is not a directory. A DIR that is itself a symbolic link is resolved once, here:
    the user named it; nothing below it is followed."""
    if not path:
        raise InputError(option, "expected a directory, got ''.")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(option, f"{path}: no such directory.") from None
    except OSError as e:
        raise InputError(option, f"{path}: cannot be read ({e.strerror}).") from None
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(option, f"{path}: is a file, not a directory.")
    return os.path.realpath(path)


def is_within(root: str, rel_path: str) -> bool:
    """True when `root`/`rel_path` is strictly below `root` and no component between them is
    a symbolic link or anything but a directory (the last component may be a directory or
    file, but not a link). `root` must be a real path (resolve_root)."""
    parts = [p for p in rel_path.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        return False
    current = root
    for i, part in enumerate(parts):
        current = os.path.join(current, part)
        try:
            st = os.lstat(current)
        except OSError:
            return False
        if stat.S_ISLNK(st.st_mode):
            return False
        if i < len(parts) - 1 and not stat.S_ISDIR(st.st_mode):
            return False
    return True


def fsync_dir(path: str) -> None:
    """Make a rename or unlink in directory `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_writer(path: str) -> Iterator[BinaryIO]:
    """Write `path` all or nothing: into a temporary file in the same directory, then fsync,
    rename over `path`, fsync the directory. On an exception the temporary file is removed and
    `path` is untouched."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp-{secrets.token_hex(4)}")
    f = open(tmp, "xb")  # noqa: SIM115 - closed below, before the rename
    try:
        yield f
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(tmp, path)
        fsync_dir(directory)
    except BaseException:
        f.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str, data: bytes) -> None:
    with atomic_writer(path) as f:
        f.write(data)
