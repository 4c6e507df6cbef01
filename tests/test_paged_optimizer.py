"""bitsandbytes' paged optimizers: the moments of tensors of 1e5 elements or more in CUDA
managed memory, outside torch's allocator (estimate/paged_optimizer.py, setup.optimizer_paged).

The paged parameters are counted against a real Llama 3.1 8B built on the meta device (the
tensors bitsandbytes 0.44.0's get_state_buffer pages: numel >= 1e5), and by hand; the figures
torch's allocator would report lose exactly the paged moments; a setup that ran on a 24 GB card
(torchtune's README: Llama 3.1 8B full fine-tuning on one RTX 4090, 18.9 GiB) fits."""

from __future__ import annotations

import pytest

from gpuhours.errors import FieldError
from gpuhours.estimate.arch import from_hf_config
from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.paged_optimizer import (
    PAGED_MIN_ELEMENTS,
    paged_overflow_bytes,
    paged_resident_bytes,
    paged_state_params,
)
from gpuhours.estimate.params import count_params, norm_params
from gpuhours.setup import Training

#: meta-llama/Llama-3.1-8B config.json (the fields the count needs)
LLAMA_3_1_8B = {"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
                "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8,
                "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
                "tie_word_embeddings": False}
GIB = 2**30


def _arch():  # type: ignore[no-untyped-def]
    return from_hf_config(LLAMA_3_1_8B, "llama-3.1-8b")


def test_paged_params_by_hand() -> None:
    # 8,030,261,248 parameters (the model card's 8.03B); 65 RMSNorm vectors of 4096 (two per
    # layer and the final one) stay in torch's allocator: 266,240
    arch = _arch()
    counts = count_params(arch)
    assert counts.total == 8_030_261_248
    assert paged_state_params(counts, counts.total, norm_params(arch)) == 8_029_995_008


def test_paged_params_match_a_real_model() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(**{k: v for k, v in LLAMA_3_1_8B.items()
                                      if k != "model_type"})
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
    paged = sum(p.numel() for p in model.parameters() if p.numel() >= PAGED_MIN_ELEMENTS)
    arch = _arch()
    counts = count_params(arch)
    assert paged_state_params(counts, counts.total, norm_params(arch)) == paged


def _setup(paged: bool) -> Training:
    # torchtune's llama3_1/8B_full_single_device.yaml at 30b8519e8 with the README's batch 2 x
    # 2048: bf16, PagedAdamW8bit, optimizer_in_bwd, activation checkpointing
    return Training(arch=_arch(), method="full", precision="bf16", optimizer="adamw-8bit",
                    optimizer_paged=paged, optimizer_in_backward=True, checkpointing=True,
                    micro_batch=2, seq_len=2048, loss_kernel="chunked")


def test_the_paged_moments_leave_the_allocators_figures() -> None:
    on, off = training_memory(_arch(), _setup(True)), training_memory(_arch(), _setup(False))
    moments = 2 * 8_029_995_008  # two 1-byte moments per paged parameter
    assert on.paged_optimizer_bytes == moments
    assert off.optimizer_bytes - on.optimizer_bytes == pytest.approx(moments)
    assert off.tensors_bytes - on.tensors_bytes == pytest.approx(moments)
    # what stays: the block-wise absmax and the norms' moments, a fraction of a GiB
    assert 0 < on.optimizer_bytes < 0.1 * GIB
    assert off.paged_optimizer_bytes == 0.0


def test_a_run_that_ran_on_a_4090_fits() -> None:
    # RTX 4090: 24564 MiB (nvidia-smi); the README's run logged 18.9 GiB peak
    capacity = 24564 * 2**20
    assert training_memory(_arch(), _setup(True)).total_bytes < capacity
    assert training_memory(_arch(), _setup(False)).total_bytes > capacity


def test_resident_and_overflow_by_hand() -> None:
    # 15 GiB of paged moments beside 20 GiB of the rest on a 24 GiB card: 4 resident, 11 out
    assert paged_resident_bytes(15 * GIB, 24 * GIB, 20 * GIB) == 4 * GIB
    assert paged_overflow_bytes(15 * GIB, 24 * GIB, 20 * GIB) == 11 * GIB
    # room for all of it: none crosses PCIe; no room: all of it does
    assert paged_resident_bytes(15 * GIB, 80 * GIB, 20 * GIB) == 15 * GIB
    assert paged_overflow_bytes(15 * GIB, 80 * GIB, 20 * GIB) == 0
    assert paged_resident_bytes(15 * GIB, 24 * GIB, 30 * GIB) == 0


def test_a_paged_optimizer_is_bitsandbytes_adamw() -> None:
    with pytest.raises(FieldError, match="paged optimizer"):
        Training(arch=_arch(), method="full", precision="bf16", optimizer="sgd",
                 optimizer_paged=True)


def test_the_cli_flag_reaches_the_estimate() -> None:
    import json

    from typer.testing import CliRunner

    from gpuhours.cli import app

    args = ["estimate", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--method", "full",
            "--precision", "bf16", "--optimizer", "adamw-8bit", "--optimizer-in-backward",
            "--checkpointing", "--batch", "2", "--seq", "2048", "--json"]
    runner = CliRunner()
    plain = runner.invoke(app, args)
    paged = runner.invoke(app, [*args, "--paged-optimizer"])
    # without paging the setup does not fit a 4090 (exit 1: the verdict); paged, it does
    assert plain.exit_code == 1 and paged.exit_code == 0, paged.output
    mem = [json.loads(r.stdout)["memory"] for r in (plain, paged)]
    # the paged moments (2 bytes per paged parameter) leave the optimizer state and the peak
    # of live tensors (the allocator's reserve is replayed against the card: not compared)
    for key in ("optimizer_bytes", "tensors_bytes"):
        assert mem[0][key]["value"] - mem[1][key]["value"] == pytest.approx(2 * 8_029_995_008)
    assert any("paged optimizer" in w for w in json.loads(paged.stdout)["warnings"])


def test_paged_32bit_moments_are_fp32_and_make_no_foreach_temporaries() -> None:
    # bitsandbytes' PagedAdamW (32-bit) keeps two fp32 moments per paged parameter whatever
    # the weights' dtype (Optimizer2State.init_state: dtype=torch.float32), 8 bytes; torch's
    # allocator loses the moments the estimate counted for a bf16 model (2 x 2 bytes), and
    # bitsandbytes' kernel makes no foreach temporaries, whatever optimizer_impl says
    def setup(paged: bool) -> Training:
        return Training(arch=_arch(), method="full", precision="bf16", optimizer="adamw",
                        optimizer_impl="foreach", optimizer_paged=paged, checkpointing=True,
                        micro_batch=1, seq_len=2048)

    on, off = training_memory(_arch(), setup(True)), training_memory(_arch(), setup(False))
    assert on.paged_optimizer_bytes == 8 * 8_029_995_008
    assert off.optimizer_bytes - on.optimizer_bytes == pytest.approx(4 * 8_029_995_008)
    assert on.optimizer_temporaries_bytes == 0.0
    assert off.optimizer_temporaries_bytes > 1 * GIB
