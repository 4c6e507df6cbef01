"""The eager rotary embedding Megatron-Core falls back to with a YaRN attention factor
(estimate/rope.py): the factor read from the config, the bytes by hand, and the same bytes
counted on real tensors."""

from __future__ import annotations

import math

import pytest

from gpuhours.errors import InputError
from gpuhours.estimate.arch import yarn_attention_factor
from gpuhours.estimate.rope import unfused_rope_bytes_per_token_layer
from gpuhours.resolve import resolve_model
from op_bytes import byte_counter

GPT_OSS_120B, _ = resolve_model("gpt-oss-120b")  # 64 heads x 64, 8 kv heads; yarn factor 32


def test_yarn_attention_factor_from_the_config() -> None:
    # gpt-oss: factor 32, no mscale: 0.1 ln 32 + 1 = 1.34657
    assert GPT_OSS_120B.rope_attention_factor == pytest.approx(1.346574, abs=1e-6)
    # DeepSeek-V3's config gives mscale = mscale_all_dim = 1.0: their ratio, 1
    assert yarn_attention_factor({"rope_scaling": {"type": "yarn", "factor": 40, "mscale": 1.0,
                                                   "mscale_all_dim": 1.0}}, "x") == 1.0
    # mscale 1, mscale_all_dim 0: (0.1 ln 4 + 1) / 1
    assert yarn_attention_factor({"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                   "mscale": 1.0, "mscale_all_dim": 0.0}},
                                 "x") == pytest.approx(0.1 * math.log(4) + 1)
    # no scaling, another scaling, a factor of 1
    assert yarn_attention_factor({}, "x") == 1.0
    assert yarn_attention_factor({"rope_scaling": {"rope_type": "llama3", "factor": 8}},
                                 "x") == 1.0
    assert yarn_attention_factor({"rope_scaling": {"rope_type": "yarn", "factor": 1}},
                                 "x") == 1.0
    with pytest.raises(InputError, match="rope_scaling.factor"):
        yarn_attention_factor({"rope_scaling": {"rope_type": "yarn", "factor": "x"}}, "x")
    # an explicit attention_factor is taken first (transformers' _compute_yarn_parameters):
    # 1.0 keeps TE's fused rotary although the factor of 4 alone would give 1.1386
    assert yarn_attention_factor({"rope_scaling": {"rope_type": "yarn", "factor": 4,
                                                   "attention_factor": 1.0}}, "x") == 1.0
    with pytest.raises(InputError, match="rope_scaling.attention_factor"):
        yarn_attention_factor({"rope_scaling": {"rope_type": "yarn", "factor": 4,
                                                "attention_factor": 0}}, "x")


def test_unfused_rope_bytes_by_hand() -> None:
    # q 64 x 64 = 4096 and k 8 x 64 = 512 elements a token; (12 - 2) + (14 - 2) = 22 elements
    # of 2 bytes each: 22 x 4608 x 2 = 202,752 bytes a token and layer
    assert unfused_rope_bytes_per_token_layer(GPT_OSS_120B, "megatron", 2.0, False) == 202_752
    # full recomputation: (2 x 10 + 12) x 4608 x 2 = 294,912
    assert unfused_rope_bytes_per_token_layer(GPT_OSS_120B, "megatron", 2.0, True) == 294_912
    # the eager kernel path's rotary is another count; a model without YaRN takes the fused one
    assert unfused_rope_bytes_per_token_layer(GPT_OSS_120B, "eager", 2.0, False) == 0.0
    llama, _ = resolve_model("llama-3-8b")
    assert unfused_rope_bytes_per_token_layer(llama, "megatron", 2.0, False) == 0.0


def test_eager_rope_counted_on_real_tensors() -> None:
    """rope_utils.py _apply_rotary_pos_emb_bshd (rotary_interleaved off, mscale 1.3466)
    restated on CPU bf16 tensors of [seq, batch, heads, 64], forward and backward under a
    dispatch mode counting each operator's bytes (tests/op_bytes.py). Less the
    per-position cos and sin (fp32 [seq, 1, 1, 64]: computed, scaled and cast, and read by the
    two products each way), the bytes per element are EAGER_ROPE_ELEMENTS' 26 x 2."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    s, b, h, d = 256, 2, 8, 64
    freqs = torch.randn(s, 1, 1, d)
    q = torch.randn(s, b, h, d, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(s, b, h, d, dtype=torch.bfloat16)
    counter = byte_counter(torch)
    with counter:
        t, t_pass = q[..., :d], q[..., d:]
        cos_ = (torch.cos(freqs) * 1.3466).to(t.dtype)
        sin_ = (torch.sin(freqs) * 1.3466).to(t.dtype)
        x1, x2 = torch.chunk(t, 2, dim=-1)
        rotated = torch.cat((-x2, x1), dim=-1)
        out = torch.cat(((t * cos_) + (rotated * sin_), t_pass), dim=-1)
        torch.autograd.grad(out, q, grad)  # q is linear_qkv's output: no .grad accumulated
    # cos, sin: fp32 computed (read and write 4 + 4), scaled (4 + 4), cast (4 + 2); each read
    # (2) by its product forward and backward
    side = s * d * (2 * (8 + 8 + 6) + 4 * 2)
    per_element = (counter.total - side) / (s * b * h * d)
    assert per_element == pytest.approx(26 * 2, abs=0.01)


def test_eager_pieces_host_operators_by_hand() -> None:
    """gpt-oss-120b on the megatron path, ep 8 (16 local experts): the eager rotary adds
    (12 - 1) x 2 = 22 forward and (7 - 1) x 2 = 12 backward operators a layer; the unfused
    expert MLP the clamp's (3, 9) and the fc2 bias's 16 x (2, 4) + (1, 2): (36, 75). An
    "attn" graph takes the rotary's off the host, a "moe" graph the expert MLP's; the op fuser
    runs neither."""
    from gpuhours.estimate.host import (
        megatron_eager_attn_ops,
        megatron_eager_moe_ops,
        megatron_graphed_ops_per_layer,
    )
    from gpuhours.setup import Training

    t = Training(arch=GPT_OSS_120B, kernels="megatron", ep=8)
    assert megatron_eager_attn_ops(GPT_OSS_120B, t) == (22.0, 12.0)
    assert megatron_eager_moe_ops(GPT_OSS_120B, t) == (36.0, 75.0)
    assert megatron_eager_moe_ops(GPT_OSS_120B, t.model_copy(
        update={"moe_fused_mlp": True})) == (0.0, 0.0)
    attn_only = t.model_copy(update={"cuda_graph_scope": ("attn",)})
    with_moe = t.model_copy(update={"cuda_graph_scope": ("attn", "moe")})
    g_attn = megatron_graphed_ops_per_layer(GPT_OSS_120B, attn_only)
    g_moe = megatron_graphed_ops_per_layer(GPT_OSS_120B, with_moe)
    # "moe" adds the layer's MLP kernels, the expert MLP's eager ones and the router's and
    # dispatcher's (the fused dispatch's counts, held to Megatron-Core's own code in
    # tests/test_moe_dispatch_ops.py; every gpt-oss layer is MoE) to what "attn" took
    from gpuhours.estimate.host import MEGATRON_MLP_OPS, megatron_moe_ops_per_layer
    router = megatron_moe_ops_per_layer(GPT_OSS_120B, t)
    assert router[0] > 0 and router[1] > 0
    assert g_moe[0] - g_attn[0] == MEGATRON_MLP_OPS[0] + 36.0 + router[0]
    assert g_moe[1] - g_attn[1] == MEGATRON_MLP_OPS[1] + 75.0 + router[1]
    llama, _ = resolve_model("llama-3-8b")
    assert megatron_eager_attn_ops(llama, Training(arch=llama, kernels="megatron")) == (0, 0)


def test_eager_pieces_host_operators_counted() -> None:
    """count_ops (gpuhours.torchkit.ops: operators that launch device work, backward included)
    on the same restated code as the byte counts, forward and backward apart: the rotary on one
    tensor 12 + 7, the clamp 3 + 9, the fc2 bias over 4 local experts 4 x 2 + 1 and 4 x 4 + 2."""
    torch = pytest.importorskip("torch")
    from gpuhours.estimate.host import (
        MEGATRON_CLAMP_OPS,
        MEGATRON_EAGER_ROPE_OPS,
        MEGATRON_FC2_BIAS_OPS_PER_EXPERT,
        MEGATRON_FC2_BIAS_OPS_PER_LAYER,
    )
    from gpuhours.torchkit.ops import count_ops

    s, d, experts = 64, 64, 4
    freqs = torch.randn(s, 1, 1, d)
    q = torch.randn(s, 1, 2, d, dtype=torch.bfloat16, requires_grad=True)

    def rope() -> object:
        t, t_pass = q[..., :d], q[..., d:]
        cos_ = (torch.cos(freqs) * 1.3466).to(t.dtype)
        sin_ = (torch.sin(freqs) * 1.3466).to(t.dtype)
        x1, x2 = torch.chunk(t, 2, dim=-1)
        return torch.cat(((t * cos_) + (torch.cat((-x2, x1), dim=-1) * sin_), t_pass), dim=-1)

    y = torch.randn(s, 2 * d, dtype=torch.bfloat16, requires_grad=True)

    def clamp() -> object:
        gate, linear = y.chunk(2, -1)
        return torch.cat((gate.clamp(min=None, max=7.0), linear.clamp(min=-7.0, max=7.0)), -1)

    t = torch.randn(s, d, dtype=torch.bfloat16, requires_grad=True)
    biases = [torch.randn(d, dtype=torch.bfloat16, requires_grad=True) for _ in range(experts)]
    probs = torch.rand(s, 1, dtype=torch.bfloat16, requires_grad=True)
    splits = [s // experts] * experts

    def bias() -> object:
        out = torch.cat([ti + b * pi for ti, b, pi in zip(
            torch.split(t, splits), biases, torch.split(probs, splits), strict=True)])
        return out.to(t.dtype)

    def forward_backward(forward, inputs) -> tuple[int, int]:
        held: list = []
        n_forward = sum(count_ops(lambda: held.append(forward())).values())
        out = held[0]
        n_backward = sum(count_ops(lambda: torch.autograd.grad(
            out, inputs, torch.ones_like(out))).values())
        # the backward's own ones_like for the incoming gradient is one operator more
        return n_forward, n_backward - 1

    # the rotary on one tensor: 12 forward, 7 backward (the constant counts q and k, less the
    # one fused kernel each direction that TE would have launched)
    fwd, bwd = forward_backward(rope, [q])
    assert (2 * (fwd - 1), 2 * (bwd - 1)) == MEGATRON_EAGER_ROPE_OPS
    assert forward_backward(clamp, [y]) == MEGATRON_CLAMP_OPS
    fwd, bwd = forward_backward(bias, [t, *biases, probs])
    assert (fwd, bwd) == (
        experts * MEGATRON_FC2_BIAS_OPS_PER_EXPERT[0] + MEGATRON_FC2_BIAS_OPS_PER_LAYER[0],
        experts * MEGATRON_FC2_BIAS_OPS_PER_EXPERT[1] + MEGATRON_FC2_BIAS_OPS_PER_LAYER[1])
