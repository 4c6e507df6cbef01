"""The `gpuhours report` command: the budget of a plan as one self-contained HTML page.
Registered lazily on the main app by gpuhours.cli (LAZY_COMMANDS): plotly is imported only when
the command runs, never by `gpuhours --help`."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuhours.cli_common import LedgerOpt

HtmlOpt = Annotated[str, typer.Option(
    "--html", metavar="OUT.html", help="Where to write the page (one file: plotly embedded, no "
                                       "network needed to view it); its folder must exist. An "
                                       "existing file is replaced only if it is an earlier "
                                       "report page.")]
CalibrateOpt = Annotated[bool, typer.Option(
    "--calibrate/--no-calibrate",
    help="Use the measured efficiency of a matching benchmark in the ledger, when there is one "
         "(as `gpuhours plan` does).")]


def register(app: typer.Typer) -> None:
    """Add the `report` command to `app`."""
    from gpuhours.cli_common import user_errors

    @app.command()
    @user_errors
    def report(
        plan_file: Annotated[str, typer.Argument(metavar="PLAN.yaml",
                                                 help="The project's plan file.")],
        html: HtmlOpt,
        ledger: LedgerOpt = None,
        calibrate: CalibrateOpt = True,
    ) -> None:
        """The budget as a page: phases as stacked bars (GPU hours, dollars), cost by provider,
        memory per phase, plan against actual for tracked runs, the ledger's bench sweeps, the
        expectation checks and the assumptions and sources. The same numbers as `gpuhours plan
        --json`."""
        from gpuhours.api import open_ledger
        from gpuhours.errors import InputError
        from gpuhours.plan.budget import evaluate
        from gpuhours.plan.load import load_plan

        try:
            import plotly  # noqa: F401

            from gpuhours.report.html import write_report
        except ModuleNotFoundError:
            raise InputError("--html", "the page embeds plotly.js, and plotly is not installed.",
                             "Install it with: pip install 'gpuhours[report]'.") from None
        from gpuhours.files import refuse_foreign_overwrite, require_parent_folder
        from gpuhours.report.html import is_report_page

        require_parent_folder(html, "--html")
        refuse_foreign_overwrite(html, "--html", is_report_page, "a report page")
        opened = open_ledger(ledger)
        budget = evaluate(load_plan(plan_file), ledger=opened if calibrate else None)
        note = ("no ledger" if opened is None else f"ledger {opened.path}")
        written = write_report(budget, html, opened, note)
        typer.echo(f"Wrote {written['path']}: {len(written['figures'])} chart(s), "
                   f"{written['sweeps']} bench sweep(s), {written['bytes'] / 1e6:.1f} MB.")
