"""Output that fits (issue 18): at 80 columns, the width of a pipe, no table cuts a name a user
must type or a number; long bases become numbered notes under the table; `--wide` prints the
full tables; `--version`; a bench sweep shows its progress on a piped stderr and prints what
finished when interrupted."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from typer.testing import CliRunner, Result

from gpuhours import catalog
from gpuhours.cli import app
from gpuhours.report.tables import INLINE_CELLS, Col, Notes, print_table

ELLIPSIS = "…"


def run(*args: str, columns: int = 80) -> Result:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns), "NO_COLOR": "1"})


def assert_fits(result: Result, columns: int = 80) -> list[str]:
    """The command ran, no line is longer than `columns`, and nothing was cut with '…'."""
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    too_long = [line for line in lines if len(line) > columns]
    assert not too_long, "\n".join(too_long)
    assert ELLIPSIS not in result.stdout, result.stdout
    return lines


def table_rows(lines: list[str], first: str) -> list[str]:
    """The lines that start with `first` (a row's first cell) after the left frame, if any."""
    return [line for line in lines if line.lstrip("│ ").startswith(first)]


# Catalogs ---------------------------------------------------------------------------------------

def test_catalog_models_names_and_numbers_whole_at_80_columns() -> None:
    lines = assert_fits(run("catalog", "models"))
    data = {r["name"]: r for r in json.loads(run("catalog", "models", "--json").stdout)}
    for name, row in data.items():
        rows = table_rows(lines, name + " ")
        assert rows, f"{name} is not printed whole at the start of a row"
        # the parameter counts, whole, on the model's first row
        assert f"{row['computed_params']['value'] / 1e9:.3f} B" in rows[0]
        assert f"{row['published_params']['value'] / 1e9:.3f} B" in rows[0]
        assert str(row["vocab_size"]) in rows[0]
        # the table's other columns are in the JSON too
        assert f"{row['num_heads']}/{row['num_kv_heads']}" in rows[0]
        if row["num_experts"]:
            assert f"{row['experts_per_token']}/{row['num_experts']}" in rows[0]
    for name, row in data.items():  # the Hugging Face ids, whole, in the second table
        if "/" in row["hf_id"] and " " not in row["hf_id"]:
            assert any(name in line and row["hf_id"] in line for line in lines), row["hf_id"]


def test_catalog_gpus_names_and_aliases_whole_at_80_columns() -> None:
    lines = assert_fits(run("catalog", "gpus"))
    for g in catalog.gpus():
        rows = table_rows(lines, g.name + " ")
        assert rows, f"{g.name} is not printed whole at the start of a row"
        assert f"{g.memory_bw_gb_per_s:g}" in rows[0]
        if g.dense_tflops.bf16:
            assert f"{g.dense_tflops.bf16:g}" in rows[0]
    text = " ".join(lines)
    for g in catalog.gpus():  # every alias a user may type, whole (they hold no line break)
        for alias in g.aliases[:3]:
            if " " not in alias:
                assert alias in text, alias


def test_catalog_prices_numbers_whole_at_80_columns() -> None:
    lines = assert_fits(run("catalog", "prices", "--gpu", "h100-sxm"))
    rows = json.loads(run("catalog", "prices", "--gpu", "h100-sxm", "--json").stdout)
    for r in rows:
        if " " not in r["instance"]:
            assert any(r["instance"] in line for line in lines), r["instance"]


def test_catalog_models_piped_without_columns_is_80_wide() -> None:
    """The real case: stdout a pipe, no COLUMNS, no terminal anywhere (Rich's default 80)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.run([sys.executable, "-c", "from gpuhours.cli import main; main()",
                           "catalog", "models"], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines()) <= 80
    assert ELLIPSIS not in proc.stdout
    for m in catalog.models():
        assert re.search(rf"^\s*{re.escape(m.name)}\s", proc.stdout, re.M), m.name


# Estimate, fit, generation, plan ---------------------------------------------------------------

ESTIMATE = ("estimate", "--model", "llama-2-7b", "--gpu", "a100-80gb", "--gpus", "8", "--zero",
            "3", "--tokens", "2e12", "--no-calibrate")


def test_estimate_at_80_columns_puts_bases_in_numbered_notes() -> None:
    lines = assert_fits(run(*ESTIMATE))
    e = json.loads(run(*ESTIMATE, "--json").stdout)
    # each memory row on one line, its size whole, its basis a note marker
    weights = table_rows(lines, "weights ")
    assert len(weights) == 1 and re.search(r"\d+\.\d\d GiB\s+\[1\]", weights[0]), weights
    assert table_rows(lines, "[1] ")[0].strip().startswith("[1] formula: estimate/memory.py")
    # the verdict stays in the table, the rest of that basis goes to a note
    assert re.search(r"^total\s+\S+ GiB\s+fits in \S+ GiB \[\d+\]", "\n".join(lines), re.M)
    # every note that is referred to is printed once
    refs = set(re.findall(r"\[(\d+)\]", "\n".join(lines)))
    printed = {m.group(1) for line in lines if (m := re.match(r"\s*\[(\d+)\] ", line))}
    assert refs == printed
    # the run's numbers, whole
    gpu_hours = e["totals"]["gpu_hours"]["value"]
    assert re.search(rf"^GPU hours\s+{re.escape(f'{gpu_hours:,.1f}')}\s", "\n".join(lines), re.M)


def test_estimate_tables_keep_one_line_a_row_at_80_columns() -> None:
    narrow = assert_fits(run(*ESTIMATE))
    wide = run(*ESTIMATE, columns=250).stdout.splitlines()
    # bases in the table folded each row into two to five lines at 80 columns; as notes they
    # do not: the memory table has as many lines as at 250 columns
    def memory_rows(lines: list[str]) -> list[str]:
        start = next(i for i, line in enumerate(lines) if line.startswith("Memory per GPU"))
        end = next(i for i, line in enumerate(lines) if i > start and
                   re.match(r"[│ ]*total ", line))
        return [line for line in lines[start + 1:end] if re.search(r"\d GiB", line)]
    assert len(memory_rows(narrow)) == len(memory_rows(wide)) >= 8


def test_estimate_wide_prints_bases_in_the_table() -> None:
    result = run(*ESTIMATE, "--wide")
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if line.startswith("│ weights ")]
    assert len(rows) == 1 and "formula: estimate/memory.py" in rows[0]
    assert len(rows[0]) > 80  # as long as the table needs
    assert ELLIPSIS not in result.stdout
    assert not re.search(r"^\s*\[1\] ", result.stdout, re.M)  # no notes


def test_estimate_wide_enough_terminal_keeps_bases_in_the_table() -> None:
    result = run(*ESTIMATE, columns=250)
    assert "│ weights " in result.stdout and "[1]" not in result.stdout


def test_fit_at_80_columns() -> None:
    lines = assert_fits(run("fit", "--model", "qwen2-0.5b", "--gpu", "rtx-4090"))
    fit = json.loads(run("fit", "--model", "qwen2-0.5b", "--gpu", "rtx-4090", "--json").stdout)
    text = "\n".join(lines)
    assert f"{fit['fastest']['tokens_per_s_per_gpu']['value']:,.0f}" in text
    assert "rtx-4090" in text


def test_generation_at_80_columns() -> None:
    args = ("generation", "--model", "qwen2.5-7b", "--gpu", "h100-sxm", "--sequences", "1e6")
    lines = assert_fits(run(*args))
    text = "\n".join(lines)
    assert "prefill" in text and "decode" in text and "[1] formula:" in text


#: a plan of its own (the examples change with the estimator): long phase names, a fine-tuning
#: phase with a formula basis, stated phases, several seeds, catalog prices
PLAN = """\
project: Width check
hardware:
  gpu: a100-80gb
  gpus_per_node: 8
seeds: 3
defaults:
  model: qwen2.5-0.5b
  method: lora
  checkpointing: true
phases:
  - name: supervised-fine-tuning-of-the-policy
    kind: finetune
    examples: 20000
    tokens_per_example: 900
    seq_len: 1024
    micro_batch: 4
    epochs: 2
    gpus: 8
  - name: svd-analysis-once-per-architecture
    kind: one_time
    runs: once
    gpu_hours: 4
  - name: ablations
    kind: fixed
    runs: single_seed
    gpu_hours: 25
"""


@pytest.fixture()
def plan_file(tmp_path: Path) -> Path:
    target = tmp_path / "width.yaml"
    target.write_text(PLAN)
    return target


def test_plan_at_80_columns_two_lines_per_phase(plan_file: Path) -> None:
    lines = assert_fits(run("plan", str(plan_file), "--no-doc"))
    budget = json.loads(run("plan", str(plan_file), "--no-doc", "--json").stdout)
    wide = run("plan", str(plan_file), "--no-doc", "--wide").stdout.splitlines()
    for phase in budget["phases"]:
        rows = table_rows(lines, phase["name"] + " ")
        assert rows, f"phase {phase['name']} is not printed whole"
        assert f"{phase['gpu_hours_per_run']['value']:,.1f}" in rows[0]
        assert re.search(r"\[\d+\]", rows[0]), "its basis is a note"
        assert any(line.startswith(f"│ {phase['name']} ") for line in wide)
    # near its wide length: the phases table takes at most two lines a phase (the kind and
    # its runs stacked), where the bases in the table took up to eight
    start = next(i for i, line in enumerate(lines) if line.startswith("Phases"))
    end = next(i for i, line in enumerate(lines) if line.strip().startswith("[1] "))
    assert end - start <= 4 + 2 * len(budget["phases"])


def test_plan_with_names_that_allow_it_keeps_one_line_a_phase_at_80_columns() -> None:
    """Pixelis: the kind and the runs keep their own columns, the bottleneck joins its basis
    in the note: one line a phase, as in the wide table."""
    pixelis = str(Path(__file__).resolve().parents[1] / "examples" / "pixelis.yaml")
    lines = assert_fits(run("plan", pixelis, "--no-doc"))
    budget = json.loads(run("plan", pixelis, "--no-doc", "--json").stdout)
    start = next(i for i, line in enumerate(lines) if line.startswith("────"))
    end = next(i for i, line in enumerate(lines) if line.strip().startswith("[1] "))
    rows = lines[start + 1:end]
    assert [row.split()[0] for row in rows] == [p["name"] for p in budget["phases"]]
    sft = next(row for row in rows if row.startswith("sft "))
    assert sft.split()[1:4] == ["finetune", "per", "seed"]
    assert any(line.strip().startswith("[3] matmul compute; formula:") for line in lines)


# The tables' module ----------------------------------------------------------------------------

def test_notes_share_numbers_and_keep_short_texts() -> None:
    notes = Notes()
    long = "formula: " + "x" * 60
    assert notes.ref(long) == notes.ref(long) == "[1]"
    assert notes.ref("as stated") == "as stated"  # short: stays in the table
    assert len("as stated") <= INLINE_CELLS
    assert notes.ref(f"[green]fits[/green] in 80 GiB; {long}") == "[green]fits[/green] in 80 GiB [1]"
    assert notes.ref(f"[dim]{long}; {long}[/dim]") == "[2]"  # a lead that is not whole markup


def test_a_name_longer_than_the_console_allows_is_folded_never_cut() -> None:
    console = Console(width=40, record=True, emoji=False, color_system=None)
    name = "a-very-long-model-name-that-must-stay-whole"
    cols = (Col("model", "name"), Col("params", "number", "right"), Col("basis", "basis"))
    print_table(console, cols, [[name, "123,456,789", "formula: " + "y" * 50]], notes=Notes())
    text = console.export_text()
    assert ELLIPSIS not in text
    assert "123,456,789" in text  # the number whole, on one line
    # the name, too long for any column here, folded over lines but whole
    assert name in "".join(line.split("  ")[0].strip() for line in text.splitlines())


# --version ---------------------------------------------------------------------------------------

def test_version_prints_the_package_version() -> None:
    result = run("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"gpuhours {version('gpuhours')}"


def test_version_is_cheap() -> None:
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom gpuhours.cli import app\n"
            "r = CliRunner().invoke(app, ['--version'])\n"
            "heavy = [m for m in ('torch', 'transformers', 'gpuhours.estimate.estimator') "
            "if m in sys.modules]\nprint(r.exit_code, heavy)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.stdout.strip() == "0 []", proc.stdout + proc.stderr


# A bench sweep: progress on a piped stderr, and Ctrl-C -----------------------------------------

TINY = ["--set", "num_hidden_layers=1", "--set", "hidden_size=64", "--set",
        "intermediate_size=128", "--set", "num_attention_heads=4", "--set",
        "num_key_value_heads=2", "--set", "vocab_size=256"]
SWEEP = ["bench", "-m", "qwen2-0.5b", *TINY, "--seq", "16", "--precision", "fp32",
         "--warmup", "1", "--min-steps", "2", "--max-steps", "3", "--no-ledger",
         "--peak-tflops", "1", "--device", "cpu", "--sweep", "batch=1,2,4"]


def _interrupt_at(monkeypatch: pytest.MonkeyPatch, call: int) -> list[int]:
    """Make the `call`-th configuration (from 1) raise KeyboardInterrupt, as Ctrl-C would."""
    from gpuhours.bench import session

    real = session.bench_setup
    calls: list[int] = []

    def bench_setup(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == call:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(session, "bench_setup", bench_setup)
    return calls


def test_sweep_logs_progress_on_a_piped_stderr_and_prints_what_finished_when_interrupted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    calls = _interrupt_at(monkeypatch, 3)
    result = run(*SWEEP)
    assert result.exit_code == 130, result.output
    assert len(calls) == 3
    err = result.stderr
    # one line per configuration started and finished (stderr is not a terminal here)
    assert "[1/3] started qwen2-0.5b full fp32 b1 s16" in err
    assert re.search(r"\[1/3\] finished qwen2-0.5b full fp32 b1 s16: ok, [\d,]+ tokens/s", err)
    assert "[2/3] finished" in err and "[3/3] started" in err and "[3/3] finished" not in err
    assert "interrupted: 2 of 3 configuration(s) finished" in err
    # the table of the two that finished
    out = result.stdout
    assert "Sweep of" in out
    rows = [int(n) for n in re.findall(r"^(\d+)  ", out, re.M)]  # the "#" column
    assert rows == [1, 2], out
    # nothing cut at 80 columns: the p10-p90 range and the headers are whole
    assert "…" not in out and re.search(r"^ +[\d,]+-[\d,]+ ", out, re.M)
    assert all(len(line) <= 80 for line in out.splitlines())


def test_sweep_interrupted_before_anything_finished_exits_130(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    _interrupt_at(monkeypatch, 1)
    result = run(*SWEEP, "--json")
    assert result.exit_code == 130, result.output
    assert json.loads(result.stdout) == []
    assert "interrupted: 0 of 3 configuration(s) finished." in result.stderr


# The layout's arithmetic width against Rich's own measurement ----------------------------------
_CELL = st.lists(st.sampled_from(["a", "gpu", "7", " ", "\n", "漢", "[bold]x[/bold]", "\\[1]",
                                  "rtx-4090", "0.5 GiB"]), max_size=6).map("".join)


@settings(max_examples=60, deadline=None)
@given(kinds=st.lists(st.sampled_from(["name", "number", "text", "basis"]), min_size=1,
                      max_size=5),
       cells=st.lists(st.lists(_CELL, min_size=5, max_size=5), max_size=4),
       compact=st.booleans(), stack=st.booleans(), wrap=st.booleans())
def test_the_layout_width_is_the_width_rich_measures(kinds: list[str], cells: list[list[str]],
                                                      compact: bool, stack: bool,
                                                      wrap: bool) -> None:
    """The tables decide whether a table fits (and footnote its bases) by arithmetic over the
    cells' widths instead of asking Rich to measure the whole table each time; Rich's
    measurement of the same table, boxed or compact, is the independent count."""
    from gpuhours.report.tables import _layout, _table, natural_width

    cols = [Col(f"h{i} {kind}", kind, stack=stack and i == 1)  # type: ignore[arg-type]
            for i, kind in enumerate(kinds)]
    rows = [row[:len(cols)] for row in cells]
    console = Console(width=80, file=io.StringIO())
    layout = _layout(cols, rows, console, Notes() if compact else None, wrap_headers=wrap)
    assert layout.natural_width == natural_width(console, _table(layout, None, None))
