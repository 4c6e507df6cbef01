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


#: rows of position_ids per sequence for Qwen2-VL / Qwen2.5-VL's multimodal rotary positions
#: (M-RoPE): one text row and three vision rows (EasyR1 @8460e817 verl/utils/dataset.py:
#: `torch.cat((text_position_ids, vision_position_ids), dim=0)  # (4, seq_length)`, carried as
#: (batch, 4, seq) through the rollout: vllm_rollout_spmd.py); a text model's is one row
MROPE_POSITION_ROWS = 4


def batch_bytes_per_sequence(prompt_tokens: int, response_tokens: int,
                             position_rows: int = 1) -> float:
    """The rollout batch's bytes per sequence as the engine returns it to the driver: int64
    prompts (prompt), responses and response_mask (response), input_ids and attention_mask
    (prompt + response) and `position_rows` rows of position_ids (prompt + response); lengths
    are the padded ones, tokens."""
    seq = prompt_tokens + response_tokens
    return INT64_BYTES * (prompt_tokens + 2 * response_tokens + (2 + position_rows) * seq)


def scoring_pass_bytes(sequences: int, prompt_tokens: int, response_tokens: int,
                       results_per_token: int, position_rows: int = 1) -> float:
    """Bytes through the driver for one scoring pass: the batch out, `results_per_token`
    float32 values per response token back (2 for the old-policy pass, which returns the
    entropy too: `calculate_entropy=True`; 1 for a reference or reward model's log-probs)."""
    return sequences * (batch_bytes_per_sequence(prompt_tokens, response_tokens, position_rows)
                        + results_per_token * FLOAT32_BYTES * response_tokens)


#: float32 per-token tensors the batch carries into the update beyond the rollout's own:
#: old_log_probs, token_level_scores, token_level_rewards, advantages, returns
UPDATE_EXTRA_TENSORS = 5


def update_bytes(sequences: int, prompt_tokens: int, response_tokens: int,
                 reference_model: bool, position_rows: int = 1) -> float:
    """Bytes through the driver to hand the batch to the update (the update returns metrics
    only): the rollout batch, the five per-token float32 tensors the step added, and the
    reference log-probs when a reference model scored it."""
    extra = UPDATE_EXTRA_TENSORS + (1 if reference_model else 0)
    return sequences * (batch_bytes_per_sequence(prompt_tokens, response_tokens, position_rows)
                        + extra * FLOAT32_BYTES * response_tokens)


def rollout_return_bytes(sequences: int, prompt_tokens: int, response_tokens: int,
                         position_rows: int = 1) -> float:
    """Bytes the engine's workers return to the driver with the rollouts."""
    return sequences * batch_bytes_per_sequence(prompt_tokens, response_tokens, position_rows)


# A vision-language batch carries its images too: verl and EasyR1 keep each prompt's decoded
# images in the batch's non-tensor part (`multi_modal_data`; EasyR1 @8460e817
# verl/utils/dataset.py: `example["multi_modal_data"] = {"images": images}`, the dataset's own
# images, not the resized ones), and they travel with every call that takes the batch: out to
# the engine with the prompts and back with the rollouts (vllm_rollout_spmd.py returns them
# repeated n times), out to each scoring pass and to the update. Ray pickles each chunk once,
# so an image object referenced by several sequences of one chunk is sent once (pickle's memo);
# before the rollouts the chunks hold whole prompts, after them the driver reorders the batch
# to balance tokens across ranks (`_balance_batch`), which spreads a prompt's generations.


def distinct_ranks(generations: int, ranks: int) -> float:
    """Expected chunks a prompt's `generations` land in after the batch is reordered to balance
    tokens: each generation taken to go to any of `ranks` chunks alike, independently of its
    prompt (the balancing partitions by length, not by prompt): ranks x (1 - (1 - 1/ranks)^G).
    """
    return ranks * (1.0 - (1.0 - 1.0 / ranks) ** generations)


def image_bytes_per_call(prompts: int, images_per_prompt: int, image_pixels: float,
                         copies_per_image: float) -> float:
    """Bytes of images one call moves: each prompt's images x their decoded bytes
    (assumptions.RL_IMAGE_BYTES_PER_PIXEL a pixel) x the chunks each is pickled into."""
    from gpuhours.estimate.assumptions import RL_IMAGE_BYTES_PER_PIXEL

    return (prompts * images_per_prompt * image_pixels * RL_IMAGE_BYTES_PER_PIXEL.value
            * copies_per_image)


def image_transfers_bytes(parts: list[str], prompts: int, generations: int, ranks: int,
                          images_per_prompt: int, image_pixels: float) -> dict[str, float]:
    """Image bytes through the driver by part of the step: the rollouts twice (out with the
    prompts, back with the responses; whole prompts a chunk), every other part that takes the
    batch once a call after the balancing (`distinct_ranks` copies of each image; PPO's critic
    twice: its values pass and its update). `parts` names the driver's parts of the step."""
    whole = image_bytes_per_call(prompts, images_per_prompt, image_pixels, 1.0)
    spread = image_bytes_per_call(prompts, images_per_prompt, image_pixels,
                                  distinct_ranks(generations, ranks))
    calls = {"rollout generation": 2 * whole, "critic": 2 * spread}
    return {part: calls.get(part, spread) for part in parts}
