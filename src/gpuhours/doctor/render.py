"""The doctor's terminal/Markdown text: findings with evidence, fix and worth; the options table.
GB here is 10^9 bytes and GiB 2^30. Plain text (no Rich markup); control characters in user
strings are shown as escapes (report/text.py)."""

from __future__ import annotations

from gpuhours.doctor.diagnose import Diagnosis
from gpuhours.report.text import plain


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:,.2f}"


def render(d: Diagnosis) -> str:
    lines = [f"# gpuhours doctor: {d.source}", "",
             f"device {d.device}; status {d.status}; {d.steps_recorded} steps recorded, mean "
             f"{d.step_time_mean_s:.3f} s/step (measured)",
             f"planned run: {d.planned_steps} steps ({d.planned_basis}) = "
             f"{d.measured_gpu_hours_planned.value:.4g} GPU h at the measured rate",
             "where the time goes (measured share of wall time): " + ", ".join(
                 f"{k} {v:.0%}" for k, v in d.time_shares.items()),
             f"price: {'-' if d.usd_per_gpu_hour is None else f'{d.usd_per_gpu_hour:g} USD/GPU-h'}"
             f" ({d.price_basis})", ""]
    if not d.findings:
        lines.append("No finding above the thresholds.")
    for i, f in enumerate(d.findings, 1):
        conf = " [low confidence]" if f.confidence == "low" else ""
        usd = f", {_usd(f.usd_saved.value)}" if f.usd_saved else ""
        lines.append(f"{i}. {f.title} ({f.rule}){conf}: saves {f.gpu_hours_saved.value:.4g} GPU h"
                     f"{usd} over the planned run [{f.gpu_hours_saved.basis}]")
        for e in f.evidence:
            lines.append(f"   evidence: {e}")
        lines.append(f"   fix: {f.fix}")
        lines.append(f"   worth: {f.saved_s_per_step.value:.3f} s/step; basis: "
                     f"{f.saved_s_per_step.source}")
    if d.findings:
        lines.append("   (each saving is against the run as measured; they overlap and do not "
                     "simply add)")
    if d.options:
        lines += ["", "## Options for the same work (formula: estimate_training)", "",
                  "| option | GPUs | micro-batch x accum | fits | wall h | GPU h | USD | "
                  "comm exposed |", "|---|---|---|---|---|---|---|---|"]
        for o in d.options:
            lines.append(f"| {o.option} | {o.num_gpus} | {o.micro_batch} x {o.grad_accum} | "
                         f"{'yes' if o.fits else 'NO'} | {o.wall_hours:.3g} | {o.gpu_hours:.3g} | "
                         f"{_usd(o.usd)} | {o.communication_exposed_share:.0%} |")
    if d.notes:
        lines += [""] + [f"note: {n}" for n in d.notes]
    # paths, device and model names come from the user: no terminal control in them
    return plain("\n".join(_wrapped(line) for line in lines)) + "\n"


#: the doctor's prose lines are wrapped to this width (Markdown keeps them one paragraph);
#: table rows stay whole
WIDTH = 80


def _wrapped(line: str) -> str:
    """A prose line wrapped at WIDTH, its continuation indented under its text ('1. ',
    '   evidence: ' and the like); a heading, a table row or a short line as it is."""
    if len(line) <= WIDTH or line.startswith(("|", "#")):
        return line
    import re
    import textwrap

    lead = re.match(r"\s*(\d+\.\s|\w+:\s)?", line)
    indent = " " * min(len(lead.group(0)) if lead else 0, 16)
    return textwrap.fill(line, width=WIDTH, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False)
