"""Packed micro-batches padded to the batch's longest under pipeline parallelism (issue 13).

NeMo-RL's Megatron policy packs each rank's share of a batch into micro-batches of at most a
token budget (`sequence_packing.train_mb_tokens` for the update, `logprob_mb_tokens` for the
log-prob passes). With pipeline parallelism every micro-batch must have the same shape, so it
pads each packed micro-batch to the longest of the rank's batch
(NVIDIA-NeMo/RL@108bffda `nemo_rl/models/megatron/common.py`
`_get_pack_sequence_parameters_for_megatron`: "when PP is used, all sequences must have the
same length", `pad_packed_seq_to = max_seq_len_in_batch` when pipeline_model_parallel_size > 1,
None otherwise; `max_seq_len_in_batch` is `max(micro_batch_lengths)` of the batch,
`nemo_rl/distributed/batched_data_dict.py` `get_microbatch_iterator_for_packable_sequences_len`).
The worker applies it to the update (`megatron_policy_worker.py` train) and to both log-prob
passes (`get_logprobs`, which the reference pass also runs, and `get_topk_logits`). With
PP = 1 nothing is padded to the longest (only FP8's and context parallelism's small multiples,
not modelled here).

The longest packed micro-batch of a rank is taken as full: the budget, or, when fewer tokens
can fill it, the micro-batch's sequences all at the longest (prompt + max_response_tokens).
NeMo-RL packs by first-fit decreasing (grpo_math_1B.yaml `sequence_packing.algorithm`), so the
first micro-batch takes the longest sequences and is near full once any reaches the cap: an
upper end on the padding, not a fitted figure. Each sequence's rounding up to
`sequence_length_round` (64) before packing is not modelled. The padded tokens are costed at the same
per-token rate as the real ones (their matmuls run; Transformer Engine's packed attention
skips them by cu_seqlens, so the attention share is overstated a little).
"""

from __future__ import annotations


def padded_micro_batch_tokens(budget_tokens: float, sequences_per_micro_batch: int,
                              longest_sequence_tokens: int) -> float:
    """Tokens every packed micro-batch is padded to: the longest a rank's packed micro-batch
    can be, min(budget, sequences x the longest sequence), in tokens."""
    if budget_tokens < 1 or sequences_per_micro_batch < 1 or longest_sequence_tokens < 1:
        raise ValueError("budget, sequences and longest sequence must be positive")
    return float(min(budget_tokens, sequences_per_micro_batch * longest_sequence_tokens))


def padding_factor(budget_tokens: float, sequences_per_micro_batch: int,
                   mean_sequence_tokens: float, longest_sequence_tokens: int) -> float:
    """Tokens computed per real token when every packed micro-batch is padded to the longest:
    the padded micro-batch over its own tokens (sequences x the mean sequence), at least 1."""
    padded = padded_micro_batch_tokens(budget_tokens, sequences_per_micro_batch,
                                       longest_sequence_tokens)
    return max(1.0, padded / (sequences_per_micro_batch * mean_sequence_tokens))


def sequences_per_packed_micro_batch(budget_tokens: float, mean_sequence_tokens: float) -> int:
    """Sequences of the mean length one packed micro-batch of `budget_tokens` holds (>= 1)."""
    return max(1, int(budget_tokens // mean_sequence_tokens))


def padding_text(padded_tokens: float, sequences_per_micro_batch: int, mean_sequence_tokens: int,
                 update_factor: float, logprob_factor: float) -> str:
    """The formula's words for the padding: how many of each micro-batch's tokens are padding,
    and what it adds to the update and to the log-prob passes."""
    real = sequences_per_micro_batch * mean_sequence_tokens
    return (f"each packed micro-batch padded to the longest, {padded_tokens:,.0f} tokens for "
            f"{sequences_per_micro_batch} x {mean_sequence_tokens:,} ({padded_tokens - real:,.0f} "
            f"padding; NeMo-RL under PP, megatron/common.py): update x{update_factor:.3g}, "
            f"log-prob passes x{logprob_factor:.3g}")
