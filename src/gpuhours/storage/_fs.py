"""Filesystem helpers that the rest of gpuhours.storage relies on for safety: atomic writes,
containment checks that never follow a link, the root directory check, and the mount points
that a walk or a deletion must never cross."""

from __future__ import annotations

import os
import re
import stat

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


def mount_points_under(root: str) -> frozenset[str]:
    """The mount points strictly below `root` (a real path), from /proc/self/mountinfo: other
    filesystems, and bind mounts of the same filesystem, which st_dev cannot tell apart from
    an ordinary directory. Empty where there is no /proc (then st_dev is the only check)."""
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return frozenset()
    prefix = root.rstrip("/") + "/"
    found = set()
    for line in lines:
        fields = line.split(b" ")
        if len(fields) < 5:
            continue
        # the kernel writes space, tab, newline and backslash as octal escapes (\040)
        point = os.fsdecode(re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]),
                                   fields[4]))
        if point.startswith(prefix):
            found.add(point)
    return frozenset(found)


def mount_id(fd: int) -> int | None:
    """The id of the mount an open file lies on (Linux /proc/self/fdinfo), None where unknown.
    Two directories on one filesystem but different mounts (a bind mount) differ here."""
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as f:
            for line in f:
                if line.startswith(b"mnt_id:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None
