"""torch 2.0's foreach AdamW holds two state-sized sets of temporaries at its step, later
releases one (estimate/adamw_temporaries.py: torch/optim/adamw.py of the 2.0.0 and 2.1.0
wheels; pytorch#104898). Held to hand counts of a tiny model's parameters."""

from __future__ import annotations

from collections import Counter

import pytest

from gpuhours.errors import FieldError
from gpuhours.estimate.adamw_temporaries import adamw_temporary_bytes, adamw_temporary_sets
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.step_replay import _resident, run_steps, trainable_numels
from gpuhours.setup import Training
from gpuhours.trace.allocator import Allocator, Block

CONFIG = dict(model_type="llama", hidden_size=256, intermediate_size=688, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, vocab_size=2048,
              max_position_embeddings=512, tie_word_embeddings=False)
#: the tiny Llama's parameters, counted by hand: embedding and head 2048 x 256 each; per layer
#: q, o 256 x 256, k, v 256 x 128 (2 KV heads of 64), gate, up, down 256 x 688, two norms of
#: 256; the final norm 256
PARAMS = (2 * 2048 * 256 + 2 * (2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 688 + 2 * 256)
          + 256)


def _full(impl: str, optimizer: str = "adamw") -> Training:
    return Training(arch=from_hf_config(CONFIG, "tiny"), method="full", precision="fp32",
                    micro_batch=1, seq_len=64, optimizer=optimizer, optimizer_impl=impl)


def test_sets_by_implementation() -> None:
    assert [adamw_temporary_sets("adamw", i) for i in
            ("foreach", "foreach-2.0", "fused", "per-parameter")] == [1, 2, 0, 0]
    assert adamw_temporary_sets("adamw-8bit", "foreach") == 0


def test_dtype_groups_by_hand() -> None:
    """torch 2.0, groups of 3 and 1 (bytes of one set): making the second group's root finds
    the first's root and denom (3 + 3 + 1 = 7), its denom the first's denom and its own root
    (3 + 1 + 1 = 5), the first group alone 3 + 3 = 6: 7. Later releases: 3 + 1 = 4. One group
    of 4: 8 and 4."""
    assert adamw_temporary_bytes("adamw", "foreach-2.0", [3.0, 1.0]) == 7.0
    assert adamw_temporary_bytes("adamw", "foreach-2.0", [1.0, 3.0]) == 7.0
    assert adamw_temporary_bytes("adamw", "foreach", [3.0, 1.0]) == 4.0
    assert adamw_temporary_bytes("adamw", "foreach-2.0", [4.0]) == 8.0
    assert adamw_temporary_bytes("adamw", "foreach", [4.0]) == 4.0
    assert adamw_temporary_bytes("adamw", "fused", [4.0]) == 0.0


def test_lora_with_bf16_embedding_copies_beside_fp32_adapters() -> None:
    """LoRA r8 on the tiny Llama's linears with peft's modules_to_save copies of the embedding
    and the head under bf16: adapters fp32 (4 bytes a parameter in one set), copies bf16 (2):
    two dtype groups, counted by hand."""
    t = Training(arch=from_hf_config(CONFIG, "tiny"), method="lora", precision="bf16",
                 micro_batch=1, seq_len=64, lora_rank=8, lora_targets="all-linear",
                 lora_trainable_embeddings=True, optimizer_impl="foreach-2.0")
    # per layer r x (fan-in + fan-out): q, o 256+256; k, v 256+128; gate, up 256+688; down
    # 688+256
    adapters = 2 * 8 * (2 * 512 + 2 * 384 + 3 * 944)
    copies = 2 * 2048 * 256
    s_adapters, s_copies = 4 * adapters, 2 * copies
    m = training_memory(t.arch, t)
    assert m.trainable_params == adapters + copies
    expected = s_adapters + s_copies + max(s_adapters, s_copies)
    assert m.optimizer_temporaries_bytes == pytest.approx(expected)
    one = training_memory(t.arch, t.model_copy(update={"optimizer_impl": "foreach"}))
    assert one.optimizer_temporaries_bytes == pytest.approx(s_adapters + s_copies)


def test_torch_2_0_holds_two_fp32_copies_of_the_state() -> None:
    """fp32 full fine-tuning: one moment is 4 bytes a parameter, so the step's temporaries are
    4 x PARAMS bytes under foreach and 8 x PARAMS under torch 2.0's foreach, and the step's peak
    (all gradients and the temporaries beside the weights and moments) grows by 4 x PARAMS."""
    one, two = (training_memory(t.arch, t) for t in (_full("foreach"), _full("foreach-2.0")))
    assert one.trainable_params == PARAMS
    assert one.optimizer_temporaries_bytes == pytest.approx(4 * PARAMS)
    assert two.optimizer_temporaries_bytes == pytest.approx(8 * PARAMS)
    assert one.peak_phase.startswith("optimizer step")
    assert two.peak_phase.startswith("optimizer step")
    assert two.tensors_bytes == pytest.approx(one.tensors_bytes + 4 * PARAMS)


class _Logged(Allocator):
    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []
        self.phase = ""
        self.optimizer_requests: list[int] = []

    def malloc(self, nbytes: int) -> Block:
        if self.phase == "optimizer":
            self.optimizer_requests.append(nbytes)
        return super().malloc(nbytes)


@pytest.mark.parametrize(("impl", "sets"), [("foreach", 1), ("foreach-2.0", 2)])
def test_the_replay_makes_each_set_as_parameter_shaped_tensors(impl: str, sets: int) -> None:
    """The second step's optimizer phase (the moments are made in the first) requests the
    temporaries only: `sets` lists of one fp32 tensor per parameter, of its size."""
    t = _full(impl)
    m = training_memory(t.arch, t)
    al = _Logged()
    _resident(al, t, m)

    def mark(step: int, phase: str) -> None:
        al.phase = phase if step == 1 else ""

    run_steps(al, t, m, steps=2, on_phase=mark)
    root, layers = trainable_numels(t)
    params = [4 * n for n in root] + [4 * n for layer in layers for n in layer]
    assert sum(params) == 4 * PARAMS
    assert Counter(al.optimizer_requests) == Counter(params * sets)


def test_foreach_2_0_is_an_adamw_implementation() -> None:
    with pytest.raises(FieldError, match="foreach-2.0"):
        _full("foreach-2.0", optimizer="sgd")


def test_a_bench_cannot_run_torch_2_0s_optimizer() -> None:
    pytest.importorskip("torch")
    from gpuhours.bench.runner import make_optimizer

    with pytest.raises(FieldError, match="torch 2.0"):
        make_optimizer([], "adamw", "foreach-2.0", 1e-4)
