"""Does ZeRO-3/FSDP traffic left unhidden explain the per-micro-batch gap of the FSDP rows?
(issues 13 and 14)

A check of a mechanism, kept out of the estimate because the published rows do not support it
(docs/rl.md, EasyR1 notes, "FSDP traffic per micro-batch").

What the estimate charges now (estimate/timing.py _zero3_exposed_s, parallel.fsdp_exposed_s):
per micro-batch one all-gather of every unit's weights in forward, again in backward, and the
gradients' reduce-scatter in backward, each layer's traffic hidden behind at most one layer's
compute of the same pass and at most assumptions.COMM_OVERLAP (0.8) of it in all. That is what
the frameworks read for this check do per micro-batch:

- EasyR1 @8460e817 (`verl/workers/fsdp_workers.py`, `verl/workers/actor/dp_actor.py`, the rows
  20-23 of docs/rl.md): torch FSDP1 (`FullyShardedDataParallel`), FULL_SHARD,
  `forward_prefetch=False`, backward prefetch and `limit_all_gathers` at torch's defaults
  (BACKWARD_PRE, True), `MixedPrecision(param_dtype=bf16, reduce_dtype=fp32)`
  (`verl/workers/config.py` FSDPConfig: mp_param_dtype "bf16", mp_reduce_dtype "fp32"),
  non-reentrant checkpointing. `update_policy` calls `loss.backward()` for every micro-batch
  with no `no_sync`, so every micro-batch gathers and reduce-scatters, as the estimate has it.
  Two host syncs a micro-batch (`kl_loss.detach().item()` before the backward,
  `pg_loss.detach().item()` after it) drain the GPU's queue twice a micro-batch.
- Without forward_prefetch FSDP1 issues a unit's all-gather from its pre-forward hook, when the
  host reaches that unit; a host running ahead of the GPU (the rate limiter lets two gathers be
  in flight) still issues it during the unit before's compute, so the forward gathers can hide.

The what-ifs, each applied to ZeRO-3/FSDP traffic only (DDP and ZeRO-1/2 unchanged):

- `none_hidden`: every byte of every micro-batch's gathers and reduce-scatters exposed (the
  bound: no overlap at all);
- `forward_exposed`: the forward pass's gathers exposed (as if the host never ran ahead of the
  GPU there), the backward's as now.

Run: `PYTHONPATH=src:scripts python -m gpuhours_dev.validation.fsdp_check` prints the
validation tables' counts now and under each what-if, the ZeRO-3 fine-tuning rows' errors, and
EasyR1's policy update (rows 21 and 22 of docs/rl.md: the same tokens in 64 or 16 micro-batches
a GPU) with the cost per micro-batch it implies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from gpuhours.estimate import parallel as P
from gpuhours.estimate import timing
from gpuhours_dev.validation import patched_estimate

#: the MFU-implied policy update of docs/rl.md rows 21 and 22 (s) at row 21's tokens, and the
#: micro-batches a GPU runs in each (4 mini-batches of 16 or of 4): docs/rl.md, EasyR1 notes
#: (EasyR1's table: actor MFU 16.0% and 23.2% of 989 TFLOPS, its own FLOPs counter)
EASYR1_MEASURED_UPDATE_S = (67.0, 46.2)
EASYR1_MICRO_BATCHES = (64, 16)
#: the validation's RL cases (gpuhours_dev.validation.rl.CASES .row) of docs/rl.md rows 21, 22
EASYR1_CASE_ROWS = (19, 20)


def _none_hidden(gather_s: float, scatter_s: float, micro_batches: int, compute_s: float,
                 fwd_share: float, layers: int,
                 windows: tuple[float, float] = (1.0, 1.0)) -> float:
    """Every micro-batch's two gathers and one reduce-scatter, none of it hidden."""
    return micro_batches * (2 * gather_s + scatter_s)


def _forward_exposed(gather_s: float, scatter_s: float, micro_batches: int, compute_s: float,
                     fwd_share: float, layers: int,
                     windows: tuple[float, float] = (1.0, 1.0)) -> float:
    """The forward gathers in full; the backward's traffic as the estimate hides it (its
    window: parallel.fsdp_exposed_s)."""
    from gpuhours.estimate import assumptions as A

    m = micro_batches
    return m * (gather_s + P.fsdp_exposed_s(0.0, gather_s + scatter_s, compute_s * fwd_share / m,
                                            compute_s * (1 - fwd_share) / m, layers,
                                            A.COMM_OVERLAP.value, windows))


WHAT_IFS: dict[str, Callable[..., float]] = {"none_hidden": _none_hidden,
                                             "forward_exposed": _forward_exposed}


@contextmanager
def what_if(name: str | None) -> Iterator[None]:
    """Run the estimate with the ZeRO-3 exposure rule `name` (None: the estimate's own)."""
    original = timing._zero3_exposed_s
    if name is not None:
        timing._zero3_exposed_s = WHAT_IFS[name]
    try:
        with patched_estimate():  # nothing kept from or for the unpatched estimate
            yield
    finally:
        timing._zero3_exposed_s = original


def easyr1_updates_s(name: str | None = None) -> tuple[float, float]:
    """The predicted policy update (s) of docs/rl.md rows 21 and 22 under what-if `name`."""
    from gpuhours_dev.validation import rl

    cases = {c.row: c for c in rl.CASES}
    out = []
    with what_if(name):
        for row in EASYR1_CASE_ROWS:
            details, why = rl._details(cases[row])
            if details is None:
                raise RuntimeError(f"EasyR1 case {row} not expressed: {why}")
            out.append(float(details["policy_update_s"]))
    return out[0], out[1]


def per_micro_batch_s(updates_s: tuple[float, float]) -> float:
    """Seconds an update's extra micro-batches cost each: the difference of the two updates
    over the difference of their micro-batch counts (64 - 16 = 48). The rows' tokens differ a
    little (mean response 301 and 326 tokens); the measured figures are at row 21's tokens."""
    return (updates_s[0] - updates_s[1]) / (EASYR1_MICRO_BATCHES[0] - EASYR1_MICRO_BATCHES[1])


def main() -> None:
    from gpuhours_dev.validation import all_comparisons
    from gpuhours_dev.validation.report import summary

    keys = ("throughput", "throughput_hopper tune", "throughput_hopper held-out",
            "ft_throughput")
    zero3: dict[str, dict[str, float]] = {}
    for name in (None, *WHAT_IFS):
        with what_if(name):
            cs = all_comparisons()
        s = summary(cs)
        label = name or "now"
        print(f"{label:16s} " + "; ".join(f"{k} {s[k][0]}/{s[k][1]}" for k in keys))
        for c in cs:
            if c.kind == "ft_throughput" and c.error is not None and "ZeRO-3" in c.setup:
                zero3.setdefault(c.label, {})[label] = c.error
    print("\nZeRO-3/FSDP fine-tuning rows, error now / " + " / ".join(WHAT_IFS))
    for row, errs in zero3.items():
        print(f"  {row:40s} " + " / ".join(f"{100 * e:+6.1f}%" for e in errs.values()))
    measured = per_micro_batch_s(EASYR1_MEASURED_UPDATE_S)
    print(f"\nEasyR1 rows 21, 22 (docs/rl.md): measured update {EASYR1_MEASURED_UPDATE_S} s, "
          f"{measured:.2f} s a micro-batch")
    for name in (None, *WHAT_IFS):
        u = easyr1_updates_s(name)
        print(f"  {name or 'now':16s} update {u[0]:.1f} / {u[1]:.1f} s, "
              f"{per_micro_batch_s(u):.2f} s a micro-batch")


if __name__ == "__main__":
    main()
