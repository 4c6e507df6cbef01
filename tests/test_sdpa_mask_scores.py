"""What attention without a flash kernel keeps per score (setup.Training.eager_attention).

transformers' eager attention keeps its fp32 softmax and the activation-dtype copy the AV matmul
takes (4 + 2 bytes per score in bf16); torch 2.0-2.1's scaled_dot_product_attention given an
additive mask (Qwen-1's own attention without flash-attn) keeps one copy in the activation
dtype: the math fallback's softmax output, or the memory-efficient kernel's mask expanded to
every head and padded (attention.cpp preprocess_mask). Hand counts, a count of the storage the
math fallback saves on real CPU tensors, and the refusal of the choice under flash attention.
"""

from __future__ import annotations

import pytest

from gpuhours.errors import FieldError
from gpuhours.estimate.memory import activation_bytes, activation_bytes_per_token_layer
from gpuhours.setup import Training


def test_sdpa_mask_keeps_one_activation_dtype_copy_per_score(tiny):
    # tiny: 4 heads; 128 tokens; bf16: 2 bytes per score, against eager's 4 + 2
    _, eager = activation_bytes_per_token_layer(tiny, "bf16", False, 128)
    _, sdpa = activation_bytes_per_token_layer(tiny, "bf16", False, 128,
                                               eager_attention="sdpa-mask")
    assert eager == 4 * 128 * 6
    assert sdpa == 4 * 128 * 2
    # a flash kernel keeps no scores whatever the choice
    _, flash = activation_bytes_per_token_layer(tiny, "bf16", True, 128,
                                                eager_attention="sdpa-mask")
    assert flash == 0


def test_without_checkpointing_every_layer_keeps_its_scores(tiny):
    base = dict(arch=tiny, precision="bf16", micro_batch=1, seq_len=128, flash_attention=False)
    eager = activation_bytes(tiny, Training(**base))
    sdpa = activation_bytes(tiny, Training(**base, eager_attention="sdpa-mask"))
    # 128 tokens x 2 layers x 4 heads x 128 keys x (6 - 2) bytes
    assert eager.total - sdpa.total == 128 * 2 * 4 * 128 * 4


def test_the_math_fallback_saves_the_softmax_output_once():
    torch = pytest.importorskip("torch")
    b, h, s, d = 1, 4, 40, 16
    q, k, v = (torch.randn(b, h, s, d, requires_grad=True) for _ in range(3))
    causal = torch.ones(s, s, dtype=torch.bool).tril()
    mask = torch.zeros(1, 1, s, s).masked_fill(~causal, torch.finfo(torch.float32).min)
    saved: dict[int, tuple[tuple[int, ...], int]] = {}

    def pack(t):  # type: ignore[no-untyped-def]
        saved[t.untyped_storage().data_ptr()] = (tuple(t.shape), t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        torch.ops.aten._scaled_dot_product_attention_math(q, k, v, attn_mask=mask)
    scores = [n for shape, n in saved.values() if shape[-2:] == (s, s)]
    # one heads x S x S tensor in the activation dtype (fp32 here: CPU upcasts half inputs in
    # this fallback, CUDA does not), the rest q, k and v sized
    assert scores == [h * s * s * 4]
    assert sum(n for _, n in saved.values()) - scores[0] == 3 * b * h * s * d * 4


def test_sdpa_mask_under_flash_attention_is_refused(tiny):
    with pytest.raises(FieldError, match="eager_attention"):
        Training(arch=tiny, eager_attention="sdpa-mask")


@pytest.mark.parametrize("kernels", ["flash-attn", "megatron"])
def test_sdpa_mask_off_the_eager_layers_is_refused(tiny, kernels):
    # Qwen-1's own SDPA call with its additive mask: not flash-attn's path nor TE's attention
    with pytest.raises(FieldError, match="eager_attention"):
        Training(arch=tiny, eager_attention="sdpa-mask", flash_attention=False, kernels=kernels)
