"""FLOPs of the trace: the formulas we add to torch's flop counter, and the trace's per-operator
count against FlopCounterMode itself on the same step."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch.utils.flop_counter import FlopCounterMode, flop_registry  # noqa: E402

from gpuhours.torchkit import flops as tk_flops  # noqa: E402
from gpuhours.trace.build import build_fake_model  # noqa: E402
from gpuhours.trace.patches import as_on_gpu  # noqa: E402
from gpuhours.trace.setup import TraceSetup  # noqa: E402
from gpuhours.trace.step import make_batch, make_optimizer, one_step, run_steps  # noqa: E402

aten = torch.ops.aten
LLAMA = dict(model_type="llama", hidden_size=128, intermediate_size=344, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, vocab_size=500,
             max_position_embeddings=256, tie_word_embeddings=False)


def test_torch_counts_the_cuda_attention_kernels_and_we_add_the_cpu_ones():
    for op in tk_flops.cuda_attention_ops():
        assert op in flop_registry, op
    # torch 2.13 has no formula for these: without ours they count as zero
    assert aten._scaled_dot_product_flash_attention_for_cpu not in flop_registry
    ours = tk_flops.flop_registry()
    for op in (aten._scaled_dot_product_flash_attention_for_cpu,
               aten._scaled_dot_product_flash_attention_for_cpu_backward, aten._grouped_mm):
        assert op in ours


def test_attention_formula_by_hand_with_grouped_kv_heads():
    """QK^T and AV: 2 x (2 x S x S x D) per head forward; backward is five such matmuls in
    torch's count (the flash kernel recomputes the scores, then four gradient matmuls); k and v
    with fewer heads cost the same (GQA broadcasts them)."""
    b, h, hkv, s, d = 2, 8, 2, 64, 16
    q, k = torch.empty(b, h, s, d, device="meta"), torch.empty(b, hkv, s, d, device="meta")
    fwd = tk_flops.flop_registry()[aten._scaled_dot_product_flash_attention_for_cpu]
    bwd = tk_flops.flop_registry()[aten._scaled_dot_product_flash_attention_for_cpu_backward]
    assert fwd(q, k, k, out_val=None) == 2 * (2 * b * h * s * s * d)
    assert bwd(q, q, k, k, out_val=None) == 5 * (2 * b * h * s * s * d)


def test_grouped_mm_counts_every_token_once_however_they_split():
    """(tokens x k) @ (experts x k x n): 2 x tokens x k x n, against a loop over groups."""
    tokens, k, n, experts = 12, 8, 4, 3
    a = torch.randn(tokens, k)
    w = torch.randn(experts, k, n)
    offs = torch.tensor([5, 9, 12], dtype=torch.int32)
    formula = tk_flops.flop_registry()[aten._grouped_mm]
    by_loop, start = 0, 0
    for end in offs.tolist():
        by_loop += 2 * (end - start) * k * n  # one (rows x k) @ (k x n) per expert
        start = end
    assert formula(a, w, offs, out_val=None) == by_loop


def test_trace_flops_equal_flop_counter_mode_on_the_same_step():
    """Our per-operator count (the tracker) and torch's FlopCounterMode with our formulas give
    the same total for one fake training step of a tiny Llama (with checkpointing)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from gpuhours.estimate.arch import from_hf_config

    setup = TraceSetup(model="m", arch=from_hf_config(LLAMA, name="m"), micro_batch=2,
                       seq_len=64, precision="bf16", checkpointing=True, steps=1)
    traced = run_steps(LLAMA, setup, "m")
    ours = sum(k[3] * n for k, n in traced.op_calls.items())

    fake = FakeTensorMode()
    built = build_fake_model(LLAMA, setup, fake, "m")
    with fake:
        batch = make_batch(built, setup)
    trainable = [p for p in built.model.parameters() if p.requires_grad]
    optimizer = make_optimizer(trainable, setup)
    counter = FlopCounterMode(display=False, custom_mapping=tk_flops.custom_mapping())
    with fake, as_on_gpu(True, False), counter:
        one_step(built.model, batch, optimizer, trainable, None, 0, None)
    assert ours > 0
    assert ours == counter.get_total_flops()
