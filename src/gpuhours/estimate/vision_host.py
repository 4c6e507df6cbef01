"""Operators the host issues for a vision-language model's vision tower, per micro-batch.

estimate/host.py counts the decoder's layers; a Qwen2-VL or Qwen2.5-VL tower adds its own blocks
(`depth` of them, 32 in every released checkpoint), which run as eager PyTorch operators too,
and whose GPU work is small beside their host work: at 5 images of 1,296 patches a block's
GEMMs are 6,480 x 1,280 wide (about 0.1 ms each on an H100), where a block issues some 40
operators forward.

Counted on CPU with gpuhours.torchkit.ops.count_ops (the unit of assumptions.OPS_PER_LAYER:
dispatcher calls that launch device work, views and allocations excluded), transformers 5.23's
Qwen2_5_VisionTransformerPretrainedModel and Qwen2VisionTransformerPretrainedModel in bf16 at a
tiny width, one training step (forward, then `.sum().backward()` of the output), built with 2
and 4 blocks: per block the difference halved, outside the blocks the rest; images of 8 x 8
patches (one attention window each), 1, 2 and 4 of them, with and without non-reentrant
gradient checkpointing (issue 13):

- Qwen2.5-VL, per block: forward 42, backward 78, the recomputed forward under checkpointing
  40 more in backward (1 image; with SDPA each further image adds one attention call a block,
  which flash-attn's varlen kernel, the path EasyR1 and verl load, does not: its one call a
  block is the 1-image count); outside the blocks (patch embedding, rotary table, window
  index, merger): forward 36 + 20 per image (the rotary and window-index loops run per image),
  backward 32.
- Qwen2-VL, per block: forward 28, backward 46, recomputed 26; outside: forward 22 + 8 per
  image, backward 13.

flash-attn's varlen path adds, per block, the max over the window lengths it is given and its
host read (EasyR1 @8460e817 verl/models/transformers/flash_attention_utils.py; transformers'
vision attention computes `max_seqlen` the same way): about 3 operators, not counted.

A frozen tower (train_vision off) runs forward only: no backward, and checkpointing recomputes
nothing of it (no input or weight of its blocks requires a gradient). CLIP and SigLIP towers
(ViTTower: LLaVA, Gemma 3, Llama 4) are not counted here: 0, which understates their host time.
"""

from __future__ import annotations

from gpuhours.estimate.vision import VisionTower
from gpuhours.setup import Training

#: operators per block (forward, backward, recomputed forward), counted (module docstring)
QWEN2_5_VL_BLOCK_OPS = (42.0, 78.0, 40.0)
QWEN2_VL_BLOCK_OPS = (28.0, 46.0, 26.0)
#: operators outside the blocks per micro-batch (forward, forward per image, backward)
QWEN2_5_VL_OUTSIDE_OPS = (36.0, 20.0, 32.0)
QWEN2_VL_OUTSIDE_OPS = (22.0, 8.0, 13.0)


def vision_host_ops_per_micro_batch(t: Training) -> float:
    """Device operators the host issues for the vision tower in one micro-batch of `t`
    (micro_batch x images_per_example images): forward; with a trained tower its backward and,
    under checkpointing, the recomputed forward. 0 without images or for a tower not counted
    (module docstring)."""
    v = t.arch.vision
    if not isinstance(v, VisionTower) or t.image_grid is None or not t.images_per_example:
        return 0.0
    block = QWEN2_VL_BLOCK_OPS if v.qwen2_vl else QWEN2_5_VL_BLOCK_OPS
    fixed, per_image, outside_bwd = QWEN2_VL_OUTSIDE_OPS if v.qwen2_vl else QWEN2_5_VL_OUTSIDE_OPS
    ops = v.depth * block[0] + fixed + per_image * t.micro_batch * t.images_per_example
    if t.train_vision:
        ops += v.depth * block[1] + outside_bwd
        if t.checkpointing:
            ops += v.depth * block[2]
    return ops


def vision_forward_host_ops(t: Training, images: float) -> float:
    """Device operators of one forward of the vision tower over `images` images, with no
    backward (an RL scoring pass; a frozen tower in training): the blocks' forward, the
    operators outside them and their loops per image. 0 for a tower not counted."""
    v = t.arch.vision
    if not isinstance(v, VisionTower) or t.image_grid is None or not t.images_per_example:
        return 0.0
    block = QWEN2_VL_BLOCK_OPS if v.qwen2_vl else QWEN2_5_VL_BLOCK_OPS
    fixed, per_image, _ = QWEN2_VL_OUTSIDE_OPS if v.qwen2_vl else QWEN2_5_VL_OUTSIDE_OPS
    return v.depth * block[0] + fixed + per_image * images
