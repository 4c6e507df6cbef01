"""Expected downtime of a long run on many GPUs: interruptions, restarts, lost work, checkpoints.

A step time holds none of the wall clock that a real run loses: a job on N GPUs is interrupted
at a rate that grows with N (a failed GPU, link, host or switch stops every rank), each
interruption costs a restart (detect, reschedule, re-initialise, load the last checkpoint) and
the work done since the last checkpoint, and the checkpoints themselves take time to write.
Published pretraining totals are wall clock x GPUs, so they hold all of it; this module
estimates it, so that the two are compared like with like.

The model (first order in checkpoint write time / time between failures, Young 1974):
- interruptions per GPU-hour `rate`; the job's mean time between failures M = 1 / (rate x N);
- a checkpoint of the model and optimizer state (C seconds to write, blocking) every
  tau = sqrt(2 C M) seconds of work (Young 1974, "A first order approximation to the optimum
  checkpoint interval", CACM 17(9); Daly 2006 adds higher-order terms, negligible while C << M);
- each interruption loses tau / 2 of work on average and costs the restart time R;
- the wall clock W solves W = P (1 + C / tau) + (W / M) (R + tau / 2): interruptions also
  strike during re-done work and restarts, so W = P (1 + C / tau) / (1 - (R + tau / 2) / M).

Left out: interruptions that take longer than a restart to repair (a job that waits for a
spare node), stragglers, evaluations during training, data-loader stalls, planned maintenance
that drains the job at a checkpoint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuhours.errors import FieldError, InputError
from gpuhours.estimate.assumptions import Assumption

#: Unexpected job interruptions per GPU-hour: 419 unexpected interruptions in a 54-day snapshot
#: of Llama 3 405B pretraining on 16,384 H100 GPUs (Llama 3 paper, Dubey et al. 2024,
#: arXiv 2407.21783, sec. 3.3.4 and table 5; 466 interruptions in all, the 47 planned ones,
#: firmware and configuration updates, are left out: a planned stop can wait for a
#: checkpoint). 419 / (54 x 24 x 16,384) = 1.97e-5 per GPU-hour, about one per 3 hours of the
#: 16K-GPU job. Not set from any validation row; the OPT-175B paper (Zhang et al. 2022,
#: arXiv 2205.01068, sec. 2.5: "at least 35 manual restarts" over 2 months on 992 A100s) gives
#: a lower bound of the same order, 35 / (61 x 24 x 992) = 2.4e-5.
INTERRUPTIONS_PER_GPU_HOUR = Assumption(
    "interruptions_per_gpu_hour", 419 / (54 * 24 * 16384), "per GPU-hour",
    "Llama 3 paper (arXiv 2407.21783) sec. 3.3.4: 419 unexpected interruptions in 54 days on "
    "16,384 H100s")

#: Time from an interruption to training again: detect the failure, take the bad host out,
#: reschedule the job, initialise the communicators and load the last checkpoint.
RESTART_S = Assumption(
    "restart_s", 15 * 60.0, "s",
    "assumption: 15 minutes from an interruption to the next step (detection, rescheduling, "
    "communicator start-up, checkpoint load); the Llama 3 paper reports automated recovery "
    "without a time, and no published restart time was read for these stacks")

#: Checkpoint storage write bandwidth per GPU of the job: Meta's Tectonic for the Llama 3
#: cluster sustains 2 TB/s (peak 7 TB/s) for 16,384 GPUs (Llama 3 paper sec. 3.3.1,
#: "Storage"), 2e12 / 16,384 = 0.122 GB/s per GPU; taken to scale with the job (each rank
#: writes its shard, as Megatron-LM's and torch.distributed.checkpoint's sharded saves do).
STORAGE_WRITE_GB_PER_S_PER_GPU = Assumption(
    "storage_write_gb_per_s_per_gpu", 2e12 / 16384 / 1e9, "GB/s per GPU",
    "Llama 3 paper sec. 3.3.1: Tectonic sustains 2 TB/s for the 16,384-GPU cluster; sharded "
    "writes, blocking (no asynchronous save assumed)")


@dataclass(frozen=True)
class Downtime:
    """Expected wall clock a run loses beyond its steps, in seconds of the whole job."""

    productive_s: float
    interruptions: float
    mtbf_s: float
    checkpoint_write_s: float
    checkpoint_interval_s: float
    checkpoints: float
    restarts_s: float
    lost_work_s: float
    checkpoint_writes_s: float

    @property
    def downtime_s(self) -> float:
        return self.restarts_s + self.lost_work_s + self.checkpoint_writes_s

    @property
    def wall_s(self) -> float:
        return self.productive_s + self.downtime_s

    @property
    def goodput(self) -> float:
        """Fraction of the wall clock spent on steps that count (1.0 with no downtime)."""
        return self.productive_s / self.wall_s if self.wall_s > 0 else 1.0


def job_mtbf_s(interruptions_per_gpu_hour: float, num_gpus: int) -> float:
    """Mean seconds between interruptions of a job on `num_gpus` GPUs: 3600 / (rate x N)
    (interruptions independent per GPU, as a per-GPU-hour rate assumes)."""
    if interruptions_per_gpu_hour <= 0:
        return math.inf
    return 3600.0 / (interruptions_per_gpu_hour * num_gpus)


def young_interval_s(checkpoint_write_s: float, mtbf_s: float) -> float:
    """Young's optimum checkpoint interval sqrt(2 C M), seconds of work between checkpoints
    (Young 1974, CACM 17(9)); infinite (never checkpoint for failures) when nothing fails."""
    if math.isinf(mtbf_s):
        return math.inf
    return math.sqrt(2.0 * checkpoint_write_s * mtbf_s)


def expected_downtime(productive_s: float, num_gpus: int, checkpoint_bytes: float,
                      interruptions_per_gpu_hour: float, step_time_s: float,
                      restart_s: float = RESTART_S.value,
                      storage_gb_per_s_per_gpu: float = STORAGE_WRITE_GB_PER_S_PER_GPU.value,
                      rate_is_default: bool = False) -> Downtime:
    """Expected restarts, lost work and checkpoint writes of a run of `productive_s` seconds
    of steps on `num_gpus` GPUs (module docstring). The checkpoint interval is Young's, and at
    least one step (a checkpoint is written between optimizer steps). `rate_is_default`: the
    rate is INTERRUPTIONS_PER_GPU_HOUR, not the user's (said so if the run cannot finish)."""
    if productive_s < 0 or num_gpus < 1 or checkpoint_bytes < 0:
        raise InputError("downtime", "expected seconds >= 0, GPUs >= 1, bytes >= 0.")
    m = job_mtbf_s(interruptions_per_gpu_hour, num_gpus)
    write_s = checkpoint_bytes / (storage_gb_per_s_per_gpu * 1e9 * num_gpus)
    tau = max(young_interval_s(write_s, m), step_time_s)
    if math.isinf(m):
        return Downtime(productive_s, 0.0, m, write_s, tau, 0.0, 0.0, 0.0, 0.0)
    lost_share = (restart_s + tau / 2) / m
    if lost_share >= 1:
        rate = (f"not given, so the default of {interruptions_per_gpu_hour:.3g} interruptions "
                f"per GPU-hour (the Llama 3 paper's 16K-H100 run) applies: at that rate"
                if rate_is_default else f"at {interruptions_per_gpu_hour:g} interruptions per "
                f"GPU-hour")
        whose = "your cluster's" if rate_is_default else "a lower"
        # the checkpoint interval is one optimizer step at least: a step longer than the time
        # between interruptions is the cause then, not the rate (issue 16: a huge global batch)
        by_step = tau == step_time_s and step_time_s > young_interval_s(write_s, m)
        half = (f"half a checkpoint interval ({tau / 2 / 60:,.1f} min"
                + (f": the interval is one optimizer step at least, {step_time_s / 60:,.1f} min"
                   if by_step else "") + ")")
        raise FieldError("interruptions_per_gpu_hour", (
            f"{rate} a job on {num_gpus} GPUs is interrupted every {m / 60:,.1f} minutes, no "
            f"more than a restart ({restart_s / 60:.0f} min) plus {half}: it never finishes. "
            + ("Make the optimizer step shorter (a smaller global batch), or give "
               if by_step else "Give ") + f"{whose} rate, or 0 to leave downtime out."))
    work_s = productive_s * (1 + write_s / tau)
    wall_s = work_s / (1 - lost_share)
    n = wall_s / m
    return Downtime(productive_s=productive_s, interruptions=n, mtbf_s=m,
                    checkpoint_write_s=write_s, checkpoint_interval_s=tau,
                    checkpoints=productive_s / tau, restarts_s=n * restart_s,
                    lost_work_s=n * tau / 2, checkpoint_writes_s=productive_s * write_s / tau)
