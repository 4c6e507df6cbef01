"""`gpuhours report PLAN --html`: the page holds the numbers of `plan --json` for the same plan,
renders in a real browser (Debian's chromium, headless, started here), and shows names that
hold markup or script as text. The browser tests skip when chromium is absent (CI installs it).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.report.html import DATA_ELEMENT_ID, script_json
from gpuhours.track.ledger import Ledger
from gpuhours.track.runs import StepRecord, add_steps, start_run

ROOT = Path(__file__).resolve().parents[1]
PIXELIS = ROOT / "examples" / "pixelis.yaml"
QWEN = ROOT / "examples" / "qwen2-0.5b-experiments.yaml"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (CI installs it: "
                             "apt-get install chromium); the page is not rendered")
runner = CliRunner()


@pytest.fixture(autouse=True)
def _no_default_ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No ledger unless a test passes one: a developer's .gpuhours/ledger.sqlite would
    calibrate the plan."""
    monkeypatch.setenv("GPUHOURS_LEDGER", str(tmp_path / "absent.sqlite"))


def _plan_json(plan: Path, *extra: str) -> dict:
    r = runner.invoke(app, ["plan", str(plan), "--json", "--no-doc", *extra])
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def _report(plan: Path, out: Path, *extra: str) -> str:
    r = runner.invoke(app, ["report", str(plan), "--html", str(out), *extra])
    assert r.exit_code == 0, r.output
    assert f"Wrote {out}" in r.stdout
    return out.read_text()


def _embedded(page: str) -> dict:
    m = re.search(rf'<script type="application/json" id="{DATA_ELEMENT_ID}">(.*?)</script>',
                  page, re.S)
    assert m is not None
    return json.loads(m.group(1))


def _trace_values(fig: dict) -> dict[str, list[float]]:
    return {t["name"]: t["customdata"] for t in fig["data"]}


def test_the_page_holds_the_numbers_of_plan_json(tmp_path: Path) -> None:
    expected = _plan_json(PIXELIS)
    data = _embedded(_report(PIXELIS, tmp_path / "p.html"))
    # the very budget `plan --json` prints, float for float
    assert data["budget"] == expected
    figs = data["figures"]
    seeds = expected["seeds"]
    # GPU hours: each phase's per-run hours x its runs, then the contingency; they sum to the
    # total of the budget formula
    hours = _trace_values(figs["chart-gpu-hours"])
    for p in expected["phases"]:
        runs = seeds if p["runs"] == "per_seed" else 1
        assert hours[p["name"]] == [p["gpu_hours_per_run"]["value"] * runs]
    assert hours["contingency"] == [expected["contingency_gpu_hours"]["value"]]
    assert sum(v[0] for v in hours.values()) == pytest.approx(
        expected["total_gpu_hours"]["value"], rel=1e-12)
    # cost by price row: the JSON's on-demand and spot totals, in its order
    cost = {t["name"]: t["customdata"] for t in figs["chart-providers"]["data"]}
    assert cost["on-demand"] == [c["on_demand_usd"] for c in expected["costs"]
                                 if c["on_demand_usd"] is not None]
    assert cost["spot"] == [c["spot_usd"] for c in expected["costs"] if c["spot_usd"] is not None]
    # dollars by phase: priced GPU types only, and they add up to the cheapest on-demand line of
    # that type (pixelis' development phase runs on an rtx-4090, which has no price)
    usd = _trace_values(figs["chart-usd"])
    a100 = min(c["on_demand_usd"] for c in expected["costs"] if c["gpu"] == "a100-40gb"
               and c["on_demand_usd"] is not None)
    assert "development" not in usd
    assert sum(v[0] for v in usd.values()) == pytest.approx(a100, rel=1e-12)
    # memory: every part of every training phase, in bytes, equal to its details
    mem = _trace_values(figs["chart-memory"])
    sft = next(p for p in expected["phases"] if p["name"] == "sft")["details"]["memory"]
    assert mem["sft"][0] == sft["weights_bytes"]["value"]
    assert sft["total_bytes"]["value"] in mem["sft"]
    # the hover text keeps each number's basis
    hover = " ".join(h for t in figs["chart-gpu-hours"]["data"] for h in t["hovertext"])
    assert "formula: analytic estimate" in hover and "assumed: the plan" in hover


def test_tracked_runs_and_a_sweep_in_the_ledger(tmp_path: Path) -> None:
    """A tracked run of pixelis' sft phase: 100 steps x 36 s on 8 GPUs = 8.0 GPU h spent; of
    938 planned steps -> 75.04 GPU h projected. A sweep of micro-batches 1, 2, 4 (the older
    measurement of 2 superseded); a lone measurement of another setup is no sweep."""
    path = tmp_path / "ledger.sqlite"
    with Ledger.open(path) as book:
        run = start_run(book, project="Pixelis", phase="sft", name="a", device_kind="cuda",
                        device_name="NVIDIA A100-SXM4-40GB", planned_steps=938,
                        config={"num_gpus": 8, "method": "lora"})
        add_steps(book, run, [StepRecord(step=i, started_s=i, wall_s=36.0) for i in range(100)])
        env = {"hostname": "h"}

        def bench(batch: int, tokens_per_s: float, peak: int, seq: int = 128) -> None:
            setup = {"method": "full", "precision": "fp32", "micro_batch": batch,
                     "seq_len": seq, "checkpointing": False}
            book.add_measurement(kind="bench", status="ok", device_kind="cpu",
                                 device_key="cpu-test", device_name="test CPU", model="tiny",
                                 setup=setup, model_config={"hidden_size": 64},
                                 environment=env, results={"tokens_per_s": tokens_per_s,
                                                           "peak_memory_bytes": peak})

        bench(2, 1.0, 1)   # older: superseded by the next measurement of batch 2
        bench(1, 100.0, 1_000_000_000)
        bench(2, 180.0, 1_500_000_000)
        bench(4, 250.0, 2_500_000_000)
        bench(8, 300.0, 4_000_000_000, seq=256)  # another setup, alone
    expected = _plan_json(PIXELIS, "--ledger", str(path))
    data = _embedded(_report(PIXELIS, tmp_path / "p.html", "--ledger", str(path)))
    assert data["budget"] == expected
    actual = next(p for p in expected["phases"] if p["name"] == "sft")["actual"]
    assert actual["gpu_hours_spent"]["value"] == pytest.approx(8.0)
    assert actual["gpu_hours_spent"]["basis"] == "measured"
    assert actual["projected_gpu_hours"]["value"] == pytest.approx(75.04)
    budget = next(p for p in expected["phases"] if p["name"] == "sft")["gpu_hours_per_run"][
        "value"]
    traces = {t["name"]: t for t in data["figures"]["chart-burn-down"]["data"]}
    assert traces["sft: plan"]["x"] == [0, 938] and traces["sft: plan"]["y"] == [budget, 0.0]
    assert traces["sft: spent"]["x"] == [0, 100]
    assert traces["sft: spent"]["y"] == [budget, budget - actual["gpu_hours_spent"]["value"]]
    assert traces["sft: projected"]["y"][1] == budget - actual["projected_gpu_hours"]["value"]
    [sweep] = data["sweeps"]
    assert [p["micro_batch"] for p in sweep["points"]] == [1, 2, 4]
    tokens = data["figures"]["chart-sweep-tokens"]["data"][0]
    assert tokens["x"] == [1, 2, 4] and tokens["customdata"] == [100.0, 180.0, 250.0]
    memory = data["figures"]["chart-sweep-memory"]["data"][0]
    assert memory["customdata"] == [1_000_000_000, 1_500_000_000, 2_500_000_000]
    assert "measured: ledger #" in tokens["hovertext"][0]


def test_script_json_cannot_close_its_element() -> None:
    text = script_json({"name": "</script><script>alert(1)</script>", "x": "a & b <!--"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text)["name"] == "</script><script>alert(1)</script>"


def test_without_plotly_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "plotly", None)  # import plotly -> ModuleNotFoundError
    r = runner.invoke(app, ["report", str(QWEN), "--html", str(tmp_path / "q.html")])
    assert r.exit_code == 2
    assert "pip install 'gpuhours[report]'" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "q.html").exists()


def test_help_does_not_import_plotly() -> None:
    script = textwrap.dedent("""
        import sys
        from typer.testing import CliRunner
        from gpuhours.cli import app
        for args in (["--help"], ["report", "--help"]):
            r = CliRunner().invoke(app, args)
            assert r.exit_code == 0, r.output
        print(sorted(m for m in ("plotly", "matplotlib") if m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "[]"


# --- in a real browser -------------------------------------------------------------------------

def _chromium(*args: str) -> str:
    assert CHROMIUM is not None
    # offline: every request but file:// goes to a closed local port, so a page that needed
    # the network (a CDN's plotly.js) would not draw its charts
    proc = subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                           "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
                           "--virtual-time-budget=10000", *args], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@needs_chromium
def test_the_page_renders_in_chromium(tmp_path: Path) -> None:
    out = tmp_path / "pixelis.html"
    page = _report(PIXELIS, out)
    figs = _embedded(page)["figures"]
    # nothing is loaded from elsewhere: plotly.js is inside the page
    assert not re.search(r"<(script|link|img|iframe)\b[^>]*\b(src|href)=", page)
    dom = _chromium("--dump-dom", out.as_uri())
    # plotly drew every figure (its SVG root per chart) and the page's script saw them all
    assert 'class="main-svg"' in dom
    assert len(re.findall(r'<div class="chart[^"]*" id="chart-', dom)) == len(figs)
    assert f'data-rendered="{len(figs)}"' in dom and "data-render-error=" not in dom
    # the rendered legend of the GPU-hours chart names the JSON's phases, in its order
    expected = _plan_json(PIXELIS)
    chart = dom[dom.index('id="chart-gpu-hours"'):dom.index('id="chart-usd"')]
    legend = re.findall(r'class="legendtext"[^>]*>([^<]*)<', chart)
    assert legend == [p["name"] for p in expected["phases"]] + ["contingency"]
    # one bar drawn per phase and the contingency
    assert len(re.findall(r'<g class="point">', chart)) == len(expected["phases"]) + 1
    # the screenshot the README shows
    shot = tmp_path / "report.png"
    _chromium("--window-size=1100,1500", "--hide-scrollbars", f"--screenshot={shot}",
              out.as_uri())
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (ROOT / "docs" / "img").mkdir(exist_ok=True)
    shutil.copyfile(shot, ROOT / "docs" / "img" / "report.png")


@needs_chromium
def test_names_with_markup_show_as_text(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(textwrap.dedent("""
        project: "<script>alert(1)</script>"
        hardware: {gpu: a100-80gb}
        phases:
          - {name: "<b>x</b>", kind: fixed, runs: once, gpu_hours: 10}
          - {name: "<img src=x onerror=alert(2)>", kind: fixed, runs: once, gpu_hours: 5}
    """))
    out = tmp_path / "page.html"
    page = _report(plan, out)
    assert "<script>alert(1)</script>" not in page and "<b>x</b>" not in page
    assert "<img src=x" not in page
    dom = _chromium("--dump-dom", out.as_uri())
    assert "data-rendered=" in dom and "data-render-error=" not in dom
    # shown as text: in the title, the heading, the tables and the plotly legend ...
    assert "<title>Compute budget: &lt;script&gt;alert(1)&lt;/script&gt;</title>" in dom
    assert "<h1>Compute budget: &lt;script&gt;alert(1)&lt;/script&gt;</h1>" in dom
    assert "<td>&lt;b&gt;x&lt;/b&gt;</td>" in dom
    legend = re.findall(r'class="legendtext"[^>]*>([^<]*)<', dom)
    assert "&lt;b&gt;x&lt;/b&gt;" in legend and "&lt;img src=x onerror=alert(2)&gt;" in legend
    # ... and never as an element: no bold tspan from plotly, no injected img or script
    # (outside the page's own scripts: plotly.js's source names tags and styles)
    shown = re.sub(r"<script\b[^>]*>.*?</script>", "", dom, flags=re.S)
    assert dom.count("</script>") - shown.count("</script>") == 3  # plotly, data, drawing
    assert "<b>x</b>" not in shown and "font-weight:bold" not in shown
    assert "<img" not in shown and "<script" not in shown


# --- the living document's charts -------------------------------------------------------------

def test_the_living_document_gets_charts_beside_its_tables(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUHOURS_CHARTS")
    plan = tmp_path / "pixelis.yaml"
    shutil.copyfile(PIXELIS, plan)
    doc = tmp_path / "COMPUTE_BUDGET.md"
    first = runner.invoke(app, ["plan", str(plan)])
    assert first.exit_code == 0, first.output
    text = doc.read_text()
    names = {"gpu-hours": "COMPUTE_BUDGET.gpu-hours.png", "cost": "COMPUTE_BUDGET.cost.png",
             "memory": "COMPUTE_BUDGET.memory.png"}
    for name in names.values():
        assert f"]({name})" in text  # referenced by a path relative to the document
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # beside their tables: the phases' chart after the phase table, the cost's after prices
    assert text.index("| phase | kind |") < text.index(names["gpu-hours"]) < text.index("### ")
    assert text.index("## Cost") < text.index(names["cost"]) < text.index("## Warnings")
    assert "pip install" not in text
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files
    # nothing changed: the document and its history stay as they were; a deleted chart returns
    (tmp_path / names["cost"]).unlink()
    second = runner.invoke(app, ["plan", str(plan)])
    assert second.exit_code == 0 and "is current (version 1.0.0)" in second.stdout
    assert doc.read_text() == text
    assert (tmp_path / names["cost"]).exists()


def test_without_matplotlib_the_document_says_how_to_get_charts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUHOURS_CHARTS")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # find_spec -> None: not installed
    plan = tmp_path / "q.yaml"
    shutil.copyfile(QWEN, plan)
    r = runner.invoke(app, ["plan", str(plan)])
    assert r.exit_code == 0, r.output
    text = (tmp_path / "COMPUTE_BUDGET.md").read_text()
    assert "- Charts beside the tables need matplotlib: `pip install 'gpuhours[report]'`." in text
    assert ".png" not in text and not list(tmp_path.glob("*.png"))


def test_the_page_replaces_only_an_earlier_page(tmp_path: Path) -> None:
    plan = tmp_path / "q.yaml"
    plan.write_bytes(QWEN.read_bytes())
    before = plan.read_bytes()
    r = runner.invoke(app, ["report", str(plan), "--html", str(plan), "--no-calibrate"])
    assert r.exit_code == 2 and "is not a report page written by gpuhours" in r.output
    assert plan.read_bytes() == before  # the plan is left as it was
    other = tmp_path / "index.html"
    other.write_text("<!DOCTYPE html><html><title>mine</title></html>")
    r = runner.invoke(app, ["report", str(plan), "--html", str(other), "--no-calibrate"])
    assert r.exit_code == 2 and other.read_text().endswith("mine</title></html>")
    out = tmp_path / "r.html"
    _report(plan, out, "--no-calibrate")
    _report(plan, out, "--no-calibrate")  # its own earlier page is replaced
