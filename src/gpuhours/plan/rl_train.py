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

import math
from collections.abc import Callable
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


def role_split_text(actor_gpus: int, critic_gpus: int | None) -> str:
    """The formula's words for the roles' GPUs (plan/phases.py rl)."""
    if critic_gpus is None:
        return f"the policy's update on {actor_gpus} of the training GPUs"
    return (f"the policy's update on {actor_gpus} GPUs and the critic's on {critic_gpus} of its "
            "own at the same time (the step waits for the slower; OpenRLHF Ray's roles)")


def optimizer_steps(sequences: int, micro_batch: int, grad_accum: int, gpus: int,
                    epochs: int) -> int:
    """Optimizer steps a role takes over a step's sequences: its global batch is micro_batch x
    grad_accum x its data-parallel GPUs (DeepSpeed's train_batch_size)."""
    return epochs * math.ceil(sequences / (micro_batch * grad_accum * gpus))


def shared_host_adam_s(other_params: float) -> float:
    """Seconds one CPU Adam step of a role takes longer while another role's CPU Adam of
    `other_params` parameters streams the same host's memory at the same time (OpenRLHF Ray
    with --adam_offload: the actor and critic groups on one node step their optimizers
    together, each `optimizer_step` at the end of its accumulation). The host's rate is
    estimate/offload.py's per-node figure (HOST_ADAM_PARAMS_PER_S_PER_NODE, measured on
    another run): the other role's parameters / that rate. The two roles' steps are taken as
    coinciding (same micro-batches and accumulation and, for a critic the policy's size, the
    same pace): an upper end when they do not."""
    from gpuhours.estimate.offload import HOST_ADAM_PARAMS_PER_S_PER_NODE

    return other_params / HOST_ADAM_PARAMS_PER_S_PER_NODE.value


def role_updates_s(where: str, phase: Any, update_s: Callable[..., tuple[float, Any]],
                   sequences: int, train_gpus: int, gpus_per_node: int) -> RoleUpdates:
    """The actor's update on `phase.actor_gpus` and (with `critic_gpus`) the critic's on its
    own. `update_s(gpus, critic=False)` is the caller's (plan/phases.py): one role's update on
    that many GPUs through the analytic estimator with the phase's settings (with critic=True
    the critic's own ZeRO stage and offload where the phase gives them), as (seconds, its
    Training),
    raising when the role's shard does not fit; `where` names the plan file, line and phase.
    Raises InputError naming the field when the roles need more GPUs than the trainer has."""
    actor = phase.actor_gpus
    critic = phase.critic_gpus or 0
    if actor + critic > train_gpus:
        field = "critic_gpus" if critic else "actor_gpus"
        raise InputError(f"{where}, field '{field}'",
                         f"actor_gpus ({actor}) + critic_gpus ({critic}) exceed the {train_gpus} "
                         f"training GPUs (the phase's GPUs less rollout_gpus).",
                         "Give the phase more `gpus`, or the roles fewer.")

    policy, t = update_s(actor)
    if not phase.critic:
        return RoleUpdates(policy, 0.0, concurrent=False)
    if critic:
        critic_s, _ = update_s(critic, critic=True)
        if t.offload != "none" and train_gpus <= gpus_per_node:
            # both roles' CPU Adam on the one host at once: each step streams the other's
            # state too (the critic the policy's size)
            from gpuhours.estimate.params import count_params

            extra = shared_host_adam_s(count_params(t.arch).total)
            policy += extra * optimizer_steps(sequences, t.micro_batch, t.grad_accum, actor,
                                              phase.policy_epochs)
            critic_s += extra * optimizer_steps(sequences, t.micro_batch, t.grad_accum,
                                                critic, phase.policy_epochs)
        return RoleUpdates(policy, critic_s, concurrent=True)
    # no GPUs of its own: the critic trains after the actor, on the actor's GPUs
    own = phase.critic_training is not None
    return RoleUpdates(policy, update_s(actor, critic=True)[0] if own else policy,
                       concurrent=False)
