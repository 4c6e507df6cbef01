"""The optimizer step inside backward (torchtune's optimizer_in_bwd; issue 14).

torchtune's single-device full fine-tuning recipe with `optimizer_in_bwd: True`
(recipes/full_finetune_single_device.py and torchtune/training/memory.py at
pytorch/torchtune@1814feb17 and @30b8519e8) builds one optimizer per parameter
(`{p: config.instantiate(cfg_optimizer, [p]) for p in model.parameters()}`) and registers on
every trainable parameter a post-accumulate-grad hook, `register_optim_in_bwd_hooks`, that
runs `optim_dict[param].step()` and then `optim_dict[param].zero_grad()` (set_to_none). So a
parameter is updated, and its gradient freed, as soon as autograd has accumulated it; the loop
calls no `optimizer.step()` after backward. The recipe refuses it with
gradient_accumulation_steps > 1 and with gradient clipping (RuntimeError in __init__), since
no whole-model gradient ever exists.

What that changes in memory (estimate/memory.py training_memory):

- no optimizer-step phase (all gradients plus the optimizer's temporaries): only the gradient
  of the parameter being stepped and its optimizer's temporaries are alive, and torch's
  foreach AdamW over a one-tensor list makes temporaries of that one tensor only;
- in backward each gradient lives from its accumulation to its hook: the LM head's gradient
  (made first, beside the logits' gradient) is stepped there, so its optimizer temporaries join
  that phase. A weight used twice (tied embedding and head) is accumulated once, when its last
  use's gradient arrives (autograd sums a node's inputs before AccumulateGrad runs), so its
  gradient stays from the head's backward to the embedding's: at the head phase it is counted
  already, and later phases hold fewer activations.

Not counted: the optimizer state is the same (one optimizer per parameter keeps the same
moments); the step's time is the same memory-bound work (estimate/timing.py), now issued as one
optimizer per parameter from the hooks (more, smaller kernel launches: not counted).
"""

from __future__ import annotations

from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.params import ParamCounts


def largest_trainable_tensor_params(arch: ModelArch, counts: ParamCounts, method: str,
                                    lora_rank: int, embedding_copies: int = 0) -> int:
    """Elements of the largest trainable tensor, whose gradient and step are the transient
    peak of the in-backward step: for full fine-tuning the larger of the token embedding, the
    LM head and one MLP projection (the layer's MLP weights over its 2 or 3 projections); for
    LoRA the largest adapter matrix (rank x the widest side) or a trainable embedding copy."""
    if method == "full":
        projections = 3 if arch.gated_mlp else 2
        return max(counts.embedding, counts.lm_head, counts.mlp_per_layer // projections)
    widest = max(arch.hidden_size, arch.intermediate_size)
    return max(lora_rank * widest, embedding_copies and counts.embedding)


def in_backward_step_bytes(tensor_params: float, grad_bytes_per_param: float,
                           temporaries_bytes_per_param: float) -> float:
    """Bytes of one parameter's in-backward step, at its hook: its gradient and the
    optimizer's temporaries for that one tensor (0 per param for fused or 8-bit kernels)."""
    return tensor_params * (grad_bytes_per_param + temporaries_bytes_per_param)
