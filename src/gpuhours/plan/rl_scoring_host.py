"""The host's part of an RL step's scoring forwards (issue 13).

A scoring pass (the policy's old log-probs, the reference model, a reward model, a critic's
values) is one forward over every sequence, costed by its FLOPs (estimate/generation.py
scoring_time_s, plan/rl_scoring.py vision_scoring_s). In eager PyTorch the host issues each
micro-batch's forward operator by operator beside the GPU, as in training (estimate/timing.py):
the pass's micro-batches (whole sequences packed up to the pass's token budget:
rl_scoring.scoring_micro_batches; verl and EasyR1 dynamic batching) each issue the decoder's
forward operators (estimate/host.py host_forward_ops_per_micro_batch) and, for a
vision-language policy, its tower's (estimate/vision_host.py vision_forward_host_ops), combined
with the GPU work by the training step's rule (timing.host_gpu_combined_s: the p-norm of
assumptions.HOST_GPU_OVERLAP_P, the tower apart from the decoder). Small micro-batches of a
small model are where it shows: EasyR1's defaults score 2 x 4,096 tokens a micro-batch
(`micro_batch_size_per_device_for_experience` 2, examples/config.yaml @8460e817), some 27
micro-batches a GPU a pass for the Qwen2.5-VL-3B rows, each with 12 images through a tower of 32
blocks. Pure functions; seconds per GPU.
"""

from __future__ import annotations

from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.host import host_forward_ops_per_micro_batch, megatron_moe_host_op_weight
from gpuhours.estimate.timing import eager_host_dispatch, host_gpu_combined_s, host_s_per_op
from gpuhours.estimate.vision_host import vision_forward_host_ops
from gpuhours.plan.rl_scoring import scoring_micro_batches
from gpuhours.setup import Hardware, Training


def scoring_pass_s(t: Training, arch: ModelArch, hw: Hardware, decoder_gpu_s: float,
                   tower_gpu_s: float, sequences: float, ranks: int, budget_tokens: float,
                   stages: int = 1) -> float:
    """Seconds of one scoring pass on one GPU with the host's operators: `decoder_gpu_s` and
    `tower_gpu_s` (the vision tower's forward, 0 for `arch` other than the policy's or without
    images) combined with the host time of the pass's micro-batches. `sequences` over `ranks`
    data-parallel groups, each packing whole sequences of t.llm_seq_len tokens up to
    `budget_tokens` a micro-batch; with `stages` pipeline stages a GPU issues 1/stages of the
    decoder's layers. On a device whose operators the host does not issue one by one (a CPU,
    XLA: timing.eager_host_dispatch) the GPU time alone."""
    if not eager_host_dispatch(hw.gpu):
        return decoder_gpu_s + tower_gpu_s
    micro = scoring_micro_batches(sequences / max(1, ranks), t.llm_seq_len, budget_tokens)
    per_op = host_s_per_op(hw)
    host_s = (micro * host_forward_ops_per_micro_batch(arch, t, megatron_moe_host_op_weight())
              / max(1, stages) * per_op)
    tower_host_s = 0.0
    if tower_gpu_s > 0:
        images = max(1, int(budget_tokens // t.llm_seq_len)) * t.images_per_example
        tower_host_s = micro * vision_forward_host_ops(t, min(images, sequences / max(1, ranks)
                                                              * t.images_per_example)) * per_op
    return host_gpu_combined_s(host_s, decoder_gpu_s, tower_host_s, tower_gpu_s)
