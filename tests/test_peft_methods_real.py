"""The PEFT methods beside LoRA (estimate/peft_methods.py) against a real tiny Llama with peft
0.21.2 on CPU: the trainable parameters peft counts, and the storage autograd keeps at the end
of one forward beyond the frozen model's own (all of its parameters frozen, its input taking a
gradient, as enable_input_require_grads sets it), counted with liveness by weak references
as tests/test_dora_real.py counts them (the same counter, written here again so that each
file stands alone).
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.peft_methods import (
    lokr_factorization,
    peft_method_saved_bytes_per_layer,
    peft_method_saved_bytes_per_token_layer,
)
from gpuhours.setup import Training
from saved_storage import alive_saved_bytes

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

CONFIG = dict(model_type="llama", hidden_size=256, intermediate_size=688, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
              max_position_embeddings=512, tie_word_embeddings=False)
BATCH, SEQ, RANK, VIRTUAL = 2, 64, 8, 12
TARGETS = {"qv": ["q_proj", "v_proj"], "all-linear": "all-linear"}
# peft 0.21 calls a transformers 5.23 method that warns about its own deprecation
DEPRECATED = "ignore:`is_gradient_checkpointing` is deprecated:FutureWarning"


def _config(method: str, targets: str) -> Any:
    t = TARGETS[targets]
    if method == "ia3" and targets == "all-linear":  # as the PEFT benchmark's all-attn run
        mlp = ["gate_proj", "up_proj", "down_proj"]
        return peft.IA3Config(target_modules=["q_proj", "k_proj", "v_proj", "o_proj", *mlp],
                              feedforward_modules=mlp)
    if method == "ia3":
        return peft.IA3Config(task_type="CAUSAL_LM")
    if method == "loha":
        return peft.LoHaConfig(r=RANK, target_modules=t)
    if method == "lokr":
        return peft.LoKrConfig(r=RANK, target_modules=t)
    if method == "vera":
        return peft.VeraConfig(r=RANK, target_modules=t)
    if method == "prompt_tuning":
        return peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=VIRTUAL)
    return peft.PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=VIRTUAL)


def _model(method: str | None, targets: str = "qv") -> Any:
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.AutoConfig.for_model(**CONFIG))
    model = model.to(torch.bfloat16)
    if method is None:  # the frozen model alone
        model.requires_grad_(False)
    else:
        model = peft.get_peft_model(model, _config(method, targets))
    model.train()
    model.enable_input_require_grads()
    return model


def _saved(model: Any, seq: int = SEQ) -> int:
    """saved_storage.alive_saved_bytes of one forward on the test's tokens."""
    ids = torch.randint(0, 1000, (BATCH, seq), generator=torch.Generator().manual_seed(0))
    return alive_saved_bytes(model, ids)


def _training(method: str, targets: str = "qv") -> Training:
    virtual = VIRTUAL if method in ("prompt_tuning", "prefix_tuning") else None
    ia3 = "all-linear" if (method == "ia3" and targets == "all-linear") else "k-v-down"
    return Training(arch=from_hf_config(CONFIG, "tiny"), method="lora", precision="bf16",
                    micro_batch=BATCH, seq_len=SEQ, lora_rank=RANK, lora_targets=targets,
                    peft_method=method, peft_virtual_tokens=virtual, ia3_targets=ia3)


CASES = [("ia3", "qv"), ("ia3", "all-linear"), ("loha", "qv"), ("loha", "all-linear"), ("lokr", "qv"),
         ("lokr", "all-linear"), ("vera", "qv"), ("vera", "all-linear"), ("prefix_tuning", "qv")]


@pytest.mark.filterwarnings(DEPRECATED)
@pytest.mark.parametrize(("method", "targets"), CASES)
def test_saved_storage_beyond_the_frozen_model(method: str, targets: str) -> None:
    frozen = _saved(_model(None))
    real = _saved(_model(method, targets))
    t = _training(method, targets)
    layers = CONFIG["num_hidden_layers"]
    predicted = layers * (BATCH * SEQ * peft_method_saved_bytes_per_token_layer(t.arch, t, 2)
                          + peft_method_saved_bytes_per_layer(t.arch, t, 2))
    assert predicted == pytest.approx(real - frozen, rel=0.01)


@pytest.mark.filterwarnings(DEPRECATED)
def test_prompt_tuning_keeps_what_a_longer_sequence_keeps() -> None:
    """Prompt tuning on seq_len tokens keeps what the frozen model keeps on seq_len + P (the
    setup's llm_seq_len, which every activation and logits term then uses): the same layers,
    norms and logits at P more positions; only the virtual tokens' indices (int64) and the
    longer labels differ, a few hundred bytes."""
    longer = _saved(_model(None), seq=SEQ + VIRTUAL)
    real = _saved(_model("prompt_tuning"))
    assert _training("prompt_tuning").llm_seq_len == SEQ + VIRTUAL
    assert real == pytest.approx(longer, abs=BATCH * VIRTUAL * 8 + VIRTUAL * 8)
    assert real > _saved(_model(None)) * 1.1  # the P positions are seen: not 0


@pytest.mark.filterwarnings(DEPRECATED)
@pytest.mark.parametrize(("method", "targets"), [*CASES, ("prompt_tuning", "qv")])
def test_trainable_params_as_peft_counts_them(method: str, targets: str) -> None:
    model = _model(method, targets)
    real = sum(p.numel() for p in model.parameters() if p.requires_grad)
    t = _training(method, targets)
    assert training_memory(t.arch, t).trainable_params == real


@pytest.mark.parametrize("dimension", [688, 256, 1024, 3072, 127, 8192])
@pytest.mark.parametrize("factor", [-1, 4, 3, 16])
def test_lokr_factorization_is_peft_s(dimension: int, factor: int) -> None:
    from peft.tuners.lokr.layer import factorization

    assert lokr_factorization(dimension, factor) == factorization(dimension, factor)
