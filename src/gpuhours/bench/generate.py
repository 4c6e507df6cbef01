"""`gpuhours bench --workload generate`: prefill and decode of HF `generate`, measured.

The model is built from its config with random weights (as for training benches), in bf16 on
a GPU (fp32 on a CPU unless --precision says otherwise), sdpa attention, greedy decoding with
EOS suppressed so that every sequence decodes all `output_tokens`. Timed, after one warm-up:
`generate` of 1 new token (the prefill and one step) and of `output_tokens` new tokens, each
the median of `repeats` runs; the decode step is their difference over `output_tokens - 1`.
Counted: the device operators of one decode step (the difference of two short generations,
gpuhours.torchkit.ops.count_ops), which with the step time bounds the host's cost per
operator. On a catalog GPU the result is set beside `estimate_generation` for the same setup.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from pydantic import BaseModel, ConfigDict

from gpuhours.bench.device import DeviceBackend
from gpuhours.errors import FieldError
from gpuhours.setup import Generation

#: precisions a generate benchmark runs in: weights and activations in one dtype
_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "bf16-mixed": "bfloat16",
          "bf16-amp": "bfloat16", "fp16-mixed": "float16", "fp16-amp": "float16"}


class GenerateResult(BaseModel):
    """What one generate benchmark measured; times in seconds, memory in bytes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    setup: dict[str, Any]
    device_kind: str
    device_key: str
    device_name: str
    catalog_gpu: str | None
    dtype: str
    prefill_s: float
    generate_s: float
    decode_step_s: float
    decode_steps_s: list[float]
    output_tokens_per_s: float
    operators_per_decode_step: float | None
    peak_memory_bytes: int | None
    timing_basis: str
    #: the analytic estimate for the same setup (catalog GPUs only): prefill, decode step
    estimated_prefill_s: float | None = None
    estimated_decode_step_s: float | None = None
    estimate_basis: str | None = None
    #: the analytic peak of live tensors for the same setup and installed transformers release
    #: (estimate/hf_generate_memory.py; beside peak_memory_bytes), bytes
    estimated_peak_memory_bytes: float | None = None

    def ledger_results(self) -> dict[str, Any]:
        return {**self.model_dump(mode="json"),
                "step_time_median_s": self.decode_step_s,
                "tokens_per_s": self.output_tokens_per_s,
                "peak_memory_bytes": self.peak_memory_bytes}


def measure_generate(g: Generation, backend: DeviceBackend, precision: str,
                     repeats: int = 3, seed: int = 0) -> GenerateResult:
    """Build `g`'s model on the backend's device and time HF generate (see the module doc)."""
    import torch
    import transformers

    from gpuhours.bench.model import hf_config_of
    from gpuhours.resolve import model_config
    from gpuhours.torchkit.ops import count_ops

    if g.batch is None:
        raise FieldError("batch", "a generate benchmark needs a batch (--batch).")
    if g.output_tokens < 2:
        raise FieldError("output_tokens", "a decode step needs at least 2 output tokens.")
    if repeats < 1:
        raise FieldError("repeats", f"expected a positive count, got {repeats}.")
    dtype_name = _DTYPE.get(precision)
    if dtype_name is None:
        raise FieldError("precision", f"expected one of {', '.join(_DTYPE)}, got {precision!r}.")
    dtype = getattr(torch, dtype_name)
    if not g.model:
        raise FieldError("model", "a generate benchmark needs a catalog model or config.json.")
    cfg, _, _ = model_config(g.model, g.config_overrides)
    vocab = g.arch.vocab_size
    hf = hf_config_of(cfg, vocab)
    device = backend.torch_device
    torch.manual_seed(seed)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(hf, dtype=dtype,
                                                              attn_implementation="sdpa")
    model.eval()
    gen = torch.Generator(device="cpu").manual_seed(seed)
    ids = torch.randint(0, vocab, (g.batch, g.prompt_tokens), generator=gen).to(device)
    mask = torch.ones_like(ids)
    cuda = backend.kind == "cuda"

    def generate(n: int) -> None:
        with torch.no_grad():
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n,
                           min_new_tokens=n, do_sample=False, pad_token_id=0,
                           eos_token_id=None)

    def timed(n: int) -> float:
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        generate(n)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t

    generate(2)  # warm-up: kernels, allocator, caches
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    firsts = [timed(1) for _ in range(repeats)]
    fulls = [timed(g.output_tokens) for _ in range(repeats)]
    peak = int(torch.cuda.max_memory_allocated()) if cuda else None
    first, full = statistics.median(firsts), statistics.median(fulls)
    steps = [(f - first) / (g.output_tokens - 1) for f in fulls]
    step = max(statistics.median(steps), 1e-9)
    short = min(4, g.output_tokens)
    ops = None
    if g.output_tokens >= 4:
        a = sum(count_ops(lambda: generate(short // 2)).values())
        b = sum(count_ops(lambda: generate(short)).values())
        ops = (b - a) / (short - short // 2)
    setup = {"workload": "generate", "model": g.model, "config_overrides": g.config_overrides,
             "batch": g.batch, "prompt_tokens": g.prompt_tokens,
             "output_tokens": g.output_tokens, "engine": "hf-generate", "precision": precision,
             "repeats": repeats}
    return GenerateResult(
        setup=setup, device_kind=backend.kind, device_key=backend.key,
        device_name=backend.name, catalog_gpu=backend.catalog_gpu, dtype=dtype_name,
        prefill_s=first, generate_s=full, decode_step_s=step, decode_steps_s=steps,
        output_tokens_per_s=g.batch / step, operators_per_decode_step=ops,
        peak_memory_bytes=peak,
        timing_basis=(f"measured: wall time of transformers generate, median of {repeats} runs "
                      f"after one warm-up{', synchronised' if cuda else ''}; prefill = 1 new "
                      f"token; decode step = (time of {g.output_tokens} new tokens - prefill) / "
                      f"{g.output_tokens - 1}"))


def with_estimate(r: GenerateResult, g: Generation) -> GenerateResult:
    """The analytic hf-generate estimate beside the measurement, on a catalog GPU."""
    if r.catalog_gpu is None:
        return r
    import transformers

    from gpuhours import catalog
    from gpuhours.api import estimate_generation
    from gpuhours.estimate.generation import hf_generate_peak_of
    from gpuhours.setup import Hardware

    e = estimate_generation(g.model_copy(update={"engine": "hf-generate"}),
                            Hardware(gpu=catalog.gpu(r.catalog_gpu)))
    # the peak of the release that ran (its major.minor: an "rc1" or ".dev0" suffix dropped), in
    # live tensors as the bench counts them (no allocator reserve or CUDA context); the model
    # counts sampling's tensors, which the bench's greedy decoding does not all make
    release = ".".join(transformers.__version__.split(".")[:2])
    hf = g.model_copy(update={"engine": "hf-generate", "hf_transformers_version": release})
    peak = hf_generate_peak_of(hf.arch, hf, e.batch).tensors_bytes
    return r.model_copy(update={
        "estimated_prefill_s": e.prefill_s,
        "estimated_decode_step_s": e.decode_s / max(1, g.output_tokens),
        "estimated_peak_memory_bytes": peak,
        "estimate_basis": f"formula: estimate_generation, hf-generate engine, {r.catalog_gpu}; "
                          f"peak: live tensors of transformers {hf.hf_transformers_version}'s "
                          "generate (estimate/hf_generate_memory.py, sampling assumed)"})
