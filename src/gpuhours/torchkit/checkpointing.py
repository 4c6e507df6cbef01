"""Activation checkpointing of a transformers model across the releases people run.

transformers 5.18 renamed `gradient_checkpointing_enable(gradient_checkpointing_kwargs=...)` to
`activation_checkpointing_enable(activation_checkpointing_kwargs=...)` and kept the old name as a
deprecated alias (removal announced for v6). GPU images still ship 5.17 (the H100 machine of
docs/bench.md's measurements did), where only the old name exists; both names mean the same
non-reentrant `torch.utils.checkpoint` around each decoder layer.
"""

from __future__ import annotations

from typing import Any

#: torch.utils.checkpoint's non-reentrant variant: what transformers and TRL use by default
NON_REENTRANT = {"use_reentrant": False}


def set_checkpointing(model: Any, on: bool) -> None:
    """Turn activation checkpointing of a `PreTrainedModel` on or off, by whichever name this
    transformers has."""
    if on:
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(dict(NON_REENTRANT))
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=dict(NON_REENTRANT))
    elif hasattr(model, "activation_checkpointing_disable"):
        model.activation_checkpointing_disable()
    else:
        model.gradient_checkpointing_disable()
