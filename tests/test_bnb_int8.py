"""LoRA on a bitsandbytes LLM.int8 base (base_quant int8-bnb; estimate/bnb_int8.py), by hand
from what bitsandbytes 0.49.1 stores and keeps (bitsandbytes is not installed on this CPU:
the figures are counts read from its code, see the module docstring)."""

from __future__ import annotations

import pytest

from gpuhours.errors import FieldError
from gpuhours.estimate.bnb_int8 import (
    int8_dequant_bytes_per_weight,
    int8_input_quant_bytes,
    int8_weight_read_bytes,
)
from gpuhours.estimate.memory import (
    quantised_base_bytes_per_token_layer,
    quantised_params,
    training_memory,
)
from gpuhours.estimate.quant import quantised_linears_bytes
from gpuhours.resolve import resolve_model
from gpuhours.setup import Training


def _7b(**kw: object) -> Training:
    arch, _ = resolve_model("llama-2-7b")
    fields = {"base_quant": "int8-bnb", **kw}
    return Training(arch=arch, method="qlora", precision="bf16", micro_batch=2, seq_len=4096,
                    checkpointing=True, lora_rank=32, **fields)


def test_stored_bytes_by_hand() -> None:
    """Llama-2-7B's 32 layers, each q, k, v, o (4096 x 4096), gate and up (4096 x 11008) and
    down (11008 x 4096): 202,375,168 int8 weights and 42,496 output rows (fp32 SCB, 169,984
    bytes) a layer: 32 x 202,545,152 = 6,481,444,864 bytes."""
    arch = _7b().arch
    assert quantised_params(arch) == 32 * 202_375_168
    assert quantised_linears_bytes(arch, quantised_params(arch), "int8-bnb") == 6_481_444_864


def test_kept_inputs_by_hand() -> None:
    """MatMul8bitLt keeps each linear's input uncast: q/k/v share the norm's output (d = 4096),
    gate/up share one (4096), down's is the product (f = 11008); o_proj's is kept already.
    Under peft's fp32 upcast (the default) they are fp32, and the MLP's gate, up and activation
    outputs fp32 too (2 more bytes each): 4 x 19,200 + 3 x 2 x 11,008 = 142,848 bytes per
    token and layer; without it bf16: 2 x 19,200 = 38,400."""
    t = _7b()
    assert quantised_base_bytes_per_token_layer(t.arch, t) == 142_848
    assert quantised_base_bytes_per_token_layer(t.arch, _7b(kbit_upcast=False)) == 38_400


def test_weights_in_memory_and_against_nf4() -> None:
    """The whole base: the int8 linears plus the fp32-upcast rest (embedding, head, norms:
    6,738,415,616 - 6,476,005,376 = 262,410,240 parameters x 4 bytes)."""
    t = _7b()
    m = training_memory(t.arch, t)
    base = 6_481_444_864 + 262_410_240 * 4
    adapters = m.weights_bytes - base
    assert adapters == pytest.approx(79_953_920 * 4)
    nf4 = training_memory(t.arch, _7b(base_quant="nf4"))
    assert m.weights_bytes > nf4.weights_bytes + 2.7e9  # 1 byte a weight against 0.516


def test_time_terms_by_hand() -> None:
    # backward's copy to bf16 (read 1, write 2) and the in-place scale (read 2, write 2)
    assert int8_dequant_bytes_per_weight(2.0) == 7.0
    # int8 weight read in forward and in the recomputed forward, the bf16 copy in backward
    assert int8_weight_read_bytes(True, 2.0) == 4.0
    assert int8_weight_read_bytes(False, 2.0) == 3.0
    arch = _7b().arch
    # each linear's own input: 3 x 4096 + 4096 (attention) + 2 x 4096 + 11008 (MLP) = 35,584
    # elements, at bf16 (2) + 5 bytes, twice under checkpointing
    assert int8_input_quant_bytes(arch, "int8-bnb", True, 2.0) == 35_584 * 7 * 2
    assert int8_input_quant_bytes(arch, "nf4", True, 2.0) == 0.0


def test_bitsandbytes_4bit_options_refused_on_int8() -> None:
    with pytest.raises(FieldError, match="bnb_saved_input"):
        _7b(bnb_saved_input="held")
