"""Should the GEMM efficiency depend on the product, not just its generation? (issue 14, point 5)

The evidence: user microbenchmarks of torch's square bf16 matmul (fp16 on Volta and Turing,
which have no bf16 tensor cores), zzc0721/torch-performance-test-data, collected per catalog GPU
into data/matmul_microbench.csv (every entry of a catalog part the repository's table or its
issues hold; the README says what was read and what was left out and why). For each product,
r = the median of its used entries / the catalog's dense peak (FP32-accumulate tensor rate).

The candidate rule (not wired into the estimate unless it holds everywhere):

    efficiency(product) = efficiency(generation) x r(product) / r(reference product)

where the reference product is the one the generation's figure rests on: the A100 SXM for
Ampere (gemm_efficiency.ampere 0.80 is a datasheet-based assumption checked on A100-80GB SXM
rows), the H100 SXM for Hopper (0.70, fitted on H100 SXM rows). Ada's figure is derived from this
data (`derived_ada_efficiency`): the median r of the Ada products x what a training GEMM reaches
per unit of r on the two generations whose figure rests on rows (the mean of Ampere's and
Hopper's efficiency / r(reference)); under the rule its reference is that median product.

Run: `PYTHONPATH=src:scripts python -m gpuhours_dev.validation.matmul_rate` prints the r table,
then the fine-tuning throughput rows (held out and tuned apart), the A100 and H100 training
throughput tables and the H100 run's rows, now and under the rule.
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from gpuhours import catalog
from gpuhours.catalog.schema import GpuSpec
from gpuhours.estimate import assumptions as A
from gpuhours.estimate import timing as T
from gpuhours_dev.validation import patched_estimate

DATA = Path(__file__).parent / "data" / "matmul_microbench.csv"
#: the product each generation's gemm_efficiency rests on (assumptions.py)
REFERENCE = {"ampere": "a100-80gb", "hopper": "h100-sxm"}
#: the generations whose GEMM efficiency rests on published rows, not on a datasheet alone: their
#: efficiency / r(reference) is the share of the square-matmul rate a training GEMM reaches
ANCHORED = ("ampere", "hopper")


@dataclass(frozen=True)
class RateShare:
    """One product's measured matmul rate against its catalog peak."""

    gpu: str
    generation: str
    precision: str
    peak_tflops: float
    measured_tflops: tuple[float, ...]

    @property
    def median_tflops(self) -> float:
        return statistics.median(self.measured_tflops)

    @property
    def r(self) -> float:
        """Median measured / catalog dense peak (dimensionless)."""
        return self.median_tflops / self.peak_tflops


def rate_shares(path: Path = DATA) -> dict[str, RateShare]:
    """catalog GPU -> its RateShare, from the used rows of the data file."""
    by_gpu: dict[tuple[str, str], list[float]] = {}
    with path.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["used"] != "yes" or not row["catalog_gpu"]:
                continue
            key = (row["catalog_gpu"], row["precision"])
            by_gpu.setdefault(key, []).append(float(row["tflops_best"]))
    out = {}
    for (name, precision), values in by_gpu.items():
        spec = catalog.gpu(name)
        peak = getattr(spec.dense_tflops, precision)
        if peak is None:  # the catalog has no such rate (RTX 5090 bf16): nothing to compare
            continue
        out[name] = RateShare(name, spec.generation, precision, float(peak), tuple(values))
    return out


def training_share_of_microbench(shares: dict[str, RateShare]) -> float:
    """Mean over the ANCHORED generations of efficiency / r(reference product): the share of the
    square-matmul microbenchmark rate that training-shaped GEMMs reach (dimensionless)."""
    return statistics.mean(A.GEMM_EFFICIENCY_BY_GENERATION[g].value / shares[REFERENCE[g]].r
                           for g in ANCHORED)


def ada_median_r(shares: dict[str, RateShare]) -> float:
    """Median over the Ada products of their r (each product counted once, however many
    entries it has)."""
    return statistics.median(s.r for s in shares.values() if s.generation == "ada")


def derived_ada_efficiency(shares: dict[str, RateShare]) -> float:
    """Ada's GEMM efficiency from the microbenchmarks: its median product's r x the anchored
    generations' training share (what assumptions.GEMM_EFFICIENCY_BY_GENERATION['ada'] holds,
    rounded to 0.01)."""
    return ada_median_r(shares) * training_share_of_microbench(shares)


def geforce_blackwell_median_r(shares: dict[str, RateShare]) -> float:
    """Median over the Blackwell products of compute capability 12.x (GeForce RTX 50) of their
    r; the RTX 5090 is the one measured."""
    return statistics.median(
        s.r for s in shares.values() if s.generation == "blackwell"
        and (catalog.gpu(s.gpu).compute_capability or "").split(".")[0] == "12")


def derived_geforce_blackwell_efficiency(shares: dict[str, RateShare]) -> float:
    """GeForce Blackwell's (12.x) GEMM efficiency from the microbenchmarks, as Ada's is derived:
    its median product's r x the anchored generations' training share (what
    assumptions.GEMM_EFFICIENCY_BY_SM_MAJOR[("blackwell", 12)] holds, rounded to 0.01)."""
    return geforce_blackwell_median_r(shares) * training_share_of_microbench(shares)


def scale(gpu: GpuSpec, shares: dict[str, RateShare]) -> float:
    """The rule's factor on the generation's efficiency: r(product) / r(reference), where Ada's
    reference is its median product; 1 where the product or its reference has no measurement."""
    own = shares.get(gpu.name)
    if own is None:
        return 1.0
    if gpu.generation == "ada":
        return own.r / ada_median_r(shares)
    ref_name = REFERENCE.get(gpu.generation)
    if ref_name is None or ref_name not in shares:
        return 1.0
    return own.r / shares[ref_name].r


@contextmanager
def generation_only() -> Iterator[None]:
    """Estimates inside this block run every product at its generation's GEMM efficiency (the
    rule before the per-product factor, estimate/timing.py product_matmul_factor, was adopted)."""
    # nothing kept from or for the unpatched estimate (patched_estimate)
    with mock.patch.object(T, "product_matmul_factor", lambda gpu: 1.0), patched_estimate():
        yield


#: docs/validation.md's section: what each generation's figure rests on, then the finding. The
#: r table is rendered from the data file; the before -> after figures are those `main` printed
#: on 2026-11-24 (rerun it after a change to the estimate; they are not recomputed here).
SECTION_TITLE = ("GEMM efficiency per product (adopted for GeForce cards; Ada's figure derived "
                 "here)")
SECTION_INTRO = (
    "What each generation's GEMM efficiency (assumptions.GEMM_EFFICIENCY_BY_GENERATION, x the "
    "width factor d / (d + 128)) rests on: **Ampere 0.80** is an assumption (A100 bf16 GEMMs "
    "~250 of 312 TFLOPS), checked, not fitted, on A100 SXM rows (llm-foundry, torchtune); "
    "**Hopper 0.71** was fitted on the H100 SXM tuning rows (one dense configuration; "
    "validation/hopper.py); **Ada 0.78** is derived from the microbenchmarks below, no Ada "
    "training row used: the median Ada product's r (0.849) x the share of the measured rate the "
    "two anchored generations' training GEMMs reach (the mean of 0.80 / r(A100 SXM4 80GB) and "
    "0.71 / r(H100 SXM): 0.917), `derived_ada_efficiency` (it was 0.70, an assumption resting "
    "on no product and no row); **GeForce Blackwell (compute capability 12.x) 1.04** is derived "
    "the same way from the RTX 5090's entries (r 1.129 x 0.917: above 1 because the catalog's "
    "peak is at the rated boost clock, below what the card sustains), "
    "`derived_geforce_blackwell_efficiency`; Volta, Turing, data-centre Blackwell (10.x), CDNA "
    "and TPU figures are assumptions. "
    "The question (issue 14): should the figure depend on the product's own matmul rate? The "
    "evidence is every entry for a catalog GPU in a public set of user microbenchmarks (torch's "
    "square matmul, zzc0721/torch-performance-test-data; data/matmul_microbench.csv, each entry "
    "with its issue or table line, none left out for its value). r is the median entry over the "
    "catalog's dense peak (bf16 with FP32 accumulation, as mixed-precision training runs it: "
    "for the GeForce cards the catalog holds that rate, half the FP16-accumulate one, per their "
    "notes; the professional and data-centre parts run both at one rate; fp16 on Volta and "
    "Turing); the rule column is r / r(reference product): the A100 SXM4 80GB for Ampere, the "
    "H100 SXM for Hopper, the median Ada product for Ada. "
    "Run: `PYTHONPATH=src:scripts python -m gpuhours_dev.validation.matmul_rate`."
)
SECTION_FINDING = (
    "Ada's derived 0.77 (was 0.70; 0.78 since Hopper's refit of 2026-11-24) moves the "
    "held-out RTX 4090 fine-tuning rows from 6 to 9 of 11 "
    "within 20% (median -19.7% -> -13.8%; all still slow but #431; with the L40S row added since, "
    "#522, Ada is 9 of 12) and the torchtune 4090 rows "
    "of the training table (LoRA -13.9% -> -7.1%, QLoRA +3.5% -> +11.2%; the table stays 94 of "
    "96). One held-out RL row moves out: EasyR1 on 8 L20s (docs/rl.md row 23) from -24% to "
    "-29%, the same side as its three siblings on H100s (-43% to -66%): the L20 row was within "
    "25% because the low Ada figure offset the EasyR1 update's gap the H100 rows show. "
    "Under the per-product rule as well (read 2026-11-24; rows within 20%, now -> rule): "
    "**Ada** held out 9 -> 11 of 12 (median -14.6% -> -4.2%); the torchtune 4090 rows of the "
    "training table: LoRA -7.1% -> +5.0%, QLoRA +11.2% -> +24.6% (a miss). **Ampere** held out "
    "75 -> 73 of 91: on Answer.AI's RTX 3090 rig the DDP rows (no weights gathered) come in "
    "(#416 -15.8% -> +2.7%, #417 -15.1% -> +3.6%) and the FSDP QLoRA rows at 4-10 x 2048 stay "
    "in (#412 -6.6% -> +13.2%, #413 -10.2% -> +9.6%), but FSDP rows already fast leave the band "
    "(#415 +12.2% -> +36.1%, #420 +19.9% -> +46.2%; #409 and #414 +28% and +25% -> +50% and "
    "+51%); the RTX A6000 row -42.9% -> -45.6%. The 11 tuned Ampere rows (A100s: no factor) "
    "stay 11 of 11, the A100 training table goes 94 -> 93 of 96 (the 4090 QLoRA row). "
    "**Hopper** does not move: the H100 SXM is the reference and the H200 measures the same r "
    "(held out 0 of 4, the H100 table 19 of 27 held out and 18 of 22 tuning, our H100 run 14 of "
    "15, as before). Not adopted then (2026-11-24): it made the held-out Ampere figures "
    "worse. What it says: the "
    "GeForce cards' matmuls run at about their rated peak (3090 r 1.08, 4090 1.00), the A100, "
    "H100, H200, B200, L40S and RTX A6000 at 0.74-0.85, the H20 and L20 (cut-down dies) 0.96 "
    "and the 72 W L4 0.49, so one figure per generation cannot be right for all of them; the "
    "rows that exchange no weights support the rule on both GeForce cards, and the 3090 rows it "
    "breaks are those whose FSDP traffic over host-staged PCIe the estimate already "
    "under-counts (Answer.AI note above), on a rig power-limited to 280 W where the "
    "microbenchmarks' cards ran at stock power. Adopting it waited on that traffic. Since "
    "FSDP's adapter units (fsdp_adapter_units) and the 3090 rig's x8 lanes (pcie_lanes) are "
    "counted (Answer.AI note above; read 2026-11-24) the 3090 rows read -3..-16% now and "
    "-5..+15% under the rule, Ampere 80 of 91 held out either way, Ada 10 -> 11 of 12; the "
    "training tables and RL rows were not rerun for it. Caveats: one "
    "entry only for 11 of the 17 products, hosts and clocks as users ran them (cloud and home "
    "machines); Ada's median rests on four products, one entry each but the 4090's six. The "
    "A10G's r of 0.56 is against the catalog's 125 TFLOPS, the A10's datasheet figure: the A10G "
    "may be rated lower (not changed here)."
)

#: the decision of 2026-11-25 (issue 14), with the figures `main` printed then
SECTION_ADOPTED = (
    "**Adopted for the GeForce cards (2026-11-25; the 'applied' column).** estimate/timing.py "
    "product_matmul_factor scales a GeForce card's GEMM efficiency by its r over its "
    "generation's reference product's (assumptions.GEMM_REFERENCE_MATMUL_SHARE: A100 SXM4 80GB "
    "0.848, H100 SXM 0.798, the median Ada product 0.849; the medians are in the catalog, "
    "gpus.yaml matmul_measured_tflops): RTX 3090 0.80 -> 1.015, RTX 4090 0.78 -> 0.915 (x the "
    "width factor). The mechanism: a GeForce card's catalog peak is at its rated boost clock, "
    "which the cards run above (r 1.08 and 1.00 where the A100 and H100 SXM reach 0.85 and "
    "0.80), as the GeForce Blackwell entry (1.04) already takes. Rerun (`python -m "
    "gpuhours_dev.validation.matmul_rate`, generation figure -> now): fine-tuning throughput "
    "held out, Ada 13 -> 15 of 15 (median -15.8% -> -5.8%; #427 -22.4% -> -14.7%, #324 -26.9% "
    "-> -15.8%, #322 +4.3% -> +19.98%, on the band's edge), Ampere 93 of 99 either way "
    "(median -4.0% -> -1.8%; every Answer.AI 3090 row within 15%: -4.7% (#418) .. +14.9% "
    "(#420)), Hopper and Blackwell unmoved, the 11 tuned rows unmoved; memory rows unmoved. The "
    "A100 training table goes 94 -> 93 of 96: its torchtune RTX 4090 QLoRA row +17.9% -> "
    "+32.9% (LoRA -1.1% -> +12.6%), though the same measurement (2,413 tokens/s) read as "
    "fine-tuning row #326 goes -18.6% -> -8.2%: the two mappings of one run differ by 41 "
    "points, a gap in the training table's mapping, not in the GEMM rate (not resolved here). "
    "Inference (generation_published: 208 of 258 within 20%) and RL rows (docs/rl.md) do not "
    "move: none is on a GeForce card. The rule for every measured product was checked too "
    "and not adopted: it moves the parts that are not GeForce cards away from their rows (the "
    "L40S row #522 -17.3% -> -25.0%, the RTX A6000 training row -39.1% -> -42.1%, the H20 "
    "SGLang rows of the inference table, already fast, faster: 208 -> 198 of 258 within 20%, "
    "e.g. rows 202 and 282 +23.5% -> +32.9% and +30.9% -> +43.9%). That split was read from "
    "these rows, after the mechanism was named: for the data-centre and professional parts "
    "(power-limited: the L4 at 72 W, 0.49) the measured square-matmul share does not carry "
    "over to their rows, so their r is recorded and not applied."
)


def render_section(path: Path = DATA) -> list[str]:
    """docs/validation.md's section on the per-product rule: the r table from the data file
    and the finding."""
    shares = rate_shares(path)
    lines = ["", f"## {SECTION_TITLE}", "", SECTION_INTRO, "",
             "| GPU | generation | precision | dense peak, TFLOPS (catalog) | entries | "
             "median, TFLOPS (measured) | r | rule factor | applied |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in sorted(shares.values(), key=lambda s: (s.generation, s.gpu)):
        spec = catalog.gpu(s.gpu)
        factor = f"{scale(spec, shares):.2f}"
        lines.append(f"| {s.gpu} | {s.generation} | {s.precision} | {s.peak_tflops:g} | "
                     f"{len(s.measured_tflops)} | {s.median_tflops:.1f} | {s.r:.2f} | "
                     f"{factor} | {T.product_matmul_factor(spec):.2f} |")
    return lines + ["", SECTION_FINDING, "", SECTION_ADOPTED]


def _finetune_errors() -> dict[str, tuple[str, bool, float]]:
    """label -> (generation, tuned row, throughput error) of each compared fine-tuning row;
    memory is not predicted here (the GEMM rate does not change it)."""
    from gpuhours_dev.validation import finetune as F
    from gpuhours_dev.validation.finetune_report import host_fit_row

    nan = float("nan")
    with mock.patch.object(F, "_predicted_memory", lambda *a, **k: nan), patched_estimate():
        comps = F.finetune_comparisons()
    return {c.label: (c.generation, host_fit_row(c), c.error) for c in comps
            if c.kind == "ft_throughput" and c.error is not None}


def _training_errors() -> dict[str, tuple[str, float]]:
    """label -> (table, error) of the A100 and H100 training throughput tables."""
    from gpuhours_dev.validation import hopper_comparisons, throughput_comparisons

    out = {}
    for i, c in enumerate(throughput_comparisons() + hopper_comparisons()):
        if c.error is not None and c.kind in ("throughput", "throughput_hopper"):
            table = c.kind + (f" {c.group}" if c.group else "")
            out[f"{table}: {c.label} ({i})"] = (table, c.error)  # labels repeat across releases
    return out


def _within(errors: list[float]) -> str:
    if not errors:
        return "-"
    return (f"{sum(abs(e) <= 0.2 for e in errors)}/{len(errors)}, "
            f"median {statistics.median(errors):+.1%}")


def main() -> None:
    from gpuhours_dev.validation.l2_check import h100_run_errors

    shares = rate_shares()
    print("| GPU | generation | precision | catalog dense peak TFLOPS | entries | median "
          "TFLOPS | r | rule factor |")
    for s in sorted(shares.values(), key=lambda s: (s.generation, s.gpu)):
        spec = catalog.gpu(s.gpu)
        print(f"| {s.gpu} | {s.generation} | {s.precision} | {s.peak_tflops:g} | "
              f"{len(s.measured_tflops)} | {s.median_tflops:.1f} | {s.r:.2f} | "
              f"{scale(spec, shares):.2f} |")
    print(f"\nAda's derived efficiency: median r {ada_median_r(shares):.3f} x training share "
          f"{training_share_of_microbench(shares):.3f} = {derived_ada_efficiency(shares):.3f}")
    runs = {"generation": True, "product (now)": False}
    ft, tr, h100 = {}, {}, {}
    for name, on in runs.items():
        if on:
            with generation_only():
                ft[name], tr[name], h100[name] = (_finetune_errors(), _training_errors(),
                                                  h100_run_errors())
        else:
            ft[name], tr[name], h100[name] = _finetune_errors(), _training_errors(), \
                h100_run_errors()
    print("\n| fine-tuning throughput, within 20% | " + " | ".join(runs) + " |")
    gens = sorted({g for g, _, _ in ft["generation"].values()})
    for tuned in (False, True):
        for g in gens:
            cells = [_within([e for gg, t, e in ft[n].values() if gg == g and t == tuned])
                     for n in runs]
            if cells[0] != "-":
                print(f"| {g} {'tuned' if tuned else 'held out'} | " + " | ".join(cells) + " |")
    tables = sorted({t for t, _ in tr["generation"].values()})
    for table in tables:
        cells = [_within([e for t, e in tr[n].values() if t == table]) for n in runs]
        print(f"| {table} | " + " | ".join(cells) + " |")
    print("| H100 run (step time) | "
          + " | ".join(_within(list(h100[n].values())) for n in runs) + " |")
    print("\n| row that moved by 1 point or more | generation | " + " | ".join(runs) + " |")
    for label, (g, tuned, e) in ft["generation"].items():
        moved = [ft[n][label][2] for n in runs]
        if max(abs(m - e) for m in moved) >= 0.01:
            print(f"| {label}{' (tuned)' if tuned else ''} | {g} | "
                  + " | ".join(f"{m:+.1%}" for m in moved) + " |")
    for label, (_, e) in tr["generation"].items():
        moved = [tr[n][label][1] for n in runs]
        if max(abs(m - e) for m in moved) >= 0.01:
            print(f"| {label} | | " + " | ".join(f"{m:+.1%}" for m in moved) + " |")
    for key, e in h100["generation"].items():
        moved = [h100[n][key] for n in runs]
        if max(abs(m - e) for m in moved) >= 0.01:
            print(f"| H100 run {key} | hopper | " + " | ".join(f"{m:+.1%}" for m in moved) + " |")


if __name__ == "__main__":
    main()
