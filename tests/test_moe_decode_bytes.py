"""Bytes a decode step reads on each GPU of a tensor-parallel group for an MoE model, counted
by hand from Qwen3-30B-A3B's config (hidden 2,048, 48 layers, 32 query heads and 4 KV heads of
128, 128 experts of 768, 8 a token, vocabulary 151,936, untied embeddings) at TP 4."""

from __future__ import annotations

import pytest

from gpuhours import catalog
from gpuhours.estimate.generation import Generation, _engine_step
from gpuhours.resolve import resolve_model

D, LAYERS, EXPERTS, TOP_K, MOE_FFN, VOCAB = 2_048, 48, 128, 8, 768, 151_936
#: q (2,048 x 4,096), k and v (2,048 x 512 each), o (4,096 x 2,048), q/k norms (2 x 128)
ATTENTION = D * 4_096 + 2 * D * 512 + 4_096 * D + 2 * 128
#: one expert's gate, up and down projections
EXPERT = 3 * D * MOE_FFN
#: attention, two norms, the router, the experts
LAYER = ATTENTION + 2 * D + D * EXPERTS + EXPERTS * EXPERT
#: the blocks, the embedding table and the LM head, the final norm
TOTAL = LAYERS * LAYER + 2 * VOCAB * D + D


def test_qwen3_30b_a3b_decode_step_bytes_at_tp4_by_hand() -> None:
    """All weights but the embedding table (a step gathers its tokens' rows), in bf16, over 4
    GPUs: (30,532,122,624 - 311,164,928) x 2 / 4 = 15,110,478,848 bytes a GPU, of which the
    routed experts' 48 x 128 x 4,718,592 x 2 / 4 = 14,495,514,624. A step of 16 tokens, each
    sending to 8 distinct experts of 128, leaves an expert untouched with probability
    (120/128)^16 = 0.35607 under uniform independent routing: 15,110,478,848 - 14,495,514,624
    x 0.35607 = 9.949e9 bytes a GPU."""
    assert TOTAL == 30_532_122_624
    arch = resolve_model("qwen3-30b-a3b")[0]
    step = _engine_step(Generation(arch=arch, prompt_tokens=100, output_tokens=10, batch=16,
                                   tensor_parallel=4),
                        catalog.gpu("h100-sxm"), "bf16", 1.0)
    per_gpu = (TOTAL - VOCAB * D) * 2 / 4
    routed = LAYERS * EXPERTS * EXPERT * 2 / 4
    assert step.weights_read_bytes == per_gpu == 15_110_478_848
    assert step.routed_bytes == routed == 14_495_514_624
    untouched = (1 - TOP_K / EXPERTS) ** 16
    assert untouched == pytest.approx(0.35607, abs=1e-5)
    assert step.weights_read(16) == pytest.approx(per_gpu - routed * untouched, rel=1e-12)
    assert step.weights_read(16) == pytest.approx(9.949e9, rel=1e-3)
