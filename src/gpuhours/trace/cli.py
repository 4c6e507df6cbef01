"""The `gpuhours` commands of gpuhours.trace. Registered on the main app by gpuhours.cli;
this module must not import torch at import time (imports go inside the command functions)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuhours.cli_common import (
    AccumOpt,
    CkptOpt,
    JsonOpt,
    ModelOpt,
    OptimImplOpt,
    RankOpt,
    SeqOpt,
    SetOpt,
    TargetsOpt,
    defaults_of,
    emit_json,
    out,
    parse_sets,
    user_errors,
)
from gpuhours.setup import Training

TRAINING = defaults_of(Training)


def register(app: typer.Typer) -> None:
    """Add this capability's commands to `app`."""

    @app.command()
    @user_errors
    def trace(
        model: ModelOpt = None,
        set_: SetOpt = None,
        method: Annotated[str, typer.Option(help="full or lora (qlora needs bitsandbytes).")
                          ] = TRAINING.method,
        lora_rank: RankOpt = TRAINING.lora_rank,
        lora_targets: TargetsOpt = TRAINING.lora_targets,
        batch: Annotated[int | None, typer.Option(
            help=f"Micro-batch per GPU (default {TRAINING.micro_batch}); with --module, the "
                 "batch of the per-module table (default: the largest that fits).")] = None,
        seq: SeqOpt = TRAINING.seq_len,
        grad_accum: AccumOpt = TRAINING.grad_accum,
        precision: Annotated[str | None, typer.Option(
            help=f"fp32, bf16 (all bf16), bf16-amp (autocast over fp32 weights); bf16-mixed is "
                 "traced as bf16-amp for full fine-tuning (the closest single-process "
                 "equivalent) and exactly for LoRA. fp16 likewise (fp16-mixed with a "
                 f"GradScaler). Default {TRAINING.precision}; fp32 with --module.")] = None,
        checkpointing: CkptOpt = TRAINING.checkpointing,
        flash: Annotated[bool, typer.Option(
            "--flash/--no-flash", help="SDPA flash attention, or eager attention with the "
                                       "score matrices kept.")] = TRAINING.flash_attention,
        optimizer: Annotated[str, typer.Option(help="adamw, sgd, sgd-momentum.")
                             ] = TRAINING.optimizer,
        optimizer_impl: OptimImplOpt = TRAINING.optimizer_impl,
        steps: Annotated[int, typer.Option(
            help="Training steps to trace (2: the second has the first's optimizer state; 1: "
                 "an optimizer step on zero gradients makes that state first).")] = 2,
        device_profile: Annotated[str | None, typer.Option(
            "--device-profile", help="Catalog GPU for a roofline time per operator, e.g. "
                                     "h100-sxm.")] = None,
        module: Annotated[str | None, typer.Option(
            "--module", help="Your own nn.Module instead of --model: pkg.mod:factory or "
                             "file.py:factory (called with no arguments).")] = None,
        input_: Annotated[list[str] | None, typer.Option(
            "--input", help="With --module, each input of its forward (repeatable): "
                            "NAME=DTYPE[DIMS], B for the batch, e.g. "
                            "'images=float32[B,3,224,224]'.")] = None,
        gpu: Annotated[str | None, typer.Option(
            "--gpu", "-g", help="With --module: the catalog GPU to fit and time on, e.g. t4 "
                                "(for --model: as --device-profile).")] = None,
        headroom: Annotated[float | None, typer.Option(
            help="With --module: share of GPU memory kept free (default "
                 "assumptions.FIT_HEADROOM_FRACTION, as fit).")] = None,
        max_batch: Annotated[int, typer.Option(
            help="With --module: the largest batch tried.")] = 4096,
        as_json: JsonOpt = False,
    ) -> None:
        """Exact memory and FLOPs of the real model's training step, without a GPU.

        Builds the model from its config.json with transformers (random init, nothing
        downloaded), applies LoRA with peft, and runs training steps on fake tensors
        (shapes, no storage). Reports the peak of live tensors and when it happens, the
        breakdown, a model of what the CUDA caching allocator would reserve, the FLOPs beside
        the analytic ones, and with --device-profile a roofline time.

        With --module and --input, your own nn.Module: memory by part as the batch grows, the
        largest batch that fits --gpu, and a roofline time per top-level module."""
        from gpuhours.errors import FieldError
        from gpuhours.resolve import catalog_gpu
        from gpuhours.setup import Training
        from gpuhours.trace import trace_training
        from gpuhours.trace.setup import TraceSetup

        if module is not None:
            unused = [name for name, given in (
                ("--method", method != TRAINING.method), ("--set", bool(set_)),
                ("--checkpointing", checkpointing), ("--optimizer", optimizer != "adamw"),
                ("--device-profile", device_profile is not None)) if given]
            if unused:
                raise FieldError("module", f"{', '.join(unused)} apply to --model; --module "
                                           "traces your model as its factory builds it, "
                                           "trained with AdamW (use --gpu for the device).")
            _trace_module(module, model, input_ or [], gpu, precision or "fp32", batch,
                          optimizer_impl, headroom, max_batch, as_json)
            return
        if input_:
            raise FieldError("input", "--input is for --module (a model of your own).")
        precision = precision or TRAINING.precision
        batch = batch if batch is not None else TRAINING.micro_batch
        device_profile = device_profile or gpu
        if model is None:
            raise FieldError("model", "a model is required: a catalog name (see `gpuhours "
                                      "catalog models`) or a path to a config.json.")
        training = Training.model_validate(dict(
            model=model, config_overrides=parse_sets(set_ or []), method=method,
            lora_rank=lora_rank, lora_targets=lora_targets, micro_batch=batch, seq_len=seq,
            grad_accum=grad_accum, precision=precision, checkpointing=checkpointing,
            flash_attention=flash, optimizer=optimizer, optimizer_impl=optimizer_impl))
        setup = TraceSetup(training=training, steps=steps)
        device = (catalog_gpu(device_profile, "device_profile")
                  if device_profile is not None else None)
        result = trace_training(setup, device)
        if as_json:
            emit_json(result)
        else:
            from gpuhours.trace.render import render_trace

            render_trace(result, out)


def _trace_module(spec: str, model: str | None, inputs: list[str], gpu: str | None,
                  precision: str, batch: int | None, optimizer_impl: str,
                  headroom: float | None, max_batch: int, as_json: bool) -> None:
    """`gpuhours trace --module`: load the factory, trace, print."""
    from gpuhours.bench.module_spec import load_module
    from gpuhours.errors import FieldError
    from gpuhours.trace.module_trace import trace_module

    if model is not None:
        raise FieldError(("model", "module"), "give --model (a transformers model) or --module "
                                              "(your own nn.Module), not both.")
    if gpu is None:
        raise FieldError("gpu", "--module needs --gpu: the catalog GPU to fit the batch on "
                                "(gpuhours catalog gpus), e.g. --gpu t4.")
    result = trace_module(lambda: load_module(spec), inputs, gpu, precision, optimizer_impl=optimizer_impl,
                          headroom_fraction=headroom, batch=batch, max_batch=max_batch,
                          name=spec)
    if as_json:
        emit_json(result)
    else:
        from gpuhours.trace.module_render import render_module_trace

        render_module_trace(result, out)
