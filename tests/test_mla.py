"""Multi-head latent attention and DeepSeek's MoE (issue 15): DeepSeek-V2/V3 counted exactly,
their FLOPs, compressed KV cache and activations by hand and against a real tiny model.

Hand counts use DeepSeek-V3's shape (transformers' DeepseekV3Config defaults, which are the
released model's: hidden 7,168, 61 layers, 128 heads, q_lora_rank 1,536, kv_lora_rank 512,
qk_nope 128, qk_rope 64, v 128, 256 routed experts of 2,048 with 8 per token, 1 shared expert,
first 3 layers dense with 18,432, vocabulary 129,280).
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuhours.errors import FieldError, InputError
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.flops import (
    attention_forward_flops_per_token,
    generation_flops_per_token,
    lora_params_per_layer,
)
from gpuhours.estimate.generation import kv_bytes_per_token_per_gpu, kv_cache_bytes_per_token
from gpuhours.estimate.params import count_params
from saved_storage import saved_storages

V3: dict[str, Any] = dict(
    model_type="deepseek_v3", vocab_size=129280, hidden_size=7168, intermediate_size=18432,
    moe_intermediate_size=2048, num_hidden_layers=61, num_attention_heads=128,
    num_key_value_heads=128, n_shared_experts=1, n_routed_experts=256, kv_lora_rank=512,
    q_lora_rank=1536, qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=128,
    num_experts_per_tok=8, first_k_dense_replace=3, tie_word_embeddings=False)

#: one MLA layer's matmul weights, by hand: q_a 7168 x 1536, q_b 1536 x 128 (128 + 64),
#: kv_a 7168 x (512 + 64), kv_b 512 x 128 (128 + 128), o 128 x 128 x 7168
V3_ATTENTION = (7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256
                + 128 * 128 * 7168)
#: a dense layer's MLP, and one token's share of an MoE layer: 8 routed experts, the shared
#: expert (both gated, 3 matrices) and the router (7168 x 256)
V3_DENSE_MLP = 3 * 7168 * 18432
V3_MOE_ACTIVE = 8 * 3 * 7168 * 2048 + 3 * 7168 * 2048 + 7168 * 256


def test_v3_attention_layer_by_hand() -> None:
    assert V3_ATTENTION == 187_105_280


def test_v3_total_and_active_parameters() -> None:
    """Total: 671,026,404,352 (DeepSeek-V3 report, arXiv:2412.19437: 671B, MTP module aside);
    per token: the layers' matmuls and the head, by hand, the 36.6B "activation parameters
    (including 0.9B for the output head)" of DeepSeek's README_WEIGHTS.md."""
    counts = count_params(from_hf_config(V3, "v3"))
    assert counts.total == 671_026_404_352
    by_hand = (61 * V3_ATTENTION + 3 * V3_DENSE_MLP + 58 * V3_MOE_ACTIVE + 129280 * 7168)
    assert counts.matmul_active == by_hand
    assert counts.matmul_active == pytest.approx(36.6e9, rel=0.001)


def test_v3_compressed_kv_cache() -> None:
    """(kv_lora_rank + qk_rope_head_dim) per token and layer: 61 x 576 x 2 bytes = 70,272 B in
    bf16, against 61 x 128 x (192 + 128) x 2 = 4,997,120 B had the expanded keys and values been
    cached (71x). Under tensor parallelism every GPU keeps the whole latent."""
    arch = from_hf_config(V3, "v3")
    assert kv_cache_bytes_per_token(arch, 2.0) == 70_272
    assert kv_bytes_per_token_per_gpu(arch, 2.0, tensor_parallel=8) == 70_272
    expanded = 61 * 128 * (192 + 128) * 2
    assert expanded / kv_cache_bytes_per_token(arch, 2.0) == pytest.approx(71.1, abs=0.05)


def test_v3_attention_flops() -> None:
    """QK^T over 192-wide keys and AV over 128-wide values, 128 heads, 61 layers:
    2 x 128 x (192 + 128) x 61 = 4,997,120 FLOPs per attended key; a 4,096-token causal
    sequence attends to 2,048.5 keys on average."""
    arch = from_hf_config(V3, "v3")
    assert attention_forward_flops_per_token(arch, 4096) == 4_997_120 * 2048.5
    counts = count_params(arch)
    assert generation_flops_per_token(arch, 1000) == 2 * counts.matmul_active + 4_997_120 * 1000


def test_lora_on_latent_attention() -> None:
    """r (in + out) per adapted linear: q_a, q_b, kv_a, kv_b, o; q/v-only LoRA is refused."""
    arch = from_hf_config(V3, "v3")
    r = 8
    attention = r * ((7168 + 1536) + (1536 + 128 * 192) + (7168 + 576) + (512 + 128 * 256)
                     + (128 * 128 + 7168))
    assert lora_params_per_layer(arch, r, "attention") == attention
    with pytest.raises(FieldError, match="no q_proj and v_proj"):
        lora_params_per_layer(arch, r, "qv")


def test_v2_needs_experts_per_token() -> None:
    with pytest.raises(InputError, match="num_experts_per_tok"):
        from_hf_config({**V3, "model_type": "deepseek_v2", "num_experts_per_tok": None}, "v2")


# --- against transformers ------------------------------------------------------------------------

SMALL: dict[str, Any] = dict(
    hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
    intermediate_size=96, moe_intermediate_size=24, n_routed_experts=8, num_experts_per_tok=2,
    n_shared_experts=2, vocab_size=500, q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=8,
    qk_rope_head_dim=4, v_head_dim=12, first_k_dense_replace=1, n_group=1, topk_group=1)


@pytest.mark.parametrize("model_type", ["deepseek_v2", "deepseek_v3"])
@pytest.mark.parametrize("variant", [
    {},
    {"attention_bias": True, "mlp_bias": True, "q_lora_rank": 20},  # V3's MLPs ignore mlp_bias
    {"tie_word_embeddings": True, "first_k_dense_replace": 5},  # more dense layers than layers
    {"n_shared_experts": 3, "first_k_dense_replace": 0},
])
def test_small_variants_are_exact(model_type: str, variant: dict[str, Any]) -> None:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    config = {"model_type": model_type, **SMALL, **variant}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**config))
    real = sum(p.numel() for p in model.parameters())
    assert count_params(from_hf_config(config, model_type)).total == real


@pytest.mark.parametrize("model_type", ["deepseek_v2", "deepseek_v3"])
@pytest.mark.parametrize("dense_first", [0, 1, 2])
def test_activation_formula_matches_saved_storage(model_type: str, dense_first: int) -> None:
    """fp32, full fine-tuning, a real tiny model on the CPU: the storage autograd saves. The
    CPU's SDPA runs its math path for keys (48) wider than values (32) and keeps the (B, H, S, S)
    probabilities, which the flash kernels the formula assumes do not: those are subtracted."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from gpuhours.estimate.memory import activation_bytes
    from gpuhours.setup import Training

    batch, seq, vocab = 2, 64, 1000
    config = dict(model_type=model_type, hidden_size=256, intermediate_size=688,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                  vocab_size=vocab, q_lora_rank=96, kv_lora_rank=64, qk_nope_head_dim=32,
                  qk_rope_head_dim=16, v_head_dim=32, moe_intermediate_size=64,
                  n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, n_group=1,
                  topk_group=1, first_k_dense_replace=dense_first, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(**config))
    model.train()
    ids = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))
    with saved_storages(model.parameters()) as seen:
        model(input_ids=ids, labels=ids)
    probabilities = sum(s.nbytes for s in seen.values() if s.shape == (batch, 4, seq, seq))
    assert probabilities == 2 * batch * 4 * seq * seq * 4  # two layers, four heads, fp32
    real = sum(s.nbytes for s in seen.values()) - probabilities

    arch = from_hf_config(config, "tiny")
    t = Training(arch=arch, method="full", precision="fp32", micro_batch=batch, seq_len=seq)
    # the loss keeps log-softmax's fp32 output: tokens x vocab x 4 bytes
    predicted = activation_bytes(arch, t).total + batch * seq * vocab * 4
    assert predicted == pytest.approx(real, rel=0.02)
