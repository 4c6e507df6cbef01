"""LoRA with trainable embeddings against a real peft model on CPU: a tiny untied Qwen2 in bf16,
peft LoRA on every linear with modules_to_save=["embed_tokens", "lm_head"], one AdamW step; the
bytes of its parameters, gradients and optimizer state equal the estimate's weights, gradients
and optimizer state (issue 14)."""

from __future__ import annotations

import pytest

from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.memory import training_memory
from gpuhours.setup import Training

CONFIG = dict(model_type="qwen2", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, intermediate_size=128, vocab_size=1000,
              tie_word_embeddings=False, max_position_embeddings=128)


def _one_step():
    """A tiny bf16 Qwen2 with peft LoRA on every linear layer and trainable embedding and head
    copies (modules_to_save), after one backward and AdamW step: (torch, model, optimizer)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    hf_config = transformers.AutoConfig.for_model(**CONFIG)
    model = transformers.AutoModelForCausalLM.from_config(hf_config).to(torch.bfloat16)
    lora = peft.LoraConfig(r=8, target_modules="all-linear",
                           modules_to_save=["embed_tokens", "lm_head"])
    model = peft.get_peft_model(model, lora)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    ids = torch.randint(0, 1000, (1, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    return torch, model, optimizer


# peft calls transformers' deprecated is_gradient_checkpointing (peft 0.21 / transformers 5.23)
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_modules_to_save_state_equals_the_estimate() -> None:
    torch, model, optimizer = _one_step()
    storages: dict[int, int] = {}
    for p in model.parameters():  # the frozen originals and their trainable copies
        storages[p.untyped_storage().data_ptr()] = p.nbytes
    grads = sum(p.grad.nbytes for p in model.parameters() if p.grad is not None)
    moments = sum(v.nbytes for state in optimizer.state.values()
                  for k, v in state.items() if k != "step")
    arch = from_hf_config(CONFIG, "tiny-qwen2")
    t = Training(arch=arch, method="lora", lora_rank=8, lora_targets="all-linear",
                 precision="bf16", lora_trainable_embeddings=True, seq_len=16)
    m = training_memory(arch, t)
    assert sum(storages.values()) == m.weights_bytes
    assert grads == m.gradients_bytes
    assert moments == m.optimizer_bytes
    # and the copies are what the choice adds: without it, no embedding gradients or moments
    plain = training_memory(arch, Training(arch=arch, method="lora", lora_rank=8,
                                           lora_targets="all-linear", precision="bf16",
                                           seq_len=16))
    copies = 2 * 1000 * 64
    assert m.weights_bytes - plain.weights_bytes == 2 * copies
    assert m.optimizer_bytes - plain.optimizer_bytes == 4 * copies


# peft calls transformers' deprecated is_gradient_checkpointing (peft 0.21 / transformers 5.23)
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_replay_sizes_each_tensor_in_its_own_dtype() -> None:
    """The step replay's per-tensor gradients and moments (step_replay.trainable_shares, scaled
    to memory.py's totals) against the real model's, tensor by tensor: the embedding copies'
    are bf16 (2 bytes a gradient element, 2 x 2 for the moments) beside fp32 adapters (peft
    0.21 keeps them fp32), not the all-parameter average (issue 14: that average made the
    copies of Qwen-1.8B's 151,936 x 2,048 embedding 7% larger than the loss's blocks)."""
    from gpuhours.estimate.step_replay import trainable_shares

    torch, model, optimizer = _one_step()
    named = {n: p for n, p in model.named_parameters() if p.requires_grad}
    token = next(p for n, p in named.items() if "embed_tokens.modules_to_save" in n)
    head = next(p for n, p in named.items() if "lm_head.modules_to_save" in n)
    adapters = [p for n, p in named.items() if "lora_" in n]
    assert token.dtype == head.dtype == torch.bfloat16
    assert {p.dtype for p in adapters} == {torch.float32}

    arch = from_hf_config(CONFIG, "tiny-qwen2")
    t = Training(arch=arch, method="lora", lora_rank=8, lora_targets="all-linear",
                 precision="bf16", lora_trainable_embeddings=True, seq_len=16)
    m = training_memory(arch, t)
    for part, total, real in (
            ("grads", m.gradients_bytes, lambda p: p.grad.nbytes),
            ("optimizer", m.optimizer_bytes, lambda p: sum(
                v.nbytes for k, v in optimizer.state[p].items() if k != "step"))):
        root, layers = trainable_shares(t, part)
        scale = total / (sum(root) + sum(sum(x) for x in layers))
        assert root[0] * scale == real(token)
        assert root[-1] * scale == real(head)
        assert sum(sum(x) for x in layers) * scale == sum(real(p) for p in adapters)
