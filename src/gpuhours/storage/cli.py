"""The `gpuhours storage` commands. Registered on the main app by gpuhours.cli;
this module must not import torch at import time (imports go inside the command functions)."""

from __future__ import annotations

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


def register(app: typer.Typer) -> None:
    """Add the `storage` sub-app (report, prune) to `app`."""
    from gpuhours.cli_common import emit_json as _emit_json
    from gpuhours.cli_common import out, user_errors
    from gpuhours.storage.retention import DEFAULT_SETTLE_S

    storage_app = typer.Typer(no_args_is_help=True, help="Sizes by kind under a directory; safe "
                                                         "checkpoint retention.")
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
        r = storage_report(directory, policy)
        if as_json:
            _emit_json(r)
        else:
            render_report(r, out)

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
        yes: Annotated[bool, typer.Option("--yes", help="Remove; without it nothing changes.")]
        = False,
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
        if as_json:
            _emit_json(r)
        else:
            render_prune(r, out)
        if r.failed:
            raise typer.Exit(code=1)
