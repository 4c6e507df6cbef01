"""Files the user owns: atomic writes (a temporary file in the same folder, flushed to disk, then
renamed over the target, so that a reader or a crash never sees half a file), and bounded reads
of the files a user names (never a FIFO, a device or a file too large to hold in memory)."""

from __future__ import annotations

import contextlib
import glob
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from gpuhours.errors import InputError

#: temporary files of atomic writes are named `.<name>.<random><TEMP_SUFFIX>`; one older than
#: STALE_TEMP_S is a leftover of a killed write (a write takes milliseconds) and is removed by
#: the next write to the same file
TEMP_SUFFIX = ".gpuhours-tmp"
STALE_TEMP_S = 3600.0


def _umask() -> int:
    """The process's umask, read without changing it where Linux allows (umask() sets it)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _remove_stale_temps(target: Path) -> None:
    """Temporary files of killed writes to `target`: this module's names only, and old."""
    cutoff = time.time() - STALE_TEMP_S
    for tmp in target.parent.glob(f".{glob.escape(target.name)}.*{TEMP_SUFFIX}"):
        try:
            st = tmp.lstat()
            if stat.S_ISREG(st.st_mode) and st.st_mtime < cutoff:
                tmp.unlink()
        except OSError:
            pass


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename or unlink in directory `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_temp_name(name: str) -> bool:
    """Whether a file name is that of an atomic write in flight (or of a killed one)."""
    return name.startswith(".") and name.endswith(TEMP_SUFFIX)


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Write `path` all or nothing: into a temporary file in the same folder, flushed to disk,
    renamed over `path`, the folder flushed too; on an exception the temporary file is removed
    and `path` is as it was.

    A symlink is written through (its target is replaced, the link kept). The file keeps its
    mode and owner; a new one gets 0666 less the umask, as open() would give it. A read-only
    file is refused (InputError), as an editor would. Temporary files left by killed writes to
    the same file are removed once STALE_TEMP_S old. An OSError of the write itself becomes an
    InputError naming the file; one raised by the caller's block passes through as it is."""
    given = Path(path).expanduser()
    target = Path(os.path.realpath(given))
    try:
        st: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise InputError(str(given), f"cannot be written: {e.strerror}.") from None
    if st is not None and (st.st_mode & 0o222 == 0 or not os.access(target, os.W_OK)):
        raise InputError(str(given), f"is read-only (mode {stat.S_IMODE(st.st_mode):04o}), so "
                                     f"gpuhours left it as it was.",
                         "Make it writable (chmod u+w) to update it, or write elsewhere.")
    mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temps(target)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                   suffix=TEMP_SUFFIX)
    except OSError as e:
        raise InputError(str(given), f"cannot be written: {e.strerror}.") from None
    in_callers_block = False
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, mode)  # mkstemp creates 0600
        if st is not None and hasattr(os, "fchown") and st.st_uid != os.geteuid():
            # only root may give a file away; the mode is kept all the same
            with contextlib.suppress(OSError):
                os.fchown(fd, st.st_uid, st.st_gid)
        with os.fdopen(fd, "wb") as f:
            in_callers_block = True
            yield f
            in_callers_block = False
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        fsync_dir(target.parent)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) and not in_callers_block:
            raise InputError(str(given), f"cannot be written: {e.strerror}; it was left as it "
                                         f"was.") from None
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` to `path` atomically (see atomic_writer)."""
    with atomic_writer(path) as f:
        f.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` to `path` atomically, UTF-8 (see atomic_writer)."""
    atomic_write_bytes(path, text.encode("utf-8"))


#: Size limits of the user files gpuhours reads whole into memory. A limit is far above any real
#: file of its kind (a Hugging Face config.json is a few KiB; a trainer_state.json that logs
#: every step of a million-step run is about 150 MB) and far below what would exhaust memory
#: when parsed. Assumption: sizes seen in practice, with a margin of 10x or more.
CONFIG_MAX_BYTES = 16 * 2**20
TRAINER_STATE_MAX_BYTES = 512 * 2**20
SMALL_JSON_MAX_BYTES = 64 * 2**20


def read_user_bytes(path: str | os.PathLike[str], where: str, max_bytes: int,
                    what: str = "file") -> bytes:
    """The bytes of a regular file the user named, refusing anything that would hang or exhaust
    memory: a FIFO or socket (opened without blocking, then refused), a device such as
    /dev/zero, a directory, or a file larger than `max_bytes` (checked before reading, and again
    while reading, in case it grows). Errors are InputErrors naming `where`.

    FileNotFoundError is raised as is (callers word "no such file" their own way)."""
    p = os.fspath(path)
    try:
        # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting forever;
        # it has no effect on a regular file
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise InputError(where, f"is a directory; expected a {what}.") from None
    except OSError as e:
        raise InputError(where, f"cannot be read: {e.strerror}.") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise InputError(where, f"is a directory; expected a {what}.")
        if not stat.S_ISREG(st.st_mode):
            raise InputError(where, f"is a {file_type(st.st_mode)}, not a regular file; "
                                    f"expected a {what}.")
        if st.st_size > max_bytes:
            raise InputError(where, f"is {st.st_size:,} bytes, more than the {max_bytes:,} "
                                    f"bytes a {what} can be; is it the right file?")
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise InputError(where, f"grew past the {max_bytes:,} bytes a {what} can be "
                                        "while it was read; is it still being written?")
        return b"".join(chunks)
    except OSError as e:
        raise InputError(where, f"cannot be read: {e.strerror}.") from None
    finally:
        os.close(fd)


def read_user_text(path: str | os.PathLike[str], where: str, max_bytes: int,
                   what: str = "file") -> str:
    """`read_user_bytes` decoded as UTF-8; undecodable bytes are an InputError."""
    data = read_user_bytes(path, where, max_bytes, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(where, f"is not UTF-8 text (byte {e.start}); expected a {what}.") \
            from None


def file_type(mode: int) -> str:
    """A file type in words, from st_mode."""
    for test, name in ((stat.S_ISFIFO, "FIFO (named pipe)"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symbolic link"),
                       (stat.S_ISREG, "regular file")):
        if test(mode):
            return name
    return "special file"


def require_parent_folder(path: str | os.PathLike[str], where: str) -> None:
    """Refuse an output path whose folder does not exist (InputError keyed by `where`, the
    option that gave it): a command writes the file, never the folders above it, so that a
    typo in a path (--out runs/budgte/x.md) is an error, not a new folder tree."""
    parent = Path(path).expanduser().parent
    if not parent.is_dir():
        what = "is not a folder" if parent.exists() else "does not exist"
        raise InputError(where, f"the folder {str(parent)!r} of {str(path)!r} {what}; gpuhours "
                                f"writes the file, not the folders above it.",
                         f"Create it first (mkdir -p {parent}), or correct the path.")


#: how much of an existing output file is read to recognise it as an earlier output
RECOGNISE_BYTES = 65536


def refuse_foreign_overwrite(path: str | os.PathLike[str], where: str,
                             ours: Callable[[bytes], bool], what: str) -> None:
    """Refuse (InputError keyed by `where`) to write an output over an existing file that is
    not an earlier output of the same command: `ours` is asked about the file's first
    RECOGNISE_BYTES, so re-running a command replaces its own output while a plan, a ledger or
    any other file given by mistake is left as it was. Something not a regular file at `path`
    (a folder, a FIFO) is refused too."""
    target = Path(path).expanduser()
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise InputError(where, f"cannot check {str(path)!r} before writing it: {e.strerror}.") \
            from None
    if not stat.S_ISREG(mode):
        raise InputError(where, f"{str(path)!r} is a {file_type(mode)}, not a file gpuhours can "
                                f"write {what} to.", "Give the path of a new file.")
    try:
        with target.open("rb") as f:
            head = f.read(RECOGNISE_BYTES)
    except OSError as e:
        raise InputError(where, f"cannot read {str(path)!r} before replacing it: {e.strerror}.") \
            from None
    if not ours(head):
        raise InputError(where, f"{str(path)!r} exists and is not {what} written by gpuhours; "
                                f"it is left as it was.",
                         "Give the path of a new file, or remove that one first if it is no "
                         "longer wanted.")
