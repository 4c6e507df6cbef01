"""LoRA adapters in the base's half precision (setup.lora_adapter_dtype "half": peft up to 0.11,
or get_peft_model(autocast_adapter_dtype=False) today) against a real tiny model on CPU: the
storage autograd saves in one forward, and the bytes of the adapters' weights, gradients and
AdamW state after a real optimizer step."""

from __future__ import annotations

import pytest

from gpuhours.errors import FieldError
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.memory import activation_bytes, adapter_state_bytes, training_memory
from gpuhours.setup import Training
from saved_storage import TINY_LLAMA_CONFIG, saved_storage_bytes

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

CONFIG = TINY_LLAMA_CONFIG
BATCH, SEQ, RANK = 2, 64, 8


def _model(dropout: float):
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.AutoConfig.for_model(**CONFIG))
    model = model.to(torch.bfloat16)
    config = peft.LoraConfig(r=RANK, target_modules="all-linear", lora_dropout=dropout)
    # the behaviour of peft up to 0.11: adapters in the base layer's dtype
    return peft.get_peft_model(model, config, autocast_adapter_dtype=False)


def _t(**kw) -> Training:
    return Training(arch=from_hf_config(CONFIG, "tiny"), method="lora", precision="bf16",
                    micro_batch=BATCH, seq_len=SEQ, lora_rank=RANK, lora_targets="all-linear",
                    lora_adapter_dtype="half", **kw)


# peft 0.21 calls a transformers 5.23 method that warns about its own deprecation
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_half_adapters_saved_storage(dropout: float) -> None:
    model = _model(dropout)
    assert {p.dtype for n, p in model.named_parameters() if "lora_" in n} == {torch.bfloat16}
    model.train()
    real = saved_storage_bytes(model, BATCH, SEQ, 1000, None)
    t = _t(lora_dropout=dropout)
    # the loss keeps log-softmax's fp32 output (tokens x vocab x 4); dropout's 1-byte masks
    # are in activation_bytes (lora_dropout_mask_bytes_per_token_layer)
    predicted = activation_bytes(t.arch, t).total + BATCH * SEQ * CONFIG["vocab_size"] * 4
    assert predicted == pytest.approx(real, rel=0.06)
    # and the fp32 adapters' count differs from it by more than the tolerance: the test can fail
    fp32 = t.model_copy(update={"lora_adapter_dtype": "fp32"})
    assert activation_bytes(fp32.arch, fp32).total + BATCH * SEQ * 1000 * 4 > real * 1.1


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_half_adapter_state_after_a_real_adamw_step() -> None:
    model = _model(0.0)
    params = [p for p in model.parameters() if p.requires_grad]
    n = sum(p.numel() for p in params)
    opt = torch.optim.AdamW(params, lr=1e-3)
    ids = torch.randint(0, 1000, (BATCH, SEQ))
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    state = sum(v.numel() * v.element_size() for s in opt.state.values() for v in s.values()
                if torch.is_tensor(v) and v.dim() > 0)
    per = adapter_state_bytes(_t())
    assert (per.weights, per.grads, per.optimizer) == (2.0, 2.0, 4.0)
    assert sum(p.numel() * p.element_size() for p in params) == n * per.weights
    assert sum(p.grad.numel() * p.grad.element_size() for p in params) == n * per.grads
    assert state == n * per.optimizer
    # the estimate holds the same count of trainable parameters and their state
    m = training_memory(_t().arch, _t())
    assert m.trainable_params == n
    assert m.optimizer_bytes == pytest.approx(n * 4.0)


def test_half_adapters_need_a_half_precision_base_and_adapters() -> None:
    with pytest.raises(FieldError, match="lora_adapter_dtype"):
        Training.model_validate({**_t().model_dump(), "precision": "bf16-amp"})
    # HF Trainer's bf16=True over a bf16 model with peft up to 0.11: allowed, no master copy
    mixed = Training.model_validate({**_t().model_dump(), "precision": "bf16-mixed"})
    assert adapter_state_bytes(mixed) == adapter_state_bytes(_t())
    with pytest.raises(FieldError, match="lora_adapter_dtype"):
        Training.model_validate({**_t().model_dump(), "method": "full"})
    # fp16-mixed's gradient scaler refuses fp16 gradients: its trained adapters stay fp32
    with pytest.raises(FieldError, match="GradScaler"):
        Training.model_validate({**_t().model_dump(), "precision": "fp16-mixed"})


def _cli_memory(*args: str) -> float:
    import json

    from typer.testing import CliRunner

    from gpuhours.cli import app

    result = CliRunner().invoke(app, ["estimate", "--model", "llama-2-7b", "--gpu", "a100-80gb",
                                      "--method", "lora", "--precision", "bf16", "--seq", "2048",
                                      "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["memory"]["total_bytes"]["value"]


def test_the_cli_choice_reaches_the_estimate_and_conflicts_name_the_flags() -> None:
    from typer.testing import CliRunner

    from gpuhours.cli import app

    # Llama-2-7B, all-linear r16: 40M adapters; 8 bytes of state each fewer, and the inputs'
    # fp32 copies (2048 tokens) gone
    assert _cli_memory("--lora-adapter-dtype", "half") < _cli_memory() - 40e6 * 8 * 0.9
    for command in ("estimate", "fit"):
        for args, flags in ((["--method", "full"], "--lora-adapter-dtype/--method"),
                            (["--method", "lora", "--precision", "fp32"],
                             "--lora-adapter-dtype/--precision")):
            result = CliRunner().invoke(app, [command, "--model", "llama-2-7b", "--gpu",
                                              "a100-80gb", "--lora-adapter-dtype", "half", *args])
            assert result.exit_code == 2, (command, args, result.output)
            assert flags in result.output and "Traceback" not in result.output


def test_a_plan_file_sets_it(tmp_path) -> None:
    from gpuhours.plan.budget import evaluate
    from gpuhours.plan.load import load_plan

    plan = """project: half adapters
hardware:
  gpu: a100-80gb
seeds: 1
phases:
  - name: sft
    kind: finetune
    runs: once
    model: llama-2-7b
    method: lora
    precision: bf16
    micro_batch: 1
    seq_len: 2048
    tokens: 1.0e+7{extra}
"""
    memory = {}
    for extra in ("", "\n    lora_adapter_dtype: half"):
        path = tmp_path / "plan.yaml"
        path.write_text(plan.format(extra=extra))
        [phase] = evaluate(load_plan(path)).phases
        memory[extra] = phase.details["memory_per_gpu_bytes"]
    assert memory["\n    lora_adapter_dtype: half"] < memory[""]


@pytest.mark.parametrize(("row", "dtype"), [
    (101, "fp32"),  # Qwen-1.8B LoRA, figures of 2023-11-30: peft 0.6.2 (before 0.7.0)
    (125, "fp32"),  # Qwen-7B LoRA, figures of 2023-10-11: peft 0.5.0
    (158, "fp32"),  # Qwen-14B LoRA (emb), the same table
    (113, "fp32"),  # Qwen Int4 under DeepSpeed (fp32 masters) on a GPTQ (int32) base
    (194, "half"),  # ms-swift LoRA, peft 0.6-0.7 (Dec 2023-Jan 2024)
    (298, "fp32"),  # ms-swift's tuners table (2024-04): its lora_dtype default was fp32
    (185, "fp32"),  # ms-swift QLoRA: a bitsandbytes layer stores uint8, peft left adapters fp32
    (409, "half"),  # Answer.AI QLoRA: 4-bit storage in bf16 for FSDP
    (449, "fp32"),  # LLaMA-Factory casts trainable parameters to fp32
    (376, "fp32"),  # PEFT's own benchmark, peft from 0.12
])
def test_validation_rows_take_their_stacks_adapter_dtype(row: int, dtype: str) -> None:
    from gpuhours_dev.validation import _rows
    from gpuhours_dev.validation.finetune import DATA, map_row

    m = map_row(row, _rows(DATA)[row - 1])
    assert m.training is not None and m.training.lora_adapter_dtype == dtype
