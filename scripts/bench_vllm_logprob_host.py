"""The host's cost, per sampled token of each running sequence, of vLLM V1 returning the
token's log-probability (SamplingParams.logprobs=0, as NeMo-RL asks: vllm_worker.py
_build_sampling_params @108bffda and @v0.6.0) (issue 13): a benchmark, not a test. It prints
microseconds per token per sequence; nothing reads them.

    python scripts/bench_vllm_logprob_host.py [--sequences 256] [--steps 512] [--repeats 5]
    PYTHONPATH=<vllm 0.11.2's Python files + msgspec ...> python scripts/bench_vllm_logprob_host.py --vllm

What vLLM 0.11.2 (NeMo-RL v0.5's pin, pyproject.toml @108bffda) does per decode step for each
running request that asked for logprobs, beyond what it does for one that did not (read from
the 0.11.2 wheel's Python):

1. the engine core's `Scheduler.update_from_output` (vllm/v1/core/sched/scheduler.py): for
   each request, `new_logprobs = logprobs.slice(req_index, req_index + 1)`, a `LogprobsLists`
   NamedTuple (vllm/v1/outputs.py) of three numpy views (token ids [1, k+1] int32, logprobs
   [1, k+1] float32, the sampled token's rank [1] int32) put in its EngineCoreOutput;
2. the front end's `OutputProcessor.process_outputs` (vllm/v1/engine/output_processor.py)
   calls `LogprobsProcessor.update_from_output` (vllm/v1/engine/logprobs.py) ->
   `_update_sample_logprobs`: unpack the tuple, zip its rows, three `ndarray.tolist()`, the
   detokenised tokens (NONES without a tokenizer: NeMo-RL sets skip_tokenizer_init when no stop
   strings are given, nemo_rl/models/generation/__init__.py), add to the cumulative logprob,
   then `append_logprobs_for_next_position` (vllm/logprobs.py): `itertools.chain((rank,),
   range(1, k + 1))`, an isinstance check, and a dict {token_id: Logprob(logprob, rank,
   decoded_token)} (Logprob a @dataclass) appended to the request's list (VLLM_FLAT_LOGPROBS
   defaults to 0 in 0.11.2's envs.py: the list of dicts, not FlatLogprobs). Every dict and
   Logprob stays alive until the request is returned (LLM.generate's FINAL_ONLY output), so
   Python's cyclic garbage collector walks them: that is timed here too (gc left on).

Once per step, not per sequence (not in the figure): the sampler's log_softmax, gather, rank
count and cat on the GPU (vllm/v1/sample/sampler.py gather_logprobs; logprobs_mode
"processed_logprobs", vllm_worker.py) and `LogprobsTensors.tolists()`'s three .cpu() copies
(gpu_model_runner.py).

Where it is serial with the GPU: NeMo-RL's colocated engines are `vllm.LLM`
(vllm_worker.py VllmGenerationWorker._create_engine) with VLLM_ENABLE_V1_MULTIPROCESSING=0:
LLMEngine.step (vllm/v1/engine/llm_engine.py) runs the engine core's step (schedule, forward,
update_from_output) and then process_outputs in one thread, and without async scheduling
(off by default in 0.11.2) the next forward waits for both.

And, once per generated token after LLM.generate returns (NeMo-RL's own loop,
vllm_worker.py generate @108bffda): `for idx, logprob_dict in enumerate(generation.logprobs):
full_logprobs[position] = next(iter(logprob_dict.items()))[1].logprob`, a torch float32
tensor's element set from Python: timed separately (needs torch).

The work is re-implemented below with the same data structures and operations (numpy views,
NamedTuple, @dataclass, dict, list); `--vllm` times vLLM's own LogprobsProcessor and
LogprobsLists as well, where vLLM's Python files import (they do on a CPU-only machine with
msgspec, blake3, aiohttp, pyzmq, py-cpuinfo and prometheus_client beside them).

Each figure: (time of the loop with the logprob work - the same loop without it) / (sequences x
steps), one thread, a warm-up run then `--repeats` timed runs (median and range printed). It is
THIS machine's CPU (printed): a GPU server's host CPU differs.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

NONES = itertools.repeat(None)


@dataclass
class Logprob:
    """One token's entry (vllm/logprobs.py Logprob: a dataclass of three fields)."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


class StepLogprobs(NamedTuple):
    """The step's logprobs as numpy arrays (vllm/v1/outputs.py LogprobsLists)."""

    token_ids: np.ndarray
    logprobs: np.ndarray
    ranks: np.ndarray
    cu_num_generated_tokens: list[int] | None = None

    def slice(self, start: int, end: int) -> StepLogprobs:
        return StepLogprobs(self.token_ids[start:end], self.logprobs[start:end],
                            self.ranks[start:end], None)


@dataclass
class Output:
    """What the engine core hands the front end for one request a step (EngineCoreOutput's
    fields that matter here)."""

    request_id: str
    new_token_ids: list[int]
    new_logprobs: StepLogprobs | None = None
    new_prompt_logprobs_tensors: Any = None


@dataclass
class Processor:
    """A request's logprob state (vllm/v1/engine/logprobs.py LogprobsProcessor)."""

    logprobs: list[dict[int, Logprob]] | None
    cumulative_logprob: float | None
    num_logprobs: int | None

    def update_from_output(self, output: Output) -> None:
        if output.new_logprobs is not None:
            self._update_sample_logprobs(output.new_logprobs)
        if output.new_prompt_logprobs_tensors is not None:
            raise NotImplementedError

    def _update_sample_logprobs(self, lists: StepLogprobs) -> None:
        assert self.num_logprobs is not None and self.logprobs is not None
        assert self.cumulative_logprob is not None
        token_ids_lst, logprobs_lst, ranks_lst, _ = lists
        for rank_np, logprobs_np, token_ids_np in zip(ranks_lst, logprobs_lst, token_ids_lst,
                                                       strict=False):
            rank = rank_np.tolist()
            logprobs = logprobs_np.tolist()
            token_ids = token_ids_np.tolist()
            decoded = NONES
            self.cumulative_logprob += logprobs[0]
            num = len(logprobs) if self.num_logprobs == -1 else self.num_logprobs
            ranks = itertools.chain((rank,), range(1, num + 1))
            if isinstance(self.logprobs, list):
                self.logprobs.append({t: Logprob(logprob=lp, rank=r, decoded_token=d)
                                      for t, lp, r, d in zip(token_ids, logprobs, ranks,
                                                             decoded, strict=False)})


def step_arrays(sequences: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """One step's sampled tokens and their logprobs, as tolists() leaves them (k = 0: the
    sampled token alone, [n, 1])."""
    ids = rng.integers(0, 128_000, size=(sequences, 1), dtype=np.int32)
    lps = -rng.random((sequences, 1), dtype=np.float32)
    ranks = rng.integers(1, 50, size=sequences, dtype=np.int32)
    return ids, lps, ranks


def rollout(sequences: int, steps: int, with_logprobs: bool,
            make: Callable[[int, bool], tuple[Callable[..., Any], Callable[..., Any],
                                             Callable[..., Any]]]) -> tuple[float, Any]:
    """Seconds for `steps` decode steps of `sequences` requests: each step, each request's
    output built and handed to its processor (with or without the logprob), all processors
    (and the objects they keep) alive to the end, as in one LLM.generate call."""
    new_lists, new_output, new_processor = make(sequences, with_logprobs)
    rng = np.random.default_rng(0)
    arrays = [step_arrays(sequences, rng) for _ in range(8)]
    procs = [new_processor() for _ in range(sequences)]
    ids = [f"req-{i}" for i in range(sequences)]
    # the heap as vLLM's EngineCore leaves it: everything alive at startup frozen
    # (vllm/v1/engine/core.py EngineCore.__init__ -> freeze_gc_heap: gc.collect(), gc.freeze())
    gc.collect()
    gc.freeze()
    start = time.perf_counter()
    for s in range(steps):
        tok, lp, rk = arrays[s % 8]
        lists = new_lists(tok, lp, rk) if with_logprobs else None
        for i in range(sequences):
            out = new_output(ids[i], lists.slice(i, i + 1) if lists is not None else None)
            procs[i].update_from_output(out)
    elapsed = time.perf_counter() - start
    gc.unfreeze()
    return elapsed, procs


def ours(sequences: int, with_logprobs: bool):
    def new_processor() -> Processor:
        return Processor([] if with_logprobs else None, 0.0 if with_logprobs else None,
                         0 if with_logprobs else None)
    return (lambda t, lp, r: StepLogprobs(t, lp, r),
            lambda rid, nl: Output(rid, [1], nl), new_processor)


def vllms(sequences: int, with_logprobs: bool):
    from vllm.logprobs import create_sample_logprobs
    from vllm.v1.engine import EngineCoreOutput
    from vllm.v1.engine.logprobs import LogprobsProcessor
    from vllm.v1.outputs import LogprobsLists

    def new_processor() -> LogprobsProcessor:
        return LogprobsProcessor(
            tokenizer=None, logprobs=create_sample_logprobs() if with_logprobs else None,
            prompt_logprobs=None, cumulative_logprob=0.0 if with_logprobs else None,
            num_logprobs=0 if with_logprobs else None, num_prompt_logprobs=None)
    return (lambda t, lp, r: LogprobsLists(t, lp, r),
            lambda rid, nl: EngineCoreOutput(request_id=rid, new_token_ids=[1],
                                             new_logprobs=nl), new_processor)


def per_token_us(sequences: int, steps: int, repeats: int, make) -> list[float]:
    """(with - without) / (sequences x steps), in microseconds, for each timed repeat after a
    warm-up; the with/without runs alternate so that a load change hits both."""
    rollout(sequences, min(steps, 64), True, make)
    out = []
    for _ in range(repeats):
        t_without, _ = rollout(sequences, steps, False, make)
        t_with, kept = rollout(sequences, steps, True, make)
        del kept
        gc.collect()
        out.append((t_with - t_without) / (sequences * steps) * 1e6)
    return out


def nemo_rl_unpack_us(sequences: int, steps: int, repeats: int) -> list[float] | None:
    """NeMo-RL's loop after LLM.generate (vllm_worker.py generate @108bffda): each generated
    token's logprob read from its dict and set into a torch float32 tensor; us per token."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    _, procs = rollout(sequences, steps, True, ours)
    out = []
    for r in range(repeats + 1):
        start = time.perf_counter()
        for p in procs:
            full = torch.zeros(steps + 128, dtype=torch.float32)
            for idx, logprob_dict in enumerate(p.logprobs):
                if logprob_dict:
                    full[128 + idx] = next(iter(logprob_dict.items()))[1].logprob
        if r:  # the first is the warm-up
            out.append((time.perf_counter() - start) / (sequences * steps) * 1e6)
    return out


def show(name: str, us: list[float]) -> None:
    print(f"{name}: median {statistics.median(us):.2f} us per token per sequence "
          f"(range {min(us):.2f}-{max(us):.2f}, {len(us)} runs)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sequences", type=int, default=256)
    ap.add_argument("--steps", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--vllm", action="store_true",
                    help="also time vLLM's own LogprobsProcessor (vLLM importable)")
    a = ap.parse_args()
    print(f"host: {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} logical CPUs, load average "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}; Python "
          f"{platform.python_version()}, numpy {np.__version__}; gc thresholds "
          f"{gc.get_threshold()}")
    print(f"{a.sequences} sequences x {a.steps} decode steps, logprobs=0 (the sampled token)")
    show("vLLM 0.11.2's per-sequence logprob work, re-implemented",
         per_token_us(a.sequences, a.steps, a.repeats, ours))
    if a.vllm:
        import vllm
        show(f"the same with vLLM {getattr(vllm, '__version__', '?')}'s own "
             "LogprobsProcessor and LogprobsLists",
             per_token_us(a.sequences, a.steps, a.repeats, vllms))
    unpack = nemo_rl_unpack_us(a.sequences, a.steps, a.repeats)
    if unpack is not None:
        show("NeMo-RL's unpacking after generate (once per token)", unpack)


if __name__ == "__main__":
    main()
