"""The fine-tuning rows of the models added to the catalog for issue 14 (litgpt's config_hub and
resource tables, ms-swift's Yi rows): how each is mapped, checked against what the sources print
and what litgpt's code does (Lightning-AI/litgpt @ 00af8b0d, lit-gpt @ 8641822)."""

from __future__ import annotations

import re

import pytest

from gpuhours.estimate.lora import lora_params
from gpuhours.resolve import resolve_model
from gpuhours_dev.validation import _rows
from gpuhours_dev.validation.finetune import DATA, map_row


@pytest.fixture(scope="module")
def rows():
    return _rows(DATA)


def _printed_trainable(r: dict[str, str]) -> int:
    m = re.search(r"trainable parameters ([\d,]+)", r["notes"])
    assert m is not None
    return int(m.group(1).replace(",", ""))


def test_phi_15_qv_adapters_are_the_count_lit_gpt_printed(rows):
    """lit-gpt's resource table prints 1,572,864 trainable parameters for phi-1.5 LoRA r8 on q
    and v (#54): 24 layers x r (2 x 2048 + 2048 + 2048), the count of the row's q_proj and v_proj
    adapters on the catalog's phi-1.5."""
    m = map_row(54, rows[53])
    assert m.training is not None and m.training.lora_targets == "qv"
    arch, _ = resolve_model("phi-1.5")
    assert lora_params(arch, 8, "qv") == _printed_trainable(rows[53]) == 1_572_864


@pytest.mark.parametrize("row", [1, 47, 59])
def test_litgpt_qv_on_a_fused_qkv_is_modelled_as_qkv_and_o(rows, row):
    """Falcon and GPT-NeoX fuse q, k and v; litgpt's LoRAQKVLinear adapts q and v inside the
    fused matrix, which peft cannot: the row is modelled with the fused qkv and o adapters, a
    superset, and says so."""
    m = map_row(row, rows[row - 1])
    assert m.training is not None and m.training.lora_targets == "attention"
    assert "LoRAQKVLinear" in m.setup


def test_stablelm_superset_is_the_printed_count_plus_k_and_o(rows):
    """#59 prints 2,097,152 trainable parameters (r8 on q and v of StableLM-Alpha 3B: 16 layers x
    (2r x 4096 + r x (4096 + 4096))); the modelled fused qkv adapter has one A of r rows (r x
    4096 fewer) and B over k too (r x 4096 more), and the o adapter adds r x (4096 + 4096)."""
    m = map_row(59, rows[58])
    assert m.training is not None
    arch = m.training.arch
    extra = 16 * 8 * (-4096 + 4096 + (4096 + 4096))
    assert lora_params(arch, 8, "attention") == _printed_trainable(rows[58]) + extra


def test_litgpt_phi_runs_torchs_native_gelu(rows):
    """litgpt's GptNeoxMLP calls F.gelu(approximate='tanh'), not transformers' gelu_new
    composite: phi-2's rows keep no extra GELU intermediates; the catalog model itself does."""
    arch, _ = resolve_model("phi-2")
    assert arch.activation_extra_saved == 3
    m = map_row(40, rows[39])
    assert m.training is not None and m.training.arch.activation_extra_saved == 0
    assert "native F.gelu" in m.setup


@pytest.mark.parametrize(("row", "model"), [(5, "gemma-2b"), (11, "gemma-2-2b"),
                                            (12, "gemma-2-2b")])
def test_litgpt_row_takes_the_checkpoint_its_config_names(rows, row, model):
    """The README table labels the gemma2-2b/*.yaml runs "gemma-2b"; their configs fine-tune
    checkpoints/google/gemma-2-2b (checkpoint_dir), and the row takes that model."""
    m = map_row(row, rows[row - 1])
    assert m.training is not None and m.training.model == model
    assert ("checkpoint_dir" in m.setup) == (model != "gemma-2b")


def test_ms_swift_default_targets_for_yi(rows):
    """ms-swift registers yi-6b-chat with LoRATM.llama2 (q_proj, k_proj, v_proj): modelled as
    exactly those (lora_targets qkv), no o_proj adapter."""
    m = map_row(219, rows[218])
    assert m.training is not None and m.training.model == "yi-6b"
    assert m.training.lora_targets == "qkv" and "one adapter more" not in m.setup


@pytest.mark.parametrize(("row", "repeated"), [(36, True), (5, True), (1, True), (59, False),
                                               (40, False), (74, True), (64, False)])
def test_litgpt_attention_copies_k_and_v_to_the_query_heads(rows, row, repeated):
    """litgpt @ 00af8b0d (config_hub) expands and reshapes k and v to the query heads whenever
    the query groups are fewer than the heads (Mistral #36, Gemma-2B's one group #5, Falcon-7B
    #1); lit-gpt @ 8641822 (resource tables) for grouped-query attention only (Falcon-40B #74);
    multi-head attention has nothing to repeat (StableLM #59, Phi-2 #40, Llama-2-7B #64)."""
    m = map_row(row, rows[row - 1])
    assert m.training is not None and m.training.kv_repeated is repeated
