"""Terminal rendering of benchmarks, sweeps, data-loader rates and ledger rows (Rich).
Every measured figure is printed with its basis; nothing here computes a figure."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from gpuhours.bench.data import LoaderRate
from gpuhours.bench.runner import BenchResult
from gpuhours.bench.session import Outcome
from gpuhours.bench.sweep import SweepSummary
from gpuhours.report.tables import Col, Notes, print_table
from gpuhours.report.text import esc
from gpuhours.report.units import pct, seconds, si
from gpuhours.torchkit.module_time import ModuleTimes
from gpuhours.track.ledger import Measurement, model_label


def size(n_bytes: float | None) -> str:
    """Bytes in MiB below a GiB, else GiB (both 1024-based, and said so)."""
    if n_bytes is None:
        return "-"
    if abs(n_bytes) < 2**30:
        return f"{n_bytes / 2**20:,.1f} MiB"
    return f"{n_bytes / 2**30:,.2f} GiB"


def _tps_range(r: BenchResult) -> str:
    if not r.tokens_per_s_range:
        return ""
    lo, hi = r.tokens_per_s_range
    return f" (p10-p90 of steps: {lo:,.0f}-{hi:,.0f})"


def render_result(o: Outcome, console: Console, ledger_path: str | None) -> None:
    r = o.result
    console.print(f"[bold]{esc(o.setup.label())}[/bold]")
    if r is None:
        console.print(f"  [red]does not fit[/red]: {esc(o.error)}")
        if o.ledger_id is not None:
            console.print(f"  recorded as ledger #{o.ledger_id} ({esc(ledger_path)})")
        return
    render_bench(r, console)
    if o.ledger_id is not None:
        console.print(f"  ledger        #{o.ledger_id} in {esc(ledger_path)}")


def render_bench(r: BenchResult, console: Console) -> None:
    t = r.timing
    p = console.print
    p(f"  device        {esc(r.device_name)}, {esc(r.device_kind)} (key {esc(r.device_key)})",
      highlight=False)
    stable = "[green]stable[/green]" if t.stable else "[yellow]not stable[/yellow]"
    p(f"  step time     median {seconds(t.median_s)}, p10-p90 {seconds(t.p10_s)}-"
      f"{seconds(t.p90_s)}, CV {t.cv:.1%} over {t.n_steps} steps: {stable} ({esc(t.stop_reason)})")
    parts = ", ".join(f"{k.removesuffix('_s')} {seconds(v)}" for k, v in r.phases_median_s.items())
    p(f"  breakdown     {parts} (medians per step)")
    compiled = "; includes torch.compile" if r.setup.get("compiled") else ""
    p(f"  first step    {seconds(r.first_step_s)} (untimed warm-up{compiled})")
    if r.tokens_per_s is not None:
        p(f"  throughput    [bold]{r.tokens_per_s:,.0f} tokens/s[/bold]{_tps_range(r)}, "
          f"{r.tokens_per_step:,} tokens per step")
    elif r.samples_per_s is not None:
        p(f"  throughput    {r.samples_per_s:,.2f} samples/s")
    if r.flops is not None:
        model = si(r.model_flops_per_step, "FLOP") if r.model_flops_per_step else "unknown"
        p(f"  FLOPs/step    {model} model, {si(r.flops.total_flops, 'FLOP')} hardware "
          f"(with recomputation)")
    if r.operators_per_step:
        p(f"  operators     {r.operators_per_step:,} device operators per step (counted); at "
          f"most {t.median_s / r.operators_per_step * 1e6:.1f} us of host time each")
    if r.peak is not None and (r.mfu is not None or r.hfu is not None):
        achieved = (r.model_flops_per_step or r.flops.total_flops if r.flops else 0) / t.median_s
        mfu = pct(r.mfu) if r.mfu is not None else "-"
        hfu = pct(r.hfu) if r.hfu is not None else "-"
        p(f"  utilisation   {si(achieved, 'FLOP/s')} achieved; MFU {mfu}, HFU {hfu} of "
          f"{si(r.peak.flops_per_s, 'FLOP/s')} peak ({esc(r.peak.basis)})")
        p(f"                [dim]peak: {esc(r.peak.source)}[/dim]")
    if r.peak_memory_bytes is not None:
        p(f"  peak memory   [bold]{size(r.peak_memory_bytes)}[/bold] of tensors")
    if r.memory is not None:
        m = r.memory
        p(f"                weights {size(m.weights_bytes)}, gradients {size(m.gradients_bytes)}, "
          f"optimizer state {size(m.optimizer_state_bytes)}, activations and temporaries "
          f"{size(m.activations_and_temporaries_bytes)}"
          + (f", other {size(m.other_preexisting_bytes)}" if m.other_preexisting_bytes else ""))
    if r.allocator:
        p(f"                allocator reserved {size(r.allocator['max_reserved_bytes'])}, "
          f"{r.allocator['alloc_retries']} allocation retries")
    if r.profile_trace:
        p(f"  profile       Chrome trace written to {esc(r.profile_trace)} (open in "
          "https://ui.perfetto.dev or chrome://tracing)")
    p(f"  [dim]timing: {esc(r.timing_basis)}[/dim]")
    p(f"  [dim]memory: {esc(r.peak_memory_basis)}[/dim]")
    if r.flops is not None:
        p(f"  [dim]FLOPs: {esc(r.flops.basis)}[/dim]")
    if r.module_times is not None:
        render_module_times(r.module_times, t.median_s, console)
    for w in r.warnings:
        p(f"  [yellow]note[/yellow] {esc(w)}")


def render_module_times(m: ModuleTimes, plain_median_s: float, console: Console) -> None:
    """Seed 003's table, measured: component, forward, backward, time per step, share."""
    table = Table(title="Where a step's time goes, per top-level module (measured)",
                  title_justify="left")
    table.add_column("component", no_wrap=True)
    for col in ("forward", "backward", "time", "%"):
        table.add_column(col, justify="right")
    for row in m.rows:
        table.add_row(esc(row.component),
                      seconds(row.forward_s) if row.forward_s is not None else "-",
                      seconds(row.backward_s) if row.backward_s is not None else "-",
                      seconds(row.total_s), f"{row.share:.0%}")
    table.add_row("[bold]total[/bold]", "", "", f"[bold]{seconds(m.total_s)}[/bold]", "100%")
    console.print(table)
    console.print(f"  [dim]{esc(m.basis)}. (loss, glue): the loss and the model's own forward "
                  f"outside its children. Steps with the hooks took {seconds(m.hooked_step_median_s)}"
                  f" (median), without {seconds(plain_median_s)}: each boundary's "
                  "synchronisation and the hooks themselves cost that difference.[/dim]")


#: the sweep table: a configuration's label is what the user reads back; numbers never cut
_SWEEP_COLS = (Col("#", "number", "right"), Col("configuration", "text"), Col("status", "name"),
               Col("tokens/s", "number", "right"),
               Col("p10-p90 tokens/s", "number", "right", stack=True),
               Col("step median", "number", "right"), Col("CV", "number", "right"),
               Col("MFU", "number", "right", stack=True), Col("peak memory", "number", "right"),
               Col("ledger", "number", "right"))


def render_sweep(outcomes: list[Outcome], summary: SweepSummary, console: Console) -> None:
    """The configurations of a sweep, one row each, whole at 80 columns (report/tables.py)."""
    models = sorted({model_label(o.setup.model, o.setup.training.config_overrides)
                     for o in outcomes})
    rows = []
    for i, o in enumerate(outcomes, 1):
        r = o.result
        ledger = f"#{o.ledger_id}" if o.ledger_id else "-"
        if r is None:
            rows.append([str(i), esc(o.setup.label(with_model=False)),
                         "[red]does not fit[/red]", *("-" * 6), ledger])
            continue
        lo, hi = r.tokens_per_s_range or (0.0, 0.0)
        rows.append([str(i), esc(o.setup.label(with_model=False)), "ok",
                     f"{r.tokens_per_s:,.0f}" if r.tokens_per_s else "-",
                     f"{lo:,.0f}-{hi:,.0f}", seconds(r.timing.median_s), f"{r.timing.cv:.1%}",
                     pct(r.mfu) if r.mfu is not None else "-", size(r.peak_memory_bytes),
                     ledger])
    print_table(console, _SWEEP_COLS, rows, notes=Notes(),
                title=f"Sweep of {esc('; '.join(models))} (measured on this machine; tokens/s "
                      "from the median step time)")
    f = summary.fastest
    if f is not None and f.result is not None and f.result.tokens_per_s is not None:
        console.print(f"[bold]fastest that fits:[/bold] {esc(f.setup.label())} at "
                      f"{f.result.tokens_per_s:,.0f} tokens/s (measured, median step)")
    for note in summary.notes:
        console.print(f"  [yellow]note[/yellow] {esc(note)}")


def render_loader(rates: list[LoaderRate], lines: list[str], console: Console) -> None:
    table = Table(title="Data loader alone (measured)")
    for col in ("num_workers", "samples/s", "batch wait median", "batch wait p90", "start-up",
                "batches"):
        table.add_column(col)
    for r in rates:
        table.add_row(str(r.num_workers), f"{r.samples_per_s:,.1f}",
                      seconds(r.batch_wait_median_s), seconds(r.batch_wait_p90_s),
                      seconds(r.startup_s), str(r.batches))
    console.print(table)
    for line in lines:
        console.print(f"  {esc(line)}")


def _tagged(tag: str, value: Any) -> str:
    """`tag` + value, or "" where the ledger row has no value (a module's inputs have no
    sequence length; an old row may lack a key)."""
    return "" if value is None or value == "" else f"{tag}{value}"


def ledger_setup_label(kind: str, setup: dict[str, Any]) -> str:
    """One short line saying what a ledger row measured: the workload, method or backend,
    precision, batch (b), sequence or prompt+output tokens (s, p); parts the row lacks are left
    out, never printed as "None"."""
    s = setup
    if kind == "generate":
        tokens = (f"p{s.get('prompt_tokens')}+{s.get('output_tokens')}"
                  if s.get("prompt_tokens") is not None else "")
        parts = ["generate", s.get("precision"), _tagged("b", s.get("batch")), tokens]
    elif kind == "grpo":
        prompts = (f"{s.get('prompts')}x{s.get('generations')}"
                   if s.get("prompts") is not None else "")
        parts = ["grpo", s.get("method"), prompts, _tagged("r", s.get("response_tokens"))]
    elif kind == "inference":
        parts = ["inference", s.get("backend") or s.get("method"), s.get("precision"),
                 _tagged("b", s.get("micro_batch")), _tagged("s", s.get("seq_len"))]
    else:
        parts = [s.get("method"), s.get("precision"), _tagged("b", s.get("micro_batch")),
                 _tagged("s", s.get("seq_len")), "ckpt" if s.get("checkpointing") else ""]
    return " ".join(str(x) for x in parts if x) or "-"


def render_ledger_list(rows: list[Measurement], console: Console, path: str) -> None:
    """The ledger's measurements, newest first: ids, devices and models whole at 80 columns
    (gpuhours.report.tables)."""
    from gpuhours.report.tables import Col, Notes, print_table

    cols = (Col("id", "number", "right"), Col("date (UTC)", "number", stack=True),
            Col("device", "name"), Col("model", "name", stack=True), Col("status", "name"),
            Col("setup", stack=True),
            Col("tokens/s", "number", "right"), Col("step median", "number", "right", True),
            Col("CV", "number", "right"), Col("MFU", "number", "right", True),
            Col("peak memory", "number", "right"))
    table = []
    for m in rows:
        setup = ledger_setup_label(m.kind, m.setup)
        table.append([str(m.id), esc(m.created_utc[:16].replace("T", " ")),
                      esc(m.device_key), esc(m.model_label), esc(m.status), esc(setup),
                      f"{m.tokens_per_s:,.0f}" if m.tokens_per_s else "-",
                      seconds(m.step_time_median_s) if m.step_time_median_s else "-",
                      f"{m.step_time_cv:.1%}" if m.step_time_cv is not None else "-",
                      pct(m.mfu) if m.mfu is not None else "-", size(m.peak_memory_bytes)])
    print_table(console, cols, table, notes=Notes(),
                title=f"Ledger {esc(path)} (newest first; all figures measured)")


def render_ledger_show(m: Measurement, console: Console) -> None:
    console.print(f"[bold]ledger #{m.id}[/bold] "
                  + esc(f"{m.kind} {m.status} at {m.created_utc} on {m.device_name} "
                        f"({m.hostname})"))
    _kv(console, "setup", m.setup)
    _kv(console, "environment", m.environment)
    keys = ("step_time_median_s", "step_time_p90_s", "step_time_cv", "steps_timed",
            "tokens_per_s", "model_flops_per_step", "peak_flops_per_s", "peak_flops_basis", "mfu",
            "peak_memory_bytes", "error")
    _kv(console, "results", {k: m.results[k] for k in keys if k in m.results})
    for key in ("timing_basis", "peak_memory_basis", "model_flops_basis"):
        if m.results.get(key):
            console.print(f"  [dim]{key}: {esc(m.results[key])}[/dim]")
    if m.results.get("peak"):
        console.print(f"  [dim]peak: {esc(m.results['peak'].get('source'))}[/dim]")
    if m.probe_ids:
        console.print(f"  probes: {', '.join(f'#{i}' for i in m.probe_ids)}")


def _kv(console: Console, title: str, data: dict[str, Any]) -> None:
    console.print(f"  [bold]{title}[/bold]")
    for k, v in data.items():
        console.print(f"    {esc(k)}: {esc(v)}", highlight=False)


def render_generate(r: Any, console: Console, ledger_path: str | None,
                    ledger_id: int | None) -> None:
    """A generate benchmark: measured prefill and decode, beside the estimate when there is
    one."""
    s = r.setup
    p = console.print
    p(f"[bold]{esc(str(s['model']))}[/bold] HF generate, {r.dtype}, batch {s['batch']}, "
      f"{s['prompt_tokens']} prompt + {s['output_tokens']} new tokens")
    p(f"  device        {esc(r.device_name)}, {r.device_kind} (key {esc(r.device_key)})")
    est = ""
    if r.estimated_prefill_s is not None:
        est = f"; estimated {seconds(r.estimated_prefill_s)}"
    p(f"  prefill       {seconds(r.prefill_s)} (1 new token){est}")
    est = ""
    if r.estimated_decode_step_s is not None:
        err = r.estimated_decode_step_s / r.decode_step_s - 1
        est = f"; estimated {seconds(r.estimated_decode_step_s)} ({err:+.0%})"
    p(f"  decode step   [bold]{seconds(r.decode_step_s)}[/bold] per token of the batch{est}")
    p(f"  throughput    {r.output_tokens_per_s:,.1f} output tokens/s")
    if r.operators_per_decode_step:
        p(f"  operators     {r.operators_per_decode_step:,.0f} device operators per decode step "
          f"(counted); at most {r.decode_step_s / r.operators_per_decode_step * 1e6:.1f} us "
          "of host time each")
    if r.peak_memory_bytes is not None:
        est = ""
        if getattr(r, "estimated_peak_memory_bytes", None) is not None:
            err = r.estimated_peak_memory_bytes / r.peak_memory_bytes - 1
            est = f"; estimated {size(r.estimated_peak_memory_bytes)} ({err:+.0%})"
        p(f"  peak memory   {size(r.peak_memory_bytes)} of tensors{est}")
    p(f"[dim]  timing: {esc(r.timing_basis)}[/dim]")
    if r.estimate_basis:
        p(f"[dim]  estimate: {esc(r.estimate_basis)}[/dim]")
    if ledger_id is not None:
        p(f"  ledger        #{ledger_id} in {esc(str(ledger_path))}")


def render_grpo(r: Any, console: Console, ledger_path: str | None,
                ledger_id: int | None) -> None:
    """One GRPO step, part by part."""
    s = r.setup
    p = console.print
    p(f"[bold]{esc(str(s['model']))}[/bold] GRPO step, {s['method']}, {s['precision']}: "
      f"{s['prompts']} prompts x {s['generations']} responses of {s['response_tokens']} tokens "
      f"({s['prompt_tokens']}-token prompts), update in micro-batches of {s['micro_batch']}")
    p(f"  device        {esc(r.device_name)}, {r.device_kind} (key {esc(r.device_key)})")
    for name, t in r.parts_s.items():
        p(f"  {name:<22} {seconds(t):>10}  {t / r.step_s:6.1%}")
    p(f"  [bold]{'step':<22} {seconds(r.step_s):>10}[/bold]")
    p(f"[dim]  timing: {esc(r.timing_basis)}[/dim]")
    if ledger_id is not None:
        p(f"  ledger        #{ledger_id} in {esc(str(ledger_path))}")
