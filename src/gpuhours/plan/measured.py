"""The micro-benchmarks of a budget: the ledger's measurements that set some of its figures
(an efficiency, the host's cost per operator, a GRPO step's parts) in place of assumed ones.

The living document lists them with what each measured, so that a reader sees which numbers
rest on a real run on which device and day (seed 000 replaced a simulated benchmark by hand)."""

from __future__ import annotations

from typing import Any

from gpuhours.errors import InputError
from gpuhours.plan.results import MicroBenchmark

#: a bench measurement's step parts as stored (BenchResult.phases_median_s), in step order
_BENCH_PARTS = ("data_s", "forward_s", "backward_s", "optimizer_s")


def uses_by_id(used: list[tuple[int, str]], phase: str, into: dict[int, list[str]]) -> None:
    """Add "phase: what" to `into[id]` for each (ledger id, what it set) of `used`, once."""
    for ledger_id, what in used:
        line = f"{phase}: {what}"
        lines = into.setdefault(ledger_id, [])
        if line not in lines:
            lines.append(line)


def setup_text(kind: str, setup: dict[str, Any]) -> str:
    """The measured setup in a line: method, precision, batch and sequence (or a GRPO step's
    prompts, generations and tokens)."""
    method = str(setup.get("method", "?"))
    if method == "lora" and setup.get("lora_rank"):
        method += f" r{setup['lora_rank']}"
    parts = [method, str(setup.get("precision_as_run", setup.get("precision", "?")))]
    if kind == "grpo":
        parts.append(f"{setup.get('prompts', '?')} prompts x {setup.get('generations', '?')}, "
                     f"{setup.get('prompt_tokens', '?')} + {setup.get('response_tokens', '?')} "
                     f"tokens")
    else:
        parts.append(f"micro-batch {setup.get('micro_batch', '?')} x {setup.get('seq_len', '?')}")
    if setup.get("checkpointing"):
        parts.append("checkpointing")
    if setup.get("compiled"):
        parts.append("torch.compile")
    return ", ".join(parts)


def _step_parts_s(kind: str, results: dict[str, Any]) -> dict[str, float]:
    if kind == "grpo":
        return {k: float(v) for k, v in (results.get("parts_s") or {}).items() if v is not None}
    phases = results.get("phases_median_s") or {}
    return {k.removesuffix("_s"): float(phases[k]) for k in _BENCH_PARTS
            if phases.get(k) is not None}


def micro_benchmarks(ledger: Any, uses: dict[int, list[str]]) -> list[MicroBenchmark]:
    """One MicroBenchmark per ledger measurement in `uses` (id -> "phase: what it set"), oldest
    first. A measurement the ledger no longer holds is left out."""
    out = []
    for ledger_id in sorted(uses):
        try:
            m = ledger.measurement(ledger_id)
        except InputError:  # deleted since it was read: nothing to show
            continue
        r = m.results
        timing = r.get("timing") or {}
        steps = r.get("steps_timed") or timing.get("n_steps")
        out.append(MicroBenchmark(
            ledger_id=m.id, measured_utc=m.created_utc, kind=m.kind, device=m.device_name,
            model=m.model_label, setup=setup_text(m.kind, m.setup),
            steps_timed=int(steps) if steps else None,
            step_time_median_s=m.step_time_median_s, step_time_cv=m.step_time_cv,
            step_parts_s=_step_parts_s(m.kind, r), peak_memory_bytes=m.peak_memory_bytes,
            peak_memory_basis=r.get("peak_memory_basis"), tokens_per_s=m.tokens_per_s,
            mfu=m.mfu, used_for=uses[ledger_id]))
    return out
