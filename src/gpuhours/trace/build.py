"""Build the real model from its config.json with fake tensors: no weights, no memory.

The model is built by transformers on the `meta` device, gradient checkpointing and peft's LoRA
are applied there (peft cannot swap the weights of a model whose parameters are already fake),
and then every parameter and buffer is replaced by an empty fake tensor, memoised by `id()` so
that tied weights (a tied LM head) stay one tensor (`Module.to_empty` would untie them).
shared/TORCH_NOTES.md has the measurements behind each of these choices.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from gpuhours.errors import FieldError, InputError
from gpuhours.extras import warn_untested_versions
from gpuhours.setup import lora_target_modules, torch_precision
from gpuhours.torchkit.checkpointing import set_checkpointing
from gpuhours.trace.setup import TraceSetup

# every trace builds its model here, with torch and transformers: say if they are untested
warn_untested_versions()


@dataclass
class BuiltModel:
    """The model on fake tensors, and what a step needs to run it."""

    model: torch.nn.Module
    #: the transformers model inside any peft wrapper
    hf_model: torch.nn.Module
    #: module path of the transformers model inside `model` ('' without a wrapper)
    hf_path: str
    #: module path of the output layer (LM head or classifier)
    head_path: str
    encoder: bool
    vocab_size: int
    notes: list[str] = field(default_factory=list)


def _hf_config(cfg: dict[str, Any], where: str) -> Any:
    import transformers

    model_type = cfg.get("model_type")
    if "text_config" in cfg and "hidden_size" not in cfg and isinstance(cfg["text_config"], dict):
        cfg = cfg["text_config"]  # a vision-language config: trace its language model
        model_type = cfg.get("model_type", model_type)
    try:
        return transformers.AutoConfig.for_model(**cfg)
    except Exception as e:  # transformers and huggingface_hub raise several kinds here
        text = str(e).strip()
        if "Unrecognized model identifier" in text or isinstance(e, KeyError):
            raise InputError(
                where, f"transformers {transformers.__version__} cannot build model_type "
                       f"{model_type!r} (it does not know this architecture).",
                "The trace needs an architecture transformers implements; use `gpuhours "
                "estimate` for the analytic figures (basis: formula), which read the config's "
                "shape only.") from None
        cause = text.splitlines()[-1].strip() if text else type(e).__name__
        raise InputError(where, f"transformers rejects this config.json: {cause}",
                         "Fix the config, or use `gpuhours estimate` (basis: formula).") \
            from None


def _instantiate(hf: Any, cfg: dict[str, Any], encoder: bool, dtype: torch.dtype,
                 where: str) -> torch.nn.Module:
    import transformers

    auto = (transformers.AutoModelForSequenceClassification if encoder
            else transformers.AutoModelForCausalLM)
    try:
        with torch.device("meta"):
            return auto.from_config(hf, dtype=dtype)
    except (ValueError, KeyError, TypeError, AttributeError, NotImplementedError) as e:
        raise InputError(
            where, f"transformers cannot build a training model for model_type "
                   f"{cfg.get('model_type')!r} ({type(e).__name__}: {str(e)[:200]}).",
            "Use `gpuhours estimate` for the analytic figures (basis: formula).",
        ) from None


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers logs config remarks (e.g. about `loss_type`) while building; the trace's
    output is the report, so they are silenced for the build and the level put back."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def _materialise(model: torch.nn.Module, fake_mode: FakeTensorMode | None) -> None:
    """Swap every parameter and buffer for a CPU tensor of the same shape and dtype, keeping
    shared tensors shared: an empty fake tensor, or (no `fake_mode`) a real one with small
    random values, for checking the trace against a real step."""
    memo: dict[int, torch.Tensor] = {}

    def fake_of(t: torch.Tensor) -> torch.Tensor:
        if id(t) not in memo:
            if fake_mode is None:
                real = torch.empty(t.shape, dtype=t.dtype, device="cpu")
                memo[id(t)] = real.normal_(0.0, 0.02) if real.is_floating_point() else real.zero_()
            else:
                with fake_mode:
                    memo[id(t)] = torch.empty(t.shape, dtype=t.dtype, device="cpu")
        return memo[id(t)]

    params: dict[int, torch.nn.Parameter] = {}
    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is None:
                continue
            if id(p) not in params:
                params[id(p)] = torch.nn.Parameter(fake_of(p), requires_grad=p.requires_grad)
            module._parameters[name] = params[id(p)]
        for name, b in list(module._buffers.items()):
            if b is not None:
                module._buffers[name] = fake_of(b)


def _module_path(root: torch.nn.Module, target: torch.nn.Module) -> str:
    for name, module in root.named_modules():
        if module is target:
            return name
    return ""


def build_fake_model(cfg: dict[str, Any], setup: TraceSetup, fake_mode: FakeTensorMode | None,
                     where: str) -> BuiltModel:
    """The model of `cfg` in training mode on fake CPU tensors (real ones when `fake_mode` is
    None), with `setup`'s precision, checkpointing and LoRA applied. `where` names the model in
    errors."""
    prec = torch_precision(setup.training.precision, setup.training.method)
    dtype = getattr(torch, prec.param_dtype)
    hf = _hf_config(cfg, where)
    encoder = not getattr(hf, "is_decoder", False) and hf.model_type in ("bert", "roberta",
                                                                        "distilbert")
    hf.use_cache = False  # training: no KV cache (the HF Trainer's setting with checkpointing)
    hf._attn_implementation = "sdpa" if setup.training.flash_attention else "eager"
    notes: list[str] = []
    if getattr(hf, "num_local_experts", None) or getattr(hf, "num_experts", None):
        # grouped_mm: every token-expert pair in one grouped matmul, shapes independent of the
        # routing (transformers' eager loop over experts needs the routing's data)
        hf._experts_implementation = "grouped_mm"
        notes.append("MoE experts run transformers' grouped_mm implementation: its tensor "
                     "shapes do not depend on which experts the router picks"
                     + ("." if prec.param_dtype == "bfloat16" else "; with weights not in bf16, "
                        "through transformers' fallback operator (torch's grouped_mm takes "
                        "bf16 only), which saves the same tensors."))
    if encoder:
        hf.num_labels = 2
    with _quiet_transformers():
        model = _instantiate(hf, cfg, encoder, dtype, where)
    hf_model = model
    if setup.training.checkpointing:
        if not getattr(model, "supports_gradient_checkpointing", False):
            raise FieldError("checkpointing", f"transformers' {type(model).__name__} does not "
                                                "support gradient checkpointing.")
        set_checkpointing(model, True)
    if setup.training.method == "qlora":
        raise FieldError(
            "method", "qlora needs bitsandbytes' 4-bit layers, which are not installed here "
                        "(and its kernels need CUDA); the trace does not invent 4-bit storage.",
            "Trace --method lora for the activations and adapters, and use `gpuhours "
            "estimate --method qlora` for the 4-bit weights (basis: formula).")
    if setup.training.method == "lora":
        model = _apply_lora(model, setup, where, notes)
    _materialise(model, fake_mode)
    model.train()
    out_emb = getattr(hf_model, "classifier", None) if encoder else (
        hf_model.get_output_embeddings())  # type: ignore[operator]
    head_path = _module_path(model, out_emb) if out_emb is not None else ""
    vocab = int(getattr(hf, "vocab_size", 0) or 0)
    return BuiltModel(model=model, hf_model=hf_model, hf_path=_module_path(model, hf_model),
                      head_path=head_path, encoder=encoder, vocab_size=vocab, notes=notes)


def _apply_lora(model: torch.nn.Module, setup: TraceSetup, where: str,
                notes: list[str]) -> torch.nn.Module:
    import peft

    if setup.training.peft_method != "lora":
        raise FieldError(("peft_method", "method"), "traces apply peft's LoRA only; "
                         f"{setup.training.peft_method} is estimated (estimate/peft_methods.py), "
                         "not traced.", "Use gpuhours estimate for it, or peft_method lora.")
    targets = lora_target_modules(setup.training.lora_targets)
    if isinstance(targets, list):
        names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
        missing = [t for t in targets if t not in names]
        if missing:
            raise FieldError("lora_targets", f"{where} has no modules named "
                                               f"{', '.join(missing)} (LoRA target "
                                               f"{setup.training.lora_targets!r} assumes llama-style "
                                               "names).", "Use --lora-targets all-linear.")
    config = peft.LoraConfig(r=setup.training.lora_rank, lora_alpha=2 * setup.training.lora_rank,
                             target_modules=targets, lora_dropout=0.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.device("meta"):  # adapters made on meta too, like the base weights
            model = peft.get_peft_model(model, config)
    for w in caught:
        # peft 0.21 calls a transformers 5.23 method that warns about its own deprecation
        if not issubclass(w.category, FutureWarning):
            text = f"peft: {str(w.message).strip()}"
            if text not in notes:
                notes.append(text)
    return model
materialise = _materialise  # public name for trace.module_step
