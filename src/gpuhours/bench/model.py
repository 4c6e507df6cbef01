"""A catalog model (or a config.json) built with random weights for a benchmark: transformers'
from_config, no download; LoRA by peft, gradient checkpointing by transformers, precision by
casting; and a batch maker of random token ids.

The config that is built is also read by gpuhours.estimate.arch.from_hf_config, so that the
ledger row can be compared with the analytic estimate of the very same shape.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuhours.bench.config import BenchSetup
from gpuhours.errors import FieldError
from gpuhours.estimate.arch import ModelArch
from gpuhours.setup import torch_precision

#: config.json fields that describe a saved file, not the architecture
NOT_ARCHITECTURE = ("model_type", "architectures", "transformers_version", "torch_dtype", "dtype",
                     "_name_or_path", "auto_map")
#: module names of peft targets other than all-linear, for llama-style attention
_LORA_MODULES = {"attention": ["q_proj", "k_proj", "v_proj", "o_proj"],
                 "qkv": ["q_proj", "k_proj", "v_proj"], "qv": ["q_proj", "v_proj"],
                 "mlp": ["gate_proj", "up_proj", "down_proj"]}


@dataclass
class BuiltModel:
    model: Any
    #: the Hugging Face config it was built from, after --set overrides (stored in the ledger)
    config: dict[str, Any]
    arch: ModelArch
    basis: str
    attention: str
    total_params: int
    trainable_params: int
    make_batch: Callable[[], Any]
    set_checkpointing: Callable[[bool], None] | None


def model_config(setup: BenchSetup) -> tuple[dict[str, Any], ModelArch, str]:
    """(config dict with overrides, architecture, basis) of the setup's model; no torch. The
    Training already read (and checked) the architecture from the same config."""
    from gpuhours.resolve import model_config as read_config

    t = setup.training
    cfg, _, _ = read_config(setup.model, t.config_overrides)
    return cfg, t.arch, t.model_basis + "; random weights"


def hf_config_of(cfg: dict[str, Any], vocab_size: int) -> Any:
    """A transformers config from a config.json dict (with its --set overrides applied):
    bench's training models, its generate workload and the dev scripts build from this."""
    import transformers

    model_type = str(cfg.get("model_type", "llama"))
    fields = {k: v for k, v in cfg.items() if k not in NOT_ARCHITECTURE}
    for token in ("bos_token_id", "eos_token_id", "pad_token_id"):
        # a --set vocab_size below a config's special-token ids only matters for generation;
        # drop them so that transformers does not warn about the shrunk vocabulary
        if isinstance(fields.get(token), int) and fields[token] >= vocab_size:
            fields[token] = None
    try:
        return transformers.AutoConfig.for_model(model_type, **fields)
    except (ValueError, KeyError, TypeError) as e:
        raise FieldError("model", f"transformers cannot build a {model_type!r} config: {e}") \
            from None


def build(setup: BenchSetup, device: str, seed: int = 0) -> BuiltModel:
    """Build the setup's model on `device`, ready to train."""
    import torch
    import transformers

    from gpuhours.torchkit import checkpointing

    cfg, arch, basis = model_config(setup)
    hf_config = hf_config_of(cfg, arch.vocab_size)
    hf_config.use_cache = False
    auto = transformers.AutoModelForMaskedLM if arch.encoder else transformers.AutoModelForCausalLM
    torch.manual_seed(seed)
    dtype = torch_precision(setup.training.precision, setup.training.method).param_dtype
    attention = "sdpa"
    # built on the device in its final dtype: an 8B model's random initialisation takes seconds
    # on a GPU and no fp32 copy in host memory (minutes and 32 GB on the CPU)
    with torch.device(device):
        try:
            model = auto.from_config(hf_config, attn_implementation="sdpa",
                                     dtype=getattr(torch, dtype))
        except (ValueError, ImportError):
            attention = "eager"
            model = auto.from_config(hf_config, attn_implementation="eager",
                                     dtype=getattr(torch, dtype))
    base = model
    if setup.training.method == "lora":
        model = _apply_lora(model, setup, arch)
    set_checkpointing = None
    if setup.training.checkpointing:
        def set_checkpointing(on: bool) -> None:
            checkpointing.set_checkpointing(base, on)
        set_checkpointing(True)
    model.to(device)
    model.train()
    params = {id(p): p for p in model.parameters()}.values()
    vocab = arch.vocab_size
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def make_batch() -> dict[str, Any]:
        ids = torch.randint(0, vocab, (setup.training.micro_batch, setup.training.seq_len), generator=gen)
        return {"input_ids": ids, "labels": ids}

    return BuiltModel(
        model=model, config=cfg, arch=arch, basis=basis, attention=attention,
        total_params=sum(p.numel() for p in params),
        trainable_params=sum(p.numel() for p in params if p.requires_grad),
        make_batch=make_batch, set_checkpointing=set_checkpointing)


def _apply_lora(model: Any, setup: BenchSetup, arch: ModelArch) -> Any:
    from peft import LoraConfig, get_peft_model

    if setup.training.peft_method != "lora":
        raise FieldError(("peft_method", "method"), "benchmarks apply peft's LoRA only; "
                         f"{setup.training.peft_method} is estimated (estimate/peft_methods.py), "
                         "not run.", "Use gpuhours estimate for it, or peft_method lora.")
    if arch.encoder:
        raise FieldError("method", "LoRA benchmarks are for decoder models; use full "
                                   "fine-tuning for an encoder.")
    if setup.training.lora_targets == "all-linear":
        targets: Any = "all-linear"
    elif arch.model_type in ("gpt2", "mpt"):
        raise FieldError("lora_targets", f"{arch.model_type} has fused attention projections; "
                                         "use all-linear.")
    else:
        targets = _LORA_MODULES[setup.training.lora_targets]
    config = LoraConfig(r=setup.training.lora_rank, lora_alpha=2 * setup.training.lora_rank, lora_dropout=0.0,
                        target_modules=targets, task_type="CAUSAL_LM")
    with warnings.catch_warnings():
        # peft 0.21 reads transformers' deprecated `is_gradient_checkpointing` (a FutureWarning
        # under transformers 5.x); nothing for us to change
        warnings.filterwarnings("ignore", message=r".*is deprecated and will be removed in v6",
                                category=FutureWarning)
        return get_peft_model(model, config)
