"""Parameter counts from our formula against the real models and the published counts."""

from __future__ import annotations

import pytest

from gpuhours import catalog
from gpuhours.estimate.arch import from_hf_config, standard_shape
from gpuhours.estimate.arch_remote import REMOTE_CODE_MODEL_TYPES
from gpuhours.estimate.params import count_params
from gpuhours.resolve import resolve_model

#: not the remote-code types (Qwen-1): no transformers class to build, and their published
#: sizes are nominal; tests/test_qwen1.py holds them to a hand count and to those sizes
MODEL_NAMES = [m.name for m in catalog.models()
               if catalog.model(m.name)[1].get("model_type") not in REMOTE_CODE_MODEL_TYPES]


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_formula_equals_the_model_transformers_builds(name: str) -> None:
    """Exact identity with sum(p.numel()) of the model built on the meta device."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    _, config = catalog.model(name)
    hf_config = transformers.AutoConfig.for_model(**config)
    cls = getattr(transformers, config["architectures"][0], None)
    if config["model_type"] == "bert":
        cls = transformers.BertModel  # the encoder with its pooler, as we count it
    with torch.device("meta"):
        model = cls(hf_config) if cls else transformers.AutoModelForCausalLM.from_config(hf_config)
    real = sum(p.numel() for p in model.parameters())
    arch, _ = resolve_model(name)
    assert count_params(arch).total == real


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_formula_within_one_percent_of_published(name: str) -> None:
    entry, _ = catalog.model(name)
    assert entry is not None
    arch, _ = resolve_model(name)
    counts = count_params(arch)
    # a card that sizes the language model alone (published_params_scope): the tower left out
    lm_only = entry.published_params_scope == "language_model"
    assert counts.total - (counts.vision if lm_only else 0) == pytest.approx(
        entry.published_params, rel=0.01)


def test_moe_active_parameters_of_mixtral() -> None:
    # Mixtral 8x7B: 46.7B in all, 12.9B active per token (Jiang et al. 2024, sec. 2)
    arch, _ = resolve_model("mixtral-8x7b")
    counts = count_params(arch)
    assert counts.total == pytest.approx(46.7e9, rel=0.01)
    active = counts.matmul_active + counts.embedding  # the head is in matmul_active
    assert active == pytest.approx(12.9e9, rel=0.02)


def test_gqa_shrinks_kv_projections() -> None:
    arch, _ = resolve_model("llama-2-70b")
    # 8 kv heads of 128: k and v are 8192 x 1024 each
    assert arch.kv_dim == 1024
    per_layer = 8192 * 8192 * 2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192
    assert count_params(arch).attention_per_layer + count_params(arch).mlp_per_layer + \
        count_params(arch).norms_per_layer == per_layer


@pytest.mark.parametrize("params", [125e6, 1.3e9, 7e9, 13e9, 70e9, 175e9])
def test_standard_shape_hits_the_requested_size(params: float) -> None:
    arch = standard_shape(params)
    assert count_params(arch).total == pytest.approx(params, rel=0.02)


def test_vision_language_config_reads_its_text_config() -> None:
    _, cfg = catalog.model("qwen2.5-7b")
    wrapped = {"model_type": "qwen2_5_vl", "text_config": cfg, "vision_config": {}}
    arch = from_hf_config(wrapped, "vl")
    assert arch.hidden_size == cfg["hidden_size"]
