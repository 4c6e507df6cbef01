"""Exact or refused (issue 15): every model the analytic model covers is counted exactly, and any
other config is counted by transformers on the meta device or refused, never silently wrong.

Exact identities are against `sum(p.numel())` of the model transformers builds from the same
config on the meta device (tied weights once); published counts are held to the tolerance stated
by each test.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gpuhours import catalog
from gpuhours.errors import FieldError
from gpuhours.estimate.arch import COVERED_MODEL_TYPES, MATCH_TOLERANCE, from_hf_config
from gpuhours.estimate.arch_remote import REMOTE_CODE_MODEL_TYPES
from gpuhours.estimate.params import count_params
from gpuhours.resolve import resolve_model

MODEL_NAMES = [m.name for m in catalog.models()]
#: models transformers can build: not the remote-code types (Qwen-1), which have no class there
#: and are held to a hand count of their config instead (tests/test_qwen1.py)
BUILT_NAMES = [n for n in MODEL_NAMES
               if catalog.model(n)[1].get("model_type") not in REMOTE_CODE_MODEL_TYPES]


def built_count(config: dict[str, Any]) -> int:
    """Parameters of the model transformers builds from `config` on the meta device: the causal
    LM, or for bert the encoder with its pooler (how gpuhours counts an encoder)."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    hf_config = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"):
        if config["model_type"] == "bert":
            model = transformers.BertModel(hf_config)
        elif config["model_type"] == "qwen2_5_vl":  # a vision-language model: not a causal LM
            model = transformers.Qwen2_5_VLForConditionalGeneration(hf_config)
        elif config["model_type"] in ("llava", "llava_next", "gemma3", "llama4", "qwen2_vl",
                                      "qwen3_5", "qwen3_5_moe"):
            model = transformers.AutoModelForImageTextToText.from_config(hf_config)
        else:
            model = transformers.AutoModelForCausalLM.from_config(hf_config)
    return sum(p.numel() for p in model.parameters())


# --- every covered model type, at transformers' default config ----------------------------------


@pytest.mark.parametrize("model_type", sorted(COVERED_MODEL_TYPES))
def test_covered_type_default_config_is_exact(model_type: str) -> None:
    """The default config of each covered family in the installed transformers: exact."""
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(model_type).to_dict()
    if model_type == "deepseek_v2":  # its config class leaves it None (no routing without it);
        config["num_experts_per_tok"] = 6  # DeepSeek-V2's value: it changes no parameter
    assert count_params(from_hf_config(config, model_type)).total == built_count(config)


# --- every catalog model --------------------------------------------------------------------------


#: catalog rows of a model type outside the analytic model, with the reason: gpuhours counts them by
#: building them with transformers on the meta device, and its basis must say so
META_COUNTED: dict[str, str] = {}  # none today: Gemma 3's text model is read as gemma3_text


@pytest.mark.parametrize("name", BUILT_NAMES)
def test_catalog_model_is_exact(name: str) -> None:
    _, config = catalog.model(name)
    arch, basis = resolve_model(name)
    if name in META_COUNTED:
        assert "meta device" in basis and arch.params_basis
    else:
        assert arch.model_type in COVERED_MODEL_TYPES and not arch.params_basis
        assert "meta device" not in basis
    assert count_params(arch).total == built_count(config)


@pytest.mark.parametrize("name", BUILT_NAMES)
def test_catalog_model_within_one_percent_of_published(name: str) -> None:
    """Published figures are often rounded (0.49B, 3.8B): 1% covers the rounding; each row's notes
    give the exact count and the gap."""
    entry, _ = catalog.model(name)
    assert entry is not None
    arch, _ = resolve_model(name)
    counts = count_params(arch)
    # a card that sizes the language model alone (published_params_scope): the tower left out
    lm_only = entry.published_params_scope == "language_model"
    assert counts.total - (counts.vision if lm_only else 0) == pytest.approx(
        entry.published_params, rel=0.01)


#: rows whose published figure is an exact parameter count of the same checkpoint: equal
EXACT_PUBLISHED = ["qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-14b", "qwen3-32b",
                   "llama-3.1-8b", "llama-3.1-70b"]


@pytest.mark.parametrize("name", EXACT_PUBLISHED)
def test_exact_published_counts_are_equal(name: str) -> None:
    entry, _ = catalog.model(name)
    assert entry is not None
    arch, _ = resolve_model(name)
    assert count_params(arch).total == int(entry.published_params)


@pytest.mark.parametrize(("name", "hidden"), [("gemma-2-2b", 2304), ("gemma-2-9b", 3584),
                                              ("gemma-2b", 2048), ("gemma-7b", 3072)])
def test_gemma2_report_counts_128_more_vocabulary_rows(name: str, hidden: int) -> None:
    """Gemma 2 report, Table 2 (and the Gemma report's Table 2 for Gemma 1): embedding +
    non-embedding with a 256,128-row vocabulary; the checkpoints have 256,000 rows (tied), so
    the report is exactly 128 x hidden above."""
    entry, _ = catalog.model(name)
    assert entry is not None
    arch, _ = resolve_model(name)
    assert int(entry.published_params) - count_params(arch).total == 128 * hidden


def test_qwen3_moe_total_and_active() -> None:
    # Qwen3-30B-A3B card: 30.5B in all, 3.3B activated
    counts = count_params(resolve_model("qwen3-30b-a3b")[0])
    assert counts.total == pytest.approx(30.5e9, rel=0.005)
    assert counts.matmul_active + counts.embedding == pytest.approx(3.3e9, rel=0.02)


@pytest.mark.parametrize(
    ("alias", "base", "hub_total"),
    [  # the Hub API's safetensors.total of each distill, as captured (the rows' notes name where)
        ("deepseek-r1-distill-llama-8b", "llama-3.1-8b", 8_030_261_248),
        ("DeepSeek-R1-Distill-Qwen-32B", "qwen2.5-32b", 32_763_876_352),
    ],
)
def test_r1_distill_aliases_have_their_released_count(alias: str, base: str, hub_total: int) -> None:
    """A distill is an alias only where its released weights have the base row's count exactly."""
    entry, _ = catalog.model(alias)
    assert entry is not None and entry.name == base
    assert count_params(resolve_model(alias)[0]).total == hub_total


@pytest.mark.parametrize(
    ("name", "card_non_embedding"),
    # Qwen2.5 cards: "Non-Embedding" 1.31B (tied: one matrix) and 70.0B (untied: two)
    [("qwen2.5-1.5b", 1.31e9), ("qwen2.5-72b", 70.0e9)],
)
def test_qwen25_rows_from_qwen2_configs_match_the_cards_non_embedding(
    name: str, card_non_embedding: float
) -> None:
    """These two rows take Qwen2's config (the Qwen2.5 one was not in a named public file): the
    card's non-embedding figure checks the body's shape apart from the vocabulary."""
    _, config = catalog.model(name)
    arch, _ = resolve_model(name)
    embedding = config["vocab_size"] * config["hidden_size"]
    matrices = 1 if config["tie_word_embeddings"] else 2
    body = count_params(arch).total - matrices * embedding
    assert body == pytest.approx(card_non_embedding, rel=0.005)


def test_gemma_ties_its_embeddings_when_the_config_does_not_say() -> None:
    _, config = catalog.model("gemma-2-2b")
    assert "tie_word_embeddings" not in config
    assert resolve_model("gemma-2-2b")[0].tie_embeddings


# --- what is not covered: counted on the meta device, or refused ---------------------------------

#: Bamba: a Mamba-2 hybrid the analytic model does not cover, whose fields read as a llama-style
#: decoder give a wrong count (no mixers), so it is refused
BAMBA = {"model_type": "bamba", "architectures": ["BambaForCausalLM"], "hidden_size": 64,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 256, "vocab_size": 1000, "mamba_n_heads": 8, "mamba_d_head": 16,
         "mamba_d_state": 16, "attn_layer_indices": [1], "max_position_embeddings": 128}
#: OLMo: a llama-style block whose LayerNorms have no weights, so the generic reading is within
#: MATCH_TOLERANCE of the real count (2 x 2 x 64 + 64 norm weights too many)
OLMO = {"model_type": "olmo", "architectures": ["OlmoForCausalLM"], "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 172,
        "vocab_size": 1000, "max_position_embeddings": 128}


def _write(tmp_path: Path, config: dict[str, Any]) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_uncovered_type_that_the_generic_reading_gets_wrong_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    real = built_count(BAMBA)
    with pytest.raises(FieldError, match=rf"model_type 'bamba'.*transformers builds {real:,}"
                                         r".*Covered model types: bert, deepseek_v2") as info:
        resolve_model(_write(tmp_path, BAMBA))
    assert info.value.fields == ("model",)


def test_uncovered_type_is_refused_without_transformers(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` fails
    with pytest.raises(FieldError, match=r"model_type 'bamba' is not one the analytic model "
                                         r"covers, and transformers is not installed.*"
                                         r"Covered model types: .*qwen3_moe"):
        resolve_model(_write(tmp_path, BAMBA))
    # a covered type needs no transformers
    assert resolve_model("gemma-2-2b")[0].norms_per_block == 4


def test_uncovered_type_close_to_the_generic_shape_is_counted_on_the_meta_device(
        tmp_path: Path) -> None:
    real = built_count(OLMO)
    arch, basis = resolve_model(_write(tmp_path, OLMO))
    assert count_params(arch).total == real
    assert "meta device" in basis and "olmo" in basis
    generic = count_params(from_hf_config({**OLMO, "model_type": "llama"}, "generic")).total
    assert 0 < abs(generic - real) <= MATCH_TOLERANCE * real
    assert count_params(arch).extra == real - generic


def test_qwen_moe_with_dense_layers_is_counted_exactly(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    _, config = catalog.model("qwen3-30b-a3b")
    small = {**config, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 1024,
             "moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2,
             "vocab_size": 1000, "bos_token_id": None, "eos_token_id": None,
             "mlp_only_layers": [0]}  # layer 0 dense (FFN 1024), layer 1 sparse
    arch, _ = resolve_model(_write(tmp_path, small))
    assert (arch.dense_mlp_layers, arch.moe_layers) == (1, 1)
    assert count_params(arch).total == built_count(small)
    # decoder_sparse_step 2: layers 1, 3 sparse (Qwen2MoeDecoderLayer's rule), 0 and 2 dense
    stepped = {**small, "mlp_only_layers": [], "decoder_sparse_step": 2, "num_hidden_layers": 4}
    arch, _ = resolve_model(_write(tmp_path, stepped))
    assert (arch.dense_mlp_layers, arch.moe_layers) == (2, 2)
    assert count_params(arch).total == built_count(stepped)


def test_cli_refuses_an_uncovered_type_with_exit_2(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    import gpuhours.cli

    monkeypatch.setitem(sys.modules, "transformers", None)
    result = CliRunner().invoke(gpuhours.cli.app, [
        "estimate", "--model", _write(tmp_path, BAMBA), "--gpu", "h100-sxm", "--tokens", "1e9"])
    assert result.exit_code == 2
    assert "bamba" in result.output and "Traceback" not in result.output


def test_covered_config_file_does_not_import_torch(tmp_path: Path) -> None:
    """A config.json of a covered type (here Gemma 2) stays on the light path."""
    _, config = catalog.model("gemma-2-9b")
    path = _write(tmp_path, config)
    script = textwrap.dedent(f"""
        import sys
        from gpuhours.resolve import resolve_model
        resolve_model({path!r})
        print(sorted(m for m in ("torch", "transformers") if m in sys.modules))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"
