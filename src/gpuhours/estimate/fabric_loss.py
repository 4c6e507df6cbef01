"""litgpt's loss under Lightning Fabric (loss kernel "chunked-fabric"): the logits working set.

litgpt's finetune scripts run the model wrapped by Lightning Fabric, and Fabric's
`_FabricModule.forward` returns `precision.convert_output(output)`, which casts every floating
tensor of the output to `torch.get_default_dtype()`, fp32 (lightning/fabric/wrappers.py and
plugins/precision/half.py, fsdp.py, bitsandbytes.py: the same in each half-precision plugin;
read at Lightning @ 71aed751, lit-gpt @ 8641822's pin, and at 2.4.0, litgpt @ 00af8b0d's). So
the head's bf16 output reaches litgpt's `chunked_cross_entropy` as fp32 logits, which the
loop holds (`logits = model(...)`) until the next forward returns, and each chunk's
cross-entropy runs and saves its log-softmax in fp32:

- the LoRA scripts (finetune/lora.py, adapter.py: `model(input_ids, lm_head_chunk_size=128)`)
  run the head by chunks of 128 positions, a list the plugin casts chunk by chunk, the bf16
  list alive until the last chunk is cast; the loss drops the last chunk's final position
  (not contiguous above one sequence: its reshape copies it) and runs F.cross_entropy per
  chunk;
- full.py calls `model(input_ids)`: one whole head, cast whole; the shifted logits are
  reshaped (a copy above one sequence) and split into chunks of 128 rows.

N tokens of the micro-batch, V the vocabulary, a the head's bytes (2), c the positions of one
head chunk (128 x micro-batch), r the rows of one loss chunk (128). Counted by a live-storage
count on real CPU tensors (tests/test_fabric_loss.py).
"""

from __future__ import annotations

#: positions per chunk of litgpt's LM head and loss (finetune/lora.py: lm_head_chunk_size=128;
#: utils.chunked_cross_entropy's chunk_size=128 rows for an unchunked head)
LITGPT_CHUNK_POSITIONS = 128

#: bytes of the fp32 logits Fabric's cast makes, and of everything the loss does on them
FP32_BYTES = 4


def fabric_cast_bytes(tokens: int, vocab: int, head_bytes: float) -> float:
    """At the cast: every chunk of the head's output (a) and its fp32 copy (4): N V (a + 4).
    The head's output is freed when the plugin returns (the cast saves nothing for backward)."""
    return tokens * vocab * (head_bytes + FP32_BYTES)


def _last_chunk_copy_positions(micro_batch: int, seq_len: int) -> int:
    """Positions of the reshape copy of the last head chunk, its final position dropped: none
    at one sequence (the slice is contiguous), else every sequence's last chunk less one."""
    if micro_batch <= 1:
        return 0
    last = seq_len - LITGPT_CHUNK_POSITIONS * ((seq_len - 1) // LITGPT_CHUNK_POSITIONS)
    return micro_batch * (last - 1)


def fabric_loss_forward_bytes(tokens: int, vocab: int, micro_batch: int, seq_len: int,
                              whole_head: bool) -> float:
    """After the last chunk's cross-entropy, bytes: the fp32 logits the loop holds (4) and
    every chunk's saved fp32 log-softmax output (4), with
    - chunked head: the last chunk's reshape copy (4 per element; none at one sequence);
    - whole head (full.py): the reshape copy of all the shifted logits (4; a view at one
      sequence), which the chunks are views of, alive until the function returns."""
    held_and_saved = 2 * FP32_BYTES * tokens * vocab
    if whole_head:
        return held_and_saved + (FP32_BYTES * tokens * vocab if micro_batch > 1 else 0.0)
    return held_and_saved + FP32_BYTES * _last_chunk_copy_positions(micro_batch,
                                                                     seq_len) * vocab


def fabric_loss_backward_bytes(tokens: int, vocab: int, micro_batch: int, whole_head: bool
                               ) -> float:
    """The loss's backward, bytes: the held fp32 logits (4), the saved log-softmax outputs (4,
    freed chunk by chunk) and one chunk's fp32 output gradient and input gradient (8 per
    element: 128 x micro-batch positions for the chunked head, 128 rows for the whole head).
    Whole head: then the split's backward concatenates every chunk's input gradient (4) into
    one more (4) beside the held logits: at least N V 12."""
    if whole_head:
        chunk = min(tokens, LITGPT_CHUNK_POSITIONS)
        return max(3 * FP32_BYTES * tokens, 2 * FP32_BYTES * (tokens + chunk)) * vocab
    chunk = min(tokens, LITGPT_CHUNK_POSITIONS * micro_batch)
    return 2 * FP32_BYTES * (tokens + chunk) * vocab
