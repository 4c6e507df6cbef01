"""Tracking a plain PyTorch training loop: where each optimizer step's time goes.

    from gpuhours.track import track_run

    with track_run(project="demo", phase="sft", planned_steps=1000,
                   config={"micro_batch": 8, "seq_len": 512}) as run:
        for batch in run.batches(loader):          # times the wait for each batch; one step each
            with run.compute():
                loss = model(**batch).loss
                loss.backward()
            with run.optimizer():
                opt.step()
                opt.zero_grad()
            if run.step % 500 == 0:
                with run.save(path="ckpt/"):      # time and bytes written under the path
                    model.save_pretrained("ckpt/")

Each step's record is kept in memory and written to the ledger in one transaction every
`flush_every_s` seconds (10) or `flush_every` steps (1000), whichever comes first, and at the
end: a transaction costs about 10 ms here (SQLite's fsync), so writing per step would cost more
than the step; per step the tracker does a few perf_counter calls and a list append
(scripts/bench_track_overhead.py measures it). A killed process loses at most the last 10 s.
A ledger that refuses a write (another process holds its lock, the disk is full) never stops or
slows the loop: the records wait in memory and are written later (gpuhours.track.pending).
torch is imported only inside functions; on CUDA the phases synchronise the device at their
ends so that asynchronous kernels are counted where they run (set sync=False to avoid that).
"""

from __future__ import annotations

import os
import resource
import socket
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpuhours.track.ledger import Ledger, ledger_path, now_utc
from gpuhours.track.pending import (
    CLOSE_TIMEOUT_S,
    PendingWriter,
    UntrackedWriter,
    import_pending,
    pending_files,
)
from gpuhours.track.runs import StepRecord, check_run_fields

#: phases a step's time is attributed to (the rest of the step is "other")
PHASES = ("data_wait_s", "compute_s", "optimizer_s", "eval_s", "save_s")


def count_tokens(batch: Any) -> tuple[int | None, int | None, int | None]:
    """(samples, real tokens, computed tokens) of a batch dict with input_ids and attention_mask
    (or labels, where -100 marks ignored positions). (None, None, None) if it has neither."""
    if not isinstance(batch, dict):
        return None, None, None
    ids = batch.get("input_ids")
    mask = batch.get("attention_mask")
    labels = batch.get("labels")
    ref = ids if ids is not None else (mask if mask is not None else labels)
    if ref is None or not hasattr(ref, "shape") or len(ref.shape) < 2:
        return None, None, None
    samples = int(ref.shape[0])
    computed = int(ref.shape[0] * ref.shape[1])
    if mask is not None:
        real = int(mask.sum())
    elif labels is not None:
        real = int((labels != -100).sum())
    else:
        real = computed
    return samples, real, computed


def path_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes of a file, or of all files under a folder (what a checkpoint save wrote)."""
    p = Path(path)
    if p.is_file():
        return p.stat().st_size
    total = 0
    for root, _dirs, files in os.walk(p):
        for f in files:
            try:
                total += (Path(root) / f).stat().st_size
            except OSError:
                continue
    return total


class Device:
    """What the tracker asks the device: synchronise, peak memory, utilisation. CPU by default;
    CUDA when torch is already imported and a CUDA device is in use."""

    def __init__(self, sync: bool | None) -> None:
        self.kind = "cpu"
        self.name = _cpu_name()
        self._torch: Any = None
        self._nvml: Any = None
        self._nvml_handle: Any = None
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            self._torch = torch
            self.kind = "cuda"
            self.name = torch.cuda.get_device_name()
            try:  # nvml is optional: utilisation is recorded only where it is present
                import pynvml  # type: ignore[import-not-found]

                pynvml.nvmlInit()
                self._nvml = pynvml
                self._nvml_handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
            except Exception:
                self._nvml = None
        self.sync_enabled = (self.kind == "cuda") if sync is None else (sync and self.kind == "cuda")

    def sync(self) -> None:
        if self.sync_enabled:
            self._torch.cuda.synchronize()

    def peak_memory(self) -> tuple[int | None, str]:
        if self._torch is not None:
            peak = int(self._torch.cuda.max_memory_allocated())
            self._torch.cuda.reset_peak_memory_stats()
            return peak, "cuda-max-allocated"
        # ru_maxrss: KiB on Linux, bytes on macOS; the process's peak so far, not the step's
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(rss if sys.platform == "darwin" else rss * 1024), "process-peak-rss"

    def utilisation_pct(self) -> float | None:
        if self._nvml is None:
            return None
        try:
            return float(self._nvml.nvmlDeviceGetUtilizationRates(self._nvml_handle).gpu)
        except Exception:
            return None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "cpu"


class TrackedRun:
    """One run being tracked. Make one with `track_run(...)` (a plain loop) or
    `start_tracking(...)` (a framework's callbacks); see the module docstring.

    Its public methods are what a callback needs: `start_step()` / `end_step()` at the
    boundaries, `add_time(phase, seconds)` for a phase the framework reports by events,
    `sync_device()` before reading the clock, `add_save_bytes(path)` after a checkpoint, and
    `close()`. Ledger faults never raise from any of them (gpuhours.track.pending)."""

    def __init__(self, writer: PendingWriter | UntrackedWriter, device: Device, flush_every: int,
                 owns_ledger: bool, flush_every_s: float = 10.0,
                 close_timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        self.ledger = writer.ledger
        self.step = 0
        self.device_kind = device.kind
        self.device_name = device.name
        self._writer = writer
        self._device = device
        self._flush_every = max(1, flush_every)
        self._flush_every_s = flush_every_s
        self._close_timeout_s = close_timeout_s
        self._last_flush = time.perf_counter()
        self._owns_ledger = owns_ledger
        self._pending: list[StepRecord] = []
        self._t0 = time.perf_counter()
        self._current: StepRecord | None = None
        self._step_start = self._t0
        self._n_steps = 0
        self._totals = dict.fromkeys(PHASES, 0.0)
        self._wall_total = 0.0
        self._drain: threading.Thread | None = None
        self._closed = False

    @property
    def run_id(self) -> int | None:
        """The run's id in the ledger; None while the ledger has not yet taken the run (it was
        locked or full when the run started)."""
        return self._writer.run_id

    @property
    def current_step(self) -> StepRecord | None:
        """The open step's record (None between steps)."""
        return self._current

    @property
    def ledger_faults(self) -> dict[str, Any]:
        """What went wrong writing to the ledger so far (empty: nothing); also stored in the
        run's summary as `ledger_faults`."""
        return dict(self._writer.faults)

    # step boundaries -----------------------------------------------------------------------------

    def start_step(self) -> StepRecord:
        """Close the current step (if any) and open the next one."""
        now = time.perf_counter()
        if self._current is not None:
            self._close(now)
        self.step += 1
        self._step_start = now
        self._current = StepRecord(step=self.step, started_s=now - self._t0, wall_s=0.0)
        return self._current

    def end_step(self) -> None:
        """Close the current step now (the next start_step or batch opens another)."""
        if self._current is not None:
            self._close(time.perf_counter())

    def _close(self, now: float) -> None:
        rec = self._current
        assert rec is not None
        self._current = None
        rec.wall_s = now - self._step_start
        rec.peak_memory_bytes, rec.memory_basis = self._device.peak_memory()
        rec.device_util_pct = self._device.utilisation_pct()
        self._pending.append(rec)
        self._n_steps += 1
        self._wall_total += rec.wall_s
        for k in PHASES:
            self._totals[k] += getattr(rec, k)
        if len(self._pending) >= self._flush_every or now - self._last_flush >= self._flush_every_s:
            self.flush()

    def flush(self) -> bool:
        """Hand the pending step records to the ledger in one transaction. Never raises and
        never waits long: a ledger that refuses (locked by another process, disk full) keeps
        them pending for a later flush (gpuhours.track.pending). True when all are written."""
        if self._pending:
            self._writer.add_steps(self._pending)
            self._pending = []
        self._last_flush = time.perf_counter()
        return self._writer.flush()

    # phases ------------------------------------------------------------------------------------

    def batches(self, loader: Iterable[Any]) -> Iterator[Any]:
        """Yield the loader's batches; each batch opens a step, and the wait for it is the
        step's data_wait_s. Tokens are counted from input_ids / attention_mask / labels."""
        it = iter(loader)
        while True:
            rec = self.start_step()
            t = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                self._current = None  # no batch: no step
                self.step -= 1
                return
            rec.data_wait_s += time.perf_counter() - t
            self.count(batch)
            yield batch

    def count(self, batch: Any) -> None:
        """Add a batch's samples and tokens to the current step (batches() does this)."""
        rec = self._current or self.start_step()
        samples, real, computed = count_tokens(batch)
        if samples is not None:
            rec.samples = (rec.samples or 0) + samples
            rec.tokens_real = (rec.tokens_real or 0) + (real or 0)
            rec.tokens_computed = (rec.tokens_computed or 0) + (computed or 0)

    def add_time(self, phase: str, seconds: float) -> bool:
        """Add `seconds` to `phase` (one of PHASES) of the open step; False (nothing added)
        when no step is open."""
        if phase not in PHASES:
            raise ValueError(f"phase {phase!r} is not one of {PHASES}")
        rec = self._current
        if rec is None:
            return False
        setattr(rec, phase, getattr(rec, phase) + seconds)
        return True

    def add_save_bytes(self, path: str | os.PathLike[str]) -> bool:
        """Add the bytes under `path` (a checkpoint just written) to the open step."""
        rec = self._current
        if rec is None:
            return False
        rec.save_bytes += path_bytes(path)
        return True

    def sync_device(self) -> None:
        """Wait for the device's queued work (CUDA, when sync is on), so that the clock read next
        counts it."""
        self._device.sync()

    @contextmanager
    def _phase(self, name: str) -> Iterator[StepRecord]:
        rec = self._current or self.start_step()
        t = time.perf_counter()
        try:
            yield rec
        finally:
            self._device.sync()
            setattr(rec, name, getattr(rec, name) + time.perf_counter() - t)

    def data(self) -> Any:
        """Time spent getting the next batch (when not using batches())."""
        return self._phase("data_wait_s")

    def compute(self) -> Any:
        """Forward and backward."""
        return self._phase("compute_s")

    def optimizer(self) -> Any:
        """Optimizer step, zero_grad, scheduler."""
        return self._phase("optimizer_s")

    def evaluate(self) -> Any:
        """Evaluation inside the training loop."""
        return self._phase("eval_s")

    @contextmanager
    def save(self, path: str | os.PathLike[str] | None = None) -> Iterator[StepRecord]:
        """A checkpoint save; with `path`, the bytes under it after the save are recorded."""
        with self._phase("save_s") as rec:
            yield rec
        if path is not None:
            rec.save_bytes += path_bytes(path)

    # end ---------------------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        return {"steps": self._n_steps, "wall_s": self._wall_total,
                **{k: v for k, v in self._totals.items()}}

    def close(self, failed: bool = False) -> None:
        """End the run: 'failed' when the training failed (never for a ledger fault). What the
        ledger refuses now is written by a background thread within close_timeout_s (the
        program goes on meanwhile), then kept in a pending file beside the ledger."""
        if self._closed:
            return
        self._closed = True
        self.end_step()
        self._writer.set_finish("failed" if failed else "finished", self.summary)
        if self._pending:
            self._writer.add_steps(self._pending)
            self._pending = []
        done = self._writer.flush(force=True)
        if self._owns_ledger and self.ledger is not None:
            self.ledger.close()
        if not done:
            # not a daemon: the interpreter waits for it (at most close_timeout_s) at exit
            self._drain = threading.Thread(target=self._writer.drain,
                                           args=(self._close_timeout_s,),
                                           name="gpuhours-track-ledger", daemon=False)
            self._drain.start()

    def wait_written(self, timeout_s: float | None = None) -> bool:
        """After close(): wait (at most `timeout_s`) for the background writer; True when every
        record is in the ledger."""
        if self._drain is not None:
            self._drain.join(timeout_s)
        return self._writer.done


def start_tracking(*, project: str, phase: str, name: str = "", planned_steps: int | None = None,
                   config: dict[str, Any] | None = None,
                   ledger: str | os.PathLike[str] | Ledger | None = None,
                   flush_every: int = 1000, flush_every_s: float = 10.0,
                   sync: bool | None = None,
                   close_timeout_s: float = CLOSE_TIMEOUT_S) -> TrackedRun:
    """Start tracking one run and return it; the caller must `close()` it (track_run does).

    Bad arguments (an empty project, a ledger path that is not a ledger) raise here, before
    training starts. From then on the ledger can refuse writes without the training noticing:
    the run is registered as soon as the ledger takes it (`run_id` is None until then). In a
    torch.distributed job only rank 0 writes; the other ranks get a run that times its steps
    and writes nothing (`run_id` stays None)."""
    check_run_fields(project, phase, planned_steps, config)
    device = Device(sync)
    rank = distributed_rank()
    if rank not in (None, 0):
        # one run a job: rank 0 records it (its config's num_gpus counts the job's GPUs)
        return TrackedRun(UntrackedWriter(), device, flush_every, False, flush_every_s,
                          close_timeout_s)
    owns = not isinstance(ledger, Ledger)
    where = None if ledger is None or isinstance(ledger, Ledger) else Path(ledger)
    book = ledger if isinstance(ledger, Ledger) else Ledger.open(ledger_path(where))
    if pending_files(book.path):
        import_pending(book)
    cfg = dict(config or {})
    cfg.setdefault("threads", torch_threads())
    if rank == 0 and "num_gpus" not in cfg:  # the job's processes, one GPU each
        cfg["num_gpus"] = distributed_world_size()
        cfg["num_gpus_basis"] = "torch.distributed world size (one GPU a process)"
    writer = PendingWriter(book, {
        "project": project, "phase": phase, "name": name or f"{project}/{phase}",
        "device_kind": device.kind, "device_name": device.name,
        "planned_steps": planned_steps, "config": cfg, "created_utc": now_utc(),
        "hostname": socket.gethostname()})
    writer.flush(force=True)
    return TrackedRun(writer, device, flush_every, owns, flush_every_s, close_timeout_s)


@contextmanager
def track_run(*, project: str, phase: str, name: str = "", planned_steps: int | None = None,
              config: dict[str, Any] | None = None, ledger: str | os.PathLike[str] | Ledger | None
              = None, flush_every: int = 1000, flush_every_s: float = 10.0,
              sync: bool | None = None,
              close_timeout_s: float = CLOSE_TIMEOUT_S) -> Iterator[TrackedRun]:
    """Track one run, tagged with its plan's project and phase, into the ledger (`ledger`: an open
    Ledger, a path, or None for $GPUHOURS_LEDGER / ./.gpuhours/ledger.sqlite). `planned_steps`:
    the optimizer steps the whole run will take, so that the doctor can say what a fix is worth
    over all of it. Step records are written every `flush_every_s` seconds or `flush_every` steps.
    An exception inside marks the run 'failed' (and is re-raised); a ledger that refuses writes
    does neither (see gpuhours.track.pending)."""
    run = start_tracking(project=project, phase=phase, name=name, planned_steps=planned_steps,
                         config=config, ledger=ledger, flush_every=flush_every,
                         flush_every_s=flush_every_s, sync=sync, close_timeout_s=close_timeout_s)
    try:
        yield run
    except BaseException:
        run.close(failed=True)
        raise
    run.close()


def _initialised_dist() -> Any:
    """torch.distributed when torch is imported and a process group is initialised, else None
    (never imports torch)."""
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def distributed_world_size() -> int:
    """The processes of the initialised torch.distributed job (1 outside one)."""
    dist = _initialised_dist()
    return 1 if dist is None else int(dist.get_world_size())


def distributed_rank() -> int | None:
    """This process's rank in an initialised torch.distributed job; None outside one."""
    dist = _initialised_dist()
    return None if dist is None else int(dist.get_rank())


def torch_threads() -> int | None:
    """torch's intra-op thread count when torch is imported, else None (never imports it)."""
    torch = sys.modules.get("torch")
    return int(torch.get_num_threads()) if torch is not None else None
