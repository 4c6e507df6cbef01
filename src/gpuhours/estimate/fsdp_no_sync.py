"""Gradients FSDP keeps unsharded while it accumulates under `no_sync()` (issue 14).

PyTorch FSDP (FSDP1, `FullyShardedDataParallel`) reduce-scatters each unit's gradient into
this rank's shard at the end of the unit's backward, unless gradient synchronisation is off:
inside `FSDP.no_sync()` its post-backward hook returns before the reduce-scatter and the
unit's flat parameter keeps its whole, unsharded gradient, which the next micro-batch's
backward accumulates into (torch/distributed/fsdp/_runtime_utils.py `_post_backward_hook`:
`if not state._sync_gradients: ... handle._use_unsharded_grad_views(); return`, torch 2.1 to
2.4). So a rank that accumulates under no_sync holds, from the first micro-batch's backward to
the last's, the unsharded gradient of every unit whose flat parameter requires a gradient:
the whole model's gradient, where the estimate's ZeRO-3 path holds 1/N of it.

With `use_orig_params=True` (Lightning Fabric's FSDPStrategy default from torch 2.0,
src/lightning/fabric/strategies/fsdp.py @ 71aed751 and 2.4.0:
`self._fsdp_kwargs.setdefault("use_orig_params", True)`) a unit may mix frozen and trainable
parameters; its flat parameter then requires a gradient and that gradient covers the whole
unit, frozen weights included. torch says so itself when wrapping such a unit
(torch/distributed/fsdp/_wrap_utils.py `_validate_frozen_params`: "the gradient memory usage
will be higher than expected (<total> numel instead of <trainable> numel before sharding via
reduce-scatter)"). LoRA with one FSDP unit per decoder block (litgpt's
`auto_wrap_policy={Block}`, the adapters inside the block) thus holds an unsharded gradient
of every block's frozen base weights too. A unit with no trainable parameter (the root:
embeddings, final norm and LM head, when no adapter or copy of them trains) has none.

Who runs it: Lightning Fabric's `fabric.no_backward_sync(model, enabled=is_accumulating)` is
`module.no_sync()` under its FSDPStrategy (`_FSDPBackwardSyncControl`), and litgpt's and
lit-gpt's finetune loops call it on every accumulating micro-batch (litgpt @ 00af8b0d
litgpt/finetune/full.py and lora.py; lit-gpt @ 8641822 finetune/lora.py).

Counted here: that unsharded gradient, in the unit's dtype (the parameters' dtype: the base's
for LoRA units, the weights' for full fine-tuning), for the layers' units and, when something
in it trains, the root unit. Not counted: the next micro-batch's new gradient of the unit in
backward before it is added in place (one unit, a transient), the reduce-scatter's output at
the synchronising micro-batch, FSDP's padding of the flat parameter to the world size; the step
time does not drop the skipped reduce-scatters (the estimate still charges one per
micro-batch).
"""

from __future__ import annotations

from gpuhours.estimate.params import ParamCounts
from gpuhours.setup import Training


def unit_grad_dtype_bytes(t: Training) -> float:
    """Bytes per element of a unit's flat gradient: the flat parameter's dtype, which is the
    parameters' (fp32 for fp32 and *-amp training, else the 16-bit dtype)."""
    return 4.0 if (t.precision == "fp32" or t.precision.endswith("-amp")) else 2.0


def no_sync_applies(t: Training, num_gpus: int) -> bool:
    """FSDP's no_sync holds unsharded gradients here: fsdp_grad_accum 'no-sync', ZeRO-3 run
    by FSDP over more than one GPU, and more than one micro-batch per step (with one, every
    micro-batch synchronises: Fabric's `enabled=is_accumulating` is never on)."""
    return (t.fsdp_grad_accum == "no-sync" and t.zero_stage == 3 and num_gpus > 1
            and t.grad_accum > 1)


def no_sync_unsharded_grad_bytes(counts: ParamCounts, t: Training, num_gpus: int,
                                 trainable_params: float) -> float:
    """Bytes of unsharded gradients one rank holds through the accumulation micro-batches under
    FSDP's no_sync (module docstring), or 0 where it does not apply.

    full: every trained parameter (`trainable_params`: a frozen vision tower left out);
    lora: every decoder layer's unit whole (its frozen base, norms and adapters: one unit per
    layer, each holding adapters), plus the root unit (embeddings, final norm, LM head) when an
    adapter on the head or a trained copy of the embeddings makes it require a gradient.
    """
    if not no_sync_applies(t, num_gpus):
        return 0.0
    g = unit_grad_dtype_bytes(t)
    if t.method == "full":
        return trainable_params * g
    layer = counts.attention_per_layer + counts.mlp_per_layer + counts.norms_per_layer
    adapters = trainable_params  # the layers' adapters, and the head's or embeddings' if any
    root = counts.embedding + counts.lm_head + counts.final_norm
    root_trains = t.lora_lm_head or t.lora_trainable_embeddings
    return (counts.num_layers * layer + adapters + (root if root_trains else 0)) * g
