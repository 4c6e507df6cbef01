"""Phi-1/2, StarCoder2, GPT-NeoX, Falcon and Mamba-1 read exactly (issue 15): each held to
`sum(p.numel())` of the model transformers builds (meta device) from its default config
(tests/test_catalog_models.py), from variants that switch each part on and off, and from one
released model's shape, cited below; plus KV cache, FLOPs and state by hand."""

from __future__ import annotations

from typing import Any

import pytest

from gpuhours.estimate.arch import COVERED_MODEL_TYPES, from_hf_config
from gpuhours.estimate.flops import attention_forward_flops_per_token
from gpuhours.estimate.params import count_params
from saved_storage import saved_storage_bytes

IDS: dict[str, Any] = dict(eos_token_id=None, bos_token_id=None, pad_token_id=None)

#: released shapes, each from a public file (repository, path, commit) that quotes it
RELEASED: dict[str, tuple[dict[str, Any], int]] = {
    # microsoft/phi-2's config.json as quoted in sdpython/onnx-diagnostic
    # onnx_diagnostic/torch_models/untrained/llm_phi2.py @ cb87e855eea8 (Hub: 2.78B)
    "phi-2": (dict(model_type="phi", hidden_size=2560, intermediate_size=10240,
                   num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                   partial_rotary_factor=0.4, qk_layernorm=False, tie_word_embeddings=False,
                   vocab_size=51200, max_position_embeddings=2048), 2_779_683_840),
    # bigcode/starcoder2-7b: mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py "starcoder2"
    # @ d1ea69a87280 (Hub: 7.17B)
    "starcoder2-7b": (dict(model_type="starcoder2", hidden_size=4608, intermediate_size=18432,
                           num_hidden_layers=32, num_attention_heads=36, num_key_value_heads=4,
                           max_position_embeddings=16384, sliding_window=4096, use_bias=True,
                           vocab_size=49152), 7_173_923_840),
    # EleutherAI/pythia-6.9b: its module print in Retruth/deontic nlp_models/pythia/README.md
    # @ a77cf87a7777; 6,857,302,016 is the Pythia paper's count (arXiv:2304.01373, Table 1)
    "pythia-6.9b": (dict(model_type="gpt_neox", hidden_size=4096, intermediate_size=16384,
                         num_hidden_layers=32, num_attention_heads=32, vocab_size=50432,
                         rotary_pct=0.25, use_parallel_residual=True,
                         tie_word_embeddings=False), 6_857_302_016),
    # tiiuae/falcon-7b: its module print in kimborgen/falcon-llm README.md @ fe42e396b2b6
    # (multi-query: query_key_value 4544 -> 4672; one LayerNorm a layer)
    "falcon-7b": (dict(model_type="falcon", hidden_size=4544, num_hidden_layers=32,
                       num_attention_heads=71, multi_query=True, parallel_attn=True, bias=False,
                       new_decoder_architecture=False, vocab_size=65024), 6_921_720_704),
    # state-spaces/mamba-2.8b: LaurentMazare/mamba.rs src/constants.rs @ 81946b91deab (d_model
    # 2560, 64 layers, d_state 16, d_conv 4, vocabulary 50277 padded to 50280)
    "mamba-2.8b": (dict(model_type="mamba", hidden_size=2560, num_hidden_layers=64,
                        vocab_size=50280, state_size=16, conv_kernel=4, expand=2), 2_768_345_600),
}

VARIANTS: list[dict[str, Any]] = [
    dict(model_type="phi", qk_layernorm=True, num_key_value_heads=8, tie_word_embeddings=True),
    dict(model_type="starcoder2", use_bias=False, tie_word_embeddings=False),
    dict(model_type="gpt_neox", attention_bias=False, tie_word_embeddings=True),
    dict(model_type="falcon", new_decoder_architecture=True, num_kv_heads=8,
         num_attention_heads=64, hidden_size=4096),
    dict(model_type="falcon", new_decoder_architecture=True, num_kv_heads=8,
         num_attention_heads=64, hidden_size=4096, num_ln_in_parallel_attn=1, bias=True),
    dict(model_type="falcon", multi_query=False, parallel_attn=False, bias=True, alibi=True),
    dict(model_type="mamba", use_bias=True, use_conv_bias=False, tie_word_embeddings=False,
         time_step_rank=20),
]


def _built(config: dict[str, Any]) -> int:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    small = {**config, **IDS, "num_hidden_layers": 2}  # the count is linear in the layers
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**small))
    return int(sum(p.numel() for p in model.parameters()))


def test_the_five_are_covered() -> None:
    assert {"phi", "starcoder2", "gpt_neox", "falcon", "mamba"} <= COVERED_MODEL_TYPES


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_released_shape_equals_transformers_and_the_published_count(name: str) -> None:
    config, published = RELEASED[name]
    assert count_params(from_hf_config(config, name)).total == published
    two = count_params(from_hf_config({**config, "num_hidden_layers": 2}, name)).total
    assert two == _built(config)


@pytest.mark.parametrize("variant", VARIANTS, ids=[str(i) for i in range(len(VARIANTS))])
def test_variants_equal_transformers(variant: dict[str, Any]) -> None:
    """The config as transformers saves it (its class defaults for what the variant leaves
    out), two layers."""
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(**variant, num_hidden_layers=2).to_dict()
    assert count_params(from_hf_config(config, "v")).total == _built(config)


def test_falcon_7b_multi_query_by_hand() -> None:
    """71 query heads of 64 and one K/V head: query_key_value 4544 x (71 + 2) x 64; one
    LayerNorm (with bias) a layer; the head tied. KV cache: 2 x 64 per layer and token."""
    arch = from_hf_config(RELEASED["falcon-7b"][0], "falcon-7b")
    d, f = 4544, 4 * 4544
    layer = d * 73 * 64 + d * d + 2 * d * f + 2 * d
    assert count_params(arch).total == 65024 * d + 32 * layer + 2 * d
    assert arch.kv_cache_elements_per_token == 32 * 2 * 64
    # scores: 4 x 71 x 64 per attended key and layer, (S + 1) / 2 keys under the causal mask
    assert attention_forward_flops_per_token(arch, 2048) == 4 * 71 * 64 * 32 * 2049 / 2


def test_mamba_state_and_no_attention() -> None:
    """Mamba-2.8B: inner 5120, state 16, conv 4: a sequence keeps 5120 x 16 + 5120 x 3
    elements a layer whatever its length, and no KV cache."""
    arch = from_hf_config(RELEASED["mamba-2.8b"][0], "m")
    assert arch.kv_cache_elements_per_token == 0
    assert arch.ssm_state_elements == 64 * (5120 * 16 + 5120 * 3)
    assert arch.ssm is not None and arch.ssm.dt_rank == 160  # ceil(2560 / 16)


def test_starcoder2_windows_every_layer_and_phi_keeps_its_head_bias() -> None:
    sc = from_hf_config(RELEASED["starcoder2-7b"][0], "sc")
    assert (sc.sliding_window, sc.sliding_layers) == (4096, 32)
    phi = from_hf_config(RELEASED["phi-2"][0], "phi")
    assert phi.extra_params == 51200 and phi.norms_per_block == 1 and phi.parallel_residual
    assert phi.rotary_fraction == 0.4


@pytest.mark.parametrize("variant", [
    dict(model_type="phi", intermediate_size=1024, num_key_value_heads=4),  # gelu_new
    dict(model_type="starcoder2", intermediate_size=1024, num_key_value_heads=2),
    dict(model_type="gpt_neox", intermediate_size=1024),
    dict(model_type="falcon", ffn_hidden_size=1024),
    dict(model_type="falcon", ffn_hidden_size=1024, new_decoder_architecture=True, num_kv_heads=2),
], ids=["phi", "starcoder2", "gpt_neox", "falcon", "falcon-new"])
def test_activation_formula_matches_saved_storage(variant: dict[str, Any]) -> None:
    """fp32, full fine-tuning, a real tiny model on the CPU (SDPA, dropout off): the storage
    autograd saves in one forward, parameters excluded, within 5% (as the MoE families).
    Phi's gelu_new keeps 3 more f-wide tensors a token than a native GELU."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from gpuhours.estimate.memory import activation_bytes
    from gpuhours.setup import Training

    batch, seq, vocab = 2, 64, 1000
    config = transformers.AutoConfig.for_model(**{
        "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": vocab,
        "tie_word_embeddings": False, **IDS, **variant})
    for key in ("hidden_dropout", "attention_dropout", "resid_pdrop", "embd_pdrop",
                "residual_dropout", "embedding_dropout"):
        if hasattr(config, key):
            setattr(config, key, 0.0)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    saved = saved_storage_bytes(model, batch, seq, vocab)
    arch = from_hf_config(config.to_dict(), "tiny")
    t = Training(arch=arch, method="full", precision="fp32", micro_batch=batch, seq_len=seq)
    predicted = activation_bytes(arch, t).total + batch * seq * vocab * 4  # the loss's log-softmax
    assert predicted == pytest.approx(saved, rel=0.05)


def test_phi3_windows_every_layer_when_its_config_says() -> None:
    """Phi3Attention passes config.sliding_window to attention on every layer: Phi-3-medium's
    2047-token window (catalog phi-3-medium); Phi-4's null leaves every layer global."""
    from gpuhours.resolve import resolve_model

    medium = resolve_model("phi-3-medium")[0]
    assert (medium.sliding_window, medium.sliding_layers) == (2047, 40)
    assert resolve_model("phi-4")[0].sliding_window is None


def test_phi3_mini_4k_windows_at_2047_as_its_hub_config() -> None:
    """microsoft/Phi-3-mini-4k-instruct's config.json sets sliding_window 2047 (catalog
    phi-3-mini, quoted in TensorRT-LLM's test_modeling_phi3.py): every layer windowed."""
    from gpuhours.resolve import resolve_model

    mini = resolve_model("phi-3-mini")[0]
    assert (mini.sliding_window, mini.sliding_layers) == (2047, 32)
