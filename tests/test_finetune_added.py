"""The rows of finetune_runs_added.csv (issue 14: Hopper, Ada and Blackwell fine-tuning runs added
after the shared reference file): they load after finetune_runs.csv's 517, and each maps to the
setup its source states. The expected values are written by hand from the sources (the Scicom
small-ablation scripts at the commits in the rows), not read back from the harness."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpuhours import catalog
from gpuhours_dev.validation import _rows
from gpuhours_dev.validation import finetune as F

#: the shared file's data rows; the added file's first row is the next number
SHARED_ROWS = 517


@pytest.fixture(scope="module")
def rows() -> list[dict[str, str]]:
    return F.finetune_rows()


def test_added_rows_follow_the_shared_file(rows):
    shared, added = _rows(F.DATA), _rows(F.DATA_ADDED)
    assert len(shared) == SHARED_ROWS
    assert list(added[0]) == list(shared[0])  # the same columns, in the same order
    assert len(rows) == SHARED_ROWS + len(added) == 546
    assert rows[518 - 1]["model"] == "Qwen/Qwen3-1.7B-Base"  # data row 1 of the added file
    # held out: no row of the added file set a figure
    assert not F.TUNED_THROUGHPUT_ROWS & set(range(518, len(rows) + 1))


def test_the_shared_copy_is_unchanged():
    # finetune_runs.csv and its README are the shared reference copy, byte for byte; rows added
    # later go in finetune_runs_added.csv (checked where the shared reference is present)
    shared = Path("/work/shared/reference/validation")
    if not shared.is_dir():
        pytest.skip("shared reference copy not on this machine")
    data = Path(F.__file__).with_name("data")
    for name in ("finetune_runs.csv", "finetune_runs_README.md"):
        assert (data / name).read_bytes() == (shared / name).read_bytes(), name


def test_h200_row_maps_to_the_scripts_setup(rows):
    # simple-throughput-multigpus/h200.sh @ 9d56463: torchrun --nproc_per_node 4, Qwen3-0.6B-Base,
    # --per_device_train_batch_size 32 --gradient_accumulation_steps 1 --block_size 4096
    # --gradient_checkpointing true --model_dtype bfloat16 --bf16; train.py's loss is Liger's
    # LigerFusedLinearCrossEntropyLoss; no --optim with torch 2.8: adamw_torch_fused
    m = F.map_row(521, rows[521 - 1])
    t = m.training
    assert m.source == "Scicom simple-throughput" and m.skipped is None and t is not None
    assert (t.model, t.method, t.precision) == ("qwen3-0.6b", "full", "bf16")
    assert (t.micro_batch, t.seq_len, t.grad_accum, t.checkpointing) == (32, 4096, 1, True)
    assert (t.optimizer, t.optimizer_impl, t.loss_kernel) == ("adamw", "fused", "fused-linear")
    # train.py calls apply_liger_kernel_to_qwen3(rope=True, swiglu=True, rms_norm=True, ...)
    assert (t.liger_kernels, t.kernels) == ("classes", "eager")
    assert (m.num_gpus, t.zero_stage, m.gpu and m.gpu.name) == (4, 0, "h200")
    # README: "H200 throughput average 300k tokens per second", over the 4 GPUs
    measured, why = F.throughput_figure(rows[521 - 1], m.source)
    assert why == "" and measured == pytest.approx(300_000 / 4)


def test_flash_attention_3_runs_the_fused_kernels_where_the_script_asks_for_it(rows):
    # h100.sh and h200.sh @ 9d56463 pass --attn_implementation flash_attention_3 (FA3's Hopper
    # kernels: fused_attention); l40s.sh passes none (train.py's default flash_attention_2), nor
    # does how-fast-5090's train.py (attn_implementation='flash_attention_2')
    fused = {n: F.map_row(n, rows[n - 1]).training.fused_attention  # type: ignore[union-attr]
             for n in (518, 519, 520, 521, 522)}
    assert fused == {518: False, 519: False, 520: True, 521: True, 522: False}
    assert "flash_attention_3" in F.map_row(520, rows[520 - 1]).setup
    # on Hopper the fused entry (0.43 of peak) replaces SDPA's FlashAttention-2 (0.25)
    from gpuhours.estimate.timing import attention_efficiency

    h100 = catalog.gpu("h100-sxm")
    assert attention_efficiency(h100, 1024, fused=True) == pytest.approx(0.43)
    assert attention_efficiency(h100, 1024, fused=False) == pytest.approx(0.25)


def test_h100_sxm_row_is_one_epoch_over_its_minutes(rows):
    # how-fast-5090 (@ 0c7398b): 13,298 rows x 4,096 tokens = 54,468,608 tokens in one epoch,
    # 47 min on the H100 SXM: 54,468,608 / 2,820 s = 19,315.1 tokens/s; h100.sh: batch 20,
    # accumulation 1, one GPU; train.py's loss is Cut Cross-Entropy
    m = F.map_row(518, rows[518 - 1])
    t = m.training
    assert t is not None and m.gpu is not None and m.gpu.name == "h100-sxm"
    assert (t.model, t.micro_batch, t.grad_accum, t.loss_kernel) == ("qwen3-1.7b", 20, 1, "cut-ce")
    measured, _ = F.throughput_figure(rows[518 - 1], m.source)
    assert measured == pytest.approx(54_468_608 / 2_820, abs=0.1)
    tp = [c for c in F._row_comparisons(m, rows[518 - 1]) if c.kind == "ft_throughput"][0]
    assert tp.skipped is None and tp.generation == "hopper" and tp.predicted is not None
    assert t.compile and "torch.compile (the row's notes)" in tp.setup


def test_a_gpu_without_the_rate_is_skipped_with_why(rows):
    # the RTX 5090 row is compared now that the catalog holds its bf16 rate
    m = F.map_row(519, rows[519 - 1])
    assert m.training is not None and m.gpu is not None and m.gpu.name == "rtx-5090"
    comps = {c.kind: c for c in F._row_comparisons(m, rows[519 - 1])}
    assert comps["ft_throughput"].predicted is not None
    # the same bf16 run on a GPU the catalog gives no bf16 rate (the V100: fp16 tensor cores
    # only) is not compared, and the row says so instead of failing the whole table
    v100 = dataclasses.replace(m, gpu=catalog.gpu("v100-16gb"))
    comps = {c.kind: c for c in F._row_comparisons(v100, rows[519 - 1])}
    tp = comps["ft_throughput"]
    assert tp.predicted is None and tp.skipped is not None
    assert "bf16" in tp.skipped and "v100-16gb" in tp.skipped
    assert comps["ft_fits"].predicted is not None  # memory is still checked


def test_script_notes_name_the_loss_and_what_is_not_modelled():
    base = {"notes": ""}
    assert F._script_notes(base) == (None, "")
    kernel, note = F._script_notes({"notes": "loss cut_cross_entropy.linear_cross_entropy(...)"})
    assert kernel == "cut-ce" and "Cut Cross-Entropy" in note
    kernel, note = F._script_notes({"notes": "apply_liger_kernel_to_qwen3(...); "
                                             "LigerFusedLinearCrossEntropyLoss; cu_seq_lens"})
    assert kernel == "fused-linear"
    assert "Liger's RoPE" in note and "varlen" in note


def test_megatron_bridge_gb200_rows_map_to_their_presets(rows):
    # Megatron-Bridge @ 63b08b397 scripts/performance/configs/llama/
    # llama3_workload_base_configs.py: LLAMA3_70B_SFT_CONFIG_GB200_FP8_CS_V1 runs 32 GPUs, TP 1,
    # PP 8, VP 10, MBS 1, GBS 32: DP = 32 / 8 = 4, so 32 / (1 x 4) = 8 micro-batches per step;
    # the table (26.06, SFT Performance): 3864 tokens/s per GPU at 4096 tokens
    m = F.map_row(523, rows[523 - 1])
    t = m.training
    assert m.source == "Megatron-Bridge" and m.skipped is None and t is not None
    assert (t.model, t.method, t.precision, t.kernels) == ("llama-3-70b", "full", "fp8-mixed",
                                                           "megatron")
    assert (t.tp, t.pp, t.cp, t.virtual_stages, t.zero_stage) == (1, 8, 1, 10, 1)
    assert (t.micro_batch, t.seq_len, t.grad_accum, t.checkpointing) == (1, 4096, 8, False)
    assert (m.num_gpus, m.gpus_per_node, m.gpu and m.gpu.name) == (32, 72, "gb200")
    measured, why = F.throughput_figure(rows[523 - 1], m.source)
    assert why == "" and measured == pytest.approx(3864)
    # LLAMA3_70B_LORA_CONFIG_GB200_FP8_MX_V1: the FP8_CS preset with PP 4 (VP 20), 8 GPUs,
    # GBS 32: DP 2, 16 micro-batches; llama3_llm_finetune.py sets target_modules
    # ['linear_qkv'] and llama3.py dim 16: q, k, v only, modelled as the four attention
    # projections (one adapter more)
    m = F.map_row(526, rows[526 - 1])
    t = m.training
    assert t is not None and (t.method, t.lora_rank, t.lora_targets) == ("lora", 16, "attention")
    assert (t.pp, t.virtual_stages, t.grad_accum, m.num_gpus) == (4, 20, 16, 8)
    assert "MXFP8" in m.setup and "linear_qkv only" in m.setup
    tp = [c for c in F._row_comparisons(m, rows[526 - 1]) if c.kind == "ft_throughput"][0]
    assert tp.skipped is None and tp.generation == "blackwell" and tp.predicted is not None


def test_dgxc_nemo_rows_map_to_the_recipe_layout(rows):
    # dgxc-benchmarking @ 741c886 ft_llama3/llama3_finetune_utils.py: 70B LoRA runs MBS 1,
    # GBS 4 x #GPUs, TP 2, PP 4, VP 20; on 8 GPUs DP = 8 / (2 x 4) = 1, so 32 micro-batches a
    # step. NeMo's llama3_70b.finetune_recipe (NeMo@25ec4e98): LoRA dim 16 on linear_qkv
    # (performance mode), use_distributed_optimizer False. README_70b.md's LORA BF16 table:
    # 9.118 s a step on 8 H100: 4096 x 32 / 9.118 / 8 = 1797.1 tokens/s per GPU
    m = F.map_row(541, rows[541 - 1])
    t = m.training
    assert m.source == "DGXC NeMo" and t is not None and m.gpu is not None
    assert (t.model, t.method, t.precision, t.lora_rank) == ("llama-3-70b", "lora", "bf16-mixed",
                                                             16)
    assert (t.tp, t.pp, t.virtual_stages, t.grad_accum, t.zero_stage) == (2, 4, 20, 32, 0)
    assert not t.tp_comm_overlap and m.gpu.name == "h100-sxm" and m.gpus_per_node == 8
    measured, why = F.throughput_figure(rows[541 - 1], m.source)
    assert why == "" and measured == pytest.approx(4096 * 32 / 9.118 / 8, rel=1e-5)
    # 70B SFT: TP 4, PP 4, VP 5, GBS = #GPUs = 32, DP 2: 16 micro-batches; the distributed
    # optimizer (adam.py) and MegatronCommOverlapCallback(tp_comm_overlap=True)
    t = F.map_row(539, rows[539 - 1]).training
    assert t is not None and (t.tp, t.pp, t.virtual_stages, t.grad_accum) == (4, 4, 5, 16)
    assert t.tp_comm_overlap and t.zero_stage == 1 and t.optimizer_impl == "fused"
    # 8B SFT on 16 GPUs: TP 1, PP 1, DP 16, GBS 64: 4 micro-batches; two nodes, joined by the
    # DGX H100's network (50 GB/s per GPU one way, catalog node dgx-h100)
    m = F.map_row(528, rows[528 - 1])
    assert m.training is not None and (m.training.grad_accum, m.num_gpus) == (4, 16)
    assert m.inter_node_gb_per_s_one_way == pytest.approx(50.0)
    measured, _ = F.throughput_figure(rows[528 - 1], m.source)
    assert measured == pytest.approx(4096 * 64 / 1.32 / 16, rel=1e-5)
