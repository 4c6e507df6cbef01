"""A rule reward's host time in an RL step (issue 13).

A rule reward is CPU work: each response's answer is extracted and checked against the gold
one, in Python. Where it sits in the step is the framework's loop, read in its code:

- NeMo-RL (nemo_rl/environments/math_environment.py, experience/rollouts.py, algorithms/grpo.py
  @108bffda; the same at v0.6.0): HFVerifyWorker runs Math-Verify's `math_metric` (gold:
  LatexExtractionConfig; prediction: ExprExtractionConfig + LatexExtractionConfig) one response
  after another. With vLLM's async_engine false, `run_multi_turn_rollout` generates the whole
  batch, then `calculate_rewards` sends it to the MathEnvironment actor, whose `step` splits
  it with `chunk_list_to_workers` (ceil(n / num_workers) a chunk) over `env.math.num_workers`
  Ray workers (8 in grpo_math_1B.yaml) and waits for all: serial with the step, inside its
  "generation" timer ("batch" here). With async_engine true, `run_async_multi_turn_rollout`
  calls `calculate_rewards` on each sample as its generation ends, a one-sample batch (so one
  worker) through the one environment actor, whose synchronous `step` takes one call at a
  time: the responses are scored one after another while the others still generate
  ("per_response"); the one-step-off loop runs the same in its trajectory collector, on the
  rollout side.
- verl: the naive and dapo reward managers (verl/workers/reward_manager/) are a Python loop
  over the batch in one process ("batch", 1 worker) where the trainer calls them after the
  rollout; at volcengine/verl@df340d70 reward_model.use_reward_loop is on by default and, with
  no reward model, the agent loop scores each sample as its generation ends in its
  RewardLoopWorker (agent_loop.py _compute_score): per_response. prime.py uses a process
  pool. NeMo-RL's dapo_math_verify and verl's math_dapo score only the last 300 characters.

Per-response seconds: measured on this project's 2-core VM (AMD EPYC, Python 3.11, one
process) by scripts/bench_reward_host.py with the packages' own functions (math-verify 0.8.0,
latex2sympy2-extended 1.10.2, sympy 1.14.0 as NeMo-RL's uv.lock pins them; verl 0.9.1's
math_dapo.py), on synthetic math-like responses of 4 characters a token ending in \\boxed{},
the mean over four runs' 312 correct and 312 wrong answers at each length (one run to the next
the mean moved by up to 30% at 2,000 tokens on this shared VM). Responses cut at the length cap
before their answer took 2-3x longer (5.4 ms at 1,000 tokens, 19 ms at 8,000): not in these
figures, as the rows do not say how many hit the cap. For the rows' hosts they are an
assumption (a faster server core would take less). Not timed: detokenising the responses, Ray's
calls, the batch's transfer to the workers.

Pure functions; seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# (response tokens, mean seconds a response): Math-Verify's math_metric as NeMo-RL's
# HFVerifyWorker calls it; measured on this VM (scripts/bench_reward_host.py, 2026-11-25,
# four runs pooled), an assumption for other hosts
MATH_VERIFY_S = ((500, 1.78e-3), (1_000, 1.85e-3), (2_000, 3.00e-3), (4_000, 3.57e-3),
                 (8_000, 5.92e-3))
# verl's math_dapo.compute_score (the last 300 characters: no trend with length, 28-31 us at
# 500 to 8,000 tokens); measured on this VM, an assumption for other hosts
STRING_MATCH_S = 2.8e-5
SOURCE = ("measured on this project's 2-core VM (scripts/bench_reward_host.py), an assumption "
          "for the run's host")


def per_response_s(verifier: str, response_tokens: float) -> float:
    """Seconds one host core takes to score one response of `response_tokens` tokens: the
    measured table, linear between its lengths, the first length's figure below it and the last
    segment's slope beyond it. `none`: 0."""
    if verifier == "none":
        return 0.0
    if verifier == "string-match":
        return STRING_MATCH_S
    if verifier != "math-verify":
        raise ValueError(f"unknown verifier {verifier!r}")
    pts = MATH_VERIFY_S
    if response_tokens <= pts[0][0]:
        return pts[0][1]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if response_tokens <= x1:
            return y0 + (y1 - y0) * (response_tokens - x0) / (x1 - x0)
    (x0, y0), (x1, y1) = pts[-2], pts[-1]
    return y1 + (y1 - y0) * (response_tokens - x1) / (x1 - x0)


def largest_chunk(sequences: int, workers: int) -> int:
    """The most responses one worker scores: NeMo-RL's chunk_list_to_workers cuts the batch in
    chunks of ceil(n / workers) (environments/utils.py @108bffda)."""
    return math.ceil(sequences / max(1, workers)) if sequences > 0 else 0


@dataclass(frozen=True)
class RewardHost:
    """The reward's host seconds a step: all of it (`total_s`, summed over responses and
    workers: the CPU's work) and what the step waits for (`critical_s`)."""

    total_s: float
    critical_s: float
    text: str


def reward_host(verifier: str | None, workers: int, per_response: bool, sequences: int,
                response_tokens: float, rollout_s: float) -> RewardHost:
    """The reward's host seconds a step for `sequences` responses of `response_tokens` tokens
    (the mean).

    - batch (per_response false): after the rollout, `workers` processes each score a chunk of
      ceil(sequences / workers) responses; the step waits for the largest chunk.
    - per_response: each response scored as its generation ends, one at a time, beside the
      rollout of `rollout_s`; the step waits for the last response's score and for whatever of
      the serial total outlasts the rollout: max(one response, total - rollout_s). A lower end:
      the responses do not all finish from the rollout's start.
    - verifier unset: not costed (0 s), said so."""
    if verifier is None:
        return RewardHost(0.0, 0.0, "the rule reward's host time not costed (reward.verifier "
                                    "unset)")
    t = per_response_s(verifier, response_tokens)
    if t == 0.0:
        return RewardHost(0.0, 0.0, "no rule reward on the host (reward.verifier none)")
    total = sequences * t
    if per_response:
        critical = max(t, total - rollout_s)
        how = (f"each of {sequences:,} responses scored one at a time as it finishes, beside "
               f"the {rollout_s:.3g} s rollout: max({t * 1e3:.3g} ms, {total:.3g} s - "
               f"rollout) = {critical:.3g} s on the step")
    else:
        chunk = largest_chunk(sequences, workers)
        critical = chunk * t
        how = (f"{sequences:,} responses over {workers} worker(s) after the rollout, "
               f"{chunk:,} x {t * 1e3:.3g} ms = {critical:.3g} s on the step")
    return RewardHost(total, critical, f"rule reward {verifier} on the host at {t * 1e3:.3g} ms "
                                       f"a response of {response_tokens:,.0f} tokens ({SOURCE}): "
                                       f"{how}")
