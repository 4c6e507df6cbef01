"""transformers' `generate`: the rate of its KV-cache copies, fitted and checked (issue 13).

    python -m gpuhours_dev.validation.hf_kv_rate          (from scripts/; prints Markdown)
    python -m gpuhours_dev.validation.hf_kv_rate --fit    (refits the two constants)

- `fit_hf_generate`: assumptions.HF_KV_COPY_BYTES_PER_SM_CYCLE (the rate of each counted pass
  over the cache per SM cycle, generation.hf_kv_copy_bytes_per_s) and
  DECODE_HOST_PER_LAYER_S["hf-generate"], least squares on log error over a grid, on the tune
  rows of data/generation.csv that run hf-generate (rows 11 and 13: Qwen2.5-7B, transformers
  4.46, A100, 6K and 30K prompts).
- `slopes`: the check that sets nothing. For each model of the speed benchmarks' transformers
  bf16 rows on one GPU whose 14K- and 30K-prompt steps both outlast its 1-token row's step
  (the host's: so both are the device's as measured; Qwen2.5-14B and -32B: transformers 4.46
  on an A100; Qwen3-0.6B to -32B: 4.51.3 on an H20; data/generation_published.csv) the extra
  time a decode step takes at the 30K row over the 14K row (each row's time less the
  estimate's prefill, over 2,048 steps), against the KV
  bytes the extra 16,384 tokens add: the rate one counted pass reaches, under transformers'
  SDPA count (generation.hf_generate_kv_cache_passes: 2 + (1 + n) + n; 4.46's flash-attention
  class repeats the cache too, modeling_qwen2.py Qwen2FlashAttention2) and under 4.51's
  flash-attention-2 path's 3 (`integrations/flash_attention.py` hands the grouped cache to
  flash-attn unrepeated), beside the GPU's bandwidth and SMs x clock. The host and the weights
  cancel in the difference; the prefill is the estimate's (a small share: 0.4-12% of a row's
  time). Qwen2.5-0.5B to -3B are left out: their 14K steps are no longer than their 1-token
  steps (host-bound). The estimated column is the estimate's difference, host-bound at 14K for
  Qwen3-0.6B and -1.7B (the fitted host is the A100 benchmark's, 0.88 ms a layer).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import re
from pathlib import Path

from gpuhours_dev.validation import generation_published as gp

GENERATION_CSV = Path(__file__).parent / "data" / "generation.csv"
#: the tune rows of data/generation.csv that run hf-generate (the split column's rule)
FIT_ROWS = ("11", "13")
#: (source's GPU, model) pairs whose transformers bf16 rows at 14K and 30K are device-bound
SLOPE_MODELS = (("A100 80GB", "Qwen2.5-14B-Instruct"), ("A100 80GB", "Qwen2.5-32B-Instruct"),
                ("H20 96GB", "Qwen3-0.6B"), ("H20 96GB", "Qwen3-1.7B"), ("H20 96GB", "Qwen3-4B"),
                ("H20 96GB", "Qwen3-8B"), ("H20 96GB", "Qwen3-14B"), ("H20 96GB", "Qwen3-32B"))
SHORT, LONG = 14336, 30720
GENERATED = 2048


def _tune_row_rate(r: dict[str, str]) -> float:
    """Output tokens/s of a generation.csv row, predicted as tests/test_generation_engine.py
    does (batch 1: its concurrency)."""
    from gpuhours.api import estimate_generation
    from gpuhours.estimate.arch import from_hf_config
    from gpuhours.resolve import resolve_gpu
    from gpuhours.setup import Generation, Hardware

    cfg = {"model_type": "qwen2", "hidden_size": int(r["hidden_size"]),
           "num_hidden_layers": int(r["num_hidden_layers"]),
           "num_attention_heads": int(r["num_attention_heads"]),
           "num_key_value_heads": int(r["num_key_value_heads"]), "head_dim": int(r["head_dim"]),
           "intermediate_size": int(r["intermediate_size"]), "vocab_size": int(r["vocab_size"]),
           "tie_word_embeddings": r["tie_word_embeddings"] == "true", "hidden_act": "silu"}
    g = Generation(arch=from_hf_config(cfg, r["model"]), prompt_tokens=int(r["input_tokens"]),
                   output_tokens=int(r["output_tokens"]), engine="hf-generate",
                   batch=int(r["concurrency"]))
    return estimate_generation(g, Hardware(gpu=resolve_gpu(r["gpu"]))).output_tokens_per_s


def fit_hf_generate(host_per_layer_s: list[float],
                    kv_bytes_per_sm_cycle: list[float]) -> tuple[float, float]:
    """The (host seconds per layer, KV bytes copied per SM per cycle per counted pass) of the
    grid given that minimises the sum of squared log errors on FIT_ROWS."""
    from gpuhours.estimate import assumptions as A

    with GENERATION_CSV.open(newline="", encoding="utf-8") as f:
        data = {r["row"]: r for r in csv.DictReader(f)}
    assert all(data[row]["split"] == "tune" and data[row]["engine"] == "hf-generate"
               for row in FIT_ROWS)
    saved_host, saved_kv = (A.DECODE_HOST_PER_LAYER_S["hf-generate"],
                            A.HF_KV_COPY_BYTES_PER_SM_CYCLE)
    best: tuple[float, float, float] | None = None
    try:
        for h in host_per_layer_s:
            A.DECODE_HOST_PER_LAYER_S["hf-generate"] = dataclasses.replace(saved_host, value=h)
            for k in kv_bytes_per_sm_cycle:
                A.HF_KV_COPY_BYTES_PER_SM_CYCLE = dataclasses.replace(saved_kv, value=k)
                loss = sum(math.log(_tune_row_rate(data[row])
                                    / float(data[row]["measured_output_tok_per_s"])) ** 2
                           for row in FIT_ROWS)
                if best is None or loss < best[0]:
                    best = (loss, h, k)
    finally:
        A.DECODE_HOST_PER_LAYER_S["hf-generate"] = saved_host
        A.HF_KV_COPY_BYTES_PER_SM_CYCLE = saved_kv
    assert best is not None
    return best[1], best[2]


@dataclasses.dataclass(frozen=True)
class Slope:
    gpu: str
    model: str
    #: query heads per KV head
    group: float
    hidden_size: int
    #: the GPU's datasheet bandwidth, bytes/s, and its SMs x boost clock, cycles/s
    bandwidth_bytes_per_s: float
    sm_cycles_per_s: float
    #: measured extra seconds a decode step takes at the long row over the short one
    measured_s: float
    #: the estimate's
    predicted_s: float
    #: KV bytes the extra tokens add (one pass: K and V of every layer)
    kv_bytes: float
    #: passes transformers' SDPA path makes (hf_generate_kv_cache_passes at the row's release)
    sdpa_passes: float

    def bytes_per_s_per_pass(self, passes: float) -> float:
        return passes * self.kv_bytes / self.measured_s


def slopes() -> list[Slope]:
    """One Slope per SLOPE_MODELS pair, from its 14K and 30K transformers bf16 rows."""
    from gpuhours.api import estimate_generation
    from gpuhours.estimate.arch import from_hf_config
    from gpuhours.estimate.generation import hf_generate_kv_cache_passes, kv_cache_bytes_per_token
    from gpuhours.resolve import resolve_gpu, resolve_model
    from gpuhours.setup import Generation, Hardware

    table = {(r["gpu"], r["model"], int(r["input_tokens"])): r for r in gp.rows()
             if r["engine"] == "hf-generate" and r["precision"] == "bf16"
             and r["gpu_count"] == "1" and r["input_tokens"]}
    out = []
    for gpu_label, model in SLOPE_MODELS:
        arch = (from_hf_config(gp.CONFIGS[model], model) if model in gp.CONFIGS
                else resolve_model(gp.MODELS[model][0], None)[0])
        gpu = resolve_gpu(gp.GPUS[gpu_label][0])
        step_s: dict[int, tuple[float, float]] = {}
        release = ""
        for prompt in (SHORT, LONG):
            r = table[(gpu_label, model, prompt)]
            found = re.search(r"transformers (\d+\.\d+(?:\.\d+)?)", r["engine_version"])
            assert found is not None, r["row"]
            release = found[1]
            tokens = GENERATED + (prompt if r["metric"] == "total_tokens_per_s" else 0)
            run_s = tokens / float(r["measured"])
            g = Generation(arch=arch, model=model, prompt_tokens=prompt,
                           output_tokens=GENERATED, engine="hf-generate", batch=1,
                           hf_transformers_version=release)
            e = estimate_generation(g, Hardware(gpu=gpu))
            step_s[prompt] = ((run_s - e.prefill_s) / GENERATED, e.decode_s / GENERATED)
        assert gpu.sm_count is not None and gpu.boost_clock_mhz is not None
        out.append(Slope(
            gpu=gpu.name, model=model, group=arch.num_heads / arch.num_kv_heads,
            hidden_size=arch.hidden_size, bandwidth_bytes_per_s=gpu.memory_bw_gb_per_s * 1e9,
            sm_cycles_per_s=gpu.sm_count * gpu.boost_clock_mhz * 1e6,
            measured_s=step_s[LONG][0] - step_s[SHORT][0],
            predicted_s=step_s[LONG][1] - step_s[SHORT][1],
            kv_bytes=(LONG - SHORT) * kv_cache_bytes_per_token(arch),
            sdpa_passes=hf_generate_kv_cache_passes(arch, release)))
    return out


def report() -> str:
    lines = ["| GPU (datasheet TB/s, SMs x GHz) | model | n | d | extra KV a step | "
             "measured extra time | estimated | a pass, SDPA's count | a pass, FA2's 3 |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in slopes():
        lines.append(
            f"| {s.gpu} ({s.bandwidth_bytes_per_s / 1e12:.1f}, "
            f"{s.sm_cycles_per_s / 1e9:.0f}) | {s.model} | {s.group:.0f} | "
            f"{s.hidden_size:,} | {s.kv_bytes / 1e9:.2f} GB | {s.measured_s * 1e3:.1f} ms | "
            f"{s.predicted_s * 1e3:.1f} ms | "
            f"{s.bytes_per_s_per_pass(s.sdpa_passes) / 1e9:.0f} GB/s ({s.sdpa_passes:.0f}) | "
            f"{s.bytes_per_s_per_pass(3.0) / 1e9:.0f} GB/s |")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    if "--fit" in sys.argv:
        host = [round(0.70e-3 + i * 0.01e-3, 6) for i in range(31)]
        kv = [round(3.0 + i * 0.01, 2) for i in range(401)]
        print(fit_hf_generate(host, kv))
    else:
        print(report())
