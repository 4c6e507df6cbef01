"""Plans that crashed or hung the loader (issue 12): each is now a clear error naming the file,
the line and the field, exit code 2, in well under a second.

Before: YAML nested 30,000 deep crashed the interpreter (a segfault in PyYAML's C composer); a
2 MB project name hung the terminal; 20,000 phases took minutes; a key given twice was accepted
(the last one won); a price of 1e300 made a budget of `$inf`; an alias bomb expanded to a billion
values.
"""

from __future__ import annotations

import copy
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import InputError
from gpuhours.plan import load
from gpuhours.plan.budget import evaluate
from gpuhours.plan.load import FIELD_MAX, MAX_NUMBER, load_plan, parse_plan
from gpuhours.yamlio import compose

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PIXELIS = (EXAMPLES / "pixelis.yaml").read_text()


def line_of(text: str, start: str) -> int:
    """The 1-based line of the first line of `text` that starts with `start`."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith(start))


def plan_error(text: str, tmp_path: Path) -> str:
    """The CLI's message for a plan, checking exit code 2 and no traceback."""
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    result = CliRunner().invoke(app, ["plan", str(path), "--no-doc"],
                                env={"COLUMNS": "300", "NO_COLOR": "1"})
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert str(path) in result.stderr
    assert len(result.stderr) < 1000  # never the megabytes of the input echoed back
    return " ".join(result.stderr.split())


def test_nesting_30000_deep_is_an_error_not_a_crash(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("project: x\nhardware: " + "[" * 30_000 + "]" * 30_000 + "\n")
    # a child process: before, this killed the interpreter (SIGSEGV)
    code = ("import sys\nfrom gpuhours.plan.load import load_plan\n"
            "try:\n    load_plan(sys.argv[1])\nexcept Exception as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{path}, line 2: nested more than 64 levels deep" in done.stdout


@pytest.mark.parametrize("text", [
    "a: " + "[" * 100 + "]" * 100,
    "a: " + "{b: " * 100 + "}" * 100,
    "a:\n" + "".join(" " * i + "- \n" for i in range(1, 100)),
    "- " * 100 + "x",
])
def test_every_kind_of_deep_nesting_is_refused(text):
    with pytest.raises(InputError, match=r"f\.yaml, line \d+: nested more than 64 levels"):
        compose(text, "f.yaml")


def test_a_2_mb_project_name_is_refused_briefly(tmp_path):
    message = plan_error(PIXELIS.replace("project: Pixelis", "project: " + "x" * 2_000_000),
                         tmp_path)
    assert f"line {line_of(PIXELIS, 'project:')}, project: 'xxxx" in message
    assert "(2,000,000 characters) is longer than the 200 characters it may have" in message


def test_20000_phases_are_refused(tmp_path):
    text = "project: many\nhardware: {gpu: a100-80gb}\nphases:\n" + "".join(
        f"  - {{name: p{i}, kind: fixed, gpu_hours: 1}}\n" for i in range(20_000))
    message = plan_error(text, tmp_path)
    assert "line 4, phases: 20,000 phases; a plan may have 1,000" in message


@pytest.mark.parametrize("text, first, second, key", [
    (PIXELIS.replace("seeds: 3", "seeds: 3\nseeds: 1"), line_of(PIXELIS, "seeds:"),
     line_of(PIXELIS, "seeds:") + 1, "seeds"),
    (PIXELIS.replace("  gpus_per_node: 8", "  gpus_per_node: 8\n  gpus_per_node: 2"),
     line_of(PIXELIS, "  gpus_per_node:"), line_of(PIXELIS, "  gpus_per_node:") + 1,
     "gpus_per_node"),
    ("project: x\nhardware: {gpu: a100-80gb, gpu: h100-sxm}\nphases: []\n", 2, 2, "gpu"),
])
def test_a_key_given_twice_is_refused_naming_both_lines(tmp_path, text, first, second, key):
    message = plan_error(text, tmp_path)
    assert (f"line {second}: key '{key}' is given twice in one mapping (lines {first} and "
            f"{second})") in message


def test_a_merge_key_may_be_overridden():
    _, data = compose("base: &b {x: 1, y: 2}\nthis:\n  <<: *b\n  y: 3\n", "f.yaml")
    assert data["this"] == {"x": 1, "y": 3}


@pytest.mark.parametrize("field, value, expected", [
    ("usd_per_gpu_hour", "1e300", "beyond the largest plausible value, 1000 (US$ per GPU-hour"),
    ("usd_per_gpu_hour", "1.0e300", "beyond the largest plausible value, 1000"),
    ("usd_per_gpu_hour", "5000", "beyond the largest plausible value, 1000"),
    ("electricity_usd_per_kwh", ".inf", "is not a finite number"),
])
def test_absurd_prices_are_refused(tmp_path, field, value, expected):
    text = PIXELIS.replace("  nodes: 1\n", f"  nodes: 1\n  {field}: {value}\n")
    message = plan_error(text, tmp_path)
    line = line_of(PIXELIS, "  nodes: 1") + 1
    assert f"line {line}, hardware.{field}: " in message and expected in message


def test_tokens_that_would_overflow_are_refused(tmp_path):
    text = (EXAMPLES / "h100-phase1a.yaml").read_text()
    start = text.index("    examples:")
    line = text[:start].count("\n") + 1
    text = text[:start] + "    examples: 1.0e200\n" + text[text.index("\n", start) + 1:]
    message = plan_error(text, tmp_path)
    assert f"line {line}, phases[0] (phase1a).examples: 1e+200 is beyond the largest " \
           f"plausible value, {MAX_NUMBER:g}" in message


def test_an_alias_bomb_is_refused():
    levels = [f"l0: &l0 [{', '.join(['lol'] * 10)}]"]
    levels += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 9)]
    with pytest.raises(InputError, match="expands to more than 20,000,000 values"):
        compose("\n".join(levels), "f.yaml")


def _numbers(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _numbers(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _numbers(v, (*path, i))
    elif isinstance(node, int | float) and not isinstance(node, bool):
        yield path, node


def _finite(obj) -> bool:
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, dict):
        return all(_finite(v) for v in obj.values())
    if isinstance(obj, list):
        return all(_finite(v) for v in obj)
    return True


@pytest.mark.parametrize("example", ["pixelis.yaml", "h100-phase1a.yaml"])
def test_every_number_at_its_limit_gives_a_finite_budget_or_a_clear_error(example):
    """Each number of the plan set to the largest value the limits let through: the budget is
    finite, or the error is an InputError (never `inf` dollars, a crash or a hang)."""
    base = yaml.safe_load((EXAMPLES / example).read_text())
    for path, value in _numbers(base):
        data = copy.deepcopy(base)
        node = data
        for part in path[:-1]:
            node = node[part]
        bound = FIELD_MAX.get(path[-1], (MAX_NUMBER, ""))[0]
        node[path[-1]] = int(bound) if isinstance(value, int) else float(bound)
        try:
            budget = evaluate(parse_plan(yaml.safe_dump(data), "p.yaml"))
        except InputError:
            continue
        assert _finite(budget.model_dump()), path


def test_a_plan_that_is_not_a_regular_file_is_refused(tmp_path):
    fifo = tmp_path / "plan.yaml"
    import os

    os.mkfifo(fifo)
    with pytest.raises(InputError, match="FIFO"):
        load_plan(fifo)


def test_the_limits_are_far_above_the_examples():
    for name in ("pixelis.yaml", "h100-phase1a.yaml", "qwen2-0.5b-experiments.yaml"):
        plan = load_plan(EXAMPLES / name).plan
        assert len(plan.phases) * 10 <= load.MAX_PHASES
        assert len(plan.project) * 5 <= load.MAX_NAME_CHARS


def test_a_duplicate_phase_or_experiment_is_named_at_its_own_line(tmp_path):
    text = PIXELIS.replace("  - name: sft-qwen3-8b", "  - name: sft", 1)
    message = plan_error(text, tmp_path)
    second = [i for i, ln in enumerate(text.splitlines(), 1) if ln == "  - name: sft"][1]
    assert f"line {second}, phases[" in message and "phase names must be unique: 'sft'" in message
    qwen = (EXAMPLES / "qwen2-0.5b-experiments.yaml").read_text()
    grid = qwen.replace("{name: baseline-02,", "{name: baseline-01,", 1)
    message = plan_error(grid, tmp_path)
    second = line_of(grid, "      - {name: baseline-01") + 1
    assert f"line {second}," in message and "experiment names must be unique" in message


@pytest.mark.parametrize("name", ["a\\nb", "tab\\there"])
def test_a_name_over_two_lines_is_refused(tmp_path, name):
    text = PIXELIS.replace("  - name: rft", f'  - name: "{name}"', 1)
    assert "a name must be one line of text" in plan_error(text, tmp_path)


@pytest.mark.parametrize("old, new", [("  - name: rft", "  - name: [a, b]"),
                                      ("  - name: sft\n", "  - name: {a: 1}\n")])
def test_a_name_that_is_not_text_is_the_schemas_error(tmp_path, old, new):
    text = PIXELIS.replace(old, new, 1)
    assert "name" in plan_error(text, tmp_path)  # exit 2, no traceback (plan_error checks)
