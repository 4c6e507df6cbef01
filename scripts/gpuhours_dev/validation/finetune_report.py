"""docs/validation.md's fine-tuning sections: finetune_runs.csv by source, method and GPU
generation, every compared row, and every row not compared with the reason."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Iterable

from gpuhours_dev.validation import GIB, Comparison

FT_TOLERANCE = {"ft_memory": 0.10, "ft_throughput": 0.20}
FT_TITLES = {
    "ft_memory": "Fine-tuning memory (finetune_runs.csv)",
    "ft_throughput": "Fine-tuning throughput (finetune_runs.csv)",
}
SUMMARY_TITLES = {
    "ft_memory": "Fine-tuning memory per GPU (finetune_runs.csv; goal: 80% within 10%)",
    "ft_throughput": "Fine-tuning throughput, tokens/s per GPU (finetune_runs.csv; goal: 90% "
                     "within 20% on every GPU generation)",
    "ft_fits": "Fine-tuning runs that ran, predicted to fit (finetune_runs.csv; goal: under 2% "
               "refused)",
}

MEMORY_INTRO = (
    "Every row of `scripts/gpuhours_dev/validation/data/finetune_runs.csv` (517 published runs, "
    "the shared reference file) and of `finetune_runs_added.csv` (runs collected later for the "
    "Hopper, Ada and Blackwell generations, numbered on from #518; all held out, no figure set "
    "from them), each with its source (their README says how each source measures), is mapped to a setup by "
    "`scripts/gpuhours_dev/validation/finetune.py`: the model by catalog name or alias, the "
    "method, LoRA rank and targets, batch, sequence, accumulation, checkpointing, precision, "
    "optimizer, GPU and parallelism. A row that cannot be expressed keeps its reason (listed "
    "below); each assumption made for a row is in its setup text. Like is compared with like: "
    "a torch allocated (or active) peak with the estimate's live tensors "
    "(`MemoryBreakdown.tensors_bytes`), a torch reserved peak with tensors plus the allocator "
    "reserve (`reserved_bytes`), an nvidia-smi reading with reserved plus what sits outside "
    "torch's allocator for the row's stated software stack (estimate/device_overhead.py: the "
    "CUDA context by lazy or eager module loading, cuBLAS's workspace, NCCL's buffers; the "
    "estimator's default stack where none is stated: `total_bytes`); a figure of unstated "
    "type with `reserved_bytes`, but Qwen's, compared as a device-level reading (see its "
    "note). "
    "LoRA adapters take the dtype the row's stack kept them in (fp32 from peft 0.12; the "
    "base's bf16 for older peft, litgpt and torchtune: `lora_adapter_dtype`). Where the samples vary "
    "in length (ms-swift's), the allocator reserve is a replay of the caching allocator over "
    "the run's micro-batches (estimate/fragmentation.py), capped by the GPU's memory, and the "
    "fits check keeps the live tensors with the flat reserve. GB is 10^9 bytes and "
    "GiB 2^30, per each row's unit note. Rows used: those with a memory figure whose setup is "
    "expressible. Error = predicted / measured - 1; tolerance 10%.")
FITS_INTRO = (
    "A configuration that ran must not be predicted not to fit: for every expressible row "
    "that ran (it has a measured figure, or it is a capacity limit that fit) on a GPU whose "
    "memory is known, the estimate's device total (`total_bytes`: tensors, allocator reserve, "
    "CUDA context) is held to the GPU's memory, as the estimator's own `fits` does. A GPU "
    "named by its size only (\"48GB GPU\", \"GPU with 12 GB VRAM\") is taken as that many "
    "10^9 bytes.")
THROUGHPUT_INTRO = (
    "Tokens/s per GPU, compared only where the source's tokens are the tokens computed: "
    "packed sequences (xtuner, torchtune's packed rows), padding to a fixed length (Qwen), "
    "dummy full-length samples (Answer.AI, 1024 samples x context / run time), rows packed to "
    "4096 tokens (the Scicom small-ablation runs: an epoch's packed rows over its minutes, or "
    "the Trainer's tokens seen over a step's time; Megatron-Bridge's tables and dgxc-"
    "benchmarking's NeMo recipes: SQuAD packed to 4096). Rows with "
    "variable-length samples (samples/s, or tokens that exclude padding) are skipped with the "
    "reason. The estimate is uncalibrated (the efficiency defaults of "
    "`src/gpuhours/estimate/assumptions.py`) but for three figures set from Qwen rows: the "
    "Qwen README host's cost per eager operator (six rows, `python scripts/host_overhead.py "
    "qwen`), DeepSpeed ZeRO-3's hook cost (three, `... zero3`) and the flash-attn kernels' "
    "rate on an A100 (two, `... flash`); those rows say so in the table, the others are held "
    "out. Tolerance 20%; the goal is per GPU generation. Inclusion rule for the rows added "
    "after the shared file (`finetune_runs_added.csv`): every row of each source table read "
    "whose setup is expressible, none picked or dropped by its error; sources read and left "
    "out are named, with why, in `data/finetune_runs_added_README.md`.")

#: what remains off, per source, and the likely mechanism (read from the rows below; the
#: numbers quoted are measured values or plain arithmetic on them, not estimates)
REMAINS: dict[str, str] = {
    "litgpt config_hub": (
        "The rows now take litgpt's own loss (finetune/lora.py and full.py @ 00af8b0d, "
        "lit-gpt @ 8641822 the same): the LM head runs by chunks of 128 positions "
        "(lm_head_chunk_size=128) and utils.chunked_cross_entropy runs F.cross_entropy on "
        "each bf16 chunk, no fp32 upcast, the loop holding the logits through backward "
        "(loss kernel chunked-half: 4 bytes per logit and one chunk more, counted on real "
        "CPU tensors, where transformers' hf kernel holds 12). And litgpt of that commit ties "
        "no weights (model.py: lm_head is its own nn.Linear; convert_hf_checkpoint.py copies "
        "the embedding into it), so Llama 3.2 1B/3B and Gemma-2-9B run with an untied head. "
        "With both, every LoRA row (bf16, no checkpointing, A10G) was within 3% of torch's "
        "allocated peak but Llama 3.2 1B (-7%) while peft's fp32 adapters were counted. "
        "litgpt's LoRA parameters are made in bf16-true's dtype (fabric.init_module), so they "
        "are now counted in bf16 (lora_adapter_dtype half: bf16 weights, gradients and AdamW "
        "moments, no fp32 copies of the adapters' inputs), and the LoRA rows read 2.5-9% "
        "below the peak (Llama 3.2 1B and Phi-3 9%): the fp32 copies had stood in for "
        "something not found, and litgpt's fused qkv, one adapter input where the estimate "
        "counts q's and v's apart as peft adapts them, would lower the estimate further. "
        "Before the loss was litgpt's, the fp32 logits had stood in for "
        "the untied head (the 1B and 3B rows were -8.5% and -6%; with the loss alone they "
        "would have read -19% and -11%). The bnb.nf4 QLoRA rows count what bitsandbytes' "
        "MatMul4Bit keeps for backward (each 4-bit linear's input: a (2d + f) per token "
        "and layer), the adapters' dropout masks (lora_dropout 0.05) and, since litgpt's "
        "bnb.nf4 quantises without double quantisation (bnb.nf4-dq turns it on), an fp32 "
        "absmax per 64 weights (base quant nf4-nodq: 4.5 bits a weight, 0.37 more; 0.3 "
        "GiB for 7B). They read 1.3-4.2 GiB above the estimate (19-25%) until two "
        "mechanisms of this stack were counted (issue 14), both read in the code the rows ran "
        "and no constant set from the rows. (1) litgpt pins bitsandbytes 0.42.0 (pyproject "
        "@ 00af8b0d), whose MatMul4Bit keeps each 4-bit linear's input as a ctx attribute "
        "(autograd/_functions.py: ctx.tensors = (A, B); dropped in 0.43.2, PR #1270), which "
        "backward does not release, and the loop keeps the previous micro-batch's graph: "
        "litgpt's finetune/lora.py @ 00af8b0d turns `loss` into a float each iteration "
        "(log_interval 1), so its `logits` hold the graph until the next forward returns: "
        "through that forward the previous inputs of every 4-bit linear (a (2d + q + f) per "
        "token and layer: 1.6 GiB for Llama 3 8B at 2 x 512) and the previous logits are "
        "alive beside the new head's (bnb_saved_input held-output; a reviewer's read), where "
        "lit-gpt's of 2023 (@ 8641822, the resource tables) keeps `loss` a tensor and the "
        "inputs to the next loss (held); held to a real tiny Llama on CPU whose linears keep "
        "their input the same way, tests/test_bnb_held.py. (2) Lightning's "
        "BitsandbytesPrecision converts every nn.Linear, the LM head too: 4-bit head "
        "weights (0.7 GiB less for Llama 3), and each "
        "head matmul dequantises it to fp16 (Lightning quantises from fp16) and casts that "
        "to bf16, V x d x 4 bytes for an instant beside the logits (2.0 GiB for Llama 3; "
        "lm_head_4bit). With both the rows read 4.5-7% below the peak (Phi-3-mini 10%), "
        "the resource tables' 5% above it. The rest is not explained; candidates, "
        "not checked: bf16 weights made on the GPU at fabric.init_module (empty_init off on "
        "one device) before they are quantised, what the validation passes leave (max_"
        "memory_allocated covers the run), and the block weights' fp16 and bf16 copies at "
        "their matmuls where those meet the peak. "
        "The llama-3.2-1b and -3b full rows (#27, #30) read 8.1 "
        "and 15.4 GiB allocated, below the bf16 weights, gradients and AdamW moments of "
        "their stated setup alone (8 bytes x 1.5B and 3.6B parameters with the untied "
        "head): the runs measured cannot have been that setup (the config was read at the "
        "table's last commit, perhaps later than the run). The Phi-3-mini-4k-instruct full "
        "row (#43: 3.8B parameters, 30.6 GB of bf16 weights, gradients and moments alone) "
        "is the same case. Its LoRA row (#44) was predicted 21% above the measured peak and "
        "refused on the A10G: the estimate counted an adapter input per q, k and v (and "
        "gate, up) where Phi-3 fuses them into one matrix (qkv_proj, gate_up_proj), one "
        "adapter and one dropout each, as peft adapts it; counted once now (held to the "
        "storage autograd saves on a real tiny Phi-3 with peft, within 4%, where the count "
        "was 21-23% above; tests/test_activations_real.py), #44 was within 4% (9% below with "
        "bf16 adapters) and fits, and its QLoRA row (#45) reads 23% above the estimate, like "
        "the other QLoRA rows. litgpt's own Phi-3 fuses qkv but keeps fc_1 and fc_2 apart (one "
        "adapter input more, about 0.4 GiB here in bf16; not modelled). Its adapter on the "
        "LM head (litgpt's lora_head, r x (d + "
        "vocab)) is counted (lora_lm_head: 0.3M parameters and the head's input kept, 0.02 "
        "GiB). The full-fine-tuning rows on 4 A10Gs "
        "with FSDP that ran out of memory (#16, #20, #24) were predicted to fit (17.0 and "
        "21.3 of 22.5 GiB) while every micro-batch's gradients were taken as reduce-scattered "
        "into the shards; full.py accumulates under fabric.no_backward_sync, FSDP's no_sync() "
        "(see the resource tables' note), so each rank holds the whole model's bf16 gradient "
        "through the accumulation: counted (fsdp_grad_accum no-sync), they read 26.5 and "
        "33.1 GiB and are refused, as they ran out of memory. "
        "The rows of the models added to the catalog for issue 14 (Falcon-7B, Gemma-2B and "
        "7B, Phi-2, StableLM-Alpha 3B, TinyLlama; held out, no constant set from them) run "
        "litgpt's own model classes (model.py @ 00af8b0d), so two more of its mechanisms "
        "apply: its GptNeoxMLP calls torch's native F.gelu(approximate='tanh'), which keeps "
        "only its input, where transformers' Phi runs the gelu_new composite (three f-wide "
        "tensors more: Phi-2's LoRA rows #40-#42 read +27% to +32% with them, -1.5% to +3.4% "
        "without); and its LoRAQKVLinear adapts q and v inside Falcon's and GPT-NeoX's fused "
        "qkv, which peft cannot, modelled as the fused qkv and o adapters (a superset: "
        "Falcon-7B #1-#3 -0.5% to -2.6%, StableLM #47-#49 -1.9% to -2.3%). The table labels "
        "the gemma2-2b/lora.yaml and gemma2b/qlora.yaml runs gemma-2b; their configs "
        "fine-tune google/gemma-2-2b (checkpoint_dir), which the rows take (#11 -13.1%, #12 "
        "-7.8%). Gemma-2B's rows read above the estimate, not explained: the full FSDP row "
        "(#4) by 27% (-21.1%), LoRA (#5, #6) by 11% (-10.0%); candidates, not checked: "
        "litgpt's embedding scaling (a d-wide copy per token) and its RMSNorm's fp32 "
        "copies at the 2048-wide input of a 16384-wide GeGLU. Gemma-7B's LoRA rows (#8, #9), "
        "which ran out of memory, are refused (23.4 of 22.5 GiB). Read in the same "
        "model.py: litgpt's CausalSelfAttention expands k and v to the query heads and "
        "reshapes them (copies) before the rotary cat and SDPA whenever the query groups are "
        "fewer than the heads, as torchtune's does (kv_repeated, estimate/kv_repeat.py: a 2 "
        "(q - kv) per token and layer saved), now counted for every config_hub row with "
        "grouped- or multi-query attention (lit-gpt @ 8641822, the resource tables, repeats "
        "for grouped-query only): no constant, all rows held out; the Llama 3, 3.2 and "
        "Mistral LoRA rows moved from 2.5-9.1% to 0.5-8.0% below the peak, their QLoRA rows "
        "from 4.5-6.8% to 1.7-5.0%, TinyLlama's from -6.0..-1.4% to -3.7..+3.4%."),
    "litgpt resource tables": (
        "Single-GPU LoRA rows are 4-7% below the allocated peak (with litgpt's chunked bf16 "
        "loss and bf16 adapters, see config_hub; within 3% with peft's fp32 adapters), and "
        "the bnb.nf4 and bnb.nf4-dq rows 4% above it (bnb.nf4 without double quantisation, "
        "nf4-nodq), with the inputs bitsandbytes' MatMul4Bit keeps (at 1304 tokens without "
        "checkpointing 1.8 GiB for 7B, 2.8 GiB for 13B), the previous micro-batch's inputs "
        "the loop holds and the 4-bit LM head (see config_hub: lit-gpt of October 2023 had "
        "the same loop and Lightning plugin, and bitsandbytes of then, before 0.43.2; "
        "10-12% below without the last two). The FSDP rows (2 and 4 "
        "A100-40GB, lit-gpt of October "
        "2023, FSDP with activation checkpointing) read as much as the single-GPU rows of "
        "the same micro-batch without checkpointing (Llama-2-7B at micro-batch 1: 20.7 GiB "
        "on 2 GPUs vs 19.8 GiB on 1), and the 13B row more than its whole bf16 weights "
        "(33.1 vs 24.2 GiB); the estimate, with a sharded base and sharded gradients, was "
        "52-74% low and fitted the 13B run on 2 GPUs (#98) that ran out of memory. Read in the "
        "code the rows ran (issue 14), it is not the loading: finetune/lora.py (@ 8641822) "
        "builds the model under fabric.init_module(empty_init=True) when devices > 1, which "
        "Lightning (@ 71aed751, lit-gpt's pin; FSDPStrategy.module_init_context) puts on the "
        "meta device for torch 2.1, and FSDP materialises and shards it unit by unit at "
        "setup; the checkpoint is loaded after setup (utils.load_checkpoint: fabric.load_raw, "
        "a full state dict loaded unit by unit, the root's embeddings and head gathered "
        "through it): no rank holds the whole model, and the load stays far below the step's "
        "peak. Nor is it the checkpointing, which works (7B on 2 GPUs: +0.3 GiB from "
        "micro-batch 1 to 2, where one GPU without it adds 7 GiB). It is the accumulation: "
        "every micro-batch but the step's last runs under fabric.no_backward_sync, which "
        "Lightning's FSDPStrategy makes FSDP.no_sync() (_FSDPBackwardSyncControl), and "
        "inside it FSDP keeps each unit's gradient unsharded (torch fsdp/_runtime_utils.py "
        "_post_backward_hook returns before the reduce-scatter); with use_orig_params=True "
        "(Lightning's default) a Block unit mixes the frozen base with its adapters and its "
        "flat gradient covers the whole unit (torch warns: fsdp/_wrap_utils.py "
        "_validate_frozen_params). So each rank holds every layer's bf16 gradient, 12.1 GiB "
        "for 7B and 23.6 GiB for 13B (a real FSDP unit on CPU holds its whole gradient so: "
        "tests/test_fsdp_no_sync.py). Counted (fsdp_grad_accum no-sync; no constant, all "
        "rows held out) the rows read 1.4-3.7% below the peak and #98 is refused (40.4 GiB "
        "on a 40 GiB card). The skipped reduce-scatters are not taken off the step time. "
        "Phi-1.5 (#54-#58, #89-#91), StableLM-Alpha 3B (#59-#63, #92-#94) and Falcon-40B "
        "(#74-#76, #100), added to the catalog for issue 14 (held out): the trainable counts "
        "the table prints check the adapters (phi-1.5's q and v, r 8: 1,572,864, the count "
        "of q_proj and v_proj adapters; StableLM's 2,097,152 are litgpt's q and v inside the "
        "fused qkv, modelled with k's outputs and an o adapter more, 1,048,576 parameters). "
        "StableLM reads -9% to +10%, the FSDP rows of both within 9%; phi-1.5's bf16 LoRA "
        "rows on one GPU read 10%, 14% and 18% below at 1, 2 and 4 x 1044 tokens (#54, #57, "
        "#58; 1.8 GiB a sample measured, 1.4 estimated: a per-token tensor of lit-gpt's Phi "
        "of 2023 not counted, not found), its bnb rows (#55, #56) 10% above. The four "
        "Falcon-40B runs that ran out of memory are all refused."),
    "torchtune": (
        "The README table's \"Peak Memory per GPU\" does not say which statistic it is. "
        "Its rows now take the loss of the config they name, read at 30b8519e8: the llama3_1 "
        "8B and 70B configs set CEWithChunkedOutputLoss (the chunked kernel: bf16 logits, "
        "each chunk's fp32 log-softmax kept), 405B_qlora.yaml torch.nn.CrossEntropyLoss on "
        "the model's fp32 output. That lowered the 8B and 70B estimates by 2.8 GiB each "
        "(#324 LoRA on a 4090 from +42% to +25%, the QLoRA row #326 from +77% to +39%, the "
        "70B full row #327 from +68% to +48%, 70B LoRA #328 from +31% to +20%). What is left "
        "is not explained by a mechanism in the stated setup: #324's 16.2 GiB leaves 1.2 GiB "
        "beside the 15.0 GiB of bf16 weights, and #326's 7.4 GiB 1.8 GiB beside the NF4 base "
        "and adapters, less than the checkpointed layer inputs (32 x 4096 tokens x 4096 x 2 "
        "bytes = 1.0 GiB) and the bf16 logits any loss keeps (4096 x 128,256 x 2 bytes = "
        "1.0 GiB) together; and two rows of one config (Llama 3.1 8B LoRA, #324 on a 4090 "
        "and #325 on an A6000) read 16.2 and 30.3 GiB, which no one estimate meets. All ran "
        "with torch.compile, now modelled (Training.compile, estimate/compiled.py; issue 14): "
        "each compiled layer saves what AOTAutograd's min-cut partitioner keeps (the norms, "
        "SiLU and the rotary products recomputed in backward; read from real layers on this "
        "CPU, tests/test_compiled.py), and the compiled cross-entropy keeps its input logits "
        "and two fp32 values per token, not an fp32 log-softmax (the chunks in bf16 here; the "
        "405B row's CrossEntropyLoss takes the model's fp32 output). No figure was set from "
        "these rows (all held out): the counts are exact readings of the partition, not fits. "
        "That moved #324 from +24.6% to +11.1%, #326 from +37.2% to +7.7%, #327 from +48.0% "
        "to +33.2%, #328 from +19.8% to +11.9%, #329 from +46.8% to +41.9% and #325 from "
        "-33.4% to -40.6%; the torchtune median from +22.4% to +9.4% (4 of 10 within 10%, "
        "was 1; with kv_repeated, below). The QLoRA rows run torchao's NF4 (base quant "
        "nf4-torchao: bitsandbytes' bits, but its LinearNF4 keeps no input for backward); "
        "under checkpointing that weighs in the recomputed layer only, below the loss's "
        "working set, so their figures did not move. torchtune's LoRALinear is built in the model's bf16 "
        "(training.set_default_dtype), now counted so (lora_adapter_dtype half: bf16 adapters, "
        "gradients and AdamW moments): r8 adapters, under 0.1 GiB; the figures barely move. "
        "The 70B full row runs FSDP CPU offload with the embedding and the head "
        "as their own FSDP units (custom_sharded_layers), gathered only while they run, "
        "where the estimate keeps the root unit gathered (3.4 GiB); not modelled. In the "
        "optimization-flags table (active bytes, A100, Llama 3.2 3B full) compile (#332) lowers "
        "the measured peak by 9.0 GiB against #331 without it; the estimate now by 14.0 GiB "
        "(activations 29.45 -> 19.41 GiB, the loss's working set 11.74 -> 7.83 GiB). A "
        "second mechanism, found while checking the compiled count against torchtune's own "
        "layer, is now counted for every torchtune row (kv_repeated, estimate/kv_repeat.py): "
        "torchtune's MultiHeadAttention (at 30b8519e8 and 1814feb17) expands k and v to the "
        "query heads before SDPA, which saves the copies at the query width (a 2 q, not "
        "a 2 kv: +1.75 GiB for these 3B rows, eager and compiled alike; under checkpointing "
        "one layer's worth). A one-off partition of torchtune 0.6.1's layer (the same expand; "
        "its own fp32 rotary and RMSNorm modules) on this CPU gave the compiled count plus "
        "exactly that term, full and LoRA, bf16 and fp32; transformers' eager attention "
        "(repeat_kv) against its SDPA path (enable_gqa) checks the term on a real model "
        "(tests/test_kv_repeat.py). Together: #331 -1.4% -> +1.5%, #332 +16.0% -> -8.0%, "
        "#333 (chunked CE compiled) +25.3% -> -2.5%. #334 (checkpointing) stays +20.2%: its "
        "estimated peak is the optimizer step (foreach AdamW's temporaries, 5.98 GiB), which "
        "neither mechanism touches. The unpacked baseline (#330) is not compared: padded per batch, its "
        "longest batch is not stated. optimizer_in_bwd and activation offloading are now "
        "modelled (issue 14; held out, nothing fitted): torchtune steps each parameter's own "
        "optimizer in a post-accumulate-grad hook and frees its gradient at once "
        "(training/memory.py register_optim_in_bwd_hooks at 1814feb17), so there is no "
        "optimizer-step phase of all gradients (estimate/optim_in_backward.py; real hooks on "
        "a tiny Llama on this CPU: one gradient alive at a time, tests/test_optim_in_backward.py); "
        "OffloadActivations copies what the model's forward saves to pinned host memory on a "
        "side stream, which under checkpointing is each layer's input and the final norm's "
        "saves (training/_activation_offloading.py; a counting pack hook on a real "
        "checkpointed model, tests/test_activation_offload.py), the copies hidden behind the "
        "compute. In the flags table #335 (+ optimizer in backward) reads -1.2%, #336 (+ "
        "activation offloading) -1.1%, #338 (LoRA) +4.4%, #339 (QLoRA) +8.1%; #337 (+ 8-bit "
        "AdamW, implementation not named) -15.6%. #323 (8B full, A6000) -6.2%; #322 (the same "
        "config on a 4090) +74.6% and predicted not to fit: its PagedAdamW8bit state is "
        "allocated by cudaMallocManaged, outside torch's allocator whose counters torchtune "
        "logs, and may page to the host; counted on the GPU here (not modelled)."),
    "PEFT": (
        "Full fine-tuning reads +4.2%; LoRA on q,v +9.5% to +10.2%. The figure is the 99th "
        "percentile of memory_reserved() read after each step (run.py @ 5d602fdb), and "
        "run.py empties the cache every 10 steps while its BucketIterator sorts each 20 "
        "batches (80 samples) longest first: every bucket opens, right after an "
        "empty_cache(), with its longest batch, whose reserve the next 9 readings keep. The "
        "top 1% of readings are thus the first halves of the top 2% of buckets, a batch "
        "padded to the 99.975th percentile of sample lengths (the 5th longest of the "
        "20,000), not a typical one (peft_percentile_batch_tokens, checked against a "
        "simulation of that loop). The samples' mean, 208.9 tokens, is the row's; their "
        "spread, 94.7 (90% interval 72-130), that of the 20 logged 250-step windows' means "
        "x sqrt(1000), if the dataset's order mixes lengths evenly. A log-normal of those "
        "puts that batch beyond the 768-token cap, so the rows stay at the cap, the bound "
        "run.py's truncation sets; the tail is not pinned by what is published: taking "
        "data.py's 1,300-character filter (93.8% of MetaMathQA kept) as a hard cut of the "
        "same log-normal puts it at 465 tokens, and the estimate meets the LoRA rows at "
        "about 670 (768: +10.0%, 672: +0.2%, 640: -2.7%). The bulk of the lengths is "
        "checked held out by the runs' mean reading (accelerator_memory_reserved_avg, which "
        "no mapping uses): the same bucket model with the estimate at each padded batch "
        "reads within +0.4% to +3.0% on 16 of the 19 rows, prompt tuning -5.1% "
        "(tests/test_peft_lengths.py). LoRA on the MLP projections only (#372, lora_targets mlp: 9,461,760 "
        "adapter parameters, the count the run logged) reads 12.5% above, like the q,v rows; "
        "with the embedding frozen and no adapter before the first MLP, the first layer's "
        "attention saves nothing (no gradient reaches it), now counted (estimate/lora_mlp.py). "
        "DoRA (#374, use_dora, estimate/dora.py; held out) reads as its plain-LoRA twin (#377) "
        "does: DoRA's base and LoRA outputs, kept for backward, add 2.07 GiB to the estimate "
        "where the measurements differ by 1.92 GiB. IA3, prompt and prefix tuning, LoHa, LoKr "
        "and VeRA (setup peft_method, estimate/peft_methods.py, each held to peft 0.21.2 on a "
        "real tiny Llama to the byte; held out, no constant set from them) read +8% to +12% "
        "as the LoRA rows do, and their increments over LoRA #377 follow the measured ones: "
        "IA3 +0.73 GiB (measured +0.76), IA3 on all seven linears +3.69 (+2.96), LoHa +1.44 "
        "(+1.61: its dense fp32 delta weights, kept by F.linear), LoKr +1.17 (+1.25), VeRA "
        "-0.75 (-0.47), prefix tuning -0.91 and -1.33 (-0.87, -1.11: k and v repeated to the "
        "query heads, as transformers does under the mask the prefix brings). Prompt tuning "
        "(200 virtual tokens before each sequence) reads +2.7%: +1.13 GiB over LoRA where "
        "the runs differ by 2.43; the per-token terms are taken at the 768-token cap while "
        "the batches are mostly shorter, which shrinks LoRA's per-token copies but not the "
        "200 virtual tokens, a part of it. The other rows are PEFT methods not modelled "
        "(AdaLoRA, OFT/BOFT, p-tuning's prompt encoder, ...; #373 is block-diagonal LoRA)."),
    "Answer.AI": (
        "FSDP (and DDP) LoRA and QLoRA on two 24 GB cards, torch reserved peak. train.py "
        "keeps the model's output, and with it the fp32 logits that transformers' Llama of "
        "early 2024 returned (logits.float()), alive through loss.backward(): 4 bytes per "
        "token and vocabulary entry beside the loss's working set (0.24 GiB per 2048 "
        "tokens), now counted (held_logits). The adapters are bf16: peft of March 2024 "
        "(before v0.12) moved each adapter to its base layer's dtype, and FSDP with "
        "use_orig_params=False flattens each unit in one dtype (train.py); now counted "
        "(lora_adapter_dtype half: bf16 adapter weights, gradients and AdamW moments, no fp32 "
        "copy of their inputs). With them the estimate's live tensors meet the allocated "
        "peaks the benchmark's text gives for the LoRA rows at 1 x 512 and 1 x 2048 (#410, "
        "#411: 8.28 and 9.16 GiB) within 3%, where peft's fp32 adapters read 7-9% above "
        "(tests/test_answerai_allocated.py). So what the reserved figures miss is the "
        "allocator's part: reserved - allocated is 1.96 GiB at 1 x 512 and 1.06 GiB at "
        "1 x 2048 there, against the flat 5% reserve's 0.4-0.5 GiB; the fp32 adapters' extra "
        "bytes had stood in for it (8 of 20 rows within 10% with them, <TALLY> now). The "
        "smallest row (#408, QLoRA 1 x 512) reads more above the estimate than the next "
        "(#409, four times the tokens), which measures only 0.2 GiB more: a fixed part that "
        "the estimate's reserved figure lacks. The benchmark's own text gives it: 3.72 GiB "
        "reserved after the model is wrapped (reserved_after_model_wrap, before any step), "
        "against 2.1 GiB of weights and adapters in the estimate; train.py resets only the "
        "peak statistics after loading (torch.cuda.reset_peak_memory_stats), so the blocks "
        "that loading, quantising and FSDP's flattening left in the allocator's cache stay in "
        "the reserved peak. That path is now replayed (load_path fsdp-flatten, "
        "estimate/load_cache.py, read from train.py @ 05ed9f2 and torch 2.1-2.3's FSDP init): "
        "rank 0 loads to the CPU (QLoRA quantised on the GPU, then empty_cache: only the "
        "quantisation state stays), and FSDP, unit by unit (each adapter's A and B, each "
        "layer, the root), copies the parameters to the GPU, broadcasts them, flattens them, "
        "cuts this rank's shard and only then frees the copies and the flat parameter. The "
        "replay reads 3.25 GiB reserved after the wrap (2.0 GiB of it live) against the 3.72 "
        "measured (-13%; held out, no constant set from it; tests/test_load_cache.py): the "
        "root unit's copies (embeddings and head, a 0.5 GiB flat parameter) and the last "
        "layer's stay cached. The step then runs on that cache (its activations and loss "
        "tensors reuse cached blocks where they fit; FSDP's gathers do not: they are "
        "allocated on FSDP's unshard stream, and the caching allocator gives a stream only "
        "blocks of its own segments). Where the estimate had added to the flat 5% reserve "
        "what the wrap's cache adds to one step's peak (0 to 1.1 GiB, noisy: 0 at 1 x 2048), "
        "the reserve of these rows, as of every fixed-length run on one GPU's whole model, "
        "now comes from a replay of three training steps after the wrap "
        "(estimate/step_replay.py, issue 14): the checkpointed layer inputs, each layer's "
        "tensors made and freed one at a time in the no-grad forward, the loss's working "
        "set, backward layer by layer with the gradients made per parameter as autograd "
        "reaches them, AdamW's moments made lazily in the first optimizer step (so they "
        "land in blocks the activations freed), the foreach temporaries and zero_grad, all "
        "through the caching allocator's rules; the reserve is its reserved peak less its "
        "allocated peak, in place of the flat share. Its sequence is held to a real tiny "
        "Llama's CPU step recorded at the dispatcher (tests/test_step_replay.py: the same "
        "gradients and moments, the reserved peak of both sequences within 10%). At 1 x 512 "
        "and 1 x 2048 (#410, #411) it gives 1.57 and 0.69 GiB of the 1.96 and 1.06 GiB "
        "stated (the load path's difference with the flat 5% gave 1.49 and 0.47), and the "
        "larger micro-batches now read 3-13% low where they read 7-17% low: the loss's "
        "vocabulary-wide tensors and the recomputed layer take segments of their own that "
        "the next step's smaller tensors split. No constant was set from these rows. What "
        "remains at small micro-batches (#408: 12% low) is not found; candidates, not "
        "replayed: the loading threads' interleaving, bitsandbytes' dequantised weight per "
        "matmul, the per-layer gathers and frees, NCCL's buffers. The CPU-offload rows keep "
        "the default load path (FSDP moves "
        "their shards back to the host: not modelled). "
        "The FSDP CPU-offload rows (#420-#431, offload optimizer+params: the GPU holds only "
        "the gathered layers, their gradients and the activations) have the estimate 10-30% "
        "below them (Llama-2-70B, #420 and #429, 30%; LoRA at 10 x 2048, #423, 24%); their "
        "speed is within 11% (#420 on the 3090s, 28% "
        "fast, is power-limited to 280 W)."),
    "LLaMA-Factory (via Unsloth)": (
        "The LoRA rows are within 2% (#451, Unsloth + FA2, now as Unsloth's stack: 6% "
        "above as transformers' path, 2% below as Unsloth's). The HF QLoRA row (#452) reads 9 "
        "GB; the estimate is "
        "22% below it: LLaMA-Factory of December 2023 (79f301a2, model/utils.py "
        "prepare_model_for_training) runs no peft prepare_model_for_kbit_training (no fp32 "
        "upcast: its layernorm upcast is off by default; it casts the LM head's output to "
        "fp32), so the estimate keeps the unquantised weights in bf16, and with "
        "checkpointing on (assumed, LLaMA-Factory's default) what bitsandbytes keeps per "
        "layer weighs for the recomputed layer only; the remaining 1.9 GiB is not "
        "explained. The Unsloth rows (#451, #453) run Unsloth 2023.12 as LLaMA-Factory "
        "6faf9c35a called it (kernels unsloth, estimate/unsloth.py: checkpoints on the GPU, "
        "LoRA dropout 0, Unsloth's Triton RMSNorm and cross-entropy on bf16 logits; with q,v "
        "targets no LoRA group is whole, so the adapters run as peft's): the QLoRA row "
        "(#453, 7 GB) reads 9% low. Figures are whole GB of unstated type, quoted second-hand; LoRA targets "
        "and checkpointing are assumed (see the setup text)."),
    "axolotl": (
        "One row has a catalog model (Llama-2-7B QLoRA, \"about 17 GB\"); the estimate is "
        "17% lower (a third before): axolotl calls peft's prepare_model_for_kbit_training, "
        "so the residual stream, the checkpointed layer inputs (8192 tokens x 32 layers x "
        "4096 x 4 bytes) and each 4-bit linear's input copy and MLP outputs are fp32 or "
        "kept, now counted. The figure is approximate and of unstated type, and the config was "
        "read at HEAD, later than the figure. The gpt-oss-20b rows (#491 LoRA on a 48 GB "
        "GPU, #493 and #494 full with FSDP2, 'device_mem_reserved' per the README) load "
        "the Hub's MXFP4 experts with Mxfp4Config(dequantize=True) (a bf16 base, as "
        "counted) and the CutCrossEntropyPlugin (listed in their notes), now the cut-ce "
        "loss: the logits never materialise (9.2 GiB of fp32 logits at the loss before). "
        "The LoRA row is within 3% (was 16% above, and refused on its card: now it fits, "
        "43.3 of 44.7 GiB). The full rows, within 7% before only because the fp32 logits "
        "stood in for something else, now have the estimate 12% (#494, 4 GPUs) and 30% (#493, 8 GPUs) "
        "below the measured figure: from 4 to 8 GPUs the measured peak falls by 10 GiB, 4 bytes per "
        "parameter sharded, which leaves about 26 GiB per GPU that does not shrink with the "
        "GPU count, against 10 GiB in the estimate (gathered layers, activations); the "
        "source is not found (FSDP2's gathers of the 32-expert layers, the MXFP4 "
        "dequantisation on load, torchao's 8-bit AdamW are candidates, not checked). These "
        "configs also set activation_offloading (TRL's OffloadActivations), not modelled: "
        "the checkpointed layer inputs (0.5 GiB) stay counted on the GPU. The other rows "
        "are models outside the catalog. The 8-bit bases (load_in_8bit: bitsandbytes "
        "LLM.int8, Linear8bitLt and MatMul8bitLt read at 0.49.1, axolotl's pin) are now "
        "modelled (base_quant int8-bnb, estimate/bnb_int8.py: int8 weights and fp32 row "
        "scales, each linear's uncast input kept for backward, the weight dequantised in "
        "backward only); of those rows Llama-2-7B's (#517) and Llama-3-8B's (#514, "
        "NousResearch's re-upload) have their model in the catalog. #514 ('LoRA - Single GPU "
        "@ 11GB VRAM') reads three times the figure: its config (lora-8b.yml read at the "
        "table's commit: micro-batch 2, sample packing to 4,096 tokens, 8-bit base) holds "
        "about 9 GB of weights (int8 linears, bf16 embedding and LM head) and, at 8,192 tokens "
        "a micro-batch, 2.1 GB of bf16 logits alone (the estimate counts transformers' fp32 "
        "loss, 12 bytes a logit, 12.6 GB): no reading of that config fits 11 GB, so the "
        "figure was taken on another setup (the README says the config may have changed "
        "since); it is compared as stated, a miss."),
    "Qwen": (
        "Qwen-1 is in the catalog (read from modeling_qwen.py, held to a hand count), the "
        "LoRA (emb) rows train a copy of the embedding and LM head (peft modules_to_save: "
        "weights, gradients and AdamW moments in bf16 beside the frozen originals), and the "
        "Int4 rows run on a GPTQ base (4-bit weights, fp16 scales and zeros per 128 rows, "
        "g_idx; peft does not upcast the rest to fp32 for GPTQ). The LoRA and LoRA (emb) rows "
        "ran peft of late 2023 (before v0.12), which moved each adapter to its base layer's "
        "dtype (tuners/lora/layer.py update_layer, v0.6.0-v0.11.1): bf16 adapters, gradients "
        "and AdamW moments, no fp32 copy of the adapters' inputs (lora_adapter_dtype half, "
        "held to a real tiny model with peft's autocast_adapter_dtype=False: "
        "tests/test_lora_adapter_dtype.py); peft's fp32 adapters, counted before, had 8 bytes "
        "per adapter parameter more (0.4 GiB for 1.8B, 1.1 for 7B, 1.7 for 14B). The Int4 "
        "rows run under DeepSpeed ZeRO-2 in fp16 (finetune_qlora_single_gpu.sh) and the full "
        "rows under finetune_ds.sh: DeepSpeed casts the model and runs no autocast, and "
        "Qwen-1's loss is CrossEntropyLoss on the half-precision logits (no .float()), so "
        "those rows take the half loss kernel (6 bytes per vocabulary element at the start "
        "of backward, not 12; counted on real CPU tensors); its engine keeps fp32 masters of "
        "the fp16 adapters, the fp32 adapters' byte count, so they keep it. DeepSpeed ZeRO-2's "
        "gradient buckets are counted (ds_config_zero2.json: reduce_bucket_size 2e8 with "
        "overlap_comm and contiguous_gradients, two fp16 buffers at every backward, 0.75 "
        "GiB), and auto-gptq's training path (exllama disabled: qlinear_cuda_old.py) keeps "
        "the recomputed layer's dequantised fp16 weights for backward. The README does not "
        "say what 'memory (GB)' read. Over its rows the figure sits above the estimate's "
        "reserved bytes (live tensors and the allocator reserve) by a part that does not grow "
        "with the model: mostly 1.2-2.9 GiB for 1.8B, 7B, 14B and 72B alike at 256-2048 "
        "tokens, LoRA, LoRA (emb) and Int4 (0.9-4.2 GiB at the extremes), where a missing tensor or "
        "a proportional reserve would grow with the model (72B Int4's 52 GiB of tensors "
        "against 1.8B Int4's 3.5). That is the shape of a device-level reading (nvidia-smi: "
        "the CUDA context with the modules it loaded, library handles and workspaces, which "
        "torch's allocator does not count), so the rows are compared as one: reserved + what "
        "a device-level reading holds beyond it for the stack the README states "
        "(estimate/device_overhead.py, a pure function of the stack; each figure's source in "
        "data/device_overhead_sources.csv, none from a fine-tuning row). For CUDA 11.8 and "
        "PyTorch 2.0: lazy module loading (torch sets CUDA_MODULE_LOADING=LAZY from 1.13, "
        "pytorch#85692/#86509; the runtime has it from 11.7, NVIDIA's programming guide 4.7), "
        "so the context is the lazy figure, 0.5 GiB (published lazy contexts 0.27-0.42 GiB "
        "before a step's kernels load: pytorch#86509, #107667, #109888, unsloth-zoo#1053), "
        "flash-attn's, auto-gptq's and DeepSpeed's kernels loading as called (assumed built "
        "with CUDA 11.7+; one built with an older toolkit loads eagerly, and no size was "
        "found for theirs); cuBLAS's workspace comes from "
        "the caching allocator in torch 2.0 (pytorch#83461), so none outside it; DeepSpeed's "
        "NCCL group on one GPU (the Int4 and full rows) connects no channels (NCCL 2.14.3 "
        "init.cc skips the ring and tree connections for one rank), so no buffers; no cuDNN "
        "operator runs in these steps. That is the 0.5 GiB the estimator assumed before: the "
        "sources do not explain the rest of the gap, about 0.7-2.4 GiB, and it is left. One "
        "part of the stack the README does not state is the driver: an 11.8 runtime runs on "
        "R450+ drivers (minor version compatibility), and one older than CUDA 11.7's R515 has "
        "no lazy loading. Loading eagerly, the published eager contexts are 815 MiB on an "
        "A100 (pytorch#85017, nvidia-smi, torch's 2022 master) and 1343 MiB on a V100 (the "
        "transformers guide): with them the rows would read <EAGER_A100> and <EAGER_V100>. "
        "Not taken: nothing read says Qwen's driver was that old (a what-if, "
        "`eager_context_sensitivity`). A fixed "
        "part fitted on these rows (the median gap over the twelve Qwen-7B rows at 256-2048 "
        "tokens, 1.77 GiB) brought 51 of the other 54 within 10%; it was tried and not kept, "
        "since it would correct the comparison for one source, not the estimate a user gets "
        "(the estimator's context assumption would need rows of other sources to set it). "
        "Now: <TALLY> (32 of 66 compared with reserved). Beyond the context: full "
        "fine-tuning of 1.8B on one GPU "
        "(finetune_ds.sh assumed: DeepSpeed ZeRO-3, fp32 master weights and moments) reads "
        "4.6 GiB above reserved at 256-2048 tokens and 8 GiB at 4096-8192 (#123, #124: 14% "
        "low). DeepSpeed's fp32 gradient accumulation is not it: with ZeRO on, the engine "
        "accumulates in the model's dtype (engine.py get_data_types, v0.10.0-v0.12.3), and "
        "ZeRO-3's gradient partitions take it (stage3.py grad_partitions_flat_buffer, bf16). "
        "What ZeRO-3 adds at its step is a flat fp32 copy of one sub-group's gradients "
        "(sub_group_size 1e9: 4 bytes per element, after a 2-byte flattened copy; 5.7 GiB for "
        "1.8B's first sub-group) with DeepSpeed's FusedAdam (no temporaries), where the "
        "estimate counts torch's foreach temporaries (4 bytes per parameter, 6.8 GiB): about "
        "the same. 1.8B LoRA at 4096 tokens (#105) reads 10% low. The allocator reserve of "
        "these rows (fixed lengths, one GPU) now comes from the step replay "
        "(estimate/step_replay.py, issue 14; see Answer.AI) in place of the flat 5%: 0.1-10 "
        "GiB where it was 0.2-3.4. It is larger where the loss's vocabulary-wide tensors "
        "(151,936 entries) are large beside the rest (1.8B full at 8192 tokens, #124: 10.0 "
        "GiB, from 17% low to 2% high; 1.8B QLoRA at 8192, #118, from 18% to 4% low) and "
        "smaller at short sequences of large models (72B Int4 at 256 tokens, #176: 0.3 GiB "
        "where 5% was 2.6; 3% low to 7% low). It is not monotone in the sequence length: "
        "which cached blocks fit a request depends on its size (7B LoRA: 0.84 GiB at 2048 "
        "tokens, 0.37 at 4096, #110, #111)."),
    "ms-swift": (
        "The Qwen-1 chat models are compared (qwen-chat = Qwen-1's shape). Their LoRA "
        "adapters are bf16 (ms-swift pins peft>=0.11,<0.12, requirements/framework.txt, whose "
        "adapters take the base layer's dtype, and its lora_dtype AUTO leaves that: "
        "lora_adapter_dtype half), QLoRA's fp32 (a bitsandbytes or GPTQ layer stores integers, "
        "and peft cast only to a float dtype). Its bitsandbytes QLoRA rows run without peft's "
        "k-bit preparation (swift/llm/sft.py at 97e4d198b and ec63f250 loads the 4-bit model "
        "and calls its own prepare_model, never prepare_model_for_kbit_training): no fp32 "
        "upcast of the residual stream and the unquantised weights (7B #185 +16% -> +5%, 14B "
        "#189 -4% -> -15%, 72B #193 further below). The figure is "
        "torch.cuda.max_memory_reserved over a run of variable-length samples "
        "(cls-fudan-news-zh, 3234 +- 2548 tokens; truncation_strategy 'delete' drops those "
        "above the maximum length). PyTorch's caching allocator keeps the freed blocks of every "
        "past shape and frees them only when cudaMalloc fails, so reserved memory grows past "
        "the live tensors while the card has room. The estimate now replays the allocator "
        "(estimate/fragmentation.py, rules of CUDACachingAllocator.cpp: best fit, splitting, "
        "exact-size segments from 10 MiB, the cache emptied under pressure) over the run's "
        "micro-batches: lengths drawn from a log-normal of the stated mean and spread, capped "
        "and dropped as the run did; the run's length from ms-swift's run_single.py (the whole "
        "4000-sample dataset up to 2048 tokens, 1000 samples above, less those dropped: 42 "
        "micro-batches at 512, 382 at 1024, 1512 at 2048, 754 at 4096, 954 at 8192); capped by "
        "the A100's 80 GB. No constant was set from these rows (all are held out); the "
        "log-normal shape and the flat 5% reserve added for what the replay does not see are "
        "assumptions. Within 10%: <TALLY> (10 before the replay, median error -30%). At 512 "
        "and 1024 tokens (short runs) the LoRA rows of 1.8B, 7B and 14B are within 0-7% (4-48% "
        "low before); at 2048 14B LoRA (+8.5%) and the QLoRA and GPTQ rows of 14B and 72B "
        "within 10% (14-40% low before); full fine-tuning of 7B stays at the card. Most other "
        "rows at 2048 tokens and above read high (7B LoRA +23% at 2048, +64% at 8192; 1.8B "
        "full fine-tuning +104% at 8192). Issue 14 looked for why, in the sources. "
        "The allocator, rule by rule (c10/cuda/CUDACachingAllocator.cpp read at "
        "pytorch@001074d2, its default path: no expandable segments, max_split_size or "
        "garbage-collection threshold): 512-byte rounding; requests up to 1 MiB in 2 MiB "
        "segments, 1-10 MiB in 20 MiB ones, larger ones a segment of their size rounded to "
        "2 MiB; best fit by (stream, size, address); a block split when more than 1 MiB (large "
        "pool) is left; merged with free neighbours on free; release_available_cached_blocks "
        "frees nothing without max_split_size, and the wholly free segments go back only when "
        "cudaMalloc fails; max_memory_reserved is the peak sum of segments. The replay follows "
        "each rule (best-fit ties it breaks by segment order, not address: no effect on the "
        "sum); none is wrong. ms-swift's run (run_single.py and swift/llm/sft.py @ ec63f250; "
        "the tables of 2024-01-02, 97e4d198b): samples encoded up front (lazy_tokenize off), "
        "those above max_length dropped, shuffled by transformers' RandomSampler "
        "(train_sampler_random; transformers' Seq2SeqTrainer does not read sortish_sampler), "
        "padded to the longest of the micro-batch, no evaluation (dataset_test_ratio 0), no "
        "saving, no empty_cache, max_memory_reserved read after train(); its seeds are fixed "
        "(global_seed 42), so every model at one maximum length ran the same order: the "
        "measured figure less the estimate's live tensors is the same for 1.8B, 7B and 14B "
        "LoRA at one length (9.2, 9.3 and 9.4 GiB at 2048). Qwen-1's loss (modeling_qwen.py: "
        "CrossEntropyLoss on the shifted bf16 logits) runs under accelerate's autocast, and "
        "log_softmax casts bf16 to fp32 (SoftMax.cpp keeps the half-to-float kernel for fp16 "
        "only): three fp32 vocabulary-wide tensors are live at its backward, as the replay "
        "costs them. What sets the replayed figure: each micro-batch longer than all before "
        "(a record) takes three new fp32 vocabulary-wide segments (1.16 GiB each at 2048 "
        "tokens) and those of earlier records stay cached (tests/test_fragmentation_records.py)"
        "; the count of records is set by the order. Over 8 orders "
        "(scripts/gpuhours_dev/validation/swift_orders.py; seeds 0-7) the replay of 7B LoRA "
        "reads 16.9-19.9 GiB at 512 tokens (measured 18.0), 20.1-29.2 at 1024 (21.7), "
        "27.8-65.2 at 2048 (27.7; seed 0 34.2), 43.2-79.2 at 4096 (35.3) and 75.8-79.5 at "
        "8192 (48.4): the LoRA rows' measurements of 1.8B, 7B and 14B sit within the spread, "
        "at or below its median, at 512 and 1024 tokens, at or just below its lowest at 2048, "
        "and below all eight at 4096 and 8192; 1.8B full fine-tuning within the spread at 512 "
        "and 2048, "
        "below it at 1024 and 4096. The measured figures "
        "exceed the live tensors by 8-9 such tensors at the maximum length (2.6, 5.3-5.8 and "
        "9.2-9.4 GiB at 512, 1024 and 2048 tokens) whatever the run's length (42 to 1512 "
        "micro-batches), where a random order's records grow with it: the real runs took "
        "fewer new segments than the allocator's rules give a random order of log-normal "
        "lengths. Why is not found: the real lengths and order are not published, and "
        "nothing in the allocator, ms-swift's or Qwen-1's code read here bounds the new "
        "segments (no GPU here to trace a run). Full fine-tuning: the optimizer step's "
        "foreach temporaries have their parameters' shapes (torch/optim/adamw.py "
        "_multi_tensor_adamw), and those of the token embedding and LM head (151,936 x 2048 x "
        "2 bytes, 0.58 GiB for 1.8B) hold later loss tensors of up to 1024 tokens: 1.8B full "
        "fine-tuning at 512 tokens from +8.2% to +0.9% (the real runs at 512 and 1024 reserve only 1.1 "
        "and 1.5 GiB above their live tensors, LoRA 2.6 and 5.4 on the same orders); at 1024 "
        "still +12% (the records of the first 16 micro-batches come before the first step, "
        "whose own vocabulary-sized blocks are new segments). "
        "The "
        "tuners table (#284-#304, scripts/benchmark/config/tuner.json @ cdb169b78: ms-agent "
        "with train_dataset_mix_ratio 2.0 of the default mix set ms-bench, max_length 2048, "
        "truncation_strategy 'delete', use_loss_scale, eval every 2000 steps at eval batch 1) "
        "read 30-45% low on the flat reserve. Its lengths are now sourced: ms-swift's dataset "
        "table (docs/source_en/LLM/Supported-models-datasets.md @ 254122ca1, counted with "
        "qwen-7b-chat's tokenizer and template) gives ms-agent 647.7 +- 217.1 tokens and "
        "ms-bench 345.0 +- 441.3; one ms-agent to two ms-bench samples combine to 446 +- 407 "
        "(moments combined, then one log-normal: an assumption, the mix has two modes). "
        "Check on data not used: that log-normal drops 0.95% of samples above 2048, the run "
        "dropped 1.75% (89,100 samples before encoding, 87,543 in the speed cell; the no-mix "
        "row 29,698 of 29,700): the real tail is heavier. The rows without packing now replay "
        "the allocator over 512 of the run's 175,086 micro-batches (87,543 samples x 2 "
        "epochs), the estimate's own bound on replay time (MAX_REPLAY_LAYER_PASSES / 32 "
        "layers): LoRA #295-#299 -39.5% -> -28.0%, DoRA #284 -39.6% -> -28.0%, LoRA no-mix "
        "#297 -36.5% -> -23.4%, full fine-tuning #292/#293 +3.2%/+1.8% -> +8.2%/+6.2% (no "
        "constant set; all held out). The replay grows with the micro-batches replayed (LoRA: "
        "23.3, 36.3 and 46.6 GiB at 512, 2048 and 8192; measured 32.35), so a replay of the "
        "whole run would read far high, as the cls-fudan-news rows' random orders do at 2048. "
        "And the packing rows (#302-#304; swift/llm/utils/utils.py ConstantLengthDataset @ "
        "2386b9afa cuts the packed stream into max_length pieces: fixed 2048 tokens but each "
        "buffer's last piece) keep the flat reserve and still read 30-45% low: #304 reserves "
        "9.4 GiB above its live tensors at a fixed length, as the cls-fudan-news runs do at "
        "2048 (9.2-9.4 GiB) whatever their length spread. That excess, about 32 bytes per "
        "vocabulary entry per token (eight fp32 vocabulary-wide tensors at 2048), is the "
        "mechanism still left out; not found in ms-swift's (compute_scaled_loss under "
        "use_loss_scale: a boolean-indexed copy of the bf16 logits, then CrossEntropyLoss in "
        "fp32 under autocast) or Qwen-1's code read here, and no GPU to trace it. One lead "
        "not modelled anywhere: accelerate's prepare_model under bf16 wraps the forward in "
        "convert_outputs_to_fp32, so the Trainer's loss sees fp32 logits (one to two more "
        "fp32 vocabulary-wide tensors at the loss, not eight; a change for every Trainer "
        "row, left to the estimate's loss model). Its Unsloth "
        "row (#305, Llama 3 8B 4-bit through "
        "Unsloth's get_peft_model at ms-swift c23b853c7, which passes use_gradient_"
        "checkpointing=True and its lora_dropout_p 0.05, so Unsloth 4a885399 patches no LoRA "
        "group: estimate/unsloth.py) reads 69% low (6.7 of 21.7 GiB reserved), further "
        "below than the table's others: what ms-swift's run adds (evaluation, lengths) is not "
        "stated, and no Unsloth term explains 15 GiB. The 72B rows on 2 GPUs (layout not "
        "stated), GPTQ int8 "
        "bases, the other PEFT methods and the models outside the catalog (chatglm3, "
        "baichuan2, openbuddy) are not compared. Speeds are samples/s of variable-length "
        "samples, not comparable without token counts. The yi-6b-chat and yi-34b-chat rows "
        "(#219-#228), expressible since issue 14 (the catalog's Yi-6B and Yi-34B; held out), "
        "run swift's DEFAULT targets for their model type, LoRATM.llama2 (q_proj, k_proj, "
        "v_proj; swift/llm/utils/model.py @ ec63f250), modelled as q, k, v and o: 8 of the 9 "
        "compared within 10% (Yi-34B +1.0% to +3.3%), yi-6b-chat at 4096 tokens (#222) "
        "14.7% below."),
    "Unsloth docs (capacity)": (
        "Capacity limits, not peaks: for the HF + FA2 rows (QLoRA r32 on every linear "
        "layer, batch 1, the longest context that fit in 8-80 GB), with peft's fp32 upcast "
        "counted in the activations (an HF stack with peft assumed: fp32 layer inputs under "
        "checkpointing, 7 GiB at 28,454 tokens, and each 4-bit linear's input copy and fp32 "
        "MLP outputs for the recomputed layer). The live tensors at the published context "
        "are 85-97% of the card's memory (Llama 3.3 70B at 6,916 tokens, #471: 72.4 of 74.5 "
        "GiB). The allocator reserve comes from the step replay (estimate/step_replay.py, "
        "issue 14) with the card's memory as its bound: at these contexts the loss's "
        "vocabulary-wide tensors (6.8 and 13.6 GiB each at 28,454 tokens) split the "
        "segments of one another, and in six of the seven rows the replay runs out of "
        "memory even with its cache emptied, so the reserve is taken as what the card "
        "leaves and the device total is the card's memory (fits, at the edge; unbounded, "
        "the replay's reserve would refuse six of them). Whether such a run fails is not "
        "modelled; these rows ran, so the replay's layout of the loss tensors is, here, "
        "tighter than the real one, or the real stack had room the estimate does not see. The "
        "stack of the HF baseline is not stated (peft's k-bit preparation, as TRL and "
        "axolotl call it, assumed) nor its checkpointing (on assumed, the smaller "
        "estimate). The Unsloth rows run Unsloth of December 2024 (kernels unsloth, "
        "estimate/unsloth.py, read at unsloth d9ed4bef and unsloth-zoo 9c643b66): its LoRA "
        "Functions on every group (X, gate and up outputs kept; one 4-bit weight dequantised "
        "at a time), Triton RMSNorm, the block inputs offloaded to host memory "
        "(checkpoint_offload: one on the GPU) and Cut Cross-Entropy above 1,024 tokens. At "
        "the published context the estimate is 0-19% below the card for Llama 3.1 8B (the "
        "longer the context, the further below: 8 GB at the card, 80 GB at 342,733 tokens "
        "19% below; the backward temporaries of attention and of the LoRA Functions other "
        "than the MLP's, which grow with the tokens, are not counted) and 6% below for Llama "
        "3.3 70B on 80 GB; at 48 GB (12,106 tokens) it is 2.5% above (refused): 38.4 GiB of "
        "4-bit weights and 3.1 GiB of fp32 AdamW moments of the r32 adapters (the optimizer "
        "is not stated: torch AdamW assumed, as for the HF rows; Unsloth's notebooks use "
        "adamw_8bit, 2.3 GiB less) on a card read as 48 x 10^9 bytes (44.7 GiB; an RTX "
        "A6000, sold as 48 GB, has 49,140 MiB: on it the estimate fits)."),
}
THROUGHPUT_REMAINS: dict[str, str] = {
    "Answer.AI": (
        "FSDP over PCIe between consumer cards without NVLink (2x RTX 3090/4090). GeForce cards "
        "cannot address each other's memory, so NCCL stages every transfer through host memory: "
        "the catalog now says so (peer_to_peer false) with the host-staged bandwidth measured by "
        "p2pBandwidthLatencyTest (RTX 3090 16.5 GB/s both ways, RTX 4090 30 GB/s, on PCIe 4.0 "
        "x16 workstation boards; sources in gpus.yaml), and FSDP's gathers hide behind at most "
        "one layer's compute each (parallel.fsdp_exposed_s). No constant was set from these "
        "rows. Two mechanisms of this rig and this script, read in the code and the source "
        "(issue 14, 2026-11-24). (1) train.py (@ 05ed9f2, the same FSDP call through the "
        "Feb-Mar 2024 runs) wraps peft's model with a lambda policy on every leaf with a "
        "trainable weight, so each lora_A and lora_B is an FSDP unit of its own inside its "
        "layer's unit, under limit_all_gathers=True. FSDP1's rate limiter keeps one queue of "
        "freed-weights events for all units and makes every unshard wait on the host for the "
        "oldest once two are queued: with adapter units queued, layer i+1's gather waits for "
        "layer i's up_proj lora_B to be freed, so it runs beside down_proj only, and in "
        "backward the previous layer, prefetched from q_proj lora_A's pre-backward hook, "
        "waits for k_proj lora_A's free, beside k and q's input gradients only (seen on a real "
        "FSDP1 run on CPU, tests/test_fsdp_adapter_units.py; a layer-only wrap gathers a "
        "whole layer ahead there): fsdp_adapter_units, with the adapter units' own small "
        "collectives counted (parallel.fsdp_adapter_unit_windows, 0.22 of a Llama-2-7B "
        "layer's forward and 0.08 of its backward with recomputation). That took #409 and "
        "#414 within 20% (+27.7% -> +10.8%, +25.2% -> +13.5%) and #408, #410, #411 from "
        "+124%, +124%, +135% to +42%, +74%, +44%; the 4090 FSDP rows -12% -> -16% (#422, "
        "#429). (2) Against the DDP rows' rate per sequence (#416, #417: no weight "
        "gathering), FSDP on the 3090 rig costs +4.6, +4.3, +3.8 and +3.7 s per step for LoRA "
        "at 1 x 512 to 6 x 2048, and +1.7, +1.3, +1.0 and +1.2 s for QLoRA: about the bytes "
        "each GPU receives (13.5 GB bf16, about 4 GB NF4) at 3 GB/s, half the catalog's "
        "host-staged 16.5 GB/s both ways (8.25 each way, x 0.75 collective efficiency: 6.2), "
        "which was measured on x16 PCIe 4.0 slots. Answer.AI writes that this rig has 'an "
        "older motherboard and slow PCI lanes', and of the 4090 box that 'both GPUs have full "
        "PCIe v4 x16 lanes' (benchmarks_03_2024.md). Hardware.pcie_lanes scales a PCIe link "
        "(GPU to GPU and to the host) by lanes/16; the 3090 rig is mapped as x8 per card (two "
        "cards on a consumer CPU's 16 lanes; the rate of x16 PCIe 3.0 too), an assumption read "
        "from the source's words, not fitted: the lanes are not stated, and a chipset x4 slot "
        "would halve it again. With it every 3090 row is within 16% (#408 -6%, #410 -3%, "
        "#411 -7%, #409 -13%, #414 -9%, #415 -8%, #420 0%), all slow but #420. Without the "
        "lanes assumption Ampere is 77 of 91 held out, with it 80. "
        "peft's LoRA branch is now counted (estimate/lora_traffic.py; see "
        "Qwen): train.py's dropout 0.1 on each adapter's input, the scale and add, their "
        "backwards, in bf16 (lora_branch peft-half: FSDP's flat parameters hold one dtype "
        "and peft of early 2024 casts the adapters to the base weight's), 29 bytes per "
        "fan-in and 32 per fan-out element per token. That moves every row 5-11 points "
        "slower: the 3090 micro-batch 4-10 rows within 16% (#412-417), the A100-40GB 70B "
        "rows within 12% (#437-439, were +13..+21%), #440 from +64% to +45%, but the "
        "4090 rows, already slow, to -15..-24% (#421, #424, #430 misses) while the Ada GEMM "
        "efficiency was an assumption (0.70 of the catalog's 165 TFLOPS). It is now derived "
        "from user matmul microbenchmarks of four Ada products, 0.78 (no Ada row used; "
        "'GEMM efficiency per product' below), and the 4090 rows read -8..-19%, all within "
        "20% and all slow: fitted to the two NO_SHARD 4090 rows (#421, #424) the figure "
        "runs to the grid's bound (1.0), so the gap is not in the GEMM rate alone. The "
        "memory-bound work is "
        "the largest share on the 4090 (1008 GB/s against 165 TFLOPS, about 45% of #421's "
        "estimated step). The L2 cache is not the gap (checked, not adopted: "
        "`PYTHONPATH=src:scripts python -m gpuhours_dev.validation.l2_check`): with each "
        "read of a tensor the previous full-width operator of peft's branch wrote served "
        "free from L2 whenever the tensor fits in the whole cache (catalog l2_cache_mib: "
        "4090 72 MiB, A100 40, H100 50, NVIDIA's whitepapers), an upper bound, no Ada or "
        "Hopper row moves by 3 points (#421 -24% to -22%, #429 -18% to -17%, the others "
        "under 0.2; read 2026-11-24): a micro-batch's bf16 tensors are 64-256 MiB (4-12 x "
        "2048 tokens, 24,576 for #431, x 4096, 8192 for the 70B rows, x 2 bytes), only "
        "#421's within the cache, and the torchtune rows' branch is costed fused. Where "
        "the tensors do fit (the Qwen rows on an A100 at 256-4096 tokens) the bound "
        "moves them 0.4-5 points faster, away from the measurements "
        "(Ampere rows within 20%, the tuned ones included: 86 of 102 without it, 85 with "
        "it; the six host rows and the two "
        "flash-attn rows that set constants move 0.4-2.5 points: nothing refitted). "
        "Given the estimate's other parts, the consumer-card rows that gather no weights "
        "need their GEMMs at 0.97 and 0.99 (#417, #416: DDP on two RTX 3090s) and 1.08 and "
        "1.03 (#421, #424: NO_SHARD on two 4090s) of the cards' dense peaks, where the "
        "A100-40GB rows need 0.66-0.76: the non-GEMM time (memory-bound work, attention) is "
        "too long on both GeForce cards alike, whose L2s differ twelvefold (6 and 72 MiB), "
        "so it is not the cache. A candidate not modelled: in user microbenchmarks torch's "
        "bf16 matmuls on GeForce cards run at about the catalog's dense peak (RTX 4090: "
        "151-165 TFLOPS for square matrices of 2048-10240, torch 2.7, "
        "zzc0721/torch-performance-test-data issue 78, against 165.2; RTX 3080 Ti, a smaller "
        "GA102 card than the 3090: 68-78 TFLOPS, issues 132 and 144, against the 3090's "
        "71.2), where the estimate takes 0.68 and 0.78 of it (assumptions "
        "gemm_efficiency.ada and .ampere, set for other parts): the GEMM rate, not the "
        "cache, is the likelier gap; nothing set from them here (a what-if at 0.90 of the "
        "peak for the 3090 and 4090 only, 2026-11-24: Ada 11 of 11 within 20%, median "
        "-3.5%; the 3090 rows that gather weights, already fast, faster: #415 +12% to "
        "+24%, #420 +20% to +32%; the rule by each product's measured matmul rate, for "
        "every catalog GPU with data: 'GEMM efficiency per product' below, not adopted). "
        "With the adapter units and the rig's lanes modelled (read 2026-11-24) the 3090 rows "
        "are all slow (-3..-16%), as the 4090 rows are, and the per-product rule puts every "
        "GeForce fine-tuning row within 16% (3090 -5..+15%, 4090 -8..+4%; Ampere 80 of 91 "
        "held out either way, Ada 10 -> 11 of 12; the L40S row #522 -22% -> -29%): the "
        "3090 traffic that held the rule back is counted now. Not adopted here (it moves "
        "the training tables and RL rows too). Not resolved. The "
        "Llama-2-70B QLoRA row on 4 H100s is 45% fast. bitsandbytes' dequantisation is in "
        "the step: 4.64 bytes per "
        "weight per pass from its kernels (quant.nf4_dequant_bytes_per_weight) in forward, "
        "recompute and backward, 0.36 s of #440's 14.3 s predicted step, so it does not "
        "explain them. The measured speed of #440 is 34% of the H100's dense bf16 peak in "
        "hardware FLOPs, where the A100 rows reach 44-57%: the "
        "H100 row's missing time is in its matmul rate or in a setting the source does not "
        "state (gradient accumulation, the node); not resolved."),
    "Qwen": (
        "Tokens padded to the maximum length, 8 micro-batches of 1 per step on one A100, run by "
        "Qwen-1's own modelling code with flash-attn (estimate/host.py's flash-attn path: "
        "flash-attn's fused rotary and RMSNorm, flash_attn called directly, 5 linears and 5 "
        "adapters a layer, with finetune.py's LoRA dropout 0.05): 218 operators per layer per "
        "LoRA micro-batch with checkpointing, against 348 for transformers' eager layers with "
        "7 adapters. One host cost per operator, 21 us, was fitted to the host-bound 1.8B "
        "LoRA rows at 256-1024 tokens "
        "(#101-103, #107-109, within 13%, rms 7%; 49-52% slow before the host was counted; "
        "22 us before the LoRA branch below was counted). Held out: the 7B and 14B "
        "LoRA and LoRA (emb) rows at 256-512 tokens are within 19% (37-57% slow with the "
        "eager count at 32 us), and the 1.8B Int4 rows within 17% (auto-gptq's unpacking "
        "counted: 9 more operators per quantised linear). Where the GPU leads (1024-8192 "
        "tokens) the LoRA rows were 11-24% fast (#105 +24%, #128 +24%), and the 1.8B full "
        "rows (no adapters, the same host) ran faster than its LoRA rows at 4096 and 8192 "
        "tokens (2.8 s and 5.6 s a step against 3.3 s and 6.8 s) though full fine-tuning "
        "does a third more matmul work: the adapters' own work was missing. peft runs each "
        "adapter as separate eager operators (peft v0.5.0 tuners/lora.py Linear.forward; "
        "the same operators through v0.11): its dropout (finetune.py's 0.05), A and B, B's "
        "output scaled and added into the base output, and each of their backwards, every "
        "one a pass over a tensor as wide as the linear's input or output however small the "
        "rank. Qwen's README pins peft<0.8.0, whose adapters take the base's bf16 (no cast: "
        "lora_branch peft-half, with lora_adapter_dtype half for the memory): 29 bytes per "
        "fan-in and 32 per fan-out element per token with checkpointing "
        "(estimate/lora_traffic.py, counted operator by operator and on real CPU tensors by "
        "tests/test_lora_traffic.py; fp32 adapters under autocast would move 77 and 32). "
        "Counted, with nothing fitted to them, the 1.8B, 7B and 14B LoRA and LoRA (emb) rows "
        "from 1024 to 4096 tokens are within 12% (were +13..+24%), and the 8192-token rows "
        "within 6%. The attention rate there: the flash-attn package's (FlashAttention-2) "
        "rate on an A100, fitted to the 1.8B LoRA and LoRA (emb) rows at 8192 tokens (#106, "
        "#112, where attention is about 40% of the step; `python scripts/host_overhead.py "
        "flash`), is 0.27 of peak per causal FLOP (assumptions.FLASH_ATTN2_EFFICIENCY_BY_"
        "GENERATION; Dao 2023 reports its forward at 50-73%, the backward lower), next to the "
        "0.26 of ATTENTION_EFFICIENCY_RATIO x the GEMM efficiency it replaces (set on "
        "llm-foundry's Triton kernel): held out, the flash-attn rows are 61 of 70 within 20% "
        "and 44 within 10% either way, so the fit adds nothing the old rate lacked (it was "
        "0.35 while these rows' adapters were costed in fp32, the casts then standing in for "
        "kernel time). "
        "The Int4 and 72B rows run under DeepSpeed, which casts "
        "the adapters to the model's half precision (no cast; lora_branch peft-half) and "
        "moved by 0-9 points. The Int4 (GPTQ) rows run auto-gptq's training path "
        "(Qwen's finetune.py loads them with exllama disabled: qlinear_cuda_old.py of "
        "auto-gptq 0.4.2, the release its README pairs with torch 2.0), which dequantises "
        "each weight with five PyTorch operators, each a full-size intermediate: the int32 "
        "shift of the packed words (0.5 byte read, 4 written per weight), the cast to int8 "
        "(4, 1), the mask (1, 1), the zero point subtracted (1, 1), the fp16 scales' product "
        "(1, 2): 16.5 bytes per weight, in forward and in the recomputed forward (autograd "
        "keeps the fp16 weight for backward), and each matmul reads the 2 bytes back "
        "(estimate/quant.py GPTQ_DEQUANT_STEPS; counted on real CPU tensors by "
        "tests/test_gptq_dequant_time.py). They were priced like bitsandbytes' one kernel "
        "(read 4 bits, write 2 bytes), up to 160% fast. PyTorch's elementwise kernels move "
        "1-byte elements at about half the streaming rate (4 per thread access; "
        "pytorch/pytorch#174553: int8 add_scalar 1.9x a clone of the same bytes), so the "
        "int8 traffic counts 2 bytes per element (assumptions.ONE_BYTE_ELEMENTWISE_COST; "
        "22.5 bytes per dequantisation). All held out, nothing fitted: 1.8B within 17%, 7B "
        "within 17%, 14B within 14%, 72B 3-21% fast (#176 at 256 tokens 21%); at the plain "
        "16.5 bytes the 72B rows are 5-47% fast and 14B 2-26%. The 1-byte rate is "
        "B200's with a recent torch, not measured on an A100 with torch 2.0: the one "
        "assumption this rests on. "
        "DeepSpeed's ZeRO-3 engine runs the full rows (finetune_ds.sh passes "
        "ds_config_zero3.json, on one GPU too) and the 72B LoRA rows: it hooks every "
        "submodule and fetches and releases its parameters around each forward, recomputed "
        "forward and backward of it (deepspeed v0.12.3 parameter_offload.py), Python on the "
        "host (on one GPU nothing is gathered). The measured 1.8B full step holds at 2.1-2.2 s "
        "from 256 to 1024 tokens, twice the LoRA step on the same host; with the modules "
        "counted (estimate/host.py zero3_hooked_modules: 269 for 1.8B) one cost per module "
        "fetch and release, 11.5 operators at 21 us, was fitted to #119-121 (they were 159-267% "
        "fast; now within 9%). Held out: 7B full on 2 GPUs (#143-145) +27%, +17%, +8% (were "
        "+67..+226%); 72B LoRA on 4 GPUs (#170-175) -3..+12% (were +2..+126%); 1.8B full at "
        "2048 -10% (was +66%), but at 4096 and 8192 -22% and -15% (were +1% and -15%): where "
        "the GPU leads, the host and GPU overlap rule still adds part of the hooks' time. "
        "The 7B multi-node LoRA rows (2 x 2 GPUs, ZeRO-2 assumed from finetune_lora_ds.sh) "
        "are 52-101% fast: the stage is not stated; ZeRO-2 has no module hooks, and ZeRO-3's "
        "would explain part of it (not assumed). Their step costs 1.8 times the single-GPU "
        "7B LoRA step per token at every length from 1024 to 8192 tokens (+2 s per 1024 "
        "tokens), as if each GPU ran two sequences a micro-batch (finetune_lora_ds.sh "
        "passes --per_device_train_batch_size 2; the README says 1 'uniformly'): not "
        "assumed."),
    "torchtune": (
        "All compared rows but #331 ran with torch.compile, now modelled (issue 14, "
        "estimate/compiled.py; no figure set from these rows): the layers' elementwise work "
        "is costed as Inductor's fused kernels, each reading its inputs and writing its "
        "outputs once (a count: 330 kB per token and layer for Llama 3.2 3B in bf16 with "
        "torchtune's repeated k and v, where eager is costed as 4 passes over the saved "
        "tensors, 582 kB), the compiled cross-entropy's logit traffic as 8 bytes per logit "
        "(bf16 chunks) or 26 (fp32 logits), and the LoRA branch fused; k and v are repeated "
        "to the query heads (kv_repeated, torchtune's attention) on every torchtune row. The "
        "Llama 3.2 3B full rows on an A100: #331 (eager) +8.8% -> +8.3%, the compiled rows "
        "from -14.5..-16.2% to -11.8..-13.2% (#332-#334). The measured gain of compile is "
        "27% (#331 -> #332); the estimate's is 3.6%: in it the elementwise work is 9% of the "
        "eager step (0.101 of 1.07 s) and the exposed host time 0.024 s, so the rest of the "
        "measured gain is not explained by the modelled mechanisms (eager's elementwise "
        "traffic counted low is a candidate: a rough kernel-by-kernel count of eager's "
        "RMSNorm, rotary and SiLU x up, not checked against a trace, gives about 2.5x the "
        "4-pass figure; not adopted, it would move every eager row). Host launches saved by "
        "compile are not modelled. In the training table at the top the torchtune rows moved "
        "with it (read 2026-11-24): 4090 LoRA -7.1% -> -2.2%, QLoRA +11.2% -> +16.7%, A6000 "
        "LoRA -42.9% -> -39.1%, the compiled A100 rows from -9..-17% to -7..-15%, the eager "
        "one +8.8% -> +8.3%. The Llama 3.1 8B LoRA/QLoRA rows on a 4090 are 19-28% slower in "
        "the estimate than measured (were 22-29%). The A6000 row (#325, 52% faster than the "
        "4090 on the same config) is "
        "not compared: at 4,699 tokens/s the stated setup's matmul work alone (44.0 GFLOP "
        "per token: forward, recomputation and input gradients of the frozen linears) "
        "needs 207 TFLOPS, 1.34x the card's dense bf16 peak (154.8; 0.91x even without "
        "recomputation), so the figure does not come from the setup as stated (harness "
        "rule finetune.above_peak: no kernel runs above the peak; the only row it "
        "skips). The 4090 LoRA row needs 0.82x of its 165.2 TFLOPS in matmuls alone with "
        "the config's checkpointing (0.56x without), where the estimate's Ada GEMM rate "
        "is 0.76x (0.78 x the width factor): the measured speed is hard to reach with "
        "recomputation, and whether the README's runs recomputed is not stated beside the "
        "table: not resolved."),
    "xtuner": (
        "Llama-2-7B at 8k tokens (sequence parallel 1) is within 7%; at 32k the estimate "
        "is 31% slow: xtuner reports more TFLOPs per GPU at 32k than at 8k (193.0 vs "
        "185.3), while the estimate's attention (one efficiency constant, set from the MPT "
        "long-sequence rows) takes a growing share of the step. Llama-2-70B on 32 GPUs is "
        "37% fast: the DeepSpeed ZeRO stage is not stated (ZeRO-3 assumed), and the "
        "traffic of a 70B model between four nodes is the likely gap. The "
        "sequence-parallel rows are not modelled."),
    "Scicom simple-throughput": (
        "Added rows (held out; no figure set from them). Qwen3-0.6B-Base, full fine-tuning on "
        "4 GPUs with DDP, packed 4096-token rows of Malay Wikipedia, Liger's fused linear "
        "cross-entropy: H100 73,000 tokens/s per GPU (#520), H200 75,000 (#521), L40S 22,500 "
        "(#522), each the README's rounded W&B average over 4 GPUs. The estimate is 22-31% "
        "slow on all three. Mechanism, checked: the script flattens each micro-batch with "
        "cu_seq_lens, so flash-attn attends within each article, while the setup has no field "
        "for packed documents and the estimate attends over the whole 4096-token row. With the "
        "same tokens in 1024-token sequences the estimate gives 66.6k, 81.9k and 23.0k "
        "(-9%, +9%, +2%); at 256 tokens 72.1k, 90.9k, 25.7k. The articles' lengths are not "
        "stated, so the row is compared as the setup states it and the miss is left standing. "
        "Liger's fused RoPE, SwiGLU and RMSNorm kernels (not modelled: eager operators counted) "
        "would move the estimate the same way, by an amount not checked. The H100 variant is "
        "not stated (SXM assumed)."),
    "Scicom how-fast-5090": (
        "Added rows (held out). Qwen3-1.7B-Base, full fine-tuning on one GPU, packed 4096-token "
        "fineweb-edu rows, Cut Cross-Entropy (Kahan variant), torch.compile: the H100 SXM row "
        "(#518, 54.5M tokens in the README's 47 minutes, 19,315 tokens/s) is estimated 66% "
        "fast (52% before torch.compile was modelled, issue 14: compile makes the estimate "
        "faster, away from this figure; the Qwen3 layer's compiled saved set, per-head q/k "
        "norms included, is read from the partition like the others). Not explained: the "
        "47 minutes are the whole run rounded to the minute (torch.compile's compilation, "
        "model and data loading included; how much is not "
        "stated), and the Kahan-summed CCE backward (impl cce_kahan_full_c) is costed as plain "
        "Cut Cross-Entropy; neither is checked to cover a third of the run. Packed documents "
        "would move the estimate further up (attention within documents), not down. The RTX "
        "5090 row (#519, 96 minutes, 9,456 tokens/s) is estimated 27% slow (30% before compile "
        "was modelled), now that the "
        "catalog holds its bf16 rate (209.5 TFLOPS, NVIDIA's RTX Blackwell whitepaper table as "
        "quoted; the Blackwell GEMM efficiency, 0.70, is an assumption): the same script 66% "
        "fast on the H100 and 27% slow on the GeForce card, the direction of the per-product "
        "GEMM rates below (user microbenchmarks put the 5090's bf16 matmuls at 1.13x that "
        "peak), not adopted."),
    "Megatron-Bridge": (
        "Added rows (held out; no Blackwell figure is set from training rows: its GEMM "
        "efficiencies are datasheet assumptions). Megatron-Bridge's 26.06 tables, Llama 3 70B "
        "on DGX-GB200, SQuAD packed to 4096 tokens, Transformer Engine fp8: SFT on 32 GPUs "
        "(tp 1, pp 8, vp 10; #523 FP8 3,864 tokens/s per GPU, #524 MXFP8 3,593) and LoRA on "
        "linear_qkv on 8 GPUs (#525 FP8, pp 2 vp 20, 6,206; #526 MXFP8, pp 4 vp 20, 5,958). "
        "All four within 9% (FP8 rows 5-9% slow; MXFP8 SFT +2%): MXFP8 is costed at the fp8 "
        "rate, and the source's MXFP8 rows are 4-7% slower than its FP8 ones, the block "
        "scaling's cost, not modelled. Fits: all four fit (device totals 160 GB for the SFT rows, "
        "149 GB for LoRA pp 2 and 114 GB for pp 4, of 186 GB that ran; 226, 250 and 180 GB "
        "before, three refused). What moved them, each read in the stack's code, none set "
        "from these rows: the presets' fp8 precision configs build the layers' weights as "
        "fp8 tensors (fp8_param_gather: Training.fp8_params, no bf16 copy beside the fp8 "
        "data and transpose: about 70 GB less for LoRA pp 2's 35B weights per GPU); what Transformer "
        "Engine's modules keep for backward (estimate/megatron_saved.py: the norms' inputs "
        "at 2 bytes, not fp32 copies; the fused SwiGLU's input, not three f-wide tensors; "
        "one LoRA input for the fused q/k/v linear; SFT's activations 129 -> 85 GB); the SFT "
        "recipe's Transformer Engine cross-entropy (loss_kernel te: "
        "the gradient written into the bf16 logits) and the LoRA recipe's Megatron-Core "
        "vocab-parallel one (megatron: one fp32 copy, softmax and gradient in place). No "
        "memory figure is published to check the totals against."),
    "DGXC NeMo": (
        "Added rows (held out; the Hopper GEMM efficiencies were set from throughput_h100.csv's "
        "tuning half, which these runs are not in). NVIDIA dgxc-benchmarking v25.04: NeMo 2 "
        "(nemo:24.12) Llama 3 8B SFT and LoRA on 8, 16 and 32 H100 (TP 1, PP 1), 70B SFT on 32 "
        "(TP 4, PP 4, VP 5) and LoRA on 8-32 (TP 2, PP 4, VP 20), BF16 and FP8, SQuAD packed "
        "to 4096. All 20 within 20%, all but two slow: 70B rows -11% to +1%, 8B rows -5% to "
        "-17%. Two mechanisms in the estimate's breakdown: (1) 8B SFT on 16 and 32 GPUs "
        "(#528, #529, #531, #532, -16 to -17%) keeps 0.16 s of its 0.80 s of gradient and "
        "parameter collectives between nodes exposed (the DGX H100's 50 GB/s per GPU "
        "assumed: the recipe's network is not stated), while the runs' step time does not "
        "move from 8 to 32 GPUs (1.32, 1.32, 1.33 s): Megatron's distributed optimizer "
        "overlaps the reduce-scatter with backward and the all-gather with forward "
        "(overlap_grad_reduce, overlap_param_gather) more fully than the estimate's overlap "
        "assumes. (2) Where no collective is exposed (#527, SFT on 8 GPUs, -9%; LoRA #533-#538, "
        "-13 to -16%, whose adapters' gradients are small) the matmuls alone are within the "
        "measured step (8B SFT BF16: 1.10 s of matmul at the fitted "
        "0.70 of peak against 1.32 s measured), and the estimate adds 0.19 s of memory-bound "
        "elementwise work and 0.11 s of attention on top: Transformer Engine fuses the norms, "
        "the RoPE and the SwiGLU that the estimate counts as separate passes. (3) The 70B LoRA "
        "rows on 16 and 32 GPUs (#542 -9%, #545 -11%; #543, #546) have 1.15 s of pipeline "
        "sends between nodes in the estimate (0.13 s on one node: Megatron-Core's rank order, "
        "tp, dp, then pp, puts a replica's four stages on two nodes), where the measured BF16 "
        "step grows 0.28 s from 8 to 16 GPUs and 0.65 s to 32 (9.12, 9.40, 9.77 s): the "
        "estimate's cross-node send cost is about three times what the runs show. "
        "Fits: all 20 fit on 80 GB (85.5 GB), as they ran; before, six were refused (8B SFT "
        "FP8 #530 89.0 GB, now 64.9; 70B SFT #539 89.2 -> 75.5 and #540 93.2 -> 71.8; 70B LoRA "
        "FP8 #544-#546 90.3 -> 60.0). What moved them, read in the stack's code and set from "
        "no row: NeMo 2's bf16_with_fp8_mixed builds fp8 weights (fp8_params: no bf16 copy), "
        "Transformer Engine's modules keep less than transformers' layers (2-byte norm "
        "inputs, the fused SwiGLU's input, one LoRA input for the fused q/k/v linear: "
        "estimate/megatron_saved.py), and Megatron-Core's vocab-parallel cross-entropy keeps "
        "6 bytes a logit, not 12 (loss_kernel megatron). No memory figure is published to "
        "check the totals against. "
        "What I would fix: the overlap "
        "of the distributed optimizer's collectives and the fused elementwise passes of the "
        "megatron kernel path, checked against these rows and throughput_h100.csv's held-out "
        "half together."),
}


PROSE_DATE = ("Errors quoted in these notes were read from the tables on 2026-11-23; the tables "
              "are regenerated with the estimator and are the current figures.")


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def _stats(rows: list[Comparison]) -> tuple[int, int, int, str, str]:
    """(compared, within 10%, within 20%, median error, worst)."""
    errs = [c.error for c in rows if c.error is not None]
    if not errs:
        return 0, 0, 0, "-", "-"
    worst = max(rows, key=lambda c: abs(c.error or 0.0))
    return (len(errs), sum(abs(e) <= 0.10 for e in errs), sum(abs(e) <= 0.20 for e in errs),
            _pct(statistics.median(errs)),
            f"{_pct(worst.error or 0.0)} ({worst.label.split(' ')[0]})")


def _group_table(rows: list[Comparison], key: Callable[[Comparison], str], what: str
                 ) -> list[str]:
    groups: dict[str, list[Comparison]] = {}
    for c in rows:
        groups.setdefault(key(c), []).append(c)
    out = [f"| {what} | rows | with a figure | compared | within 10% | within 20% "
           f"| median error | worst |", "|---|---|---|---|---|---|---|---|"]
    for name, cs in sorted(groups.items()):
        n, ok, ok20, med, worst = _stats(cs)
        figures = sum(not math.isnan(c.measured) for c in cs)
        out.append(f"| {name} | {len(cs)} | {figures} | {n} | {ok} | {ok20} | {med} | {worst} |")
    return out


def _value(c: Comparison, v: float | None) -> str:
    if v is None or math.isnan(v):
        return "-"
    return f"{v / GIB:.2f} GiB" if c.unit == "bytes" else f"{v:,.0f}"


def _row_table(rows: Iterable[Comparison], tol: float) -> list[str]:
    out = ["| row | source | setup as estimated | measured | predicted | error | what was "
           "measured |", "|---|---|---|---|---|---|---|"]
    for c in rows:
        if c.error is None:
            continue
        flag = "" if abs(c.error) <= tol else " **(miss)**"
        out.append(f"| {c.label} | {c.group} | {c.setup} | {_value(c, c.measured)} | "
                   f"{_value(c, c.predicted)} | {_pct(c.error)}{flag} | {c.measured_what} |")
    return out


#: reasons that name a model or a method in parentheses: one line each, the names listed
_NAMED = re.compile(r"^(model not in catalog|PEFT method other than LoRA) \((.*)\)$")


def _skipped(rows: list[Comparison]) -> list[str]:
    by_reason: dict[str, list[str]] = {}
    names: dict[str, dict[str, None]] = {}
    for c in rows:
        if c.skipped:
            m = _NAMED.match(c.skipped)
            reason = m.group(1) if m else c.skipped
            if m:
                names.setdefault(reason, {})[m.group(2)] = None
            by_reason.setdefault(reason, []).append(c.label.split(" ")[0])
    out = []
    for reason, ids in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        named = f" ({'; '.join(names[reason])})" if reason in names else ""
        out.append(f"- {reason}{named}, {len(ids)} rows: {', '.join(ids)}")
    return out


def _by_kind(comparisons: list[Comparison], kind: str) -> list[Comparison]:
    return [c for c in comparisons if c.kind == kind]


def fits_summary(comparisons: list[Comparison]) -> tuple[int, int]:
    """(rows that ran and are predicted to fit, rows that ran and were checked)."""
    rows = [c for c in _by_kind(comparisons, "ft_fits") if c.error is not None]
    return sum((c.error or 0.0) <= 0 for c in rows), len(rows)


def _setup_reasons(comparisons: list[Comparison]) -> dict[str, str]:
    """label -> reason, for the rows whose setup is not expressible (the same reason for
    memory, fits and throughput)."""
    reasons: dict[str, set[str | None]] = {}
    for c in comparisons:
        if c.kind in ("ft_memory", "ft_fits", "ft_throughput"):
            reasons.setdefault(c.label, set()).add(c.skipped)
    return {label: next(iter(r)) or "" for label, r in reasons.items()
            if len(r) == 1 and None not in r}


def host_fit_row(c: Comparison) -> bool:
    """A throughput row that set a fitted figure (finetune.TUNED_THROUGHPUT_ROWS: the Qwen
    host's us per operator, DeepSpeed ZeRO-3's hook cost, the flash-attn rate): tuned, so left
    out of the accuracy reported for the rest."""
    from gpuhours_dev.validation.finetune import TUNED_THROUGHPUT_ROWS

    return c.label.split(" ", 1)[0] in {f"#{r}" for r in TUNED_THROUGHPUT_ROWS}


def render_finetune(comparisons: list[Comparison]) -> list[str]:
    every_mem = _by_kind(comparisons, "ft_memory")
    mem = every_mem  # no memory figure is set from these rows
    fits = _by_kind(comparisons, "ft_fits")
    everything = _by_kind(comparisons, "ft_throughput")
    tuned = [c for c in everything if host_fit_row(c)]
    tp = [c for c in everything if not host_fit_row(c)]
    tol_m, tol_t = FT_TOLERANCE["ft_memory"], FT_TOLERANCE["ft_throughput"]
    setup_skip = _setup_reasons(comparisons)

    def own(cs: list[Comparison]) -> list[Comparison]:
        return [c for c in cs if c.label not in setup_skip]

    lines = ["", f"## {FT_TITLES['ft_memory']}", "", MEMORY_INTRO, "",
             "No memory figure is set from these rows: every row is held out.", "",
             "By source:", ""]
    lines += _group_table(mem, lambda c: c.group, "source")
    lines += ["", "By method (compared rows):", ""]
    lines += _group_table([c for c in mem if c.error is not None], lambda c: c.method,
                          "method")
    ok, n = fits_summary(comparisons)
    refused = [c for c in fits if c.error is not None and c.error > 0]
    lines += ["", "### Runs that ran, predicted not to fit", "", FITS_INTRO, "",
              f"Checked: {n} rows; predicted to fit: {ok}; refused: {len(refused)} "
              f"({100 * len(refused) / max(n, 1):.1f}%).", ""]
    lines += [f"- {c.label} ({c.group}): {c.predicted / GIB:.1f} GiB predicted on "
              f"{c.measured_what} ({c.measured / GIB:.1f} GiB); {c.setup}"
              for c in refused if c.predicted is not None]
    lines += [""]
    oom = [c for c in comparisons if c.kind == "ft_oom" and c.error is not None]
    lines += [f"The converse, for the runs reported out of memory (expressible, on a known GPU): "
              f"{sum((c.error or 0.0) > 0 for c in oom)} of {len(oom)} predicted not to fit.",
              ""]
    lines += [f"- {c.label} ({c.group}): {c.predicted / GIB:.1f} GiB predicted on "
              f"{c.measured_what} ({c.measured / GIB:.1f} GiB): "
              f"{'does not fit' if (c.error or 0.0) > 0 else 'fits (miss)'}; {c.setup}"
              for c in oom if c.predicted is not None]
    lines += [
              "", "### What remains off, and why", "", PROSE_DATE, ""]
    # a source's tally in its note is read from its rows, as the table above counts them
    tallies = {src: _stats([c for c in mem if c.group == src]) for src in REMAINS}
    from gpuhours.estimate.device_overhead import EAGER_CONTEXT_A100_BYTES, EAGER_CONTEXT_BYTES
    from gpuhours_dev.validation.finetune import eager_context_sensitivity

    def eager(context_bytes: float) -> str:
        n, ok, median = eager_context_sensitivity(context_bytes)
        return f"{ok} of {n} within 10%, median error {_pct(median)}"

    what_if = {"<EAGER_A100>": eager(EAGER_CONTEXT_A100_BYTES),
               "<EAGER_V100>": eager(EAGER_CONTEXT_BYTES)}
    for src, text in REMAINS.items():
        text = text.replace("<TALLY>", f"{tallies[src][1]} of {tallies[src][0]}, median error "
                                       f"{tallies[src][3]}")
        for mark, figure in what_if.items():
            text = text.replace(mark, figure)
        lines.append(f"- **{src}**: {text}")
    capacity = [c for c in fits if c.error is not None and c.group.startswith("Unsloth docs")]
    lines += ["", "Capacity limits (Unsloth docs, HF + FA2 and Unsloth: the longest context that "
              "fit): the "
              "estimate's device total at that context beside the card's memory:", "",
              "| row | setup as estimated | card | predicted | predicted / card - 1 |",
              "|---|---|---|---|---|"]
    lines += [f"| {c.label} | {c.setup} | {c.measured / GIB:.1f} GiB | "
              f"{(c.predicted or 0.0) / GIB:.1f} GiB | {_pct(c.error or 0.0)} |"
              for c in capacity]
    lines += ["", "### Every compared row", ""] + _row_table(every_mem, tol_m)
    lines += ["", "### Rows not expressible (for memory, fits and throughput alike)", ""]
    lines += _skipped([c for c in mem if c.label in setup_skip])
    lines += ["", "Expressible rows not compared for memory:", ""] + _skipped(own(mem))
    lines += ["", "Expressible rows not checked for fit:", ""] + _skipped(own(fits))
    tuned_ok = sum(abs(c.error) <= tol_t for c in tuned if c.error is not None)
    lines += ["", f"## {FT_TITLES['ft_throughput']}", "", THROUGHPUT_INTRO, "",
              f"The tables count the held-out rows only. The {len(tuned)} rows that set the "
              "Qwen host figure (6), DeepSpeed ZeRO-3's hook figure (3) and the flash-attn "
              "attention rate (2): "
              f"{tuned_ok} of {len(tuned)} within {100 * tol_t:.0f}% (in "
              "\"Every compared row\" below, marked).", "", "By GPU generation:", ""]
    lines += _group_table([c for c in tp if c.error is not None], lambda c: c.generation,
                          "generation")
    lines += ["", "By source:", ""] + _group_table(tp, lambda c: c.group, "source")
    lines += ["", "By method (compared rows):", ""]
    lines += _group_table([c for c in tp if c.error is not None], lambda c: c.method,
                          "method")
    lines += ["", "### What remains off, and why", "", PROSE_DATE, ""]
    lines += [f"- **{src}**: {text}" for src, text in THROUGHPUT_REMAINS.items()]
    lines += ["", "### Every compared row", ""] + _row_table(everything, tol_t)
    lines += ["", "Expressible rows not compared for throughput (the rows not expressible "
              "are listed under memory):", ""] + _skipped(own(tp))
    sources = sorted({c.source for c in mem})
    lines += ["", "### Fine-tuning sources", ""] + [f"- {s}" for s in sources]
    return lines
