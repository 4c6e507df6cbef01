"""Issue 13: what bandwidth efficiency should an MoE's expert reads take at decode? A trial, not
a model: it swaps the rule for the touched experts' bytes and recounts both harnesses.

    python -m gpuhours_dev.validation.moe_expert_reads     (from scripts/; prints Markdown)

The estimate reads every weight of a decode step, touched experts included, at
decode_bandwidth_efficiency = BANDWIDTH_EFFICIENCY x d / (d + DECODE_BANDWIDTH_HALF_WIDTH),
d = hidden_size / tp (estimate/generation.py), a width term fitted on dense GEMMs. vLLM's and
SGLang's fused MoE kernel launches cdiv(EM, BLOCK_SIZE_M) x cdiv(N, BLOCK_SIZE_N) programs
(vllm/model_executor/layers/fused_moe/fused_moe.py, fused_moe_kernel and its grid; EM the
token-expert pairs sorted and padded per expert, programs past num_tokens_post_padded return at
once), so the programs that read weights are (experts the step touches) x (N tiles of one
expert's per-GPU N): its parallelism grows with the touched experts, not with one GEMM's width.
RULES are the readings of that tried here; `WIDTH` is the estimate as it stands. Nothing is
set from any row: each rule has no free constant (the half width is the dense fit's, 500).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from gpuhours.estimate import assumptions as A
from gpuhours.estimate import generation as G
from gpuhours.estimate.arch import ModelArch
from gpuhours_dev.validation import patched_estimate

#: the estimate as it stands: expert reads at the dense width term
WIDTH = "width"


def _width(d: float) -> float:
    return A.BANDWIDTH_EFFICIENCY.value * d / (d + A.DECODE_BANDWIDTH_HALF_WIDTH.value)


def expert_read_efficiency(rule: str, arch: ModelArch, tensor_parallel: int,
                           tokens: float) -> float:
    """Fraction of the bandwidth the touched experts' reads reach under `rule`:
    - "width": the dense width term at hidden_size / tp (the estimate as it stands);
    - "none": BANDWIDTH_EFFICIENCY, no width term (the fused grid taken as wide enough);
    - "expert-ffn": the width term at one expert's per-GPU width, moe_intermediate_size / tp;
    - "touched-hidden": the width term at experts_touched x hidden_size / tp;
    - "touched-ffn": the width term at experts_touched x moe_intermediate_size / tp (the grid's
      programs over the touched experts' gate/up N tiles);
    - "k-depth": no width term, each expert GEMM's programs at K / (K + GROUPED_GEMM_K_HALF_DEPTH)
      of the rate (a program's fixed cost against its K loop, the grouped-GEMM term fitted on
      DeepGEMM's tiles, estimate/moe_gemm.py), K = hidden_size for gate/up (2/3 of an expert's
      bytes) and moe_intermediate_size / tp for down (1/3), combined by time;
    - "k-depth:<elements>": the same at another half depth (a sensitivity, not a fit)."""
    touched = G.experts_touched(arch, tokens)
    if rule == WIDTH:
        return G.decode_bandwidth_efficiency(arch, tensor_parallel)
    if rule == "none":
        return A.BANDWIDTH_EFFICIENCY.value
    if rule == "expert-ffn":
        return _width(arch.moe_intermediate_size / tensor_parallel)
    if rule == "touched-hidden":
        return _width(touched * arch.hidden_size / tensor_parallel)
    if rule == "touched-ffn":
        return _width(touched * arch.moe_intermediate_size / tensor_parallel)
    if rule == "k-depth" or rule.startswith("k-depth:"):
        half = (A.GROUPED_GEMM_K_HALF_DEPTH.value if rule == "k-depth"
                else float(rule.split(":", 1)[1]))
        k_up, k_down = arch.hidden_size, arch.moe_intermediate_size / tensor_parallel
        share = (2 / 3) / (k_up / (k_up + half)) + (1 / 3) / (k_down / (k_down + half))
        return A.BANDWIDTH_EFFICIENCY.value / share
    raise ValueError(f"unknown rule {rule!r}; one of {', '.join(RULES)}")


RULES = (WIDTH, "none", "expert-ffn", "touched-hidden", "touched-ffn", "k-depth", "k-depth:1000")


@contextmanager
def expert_reads(rule: str) -> Iterator[None]:
    """Within the block, a decode step's touched-expert bytes (16-bit and fp8 weights; GPTQ/AWQ
    steps keep the estimate's rule) take `expert_read_efficiency(rule, ...)` of the bandwidth;
    the rest of its weights keep the width term."""
    # the estimate's step cost, swapped for the trial only (restored on exit)
    step_cls: Any = G._Step
    original: Callable[..., tuple[float, bool]] = step_cls.weights_s

    def weights_s(self: Any, tokens: float) -> tuple[float, bool]:
        if rule == WIDTH or not self.routed_bytes or self.weight_only_quantised:
            return original(self, tokens)
        arch, tp = self.arch, self.tensor_parallel
        touched = self.routed_bytes * G.experts_touched(arch, tokens) / arch.num_experts
        raw = self.bandwidth_bytes_per_s / G.decode_bandwidth_efficiency(arch, tp)
        rest = self.weights_read(tokens) - touched
        return (rest / self.bandwidth_bytes_per_s
                + touched / (raw * expert_read_efficiency(rule, arch, tp, tokens)), False)

    step_cls.weights_s = weights_s
    try:
        with patched_estimate():  # nothing kept from or for the unpatched estimate
            yield
    finally:
        step_cls.weights_s = original


def errors(rule: str) -> tuple[dict[str, float], dict[int, float]]:
    """(generation_published held-out row -> error, rl held-out CSV line -> error) under
    `rule`; the harnesses' own error conventions (+: the estimate faster / shorter)."""
    from gpuhours_dev.validation import generation_published as gp
    from gpuhours_dev.validation import rl

    with expert_reads(rule):
        gen = {x.row["row"]: x.error for x in gp.results() if x.error is not None
               and x.row["row"] not in gp.TUNED and x.row["row"] not in gp.DEPENDENT}
        data = rl.rows()
        out: dict[int, float] = {}
        for c in rl.CASES:
            if c.row in rl.TUNED:
                continue
            predicted, _ = rl.predict(c)
            if predicted is not None:
                out[c.row + 2] = predicted / float(data[c.row]["step_time_s"]) - 1
    return {k: v for k, v in gen.items() if v is not None}, out


def _is_moe(name: str) -> bool:
    """Whether a generation_published row's model routes to experts (its catalog model or
    config, as the harness resolves it)."""
    from gpuhours.estimate.arch import from_hf_config
    from gpuhours.resolve import resolve_model
    from gpuhours_dev.validation import generation_published as gp

    if name in gp.CONFIGS:
        return from_hf_config(gp.CONFIGS[name], name).is_moe
    return resolve_model(gp.MODELS[name][0], None)[0].is_moe


def report() -> str:
    """Each rule's held-out counts within 25% (generation by engine, its MoE rows, RL)."""
    from gpuhours_dev.validation import generation_published as gp

    engine = {r["row"]: r["engine"] for r in gp.rows()}
    moe = {r["row"] for r in gp.rows() if _is_moe(r["model"])}
    lines = ["| rule | generation held out | vLLM | SGLang | HF | TRT-LLM | LMDeploy | "
             "MoE rows | rows 410-462 | RL held out |", "|---|---|---|---|---|---|---|---|---|---|"]

    def within(errs: list[float]) -> str:
        return f"{sum(abs(e) <= 0.25 for e in errs)}/{len(errs)}"

    for rule in RULES:
        gen, rl_errs = errors(rule)
        by = [within([e for k, e in gen.items() if engine[k] == eng])
              for eng in ("vllm", "sglang", "hf-generate", "tensorrt-llm", "lmdeploy")]
        lines.append(f"| {rule} | {within(list(gen.values()))} | {' | '.join(by)} | "
                     f"{within([e for k, e in gen.items() if k in moe])} | "
                     f"{within([e for k, e in gen.items() if int(k) >= 410])} | "
                     f"{within(list(rl_errs.values()))} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
