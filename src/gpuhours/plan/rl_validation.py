"""A periodic validation pass inside an RL run's step (`validation_every_steps`,
`validation_prompts`): verl's trainer.test_freq and EasyR1's trainer.val_freq run it within
the step's timer (EasyR1 @8460e817 verl/trainer/ray_trainer.py `fit`: `_validate()` inside
`timer("step")` every val_freq steps), so a framework's mean step includes its share.

`_validate` (same file) syncs the weights to the engine (`prepare_rollout_engine`), generates
one response per validation prompt (`val_override_config.n: 1`, examples/config.yaml) in one
generate call, and scores them with the rule reward (no model). The pass is a synchronous
rollout like the step's: on a paged engine (vLLM, SGLang) the batch replayed through its
admission (plan/rl_paged.py); with HF generate, waves as large as memory holds, the last
waiting for its longest response. Pure functions; seconds.
"""

from __future__ import annotations

import math

from gpuhours.catalog.schema import GpuSpec
from gpuhours.plan.rl_paged import paged_batch
from gpuhours.setup import Generation


def validation_rollout_s(probe: Generation, cap: int, sequences_per_engine: int, longest: int,
                         gpu: GpuSpec, matmul: str, share: float) -> float:
    """Seconds one engine takes to generate its `sequences_per_engine` validation responses
    in one generate call: a paged engine's replay (plan/rl_paged.py, the engine's `share` of
    memory); else waves of at most `cap` sequences at the mean length, the last one lasting at
    least as long as the longest response decoded alone (the `rl` phase's static-batch rule)."""
    from gpuhours.estimate.generation import estimate_generation

    paged = paged_batch(probe, gpu, share, sequences_per_engine, longest, None, matmul)
    if paged is not None:
        return paged.seconds

    work = estimate_generation(probe.model_copy(update={"batch": min(cap, sequences_per_engine)}),
                               gpu, matmul)
    tail = estimate_generation(probe.model_copy(update={"batch": 1, "output_tokens": longest}),
                               gpu, matmul)
    waves = math.ceil(sequences_per_engine / work.batch)
    return max(waves * work.batch_time_s, (waves - 1) * work.batch_time_s + tail.batch_time_s)


def validation_per_step_s(pass_s: float, weight_sync_s: float, every_steps: int) -> float:
    """A validation pass's share of each step: (its rollouts + the weight sync before them)
    / the steps between passes."""
    return (pass_s + weight_sync_s) / every_steps
