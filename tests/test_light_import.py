"""The analytic path is light (DESIGN.md principle 4): importing the CLI and running estimate,
fit and generation never imports torch, transformers or peft.

Checked in a fresh interpreter, because the test session itself may have imported them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

HEAVY = ("torch", "transformers", "peft")

SCRIPT = textwrap.dedent(
    """
    import json
    import sys

    from typer.testing import CliRunner

    import gpuhours.cli

    heavy = {heavy!r}
    after_import = sorted(m for m in heavy if m in sys.modules)
    runner = CliRunner()
    runs = {{}}
    for name, args in {{
        "estimate": ["estimate", "--model", "qwen2-0.5b", "--gpu", "rtx-4090", "--method",
                     "lora", "--batch", "8", "--seq", "128", "--tokens", "1e9", "--json"],
        "estimate-terminal": ["estimate", "--model", "llama-2-7b", "--gpu", "a100-80gb",
                              "--gpus", "8", "--zero", "3", "--tokens", "2e12"],
        "fit": ["fit", "--model", "qwen2-0.5b", "--gpu", "rtx-4090", "--json"],
        "generation": ["generation", "--model", "qwen2.5-7b", "--gpu", "h100-sxm", "--json"],
    }}.items():
        r = runner.invoke(gpuhours.cli.app, args)
        runs[name] = {{"exit_code": r.exit_code, "exception": repr(r.exception),
                       "stdout": r.stdout}}
    print(json.dumps({{
        "after_import": after_import,
        "after_commands": sorted(m for m in heavy if m in sys.modules),
        "estimator_loaded": "gpuhours.estimate.estimator" in sys.modules,
        "runs": runs,
    }}))
    """
).format(heavy=HEAVY)


def _run_fresh() -> dict:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_cli_and_analytic_commands_do_not_import_torch() -> None:
    report = _run_fresh()
    for name, r in report["runs"].items():
        assert r["exit_code"] == 0, f"{name}: {r['exception']}\n{r['stdout']}"
    # the commands really ran the estimator in that interpreter ...
    assert report["estimator_loaded"]
    estimate = json.loads(report["runs"]["estimate"]["stdout"])
    assert estimate["memory"]["total_bytes"]["value"] > 0
    assert json.loads(report["runs"]["fit"]["stdout"])["largest_micro_batch"] >= 1
    # ... without the heavy libraries, neither at import nor on the command path
    assert report["after_import"] == []
    assert report["after_commands"] == []


def test_the_installed_command_builds_only_the_command_asked() -> None:
    """`gpuhours estimate ...` (the console script, main()) gives typer one command to turn into
    click parameters, not all of them; help, --version and a mistyped name get the whole app,
    and the one-command app answers exactly as the whole one does."""
    from typer.testing import CliRunner

    from gpuhours.cli import _app_for, app

    def names(typer_app) -> list[str]:  # type: ignore[no-untyped-def]
        return [info.name or info.callback.__name__ for info in typer_app.registered_commands]

    narrow = _app_for(["gpuhours", "estimate", "--model", "gpt2"])
    assert names(narrow) == ["estimate"] and narrow.registered_groups == []
    assert [g.name for g in _app_for(["gpuhours", "catalog", "gpus"]).registered_groups] == \
        ["catalog"]
    for argv in (["gpuhours"], ["gpuhours", "--help"], ["gpuhours", "--version"],
                 ["gpuhours", "estimat"], ["gpuhours", "bench"]):
        assert _app_for(argv) is app
    args = ["estimate", "--model", "qwen2-0.5b", "--gpu", "rtx-4090", "--batch", "8", "--seq",
            "128", "--tokens", "1e9", "--json"]
    whole, alone = CliRunner().invoke(app, args), CliRunner().invoke(narrow, args)
    assert whole.exit_code == alone.exit_code == 0
    assert json.loads(alone.stdout) == json.loads(whole.stdout)
    bad = CliRunner().invoke(narrow, ["estimate", "--batch", "0", "--model", "gpt2"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
