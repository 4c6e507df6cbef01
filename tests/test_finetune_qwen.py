"""The Qwen-1 rows of finetune_runs.csv (QwenLM/Qwen README's profile, ms-swift's benchmark)
mapped to setups, checked by hand against the rows' own text (issue 14)."""

from __future__ import annotations

import pytest

from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.step_replay import reserved_training_memory
from gpuhours_dev.validation import _rows
from gpuhours_dev.validation.finetune import DATA, GB, GIB, map_row, memory_figure, row_stack


@pytest.fixture(scope="module")
def rows():
    return _rows(DATA)


def test_lora_emb_row(rows) -> None:
    """Row 131: Qwen-7B 'LoRA (emb)' at 256 tokens, batch 1 x accumulation 8, r64 on c_attn,
    c_proj, w1, w2 (every linear), bf16, checkpointing, one A100-SXM4-80G; README 33.7 GB."""
    m = map_row(131, rows[130])
    t = m.training
    assert m.skipped is None and t is not None and m.gpu is not None
    assert (t.model, t.method, t.lora_rank, t.lora_targets) == ("qwen-7b", "lora", 64,
                                                                 "all-linear")
    assert t.lora_trainable_embeddings and t.base_quant == "nf4"
    assert (t.micro_batch, t.seq_len, t.grad_accum, t.checkpointing, t.precision) == (
        1, 256, 8, True, "bf16")
    assert (m.num_gpus, m.gpu.name, t.zero_stage) == (1, "a100-80gb", 0)
    assert "modules_to_save" in m.setup
    # Qwen-1's c_attn is one adapter on the fused q/k/v, r x (d + 3d): estimate/lora.py counts it
    from gpuhours.estimate.lora import lora_params

    d, layers = t.arch.hidden_size, t.arch.num_layers
    f = t.arch.intermediate_size
    per_layer = 64 * ((d + 3 * d) + (d + d) + 2 * (d + f) + (f + d))  # c_attn, c_proj, w1, w2, mlp.c_proj
    assert lora_params(t.arch, 64, "all-linear") == per_layer * layers
    fig = memory_figure(rows[130])
    # type not stated: compared as a device-level reading (reserved + the stated stack's
    # overhead outside the allocator, estimate/device_overhead.py), nothing fitted on Qwen's rows
    assert fig is not None and fig.kind == "device" and "fitted" not in fig.what
    assert fig.bytes == pytest.approx(33.7 * GB)


def test_int4_row_is_a_gptq_base_in_fp16(rows) -> None:
    """Row 137: Qwen-7B-Chat-Int4 Q-LoRA (GPTQConfig bits=4), --fp16, the Int4 checkpoint's
    architecture is Qwen-7B's; DeepSpeed ZeRO-2 on one GPU, said in the setup."""
    m = map_row(137, rows[136])
    t = m.training
    assert m.skipped is None and t is not None
    assert (t.model, t.method, t.base_quant, t.precision) == ("qwen-7b", "qlora", "gptq-int4",
                                                              "fp16")
    assert not t.lora_trainable_embeddings
    assert "DeepSpeed ZeRO-2 (Qwen" in m.setup and "gptq-int4 base" in m.setup
    assert t.deepspeed_reduce_bucket == 200_000_000


def test_full_row_runs_deepspeeds_mixed_precision(rows) -> None:
    """Row 143: Qwen-7B full on 2 GPUs with finetune_ds.sh (DeepSpeed ZeRO-3): bf16 weights
    with fp32 master weights and moments."""
    m = map_row(143, rows[142])
    t = m.training
    assert m.skipped is None and t is not None
    assert (t.method, t.precision, t.zero_stage, m.num_gpus) == ("full", "bf16-mixed", 3, 2)
    assert "fp32 master weights" in m.setup


def test_ms_swift_c_attn_row(rows) -> None:
    """Row 182: ms-swift qwen-7b-chat LoRA r8 on c_attn (q, k, v fused; lora_targets qkv, no o)
    at max length 2048;
    torch.cuda.max_memory_reserved 27.74 GiB; variable-length samples (live tensors at full
    length; the reserve replayed over the run: ms-swift's run_single.py takes the whole 4000-sample
    dataset at max_length <= 2048, and the log-normal of 3234.4 +- 2547.5 tokens keeps 37.8% at
    or below 2048: ln 2048 = 7.625, mu = ln 3234.4 - s2/2 with s2 = ln(1 + 0.7876^2) = 0.4826,
    so z = (7.625 - 7.8403) / 0.6947 = -0.310, Phi = 0.378: 1512 micro-batches of 1)."""
    m = map_row(182, rows[181])
    t = m.training
    assert m.skipped is None and t is not None
    assert (t.model, t.method, t.lora_rank, t.lora_targets, t.seq_len) == (
        "qwen-7b", "lora", 8, "qkv", 2048)
    assert "full-length micro-batch" in m.setup and "r8 qkv" in m.setup
    assert (t.seq_len_mean, t.seq_len_std, t.long_samples) == (3234.4, 2547.5, "drop")
    assert m.replay_micro_batches == 1512
    fig = memory_figure(rows[181])
    assert fig is not None and fig.kind == "reserved" and fig.bytes == pytest.approx(27.74 * GIB)
    assert training_memory(t.arch, t, 1).reserved_bytes > 0


def test_gptq_int8_stays_unexpressed(rows) -> None:
    m = map_row(184, rows[183])
    assert m.training is None and m.skipped is not None and "GPTQ int8" in m.skipped


def test_no_gathers_is_said_of_one_gpu_only() -> None:
    # the Qwen README's ZeRO-3 rows: "one GPU: no gathers" fits #119-124 (1 GPU), not the
    # 2-GPU rows #143-145, whose ZeRO-3 does gather
    data = _rows(DATA)
    for i in (119, 143, 144, 145):
        m = map_row(i, data[i - 1])
        assert m.training is not None and m.training.zero3_engine == "deepspeed", i
        assert ("one GPU: no gathers" in m.setup) == (m.num_gpus == 1), (i, m.num_gpus)
    assert map_row(143, data[142]).num_gpus == 2


def test_qwens_unstated_figure_is_the_estimates_device_total(rows) -> None:
    """Qwen's 'memory (GB)' is compared with what `estimate` calls the device total (tensors,
    the allocator reserve and the CUDA context assumption), with no part set from Qwen's rows;
    torchtune's unstated figure is read as its recipes' active peak (allocated)."""
    from gpuhours_dev.validation.finetune import _predicted_memory

    m = map_row(101, rows[100])  # Qwen-1.8B LoRA at 256 tokens
    fig = memory_figure(rows[100])
    assert m.training is not None and fig is not None and fig.kind == "device"
    # the allocator reserve: the step replay's on the card (estimate/step_replay.py)
    assert m.gpu is not None
    mem = reserved_training_memory(m.training, 1, gpu_memory_bytes=m.gpu.memory_bytes)
    assert _predicted_memory(fig.kind, m.training, 1, m.gpu) == pytest.approx(
        mem.tensors_bytes + mem.allocator_reserve_bytes + mem.cuda_context_bytes)
    assert mem.cuda_context_bytes == pytest.approx(0.5 * 2**30)
    # with the README's stack (CUDA 11.8, PyTorch 2.0: lazy loading; no process group for
    # finetune_lora_single_gpu.sh) the part outside the allocator is the same 0.5 GiB
    stack = row_stack(rows[100], m.training)
    assert stack is not None and stack.distributed == "none"
    assert _predicted_memory(fig.kind, m.training, 1, m.gpu, stack=stack) == pytest.approx(
        mem.tensors_bytes + mem.allocator_reserve_bytes + 0.5 * 2**30)
    other = memory_figure(rows[323])  # torchtune's README table (#324): its recipes' active peak
    assert other is not None and other.kind == "allocated"


def test_qwen_deepspeed_rows_run_a_one_rank_nccl_group(rows) -> None:
    """The Int4 (finetune_qlora_single_gpu.sh --deepspeed) and full (finetune_ds.sh) rows
    initialise DeepSpeed's NCCL group on one GPU: one rank connects no channels (NCCL 2.14.3
    init.cc), so nothing is added for it; the LoRA rows run plain `python finetune.py`."""
    from gpuhours.estimate.device_overhead import device_overhead

    for row, distributed in ((113, "nccl"), (119, "nccl"), (125, "none"), (131, "none")):
        m = map_row(row, rows[row - 1])
        assert m.training is not None
        stack = row_stack(rows[row - 1], m.training)
        assert stack is not None and stack.distributed == distributed, row
        d = device_overhead(stack)
        assert d.module_loading == "lazy" and d.nccl_buffer_bytes == 0
        assert d.total_bytes == pytest.approx(0.5 * 2**30)
    assert row_stack(rows[323], map_row(324, rows[323]).training) is None  # torchtune


def test_qwen_memory_comparison_says_its_stack(rows) -> None:
    """The ft_memory comparison of a device-level Qwen row names the stack and the bytes
    outside the allocator it adds, beside the setup."""
    from gpuhours_dev.validation.finetune import _row_comparisons

    mem = [c for c in _row_comparisons(map_row(113, rows[112]), rows[112])
           if c.kind == "ft_memory"]
    assert len(mem) == 1 and mem[0].predicted is not None
    assert "CUDA 11.8, PyTorch 2.0" in mem[0].setup
    assert "NCCL on one rank: no buffers" in mem[0].setup
    assert "outside torch's allocator 0.50 GiB" in mem[0].setup


def test_swift_tuner_mix_lengths_by_hand() -> None:
    """ms-agent (647.7 +- 217.1 tokens) with twice as many ms-bench (345.0 +- 441.3) samples:
    mean (647.7 + 2 x 345.0) / 3 = 445.9; E[x^2] = ((217.1^2 + 647.7^2) + 2 (441.3^2 +
    345.0^2)) / 3 = 364,729.69, less 445.9^2 = 198,826.81: variance 165,902.88, std 407.31.
    Without the mix, ms-agent's own figures."""
    from gpuhours_dev.validation.finetune import swift_mix_tokens

    mean, std = swift_mix_tokens(2.0)
    assert mean == pytest.approx(445.9) and std == pytest.approx(407.31, abs=0.01)
    assert swift_mix_tokens(0.0) == pytest.approx((647.7, 217.1))


def test_swift_tuner_rows_replay_their_lengths_unless_packed(rows) -> None:
    """Row 298 (tuner.json's lora, mix ratio 2.0, speed cell 87543 samples, 2 epochs): the mix's
    lengths, dropped above 2048, replayed over the estimate's bound, 16384 layer passes / 32
    layers = 512 of the run's 175,086 micro-batches. Row 297 (no mix): ms-agent's own lengths.
    Row 304 (packing=True: fixed max_length pieces) and the Llama 3 Unsloth row 305 (tokens
    stated for Qwen's tokenizer only): no lengths."""
    m = map_row(298, rows[297])
    t = m.training
    assert t is not None
    assert (t.seq_len_mean, t.seq_len_std, t.long_samples) == (445.9, 407.3, "drop")
    assert m.replay_micro_batches == 512 and "512 of the run's 175086 micro-batches" in m.setup
    t = map_row(297, rows[296]).training
    assert t is not None and (t.seq_len_mean, t.seq_len_std) == (647.7, 217.1)
    for i in (304, 305):
        m = map_row(i, rows[i - 1])
        assert m.training is not None and m.training.seq_len_mean is None
        assert m.replay_micro_batches is None


def test_multinode_rows_run_the_scripts_batch_on_two_servers(rows) -> None:
    """Rows 146-151: Qwen-7B 'LoRA (multinode)', two servers of two A100s (README @35023b6),
    finetune_lora_ds.sh (--per_device_train_batch_size 2, ds_config_zero2.json). Row 148:
    1024 tokens, 5.17 s/it, tabulated as 8 x 4 x 1024 / 5.17 = 6,338 tokens/s; run at 2
    sequences a micro-batch the step computed twice that: 2 x 6,338.1 / 4 GPUs per GPU."""
    from gpuhours_dev.validation.finetune import QWEN_MULTINODE_MICRO_BATCH, throughput_figure
    m = map_row(148, rows[147])
    t = m.training
    assert m.skipped is None and t is not None
    assert (m.num_gpus, m.gpus_per_node, t.zero_stage) == (4, 2, 2)
    assert t.deepspeed_reduce_bucket == 200_000_000 and t.deepspeed_overlap_comm
    assert (t.micro_batch, t.seq_len, t.grad_accum) == (QWEN_MULTINODE_MICRO_BATCH, 1024, 8)
    measured, why = throughput_figure(rows[147], "Qwen")
    assert why == "" and measured == pytest.approx(QWEN_MULTINODE_MICRO_BATCH * 6338.1 / 4)
    # the single-GPU Qwen-7B LoRA row at the same length keeps the README's batch 1
    single = map_row(127, rows[126])
    assert single.training is not None and single.training.micro_batch == 1
    assert throughput_figure(rows[126], "Qwen")[0] == pytest.approx(8 * 1024 / 2.8, rel=1e-4)
