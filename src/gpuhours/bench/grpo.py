"""`gpuhours bench --workload grpo`: one real GRPO step of a policy, each part timed.

The step as TRL and verl run it, in one process on this device, with the model built from its
config (random weights):

1. rollout: HF `generate` of `generations` responses to each of `prompts` random prompts
   (greedy decoding is replaced by sampling so that the G responses differ; EOS suppressed so
   every response is `response_tokens` long);
2. reward: a rule on the token ids (a stand-in for a verifier; its time is the Python's);
3. old-policy log-probs: a no-grad forward of the policy over every sequence;
4. reference log-probs: the same with LoRA adapters disabled, or a frozen copy for full
   fine-tuning;
5. update: the GRPO loss (group-normalised advantages x response log-probs), backward over
   micro-batches of `micro_batch` sequences, one optimizer step.

Each part is wall time with a device synchronisation at its end. One step, after a warm-up step:
an RL step is long enough to need no repeats, and its parts are what a plan's `rl` phase adds.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict

from gpuhours.bench.device import DeviceBackend
from gpuhours.errors import FieldError
from gpuhours.setup import Training, torch_precision


class GrpoResult(BaseModel):
    """One GRPO step's parts, seconds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    setup: dict[str, Any]
    device_kind: str
    device_key: str
    device_name: str
    parts_s: dict[str, float]
    step_s: float
    sequences: int
    tokens_per_step: int
    timing_basis: str

    def ledger_results(self) -> dict[str, Any]:
        return {**self.model_dump(mode="json"), "step_time_median_s": self.step_s,
                "tokens_per_s": self.tokens_per_step / self.step_s}


def measure_grpo(t: Training, backend: DeviceBackend, prompts: int, generations: int,
                 prompt_tokens: int, response_tokens: int, seed: int = 0) -> GrpoResult:
    """Build the policy of `t` and time one GRPO step (see the module doc); `t.micro_batch` is
    the update's micro-batch in sequences."""
    import copy

    import torch

    from gpuhours.bench import model as bench_model
    from gpuhours.bench.config import BenchSetup
    from gpuhours.bench.runner import make_optimizer

    if min(prompts, generations, prompt_tokens, response_tokens) < 1:
        raise FieldError(("prompts", "generations"), "prompts, generations and token counts "
                         "must be positive.")
    if generations < 2:
        raise FieldError("generations", "GRPO normalises rewards within a group: at least 2 "
                                        "generations per prompt.")
    built = bench_model.build(BenchSetup(training=t), backend.torch_device, seed)
    model = built.model
    device = backend.torch_device
    cuda = backend.kind == "cuda"
    tp = torch_precision(t.precision, t.method)
    amp = tp.autocast_dtype
    device_type = device.split(":")[0]
    reference = None if t.method != "full" else copy.deepcopy(model).eval()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(params, t.optimizer, t.optimizer_impl, 1e-6)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    vocab = built.arch.vocab_size
    sequences = prompts * generations

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def autocast() -> Any:
        import contextlib

        return (torch.autocast(device_type, dtype=getattr(torch, amp)) if amp
                else contextlib.nullcontext())

    def logprobs(m: Any, ids: Any) -> Any:
        out = []
        for i in range(0, ids.shape[0], t.micro_batch):
            chunk = ids[i:i + t.micro_batch]
            with autocast():
                logits = m(input_ids=chunk).logits[:, prompt_tokens - 1:-1].float()
            out.append(torch.log_softmax(logits, -1).gather(
                -1, chunk[:, prompt_tokens:, None]).squeeze(-1))
        return torch.cat(out)

    def step() -> dict[str, float]:
        parts: dict[str, float] = {}
        mark = time.perf_counter()

        def lap(name: str) -> None:
            nonlocal mark
            sync()
            now = time.perf_counter()
            parts[name] = now - mark
            mark = now

        prompt_ids = torch.randint(0, vocab, (prompts, prompt_tokens), generator=gen)
        prompt_ids = prompt_ids.repeat_interleave(generations, 0).to(device)
        model.eval()
        with torch.no_grad(), autocast():
            ids = model.generate(input_ids=prompt_ids,
                                 attention_mask=torch.ones_like(prompt_ids),
                                 max_new_tokens=response_tokens, min_new_tokens=response_tokens,
                                 do_sample=True, top_k=0, pad_token_id=0, eos_token_id=None)
        lap("rollout generation")
        # the rule: responses ending in an even token id score 1 (a stand-in for a verifier)
        rewards = (ids[:, -1] % 2 == 0).float().view(prompts, generations)
        advantages = ((rewards - rewards.mean(1, keepdim=True))
                      / (rewards.std(1, keepdim=True) + 1e-4)).view(-1, 1)
        lap("reward")
        with torch.no_grad():
            old = logprobs(model, ids)
        lap("old-policy log-probs")
        with torch.no_grad():
            if reference is not None:
                ref = logprobs(reference, ids)
            else:
                with model.disable_adapter():
                    ref = logprobs(model, ids)
        lap("reference model")
        model.train()
        for i in range(0, sequences, t.micro_batch):
            new = logprobs(model, ids[i:i + t.micro_batch])
            ratio = torch.exp(new - old[i:i + t.micro_batch])
            kl = torch.exp(ref[i:i + t.micro_batch] - new) - (ref[i:i + t.micro_batch] - new) - 1
            loss = (-(ratio * advantages[i:i + t.micro_batch]) + 0.04 * kl).mean()
            (loss * min(t.micro_batch, sequences - i) / sequences).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        lap("policy update")
        return parts

    step()  # warm-up: kernels, allocator, the optimizer's state
    parts = step()
    setup = {"workload": "grpo", **t.model_dump(mode="json", exclude={"arch"}),
             "prompts": prompts, "generations": generations, "prompt_tokens": prompt_tokens,
             "response_tokens": response_tokens}
    return GrpoResult(
        setup=setup, device_kind=backend.kind, device_key=backend.key,
        device_name=backend.name, parts_s=parts, step_s=sum(parts.values()),
        sequences=sequences, tokens_per_step=sequences * (prompt_tokens + response_tokens),
        timing_basis="measured: wall time of each part of one GRPO step after a warm-up step, "
                     f"{'synchronised at each part' if cuda else 'CPU work is synchronous'}")
