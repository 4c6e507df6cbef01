"""A one-step-off RL step under NeMo-RL's collector with in-flight weight updates
(`in_flight_weight_updates`): the step's prompt groups replayed on the rollout engines beside
the trainer (estimate/inflight_rollout.py) at the engine's step cost
(estimate/generation.py `paged_step_costs`), in the cache `paged_cache_tokens` gives.

What changes from max(rollouts, training side) + sync: a prompt group frees its collector slot
when its longest response ends, and the next step's groups take freed slots at once, so the
engines run the next step's responses while this step's longest ones finish, and through the
training side; the refit stalls the running responses instead of waiting for them. What stays:
the collector's slots (prompts_per_step x rollout_steps_in_flight groups) and the rule that a
step's groups start only once the engines hold the weights they are generated for, so part of
each step's tail still shows.
Pure functions; seconds and tokens.
"""

from __future__ import annotations

from gpuhours.catalog.schema import GpuSpec
from gpuhours.estimate.generation import (
    engine_max_num_seqs,
    paged_cache_tokens,
    paged_step_costs,
)
from gpuhours.estimate.inflight_rollout import CollectorReplay, collector_replay
from gpuhours.estimate.paged_rollout import response_lengths_tokens
from gpuhours.setup import Generation


def group_lengths_tokens(mean_tokens: float, longest_tokens: int, groups: int,
                         per_group: int) -> list[list[int]]:
    """A step's response lengths (`response_lengths_tokens`: mean `mean_tokens`, the longest
    `longest_tokens`, interleaved so that batch order is not length order) cut into `groups`
    prompt groups of `per_group` consecutive responses: each group's lengths spread as the
    batch's do (an assumption: a plan gives no figure for how a prompt's responses vary about
    the batch's)."""
    lengths = response_lengths_tokens(mean_tokens, longest_tokens, groups * per_group)
    return [lengths[g * per_group:(g + 1) * per_group] for g in range(groups)]


def inflight_step(probe: Generation, gpu: GpuSpec, share: float, engines: int, groups: int,
                  per_group: int, longest: int, steps_ahead: int, train_s: float,
                  sync_s: float, matmul: str, rollout_scale: float = 1.0) -> CollectorReplay:
    """The steady-state step of `groups` prompt groups of `per_group` responses (mean
    `probe.output_tokens`, the longest `longest`) on `engines` engines of `probe`'s setup in
    `share` of each GPU, `steps_ahead` steps' groups in flight, beside `train_s` of training
    and `sync_s` of refit a step. `rollout_scale` stretches the engines' steps for rollout-side
    seconds the engine step does not hold (the reward's host work: its share of the rollout
    side taken as spread over the engines' time)."""
    cache_tokens, state_tokens = paged_cache_tokens(probe.arch, probe, gpu, share)
    decode, prefill = paged_step_costs(probe, gpu, matmul)
    # a hybrid model's SSM state a sequence held beside its tokens: counted with the prompt
    held_prompt = probe.prompt_tokens + round(state_tokens)
    return collector_replay(
        held_prompt, group_lengths_tokens(probe.output_tokens, longest, groups, per_group),
        steps_ahead, engines, cache_tokens, engine_max_num_seqs(probe, gpu),
        lambda n, ctx: rollout_scale * decode(n, ctx),
        lambda n, tokens: rollout_scale * prefill(n, tokens), train_s, sync_s)
