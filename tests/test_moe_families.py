"""The MoE families of issue 15 (Llama 4 text, gpt-oss, GLM-4-MoE, OLMoE, Granite MoE): exact
counts against transformers, active parameters against the published figures, and a hand-worked
FLOP and KV-cache example. Their default configs are checked in tests/test_catalog_models.py."""

from __future__ import annotations

from typing import Any

import pytest

from gpuhours.errors import InputError
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.flops import attention_forward_flops_per_token, generation_flops_per_token
from gpuhours.estimate.generation import kv_cache_bytes_per_token, kv_tokens_held
from gpuhours.estimate.params import count_params
from gpuhours.resolve import resolve_model
from saved_storage import saved_storage_bytes

NONE_IDS: dict[str, Any] = dict(eos_token_id=None, bos_token_id=None, pad_token_id=None)
BASE: dict[str, Any] = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                            num_key_value_heads=2, intermediate_size=32, vocab_size=500,
                            eos_token_id=None, bos_token_id=None, pad_token_id=None)

SMALL = [
    ("llama4_text", dict(intermediate_size_mlp=96, num_local_experts=4, num_experts_per_tok=1,
                         interleave_moe_layer_step=2, head_dim=16)),  # layers 1, 3 MoE
    ("llama4_text", dict(intermediate_size_mlp=96, num_local_experts=4, num_experts_per_tok=1,
                         moe_layers=[0, 3], attention_bias=True, head_dim=16)),
    ("gpt_oss", dict(num_local_experts=4, num_experts_per_tok=2, head_dim=16, sliding_window=8,
                     attention_bias=False)),
    ("gpt_oss", dict(num_local_experts=4, num_experts_per_tok=2, head_dim=16, sliding_window=8,
                     tie_word_embeddings=True)),
    ("glm4_moe", dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                      n_shared_experts=2, first_k_dense_replace=1, use_qk_norm=True,
                      attention_bias=True, head_dim=16, n_group=1, topk_group=1)),
    ("glm4_moe", dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                      n_shared_experts=1, first_k_dense_replace=0, head_dim=16, n_group=1,
                      topk_group=1)),
    ("olmoe", dict(num_experts=4, num_experts_per_tok=2, attention_bias=True)),
    ("granitemoe", dict(num_local_experts=4, num_experts_per_tok=2, attention_bias=True)),
]


@pytest.mark.parametrize(("model_type", "variant"), SMALL)
def test_small_variants_are_exact(model_type: str, variant: dict[str, Any]) -> None:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    config = {"model_type": model_type, **BASE, **variant}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**config))
    real = sum(p.numel() for p in model.parameters())
    assert count_params(from_hf_config(config, model_type)).total == real


def test_llama4_interleaved_layers() -> None:
    """interleave_moe_layer_step 2 over 4 layers: layers 1 and 3 MoE (transformers'
    Llama4TextConfig), 0 and 2 dense with intermediate_size_mlp."""
    arch = from_hf_config({"model_type": "llama4_text", **BASE, **SMALL[0][1]}, "l4")
    assert (arch.moe_layers, arch.dense_mlp_layers) == (2, 2)
    assert arch.intermediate_size == 96 and arch.moe_intermediate_size == 32
    # per token: attention (2 x 64 x 64 + 2 x 64 x 32) each layer; dense layers 3 x 64 x 96;
    # MoE layers 1 routed + 1 shared expert of 3 x 64 x 32 and the router 64 x 4; the head
    attention = 2 * 64 * 64 + 2 * 64 * 32
    by_hand = 4 * attention + 2 * 3 * 64 * 96 + 2 * (2 * 3 * 64 * 32 + 64 * 4) + 500 * 64
    assert count_params(arch).matmul_active == by_hand


@pytest.mark.parametrize(("name", "total", "active"), [
    ("gpt-oss-20b", 20.91e9, 3.61e9), ("gpt-oss-120b", 116.83e9, 5.13e9)])
def test_gpt_oss_matches_the_model_card(name: str, total: float, active: float) -> None:
    """The gpt-oss model card (arXiv:2508.10925) Table 1, to its two decimals. Its "active"
    figure is the weights one token's matmuls read, the LM head included."""
    counts = count_params(resolve_model(name)[0])
    assert counts.total == pytest.approx(total, abs=0.005e9)
    assert counts.matmul_active == pytest.approx(active, abs=0.005e9)


def test_gpt_oss_120b_flops_and_kv_cache_by_hand() -> None:
    """36 layers, 64 query heads and 8 KV heads of 64; every other layer a 128-token window.
    KV per token: 2 x 36 x 8 x 64 x 2 bytes = 73,728 B, but a windowed layer holds at most 128
    tokens: at 8,192 tokens of context, 18 layers hold 8,192 and 18 hold 128, a mean of 4,160.
    Attention forward per attended key: 4 x 64 x 64 x 36 = 589,824 FLOPs."""
    arch = resolve_model("gpt-oss-120b")[0]
    assert kv_cache_bytes_per_token(arch, 2.0) == 73_728
    assert kv_tokens_held(arch, 8192) == 4160
    assert arch.score_flops_per_key == 589_824
    matmul = count_params(arch).matmul_active
    assert generation_flops_per_token(arch, 8192) == 2 * matmul + 589_824 * 4160
    # a causal 4,096-token sequence: global layers see 2,048.5 keys on average, windowed ones
    # (4096 x 128 - 128 x 127 / 2) / 4096 = 126.06...
    windowed = (4096 * 128 - 128 * 127 / 2) / 4096
    expected = 4 * 64 * 64 * (18 * 2048.5 + 18 * windowed)
    assert attention_forward_flops_per_token(arch, 4096) == pytest.approx(expected, rel=1e-12)


def test_llama4_scout_text_active() -> None:
    """Llama 4 Scout (transformers' Llama4TextConfig defaults: 16 experts, 1 routed + 1 shared
    per token, every layer MoE): 17B active per Meta's model card, with the embedding."""
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model("llama4_text").to_dict()
    counts = count_params(from_hf_config(config, "scout"))
    assert counts.matmul_active + counts.embedding == pytest.approx(17e9, rel=0.02)


def test_moe_family_needs_its_experts() -> None:
    with pytest.raises(InputError, match="n_routed_experts"):
        from_hf_config({"model_type": "glm4_moe", **BASE}, "glm")
    with pytest.raises(InputError, match="moe_layers"):
        from_hf_config({"model_type": "llama4_text", **BASE, "num_local_experts": 4,
                        "num_experts_per_tok": 1, "moe_layers": [9]}, "l4")


def test_llama4_vision_config_counts_its_language_model_and_its_tower() -> None:
    """A llama4 (vision-language) config: its text_config is read exactly, plus the vision
    tower and projector (estimate/vit.py, held to transformers in tests/test_vision_vit.py)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model("llama4").to_dict()
    counts = count_params(from_hf_config(config, "llama4"))
    text = from_hf_config(config["text_config"], "text")
    assert counts.vision > 0
    assert counts.total == count_params(text).total + counts.vision


def test_llama4_chunked_attention_by_hand() -> None:
    """Scout's text model: 36 of 48 layers attend within 8,192-token chunks (all but every
    fourth, Llama4TextConfig's no_rope_layers). A causal 16,384-token sequence: global layers
    see 8,192.5 keys on average, chunked ones 2 x 8192 x 8193 / 2 / 16384 = 4,096.5, a mean of
    8192.5 - 36 x 4096 / 48 = 5,120.5. At 32,768 tokens of context the cache holds 32,768
    tokens on 12 layers and a chunk (8,192) on 36: 14,336 on average; a decode step attends to
    (12 x 32768 + 36 x 4096.5) / 48 = 11,264.375."""
    transformers = pytest.importorskip("transformers")
    arch = from_hf_config(transformers.AutoConfig.for_model("llama4_text").to_dict(), "scout")
    assert (arch.attention_chunk, arch.chunked_layers) == (8192, 36)
    from gpuhours.estimate.flops import causal_mean_attended

    assert causal_mean_attended(arch, 16384) == 5120.5
    assert kv_tokens_held(arch, 32768) == 14336
    assert arch.attended_tokens(32768) == 11264.375
    assert arch.attended_tokens(4000) == 4000  # shorter than a chunk: all of it


@pytest.mark.parametrize(("model_type", "variant"), [
    ("olmoe", dict(intermediate_size=128, num_experts=8, num_experts_per_tok=2)),
    ("granitemoe", dict(intermediate_size=128, num_local_experts=8, num_experts_per_tok=2)),
    ("glm4_moe", dict(intermediate_size=344, moe_intermediate_size=64, n_routed_experts=8,
                      num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
                      head_dim=64, n_group=1, topk_group=1)),
])
def test_activation_formula_matches_saved_storage(model_type: str,
                                                  variant: dict[str, Any]) -> None:
    """fp32, full fine-tuning, a real tiny model on the CPU (SDPA): the storage autograd saves
    in one forward, parameters excluded, within 5% (Mixtral, covered before, is 3.6% under at
    this size: the router's one-hot masks and per-row statistics are left out)."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from gpuhours.estimate.memory import activation_bytes
    from gpuhours.setup import Training

    batch, seq, vocab = 2, 64, 1000
    config = {"model_type": model_type, "hidden_size": 256, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": vocab,
              "tie_word_embeddings": False, **NONE_IDS, **variant}
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(**config))
    saved = saved_storage_bytes(model, batch, seq, vocab)
    arch = from_hf_config(config, "tiny")
    t = Training(arch=arch, method="full", precision="fp32", micro_batch=batch, seq_len=seq)
    # the loss keeps log-softmax's fp32 output: tokens x vocab x 4 bytes
    predicted = activation_bytes(arch, t).total + batch * seq * vocab * 4
    assert predicted == pytest.approx(saved, rel=0.05)


def test_glm4_moe_olmoe_granitemoe_flops_and_kv_by_hand() -> None:
    """Small configs (hidden 64, 4 layers, 4 heads of 16, 2 KV heads, vocabulary 500):
    - glm4_moe: layer 0 dense (3 x 64 x 32), layers 1-3 two routed experts and two shared ones
      fused (3 x 64 x 16 each, 3 x 64 x 32) and the router 64 x 4;
    - olmoe and granitemoe: two routed experts of 3 x 64 x 32 and the router 64 x 4 a layer.
    Attention 2 x 64 x 64 + 2 x 64 x 32 a layer; FLOPs 2 x those weights + 4 x 64 x 4 per
    attended key; KV 2 x 4 x 2 x 16 x 2 bytes per token."""
    attention = 2 * 64 * 64 + 2 * 64 * 32
    head = 500 * 64
    glm = from_hf_config({"model_type": "glm4_moe", **BASE, **SMALL[4][1]}, "glm")
    assert count_params(glm).matmul_active == (
        4 * attention + 3 * 64 * 32 + 3 * (2 * 3 * 64 * 16 + 3 * 64 * 32 + 64 * 4) + head)
    for model_type, variant in (SMALL[6], SMALL[7]):
        arch = from_hf_config({"model_type": model_type, **BASE, **variant}, model_type)
        matmul = 4 * attention + 4 * (2 * 3 * 64 * 32 + 64 * 4) + head
        assert count_params(arch).matmul_active == matmul
        assert generation_flops_per_token(arch, 100) == 2 * matmul + 4 * 64 * 4 * 100
        assert kv_cache_bytes_per_token(arch, 2.0) == 2 * 4 * 2 * 16 * 2
