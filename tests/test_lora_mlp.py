"""LoRA on the MLP projections only (lora_targets "mlp"; estimate/lora_mlp.py): the adapter
count by hand and from a published run, peft's count and the saved activations of a real
model on this CPU, and the refusals."""

from __future__ import annotations

import pytest

from gpuhours.errors import FieldError
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.lora import lora_params
from gpuhours.estimate.memory import activation_bytes
from gpuhours.resolve import resolve_model
from gpuhours.setup import Training, lora_target_modules
from saved_storage import saved_storage_bytes

CONFIG = dict(model_type="llama", hidden_size=256, intermediate_size=688, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
              max_position_embeddings=512, tie_word_embeddings=False)
BATCH, SEQ = 2, 64


def test_llama_3b_count_by_hand_and_published() -> None:
    """Llama 3.2 3B (28 layers, hidden 3072, MLP 8192): each layer's gate, up and down hold
    r (3072 + 8192) each, so r 10 gives 28 x 10 x 3 x 11,264 = 9,461,760: the
    num_trainable_params PEFT's benchmark logged for lora/llama-3.2-3B-rank10-target-mlp
    (finetune_runs.csv #372)."""
    arch, _ = resolve_model("llama-3.2-3b")
    assert lora_params(arch, 10, "mlp") == 9_461_760
    assert lora_target_modules("mlp") == ["gate_proj", "up_proj", "down_proj"]


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_real_peft_model_count_and_saved_activations() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(
        transformers.AutoConfig.for_model(**CONFIG)).to(torch.bfloat16)
    model = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules=lora_target_modules(
        "mlp")))
    model.train()
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    arch = from_hf_config(CONFIG, "tiny")
    assert lora_params(arch, 8, "mlp") == trainable == 2 * 8 * 3 * (256 + 688)
    real = saved_storage_bytes(model, BATCH, SEQ, 1000, None)
    t = Training(arch=arch, method="lora", precision="bf16", micro_batch=BATCH, seq_len=SEQ,
                 lora_rank=8, lora_targets="mlp")
    # the loss keeps log-softmax's fp32 output: tokens x vocab x 4 bytes (as
    # tests/test_activations_real.py compares the other target sets, which read 2-4% above the
    # saved storage). Without the first attention block left out (nothing before the first
    # MLP adapter needs a gradient) this read 12.8% above
    predicted = activation_bytes(arch, t).total + BATCH * SEQ * CONFIG["vocab_size"] * 4
    assert predicted == pytest.approx(real, rel=0.04)


def test_refused_for_experts() -> None:
    arch, _ = resolve_model("mixtral-8x7b")
    with pytest.raises(FieldError, match="MLP projections alone"):
        lora_params(arch, 8, "mlp")
