"""The loss of a user's model's output, when the user gave no loss function (bench and trace
of `--module`). torch is imported inside the function."""

from __future__ import annotations

from typing import Any

from gpuhours.errors import FieldError


def loss_of(out: Any) -> Any:
    """The module's own loss (`.loss`, `["loss"]`, a scalar output), or else the sum of the
    means of its floating outputs that need a gradient (an assumption: the real loss's own
    tensors are small next to the model's and are not traced)."""
    import torch
    from torch.utils._pytree import tree_leaves

    loss = getattr(out, "loss", None)
    if loss is None and isinstance(out, dict):
        loss = out.get("loss")
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        return loss
    if isinstance(out, torch.Tensor) and out.numel() == 1:
        return out
    leaves = [t for t in tree_leaves(out if not hasattr(out, "to_tuple") else out.to_tuple())
              if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
    if not leaves:
        raise FieldError("module", "the model's output has no floating tensor that needs a "
                                   "gradient: nothing to train (are all its parameters frozen, "
                                   "or is the output detached?).")
    total = leaves[0].mean()
    for t in leaves[1:]:
        total = total + t.mean()
    return total
