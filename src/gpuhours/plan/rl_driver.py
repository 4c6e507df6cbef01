"""The bytes an RL step's batch moves through a single controller (issue 13).

In a single-controller framework (verl's RayPPOTrainer) one driver process holds the step's
batch and hands it to the workers of each phase through Ray, then gathers what they return:
the rollouts come back from the engine, the whole batch goes out to every scoring pass and to the
update, and the per-token results come back. What verl moves is padded, not packed:

- its agent loop pads every prompt to `rollout.prompt_length` and every response to
  `rollout.response_length` (verl/experimental/agent_loop/agent_loop.py @b25bb7d4f, lines
  533-556: `padding="max_length"`), so each sequence travels at its longest length whatever
  it holds; `use_remove_padding` removes the padding only on the GPU, after the transfer;
- the batch's token tensors are int64 (`prompts`, `responses`, `response_mask` over the
  prompt or response; `input_ids`, `attention_mask`, `position_ids` over both: the same file,
  lines 414-421), its per-token results float32 (verl/trainer/ppo/ray_trainer.py @b25bb7d4f:
  `old_log_probs`, `entropys`, `ref_log_prob`, then `token_level_scores`,
  `token_level_rewards`, `advantages`, `returns` before the update);
- each call is dispatched by splitting the DataProto into one chunk per data-parallel rank
  (verl/single_controller/base/decorator.py @b25bb7d4f, `_split_args_kwargs_data_proto`), and
  the driver's timer around it (`marked_timer("old_log_prob")`, ray_trainer.py line 1114)
  counts the transfer with the compute.

These bytes do not shrink with the GPUs, which is why verl's measured old-log-prob pass falls
less than the GPUs grow (docs/rl.md). The rate they move at is the assumption
`RL_DRIVER_BYTES_PER_S`.
"""

from __future__ import annotations

#: bytes of one token id / mask / position (int64 tensors) and of one per-token value (float32)
INT64_BYTES = 8
FLOAT32_BYTES = 4


def batch_bytes_per_sequence(prompt_tokens: int, response_tokens: int) -> float:
    """The rollout batch's bytes per sequence as the engine returns it to the driver: int64
    prompts (prompt), responses and response_mask (response), input_ids, attention_mask and
    position_ids (prompt + response); lengths are the padded ones, tokens."""
    seq = prompt_tokens + response_tokens
    return INT64_BYTES * (prompt_tokens + 2 * response_tokens + 3 * seq)


def scoring_pass_bytes(sequences: int, prompt_tokens: int, response_tokens: int,
                       results_per_token: int) -> float:
    """Bytes through the driver for one scoring pass: the batch out, `results_per_token`
    float32 values per response token back (2 for the old-policy pass, which returns the
    entropy too: `calculate_entropy=True`; 1 for a reference or reward model's log-probs)."""
    return sequences * (batch_bytes_per_sequence(prompt_tokens, response_tokens)
                        + results_per_token * FLOAT32_BYTES * response_tokens)


#: float32 per-token tensors the batch carries into the update beyond the rollout's own:
#: old_log_probs, token_level_scores, token_level_rewards, advantages, returns
UPDATE_EXTRA_TENSORS = 5


def update_bytes(sequences: int, prompt_tokens: int, response_tokens: int,
                 reference_model: bool) -> float:
    """Bytes through the driver to hand the batch to the update (the update returns metrics
    only): the rollout batch, the five per-token float32 tensors the step added, and the
    reference log-probs when a reference model scored it."""
    extra = UPDATE_EXTRA_TENSORS + (1 if reference_model else 0)
    return sequences * (batch_bytes_per_sequence(prompt_tokens, response_tokens)
                        + extra * FLOAT32_BYTES * response_tokens)


def rollout_return_bytes(sequences: int, prompt_tokens: int, response_tokens: int) -> float:
    """Bytes the engine's workers return to the driver with the rollouts."""
    return sequences * batch_bytes_per_sequence(prompt_tokens, response_tokens)
