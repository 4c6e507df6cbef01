"""Read a Weights & Biases run from its local directory: the `run-<id>.wandb` transaction log
that every run (offline or online) writes under `wandb/offline-run-*/` or `wandb/run-*/`.

wandb 0.31 has no Python reader of its own for this file (its Go core writes and syncs it), so
this is a small one. The format, as written by wandb (its former `sdk/internal/datastore.py`,
after LevelDB's log format, github.com/google/leveldb/blob/main/doc/log_format.md): a 7-byte
header `:W&B`, magic 0xBEE1 (little-endian uint16), version 0; then 32 KiB blocks of records,
each a 7-byte header (CRC-32 of the type byte then the payload, uint32 LE; payload length,
uint16 LE; type: 1 full, 2 first, 3 middle, 4 last piece of a record split over blocks)
and the payload, a serialised `wandb.proto.wandb_internal_pb2.Record`; a block's last < 7
bytes are zero padding. The protobuf classes come from the wandb package (needed: the
`export` extra).

What is kept: the run record (id, project, name, tags, start time, its config), config
updates, summary updates (last wins), history rows (each `run.log`: the logged keys with
W&B's `_step`, `_runtime` s since start, `_timestamp` Unix s), the environment (host, GPU
type and count when W&B saw GPUs) and the exit record.
"""

from __future__ import annotations

import json
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuhours.errors import InputError

HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
BLOCK_BYTES = 32 * 1024
RECORD_HEADER_BYTES = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
#: the largest .wandb file read (a long run with media can be large; history alone is small)
MAX_WANDB_BYTES = 2 * 2**30


@dataclass
class WandbRun:
    """One W&B run as its local transaction log holds it. Times: `history` rows' `_runtime`
    in seconds since the run started (W&B's clock), `_timestamp` Unix seconds."""

    path: Path
    run_id: str = ""
    project: str = ""
    name: str = ""
    tags: tuple[str, ...] = ()
    start_time: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None


def find_wandb_file(directory: str | Path, where: str) -> Path:
    """The `.wandb` file of a run directory (`wandb/offline-run-*/`, `wandb/run-*/`), or the
    file itself when given."""
    p = Path(directory).expanduser()
    if p.is_file() and p.suffix == ".wandb":
        return p
    if not p.is_dir():
        raise InputError(where, "does not exist." if not p.exists() else
                         "is not a W&B run directory or .wandb file.",
                         "Give a run directory: wandb/offline-run-<time>-<id>/ or "
                         "wandb/run-<time>-<id>/.")
    found = sorted(p.glob("run-*.wandb"))
    if not found:
        subdirs = sorted(d.name for d in p.glob("*run-*") if d.is_dir())
        hint = (f"Its run directories: {', '.join(subdirs[-3:])}." if subdirs else
                "W&B writes wandb/offline-run-<time>-<id>/run-<id>.wandb for each run.")
        raise InputError(where, "has no run-<id>.wandb file: not a W&B run directory.", hint)
    if len(found) > 1:
        raise InputError(where, f"holds {len(found)} .wandb files "
                                f"({', '.join(f.name for f in found)}); expected one.",
                         "Give the .wandb file itself.")
    return found[0]


def records(data: bytes, where: str) -> list[bytes]:
    """The payloads of the log's records, pieces joined, each checked against its CRC-32."""
    if data[:len(HEADER)] != HEADER:
        raise InputError(where, "is not a W&B transaction log (expected the header ':W&B', "
                                "0xBEE1, version 0).")
    out: list[bytes] = []
    pieces: list[bytes] = []
    pos = len(HEADER)
    while pos + RECORD_HEADER_BYTES <= len(data):
        left = BLOCK_BYTES - pos % BLOCK_BYTES
        if left < RECORD_HEADER_BYTES:  # zero padding at the end of a block
            pos += left
            continue
        crc, length, kind = struct.unpack_from("<IHB", data, pos)
        if crc == 0 and length == 0 and kind == 0:  # zeroed tail of a block being written
            pos += left
            continue
        payload = data[pos + RECORD_HEADER_BYTES:pos + RECORD_HEADER_BYTES + length]
        if len(payload) < length:
            break  # the last record of a run still being written: keep what came before
        if zlib.crc32(payload, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != crc:
            raise InputError(where, f"is damaged: the record at byte {pos} fails its CRC-32 "
                                    "check.")
        pos += RECORD_HEADER_BYTES + length
        if kind == FULL:
            out.append(payload)
        elif kind == FIRST:
            pieces = [payload]
        elif kind in (MIDDLE, LAST) and pieces:
            pieces.append(payload)
            if kind == LAST:
                out.append(b"".join(pieces))
                pieces = []
        else:
            raise InputError(where, f"is damaged: record type {kind} at byte {pos}.")
    return out


def _key_of(item: Any) -> list[str]:
    return list(item.nested_key) if item.nested_key else [item.key]


def _set(target: dict[str, Any], keys: list[str], value: Any) -> None:
    for k in keys[:-1]:
        child = target.get(k)
        if not isinstance(child, dict):
            child = target[k] = {}
        target = child
    target[keys[-1]] = value


def _value(item: Any) -> Any:
    try:
        return json.loads(item.value_json)
    except ValueError:
        return item.value_json


def read_wandb_run(directory: str | Path, where: str | None = None) -> WandbRun:
    """The run in `directory` (or a .wandb file). `where` names it in errors (default: the
    path). Needs the wandb package (its protobuf classes)."""
    where = where or str(directory)
    path = find_wandb_file(directory, where)
    from google.protobuf.json_format import MessageToDict
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2 as pb

    try:
        if path.stat().st_size > MAX_WANDB_BYTES:
            raise InputError(where, f"{path.name} is larger than {MAX_WANDB_BYTES >> 30} GiB.")
        data = path.read_bytes()
    except OSError as e:
        raise InputError(where, f"cannot be read: {e.strerror}.") from None
    run = WandbRun(path=path)
    for payload in records(data, where):
        record = pb.Record()  # type: ignore[attr-defined]  # generated protobuf module
        try:
            record.ParseFromString(payload)
        except DecodeError:
            raise InputError(where, "is damaged: a record is not a W&B protobuf Record."
                             ) from None
        kind = record.WhichOneof("record_type")
        if kind == "run":
            r = record.run
            run.run_id, run.project, run.name = r.run_id, r.project, r.display_name
            run.tags = tuple(r.tags)
            run.start_time = r.start_time.ToJsonString() if r.HasField("start_time") else ""
            for item in r.config.update:
                _set(run.config, _key_of(item), _value(item))
        elif kind == "config":
            for item in record.config.update:
                _set(run.config, _key_of(item), _value(item))
            for item in record.config.remove:
                run.config.pop(_key_of(item)[0], None)
        elif kind == "summary":
            for item in record.summary.update:
                _set(run.summary, _key_of(item), _value(item))
            for item in record.summary.remove:
                run.summary.pop(_key_of(item)[0], None)
        elif kind == "history":
            row: dict[str, Any] = {}
            for item in record.history.item:
                _set(row, _key_of(item), _value(item))
            run.history.append(row)
        elif kind == "environment":
            run.environment.update(MessageToDict(record.environment,
                                                 preserving_proto_field_name=True))
        elif kind == "exit":
            run.exit_code = int(record.exit.exit_code)
    if not run.run_id:
        raise InputError(where, "has no run record: not a complete W&B run log.")
    run.config.pop("_wandb", None)  # W&B's own bookkeeping, not the user's config
    return run


def wait_until_complete(directory: str | Path, timeout_s: float = 30.0) -> bool:
    """Wait until the run's log holds its exit record: wandb's core process writes the file
    after `run.finish()` has returned, so a reader that comes at once may find it partly
    written. True when complete, False after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if read_wandb_run(directory).exit_code is not None:
                return True
        except InputError:
            pass  # not written yet, or only in part
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
