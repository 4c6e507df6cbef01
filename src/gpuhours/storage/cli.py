"""The `gpuhours storage` commands. Registered on the main app by gpuhours.cli;
this module must not import torch at import time (imports go inside the command functions)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

DirArg = Annotated[str, typer.Argument(metavar="DIR", help="Directory to look at (nothing outside it is read "
                                            "through links or touched).", show_default=False)]
KeepBestOpt = Annotated[int, typer.Option(
    help="Best checkpoints by --metric kept per run (the best one is always kept).")]
MetricOpt = Annotated[str | None, typer.Option(
    help="Metric of the Trainer's log_history to rank by, e.g. eval_loss; the value logged at "
         "the checkpoint's own step.")]
ModeOpt = Annotated[str | None, typer.Option(
    help="min or max: which end of --metric is best (default: min for a name ending in 'loss', "
         "else max, as the Trainer's greater_is_better).")]
MetricsFileOpt = Annotated[str | None, typer.Option(
    help="JSON file {checkpoint path or name: number or {metric: number}} to rank by instead.")]
SettleOpt = Annotated[float, typer.Option(
    help="A checkpoint with a file modified less than this many seconds ago counts as being "
         "written and is kept.")]
MarkerOpt = Annotated[str, typer.Option(
    help="File whose presence marks a finished checkpoint (the Trainer writes it last).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
RemoveOpt = Annotated[bool, typer.Option("--yes", help="Remove; without it nothing changes.")]


def _show(result: Any, render: Callable[[Any, Any], None], as_json: bool,
          failed: bool = False) -> None:
    """Print a command's result (JSON on stdout, else rendered), then exit with code 1 when
    `failed`: a removal failed, or the cap cannot be met."""
    from gpuhours.cli_common import emit_json, out

    if as_json:
        emit_json(result)
    else:
        render(result, out)
    if failed:
        raise typer.Exit(code=1)


def _policy(keep_last: int | None, keep_best: int, metric: str | None, mode: str | None,
            metrics_file: str | None, settle_s: float, marker: str) -> Any:
    from gpuhours.errors import InputError
    from gpuhours.storage.retention import RetentionPolicy

    for option, value in (("--keep-last", keep_last), ("--keep-best", keep_best)):
        if value is not None and value < 0:
            raise InputError(option, f"expected a whole number >= 0, got {value}.")
    if mode is not None and mode not in ("min", "max"):
        raise InputError("--mode", f"expected min or max, got {mode!r}.")
    return RetentionPolicy.model_validate(dict(
        keep_last=keep_last, keep_best=keep_best, metric=metric, mode=mode,
        metrics_file=metrics_file, settle_s=settle_s, marker=marker))


def _out_of_natural_order(files: list[str]) -> bool:
    """True when the files' numbers (batch_2 < batch_10) would order them otherwise."""
    import re

    def key(name: str) -> list[tuple[int, int | str]]:
        return [(0, int(part)) if part.isdigit() else (1, part)
                for part in re.split(r"(\d+)", name) if part]

    return sorted(files, key=key) != list(files)


def register(app: typer.Typer) -> None:
    """Add the `storage` sub-app (report, prune, evict, consolidate) to `app`."""
    from gpuhours.cli_common import user_errors
    from gpuhours.storage.retention import DEFAULT_SETTLE_S

    storage_app = typer.Typer(no_args_is_help=True, help="Sizes by kind under a directory; safe "
                                                         "checkpoint retention, cache eviction "
                                                         "and consolidation of batch files.")
    app.add_typer(storage_app, name="storage")

    @storage_app.command("report")
    @user_errors
    def report(
        directory: DirArg,
        keep_last: Annotated[int, typer.Option(
            help="Policy to show: newest complete checkpoints kept per run.")] = 3,
        keep_best: KeepBestOpt = 0,
        metric: MetricOpt = None,
        mode: ModeOpt = None,
        metrics_file: MetricsFileOpt = None,
        settle_s: SettleOpt = DEFAULT_SETTLE_S.value,
        marker: MarkerOpt = "trainer_state.json",
        as_json: JsonOpt = False,
    ) -> None:
        """Sizes by kind (checkpoints, caches, datasets, logs, other) and what the retention
        policy would remove and free. Changes nothing."""
        from gpuhours.storage.render import render_report
        from gpuhours.storage.report import storage_report

        policy = _policy(keep_last, keep_best, metric, mode, metrics_file, settle_s, marker)
        _show(storage_report(directory, policy), render_report, as_json)

    @storage_app.command("prune")
    @user_errors
    def prune(
        directory: DirArg,
        keep_last: Annotated[int | None, typer.Option(
            help="Newest complete checkpoints kept per run (required; the newest is always "
                 "kept).", show_default=False)] = None,
        keep_best: KeepBestOpt = 0,
        metric: MetricOpt = None,
        mode: ModeOpt = None,
        metrics_file: MetricsFileOpt = None,
        settle_s: SettleOpt = DEFAULT_SETTLE_S.value,
        marker: MarkerOpt = "trainer_state.json",
        yes: RemoveOpt = False,
        as_json: JsonOpt = False,
    ) -> None:
        """Remove old checkpoints: Hugging Face checkpoint-<step> directories, and checkpoint
        files named by step or epoch (checkpoint_step_500.pt, epoch_3.ckpt,
        epoch=2-step=1000-val_loss=0.23.ckpt; a metric in the name ranks them for --metric).
        Shows what it would remove, removes only with --yes. Never removes the newest, the
        best, an incomplete or a linked checkpoint, nor anything outside DIR. Exit code 1
        when a removal failed."""
        from gpuhours.errors import InputError
        from gpuhours.storage.pruning import prune as prune_dir
        from gpuhours.storage.render import render_prune

        if keep_last is None:
            raise InputError("--keep-last", "prune needs --keep-last N: how many of the newest "
                                            "complete checkpoints of each run to keep (the newest "
                                            "is always kept).")
        policy = _policy(keep_last, keep_best, metric, mode, metrics_file, settle_s, marker)
        r = prune_dir(directory, policy, yes=yes)
        _show(r, render_prune, as_json, failed=bool(r.failed))

    @storage_app.command("evict")
    @user_errors
    def evict(
        directory: Annotated[str, typer.Argument(metavar="DIR", help="The cache directory.",
                                                 show_default=False)],
        max_size: Annotated[str, typer.Option(
            help="The cap: 5GB (10^9 bytes), 5GiB (2^30 bytes), 500MB or a number of bytes.",
            show_default=False)],
        settle_s: Annotated[float, typer.Option(
            help="A file modified less than this many seconds ago may still be being written "
                 "and is never evicted.")] = 60.0,
        yes: RemoveOpt = False,
        as_json: JsonOpt = False,
    ) -> None:
        """Bring a cache directory under --max-size by removing its least recently used files
        (last use: the later of access and modification time). Shows what it would remove,
        removes only with --yes. Links are neither followed nor removed; nothing outside DIR
        is touched. Exit code 1 when the cap cannot be met (files too recent to evict)."""
        from gpuhours.errors import InputError
        from gpuhours.storage.cache import evict as evict_dir
        from gpuhours.storage.cache import parse_size_bytes
        from gpuhours.storage.render import render_eviction

        if not settle_s >= 0:
            raise InputError("--settle-s", f"expected seconds >= 0, got {settle_s}.")
        r = evict_dir(directory, parse_size_bytes(max_size, "--max-size"), apply=yes,
                      settle_s=settle_s)
        _show(r, render_eviction, as_json, failed=bool(r.over_cap))

    @storage_app.command("consolidate")
    @user_errors
    def consolidate(
        files: Annotated[list[str], typer.Argument(
            metavar="FILES...", help="The batch files, in the order to merge them.",
            show_default=False)],
        into: Annotated[str, typer.Option(
            "--into", help="The consolidated file to write (must not exist).",
            show_default=False)],
        format_: Annotated[str, typer.Option(
            "--format", help="torch (.pt files loaded and saved as one: tensors or dicts of "
                             "tensors concatenated along dim 0, else a list), bytes (the files "
                             "concatenated, with an index of offsets), or auto (torch when "
                             "every file ends in .pt or .pth).")] = "auto",
        keep_originals: Annotated[bool, typer.Option(
            "--keep-originals", help="Write and verify, but delete nothing.")] = False,
        unsafe_pickle: Annotated[bool, typer.Option(
            "--unsafe-pickle", help="Load .pt files that torch.load(weights_only=True) refuses "
                                    "(runs their pickled code: only files you trust).")] = False,
        yes: Annotated[bool, typer.Option("--yes", help="Write, verify, then delete the "
                                                        "originals; without it nothing "
                                                        "changes.")] = False,
        as_json: JsonOpt = False,
    ) -> None:
        """Merge batch files into one file, verify it, and only then delete the originals
        (the seed 003 pattern, made safe): written atomically, checked by reading it back
        (a .pt file reloaded and compared tensor by tensor with each original; bytes by size
        and SHA-256), nothing deleted if the check fails. Shows the plan; acts only with
        --yes."""
        from gpuhours.errors import InputError
        from gpuhours.storage.consolidation import check_inputs
        from gpuhours.storage.consolidation import consolidate as merge
        from gpuhours.storage.render import render_consolidation
        from gpuhours.storage.torch_merge import TORCH_SUFFIXES

        if format_ not in ("auto", "torch", "bytes"):
            raise InputError("--format", f"expected auto, torch or bytes, got {format_!r}.")
        fmt = format_ if format_ != "auto" else (
            "torch" if all(f.lower().endswith(TORCH_SUFFIXES) for f in files) else "bytes")
        if unsafe_pickle and fmt != "torch":
            raise InputError("--unsafe-pickle", "is for --format torch.")
        total = check_inputs(files, into)
        result = None
        if yes:
            if fmt == "torch":
                from gpuhours.storage.torch_merge import TorchMerge

                tm = TorchMerge(unsafe_pickle=unsafe_pickle)
                result = merge(files, into, remove_originals=not keep_originals, write=tm.write,
                               verify=tm.verifier(files), describe=lambda: tm.describe(files))
            else:
                result = merge(files, into, remove_originals=not keep_originals)
        plan = {"files": list(files), "dest": into, "format": fmt, "bytes": total,
                "applied": yes, "keep_originals": keep_originals,
                "natural_order": _out_of_natural_order(files),
                "result": result.model_dump() if result else None}
        _show(plan, render_consolidation, as_json)
