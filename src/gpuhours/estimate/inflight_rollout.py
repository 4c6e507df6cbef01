"""NeMo-RL's asynchronous GRPO collector with in-flight weight updates, replayed group by group
on paged-cache engines beside a trainer, to its steady-state step.

What the collector does (NVIDIA-NeMo/RL nemo_rl/algorithms/async_utils.py, read at v0.6.0
5fb58893 and 108bffda; grpo.py `async_grpo_train`):

- `AsyncTrajectoryCollector._process_batch` starts one thread per prompt group (a prompt
  repeated `num_generations_per_prompt` times), in the dataloader's order, each after
  `_inflight_sema.acquire()`; the semaphore holds `num_prompts_per_step x
  max_trajectory_age_steps` permits, and a group's thread releases its permit in `finally`,
  after its rollout (`run_async_multi_turn_rollout`: every response of the group) is pushed to
  the replay buffer. So a group holds its slot until its longest response is complete, and a
  freed slot admits the next group at once, the next step's groups included.
- A batch's groups are generated for a target weight version: at weight version v the collector
  may generate for v+1 .. v+k (`_calculate_target_weights`, k = max_trajectory_age_steps; the
  initial version v+0 too), and `_should_pause_for_generation_limits` holds the next batch back
  until `set_weight_version` when every one of them is generated or under way.
- The trainer's step v takes exactly the step's groups whose target is v
  (`ReplayBuffer.sample`: it stalls, `exposed_generation`, until all are there), trains, and
  refits: `prepare_for_refit` stops new groups from starting but, with vLLM's async engine and
  `in_flight_weight_updates`, does not wait for the running ones; the weights go to the engines
  by `collective_rpc` (vllm_worker_async.py `update_weights_from_collective_async`), which
  vLLM's engine core runs between its steps (vllm/v1/engine/core.py
  `EngineCoreProc.run_busy_loop`: client requests are handled before each `step`, a UTILITY
  one by calling the method inline in `_handle_client_request`; read in a vLLM V1 copy whose
  commit was not pinned): the running requests wait through the refit and
  then decode on with the new weights and their old KV cache (nothing aborted or recomputed,
  unless recompute_kv_cache_after_weight_updates); then the version is v+1 and new groups start
  (`resume_after_refit`).
- Each response is its own request (`run_async_multi_turn_rollout` per sample), sent to the
  engines' data-parallel leaders in turn (vllm_generation.py `generate_async`: round robin), so
  a group's responses spread over the engines.

The model: the engines taken as one pool of `engines` alike engines (each holds 1/engines of
the running sequences: the pool's cache and max_num_seqs are the engine's x engines, and a
decode step costs what one engine's step with its share, running / engines, costs); inside
the pool vLLM V1's rule as estimate/paged_rollout.py replays it (FCFS admission at the tokens a
request has while fewer than max_num_seqs run, the newest running request preempted to the
front of the queue when the cache runs out, recomputed on readmission). The trainer's side is
one span of `train_s` seconds a step (its log-prob passes, reference, update), then the refit's
`sync_s`, through which the engines stall. Every step draws the same response lengths (an
assumption: a plan gives the mean and the longest, not each step's draw). The replay runs
enough steps to fill the pipeline and reports the mean of the later steps.

Pure functions; seconds (from the step-cost callables the caller passes), tokens and decode
steps.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CollectorReplay:
    """The steady state of the collector and the trainer (means over the later steps)."""

    #: seconds between the ends of two trainer steps (refit included)
    step_s: float
    #: seconds a step the engines ran (prefill or decode)
    engine_busy_s: float
    #: seconds a step the trainer waited for its step's last prompt group
    trainer_wait_s: float
    #: the most sequences running at once in the pool
    peak_running: int
    #: preemptions a step
    preemptions: float
    #: seconds a step of the engines' prefills (within engine_busy_s), and decode steps a step
    prefill_s: float
    decode_steps: float
    #: trainer steps replayed; the mean is over the last `measured_steps`
    steps_replayed: int
    measured_steps: int


def collector_replay(prompt_tokens: int, group_lengths: Sequence[Sequence[int]],
                     steps_ahead: int, engines: int, cache_tokens: float,
                     max_num_seqs: int | None,
                     decode_s: Callable[[float, float], float],
                     prefill_s: Callable[[float, float], float],
                     train_s: float, sync_s: float, steps: int | None = None
                     ) -> CollectorReplay:
    """Replay the collector (module docstring) on `engines` engines of `cache_tokens` KV cache
    tokens and `max_num_seqs` running sequences each (None: no cap): each step's prompt groups
    are `group_lengths` (each group's response lengths, tokens, after a prompt of
    `prompt_tokens`), `steps_ahead` steps' groups at most in flight (max_trajectory_age_steps);
    `decode_s(sequences, mean_context_tokens)` one engine's decode step,
    `prefill_s(sequences, mean_tokens)` one engine's prefill; the trainer's `train_s` and the
    refit's `sync_s` a step. `steps`: trainer steps replayed (default 4 x steps_ahead + 6)."""
    if steps_ahead < 1:
        raise ValueError(f"steps_ahead (max_trajectory_age_steps) must be at least 1, not "
                         f"{steps_ahead}")
    if engines < 1:
        raise ValueError(f"engines must be at least 1, not {engines}")
    if not group_lengths or any(not g for g in group_lengths):
        raise ValueError("group_lengths needs at least one group of at least one response")
    if any(n < 1 for g in group_lengths for n in g):
        raise ValueError("every response length must be at least 1 token")
    if train_s < 0 or sync_s < 0:
        raise ValueError("train_s and sync_s must not be negative")
    longest = max(max(g) for g in group_lengths)
    if prompt_tokens + longest > cache_tokens:
        raise ValueError(f"one sequence of {prompt_tokens + longest} tokens does not fit in a "
                         f"cache of {cache_tokens:.0f} tokens")
    total_steps = steps if steps is not None else 4 * steps_ahead + 6
    if total_steps < 2:
        raise ValueError("steps must be at least 2")
    groups_per_step = len(group_lengths)
    permits = groups_per_step * steps_ahead
    pool_cache = cache_tokens * engines
    pool_cap = max_num_seqs * engines if max_num_seqs is not None else None

    def per_engine(n: int) -> float:
        # the pool's sequences shared evenly; an engine with any runs at least one
        return max(1.0, n / engines)

    # sequences: their length, group (target step, index) and tokens generated when preempted
    length: list[int] = []
    group_of: list[tuple[int, int]] = []
    generated: list[int] = []
    left_in_group: dict[tuple[int, int], int] = {}
    groups_done = [0] * (total_steps + steps_ahead + 1)
    waiting: deque[int] = deque()
    running: dict[int, None] = {}  # admission order: the newest last
    start: dict[int, int] = {}  # decode step k at which a running sequence had 0 tokens
    finishing: list[tuple[int, int]] = []  # (decode step it completes, id); stale skipped
    occupied = 0.0
    k = 0  # decode steps so far
    t = 0.0
    # the collector: the next group to start, the groups holding a permit
    next_target, next_index, holding = 0, 0, 0
    version = 0  # the engines' weight version
    # the trainer: the step it waits for, when its training ends (None: not training)
    trainer_step, train_end = 0, None
    step_ends: list[float] = []
    busy_at_end: list[float] = []
    wait_at_end: list[float] = []
    pre_at_end: list[int] = []
    prefill_at_end: list[float] = []
    steps_at_end: list[int] = []
    busy = wait = prefilled = 0.0
    waiting_since: float | None = 0.0
    preemptions = peak = 0

    def held(i: int) -> float:
        return prompt_tokens + k - start[i]

    while trainer_step < total_steps:
        # the trainer: a step's batch complete starts its training; its end starts the refit,
        # through which the engines stall, and then the next weight version
        if train_end is None and groups_done[trainer_step] == groups_per_step:
            if waiting_since is not None:
                wait += t - waiting_since
                waiting_since = None
            train_end = t + train_s
        if train_end is not None and t >= train_end:
            t = max(t, train_end) + sync_s
            train_end = None
            version += 1
            step_ends.append(t)
            busy_at_end.append(busy)
            wait_at_end.append(wait)
            pre_at_end.append(preemptions)
            prefill_at_end.append(prefilled)
            steps_at_end.append(k)
            trainer_step += 1
            waiting_since = t
            continue
        # the collector: groups start in order while permits last, for targets up to
        # version + steps_ahead (not during a refit: it runs inside the branch above); it
        # runs on past the last step replayed, so that step is not starved
        while holding < permits and next_target <= version + steps_ahead:
            key = (next_target, next_index)
            left_in_group[key] = len(group_lengths[next_index])
            for n in group_lengths[next_index]:
                length.append(n)
                group_of.append(key)
                generated.append(0)
                waiting.append(len(length) - 1)
            holding += 1
            next_index += 1
            if next_index == groups_per_step:
                next_target, next_index = next_target + 1, 0
        # the engines: growth first (preempting the newest when the cache is out of room),
        # then admission when nothing was preempted
        preempted_now = False
        while running and occupied + len(running) > pool_cache:
            preempted_now = True
            victim = next(reversed(running))
            occupied -= held(victim)
            generated[victim] = k - start.pop(victim)
            del running[victim]
            waiting.appendleft(victim)
            preemptions += 1
        if not preempted_now:
            occupied_before = occupied
            room = pool_cache - occupied - len(running)
            fresh: list[int] = []
            again: list[int] = []
            while waiting and (pool_cap is None or len(running) < pool_cap):
                i = waiting[0]
                need = prompt_tokens + generated[i]
                if need > room:
                    break
                waiting.popleft()
                running[i] = None
                start[i] = k - generated[i]
                occupied += need
                room -= need
                heapq.heappush(finishing, (length[i] + start[i], i))
                (again if generated[i] else fresh).append(i)
            already = len(running) - len(fresh) - len(again)
            # the prompts of requests admitted beside running ones ride in the same forward
            # as the running requests' next tokens (vLLM V1's scheduler: one token budget for
            # both), whose weights are read once: the admission adds what its prefill costs
            # beyond that decode step (the step costs the larger of the two: a roofline)
            beside = (decode_s(per_engine(already), occupied_before / already)
                      if already else 0.0)
            for admitted in (fresh, again):
                if admitted:
                    took = max(0.0, prefill_s(per_engine(len(admitted)),
                                              sum(prompt_tokens + generated[i] for i in admitted)
                                              / len(admitted)) - beside)
                    beside = 0.0
                    t += took
                    busy += took
                    prefilled += took
        if not running:
            if train_end is None:
                raise AssertionError("the collector has nothing to run and the trainer "
                                     "nothing to train")  # excluded by the permits' rule
            t = max(t, train_end)  # the engines idle until the refit
            continue
        peak = max(peak, len(running))
        while finishing and (finishing[0][1] not in running
                             or finishing[0][0] != length[finishing[0][1]]
                             + start[finishing[0][1]]):
            heapq.heappop(finishing)
        r = len(running)
        until_done = finishing[0][0] - k
        until_full = int((pool_cache - occupied) // r)
        n_steps = max(1, min(until_done, until_full))
        context = occupied / r + (n_steps + 1) / 2
        step_s = decode_s(per_engine(r), context)
        if train_end is not None and step_s > 0:
            # the refit starts between two engine steps, once the training has ended
            n_steps = max(1, min(n_steps, math.ceil((train_end - t) / step_s)))
            context = occupied / r + (n_steps + 1) / 2
        t += n_steps * step_s
        busy += n_steps * step_s
        k += n_steps
        occupied += r * n_steps
        while finishing and finishing[0][0] <= k:
            _, i = heapq.heappop(finishing)
            if i in running and length[i] + start[i] == k:
                occupied -= held(i)
                del start[i]
                del running[i]
                key = group_of[i]
                left_in_group[key] -= 1
                if not left_in_group[key]:  # the group's last response: its permit back
                    del left_in_group[key]
                    holding -= 1
                    groups_done[key[0]] += 1
    measured = max(1, total_steps // 2)
    first = total_steps - measured - 1
    return CollectorReplay(
        step_s=(step_ends[-1] - step_ends[first]) / measured,
        engine_busy_s=(busy_at_end[-1] - busy_at_end[first]) / measured,
        trainer_wait_s=(wait_at_end[-1] - wait_at_end[first]) / measured,
        peak_running=peak,
        preemptions=(pre_at_end[-1] - pre_at_end[first]) / measured,
        prefill_s=(prefill_at_end[-1] - prefill_at_end[first]) / measured,
        decode_steps=(steps_at_end[-1] - steps_at_end[first]) / measured,
        steps_replayed=total_steps, measured_steps=measured)
