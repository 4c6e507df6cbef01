"""The estimator against finetune_runs.csv (issue 14): the mapping of rows checked by hand,
every row compared or kept with a reason, and today's headline numbers as a regression floor
(not the goals: docs/validation.md says how far from them we are)."""

from __future__ import annotations

import math

import pytest

from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.step_replay import reserved_training_memory
from gpuhours_dev.validation import _rows
from gpuhours_dev.validation.finetune import (
    DATA,
    DATA_ADDED,
    GB,
    GIB,
    MODELS,
    finetune_comparisons,
    map_row,
    mapped_rows,
    memory_figure,
)
from gpuhours_dev.validation.finetune_report import fits_summary, host_fit_row, memory_fit_row

KINDS = ("ft_memory", "ft_fits", "ft_throughput")


@pytest.fixture(scope="module")
def rows():
    return _rows(DATA)


@pytest.fixture(scope="module")
def comparisons():
    return finetune_comparisons()


def _one(comparisons, kind, row):
    return next(c for c in comparisons if c.kind == kind and c.label.startswith(f"#{row} "))


def test_all_517_rows_read(rows):
    assert len(rows) == 517


def test_litgpt_lora_row_by_hand(rows, comparisons):
    """Row 17: litgpt config_hub llama-2-7b/lora.yaml on one A10G; torch.cuda.max_memory_allocated
    / 1e9 = 19.77 (decimal GB), compared with the estimate's live tensors."""
    m = map_row(17, rows[16])
    t = m.training
    assert m.skipped is None and t is not None and m.gpu is not None
    assert (t.model, t.method, t.lora_rank, t.lora_targets) == ("llama-2-7b", "lora", 32, "qv")
    assert (t.micro_batch, t.seq_len, t.grad_accum) == (2, 512, 4)
    assert (t.checkpointing, t.precision, t.optimizer, t.optimizer_impl) == (
        False, "bf16", "adamw", "foreach")
    assert (t.zero_stage, m.num_gpus, m.gpu.name) == (0, 1, "a10g")
    fig = memory_figure(rows[16])
    assert fig is not None and fig.kind == "allocated"
    assert fig.bytes == pytest.approx(19.77 * GB)
    c = _one(comparisons, "ft_memory", 17)
    assert c.predicted == pytest.approx(training_memory(t.arch, t, 1).tensors_bytes)


def test_answerai_fsdp_qlora_row_by_hand(rows, comparisons):
    """Row 409: Answer.AI fsdp_qlora, Llama-2-7B QLoRA r64 on 2x RTX 3090 with FSDP full shard;
    per-GPU torch.cuda.max_memory_reserved 5.21 GiB; 1024 x 2048 tokens in 1564 s."""
    m = map_row(409, rows[408])
    t = m.training
    assert m.skipped is None and t is not None and m.gpu is not None
    assert (t.model, t.method, t.lora_rank, t.lora_targets) == (
        "llama-2-7b", "qlora", 64, "all-linear")
    assert (t.micro_batch, t.seq_len, t.grad_accum, t.checkpointing) == (1, 2048, 1, True)
    assert (t.zero_stage, m.num_gpus, m.gpu.name) == (3, 2, "rtx-3090")
    # the stated targets lack o_proj: the approximation is written into the setup
    assert "lack o_proj" in m.setup
    fig = memory_figure(rows[408])
    assert fig is not None and fig.kind == "reserved"
    assert fig.bytes == pytest.approx(5.21 * GIB)
    mem = _one(comparisons, "ft_memory", 409)
    # the live tensors and the step replay's reserve on the card (estimate/step_replay.py)
    replayed = reserved_training_memory(t, 2, gpu_memory_bytes=m.gpu.memory_bytes)
    assert mem.predicted == pytest.approx(replayed.reserved_bytes)
    tp = _one(comparisons, "ft_throughput", 409)
    assert tp.measured == pytest.approx(1340.9 / 2)  # tokens/s of both GPUs, per GPU
    assert tp.generation == "ampere"


def test_llamafactory_row_records_every_assumption(rows):
    """Row 452 states neither targets, checkpointing nor optimizer: each assumption is named."""
    m = map_row(452, rows[451])
    assert m.training is not None and m.training.method == "qlora"
    for said in ("targets not stated", "checkpointing not stated", "optimizer not stated",
                 "A100 size not stated"):
        assert said in m.setup
    fig = memory_figure(rows[451])
    assert fig is not None and fig.kind == "unstated" and fig.bytes == pytest.approx(9 * GB)


def test_xtuner_row_by_hand(rows, comparisons):
    """Row 308: xtuner Llama-2-7B full, 8 A100-80GB, 8k packed, TGS 3028.3 tokens/s per GPU."""
    m = map_row(308, rows[307])
    t = m.training
    assert t is not None and (t.precision, t.zero_stage, t.seq_len) == ("fp16-mixed", 3, 8192)
    assert "ZeRO-3 assumed" in m.setup
    assert _one(comparisons, "ft_throughput", 308).measured == pytest.approx(3028.3)


@pytest.mark.parametrize(("row", "reason"), [
    (184, "GPTQ int8"),  # ms-swift qwen-7b-chat on an 8-bit GPTQ base
    (310, "sequence parallelism not modelled"),
    (214, "model not in catalog (chatglm3-6b)"),
    (442, "vendor table"),
])
def test_rows_not_expressible_keep_the_reason(rows, row, reason):
    m = map_row(row, rows[row - 1])
    assert m.training is None and m.skipped is not None and reason in m.skipped


@pytest.mark.parametrize("row", [327, 420, 423, 426, 429, 430, 431, 432])
def test_fsdp_cpu_offload_rows_offload_weights_and_optimizer(rows, row):
    """Answer.AI's "FSDP CPU offload of params" and torchtune's fsdp_cpu_offload=True are
    FSDP's CPUOffload(offload_params=True): weights, gradients and AdamW on the host."""
    m = map_row(row, rows[row - 1])
    assert m.training is not None, m.skipped
    assert (m.training.offload, m.training.zero_stage) == ("optimizer+params", 3)
    assert "CPUOffload(offload_params=True)" in m.setup


def test_every_row_compared_or_with_a_reason(comparisons):
    for kind in KINDS:
        cs = [c for c in comparisons if c.kind == kind]
        # finetune_runs.csv's 517 and the rows added after it (finetune_runs_added.csv)
        assert len(cs) == 517 + len(_rows(DATA_ADDED)), kind
        for c in cs:
            assert (c.error is not None) != bool(c.skipped), c
            if c.error is not None:
                assert math.isfinite(c.error) and c.setup, c


def test_models_only_by_exact_name():
    # a row's model is MODELS' (exact text) or the catalog's by its own name, alias or Hub id
    from gpuhours import catalog

    for m in mapped_rows():
        if m.training is not None:
            name = m.label.split(" ", 1)[1]
            if not name.startswith(tuple(MODELS)):
                assert catalog.model(name.rsplit(" ", 1)[0].split(" (")[0])[0] is not None, name


def test_headline_numbers_regression_floor(comparisons):
    """Today's numbers (docs/validation.md), as a floor, not the goals of issue 14: memory
    within 10% for 80% of expressible runs, under 2% refused, throughput within 20% for 90%."""
    mem = [c for c in comparisons if c.kind == "ft_memory" and c.error is not None]
    assert len(mem) >= 188
    # 98 of 205, none tuned: half-precision adapters for the stacks that ran them (Answer.AI's
    # allocated peaks within 3%, where fp32 adapters hid memory the estimate lacks elsewhere),
    # Qwen's figures as device-level readings with the estimator's own CUDA context, litgpt's
    # QLoRA with bitsandbytes 0.42's held inputs and Lightning's 4-bit head (87 before); 97
    # since ms-swift's QLoRA rows run without peft's k-bit preparation, as its sft.py of Jan 2024
    # does (#185 in, #189 out, #193 further below); 100 with Answer.AI's loading path
    # (load_path fsdp-flatten); 101 with litgpt's loop holding its output, not its loss
    # (bnb_saved_input held-output); 105 with litgpt's FSDP accumulation under no_sync
    # (fsdp_grad_accum no-sync: #95-#97, #99) (docs/validation.md); 163 of 272 since the
    # catalog holds litgpt's, Answer.AI's and ms-swift's other models (falcon, gemma, phi,
    # stablelm, tinyllama, yi) and DoRA, torchtune's optimizer in backward and activation
    # offload, LoRA on an int8 base and Unsloth's stack are modelled; 172 of 284 with IA3,
    # prompt and prefix tuning, LoHa, LoKr and VeRA (peft_method) (issue 14, 2026-11-24)
    assert len(mem) >= 280
    assert sum(abs(c.error) <= 0.10 for c in mem if c.error is not None) >= 170
    ok, n = fits_summary(comparisons)
    # 2 (3 before the step replay, issue 14, under which the Llama 3.3 70B capacity row #471
    # fits at the edge of its card); litgpt's #30 and #43 (full fine-tuning on an
    # A10G, below the bf16 weights, gradients and moments of their stated setup). #44 fits since
    # its fused qkv and gate_up adapters are counted once,
    # axolotl's gpt-oss-20b #491 fits since its Cut Cross-Entropy plugin is read
    assert n >= 345
    fits = [c for c in comparisons if c.kind == "ft_fits" and c.error is not None]
    shared = [c for c in fits if int(c.label.split()[0][1:]) <= 517]
    # 3 of 337: #468 (Unsloth's 70B at 12,106 tokens on a card named "48 GB", read as 10^9
    # bytes: 2.5% over it) joined #30 and #43 on 2026-11-24; torchtune's #322 (4 until then)
    # fits since bitsandbytes' paged moments are counted outside torch's allocator and paged
    # to the host beyond the card (setup.optimizer_paged, estimate/paged_optimizer.py)
    assert sum((c.error or 0.0) > 0 for c in shared) <= 3
    # the Megatron-Core rows added for issue 14 (held out) that ran and are refused: nine of 24
    # (#523-#525, Megatron-Bridge on GB200; #530, #539, #540, #544-#546, dgxc-benchmarking's NeMo
    # on H100): the estimate's device total is 4-34% above the card for the fp8 rows and the 70B
    # SFT; no memory figure is published to tell which part (finetune_report.py, "Megatron-Bridge"
    # and "DGXC NeMo" notes). A floor, so a memory fix shows here
    added = [c for c in fits if int(c.label.split()[0][1:]) >= 518]
    assert sum((c.error or 0.0) > 0 for c in added) <= 9
    assert ok >= n - 12
    tp = [c for c in comparisons if c.kind == "ft_throughput" and c.error is not None]
    assert len(tp) >= 109
    assert sum(abs(c.error) <= 0.20 for c in tp if c.error is not None) >= 48
    # the reported out-of-memory runs: today 7 of 9 predicted not to fit (5 before litgpt's
    # FSDP runs held their gradients unsharded under no_sync: #16, #20, #24, #98). Two of
    # litgpt's, each at 38.8 GiB of an A100-40GB's 40, fit since the step replay's allocator
    # reserve replaced the flat 5% (issue 14): #68 (Llama-2-7B LoRA 4 x 1304; 0.69 GiB of
    # reserve where 5% gave 1.88) and #98 (13B LoRA on 2 GPUs under no_sync; it had been
    # refused at 40.4). Both are within 3% of the card: the fits check's edge, not a margin
    oom = [c for c in comparisons if c.kind == "ft_oom" and c.error is not None]
    assert sum(c.error > 0 for c in oom if c.error is not None) >= 7


def test_issue_14_goals_hold_on_the_held_out_rows(comparisons):
    """Issue 14's goals, on the rows no figure was set from (the tuned ones apart: PEFT's
    spread row, the 11 host / hook / attention rows): memory within 10% for 80% of the
    expressible runs, under 2% of the runs that ran refused, throughput within 20% for 90% on
    every GPU generation. Met on 2026-11-25: 227 of 283, 3 of 349, Ada 15/15, Ampere 93/99,
    Hopper 22/24, Blackwell 5/5."""
    mem = [c for c in comparisons if c.kind == "ft_memory" and c.error is not None
           and not memory_fit_row(c)]
    assert sum(abs(c.error) <= 0.10 for c in mem if c.error is not None) >= 0.80 * len(mem)
    ok, n = fits_summary(comparisons)
    assert n - ok < 0.02 * n
    tp = [c for c in comparisons if c.kind == "ft_throughput" and c.error is not None
          and not host_fit_row(c)]
    generations = {c.generation for c in tp}
    assert {"ampere", "ada", "hopper", "blackwell"} <= generations
    for generation in generations:
        rows = [c for c in tp if c.generation == generation]
        within = sum(abs(c.error) <= 0.20 for c in rows if c.error is not None)
        assert within >= 0.90 * len(rows), (generation, within, len(rows))


@pytest.mark.parametrize(("row", "no_sync"), [(16, True), (95, True), (98, True), (99, True),
                                              (64, False), (17, False)])
def test_litgpt_fsdp_rows_accumulate_under_no_sync(rows, row, no_sync):
    """litgpt's and lit-gpt's loops accumulate under fabric.no_backward_sync, FSDP's no_sync()
    on Lightning's FSDPStrategy: their FSDP rows (several GPUs, accumulation) hold unsharded
    gradients; single-GPU rows have no FSDP (#64, #17)."""
    m = map_row(row, rows[row - 1])
    assert m.training is not None
    assert (m.training.fsdp_grad_accum == "no-sync") is no_sync


@pytest.mark.parametrize("row", [19, 65, 409, 416, 452, 326])
def test_qlora_without_peft_keeps_bf16(rows, row):
    """litgpt, Answer.AI's train.py, LLaMA-Factory of Dec 2023 and torchtune run no peft
    prepare_model_for_kbit_training: no fp32 upcast; axolotl (#516) does (the default)."""
    m = map_row(row, rows[row - 1])
    assert m.training is not None and m.training.kbit_upcast is False
    assert "bf16" in m.setup
    ax = map_row(516, rows[515])
    assert ax.training is not None and ax.training.kbit_upcast is None


@pytest.mark.parametrize(("row", "loop"), [(19, "held-output"), (45, "held-output"),
                                           (65, "step"), (66, "step")])
def test_litgpt_qlora_rows_hold_inputs_and_a_4bit_head(rows, row, loop):
    """litgpt and lit-gpt run QLoRA on Lightning's BitsandbytesPrecision (the LM head 4-bit
    too) with bitsandbytes before 0.43.2 under a loop that holds the previous graph: litgpt of
    2024 (config_hub) through its output; lit-gpt of 2023 (resource tables) through its loss,
    but its peak is the first micro-batch (the longest sample forced into it), when nothing
    earlier is held; HF Trainer stacks (axolotl #516) and Answer.AI's train.py (#409, its own
    Linear4bit model, head in bf16) keep the defaults."""
    m = map_row(row, rows[row - 1])
    assert m.training is not None and m.training.bnb_saved_input == loop
    assert m.training.lm_head_4bit and "bitsandbytes" in m.setup
    for other in (516, 409):
        o = map_row(other, rows[other - 1])
        assert o.training is not None and o.training.bnb_saved_input == "step"
        assert not o.training.lm_head_4bit


def test_qwen_int4_rows_carry_deepspeed_buckets(rows):
    """Row 113 runs finetune_qlora_single_gpu.sh with ds_config_zero2.json: 2e8-element
    buckets, two of them (overlap_comm); the plain LoRA rows (#101) run no DeepSpeed."""
    m = map_row(113, rows[112])
    assert m.training is not None and m.training.deepspeed_reduce_bucket == 200_000_000
    assert m.training.deepspeed_overlap_comm and "ds_config_zero2.json" in m.setup
    plain = map_row(101, rows[100])
    assert plain.training is not None and plain.training.deepspeed_reduce_bucket == 0


def test_qwen_zero3_rows_run_deepspeeds_engine(rows):
    """Qwen's full rows run finetune_ds.sh (ds_config_zero3.json), on one GPU too (#119), and
    the 72B LoRA rows state DeepSpeed ZeRO-3 (#170): DeepSpeed's ZeRO-3 engine; the
    single-GPU LoRA rows (#101) run neither."""
    for i in (119, 143, 170):
        m = map_row(i, rows[i - 1])
        assert m.training is not None and m.training.zero_stage == 3, i
        assert m.training.zero3_engine == "deepspeed", i
    plain = map_row(101, rows[100])
    assert plain.training is not None and plain.training.zero3_engine == "fsdp"
    assert plain.training.zero_stage == 0


def test_unsloth_rows_run_unsloths_stack_as_their_callers_chose_it(rows):
    """LLaMA-Factory's Unsloth rows (unsloth 2023.12): checkpoints on the GPU, dropout 0,
    Unsloth's Triton cross-entropy; the docs' capacity rows (Dec 2024): offloaded checkpoints
    and Cut Cross-Entropy above 1,024 tokens; ms-swift's (Apr 2024): its dropout default 0.05
    and its default rank and targets (4.7186M trainable = 32 x 8 x 18,432: q, k, v, no o),
    and tuner.json's use_loss_scale: swift pops the labels, so Unsloth computes no loss and
    swift's compute_scaled_loss runs on the fp32 copy of the logits (hf's tensors)."""
    for i in (451, 453):
        t = map_row(i, rows[i - 1]).training
        assert t is not None and t.kernels == "unsloth", i
        assert t.checkpointing and not t.checkpoint_offload and t.lora_dropout == 0.0
        assert t.loss_kernel == "unsloth-ce"
    for i in (454, 466, 470):
        t = map_row(i, rows[i - 1]).training
        assert t is not None and t.kernels == "unsloth" and t.checkpoint_offload, i
        assert t.loss_kernel == "cut-ce" and t.lora_targets == "all-linear"
    t = map_row(305, rows[304]).training
    assert t is not None and t.kernels == "unsloth" and t.lora_dropout == 0.05
    assert t.lora_rank == 8 and t.lora_targets == "qkv" and t.loss_kernel == "hf"
    # the HF + FA2 rows beside them stay on transformers' path
    t = map_row(467, rows[466]).training
    assert t is not None and t.kernels == "eager" and not t.checkpoint_offload


def test_answerai_rows_hold_their_fp32_logits(rows):
    """fsdp_qlora's train.py keeps `output` (its logits) alive through loss.backward()."""
    m = map_row(413, rows[412])
    assert m.training is not None and m.training.held_logits == "fp32"
    assert "holds the model's output" in m.setup
    other = map_row(17, rows[16])
    assert other.training is not None and other.training.held_logits == "none"


def test_lora_dropout_as_the_rows_state_it(rows):
    """Answer.AI's train.py dropout 0.1 and ms-swift's lora_dropout=0.05 are in the notes;
    Qwen's finetune.py keeps its default 0.05; a row that states none counts none."""
    for row, p in ((413, 0.1), (201, 0.05), (125, 0.05), (452, 0.0)):
        m = map_row(row, rows[row - 1])
        assert m.training is not None and m.training.lora_dropout == p, row


@pytest.mark.parametrize(("row", "kernel"), [(324, "chunked"), (326, "chunked"), (327, "chunked"),
                                             (329, "hf")])
def test_torchtune_rows_take_their_configs_loss(rows, row, kernel):
    """torchtune's llama3_1 configs at 30b8519e8 set CEWithChunkedOutputLoss, except
    405B_qlora.yaml (torch.nn.CrossEntropyLoss on the model's fp32 output)."""
    m = map_row(row, rows[row - 1])
    assert m.training is not None and m.training.loss_kernel == kernel
    assert "at 30b8519e8" in m.setup


@pytest.mark.parametrize(("row", "paged"), [(322, True), (323, True), (513, True),
                                            (336, False), (337, False)])
def test_paged_optimizers_as_the_rows_name_them(rows, row, paged):
    """torchtune's llama3_1/8B_full_single_device.yaml (bitsandbytes.optim.PagedAdamW8bit) and
    axolotl's paged_adamw_8bit page their moments (optimizer_paged); the flags table's plain
    AdamW and its unnamed 8-bit AdamW do not."""
    m = map_row(row, rows[row - 1])
    assert m.training is not None and m.training.optimizer_paged is paged


@pytest.mark.parametrize(("row", "impl"), [(324, "fused"), (329, "fused"), (338, "fused"),
                                           (339, "fused"), (334, "foreach"), (322, "foreach")])
def test_torchtune_adamw_as_its_config_sets_it(rows, row, impl):
    """torchtune's LoRA and QLoRA configs (llama3_1 at 30b8519e8, llama3_2 3B at 1814feb17)
    set torch.optim.AdamW with fused: True; the flags table's full rows override the full
    config's PagedAdamW8bit with torch.optim.AdamW, no fused key: foreach."""
    m = map_row(row, rows[row - 1])
    assert m.training is not None and m.training.optimizer_impl == impl


def test_axolotl_cut_cross_entropy_plugin_is_the_loss(rows):
    """axolotl's gpt-oss-20b LoRA example loads CutCrossEntropyPlugin (its notes list the
    config's plugins) and offloads activations (said, not modelled); #516 loads no plugin."""
    m = map_row(491, rows[490])
    assert m.training is not None and m.training.loss_kernel == "cut-ce"
    assert "activation_offloading" in m.setup
    plain = map_row(516, rows[515])
    assert plain.training is not None and plain.training.loss_kernel == "hf"


def test_litgpt_rows_run_litgpts_loss_on_an_untied_head(rows):
    """litgpt's finetune scripts under Lightning Fabric: the head's output cast to fp32 by
    Fabric, cross-entropy by 128 positions on it (chunked-fabric); litgpt @ 00af8b0d ties no
    weights, so Llama 3.2 1B (#28) runs untied."""
    m = map_row(28, rows[27])
    assert m.training is not None and m.training.loss_kernel == "chunked-fabric"
    assert m.training.arch.tie_embeddings is False and "untied" not in m.setup.split(";")[0]
    assert "no tied embeddings" in m.setup
    other = map_row(64, rows[63])  # lit-gpt's resource tables, Llama-2-7B (untied already)
    assert other.training is not None and other.training.loss_kernel == "chunked-fabric"
    assert "no tied embeddings" not in other.setup


def test_litgpt_bnb_nf4_runs_without_double_quantisation(rows):
    """litgpt's --quantize bnb.nf4 quantises without double quantisation (#65), bnb.nf4-dq
    with it (#66)."""
    plain, dq = map_row(65, rows[64]), map_row(66, rows[65])
    assert plain.training is not None and plain.training.base_quant == "nf4-nodq"
    assert dq.training is not None and dq.training.base_quant == "nf4"


def test_the_ms_swift_note_counts_what_its_table_row_counts():
    """docs/validation.md: the ms-swift note's "Within 10%: X of Y, median error M" is the
    source table's row (compared, within 10%, median), not a count typed into the prose."""
    import re
    from pathlib import Path

    doc = (Path(__file__).parents[1] / "docs" / "validation.md").read_text()
    row = re.search(r"^\| ms-swift \| \d+ \| \d+ \| (\d+) \| (\d+) \| \d+ \| ([+-][\d.]+%) \|",
                    doc, re.M)
    note = re.search(r"^- \*\*ms-swift\*\*:.*?Within 10%: (\d+) of (\d+), median error "
                     r"([+-][\d.]+%)", doc, re.M)
    assert row is not None and note is not None
    assert (note.group(2), note.group(1), note.group(3)) == row.groups()
