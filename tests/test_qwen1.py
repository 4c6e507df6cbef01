"""Qwen-1 (model_type qwen, trust_remote_code) in the catalog: transformers has no class for it, so
each catalog config is held to a count by hand from the config and modeling_qwen.py's modules
(QWenAttention: c_attn d -> 3 x heads x kv_channels with a bias, c_proj without (no_bias);
QWenMLP: w1, w2 d -> intermediate_size / 2 and c_proj back, no biases; RMSNorm ln_1, ln_2, ln_f;
wte and an untied lm_head)."""

from __future__ import annotations

import pytest

from gpuhours import catalog
from gpuhours.estimate.arch import COVERED_MODEL_TYPES
from gpuhours.estimate.params import count_params
from gpuhours.resolve import resolve_model


def hand_count(d: int, layers: int, heads: int, kv_channels: int, inner: int, vocab: int) -> int:
    proj = heads * kv_channels
    attention = d * 3 * proj + 3 * proj + proj * d   # c_attn weight + bias, c_proj weight
    mlp = 3 * d * (inner // 2)                        # w1, w2, c_proj
    norms = 2 * d                                     # ln_1, ln_2
    return layers * (attention + mlp + norms) + d + 2 * vocab * d  # ln_f, wte, lm_head


# (name, hidden, layers, heads, kv_channels, intermediate_size, vocab), from each config.json
CONFIGS = [
    ("qwen-1.8b", 2048, 24, 16, 128, 11008, 151936),
    ("qwen-7b", 4096, 32, 32, 128, 22016, 151936),
    ("qwen-14b", 5120, 40, 40, 128, 27392, 152064),
    ("qwen-72b", 8192, 80, 64, 128, 49152, 152064),
]


@pytest.mark.parametrize(("name", "d", "layers", "heads", "kv", "inner", "vocab"), CONFIGS)
def test_catalog_config_matches_the_hand_count(name, d, layers, heads, kv, inner, vocab) -> None:
    _, config = catalog.model(name)
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"],
            config["kv_channels"], config["intermediate_size"], config["vocab_size"]) == (
        d, layers, heads, kv, inner, vocab)
    arch, _ = resolve_model(name)
    assert count_params(arch).total == hand_count(d, layers, heads, kv, inner, vocab)


def test_qwen_7b_is_7_72_billion() -> None:
    """The brief's figure: 4096 x 12288 + 12288 + 4096^2 (attention) + 3 x 4096 x 11008 (MLP) +
    2 x 4096 (norms) = 202,395,648 per layer; x 32 + 2 x 151,936 x 4096 + 4096 = 7,721,324,544."""
    arch, _ = resolve_model("qwen-7b")
    counts = count_params(arch)
    assert counts.total == 7_721_324_544
    assert not arch.tie_embeddings and arch.qkv_bias and not arch.out_bias
    assert arch.intermediate_size == 11008 and arch.num_kv_heads == arch.num_heads


#: nominal published sizes (README: 1.8B, 14B, 72B) and how far above them the exact count is, as
#: the catalog rows' notes say; Qwen-7B's is an exact count (ms-swift: 7721.3245M trainable)
GAPS = {"qwen-1.8b": 0.020, "qwen-7b": 0.0, "qwen-14b": 0.012, "qwen-72b": 0.004}


@pytest.mark.parametrize("name", sorted(GAPS))
def test_exact_count_against_the_published_size(name: str) -> None:
    entry, _ = catalog.model(name)
    assert entry is not None
    total = count_params(resolve_model(name)[0]).total
    assert total / entry.published_params - 1 == pytest.approx(GAPS[name], abs=0.0005)


def test_qwen_7b_count_is_the_published_one_to_its_last_digit() -> None:
    entry, _ = catalog.model("qwen-7b")
    assert entry is not None
    assert round(count_params(resolve_model("qwen-7b")[0]).total / 1e6, 4) == pytest.approx(
        entry.published_params / 1e6)


def test_qwen1_is_not_a_transformers_type() -> None:
    """Covered types are checked against transformers' own builds; Qwen-1 cannot be."""
    assert "qwen" not in COVERED_MODEL_TYPES


def test_chat_alias_and_an_odd_intermediate_size_is_refused() -> None:
    assert resolve_model("qwen-14b-chat")[0].name == "qwen-14b"
    from gpuhours.errors import InputError
    from gpuhours.estimate.arch import from_hf_config

    _, config = catalog.model("qwen-7b")
    with pytest.raises(InputError, match="twice the MLP width"):
        from_hf_config({**config, "intermediate_size": 22015}, "odd")
