"""The track record `estimate` prints beside a pretraining total (estimate/track_record.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuhours.api import estimate_training
from gpuhours.catalog import gpu
from gpuhours.estimate.track_record import applies, load, summarise
from gpuhours.setup import Hardware, Training

DOC = Path(__file__).resolve().parent.parent / "docs" / "validation.md"


def test_summarise_by_hand():
    # published / predicted for five runs; the table's test is |predicted/published - 1| <= 25%:
    # 1/1.0 - 1 = 0, 1/1.1 - 1 = -9.1%, 1/1.5 - 1 = -33%, 1/0.7 - 1 = +43%, 1/2.0 - 1 = -50%
    r = summarise([1.0, 1.1, 1.5, 0.7, 2.0], 0.25, "q", "m", "t", "2026-11-25")
    assert (r.runs, r.within, r.slower_than_predicted) == (5, 2, 3)
    assert r.median_ratio == pytest.approx(1.1)
    # inclusive deciles of 0.7, 1.0, 1.1, 1.5, 2.0: the 10th at position 0.4 (0.7 + 0.4 x 0.3),
    # the 90th at 3.6 (1.5 + 0.6 x 0.5)
    assert r.p10_ratio == pytest.approx(0.82)
    assert r.p90_ratio == pytest.approx(1.8)
    with pytest.raises(ValueError):
        summarise([1.0], 0.25, "q", "m", "t", "d")


def _plain_table_ratios() -> tuple[list[float], tuple[int, int]]:
    """Published / predicted of each counted row of docs/validation.md's plain-question table,
    and its headline (within, runs), read from the document's text."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index("### Pretraining GPU hours, the plain question")
    section = text[start:text.index("#### What remains off", start)]
    within, runs = map(int, re.search(r"\*\*(\d+) of (\d+) within 25%", section).groups())
    ratios = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != 7 or not re.fullmatch(r"[\d,]+", cells[2]) or "not counted" in cells[4]:
            continue
        ratios.append(float(cells[2].replace(",", "")) / float(cells[3].replace(",", "")))
    return ratios, (within, runs)


def test_the_shipped_record_is_the_documents_table():
    """What estimate prints is docs/validation.md's table as generated with it (scripts/
    validate.py writes both): counts, median and spread recomputed from the table's text."""
    ratios, (within, runs) = _plain_table_ratios()
    r = load()
    assert (r.runs, r.within) == (runs, within) == (len(ratios), r.within)
    assert r.slower_than_predicted == sum(x > 1 for x in ratios)
    _same_spread(r, ratios)


def _same_spread(r, ratios: list[float]) -> None:
    """The record's median and deciles against the document's rows (its figures are rounded:
    0.1 GPU h or 0.1 s, so the ratios agree to 0.2%): the median by hand, the 10th and 90th
    percentiles by linear interpolation between order statistics (the inclusive method: the
    p-th at position p (n - 1))."""
    s = sorted(ratios)
    n = len(s)
    mid = (s[n // 2 - 1] + s[n // 2]) / 2 if n % 2 == 0 else s[n // 2]
    assert r.median_ratio == pytest.approx(mid, rel=2e-3)
    for p, got in ((0.1, r.p10_ratio), (0.9, r.p90_ratio)):
        pos = p * (n - 1)
        lo = int(pos)
        expected = s[lo] + (pos - lo) * (s[min(lo + 1, n - 1)] - s[lo])
        assert got == pytest.approx(expected, rel=2e-3), p


def test_which_questions_carry_the_record():
    assert applies("full", 16, True)
    assert not applies("full", 8, True)       # fewer GPUs than any run of the table
    assert not applies("lora", 64, True)      # adapters: not what the table asked
    assert not applies("full", 64, False)     # no whole run

    hw = Hardware(gpu=gpu("a100-80gb"), num_gpus=64)
    full = estimate_training(Training(model="qwen2.5-0.5b", micro_batch=4, seq_len=2048), hw,
                             tokens=1e10)
    assert full.totals is not None and full.totals.track_record == load()
    lora = estimate_training(Training(model="qwen2.5-0.5b", method="lora", micro_batch=4,
                                      seq_len=2048), hw, tokens=1e10)
    assert lora.totals is not None and lora.totals.track_record is None


def test_a_plans_pretraining_phase_carries_it(tmp_path):
    from gpuhours.plan.budget import evaluate
    from gpuhours.plan.load import load_plan

    plan = ("project: record\nhardware:\n  gpu: a100-80gb\n  nodes: {nodes}\nseeds: 1\n"
            "phases:\n  - name: pretrain\n    kind: pretrain\n    runs: once\n"
            "    model: qwen2.5-0.5b\n    tokens: 1.0e+10\n    seq_len: 2048\n")
    path = tmp_path / "plan.yaml"
    path.write_text(plan.format(nodes=2))  # 16 GPUs
    [phase] = evaluate(load_plan(path)).phases
    assert phase.details["track_record"] == load().model_dump(mode="json")
    assert load().text() in phase.checks
    path.write_text(plan.format(nodes=1))  # 8 GPUs: fewer than any run of the table
    [phase] = evaluate(load_plan(path)).phases
    assert "track_record" not in phase.details


def _rl_table_ratios() -> list[float]:
    """Measured / predicted step of each held-out row of docs/rl.md's step table (the rows its
    'Tuned (...)' line names left out), read from the document's text."""
    text = (DOC.parent / "rl.md").read_text(encoding="utf-8")
    start = text.index("| row | framework | model | GPUs | placement | measured step |")
    block = text[start:text.index("\nNot expressed, with why:", start)]
    tuned_line = next(line for line in block.splitlines() if "Tuned (" in line)
    tuned = {int(n) for n in re.findall(r"row (\d+) [+-]\d+%", tuned_line)}
    ratios = []
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) < 8 or not cells[0].isdigit() or int(cells[0]) in tuned:
            continue
        if cells[6] == "-":
            continue
        measured, predicted = (float(c.removesuffix(" s").replace(",", "")) for c in cells[5:7])
        ratios.append(measured / predicted)
    return ratios


def test_the_rl_record_is_docs_rl_held_out_rows():
    ratios = _rl_table_ratios()
    r = load("rl")
    assert r.runs == len(ratios) >= 20
    assert r.within == sum(abs(1 / x - 1) <= 0.25 for x in ratios)
    assert r.slower_than_predicted == sum(x > 1 for x in ratios)
    _same_spread(r, ratios)


def test_every_rl_phase_carries_the_rl_record():
    from gpuhours.plan.budget import evaluate
    from gpuhours.plan.load import load_plan

    [phase] = [p for p in evaluate(load_plan(Path(__file__).resolve().parent.parent
                                              / "examples" / "pixelis.yaml")).phases
               if p.kind == "rl"]
    assert phase.details["track_record"] == load("rl").model_dump(mode="json")
    assert load("rl").text() in phase.checks
    with pytest.raises(ValueError):
        load("generation")


def test_a_rate_counts_slower_below_one():
    # throughput published / predicted: 0.8 is a run slower than predicted (|1/0.8 - 1| = 25%:
    # within), 1.5 faster (|1/1.5 - 1| = 33%: not)
    r = summarise([0.8, 1.0, 1.5], 0.25, "q", "throughput", "t", "d", higher_is_faster=True)
    assert (r.within, r.slower_than_predicted) == (2, 1)
    assert summarise([0.8, 1.0, 1.5], 0.25, "q", "step time", "t", "d").slower_than_predicted == 1


def test_generation_prints_its_engines_record():
    from gpuhours.estimate.track_record import for_engine

    assert for_engine("vllm-v0") == for_engine("vllm") == load("generation-vllm")
    assert for_engine("no-such-engine") is None
    from typer.testing import CliRunner

    from gpuhours.cli import app

    args = ["generation", "--model", "qwen2.5-0.5b", "--gpu", "h100-sxm", "--engine", "sglang",
            "--prompt-tokens", "128", "--output-tokens", "64"]
    out = CliRunner().invoke(app, [*args, "--json"])
    assert out.exit_code == 0, out.output
    import json

    assert json.loads(out.stdout)["track_record"] == load("generation-sglang").model_dump(
        mode="json")
    text = CliRunner().invoke(app, args, env={"COLUMNS": "80"}).stdout
    assert "published rows of engine sglang" in " ".join(text.split())
