"""Could the GPU's L2 cache explain the LoRA rows the estimate makes too slow? (issue 14)

A check of one mechanism, kept out of the estimate because the published rows do not support it
(docs/validation.md, "What remains off": Answer.AI and torchtune notes; docs/bench.md).

The mechanism. peft's LoRA branch (estimate/lora_traffic.py) is a chain of eager operators,
most of which read the tensor the operator before them has just written. NVIDIA's L2 is a
write-back cache, so such a read is served on chip when the tensor is still there; the estimate
charges every byte at the HBM rate. The rule checked here:

- which reads: only a read of the tensor written by the last operator before it that wrote a
  full-width tensor (operators writing only rank- or weight-sized tensors, such as the
  adapters' weight casts, B's input-gradient and A's weight-gradient matmuls, leave it in place;
  `producer_consumer_read_bytes`, counted from the same operator sequence as
  lora_traffic.branch_bytes_per_element); a read of a tensor saved from forward for backward,
  of the base layer's input or output, or of a dropout mask is not;
- when it hits: the tensor (tokens of one micro-batch x the width it spans x its element bytes)
  is at most `share` of the catalog's L2 (GpuSpec.l2_cache_mib, from NVIDIA's whitepapers).
  share 1.0 is the most the cache could hold; 0.5 leaves room for the consumer's own output,
  which it writes while it reads (an LRU cache that held only the input would evict the unread
  part) and is the usable share of A100's and H100's two-partition L2 where each partition
  caches for its own SMs (A100 whitepaper, 'L2 cache');
- what a hit costs: nothing (writes still reach HBM). The L2's own bandwidth is left out, so
  these figures are an UPPER bound on what the rule can take off.

The pure fp32 branch (fp32 adapters without autocast) is not split: no row compared here runs it.

Run: `PYTHONPATH=src:scripts python -m gpuhours_dev.validation.l2_check` prints, for every
compared fine-tuning throughput row and the H100 run's rows, the error now and with the rule at
share 1.0 and 0.5; then the GEMM share of the peak that Answer.AI's rows would need given the
estimate's other parts, and the next candidate as a what-if (`geforce_gemm`: the GeForce cards'
GEMMs at 0.90 of their dense peak, about what user microbenchmarks of torch's bf16 matmul show).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from gpuhours.catalog.schema import GpuSpec
from gpuhours.estimate import estimator as E
from gpuhours.estimate import lora_traffic as LT
from gpuhours.estimate import timing as T
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.lora import adapted_linears
from gpuhours.setup import Training
from gpuhours_dev.validation import patched_estimate

H100_RUN = Path(__file__).parent / "data" / "h100_2026-11-23"
SHARES = (1.0, 0.5)


@dataclass(frozen=True)
class BranchReads:
    """Bytes per element of peft's branch read from the tensor the previous operator wrote,
    by element size ({element bytes: bytes read}), for one token through one adapter; forward
    figures are per pass (checkpointing runs the forward twice)."""

    fan_in_forward: dict[float, float]
    fan_in_backward: dict[float, float]
    fan_out_forward: dict[float, float]
    fan_out_backward: dict[float, float]


def producer_consumer_read_bytes(a: float, fp32_adapters: bool, dropout: bool) -> BranchReads:
    """The reads of lora_traffic.branch_bytes_per_element (under autocast, or half adapters)
    whose tensor the previous operator wrote, `a` the activation bytes.

    fp32 adapters, forward per fan-in element: the dropout reads the cast's fp32 output (4),
    autocast's half copy reads the dropout's or the cast's output (4), A's matmul reads the half
    copy (a); the cast itself reads the layer input x, last written before the base GEMM: no.
    Backward: the half copy's cast-back reads A's input gradient (a), the dropout's backward
    reads that (4), the first cast's backward reads the dropout's gradient (4), the sum with
    the base layer's input gradient reads the branch's (a; the base's: no).
    Half adapters: A's matmul reads the dropout's output (a, when there is a dropout); in
    backward the dropout's backward reads A's input gradient (a) and the sum the branch's (a).
    Per fan-out element (either): the scaling reads B's output and the add the scaled
    product (2a; the base output: no); in backward B's input-gradient and weight-gradient
    matmuls read the scaling's gradient (2a: the first writes only rank-sized output; the
    incoming gradient: no)."""
    d = 1.0 if dropout else 0.0
    if fp32_adapters:
        fin_f = {4.0: 4.0 * (1 + d), a: a}
        fin_b = {4.0: 4.0 * (1 + d), a: 2 * a}
    else:
        fin_f = {a: a * d}
        fin_b = {a: a * d + a}
    return BranchReads(fin_f, fin_b, {a: 2 * a}, {a: 2 * a})


def l2_served_bytes_per_token_layer(arch: ModelArch, t: Training, a: float,
                                    l2_bytes: float) -> float:
    """Bytes of peft's branch per token and decoder layer that the rule serves from L2 (module
    docstring): each producer-consumer read whose tensor, t.tokens_per_micro_batch x the width
    it spans x its element bytes, is at most `l2_bytes`. 0 for a fused branch and for the pure
    fp32 branch."""
    branch = LT.lora_branch_of(t)
    fp32_adapters = branch == "peft-fp32" and t.precision != "fp32"
    autocast = t.precision.endswith(("-mixed", "-amp"))
    if branch == "fused" or (fp32_adapters and not autocast):
        return 0.0
    reads = producer_consumer_read_bytes(a, fp32_adapters, t.lora_dropout > 0)
    passes = 2.0 if t.checkpointing else 1.0
    n = t.tokens_per_micro_batch
    served = 0.0
    for ad in adapted_linears(arch, t.lora_targets):
        fan_in = LT._fan_in(arch, ad)
        for width, fwd, bwd in ((fan_in, reads.fan_in_forward, reads.fan_in_backward),
                                (ad.width - fan_in, reads.fan_out_forward,
                                 reads.fan_out_backward)):
            for table, times in ((fwd, passes), (bwd, 1.0)):
                served += sum(ad.active * times * b * width for e, b in table.items()
                              if n * width * e <= l2_bytes)
    return served / arch.num_layers


@contextmanager
def l2_served(share: float) -> Iterator[None]:
    """Estimates inside this block take the rule's L2 reads off the branch's traffic, at
    `share` of each GPU's catalog L2 (none where the catalog has no L2 figure)."""
    gpu: list[GpuSpec] = []
    step = T.training_step_time
    branch = T.lora_branch_bytes_per_token_layer

    def step_on(arch, t, hw, *args, **kwargs):  # type: ignore[no-untyped-def]
        gpu[:] = [hw.gpu]
        return step(arch, t, hw, *args, **kwargs)

    def branch_less_l2(arch: ModelArch, t: Training, a: float) -> float:
        total = branch(arch, t, a)
        mib = gpu[0].l2_cache_mib if gpu else None
        if not total or mib is None:
            return total
        return total - l2_served_bytes_per_token_layer(arch, t, a, share * mib * 2**20)

    # nothing kept from or for the unpatched estimate (patched_estimate)
    with mock.patch.object(E, "training_step_time", step_on), \
            mock.patch.object(T, "lora_branch_bytes_per_token_layer", branch_less_l2), \
            patched_estimate():
        yield


def finetune_errors() -> dict[str, tuple[str, float]]:
    """label -> (GPU generation, throughput error) of each compared fine-tuning row."""
    from gpuhours_dev.validation.finetune import finetune_comparisons

    out = {}
    for c in finetune_comparisons():
        err = c.error
        if c.kind == "ft_throughput" and err is not None:
            out[c.label] = (c.generation, err)
    return out


def h100_run_errors() -> dict[str, float]:
    """'row id method micro-batch x seq' -> step-time error (predicted / measured - 1) of the
    H100 run's ledger rows (tests/test_h100_run.py)."""
    from gpuhours.setup import Hardware
    from gpuhours.track.calibration import training_of
    from gpuhours.track.ledger import Ledger

    out = {}
    with tempfile.TemporaryDirectory() as d:
        copy = Path(d) / "ledger.sqlite"
        shutil.copy(H100_RUN / "ledger.sqlite", copy)
        with Ledger.open(copy) as ledger:
            for m in ledger.measurements():
                t, measured_s = training_of(m), m.step_time_median_s
                if m.status != "ok" or t is None or measured_s is None:
                    continue
                e = E.estimate_training(t, Hardware(gpu=m.environment["catalog_gpu"]), "h100")
                key = f"{m.id} {t.method} {t.micro_batch} x {t.seq_len}"
                out[key] = e.step_time_s.value / measured_s - 1
    return out


def gemm_share_needed(gpus: tuple[str, ...] = ("rtx-3090", "rtx-4090", "a100-40gb")
                      ) -> dict[str, float]:
    """label -> the share of the GPU's dense peak the GEMMs would need for the estimate to
    match the measured step, all else as estimated (compared Answer.AI rows on `gpus`): the
    estimate's GEMM efficiency x its matmul seconds / (measured step - the estimate's other
    seconds). Above 1: the other parts alone are too long. The step's other parts include the
    host's exposed time as combined for the estimated GPU time."""
    from gpuhours.setup import Hardware
    from gpuhours_dev.validation.finetune import (
        HOST_US_PER_OP,
        finetune_rows,
        mapped_rows,
        throughput_figure,
    )

    steps: list[T.StepTime] = []
    step = T.training_step_time

    def keep(*args, **kwargs):  # type: ignore[no-untyped-def]
        steps.append(step(*args, **kwargs))
        return steps[-1]

    out = {}
    with mock.patch.object(E, "training_step_time", keep):
        for m, r in zip(mapped_rows(), finetune_rows(), strict=True):
            t = m.training
            measured, _ = throughput_figure(r, m.source)
            if t is None or m.gpu is None or m.gpu.name not in gpus or measured is None \
                    or m.source != "Answer.AI" or m.skipped:
                continue
            host_us, _ = HOST_US_PER_OP.get(m.source, (None, ""))
            E.estimate_training(t, Hardware(gpu=m.gpu, num_gpus=m.num_gpus,
                                            host_us_per_op=host_us, pcie_lanes=m.pcie_lanes),
                                "gemm share")
            st = steps[0]
            steps.clear()
            measured_s = t.tokens_per_micro_batch * t.grad_accum / measured
            other_s = st.step_time_s - st.matmul_s
            out[f"{m.label} {m.gpu.name}"] = (st.gemm_efficiency * st.matmul_s
                                              / max(measured_s - other_s, 1e-9))
    return out


@contextmanager
def geforce_gemm(base: float, gpus: tuple[str, ...] = ("rtx-3090", "rtx-4090")
                 ) -> Iterator[None]:
    """The next candidate after the cache, as a what-if (docs/validation.md, Answer.AI note):
    estimates inside this block run the GEMMs of `gpus` at `base` x the width factor of
    timing.gemm_efficiency instead of their generation's assumption."""
    from gpuhours.estimate import assumptions as A

    gemm = T.gemm_efficiency

    def on_geforce(gpu: GpuSpec, hidden_size: int) -> float:
        if gpu.name in gpus:
            return base * hidden_size / (hidden_size + A.GEMM_HALF_WIDTH.value)
        return gemm(gpu, hidden_size)

    with mock.patch.object(T, "gemm_efficiency", on_geforce), patched_estimate():
        yield


def main() -> None:
    now_ft, now_h = finetune_errors(), h100_run_errors()
    with_ft, with_h = {}, {}
    for s in SHARES:
        with l2_served(s):
            with_ft[s], with_h[s] = finetune_errors(), h100_run_errors()
    head = " | ".join(f"L2 share {s:g}" for s in SHARES)
    print(f"| fine-tuning row (tokens/s error) | generation | now | {head} |")
    for label, (gen, err) in now_ft.items():
        moved = [with_ft[s][label][1] for s in SHARES]
        if any(abs(m - err) >= 0.0005 for m in moved) or gen in ("ada", "hopper"):
            cells = " | ".join(f"{m:+.1%}" for m in moved)
            print(f"| {label} | {gen} | {err:+.1%} | {cells} |")
    for gen in sorted({g for g, _ in now_ft.values()}):
        def within(errs: dict[str, tuple[str, float]], g: str = gen) -> str:
            e = [x for k, x in errs.values() if k == g]
            return (f"{sum(abs(x) <= 0.2 for x in e)}/{len(e)} within 20%, "
                    f"median {statistics.median(e):+.1%}")
        print(f"{gen}: now {within(now_ft)}; "
              + "; ".join(f"share {s:g}: {within(with_ft[s])}" for s in SHARES))
    with geforce_gemm(0.90):
        what_if = finetune_errors()
    print("\nwhat-if, GEMMs of the RTX 3090 and 4090 at 0.90 of the dense peak:")
    for label, (gen, err) in now_ft.items():
        if abs(what_if[label][1] - err) >= 0.0005:
            print(f"| {label} | {gen} | {err:+.1%} | {what_if[label][1]:+.1%} |")
    print("\n| Answer.AI row | GEMM share of dense peak needed |")
    for label, need in gemm_share_needed().items():
        print(f"| {label} | {need:.2f} |")
    print(f"\n| H100 run row (step-time error) | now | {head} |")
    for key, err in now_h.items():
        cells = " | ".join(f"{with_h[s][key]:+.1%}" for s in SHARES)
        print(f"| {key} | {err:+.1%} | {cells} |")


if __name__ == "__main__":
    main()
