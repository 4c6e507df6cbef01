"""Fault injection: user strings that are Rich markup or terminal control sequences are printed
as they are, and do nothing (gpuhours issue 12, fourth item): `[/x]` crashed `plan`, `storage
report/prune` and `ledger show`; `[link=...]` became a hyperlink; bracketed text disappeared; an
escape sequence recoloured or rewrote the terminal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner, Result

from gpuhours.cli import app
from gpuhours.track.ledger import Ledger
from test_storage_helpers import make_checkpoint

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CLOSE = "[/x]"
LINK = "[link=http://x]y[/link]"
RED = "\x1b[31m"
OSC8 = "\x1b]8;;http://evil\x07"
#: as printed: the escape character shown as text, the rest literally
RED_SHOWN = "\\x1b[31m"
NASTY = f"a {CLOSE} b {LINK} c {RED}d [bold]e[/bold] {OSC8}f \r\x9b"
#: a name a plan accepts (at most 80 characters)
SHORT = f"{CLOSE} {LINK} {RED}d [bold]e[/bold]"
#: in a file name: no slash
LINK_P = "[link=x]y[/link]"
PATHY = f"{CLOSE} {LINK_P} {RED}d [bold]e[/bold] \x9b"
runner = CliRunner()


def invoke(*args: str) -> Result:
    return runner.invoke(app, list(args), env={"COLUMNS": "400", "NO_COLOR": "1"})


def assert_printed_intact(r: Result) -> None:
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in r.output
    out = r.output
    assert CLOSE in out and LINK in out and "[bold]e[/bold]" in out, out
    assert RED_SHOWN in out and "\\x1b]8;;http://evil\\x07f" in out and "\\x0d\\x9b" in out, out
    for raw in ("\x1b", "\r", "\x9b", "\x07"):
        assert raw not in out, f"{raw!r} reached the terminal"


def test_helpers() -> None:
    from gpuhours.report.text import esc, plain

    assert plain(NASTY) == ("a [/x] b [link=http://x]y[/link] c \\x1b[31md [bold]e[/bold] "
                            "\\x1b]8;;http://evil\\x07f \\x0d\\x9b")
    assert plain("tab\tand\nnewline") == "tab\tand\nnewline"
    assert esc("[/x]") == "\\[/x]"
    assert esc(3) == "3"


def test_plan_with_markup_in_project_and_phase_names(tmp_path: Path) -> None:
    data = yaml.safe_load((EXAMPLES / "h100-phase1a.yaml").read_text())
    data["project"] = f"project {SHORT}"
    # a phase name goes into table cells: a control character (the escape) is refused there,
    # at its line, and the markup is shown as text
    data["phases"][0]["name"] = f"phase {SHORT}"
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(data, allow_unicode=True))
    r = invoke("plan", str(plan), "--no-doc")
    assert r.exit_code == 2 and "a name must be one line of text" in r.output
    assert "\x1b" not in r.output and "Traceback" not in r.output
    data["phases"][0]["name"] = f"phase {SHORT.replace(chr(27), '')}"
    plan.write_text(yaml.safe_dump(data, allow_unicode=True))
    r = invoke("plan", str(plan), "--no-doc")
    assert r.exit_code == 0, r.output
    shown = f"{CLOSE} {LINK} {RED_SHOWN}d [bold]e[/bold]"
    assert f"project {shown}" in r.output, r.output
    assert f"phase {CLOSE} {LINK} [31md [bold]e[/bold]" in r.output, r.output
    assert "\x1b" not in r.output and "Traceback" not in r.output


def test_plan_written_document_in_a_folder_with_markup(tmp_path: Path) -> None:
    folder = tmp_path / f"dir {PATHY}"
    folder.mkdir(parents=True)
    plan = folder / "plan.yaml"
    plan.write_text((EXAMPLES / "h100-phase1a.yaml").read_text())
    r = invoke("plan", str(plan))
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output and "\x1b" not in r.output
    assert f"dir {CLOSE} {LINK_P} {RED_SHOWN}d [bold]e[/bold] \\x9b" in r.output, r.output


def test_storage_report_and_prune_with_markup_in_directory_names(tmp_path: Path) -> None:
    run = tmp_path / f"run {PATHY}"
    for step in (100, 200):
        make_checkpoint(run, step)
    for args in (["storage", "report", str(tmp_path), "--settle-s", "0"],
                 ["storage", "prune", str(tmp_path), "--keep-last", "1", "--settle-s", "0"],
                 ["storage", "prune", str(tmp_path), "--keep-last", "1", "--settle-s", "0",
                  "--yes"]):
        r = invoke(*args)
        assert r.exit_code == 0, r.output
        assert f"run {CLOSE} {LINK_P} {RED_SHOWN}d [bold]e[/bold]" in r.output, r.output
        assert "\x1b" not in r.output and "Traceback" not in r.output
    assert [p.name for p in run.iterdir()] == ["checkpoint-200"]


def test_ledger_show_and_list_with_markup_in_ledger_strings(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    with Ledger.open(path) as book:
        book.add_measurement(
            kind="bench", status="ok", device_kind="cpu", device_key=f"key {CLOSE}",
            device_name=f"device {NASTY}", model=f"model {NASTY}",
            setup={"method": "full", "note": NASTY}, model_config={},
            environment={"hostname": f"host {CLOSE}", "torch": NASTY},
            results={"tokens_per_s": 1.0, "timing_basis": NASTY, "error": NASTY})
    r = invoke("ledger", "show", "1", "--ledger", str(path))
    assert r.exit_code == 0, r.output
    assert_printed_intact(r)
    r = invoke("ledger", "list", "--ledger", str(path))
    assert r.exit_code == 0, r.output
    assert f"key {CLOSE}" in r.output and "Traceback" not in r.output


def test_doctor_text_shows_control_characters(tmp_path: Path) -> None:
    from test_doctor import TRAINER_STATE

    folder = tmp_path / f"logs {RED}{CLOSE}"
    folder.mkdir(parents=True)
    state = folder / "trainer_state.json"
    state.write_text(json.dumps(TRAINER_STATE))
    r = invoke("doctor", "--hf-log", str(state))
    assert r.exit_code == 0, r.output
    assert f"logs {RED_SHOWN}{CLOSE}" in r.output and "\x1b" not in r.output


@pytest.mark.parametrize("command", [["plan"], ["doctor", "--hf-log"]])
def test_error_messages_show_markup_and_control_characters(tmp_path: Path,
                                                           command: list[str]) -> None:
    missing = tmp_path / f"missing {PATHY}.yaml"
    r = invoke(*command, str(missing))
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert f"missing {CLOSE} {LINK_P} {RED_SHOWN}d [bold]e[/bold]" in r.output, r.output
    assert "\x1b" not in r.output
