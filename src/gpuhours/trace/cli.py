"""The `gpuhours` commands of gpuhours.trace. Registered on the main app by gpuhours.cli;
this module must not import torch at import time (imports go inside the command functions)."""

from __future__ import annotations

from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add this capability's commands to `app`."""
    # gpuhours.cli calls this once its own helpers exist (it imports us at its end)
    from gpuhours.cli import _emit_json, out, user_errors

    @app.command()
    @user_errors
    def trace(
        model: Annotated[str | None, typer.Option(
            "--model", "-m", help="Catalog name (gpuhours catalog models) or path to a "
                                  "config.json.")] = None,
        method: Annotated[str, typer.Option(help="full or lora (qlora needs bitsandbytes).")
                          ] = "full",
        lora_rank: Annotated[int, typer.Option(help="LoRA rank.")] = 16,
        lora_targets: Annotated[str, typer.Option(
            help="LoRA targets: all-linear, attention, or qv.")] = "all-linear",
        batch: Annotated[int, typer.Option(help="Micro-batch, in sequences.")] = 1,
        seq: Annotated[int, typer.Option(help="Sequence length in tokens.")] = 2048,
        grad_accum: Annotated[int, typer.Option(help="Micro-batches per optimizer step.")] = 1,
        precision: Annotated[str, typer.Option(
            help="fp32, bf16 (all bf16), bf16-amp (autocast over fp32 weights); bf16-mixed is "
                 "traced as bf16-amp, the closest single-process equivalent. fp16 likewise.")
                             ] = "bf16",
        checkpointing: Annotated[bool, typer.Option(
            "--checkpointing/--no-checkpointing", help="Gradient (activation) checkpointing.")
                                 ] = False,
        flash: Annotated[bool, typer.Option(
            "--flash/--no-flash", help="SDPA flash attention, or eager attention with the "
                                       "score matrices kept.")] = True,
        optimizer: Annotated[str, typer.Option(help="adamw, sgd, sgd-momentum.")] = "adamw",
        optimizer_impl: Annotated[str, typer.Option(
            help="foreach (torch's default on GPU), fused, per-parameter.")] = "foreach",
        steps: Annotated[int, typer.Option(
            help="Training steps to trace (2: the second has the first's optimizer state; 1: "
                 "an optimizer step on zero gradients makes that state first).")] = 2,
        device_profile: Annotated[str | None, typer.Option(
            "--device-profile", help="Catalog GPU for a roofline time per operator, e.g. "
                                     "h100-sxm.")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    ) -> None:
        """Exact memory and FLOPs of the real model's training step, without a GPU.

        Builds the model from its config.json with transformers (random init, nothing
        downloaded), applies LoRA with peft, and runs training steps on fake tensors
        (shapes, no storage). Reports the peak of live tensors and when it happens, the
        breakdown, a model of what the CUDA caching allocator would reserve, the FLOPs beside
        the analytic ones, and with --device-profile a roofline time."""
        from gpuhours.errors import InputError
        from gpuhours.trace.setup import TraceSetup

        if model is None:
            raise InputError("--model", "a model is required: a catalog name (see `gpuhours "
                                        "catalog models`) or a path to a config.json.")
        if not model.strip():
            raise InputError("--model", "expected a catalog name or a path to a config.json, "
                                        "got ''.")
        setup = TraceSetup.model_validate(dict(
            model=model, method=method, lora_rank=lora_rank, lora_targets=lora_targets,
            micro_batch=batch, seq_len=seq, grad_accum=grad_accum, precision=precision,
            checkpointing=checkpointing, flash_attention=flash, optimizer=optimizer,
            optimizer_impl=optimizer_impl, steps=steps))
        from gpuhours.resolve import catalog_gpu

        device = (catalog_gpu(device_profile, "--device-profile")
                  if device_profile is not None else None)
        from gpuhours.trace import trace_training

        result = trace_training(setup, device)
        if as_json:
            _emit_json(result)
        else:
            from gpuhours.trace.render import render_trace

            render_trace(result, out)
