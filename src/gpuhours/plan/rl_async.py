"""How an RL step's rollouts and training overlap when the trainer does not wait for the whole
batch: local updates on the prompts already finished, before one weight sync (verl's
fully_async_policy, volcengine/verl@df340d703292538fafc1439b4aa9f1f226ccadc5
`verl/experimental/fully_async_policy/`). Pure functions of the parts' seconds; the parts
themselves come from `plan.phases.rl`."""

from __future__ import annotations


def pipelined_step_s(rollout_s: float, train_s: float, sync_s: float,
                     updates_per_sync: int) -> float:
    """Seconds of one synchronous RL step on dedicated rollout GPUs whose trainer makes
    `updates_per_sync` (k) local updates per weight sync, each on 1/k of the step's prompts as
    soon as the engines have finished them.

    verl's "stream off policy pipeline" (fully_async_policy with staleness_threshold 0 and
    trigger_parameter_sync_step = k): the rollouter issues exactly one sync's prompts per
    parameter version (`fully_async_rollouter.py` `_should_pause_generation`: it pauses at
    `max_required_samples` = required x (1 + staleness) x trigger), and the trainer takes
    `require_batches x ppo_mini_batch_size` finished prompts from the queue per local update
    (`fully_async_trainer.py` `_get_samples_from_queue`), syncing after the k-th
    (`_trigger_parameter_sync_after_step`). So the last local update can only start when the
    rollouts end (its prompts include the step's longest response), and the first when 1/k of
    them are done:

        step = max(rollout, rollout / k + (k - 1) / k x train) + train / k + sync

    `rollout_s` is the engines' time for the step (waiting for its longest response),
    `train_s` the training side's (every local update), `sync_s` the weight sync; the first
    batch is taken as arriving after 1/k of the rollouts (an assumption: finished prompts
    arrive evenly; short responses finish first, so the first batch comes earlier if
    anything). k = 1 is the plain synchronous sum rollout + train + sync; a trainer slower than
    the engines waits only for the first batch."""
    if updates_per_sync < 1:
        raise ValueError(f"updates_per_sync must be at least 1, not {updates_per_sync}")
    k = updates_per_sync
    return max(rollout_s, rollout_s / k + (k - 1) / k * train_s) + train_s / k + sync_s


def hidden_training_s(rollout_s: float, train_s: float, sync_s: float,
                      updates_per_sync: int) -> float:
    """Seconds of training the pipeline hides under the rollouts: the plain synchronous step
    (rollout + train + sync) less `pipelined_step_s`; 0 when `updates_per_sync` is 1."""
    return (rollout_s + train_s + sync_s
            - pipelined_step_s(rollout_s, train_s, sync_s, updates_per_sync))


def overlapped_bottleneck(rollout_s: float, training_parts_s: dict[str, float],
                          serial_parts_s: dict[str, float] | None = None) -> str:
    """What bounds an RL step whose rollouts overlap its training side, step = max(rollout,
    training side) + the serial parts (the weight sync, validation: `serial_parts_s`)
    (NeMo-RL's one-step-off GRPO, verl's fully-async trainer): a serial part when it outlasts
    the overlapped max; else the rollouts ("rollout generation") when they last at least as
    long as the training side (the sum of `training_parts_s`, each part's seconds by name),
    else the training side's longest part. A part longer than any other does not bound such a
    step unless its side sets the step: 103 s of rollouts beside 19 + 19 + 95 s of log-prob
    passes and update is bounded by the update (the 132 s side), not the rollouts."""
    if not training_parts_s:
        raise ValueError("the training side needs at least one part")
    training = sum(training_parts_s.values())
    serial = {k: v for k, v in (serial_parts_s or {}).items() if v > max(rollout_s, training)}
    if serial:
        return max(serial, key=lambda k: serial[k])
    if rollout_s >= training:
        return "rollout generation"
    return max(training_parts_s, key=lambda k: training_parts_s[k])
