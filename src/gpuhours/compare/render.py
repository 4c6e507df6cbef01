"""The terminal view of a Comparison: a narrow ranked table (fits 80 columns) and footnotes that
give each figure's basis. Formatting only; the numbers come from gpuhours.compare.rank."""

from __future__ import annotations

from collections import defaultdict

from rich.console import Console
from rich.table import Table

from gpuhours.compare.rank import Comparison, Excluded, Offer
from gpuhours.report.text import esc
from gpuhours.report.units import usd

_PRICING_SHORT = {"on-demand": "od", "spot": "spot"}

#: what each short flag means, for the legend under the table
_FLAG_LEGEND = {
    "spot=od": "spot = on-demand in the row (suspicious)",
    "pre-change": "read before a known price change",
    "doubted": "the row's own notes doubt it",
    "dated": "the row's own notes call it stale",
    "GPU only": "GPU price only, the VM is not in it",
}


def hours(value_h: float) -> str:
    """Hours with 3 significant figures, thousands separated: 0.123, 12.3, 1,234."""
    if value_h >= 1000:
        return f"{value_h:,.0f}"
    return f"{value_h:.3g}"


def offer_label(o: Offer) -> str:
    """'lambda gpu_8x_h100_sxm5', or '2x aws p5.48xlarge' for several instances."""
    many = f"{o.instances}x " if o.instances > 1 else ""
    return f"{o.provider} {many}{o.instance}"


def _table(c: Comparison) -> Table:
    by = "dollars" if c.ranked_by == "usd" else "wall clock"
    t = Table(title=f"{esc(c.model)}: top {len(c.offers)} of {c.offers_total} by {by}",
              box=None, padding=(0, 1, 0, 0), header_style="bold underline",
              title_justify="left")
    t.add_column("#", justify="right")
    t.add_column("GPU", no_wrap=True)
    # an instance name is typed back to a provider: a long one folds onto a second line
    t.add_column("provider instance", overflow="fold", min_width=12, max_width=26)
    t.add_column("pay")
    t.add_column("wall h", justify="right")
    t.add_column("GPU h", justify="right")
    t.add_column("$", justify="right")
    t.add_column("flags", overflow="fold")
    for o in c.offers:
        t.add_row(str(o.rank), f"{esc(o.gpu)} x{o.num_gpus}", esc(offer_label(o)),
                  _PRICING_SHORT[o.pricing], hours(o.wall_clock_hours.value),
                  hours(o.billed_gpu_hours.value), usd(o.cost_usd.value),
                  esc(", ".join(f.short for f in o.flags)))
    return t


def _best(name: str, o: Offer) -> str:
    return (f"{name}: {esc(o.gpu)} x{o.num_gpus} on {esc(offer_label(o))} "
            f"{o.pricing}, {hours(o.wall_clock_hours.value)} h wall, {usd(o.cost_usd.value)}")


def _excluded_lines(excluded: list[Excluded], counts: set[int]) -> list[str]:
    """One line per reason: how many, which GPUs (with the counts when not all of them), and
    the first one's detail as an example."""
    by_reason: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    first: dict[str, Excluded] = {}
    for x in excluded:
        by_reason[x.reason][x.gpu].append(x.num_gpus)
        first.setdefault(x.reason, x)
    lines = []
    for reason, gpus in by_reason.items():
        n = sum(len(v) for v in gpus.values())
        listed = ", ".join(esc(g) if set(c) == counts else
                           f"{esc(g)} x{','.join(str(k) for k in c)}" for g, c in gpus.items())
        x = first[reason]
        lines.append(f"Excluded, {reason} ({n}): {listed} (e.g. {esc(x.gpu)} x{x.num_gpus}: "
                     f"{esc(x.detail)}).")
    return lines


def _basis_lines(c: Comparison) -> list[str]:
    lines = []
    if c.offers:
        o = c.offers[0]
        setup = next(e for e in c.estimates if (e.gpu, e.num_gpus) == (o.gpu, o.num_gpus))
        lines.append(
            f"Basis: wall h = optimizer steps x step time, analytic (#1: "
            f"{setup.optimizer_steps.value:,.0f} steps x {setup.step_time_s.value:.3g} s, "
            f"{setup.bottleneck}); GPU h = wall h x GPUs billed (whole instances); "
            f"$ = GPU h x the row's price per GPU-hour.")
    chosen = [e for e in c.estimates if e.setup_chosen]
    # those of the top three offers (none when their setups were taken as given); with no
    # offer priced, the first three estimates'
    shown = {(o.gpu, o.num_gpus) for o in c.offers[:3]}
    picked = [e for e in chosen if (e.gpu, e.num_gpus) in shown] if c.offers else chosen[:3]
    if picked:
        lines.append("Setup chosen on each GPU and count (the setup left open, as `gpuhours "
                     "estimate` chooses it; each one's sentence in --json): " + "; ".join(
                         f"{e.num_gpus} x {e.gpu}: {esc(e.setup_label or '')}"
                         for e in picked) + ".")
    dates = sorted({o.price_as_of.isoformat() for o in c.offers})
    sources = sorted({o.price_source.split(" ")[0] for o in c.offers})
    if dates:
        lines.append(f"Prices: {', '.join(esc(s) for s in sources)}; as of "
                     f"{', '.join(dates)}; each row's source in --json.")
    return lines


def _legend(c: Comparison) -> str | None:
    shown = {f.short for o in c.offers for f in o.flags}
    parts = ["od = on-demand"]
    parts += [f"{s} = {_FLAG_LEGEND[s]}" for s in sorted(shown) if s in _FLAG_LEGEND]
    if any(s.startswith("stale ") for s in shown):
        parts.append(f"stale Nmo = read over {c.stale_after_days} days ago")
    return "; ".join(parts) + "."


def render_comparison(c: Comparison, console: Console) -> None:
    """Print the ranked table, the cheapest and fastest offers, exclusions, basis and legend."""
    if c.offers:
        console.print(_table(c))
    else:
        console.print("No offer to rank: nothing that fits has a price.")
    if c.cheapest is not None and c.fastest is not None:
        console.print(_best("Cheapest", c.cheapest), highlight=False)
        console.print(_best("Fastest", c.fastest), highlight=False)
    counts = {e.num_gpus for e in c.estimates} | {x.num_gpus for x in c.excluded}
    for line in [*_excluded_lines(c.excluded, counts), *_basis_lines(c), _legend(c)]:
        if line:
            console.print(line, highlight=False, style="dim")
    console.print("Assumes: " + "; ".join(c.assumptions[:3]) + ".", highlight=False,
                  style="dim")
