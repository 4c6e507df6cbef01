"""A synchronous batch of rollouts in a paged KV cache (vLLM), decode step by decode step.

What the engine does (vLLM V1, vllm/v1/core/sched/scheduler.py `Scheduler.schedule`, read at
vllm-project/vllm@b4622cf9; the same loop in the 0.8-0.11 releases the RL rows ran; and
vllm/v1/core/kv_cache_manager.py `allocate_slots` @ace980e6):

- Each step first gives every RUNNING request a slot for its next token (`allocate_slots`:
  blocks for its tokens so far + the new one; None when `num_blocks_to_allocate >
  block_pool.get_num_free_blocks()`). When the cache has no room, the newest running request is
  preempted (`preempted_req = self.running.pop()` under FCFS): its blocks are freed,
  `num_computed_tokens = 0`, and it goes to the FRONT of the waiting queue
  (`waiting.prepend_request`), keeping its output tokens: on readmission its prompt and every
  token it had generated are prefilled again (recompute).
- Only when nothing was preempted in the step are WAITING requests admitted, in order, while
  fewer than `max_num_seqs` run and `allocate_slots` finds blocks for the tokens the request
  has now (its prompt; a preempted one's prompt + output). No room is kept for the tokens a
  request will generate: the cache is not reserved for the longest response.
- A request leaves when its response is complete, freeing its blocks for the next admission.

vLLM V0 (0.3-0.7, `BlockSpaceManager`) is the same rule, admission keeping a watermark of free
blocks (`watermark=0.01` of the cache) and preemption by recompute for single sequences.
SGLang reserves room for what its running and new requests may still generate (by its
new_token_ratio) and retracts the requests with the fewest output tokens when a decode step
lacks room (`SglangAdmission`).

The model here is a fluid replay of that loop on token counts (blocks of one token: the last
partly filled block of each sequence, under 16 tokens, is left out) for a batch whose response
lengths are given; it reports, for each stretch of decode steps with the same requests running,
the steps, the running sequences and their mean context, and each admission's prefill (fresh
prompts and recomputed ones). The step's time is then the engine's step cost summed over them
(estimate/generation.py `paged_rollout_time_s`). Out of it: the per-step token budget
(`max_num_batched_tokens`: chunked prefill spreads a big admission over steps, the same
prefill tokens in all), prefix caching (a preempted request's freed blocks may still hold its
prompt), and swapping instead of recompute.

Pure functions; tokens and decode steps.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass


def response_lengths_tokens(mean_tokens: float, longest_tokens: int, count: int) -> list[int]:
    """`count` response lengths with mean about `mean_tokens` and the longest `longest_tokens`,
    in the order the batch holds them.

    The shape is an assumption (a plan gives the mean and the longest, not the spread):
    length(q) = longest x q^k on the batch's quantiles q = (i + 1) / count, with
    k = longest / mean - 1 so that the continuous mean is `mean_tokens` (k = 0: every response
    as long as the longest; k = 1: spread evenly from 0 to the longest; larger k: most short,
    a few long). The last quantile is 1: one response of the batch is the longest, as a
    synchronous step's wait for it assumes. The lengths are then interleaved (a stride
    coprime with `count`) so that admission order is not length order, as a batch of prompts
    does not come sorted by the length of their answers."""
    if count < 1:
        raise ValueError("count must be at least 1")
    if not 0 < mean_tokens <= longest_tokens:
        raise ValueError("the mean response must be positive and at most the longest")
    k = longest_tokens / mean_tokens - 1.0
    by_quantile = [max(1, round(longest_tokens * ((i + 1) / count) ** k)) for i in range(count)]
    stride = max(1, round(count * 0.618))
    while math.gcd(stride, count) != 1:
        stride += 1
    return [by_quantile[(i * stride) % count] for i in range(count)]


@dataclass(frozen=True)
class DecodeStretch:
    """Decode steps during which the same requests run."""

    steps: int
    running_sequences: int
    #: the running sequences' mean tokens in the cache (prompt + output) over the stretch
    mean_context_tokens: float


@dataclass(frozen=True)
class Admission:
    """Requests admitted together and prefilled: fresh prompts, or preempted requests whose
    prompt and output so far are computed again."""

    sequences: int
    #: mean tokens each prefills (prompt; prompt + output for a recompute)
    mean_prefill_tokens: float
    recomputed: bool


@dataclass(frozen=True)
class PagedRollout:
    """The replay of one engine's synchronous batch."""

    stretches: tuple[DecodeStretch, ...]
    admissions: tuple[Admission, ...]
    #: decode steps from the first admission until the last response is complete
    decode_steps: int
    preemptions: int
    #: the most sequences running at once
    peak_running_sequences: int

    @property
    def recomputed_tokens(self) -> float:
        return sum(a.sequences * a.mean_prefill_tokens for a in self.admissions if a.recomputed)


@dataclass(frozen=True)
class VllmAdmission:
    """vLLM's rule: admit at the tokens a request has, keeping `watermark_tokens` free (V0's
    BlockSpaceManager watermark; none in V1); out of room, preempt the newest running request
    to the front of the queue, and admit nothing in that step."""

    watermark_tokens: float = 0.0


@dataclass(frozen=True)
class SglangAdmission:
    """SGLang's rule (python/sglang/srt/managers/schedule_policy.py `PrefillAdder`,
    schedule_batch.py `retract_decode`, scheduler.py `update_running_batch`; defaults from
    sglang/srt/environ.py): a new request is admitted when its prompt (a retracted one's
    prompt + output) and min(its remaining max_new_tokens, CLIP_MAX_NEW_TOKENS_ESTIMATION 4096)
    fit in what is free less each running request's min(remaining max_new_tokens, 4096) x
    new_token_ratio; the ratio starts at SGLANG_INIT_NEW_TOKEN_RATIO 0.7 and falls by
    (0.7 - 0.7 x SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR 0.14) / SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
    600 each decode step. When a decode step lacks a slot a request, requests are retracted,
    the fewest output tokens first, until SGLANG_RETRACT_DECODE_STEPS 20 steps of the rest fit;
    they go to the back of the queue (`_extend_requests_to_queue`), to be prefilled again, and
    the ratio is set to (their tokens decoded + 20 x running) / (their max_new_tokens + 1)."""

    max_new_tokens: int
    clip_tokens: int = 4096
    ratio_start: float = 0.7
    ratio_min_factor: float = 0.14
    decay_steps: int = 600
    retract_steps: int = 20
    #: decode steps between admission checks while requests wait (the ratio falls each step;
    #: re-checked every so many steps, not each)
    check_every_steps: int = 16


def paged_rollout(prompt_tokens: int, response_tokens: list[int], cache_tokens: float,
                  max_num_seqs: int | None,
                  admission: VllmAdmission | SglangAdmission = VllmAdmission(),
                  state_tokens_per_sequence: float = 0.0) -> PagedRollout:
    """Replay the scheduler on a batch: `response_tokens` in the batch's order, each after a
    prompt of `prompt_tokens`, in a KV cache of `cache_tokens` tokens, at most `max_num_seqs`
    running (None: no cap), under the engine's `admission` rule; each running request also
    holds `state_tokens_per_sequence` (a hybrid model's SSM state, in the cache's tokens), not
    prefilled. Decode steps and tokens; see the module docstring for the rule and its
    source."""
    longest = max(response_tokens)
    sglang = admission if isinstance(admission, SglangAdmission) else None
    watermark = 0.0 if isinstance(admission, SglangAdmission) else admission.watermark_tokens
    if prompt_tokens + longest + state_tokens_per_sequence > cache_tokens - watermark:
        # vLLM refuses to start when max_model_len does not fit in the cache
        raise ValueError(f"one sequence of {prompt_tokens + longest} tokens does not fit in a "
                         f"cache of {cache_tokens:.0f} tokens")
    cap = max_num_seqs if max_num_seqs is not None else len(response_tokens)
    # a request's tokens in the cache at step t: prompt + (t + base); it is done at
    # t = length - base. `running` holds ids in admission order (newest last)
    base: dict[int, int] = {}
    generated = [0] * len(response_tokens)
    waiting: deque[int] = deque(range(len(response_tokens)))
    running: list[int] = []
    finishing: list[tuple[int, int]] = []  # (step it completes, id); stale entries skipped
    occupied = 0.0  # tokens held by the running requests
    t = 0
    stretches: list[DecodeStretch] = []
    admissions: list[Admission] = []
    preemptions = peak = 0
    ratio = ratio_min = decay = 0.0
    if sglang is not None:
        ratio = sglang.ratio_start
        ratio_min = ratio * sglang.ratio_min_factor
        decay = (ratio - ratio_min) / sglang.decay_steps

    def held(i: int) -> float:
        return prompt_tokens + state_tokens_per_sequence + t + base[i]

    def release(i: int) -> None:
        nonlocal occupied, preemptions
        occupied -= held(i)
        generated[i] = t + base.pop(i)
        preemptions += 1

    while running or waiting:
        # 1. every running request needs one more slot this step
        preempted_now = False
        if running and occupied + len(running) > cache_tokens:
            preempted_now = True
            if sglang is None:  # vLLM: the newest, to the front of the queue, until room
                while running and occupied + len(running) > cache_tokens:
                    victim = running.pop()
                    release(victim)
                    waiting.appendleft(victim)
            else:  # SGLang: the fewest output tokens first, to the back of the queue
                order = sorted(running, key=lambda i: t + base[i], reverse=True)
                while len(order) > 1 and (cache_tokens - occupied
                                          < sglang.retract_steps * len(order)
                                          or len(order) == len(running)):
                    victim = order.pop()
                    release(victim)
                    waiting.append(victim)
                running = [i for i in running if i in base]
                decoded = sum(t + base[i] for i in running)
                ratio = min(1.0, (decoded + sglang.retract_steps * len(running))
                            / (sglang.max_new_tokens * len(running) + 1))
        # 2. admission (vLLM: not in a step that preempted) with what the growth leaves
        if sglang is not None or not preempted_now:
            fresh: list[int] = []
            again: list[int] = []
            if sglang is not None:
                room = cache_tokens - occupied - ratio * sum(
                    min(sglang.max_new_tokens - t - base[i], sglang.clip_tokens)
                    for i in running)
            else:
                room = cache_tokens - watermark - occupied - len(running)
            while waiting and len(running) < cap:
                i = waiting[0]
                need = prompt_tokens + state_tokens_per_sequence + generated[i]
                reserve = (0 if sglang is None else
                           min(sglang.max_new_tokens - generated[i], sglang.clip_tokens))
                if need + reserve > room:
                    break
                waiting.popleft()
                running.append(i)
                base[i] = generated[i] - t
                occupied += need
                room -= need + reserve
                heapq.heappush(finishing, (response_tokens[i] - base[i], i))
                (again if generated[i] else fresh).append(i)
            for group, recomputed in ((fresh, False), (again, True)):
                if group:
                    admissions.append(Admission(
                        len(group), sum(prompt_tokens + generated[i] for i in group)
                        / len(group), recomputed))
        if not running:
            raise AssertionError("no request could run")  # excluded by the check above
        peak = max(peak, len(running))
        # 3. the same requests run until the next one completes or the cache runs out
        while finishing and (finishing[0][1] not in base
                             or finishing[0][0] != response_tokens[finishing[0][1]]
                             - base[finishing[0][1]]):
            heapq.heappop(finishing)  # a preempted request's old entry
        r = len(running)
        until_done = finishing[0][0] - t
        until_full = int((cache_tokens - occupied) // r)  # >= 1 after step 1
        steps = max(1, min(until_done, until_full))
        if sglang is not None and waiting:
            steps = min(steps, sglang.check_every_steps)
        context = occupied / r - state_tokens_per_sequence + (steps + 1) / 2
        stretches.append(DecodeStretch(steps, r, context))
        t += steps
        occupied += r * steps
        ratio = max(ratio_min, ratio - decay * steps)
        # 4. the requests whose last token this was leave
        while finishing and finishing[0][0] <= t:
            _, i = heapq.heappop(finishing)
            if i in base and response_tokens[i] - base[i] == t:
                occupied -= held(i)
                del base[i]
                running.remove(i)
    return PagedRollout(tuple(stretches), tuple(admissions), t, preemptions, peak)
