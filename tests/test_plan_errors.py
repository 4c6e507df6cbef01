"""Malformed plans: every one an error naming the file, the line and the field; exit code 2."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import DOES_NOT_FIT_EXIT_CODE

runner = CliRunner()
EXAMPLE = (Path(__file__).resolve().parents[1] / "examples" / "pixelis.yaml").read_text()
BASE = yaml.safe_load(EXAMPLE)

BAD_VALUES = [-1, -0.5, 0, "many", None, [], {}, True, float("nan"), 1e400]


def _paths(node, prefix=()):
    """Every (path, value) in the plan."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield (*prefix, k), v
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield (*prefix, i), v
            yield from _paths(v, (*prefix, i))


LEAVES = [p for p, v in _paths(BASE) if not isinstance(v, dict | list)]
MAPPINGS = [p for p, v in _paths(BASE) if isinstance(v, dict)] + [()]


def _set(data, path, value):
    node = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value


def _delete(data, path):
    node = data
    for part in path[:-1]:
        node = node[part]
    del node[path[-1]]


@st.composite
def malformed_plans(draw):
    import copy

    data = copy.deepcopy(BASE)
    kind = draw(st.sampled_from(["value", "unknown_key", "missing", "name", "syntax"]))
    if kind == "value":
        path = draw(st.sampled_from([p for p in LEAVES if p[-1] not in ("note", "name",
                                                                        "project")]))
        _set(data, path, draw(st.sampled_from(BAD_VALUES)))
    elif kind == "unknown_key":
        path = draw(st.sampled_from(MAPPINGS))
        node = data
        for part in path:
            node = node[part]
        node[draw(st.sampled_from(["epochz", "gpu_count", "lr", "batchsize"]))] = 1
    elif kind == "missing":
        required = [("project",), ("hardware",), ("hardware", "gpu"), ("phases",),
                    ("phases", 2, "kind"), ("phases", 2, "examples"), ("phases", 4, "steps"),
                    ("phases", 5, "duration_hours"), ("phases", 0, "gpu_hours"),
                    ("phases", 7, "benchmarks")]
        _delete(data, draw(st.sampled_from(required)))
    elif kind == "name":
        field = draw(st.sampled_from([("hardware", "gpu"), ("defaults", "model"),
                                      ("phases", 3, "model")]))
        _set(data, field, draw(st.sampled_from(["a100-81gb", "h1000", "llama-7", "qwen9"])))
    text = yaml.safe_dump(data, sort_keys=False)
    if kind == "syntax":
        lines = text.splitlines()
        i = draw(st.integers(min_value=1, max_value=len(lines) - 1))
        lines.insert(i, draw(st.sampled_from(["  - [unclosed", "key: : value", "\tbad: tab",
                                              "phases: {"])))
        text = "\n".join(lines)
    return kind, text


@settings(max_examples=260, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=malformed_plans())
def test_malformed_plans_fail_cleanly(tmp_path_factory, case):
    kind, text = case
    path = tmp_path_factory.mktemp("p") / "plan.yaml"
    path.write_text(text)
    result = runner.invoke(app, ["plan", str(path), "--no-doc"],
                           env={"COLUMNS": "200", "NO_COLOR": "1"})
    if result.exit_code == 0:
        # some mutations are still valid plans (a bool where a number is allowed, a zero
        # overhead...): then nothing may be wrong with the output either
        return
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    if result.exit_code == DOES_NOT_FIT_EXIT_CODE and "GiB per GPU" in result.stderr:
        # a mutation that is still a valid plan (a setting given None is "not set": checkpointing
        # off, say) may not fit: "does not fit", named by file and line, is its answer
        assert str(path) in result.stderr and re.search(r"line \d+", result.stderr)
        return
    assert result.exit_code == 2, result.output
    message = result.stderr
    assert str(path) in message, message
    if kind != "name":
        assert re.search(r"line \d+", message), message


def test_a_setting_the_estimate_refuses_names_the_plan_line_phase_and_key(tmp_path):
    # the setup validates, but the estimate refuses it for this GPU (an A100 has neither fp8
    # tensor cores nor the CUDA multicast Transformer Engine's userbuffers need); the line is
    # the key's own (11), not the phase's (5)
    for key, value, key_line in (("precision", "fp8-mixed", 11), ("tp_comm_overlap", "true", 11)):
        path = tmp_path / f"{key}.yaml"
        path.write_text("project: t\nhardware:\n  gpu: a100-80gb\nphases:\n"
                        "  - name: sft\n    kind: finetune\n    model: llama-2-7b\n"
                        f"    tokens: 100000000\n    gpus: 8\n    tp: 2\n    {key}: {value}\n")
        result = runner.invoke(app, ["plan", str(path), "--no-doc"],
                               env={"COLUMNS": "200", "NO_COLOR": "1"})
        assert result.exit_code == 2, result.output
        assert (f"{path}, line {key_line}, phase 'sft', field {key!r}"
                in " ".join(result.stderr.split())), result.stderr


def test_an_unquoted_transformers_release_is_told_to_be_quoted(tmp_path):
    # YAML reads `rollout_transformers_version: 4.46` as the float 4.46 (and 4.20 as 4.2, a
    # different release): the error says to quote it, not pydantic's "a valid string"
    plan = ("project: t\nhardware:\n  gpu: h100-sxm\nphases:\n  - name: grpo\n    kind: rl\n"
            "    model: qwen2.5-0.5b\n    steps: 10\n    prompts_per_step: 8\n"
            "    generations_per_prompt: 4\n    prompt_tokens: 128\n    response_tokens: 128\n"
            "    engine: hf-generate\n    rollout_transformers_version: {v}\n")
    path = tmp_path / "plan.yaml"
    path.write_text(plan.format(v="4.20"))
    result = runner.invoke(app, ["plan", str(path), "--no-doc"],
                           env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 2, result.output
    message = " ".join(result.stderr.split())
    assert "line 14" in message and "rollout_transformers_version" in message, message
    assert "quote it" in message and "4.2" in message and "valid string" not in message
    path.write_text(plan.format(v="'4.46'"))
    ok = runner.invoke(app, ["plan", str(path), "--no-doc"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert ok.exit_code == 0, ok.output


def test_an_rl_length_beyond_the_context_names_the_longer_length_and_its_line(tmp_path):
    """A reviewer's find: a 130,000-token prompt on a 128K model was blamed on
    max_response_tokens at the phase's line. Both lengths make the sum: the longer is named
    first, at its own line."""
    text = (Path(__file__).resolve().parent.parent / "examples" / "pixelis.yaml").read_text()
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("prompt_tokens:"))
    lines[at] = lines[at].replace(lines[at].split(":")[1].split("#")[0].strip(), "130000", 1)
    path = tmp_path / "long.yaml"
    path.write_text("\n".join(lines) + "\n")
    result = runner.invoke(app, ["plan", str(path), "--no-doc"],
                           env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 2, result.output
    message = " ".join(result.stderr.split())
    assert (f"line {at + 1}, phase 'rft', field 'prompt_tokens', field 'max_response_tokens'"
            in message), message
    assert "130,000-token prompt" in message and "128,000-token context" in message


def test_an_unknown_node_type_is_named_before_a_clash_with_it(tmp_path):
    # a mistyped node beside gpus_per_node: the unknown name is the error, not "sets
    # gpus_per_node; give one or the other" about a node that does not exist
    plan = tmp_path / "n.yaml"
    plan.write_text("project: n\nhardware:\n  gpu: h100-sxm\n  node: dgx-hundred\n"
                    "  gpus_per_node: 4\n  nodes: 2\nphases:\n  - name: pt\n    kind: pretrain\n"
                    "    model: llama-3-8b\n    tokens: 1e9\n")
    r = runner.invoke(app, ["plan", str(plan), "--no-doc"])
    assert r.exit_code == 2 and "unknown node type 'dgx-hundred'" in r.output
    plan.write_text(plan.read_text().replace("dgx-hundred", "dgx-h100"))
    r = runner.invoke(app, ["plan", str(plan), "--no-doc"])
    assert r.exit_code == 2 and "node dgx-h100 sets gpus_per_node" in r.output
