"""fit: the largest micro-batch is the largest that fits, and alternatives are real estimates."""

from __future__ import annotations

from gpuhours import catalog
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.fit import fit
from gpuhours.estimate.step_replay import reserved_training_memory
from gpuhours.resolve import resolve_model
from gpuhours.setup import Hardware, Training


def test_largest_micro_batch_is_the_edge_of_memory():
    arch, _ = resolve_model("llama-3.2-3b")
    gpu = catalog.gpu("a100-80gb")
    t = Training(arch=arch, method="lora", seq_len=2048, checkpointing=True)
    r = fit(t, Hardware(gpu=gpu), effective_batch=64)
    limit = gpu.memory_bytes * (1 - A.FIT_HEADROOM_FRACTION.value)
    mb = r.largest_micro_batch
    assert mb is not None and mb > 1
    # fit's memory: the live tensors and the allocator reserve of the step replay
    at = reserved_training_memory(t.model_copy(update={"micro_batch": mb})).total_bytes
    above = reserved_training_memory(t.model_copy(update={"micro_batch": mb + 1})).total_bytes
    assert at <= limit < above
    # exactly 64: the largest micro-batch up to mb that divides it, and its accumulation
    split = max(m for m in range(1, mb + 1) if 64 % m == 0)
    assert r.micro_batch_for_effective_batch == split
    assert r.grad_accum_for_effective_batch == 64 // split
    assert r.micro_batch_for_effective_batch * r.grad_accum_for_effective_batch == 64


def test_fastest_configuration_fits_and_is_at_least_as_fast_as_the_largest_batch():
    arch, _ = resolve_model("qwen2-0.5b")
    hw = Hardware(gpu=catalog.gpu("rtx-4090"))
    r = fit(Training(arch=arch, seq_len=1024), hw)
    assert r.fastest is not None and r.fastest.fits
    assert r.fastest.memory_total_bytes <= r.fastest.memory_limit_bytes


def test_nothing_fits_lists_changes_that_do():
    arch, _ = resolve_model("llama-2-13b")
    r = fit(Training(arch=arch, seq_len=4096), Hardware(gpu=catalog.gpu("rtx-4090")),
            bigger_gpus=catalog.gpus())
    assert r.largest_micro_batch is None
    fitting = [c for c in r.alternatives if c.fits]
    assert fitting
    assert any(c.method == "qlora" for c in fitting)  # 13B in 4 bits: ~7 GB on a 24 GB card
    for c in r.alternatives:
        assert c.fits == (c.memory_total_bytes <= c.memory_limit_bytes)



def test_the_effective_batch_is_reached_exactly_or_the_nearest_is_said():
    arch, _ = resolve_model("qwen2.5-7b")
    t = Training(arch=arch, method="lora", seq_len=2048)
    gpu = catalog.gpu("a100-80gb")
    # once answered 3 x 11 = 33 for 32: now a split of exactly 32 (micro-batch 2 x 16)
    r = fit(t, Hardware(gpu=gpu), effective_batch=32)
    assert r.largest_micro_batch == 3
    assert (r.micro_batch_for_effective_batch, r.grad_accum_for_effective_batch) == (2, 16)
    assert r.fastest is not None
    assert r.fastest.micro_batch * r.fastest.grad_accum * r.fastest.num_gpus == 32
    # 33 sequences over 2 GPUs: no whole split; the nearest are 32 and 34
    odd = fit(t, Hardware(gpu=gpu, num_gpus=2), effective_batch=33)
    assert odd.micro_batch_for_effective_batch is None
    assert "nearest: 32 or 34" in odd.effective_batch_note
    # the fastest setup at the nearest batch the GPUs make, said in its row (walk p9)
    assert odd.fastest is not None
    made = odd.fastest.micro_batch * odd.fastest.grad_accum * odd.fastest.data_parallel
    assert made in (32, 34) and f"effective batch {made} (the nearest" in odd.fastest.change


def test_fit_of_a_mamba_model_skips_the_lora_alternatives(tmp_path):
    """peft refuses LoRA on Mamba mixers: fit's one-change table leaves LoRA/QLoRA out instead
    of failing the whole command (a full fine-tune of a Mamba model did not fit -> crash)."""
    import json as _json

    from typer.testing import CliRunner

    from gpuhours.cli import app

    config = {"model_type": "mamba", "architectures": ["MambaForCausalLM"], "hidden_size": 4096,
              "num_hidden_layers": 64, "vocab_size": 65024, "state_size": 16, "expand": 2,
              "conv_kernel": 4, "intermediate_size": 8192, "time_step_rank": 256,
              "tie_word_embeddings": False, "layer_norm_epsilon": 1e-5}
    path = tmp_path / "mamba.json"
    path.write_text(_json.dumps(config))
    result = CliRunner().invoke(app, ["fit", "--model", str(path), "--gpu", "rtx-4090", "--json"])
    assert result.exit_code == 1, result.output  # nothing fits as given: exit 1, with the table
    changes = [c["change"] for c in _json.loads(result.output)["alternatives"]]
    assert "gradient checkpointing" in changes
    assert not any("LoRA" in c for c in changes)


def test_fit_offers_no_tpu_for_a_4bit_base():
    """bitsandbytes/GPTQ/torchao 4-bit bases run CUDA (or ROCm) kernels: a QLoRA run that does
    not fit is not offered a TPU as 'a larger GPU' (a reviewer's finding)."""
    import json as _json

    from typer.testing import CliRunner

    from gpuhours.cli import app

    # 8K tokens of Llama 3 8B QLoRA outgrow a 24 GB card; the 32 GB TPUs were offered first
    result = CliRunner().invoke(app, ["fit", "--model", "llama-3-8b", "--method", "qlora",
                                      "--gpu", "rtx-4090", "--seq", "8192", "--json"])
    larger = [a["change"] for a in _json.loads(result.output)["alternatives"]
              if a["change"].startswith("a larger GPU")]
    assert larger and not any("tpu" in c for c in larger)
