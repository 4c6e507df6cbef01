"""An RL step's synchronous rollouts on a paged-cache engine (vLLM V1 and V0, SGLang): the batch
replayed through the engine's admission and preemption (estimate/paged_rollout.py), then
timed at the engine's step cost (estimate/generation.py `paged_rollout_time_s`).

The rule it replaces took the cache at the longest response (prompt + max_response_tokens) a
sequence and ran the batch in waves of that many; vLLM reserves no such room (it admits a
request at the tokens it has and grows it block by block), so with responses mostly shorter
than the longest, more of them run at once, and the step ends when the longest response does.
Pure functions; seconds and tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuhours.catalog.schema import GpuSpec
from gpuhours.estimate.generation import (
    engine_max_num_seqs,
    paged_cache_tokens,
    paged_rollout_time_s,
)
from gpuhours.estimate.paged_rollout import (
    PagedRollout,
    SglangAdmission,
    VllmAdmission,
    paged_rollout,
    response_lengths_tokens,
)
from gpuhours.setup import Generation

#: vLLM engines, with the free share of the cache that admission keeps: V0's
#: BlockSpaceManager watermark 0.01 (vllm/core/block_manager.py), V1's allocate_slots none
VLLM_ADMISSION_WATERMARK = {"vllm": 0.0, "vllm-v0": 0.01}


@dataclass(frozen=True)
class PagedBatch:
    """One engine's rollouts of a step: each blocking generate call replayed."""

    calls: tuple[PagedRollout, ...]
    prefill_s: float
    decode_s: float
    #: the KV cache, tokens per GPU
    cache_tokens: float

    @property
    def seconds(self) -> float:
        return self.prefill_s + self.decode_s

    @property
    def peak_running(self) -> int:
        return max(c.peak_running_sequences for c in self.calls)

    @property
    def tail_led(self) -> bool:
        """Every call ran its sequences at once, none preempted: each lasted as long as its
        longest response (the step waits for it)."""
        return all(len(c.admissions) == 1 for c in self.calls)

    def details(self) -> dict[str, float | int]:
        """The phase's details: the cache (tokens a GPU), the admissions of fresh prompts, the
        preemptions and the tokens they prefilled again, decode steps, the most running."""
        return {"rollout_kv_cache_tokens": self.cache_tokens,
                "rollout_admissions": sum(
                    sum(1 for a in c.admissions if not a.recomputed) for c in self.calls),
                "rollout_preemptions": sum(c.preemptions for c in self.calls),
                "rollout_recomputed_tokens": sum(c.recomputed_tokens for c in self.calls),
                "rollout_decode_steps": sum(c.decode_steps for c in self.calls),
                "rollout_peak_running_sequences": self.peak_running}


def paged_batch(probe: Generation, gpu: GpuSpec, share: float, sequences: int, longest: int,
                call_sequences: int | None, matmul: str) -> PagedBatch | None:
    """The rollouts of `sequences` responses (mean `probe.output_tokens`, the longest
    `longest`) on one engine in `share` of each GPU's memory, handed over `call_sequences` at a
    time (the framework's blocking generate calls; None: all at once). None for an engine
    without a paged cache (hf-generate's static batch)."""
    cache_tokens, state_tokens = paged_cache_tokens(probe.arch, probe, gpu, share)
    admission: VllmAdmission | SglangAdmission
    if probe.engine == "sglang":
        admission = SglangAdmission(max_new_tokens=longest)
    elif probe.engine in VLLM_ADMISSION_WATERMARK:
        admission = VllmAdmission(VLLM_ADMISSION_WATERMARK[probe.engine] * cache_tokens)
    else:
        return None
    lengths = response_lengths_tokens(probe.output_tokens, longest, sequences)
    per_call = call_sequences or sequences
    calls = tuple(paged_rollout(probe.prompt_tokens, lengths[i:i + per_call], cache_tokens,
                                engine_max_num_seqs(probe, gpu), admission, state_tokens)
                  for i in range(0, sequences, per_call))
    times = [paged_rollout_time_s(probe, gpu, c, matmul) for c in calls]
    return PagedBatch(calls, sum(p for p, _ in times), sum(d for _, d in times), cache_tokens)
