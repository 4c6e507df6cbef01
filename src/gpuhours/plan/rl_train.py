"""PPO's updates when each trained role holds GPUs of its own (issue 13).

OpenRLHF's Ray trainer places the actor, the critic, the reference and the reward model on GPU
groups of their own (`--actor_num_gpus_per_node`, `--critic_num_gpus_per_node`, ...) beside
the vLLM engines. Its update (OpenRLHF/OpenRLHF@dbdd43b0899b069a276fbc8813c6769011975806
`openrlhf/trainer/ray/ppo_actor.py`, `ActorPPOTrainer.ppo_train`): the actor group fires the
critic group's training (`critic.fit.remote()`), trains itself on its own GPUs, broadcasts the
new weights to the engines, then waits for the critic (`ray.get`). So:

- the actor's update runs data-parallel over `actor_gpus` only (its ZeRO shards, its global
  batch of micro-batch x accumulation x actor_gpus sequences per optimizer step);
- the critic's update over `critic_gpus`, at the same time: the pair lasts as long as the
  slower of the two, not their sum;
- the weight broadcast to the engines runs inside the same timer, before the wait.

`role_updates_s` estimates each role's update on its own GPUs with the same analytic estimator
as every training phase (its memory checked there: a 13B actor's ZeRO shards over 2 GPUs hold
twice what they hold over 4). The scoring forwards (reference, reward, the critic's values)
still spread over all the training GPUs (`plan.phases.rl`): per-role scoring is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuhours.errors import InputError


@dataclass(frozen=True)
class RoleUpdates:
    """Seconds of one RL step's updates with the trained roles on GPUs of their own."""

    policy_s: float        # the actor's update on actor_gpus
    critic_s: float        # the critic's update on critic_gpus (0 without a critic)
    concurrent: bool       # the critic trains at the same time as the actor (its own GPUs)


def critic_added_s(policy_s: float, critic_s: float, concurrent: bool) -> float:
    """Seconds the critic's update adds to the step beyond the actor's: all of it when it
    follows the actor's on the same GPUs; when it trains on its own GPUs at the same time
    (OpenRLHF ppo_actor.py: `critic.fit.remote()`, the actor's update, `ray.get`), only what
    outlasts the actor's update (the pair lasts max(actor, critic))."""
    return max(0.0, critic_s - policy_s) if concurrent else critic_s


def role_updates_s(ctx: Any, phase: Any, s: dict[str, Any], seq_tokens: int,
                   sequences: int, train_gpus: int) -> RoleUpdates:
    """The actor's update on `phase.actor_gpus` and (with `critic_gpus`) the critic's on its
    own, each through the analytic estimator with the phase's settings `s` (micro_batch,
    grad_accum, zero_stage, offload...) at `seq_tokens` a sequence. Raises InputError naming
    the field when the roles need more GPUs than the trainer has or a role's shard does not
    fit."""
    # lazy: plan.phases imports this module's caller side
    from gpuhours.plan.phases import _where, check_fits, estimate_phase, training_setup

    actor = phase.actor_gpus
    critic = phase.critic_gpus or 0
    if actor + critic > train_gpus:
        field = "critic_gpus" if critic else "actor_gpus"
        raise InputError(f"{_where(ctx, phase)}, field '{field}'",
                         f"actor_gpus ({actor}) + critic_gpus ({critic}) exceed the {train_gpus} "
                         f"training GPUs (the phase's GPUs less rollout_gpus).",
                         "Give the phase more `gpus`, or the roles fewer.")

    def update_s(gpus: int) -> float:
        t, hw, basis = training_setup(ctx, phase, {**s, "seq_len": seq_tokens, "gpus": gpus})
        e = estimate_phase(ctx, t, hw, basis, tokens=sequences * seq_tokens)
        check_fits(ctx, phase, e)
        return float(phase.policy_epochs * sequences * t.llm_seq_len / e.tokens_per_s.value)

    policy = update_s(actor)
    if not phase.critic:
        return RoleUpdates(policy, 0.0, concurrent=False)
    if critic:
        return RoleUpdates(policy, update_s(critic), concurrent=True)
    # no GPUs of its own: the critic trains after the actor, on the actor's GPUs
    return RoleUpdates(policy, policy, concurrent=False)
