"""The `gpuhours export wandb|mlflow` commands: parse, call gpuhours.track.export, print.
Registered lazily on the main app by gpuhours.cli (LAZY_COMMANDS); wandb and mlflow are imported
only when a command runs (the `export` extra)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from gpuhours.cli_common import JsonOpt, LedgerOpt, emit_json, err, out, user_errors

if TYPE_CHECKING:
    from gpuhours.track.export import ExportOutcome, ExportRun

RunsOpt = Annotated[list[str] | None, typer.Option(
    "--run", help="A ledger id to export (repeat for more): 3 or m3 = measurement 3 "
                  "(`gpuhours ledger list`), r3 = tracked run 3. Default: every measurement "
                  "and every tracked run not marked running.")]


def _records(ledger: str | None, runs: list[str] | None) -> list[ExportRun]:
    from gpuhours.errors import InputError
    from gpuhours.report.text import esc
    from gpuhours.track.export import ledger_exports, running_runs
    from gpuhours.track.ledger import Ledger, ledger_path

    path = ledger_path(ledger)
    if not path.exists():
        raise InputError("--ledger", f"no ledger at {path}.",
                         "Run `gpuhours bench` or track a run first, or set --ledger.")
    with Ledger.open(path, create=False) as book:
        records = ledger_exports(book, runs)
        running = [] if runs else running_runs(book)
    if running:  # on stderr: --json keeps stdout to the JSON
        names = ", ".join(f"r{i}" for i in running)
        err.print(f"Not exported, marked running: {esc(names)}. Export them when they have "
                  "finished; a run that was killed stays marked running, and `--run rN` "
                  "exports it as it is (once: a later export finds its key).", style="dim")
    if not records:
        raise InputError(f"ledger {path}", "holds no measurement and no finished tracked run "
                                           "to export.")
    return records


def _report(outcomes: list[ExportOutcome], where: str, as_json: bool) -> None:
    from gpuhours.report.text import esc

    if as_json:
        emit_json([o.__dict__ for o in outcomes])
        return
    done = sum(o.status == "exported" for o in outcomes)
    out.print(f"{esc(where)}: {done} exported, {len(outcomes) - done} already there "
              "(skipped):")
    for o in outcomes:
        verb = "exported" if o.status == "exported" else "already there"
        out.print(f"  {esc(o.ledger_ref)} -> {esc(o.run_key)}: {verb} ({esc(o.destination)})")
    out.print("[dim]Every figure is a gpuhours measurement (tag gpuhours.basis = measured); "
              "an estimate a record carries is named predicted_*.[/dim]")


def register(app: typer.Typer) -> None:
    """Add the `export` sub-app (wandb, mlflow) to `app`."""
    export_app = typer.Typer(no_args_is_help=True, help="Export ledger measurements and tracked "
                             "runs to Weights & Biases or MLflow (the export extra).")
    app.add_typer(export_app, name="export")

    @export_app.command("wandb")
    @user_errors
    def export_wandb(
        ledger: LedgerOpt = None,
        run: RunsOpt = None,
        project: Annotated[str, typer.Option(help="W&B project.")] = "gpuhours",
        entity: Annotated[str | None, typer.Option(
            help="W&B entity (default: your W&B default).")] = None,
        offline: Annotated[bool, typer.Option(
            "--offline", help="W&B offline mode: write runs under DIR/wandb/ for `wandb "
                              "sync` (also when $WANDB_MODE=offline).")] = False,
        directory: Annotated[str | None, typer.Option(
            "--dir", help="Where W&B writes its run folders (default: $WANDB_DIR, else the "
                          "current directory).")] = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Each ledger record as a W&B run (id = its gpuhours run key; exported once)."""
        from gpuhours.track.export import export_to_wandb

        outcomes = export_to_wandb(_records(ledger, run), project=project, entity=entity,
                                   offline=offline, directory=directory)
        _report(outcomes, f"W&B project {project}", as_json)

    @export_app.command("mlflow")
    @user_errors
    def export_mlflow(
        ledger: LedgerOpt = None,
        run: RunsOpt = None,
        tracking_uri: Annotated[str | None, typer.Option(
            "--tracking-uri", help="MLflow tracking store (default: $MLFLOW_TRACKING_URI, else "
                                   "file:./mlruns).")] = None,
        experiment: Annotated[str, typer.Option(help="MLflow experiment.")] = "gpuhours",
        as_json: JsonOpt = False,
    ) -> None:
        """Each ledger record as an MLflow run (tag gpuhours.run_key; exported once)."""
        from gpuhours.track.export import export_to_mlflow

        outcomes = export_to_mlflow(_records(ledger, run), tracking_uri=tracking_uri,
                                    experiment=experiment)
        _report(outcomes, f"MLflow experiment {experiment}", as_json)
