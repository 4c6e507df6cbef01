"""Sweeps: `--sweep batch=1,2,4,8 --sweep checkpointing=on,off` expanded into setups, and the
summary of what ran: the fastest configuration that fits (in tokens/s, the only fair measure
across batch sizes), and whether a smaller micro-batch beat a larger one beyond the noise.
No torch here."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from gpuhours.bench.config import SWEEP_KEYS, BenchSetup, parse_sweep_value, with_values
from gpuhours.bench.session import Outcome
from gpuhours.errors import InputError


def parse_sweeps(specs: list[str]) -> list[tuple[str, list[object]]]:
    """['batch=1,2', 'checkpointing=on,off'] -> [('micro_batch', [1, 2]), ('checkpointing', ...)]."""
    out: list[tuple[str, list[object]]] = []
    seen: set[str] = set()
    for spec in specs:
        where = f"--sweep {spec}"
        key, sep, values = spec.partition("=")
        key = key.strip().lower().replace("_", "-")
        if not sep or not values.strip():
            raise InputError(where, "expected KEY=V1,V2,... such as batch=1,2,4,8.")
        if key not in SWEEP_KEYS:
            raise InputError(where, f"unknown sweep key {key!r}.",
                             f"Use one of: {', '.join(sorted(SWEEP_KEYS))}.")
        field = SWEEP_KEYS[key]
        if field in seen:
            raise InputError(where, f"{key} is swept twice; give all its values in one --sweep.")
        seen.add(field)
        parsed = [parse_sweep_value(field, v.strip(), where) for v in values.split(",") if v.strip()]
        if len(set(map(str, parsed))) != len(parsed):
            raise InputError(where, "a value is repeated.")
        out.append((field, parsed))
    return out


def expand(base: BenchSetup, sweeps: list[tuple[str, list[object]]]) -> list[BenchSetup]:
    """Every combination of the swept values over `base`, validated."""
    if not sweeps:
        return [base]
    fields = [f for f, _ in sweeps]
    setups = []
    for combo in itertools.product(*(values for _, values in sweeps)):
        setups.append(with_values(base, dict(zip(fields, combo, strict=True))))
    return setups


@dataclass(frozen=True)
class SweepRun:
    """What a sweep ran: the outcomes of the configurations that finished, in order, and
    whether it was interrupted (Ctrl-C) before the last."""

    outcomes: list[Outcome]
    total: int
    interrupted: bool = False


def outcome_text(o: Outcome) -> str:
    """One configuration's result in a few words: its status and, when it ran, its tokens/s."""
    if o.status == "ok" and o.result is not None and o.result.tokens_per_s:
        return f"ok, {o.result.tokens_per_s:,.0f} tokens/s"
    return o.status + (f" ({o.error})" if o.error and o.status != "does-not-fit" else "")


def run_sweep(setups: list[BenchSetup], run_one: Callable[[int, BenchSetup], Outcome],
              log: Callable[[str], None] | None = None) -> SweepRun:
    """Run each setup in order with `run_one(index, setup)`; `log` gets one line as each
    configuration starts and one as it finishes (`[2/8] started ...`, `[2/8] finished ...:
    ok, 1,234 tokens/s`). A KeyboardInterrupt stops the sweep: the configurations finished so
    far are returned, marked interrupted, so that their table can still be printed."""
    outcomes: list[Outcome] = []
    n = len(setups)
    try:
        for i, setup in enumerate(setups):
            if log is not None:
                log(f"[{i + 1}/{n}] started {setup.label()}")
            outcome = run_one(i, setup)
            outcomes.append(outcome)
            if log is not None:
                log(f"[{i + 1}/{n}] finished {setup.label()}: {outcome_text(outcome)}")
    except KeyboardInterrupt:
        return SweepRun(outcomes, n, interrupted=True)
    return SweepRun(outcomes, n)


@dataclass(frozen=True)
class SweepSummary:
    fastest: Outcome | None
    notes: list[str]


def summarize(outcomes: list[Outcome]) -> SweepSummary:
    """The fastest fitting configuration by median tokens/s, and notes on batch sizes."""
    ok = [o for o in outcomes if o.status == "ok" and o.result and o.result.tokens_per_s]
    notes: list[str] = []
    misfits = [o for o in outcomes if o.status == "does-not-fit"]
    if misfits:
        notes.append("does not fit: " + "; ".join(o.setup.label() for o in misfits))
    if not ok:
        return SweepSummary(fastest=None, notes=notes or ["no configuration ran."])
    fastest = max(ok, key=lambda o: _tps(o))
    notes += _smaller_batch_notes(ok)
    return SweepSummary(fastest=fastest, notes=notes)


def _tps(o: Outcome) -> float:
    assert o.result is not None and o.result.tokens_per_s is not None
    return o.result.tokens_per_s


def _smaller_batch_notes(ok: list[Outcome]) -> list[str]:
    """For configurations that differ only in micro-batch: where a smaller one had more tokens/s,
    say so, and whether the difference is beyond the p10-p90 spread of the two measurements."""
    groups: dict[str, list[Outcome]] = {}
    for o in ok:
        key = repr({**o.setup.record(), "micro_batch": 1})
        groups.setdefault(key, []).append(o)
    notes = []
    for group in groups.values():
        group.sort(key=lambda o: o.setup.training.micro_batch)
        for small, large in itertools.combinations(group, 2):
            if _tps(small) <= _tps(large):
                continue
            assert small.result and large.result
            s_lo, _ = small.result.tokens_per_s_range or (0.0, 0.0)
            _, l_hi = large.result.tokens_per_s_range or (0.0, 0.0)
            gain = _tps(small) / _tps(large) - 1
            head = (f"micro-batch {small.setup.training.micro_batch} ran {_tps(small):,.0f} tokens/s, "
                    f"{gain:.1%} more than micro-batch {large.setup.training.micro_batch} "
                    f"({_tps(large):,.0f} tokens/s), {small.setup.label()}")
            if s_lo <= l_hi:
                notes.append(head + ": within the measured p10-p90 spread of the two, so not a "
                                    "real difference on this machine.")
                continue
            retries = (large.result.allocator or {}).get("alloc_retries", 0)
            why = (f" The allocator had to free and retry {retries} times at the larger batch."
                   if retries else "")
            notes.append(
                head + ": beyond the measured spread. Per token both do the same FLOPs; a larger "
                "micro-batch is slower per token when its activations no longer stay in cache "
                "(CPU) or the allocator runs short and retries (GPU), not because it needs fewer "
                "accumulation steps: accumulation changes how many optimizer steps there are, "
                "not the work per token. Compare tokens/s, never time per step." + why)
    return notes
