"""Storage budgets: bytes on disk of checkpoints, datasets, RL rollout buffers and logs, and the
time to write a checkpoint. Pure functions, no I/O; each returns a `Figure` in bytes (or seconds)
whose `source` gives the formula and where its constants come from.

Sizes are exact byte counts of the tensors; GB = 10^9 bytes and GiB = 2^30 where printed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

from gpuhours.errors import InputError
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.assumptions import Assumption
from gpuhours.estimate.figures import BasisKind, Figure, assumed, formula
from gpuhours.estimate.memory import lora_trainable_params, state_bytes_per_param
from gpuhours.estimate.params import count_params
from gpuhours.setup import LoraTargets, Method, Optimizer, Precision, Training

#: UTF-8 bytes of raw text per token. Basis: OpenAI's tokenizer guide, "one token generally
#: corresponds to ~4 characters of text for common English text", and 1 byte per ASCII
#: character in UTF-8. Code, other scripts and markup differ: state your own where known.
RAW_TEXT_BYTES_PER_TOKEN = Assumption(
    "raw_text_bytes_per_token", 4.0, "bytes/token",
    "assumption: ~4 characters per English BPE token (OpenAI tokenizer guide), 1 byte each")

#: How pre-tokenised token ids are laid out on disk.
#: packed: one flat array of ids in the narrowest unsigned type (nanoGPT's train.bin, Megatron's
#: indexed datasets); hf-datasets: a Hugging Face `datasets` Arrow table with input_ids (int32)
#: and attention_mask (int8), the types its arrow_writer.OptimizedTypedSequence narrows them to;
#: hf-datasets-labels: the same plus a `labels` copy of the ids, which `datasets` keeps as int64.
TokenLayout = Literal["packed", "hf-datasets", "hf-datasets-labels"]


def _check(value: float, name: str, minimum: float = 0.0) -> None:
    if isinstance(value, bool) or not math.isfinite(value) or value < minimum:
        raise InputError(f"storage budget: {name}",
                         f"expected a finite number >= {minimum:g}, got {value!r}.")


def _bytes(value: float, source: str) -> Figure:
    return formula(value, "bytes", source)


# --- checkpoints ----------------------------------------------------------------------------


def checkpoint_bytes(arch: ModelArch, method: Method = "full", precision: Precision = "bf16-mixed",
                     optimizer: Optimizer = "adamw", with_optimizer: bool = False,
                     lora_rank: int = 16, lora_targets: LoraTargets = "all-linear") -> Figure:
    """Bytes of one saved checkpoint: the model's tensors, and with `with_optimizer` what a
    resumable checkpoint adds (fp32 master weights, optimizer moments).

    Full fine-tuning: params x (weights [+ master + moments]) bytes per param, the bytes per
    param of estimate/memory.py `state_bytes_per_param` (ZeRO paper sec. 3.1: bf16-mixed with
    AdamW is 2 + 4 + 8 = 14 bytes/param on disk; gradients are not saved). Tied embeddings are
    counted once, as safetensors and torch.save store a shared tensor once.
    LoRA and QLoRA: the adapters alone, trainable x 4 bytes (peft keeps adapters in fp32 under
    any base precision, as memory.py does) [+ their fp32 moments]; the frozen base, 16-bit or
    4-bit, is not written (peft's save_pretrained saves adapter weights only).
    Left out: the scheduler, RNG and trainer state (kilobytes), file headers, and a second copy
    of the weights that some stacks write (e.g. DeepSpeed ZeRO-1/2 under the HF Trainer also
    saves the 16-bit module state beside model.safetensors: +2 bytes/param).
    Checked against files written by torch.save and safetensors: tests/test_storage_budget.py.
    """
    counts = count_params(arch)
    if method == "full":
        s = state_bytes_per_param(precision, optimizer, trainable=True)
        per_param = s.weights + (s.master + s.optimizer if with_optimizer else 0.0)
        params = counts.total
        parts = f"{s.weights:g} weights" + (
            f" + {s.master:g} master + {s.optimizer:g} {optimizer} state" if with_optimizer else "")
        what = f"{params:,} params (count_params) x {per_param:g} bytes ({parts}; {precision})"
    else:
        s = state_bytes_per_param("fp32", optimizer, trainable=True)
        per_param = s.weights + (s.optimizer if with_optimizer else 0.0)
        params = lora_trainable_params(arch, lora_rank, lora_targets)
        base = "4-bit base" if method == "qlora" else "base"
        what = (f"{params:,} {method} adapter params (rank {lora_rank}, {lora_targets}) x "
                f"{per_param:g} bytes (fp32 adapters" + (f" + {optimizer} state" if with_optimizer
                                                        else "") + f"); the frozen {base} is not saved")
    return _bytes(params * per_param, f"{what}: storage/budget.py checkpoint_bytes, "
                                      "bytes/param from estimate/memory.py state_bytes_per_param")


def checkpoint_bytes_for(t: Training, with_optimizer: bool = False) -> Figure:
    """`checkpoint_bytes` of a training workload (its arch, method, precision, optimizer, LoRA)."""
    return checkpoint_bytes(t.arch, t.method, t.precision, t.optimizer, with_optimizer,
                            t.lora_rank, t.lora_targets)


def retained_checkpoints_bytes(per_checkpoint: Figure, kept: int,
                               saving_next: bool = True) -> Figure:
    """Peak bytes of the checkpoints on disk under a keep-the-last-`kept` policy.

    kept x per checkpoint, + 1 more with `saving_next`: the Hugging Face Trainer writes the new
    checkpoint before it rotates out the oldest (transformers trainer.py `_save_checkpoint`
    calls `rotate_checkpoints` after `save_to_json`), so save_total_limit=N peaks at N + 1.
    """
    if isinstance(kept, bool) or not isinstance(kept, int) or kept < 0:
        raise InputError("storage budget: kept", f"expected a whole number >= 0, got {kept!r}.")
    copies = kept + (1 if saving_next else 0)
    note = " + 1 being written before the oldest is rotated out" if saving_next else ""
    return Figure(value=copies * per_checkpoint.value, unit="bytes", basis=per_checkpoint.basis,
                  source=f"{kept} kept{note} = {copies} x ({per_checkpoint.source})")


def checkpoint_write_s(checkpoint: Figure, disk_write_gb_per_s: float, saves: int = 1) -> Figure:
    """Seconds spent writing `saves` checkpoints: saves x bytes / (disk GB/s x 10^9).

    A lower bound: the sequential write at the stated bandwidth. Serialisation, gathering sharded
    state to one rank (FSDP full state dict, ZeRO-3 16-bit gather) and fsync come on top; the page
    cache can hide the write until memory fills. The training step waits for it unless the
    framework saves asynchronously.
    """
    _check(disk_write_gb_per_s, "disk_write_gb_per_s", minimum=1e-9)
    if isinstance(saves, bool) or not isinstance(saves, int) or saves < 0:
        raise InputError("storage budget: saves", f"expected a whole number >= 0, got {saves!r}.")
    seconds = saves * checkpoint.value / (disk_write_gb_per_s * 1e9)
    return formula(seconds, "s", f"{saves} saves x checkpoint bytes / ({disk_write_gb_per_s:g} GB/s "
                                 f"x 1e9), a lower bound (sequential write; serialisation, "
                                 f"gathering and fsync not counted); checkpoint: "
                                 f"{checkpoint.source}")


# --- datasets -------------------------------------------------------------------------------


def token_id_bytes(vocab_size: int) -> int:
    """Bytes of one token id in the narrowest unsigned type that holds ids 0..vocab_size-1:
    2 (uint16) up to 65,536 tokens, else 4 (uint32/int32). nanoGPT's data/openwebtext/prepare.py
    stores GPT-2's 50,257 ids as uint16; Megatron's indexed dataset picks uint16 below 65,500."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise InputError("storage budget: vocab_size",
                         f"expected a positive whole number, got {vocab_size!r}.")
    return 2 if vocab_size <= 2**16 else 4


def tokenized_dataset_bytes(tokens: float, vocab_size: int, layout: TokenLayout = "packed",
                            copies: int = 1) -> Figure:
    """Bytes of a pre-tokenised copy of a dataset: copies x tokens x bytes per token.

    Bytes per token by layout (see TokenLayout): packed, `token_id_bytes(vocab_size)`;
    hf-datasets, 4 (input_ids int32) + 1 (attention_mask int8); hf-datasets-labels, + 8 (labels
    int64). Arrow's per-row offsets (4 bytes per example) and file headers are left out.
    """
    _check(tokens, "tokens")
    if isinstance(copies, bool) or not isinstance(copies, int) or copies < 1:
        raise InputError("storage budget: copies", f"expected a whole number >= 1, got {copies!r}.")
    per_token: float
    if layout == "packed":
        per_token = token_id_bytes(vocab_size)
        how = f"packed uint{8 * per_token} ids (vocab {vocab_size:,})"
    elif layout == "hf-datasets":
        per_token, how = 5, "datasets Arrow: input_ids int32 + attention_mask int8"
    elif layout == "hf-datasets-labels":
        per_token, how = 13, "datasets Arrow: input_ids int32 + attention_mask int8 + labels int64"
    else:
        raise InputError("storage budget: layout", f"unknown token layout {layout!r}; expected "
                                                   "packed, hf-datasets or hf-datasets-labels.")
    return _bytes(copies * tokens * per_token,
                  f"{copies} x {tokens:.4g} tokens x {per_token:g} bytes/token ({how})")


def raw_text_bytes(tokens: float, bytes_per_token: float | None = None) -> Figure:
    """Bytes of the raw text of `tokens` tokens: tokens x bytes per token; the assumed 4 bytes
    (RAW_TEXT_BYTES_PER_TOKEN) unless the plan states its own ratio."""
    _check(tokens, "tokens")
    if bytes_per_token is None:
        a = RAW_TEXT_BYTES_PER_TOKEN
        return assumed(tokens * a.value, "bytes", f"{tokens:.4g} tokens x {a.value:g} bytes/token "
                                                  f"({a.basis})")
    _check(bytes_per_token, "bytes_per_token", minimum=1e-9)
    return _bytes(tokens * bytes_per_token,
                  f"{tokens:.4g} tokens x {bytes_per_token:g} bytes/token (stated)")


# --- RL rollouts and logs -------------------------------------------------------------------


def rollout_buffer_bytes(rollouts: float, tokens_per_rollout: float, bytes_per_token_id: int = 4,
                         floats_per_token: int = 1, floats_per_rollout: int = 1,
                         bytes_per_float: int = 4) -> Figure:
    """Bytes of an RL rollout (experience) buffer kept on disk:
    rollouts x (tokens x (id bytes + floats per token x float bytes) + floats per rollout x
    float bytes).

    tokens_per_rollout counts prompt and completion. Defaults: int32 token ids; one fp32 value
    per token (the sampling policy's log-prob, which GRPO and PPO need for the importance ratio);
    one fp32 reward per rollout. PPO with a value head and a reference model keeps about five per
    token (log-prob, reference log-prob, value, advantage, return): pass floats_per_token=5.
    Images, raw text of the prompts and framework overhead are not counted.
    """
    _check(rollouts, "rollouts")
    _check(tokens_per_rollout, "tokens_per_rollout")
    for name, v in (("bytes_per_token_id", bytes_per_token_id),
                    ("floats_per_token", floats_per_token),
                    ("floats_per_rollout", floats_per_rollout), ("bytes_per_float", bytes_per_float)):
        _check(v, name)
    per_rollout = (tokens_per_rollout * (bytes_per_token_id + floats_per_token * bytes_per_float)
                   + floats_per_rollout * bytes_per_float)
    return _bytes(rollouts * per_rollout,
                  f"{rollouts:.4g} rollouts x ({tokens_per_rollout:.4g} tokens x "
                  f"({bytes_per_token_id} id + {floats_per_token} x {bytes_per_float} bytes) + "
                  f"{floats_per_rollout} x {bytes_per_float} bytes per rollout)")


def log_bytes(duration_hours: float, bytes_per_hour: float) -> Figure:
    """Bytes of logs and metrics written at a stated rate: hours x bytes per hour."""
    _check(duration_hours, "duration_hours")
    _check(bytes_per_hour, "bytes_per_hour")
    return _bytes(duration_hours * bytes_per_hour,
                  f"{duration_hours:g} h x {bytes_per_hour:.4g} bytes/h (stated rate)")


def total_bytes(parts: Mapping[str, Figure]) -> Figure:
    """The sum of byte figures, naming its parts. The basis is 'assumed' when any part is."""
    for name, f in parts.items():
        if f.unit != "bytes":
            raise InputError(f"storage budget: {name}", f"expected a figure in bytes, got {f.unit!r}.")
    basis: BasisKind = ("assumed" if any(f.basis == "assumed" for f in parts.values())
                        else "formula")
    return Figure(value=sum(f.value for f in parts.values()), unit="bytes", basis=basis,
                  source="sum of " + (", ".join(parts) if parts else "nothing"))
