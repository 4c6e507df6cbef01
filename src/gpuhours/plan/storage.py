"""Storage of a plan's phases, from physics where it can be: checkpoint sizes from the model and
method, datasets from the tokens trained on, rollout buffers from the RL phase's generations,
logs from a stated rate. Checkpoint write time, where the plan states a disk, is time the GPUs
wait (synchronous saves)."""

from __future__ import annotations

import math
from typing import Any

from gpuhours.estimate.figures import Figure, assumed
from gpuhours.setup import Training
from gpuhours.storage import budget as sb


def stated_storage(phase: Any, wall_hours: float) -> dict[str, Figure]:
    """Storage of a phase without a training setup (online, fixed): logs and stated bytes."""
    cfg = phase.storage
    parts: dict[str, Figure] = {}
    if cfg is None:
        return parts
    if cfg.log_gb_per_hour:
        parts["logs"] = sb.log_bytes(wall_hours, cfg.log_gb_per_hour * 1e9)
    if cfg.other_gb:
        parts["other"] = assumed(cfg.other_gb * 1e9, "bytes", "stated in the plan")
    return parts


def phase_storage(phase: Any, t: Training, tokens: float, steps: float, wall_hours: float,
                  rollouts: float = 0.0, rollout_tokens: float = 0.0,
                  disk_write_gb_per_s: float | None = None) -> tuple[dict[str, Figure], float]:
    """(bytes by part, seconds of checkpoint writing) for one run of a training phase."""
    cfg = phase.storage
    if cfg is None:
        return {}, 0.0
    parts: dict[str, Figure] = {}
    per_ckpt = sb.checkpoint_bytes_for(t, with_optimizer=cfg.with_optimizer)
    if cfg.checkpoints_kept:
        parts["checkpoints"] = sb.retained_checkpoints_bytes(per_ckpt, cfg.checkpoints_kept)
    parts["dataset"] = sb.tokenized_dataset_bytes(tokens, t.arch.vocab_size, cfg.dataset_layout)
    if rollouts and cfg.keep_rollouts:
        parts["rollouts"] = sb.rollout_buffer_bytes(rollouts, rollout_tokens)
    parts.update(stated_storage(phase, wall_hours))
    write_s = 0.0
    if disk_write_gb_per_s and cfg.save_every_steps:
        saves = math.floor(steps / cfg.save_every_steps)
        write_s = sb.checkpoint_write_s(per_ckpt, disk_write_gb_per_s, saves).value
    return parts, write_s
