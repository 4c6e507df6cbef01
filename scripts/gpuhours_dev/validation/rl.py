"""The `rl` phase of a plan against published RL step times (data/rl_steps.csv).

    python -m gpuhours_dev.validation.rl        (from scripts/; prints a Markdown table)

Each expressible row becomes a one-phase plan; every setting not stated by the source is an
assumption written beside the row (ASSUMED). Rows whose model, GPU or parallel layout gpuhours
cannot express are listed with the reason. These rows were read after the RL step model was
written; two figures were set from them since, both from rows 12 and 14 (CSV lines, header =
line 1): the rate a single controller moves the batch (`driver_rate_fit`) and the verl 7B
recipe's mean response (`verl_7b_mean_fit`); the rest of the rows are held out.
"""

from __future__ import annotations

import copy
import csv
import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuhours.estimate.track_record import TrackRecord, summarise

DATA = Path(__file__).parent / "data" / "rl_steps.csv"


def rows() -> list[dict[str, str]]:
    with DATA.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@dataclass(frozen=True)
class Case:
    row: int             # 0-based row of rl_steps.csv
    gpu: str
    phase: dict[str, Any]
    settings: dict[str, Any]
    assumed: str


# vLLM's memory share as NeMo-RL v0.5 sets it (@108bffda): gpu_memory_utilization 0.6 in
# examples/configs/grpo_math_1B.yaml (colocated), 0.8 in each performance/*-async-1off.yaml
# recipe (dedicated generation GPUs)
_NEMO_COLOCATED = {"rollout_memory_utilisation": 0.6}
# Each sampled token's logprob (issue 13): NeMo-RL asks vLLM for it (SamplingParams
# logprobs=0, vllm_worker.py _build_sampling_params @108bffda and @v0.6.0), and where its
# engine is vllm.LLM in the worker's own process (async_engine false: grpo_math_1B.yaml and
# the Llama-8B, Qwen3-32B, Qwen3-30B-A3B and DAPO DeepSeek-V3 recipes; VllmGenerationWorker
# with VLLM_ENABLE_V1_MULTIPROCESSING=0) LLMEngine.step runs the engine core's step and then
# the output processor in one thread (vllm/v1/engine/llm_engine.py @0.11.2), so V1's work on
# each running sequence's logprob (the scheduler's LogprobsLists.slice, LogprobsProcessor)
# is serial with the GPU unless async scheduling: rollout_returns_logprobs, at the 4.4 us a
# sequence a step measured on this project's VM (scripts/bench_vllm_logprob_host.py, vLLM
# 0.11.2's own code). Not set where the recipe sets async_engine true (every one-step-off
# recipe; the colocated DeepSeek-V3 GRPO and Qwen3-235B ones): AsyncLLM runs the engine core
# in its own process and the output processor in the worker's, beside the core's steps.
# vLLM 0.17.1 (v0.6's pin) does the same per token (LogprobsLists.slice_request,
# LogprobsProcessor, flat_logprobs off by default; read, not timed). Not costed: NeMo-RL's
# own unpacking after generate (each token's logprob set into a torch tensor, 2.5 us a token
# on the same VM) and the sampler's logprob kernels (once a step).
_NEMO_LOGPROBS = {"rollout_returns_logprobs": True}
_NEMO_LOGPROBS_ASSUMED = ("; each sampled token's logprob asked of vLLM (vllm_worker.py "
                          "logprobs=0) and turned into Python objects a sequence a step in "
                          "the worker's own thread (vllm.LLM, async_engine false): 4.4 us a "
                          "sequence a step, measured on this project's VM "
                          "(scripts/bench_vllm_logprob_host.py), taken for the host's CPU")
# Colocated, NeMo-RL's Megatron worker moves its state out of vLLM's way every step and back
# (issue 13; plan/rl_refit_offload.py, read at 108bffda and v0.6.0: grpo.py
# refit_policy_generation calls policy.offload_before_refit / offload_after_refit only when
# generation is colocated; megatron_policy_worker.py move_model / move_optimizer,
# prepare_for_lp_inference, prepare_for_training): the bf16 parameter buffers to pinned host
# memory after the refit and up before the log-prob passes, the optimizer's state to pageable
# host memory before the refit and up before the update (the gradient buffers are freed and
# re-zeroed, no copy). Every recipe sets use_precision_aware_optimizer with bf16
# (grpo_math_1B.yaml; performance/*.yaml), so Transformer Engine's FusedAdam keeps the moments
# and, under Megatron-Core's default store_param_remainders, the master weights' int16 low
# halves in that state: refit_offload "moments+remainders". Dedicated (one-step-off) rows move
# nothing. The engine beside it sleeps at level 1 between rollouts: NeMo-RL builds vLLM with
# enable_sleep_mode=True and, colocated only, calls `sleep` (`self.llm.sleep(level=1)`) in
# finish_generation and `wake_up(tags=["weights"])` before the refit
# (models/generation/vllm/vllm_generation.py, vllm_worker.py, vllm_worker_async.py @108bffda):
# vLLM's CuMemAllocator copies each GPU's weight shard to pinned host memory and back with
# cudaMemcpy (device_allocator/cumem.py), though the refit overwrites them right after:
# rollout_sleep_offload (plan/rl_engine_sleep.py), as on the EasyR1 rows. GB200's host link
# (NVLink-C2C) has no figure in estimate/offload.py: neither is costed there.
_NEMO_HOST_COPIES = {"refit_offload": "moments+remainders", "rollout_sleep_offload": True}
# Note for docs/rl.md (NeMo-RL colocated rows, issue 13, 2026-11-25): both host copies counted,
# no constant set from any row (PCIe 5.0 x 0.8 and the pageable 4.5x are estimate/offload.py's,
# set from vendor figures and DeepSpeed PR #5301). Per GPU and step, refit_offload + vLLM sleep
# (s): CSV line 2 1.21 + 0.64, 5 2.09 + 0.65, 7 2.11 + 1.21, 43 4.07 + 1.66, 45 2.68 + 0.83,
# 46 3.60 + 1.17, 56 4.07 + 1.66, 57 2.10 + 1.66, 59 3.60 + 1.17, 60 1.90 + 1.17, 62 2.11 +
# 1.21; the optimizer's pageable copies are most of the first (DeepSeek-V3 at PP16 EP16: 21 GB
# of moments and remainders a GPU, 3.8 s, against 0.3 s for its 7.4 GB of bf16 weights).
# Step errors -23/-21/-24/-21/-74/+7/-22/-23/+17/+12/-32% -> -21/-20/-23/-16/-73/+8/-18/-20/
# +18/+13/-30%: real, and small: 1-5% of the step where the colocated rows miss by 11-32%.
# Not counted, read in the same code: the `gc.collect()` (three a step in the worker: both
# offload calls and prepare_for_lp_inference; more in vLLM's sleep) and
# `torch.cuda.empty_cache()` calls around the moves, the first step's pinning
# of the parameter buffer (`.cpu().pin_memory()`), and the pageable copies' fresh host
# allocation each step (`v.to("cpu")`: page faults on first touch), which the 4.5x may not hold.
_NEMO_HOST_ASSUMED = ("; each step the trainer's bf16 weights to pinned host memory and back "
                      "and its optimizer state (Adam moments + int16 master remainders: "
                      "precision-aware optimizer) to pageable host memory and back, as "
                      "megatron_policy_worker.py offload_before_refit / offload_after_refit / "
                      "prepare_for_lp_inference / prepare_for_training do when colocated "
                      "(@108bffda, v0.6.0): refit_offload, PCIe 5.0 at 0.8, the pageable copies "
                      "4.5x slower (estimate/offload.py); vLLM's level-1 sleep after each "
                      "rollout and wake before the refit (vllm_generation.py finish_generation "
                      "/ prepare_for_generation, colocated): its weight shard down and up, "
                      "rollout_sleep_offload")
_NEMO_HOST_GB200 = ("; the trainer's per-step offload around the refit (megatron_policy_worker.py"
                    " offload_before_refit / offload_after_refit, colocated) and vLLM's level-1 "
                    "sleep NOT costed: no host link figure for GB200's NVLink-C2C "
                    "(estimate/offload.py)")
# NeMo-RL's async engine: AsyncLLM.from_engine_args(engine_args, stat_loggers=...) with no
# usage context (vllm_worker_async.py @108bffda and v0.6.0), so vLLM's
# UsageContext.ENGINE_CONTEXT, which get_batch_defaults does not list: max_num_seqs takes
# SchedulerConfig.DEFAULT_MAX_NUM_SEQS, 128 (vllm/engine/arg_utils.py
# _set_default_max_num_seqs_and_batched_tokens_args, vllm/config/scheduler.py, read at 0.17.1;
# 0.11.2 the same by the earlier reading), where the recipe sets none (all but the DeepSeek-V3
# fp8 one-step-off recipe's 32). The colocated vllm.LLM engines (async_engine false) take
# LLM_CLASS's 1,024 on H100 and GB200, the tool's own default for vLLM V1 on those GPUs.
_NEMO_ASYNC_ENGINE_SEQS = {"rollout_max_num_seqs": 128}
_NEMO_ASYNC_ENGINE_ASSUMED = ("; vLLM's AsyncLLM (async_engine true) made without a usage "
                              "context: max_num_seqs 128 (SchedulerConfig.DEFAULT_MAX_NUM_SEQS; "
                              "the recipe sets none)")
# NeMo-RL's non-colocated refit (@108bffda): one NCCL group of every training rank and every
# engine rank (AbstractPolicyWorker.init_collective: world_size = train_world_size + inference
# ranks; VllmInternalWorkerExtension.init_collective places the engines' ranks after the
# trainers'), every training rank calling broadcast_weights_for_collective ->
# packed_broadcast_producer (nemo_rl/utils/packed_tensor.py) with src 0: rank 0's exported HF
# tensors (megatron-bridge export_hf_weights, gathered over PP by broadcast_from_pp_rank and
# over EP by gather_from_ep_ranks on every rank) packed into buffers of 2% of the GPU's memory
# (NRL_REFIT_BUFFER_MEMORY_RATIO, at most 5 GiB), two of them on their own streams, each
# broadcast to every rank of the group; the engines unpack and call the model's load_weights,
# which keeps each GPU's TP shard. So every engine GPU receives every byte (the whole bf16
# model), and the group spans whole nodes: weight_sync_every_rank (plan/phases.py
# broadcast_ring_bytes_per_s). The export's own gathers, pipelined with the broadcast by the
# two buffers, are not costed.
_NEMO_DEDICATED = {"rollout_memory_utilisation": 0.8, "placement": "dedicated",
                   "async_rollout": True, "in_flight_weight_updates": True,
                   "weight_sync_every_rank": True, **_NEMO_ASYNC_ENGINE_SEQS}
# (the prompt and the longest response of every NeMo row: `_nemo_prompt`)
_NEMO_8B = dict(prompts_per_step=64, generations_per_prompt=32, reference_model=True,
                reward={"kind": "rule"})
# vLLM 0.3.1: the V0 engine (engine vllm-v0, its host work per running sequence)
_ORLHF = dict(prompts_per_step=1024, generations_per_prompt=1, prompt_tokens=1024,
              response_tokens=1024, max_response_tokens=1024, reference_model=True,
              critic=True, placement="dedicated", engine="vllm-v0")
# OpenRLHF @dbdd43b sends vLLM its prompts unpadded and samples without min_tokens
# (experience_maker.py _generate_vllm: SamplingParams(max_tokens=...)), so responses stop at
# EOS: 1,024-token prompts and responses are an upper end for these rows
_ORLHF_ASSUMED = ("prompts and responses all 1,024 tokens (the benchmark's max; means not "
                  "given; OpenRLHF's vLLM sampling stops at EOS and takes the prompts unpadded: "
                  "an upper end); reward model = the actor's size; vLLM on 2 of the GPUs (the "
                  "table's role ratio); "
                  "the table's generation micro batch as the sequences per generate call")
# Note for docs/rl.md (issue 13, OpenRLHF Ray + vLLM rows, CSV lines 29, 32, 34, 2026-11-25):
# line 29 (Llama-2-7B) reads +35%, its generation timer +70% (817 s: rollouts 737 s + four
# scoring forwards 80 s, against 481.86), its training -5%; line 32 +16% (generation +39%),
# line 34 -7% (+4%). Read at @dbdd43b0 and not the gap:
# - engines and calls: the 1:1:2:2:2 split's 2 engines of TP 1 (create_vllm_engines gives a
#   TP-1 engine one GPU; the branch's only vLLM script, train_ppo_llama_ray_70b.sh, sets
#   --vllm_num_engines 2 --vllm_tensor_parallel_size 2 for 2:2:4:4:4); each actor rank sends
#   micro_rollout_batch_size (16) prompts a call to engine rank % 2 and waits for it
#   (experience_maker.py _generate_vllm, ray.get), and an engine is one synchronous Ray actor
#   (vllm_engine.py LLMRayActor), so 32 calls of 16 one after another an engine: the phase's
#   rollout_batch 16, 32 admissions, 32 x 1,024 decode steps;
# - overlap: none between a rank's generate call and its scoring; the reference, reward and
#   critic forwards run on their own GPUs beside the actor's own log-prob pass (remote calls,
#   then ray.get), so a cycle's critical path is about one forward of the call's 16 sequences
#   on one GPU (1.9 s at the estimate's scoring rate, 230 TFLOPS; 32 cycles ~62 s with the
#   second rank's first wait at the shared reference and reward GPUs) where the phase spreads
#   four passes over the 6 training GPUs in turn (80 s): 18 s of the 335 s, not the gap (for
#   the Ray rows without vLLM, lines 28 and 31, -13 / -17%, the parallel roles would shorten
#   their scoring and worsen them);
# - the engine's host: 2.3 ms + 16 x 84 us of the 22.5 ms mean decode step (vLLM V0's
#   constants); without any host time the generation would still read +45% (617.5 s of
#   rollouts);
# - the lengths are the gap: at the case's 1,024-token prompts and responses the generation
#   cannot take less than 486 s even at the A800's datasheet 2,039 GB/s and 312 TFLOPS with no
#   host time, no scoring but the actor's own pass (`vllm_rollout_floor_s`, worked by hand in
#   tests/test_rl_validation.py), more than the 481.86 s measured if the table's timer holds
#   that pass (44 s of the 486; not stated: without it 441.6 s, 92% of it); at the generation fits'
#   decode bandwidth efficiency (0.71) the decode alone is 588 s. The 13B's floor is 90% of its
#   measured generation (barely possible), the 70B's 71% (its 4-sequence calls are weight-bound:
#   the KV cache, which shorter sequences shrink, is 1.4% of a step's bytes). OpenRLHF hands
#   vLLM the prompts unpadded and samples to EOS (SamplingParams(max_tokens=...)), and vLLM
#   drops a finished sequence from the batch, so the engine's work follows the mean lengths
#   while each call still lasts as long as its longest response; the table states neither
#   mean. Read as a diagnostic, not applied (nothing states them): one pair of means, a
#   256-token prompt and a 512-token response with the 1,024 cap, puts the generation timer of
#   lines 29 / 32 / 34 at -1 / -3 / -16% (its scoring forwards then at the mean too, where
#   OpenRLHF scores each call's sequences padded to the call's longest prompt and response,
#   _generate_vllm); its training would need padded lengths as well (replay_buffer.py pads
#   each training micro-batch to its longest sequence), which the phase, costing the update
#   and the scoring at the mean sequence, does not model. Line 29 stays +35%, an upper end.
# OpenRLHF's Ray roles (plan/rl_train.py): the actor and the critic each train on GPUs of
# their own, at the same time
_ORLHF_ROLES_ASSUMED = ("; the table's GPU ratio 1:1:2:2:2 read as reference:reward:actor:"
                        "critic:vLLM (the 70B script's order, @0ae5876), actor and critic each "
                        "training on its 2 GPUs at once; the 7B Ray script's ZeRO-2 with "
                        "--adam_offload (train_ppo_llama_ray.sh @dbdd43b; no 13B script), the "
                        "table's training micro-batch, accumulation 128 / (micro-batch x 2)")
# OpenRLHF with Ray, no vLLM (rows 28 and 31, CSV lines): HF generate on the actor's 4 GPUs
_ORLHF_HF_ASSUMED = ("prompts and responses all 1,024 tokens (the benchmark's max; means not "
                     "given; OpenRLHF's HF generate stops once every sequence of a call has its "
                     "EOS, and pads prompts to the call's longest: an upper end); reward model = "
                     "the actor's size; the branch's train_ppo_llama_ray.sh split (reference 1, "
                     "reward 1, actor 4, critic 2) and its ZeRO-2 with --adam_offload; the actor "
                     "generating on its 4 GPUs, the table's generation micro batch per generate "
                     "call, the other 4 GPUs waiting (placement actor); the scoring forwards "
                     "spread over the 8 GPUs (each role scores on its own GPUs in OpenRLHF: not "
                     "modelled); transformers 4.38's host time per layer as 4.46's fit (as the "
                     "DeepSpeed-Chat rows)")
# DeepSpeed-Chat as the OpenRLHF benchmark ran it (benchmark/deepspeed-chat/llama_{7b,13b}.sh:
# actor ZeRO-2, critic ZeRO-3, --offload (optimizer on the host), HF generate with the Hybrid
# Engine disabled, per_device_generation_batch_size = the table's generation micro batch);
# every model on all 8 GPUs in turn: colocated
_DSCHAT = dict(prompts_per_step=1024, generations_per_prompt=1, prompt_tokens=1024,
               response_tokens=1024, max_response_tokens=1024, reference_model=True,
               critic=True, engine="hf-generate",
               # the benchmark's stated release (Mar 2024): 4.38's per-step causal mask and cache
               # copies (estimate/generation.py)
               rollout_transformers_version="4.38")
# the benchmark's scripts train the critic at ZeRO-3 (CRITIC_ZERO_STAGE=3 in
# benchmark/deepspeed-chat/llama_{7b,13b}.sh @dbdd43b), by DeepSpeed's engine; with --offload
# DeepSpeed-Chat's get_train_ds_config puts offload_param and offload_optimizer both on the CPU
# (dschat/utils/ds_utils.py @6863634f), so the ZeRO-3 critic's weights wait on the host too
_DSCHAT_CRITIC = {"critic_training": {"zero_stage": 3, "zero3_engine": "deepspeed"}}
_DSCHAT_CRITIC_OFFLOADED = {"critic_training": {"zero_stage": 3, "zero3_engine": "deepspeed",
                                                "offload": "optimizer+params"}}
# DeepSpeed-Chat's sequences are all 1,024 + 1,024 tokens by its code: DataCollatorRLHF pads
# each prompt to max_prompt_seq_len and _generate_sequence forces min_length = max_length =
# prompt + max_answer_seq_len (DeepSpeedExamples step3_rlhf_finetuning ppo_trainer.py)
_DSCHAT_ASSUMED = ("responses all 1,024 tokens (DeepSpeed-Chat pads prompts to 1,024 and "
                   "generates with min_length = max_length); reward model = the actor's size; "
                   "the scripts' actor ZeRO-2 and critic ZeRO-3 (DeepSpeed's engine; with "
                   "--offload its weights on the host too); transformers 4.38's host time per "
                   "layer as "
                   "4.46's fit (4.38's 15% more operators a layer counted, not applied: "
                   "docs/rl.md); no old-policy pass beyond the actor's own log-probs (counted); "
                   "the step as its e2e_time counts it: generation + training, the scoring "
                   "forwards in neither")
# DeepSpeed's overlap_comm defaults to on for ZeRO-3 only (deepspeed v0.13.2
# runtime/zero/config.py overlap_comm_valid: stage == 3), and neither framework's ZeRO config of
# the benchmark's time sets it: DeepSpeed-Chat's get_train_ds_config (DeepSpeedExamples
# applications/DeepSpeed-Chat/dschat/utils/ds_utils.py @6863634f, its last change before March
# 2024; overlap_comm True came with f73a6ed6, 2024-09-17) and OpenRLHF's
# (openrlhf/utils/deepspeed_utils.py @dbdd43b). Its ZeRO-2 offload then copies the gradients
# to the host on the compute stream (stage_1_and_2.py reduce_ipg_grads), not beside backward
_DS_NO_OVERLAP = {"deepspeed_overlap_comm": False}
# Host memory of the offload (estimate/offload.py PAGEABLE_COPY_SLOWDOWN): DeepSpeed-Chat's
# config leaves offload_optimizer's pin_memory at DeepSpeed's default, off (v0.13.2
# runtime/zero/offload_config.py): every offload copy staged through pageable memory.
# OpenRLHF's pins it ("pin_memory": True @dbdd43b), but on the benchmark's deepspeed 0.13.2 the
# step's half-precision copy up still goes through a CPU-side cast into pageable memory (the
# pinned path came with 0.14.1, PR #5301)
_DSCHAT_PAGEABLE = {"offload_copies": "pageable"}
_ORLHF_PAGEABLE_STEP = {"offload_copies": "pageable-step"}
_DSCHAT_NO_OVERLAP = ("; overlap_comm off (DeepSpeed's ZeRO-2 default; ds_utils.py @6863634f "
                      "does not set it): the offloaded gradients' copies not hidden; pin_memory "
                      "off (DeepSpeed's default then): every offload copy through pageable "
                      "memory")
_ORLHF_NO_OVERLAP = ("; overlap_comm off (DeepSpeed's ZeRO-2 default; deepspeed_utils.py "
                     "@dbdd43b does not set it): the offloaded gradients' copies not hidden; "
                     "pinned buffers, but deepspeed 0.13.2's step copy up through pageable "
                     "memory (fixed in 0.14.1)")
# NeMo-RL's Megatron-Core training: its distributed optimizer is ZeRO-1 over the data-parallel
# ranks, Transformer Engine's fused attention; 4 optimizer steps of 512 sequences per RL step
_NEMO_QWEN = dict(prompts_per_step=64, generations_per_prompt=32, reference_model=True,
                  reward={"kind": "rule"})
# Note for docs/rl.md (NeMo-RL and verl Megatron rows, issue 13, 2026-11-24): the rows mapped
# on the kernel path their workers run (kernels megatron), no constant set from them. Every move
# is the host's operator count: 31 kernels a layer (37 with Qwen3's q/k norms; +12 or +14
# recomputed under full recompute) where the eager count was 144 (autocast, the setups' bf16-mixed;
# +55 recomputed), in the update and in the scoring passes' forwards (12-14 a layer where eager
# had 55: plan/rl_scoring_host.py takes the megatron forward count). These
# updates were host-bound at the eager count: with it put back (the megatron path otherwise) every
# row returns within 1-2 points of its old figure. Policy update (s) eager -> megatron: CSV line 2
# 24.6 -> 20.6, 3 41.3 -> 34.6, 4 30.7 -> 22.8, 5 166.0 -> 121.2, 6 165.9 -> 121.1, 7 26.9 ->
# 17.8, 8 24.2 -> 14.3, 9 49.2 -> 29.6, 10 111.5 -> 70.7, 11 111.6 -> 70.9; verl 18 71.5 ->
# 63.6, 19 244.0 -> 212.1. Step errors: -17/-11/-11/-7/+14/-30/-34/-7/-27/-28% ->
# -22/-15/-16/-20/-11/-35/-47/-41/-39/-50%; verl -23/+10% -> -25/-2%.
# Then (issue 13, the same day), two readings, no constant set from these rows:
# - the 30B-A3B row's MoE routing as grpo_math_1B.yaml sets it (moe_dispatch allgather-unfused):
#   Megatron-Core's router in fp64 and its allgather dispatcher with the unfused permute, counted
#   from Megatron-LM@4bbcd72d (its main of 2026-01-15; NeMo-RL pins b73ae5cd of a fork, not in
#   the mirror): +39 forward and +26 backward operators a MoE layer (estimate/host.py
#   MEGATRON_MOE_ALLGATHER_OPS, each named), and its traffic: every token all-gathered once with
#   its fp64 probs and the combine reduce-scattered in the probs' dtype, fp64
#   (`hidden_states.to(self.local_probs.dtype)`; the probs are `.type_as(logits)` of the fp64
#   gating): 2.63x the costed all-to-all's bytes at top-8 of EP 8 (estimate/parallel.py
#   expert_allgather_bytes_per_layer). Update 17.8 -> 27.7 s (host +4.2 s, traffic +5.6 s),
#   log-prob passes 2.45 -> 2.97 s each; step -35% -> -30%. The three blocking copies to the
#   host each MoE forward (the `.cpu()` of the tokens per expert, the two masked_select) are
#   counted as operators, not as lost run-ahead. Then the unfused permute's and the fp64
#   combine casts' memory traffic (moe_gemm.allgather_routing_bytes_per_token: index_select,
#   torch.zeros and scatter_add_ over all EP ranks' gathered rows, the casts to and from fp64;
#   3.6x the fused path's bytes at k 8, EP 8): update 27.7 -> 29.4 s;
# - every MoE policy's scoring forwards now send their expert-parallel traffic (before: none;
#   plan/rl_scoring.py expert_scoring_s: the all-to-all's forward, or the allgather dispatch's
#   gathers and fp64 combine, on the critical path as the update's): the NeMo 30B-A3B log-prob
#   passes 2.97 -> 7.52 s each (step -30% -> -25%, -24% with the traffic above); verl's 30B-A3B
#   colocated old-log-prob 21.0 -> 22.2 s (measured 28.7), reference 20.1 -> 21.3 s (20.9),
#   step -25.1% -> -24.6%; its streamed twin's reference 51.8 -> 56.6 s (50.1). verl's
#   inferred 30B mean (the diagnostic) 3,440 -> 3,152 tokens;
# - a GB200 row's host: the Grace CPU issues operators 2.75x slower than the DGX-H100's Xeon
#   (NVIDIA/TransformerEngine issue #2053: torch.nn.Linear forward's CPU time 37.08 us on GB200,
#   13.48 us on an H100 DGX, the same script), so its host time an operator is taken as 2.75 x
#   the 32 us of assumptions.HOST_S_PER_OP (the catalog's gb200 host_op_time_ratio; the H100 VM host of that
#   fit taken as alike to a DGX's, an assumption). GB200 rows (CSV lines 8-11) -47/-41/-39/-50%
#   -> -41/-26/-32/-37% (updates 14.3/29.6/70.7/70.9 -> 18.8/38.5/94.4/94.5 s);
# - vLLM's engine step on the same Grace host (issue 13, 2026-11-25; estimate/generation.py
#   host_cpu_ratio): the rollouts' CUDA graphs remove the launches, not the engine's own host
#   work per decode step, DECODE_HOST_STEP_S["vllm"] 2.3 ms (fitted on x86 A100 rows), serial
#   with the GPU: vLLM 0.11.2 (NeMo-RL v0.5's pin, pyproject.toml @108bffda) runs V1's
#   scheduler, input preparation, sampler and the sampled tokens' .tolist() between steps
#   (in the worker's own process: VLLM_ENABLE_V1_MULTIPROCESSING=0, vllm_worker.py)
#   unless async_scheduling is set (off by default until vLLM 0.14.0, whose release notes list
#   "Async scheduling is now enabled by default", vllm#27614; 0.11.1's said it was expected
#   "in the next release"), and neither grpo_math_1B.yaml nor vllm_worker.py sets it
#   (git grep async_scheduling @108bffda: none). That work is Python and PyTorch dispatch on
#   one core, the kind TE #2053 timed, so it takes the catalog's 2.75: 6.3 ms a step on GB200,
#   an assumption (no vLLM step timed on a Grace host read). GB200 rows (CSV lines 8-11)
#   -41/-26/-32/-37% -> -23/-13/-25/-37% (rollouts 28.0/41.6/126.7/87.2 ->
#   43.9/61.5/152.8/103.3 s; line 11 stays update-led). No other row moves (no other RL row
#   is on a Grace host; no generation row is on GB200/GB300). Held out 18 -> 20 of 31 within
#   25%; the stated-mean rows 6 -> 8 of 10.
# Checked for the GB200 rows and not the gap (issue 13, 2026-11-25):
# - the catalog's gb200 figures: 2,500 dense bf16 TFLOPS, 8 TB/s, 186 GB a GPU, as NVIDIA's
#   GB200 NVL72 page gives them per GPU (bf16 5 PFLOPS with sparsity, 186 GB HBM3e, 8 TB/s;
#   shared/reference/gpu_specs.yaml) and ml-engineering's table agrees;
# - the Blackwell bf16 GEMM rate (gemm_efficiency.blackwell 0.70, an assumption): TE #2053
#   also gives the GPU time of its Linear, 41.79 us on GB200 for 68.7 GFLOP = 1,644 TFLOPS,
#   where the estimate takes 2,500 x 0.70 x 2,048 / 2,176 = 1,647 (H100: 687 measured, 661
#   estimated; tests/test_gemm_rate_grace.py). GB200 over H100 per GEMM: 2.39x measured,
#   2.49x estimated. Megatron-Bridge's Blackwell rows are all fp8/MXFP8 among the dense
#   ones (median +1%), so no bf16 training row checks it end to end;
# - vLLM on sm100: 0.11's cuda.py picks FlashInfer with the HND KV layout for compute
#   capability 10.0, with full decode CUDA graphs (enforce_eager False in every NeMo-RL
#   recipe): the decode is costed as bandwidth-bound graph replays either way;
# - what is left: the 32B one-step-off (CSV line 11) -37%, update-led at 132 s (update 94.5 s,
#   two log-prob passes 18.9 s each) for 210 measured, where its H100 twin (line 6) is -11%;
#   per training GPU the page's steps give GB200 1.9x an H100 (210 s x 16 against 200 s x
#   32), the estimate 2.6x. The colocated 32B (line 10) -25%. Not found: the refit's
#   per-tensor host work (Megatron-Bridge's export and vLLM's load_weights, Python on the
#   Grace host; the estimate moves the bytes only), and vLLM's host work per running sequence
#   (decode_host_per_sequence_s.vllm is 0; NeMo-RL asks for each token's logprob,
#   vllm_worker.py logprobs=0, which V1 turns into Python objects per sequence a step, and
#   runs the engine core in its own process's thread, VLLM_ENABLE_V1_MULTIPROCESSING=0 in
#   vllm_worker.py @108bffda, so the output processor's per-sequence work, incremental
#   detokenisation and logprobs, runs between the steps too): the likeliest remaining cost,
#   larger on Grace and at the GB200 rows' 256 sequences an engine, but no V1 figure per
#   sequence was found to set it from.
#   Measured since (issue 13, 2026-11-25, third pass; rollout_returns_logprobs): what vLLM
#   0.11.2 adds a running sequence a decode step when its request asks logprobs=0 is the
#   scheduler's LogprobsLists.slice (vllm/v1/core/sched/scheduler.py update_from_output) and
#   the output processor's LogprobsProcessor._update_sample_logprobs (three ndarray.tolist(),
#   a {token id: Logprob} dict appended a token, kept to the end; vllm/v1/engine/logprobs.py,
#   vllm/logprobs.py); no detokenisation (skip_tokenizer_init without stop strings,
#   nemo_rl/models/generation/__init__.py) and no RequestOutput until the request ends
#   (LLM.generate's FINAL_ONLY). scripts/bench_vllm_logprob_host.py times vLLM's own two
#   calls on this project's 2-core EPYC VM, heap frozen as EngineCore freezes it: 4.41 us a
#   sequence a step (4.04 re-implemented; 7-9 us with the ~390K objects vLLM's import leaves
#   unfrozen, the collector walking them), taken for the x86 hosts (2.75x on Grace). Serial
#   where the recipe runs vllm.LLM in the worker's thread (async_engine false; not async
#   scheduled), i.e. NeMo's colocated rows but the DeepSeek-V3 GRPO and Qwen3-235B ones
#   (async_engine true: AsyncLLM, the engine core in its own process). Small: 256 sequences
#   x 4.4 us = 1.1 ms on a ~10 ms Llama-8B step, summed over a rollout 1-5% of the step:
#   lines 2/5/7 -21/-20/-23% -> -20/-19/-22%, GB200 lines 8/10 -23/-25% -> -20/-24%, line 45
#   -73% (unchanged to the point), 54 -9% -> -7%, 62 -30% -> -29%; 73 (TP-1, async
#   scheduled under vLLM 0.17.1) does not move. Held out 45 -> 46 of 62 within 25% (line 10
#   crosses). Not costed: NeMo-RL's own unpacking after generate (each token's logprob set
#   into a torch tensor: 2.5 us a token on the same VM, about half as much again) and the
#   sampler's logprob kernels (log_softmax over the vocabulary, gather, rank count; once a
#   step). It is not the 16-32% gap.
#   Applied (issue 13, 2026-11-25, fourth pass): each engine runs the max_num_seqs its code
#   gives it. vLLM's EngineArgs.get_batch_defaults (vllm/engine/arg_utils.py, read at 0.17.1,
#   v0.6's pin, and earlier at 0.11.2, v0.5's) gives LLM_CLASS 1,024 on a device of 70 GiB or
#   more not named A100 (H100, GB200: the tool's own vLLM V1 default there now,
#   estimate/generation.py engine_max_num_seqs_default), and any context it does not list
#   SchedulerConfig.DEFAULT_MAX_NUM_SEQS, 128: NeMo-RL's AsyncLLM.from_engine_args
#   (vllm_worker_async.py @108bffda and v0.6.0) passes no usage context (ENGINE_CONTEXT), and
#   its llm_kwargs (vllm_worker.py) no max_num_seqs unless a recipe's vllm_kwargs does (only the
#   DeepSeek-V3 fp8 one-step-off recipe: 32). Moves (error before -> after): lines 3/4 -15/-16%
#   -> -6/-8%, 9 -13% -> +18%, 5 -19% -> -17%, EasyR1's 24 -18% -> -27% (its vllm.LLM at
#   1,024), and the Qwen3-30B-A3B one-step-off rows 48/63 -19/-18% -> +32/+33%, the
#   8-step-off 64 -11% -> +43%: held out 46 -> 42 of 62 within 25%. The earlier agreement of
#   the one-step-off 30B rows rested on twice the sequences their engines run; what their
#   step does that the estimate does not (NeMo-RL's in_flight_weight_updates: the rollouts of
#   one weight version run on through the refit, async_utils.py prepare_for_refit @108bffda,
#   so the tail of one step's responses overlaps the next step's) is not modelled.
# Read again for lines 10 and 11 (issue 13, 2026-11-25, second pass); not the gap either:
# - the page: no table splits a step into parts: v0.5 (108bffda), v0.6 (7ea279ab, whose GB200
#   table drops Qwen3-32B) and v0.4 (cff17f83, no GB200); the recipes' test scripts
#   (tests/test_suites/llm/performance/grpo-qwen3-32b-*.sh) check token_mult_prob_error only;
# - the layouts (@108bffda): 4n4g Megatron TP 2 PP 1 with sequence parallelism, vLLM TP 1 at
#   0.6, colocated; 8n4g-async-1off the same training on 16 GPUs beside 16 vLLM engines of TP 1
#   at 0.8 (async_engine, in_flight_weight_updates); the H100 twins TP 4 PP 4, vLLM TP 4;
# - the one-step-off step's form (nemo_rl/algorithms/async_utils.py, grpo.py
#   async_grpo_train): the collector generates only for the next weight version
#   (max_trajectory_age_steps 1, _should_pause_for_generation_limits), at most 64 prompt
#   groups in flight, resuming after the refit; total_step_time holds the trainer's wait for
#   its batch (exposed_generation), the log-probs, the training and weight_sync: max(rollouts,
#   training side) + refit, the phase's form. Line 11's bound now reads "policy update" (its
#   training side, 132 s, sets the step; the rollouts, 103 s, are its longest single part:
#   plan/rl_async.py overlapped_bottleneck); no figure moves;
# - the worker's moves each step (megatron_policy_worker.py): gradients freed, not copied
#   (Megatron-Core's offload_to_cpu resizes their storage to 0); colocated only, the bf16
#   weights to pinned host memory and back (offload_after_refit, prepare_for_training) and the
#   optimizer's moments by .to("cpu") (move_optimizer, pageable): at TP 2 about 33 GB of
#   weights and 16 GB of moments each way a GB200 GPU a step, seconds over the Grace C2C link
#   (the catalog has no host-link figure for it, so not costed), not line 10's 96 s, none in 11;
# - TE's module host cost: the estimate's operator on the Grace host is 2.75 x 32 us = 88 us,
#   and TE #2053 times a whole TE Linear forward at 99.66 us of CPU on GB200: a TE linear
#   costed as its GEMM's one operator is within 12% of its measured host time, so the "2.7
#   operators a TE linear" reading above would count its module overhead twice;
# - which side leads line 11 the page cannot say. Read training-led (training side = 210 s
#   less 0.1 s of refit), line 10's rollouts are 381 - 210 = 171 s (estimate 153, -11%) and the
#   training side 210 s (132, -37%); the H100 pair (lines 5, 6) read alike gives rollouts 176 s
#   (122.5, -30%) and training 196.5 s (173.7, -12%). Read rollout-led, line 11's rollouts
#   would be 2x the estimate's 103 s, where the rollout-led GB200 8B one-step-off (line 9) is
#   -13%. So the GB200 32B miss sits in the Megatron passes at TP 2 (64 one-sequence
#   micro-batches an optimizer step a rank; the estimate issues 13.7 s of host operators an
#   optimizer step at 88 us against 15.0 s of GPU work, 7.8 s not hidden): near host-bound, so
#   a host cost it misses there would show whole. Which one is not found.
# Read and not modelled: the host cost of a Transformer Engine module beside a plain torch
# operator. TE #2053 gives TE's Linear forward at 99.66 us (GB200) and 90.53 us (GH200) against
# torch's 37.08 and 33.17: 2.7x on both Grace hosts; its H100 DGX TE figure is not read here, and
# TE PR #1191 (2024-09) timed Megatron-Core's TEColumnParallelLinear at 140 -> 115 us a forward
# against ColumnParallelLinear's 74 us (BF16, TP 1, host not stated). Applied as 2.7 operators
# for each of a layer's four TE linears forward and backward it would move the NeMo rows by 1-3
# points (the 32B one-step-off -11% -> -9%, GB200 lines 8-11 by 1-3 points, read before the
# Grace host above): not the gap.
# The kernel path (issue 13): NeMo-RL's Megatron worker builds the policy through Megatron-Bridge
# (NVIDIA-NeMo/RL@108bffda nemo_rl/models/policy/workers/megatron_policy_worker.py: the HF
# checkpoint converted, model_cfg from its provider), whose GPTModelProvider defaults to
# Transformer Engine's layer spec (Megatron-Bridge@1e9a459b, the submodule of that commit,
# src/megatron/bridge/models/gpt_provider.py default_layer_spec -> transformer_engine_layer_spec)
# with gradient_accumulation_fusion on where its kernel builds; the worker sets apply_rope_fusion
# and bias_activation_fusion from grpo_math_1B.yaml (both True; no recipe here changes them).
# Training runs no CUDA graphs (the worker's CUDA-graph settings are for Megatron generation,
# not used: vLLM). The MoE row's dispatcher is grpo_math_1B.yaml's "allgather" with
# moe_permute_fusion false and the router frozen in fp64. So: kernels megatron
# (estimate/host.py MEGATRON_*, megatron_saved.py). The loss: NeMo-RL calls the model without
# labels and takes log-probs by its own DistributedLogprob (nemo_rl/distributed/model_utils.py:
# the logits cast to fp32, a log-softmax, its exp kept for backward), not Megatron's
# cross-entropy; costed as the megatron loss kernel (setup.loss_kernel_of's default there: the
# same fp32 upcast and one fp32 softmax kept), which counts 54 bytes a logit of traffic where
# DistributedLogprob's passes count about 70 (forward: head write 2, cast 2 + 4, max 4,
# subtract 8, exp-sum 12, subtract 8, exp 8; backward: neg 8, mul 8, the cast back 4 + 2):
# a lower end by some 16 bytes a logit
_NEMO_MEGATRON = {"method": "full", "checkpointing": True, "zero_stage": 1,
                  "fused_attention": True, "micro_batch": 1, "kernels": "megatron"}


def nemo_prompt_tokens(row: int) -> int:
    """Mean prompt tokens a sequence of a NeMo-RL performance-summary row: the page's
    Tokens/sec/GPU x Total Step time x GPUs / the step's sequences (prompts x generations: 64 x
    32 on the 8B and 32B rows, 32 x 16 DeepSeek-V3, 16 x 32 Qwen3-235B) is the step's tokens a
    sequence, less its 'G-Average Seq len' (the mean response). Both are the page's own
    figures ("Tokens/sec/GPU = Total Tokens Processed / (Time for Stage x Number of GPUs)",
    docs/about/performance-summary.md @108bffda; means of 5 steps, which the page says makes
    the equation hold only roughly). It gives 127-136 tokens on the ten NeMo rows' Llama-3.1
    runs and 101-110 on the Qwen3 runs: the same prompts (OpenMathInstruct-2 through
    examples/prompts/cot.txt), Llama-3.1's chat template adding its default system header."""
    r = rows()[row]
    tokens_per_gpu_s = float(r["other_times"].split()[1].replace(",", ""))
    sequences = int(r["prompts_per_step"]) * int(r["generations_per_prompt"])
    per_sequence = tokens_per_gpu_s * float(r["step_time_s"]) * int(r["n_gpus"]) / sequences
    return round(per_sequence - float(r["response_tokens_mean"]))


# The ten NeMo-RL rows (CSV lines 2-11) as their recipes at 108bffda set them
# (examples/configs/recipes/llm/performance/: H100 grpo-llama3.1-8b-instruct-2n8g{,-async-1off,
# -fp8-async-1off}.yaml, grpo-qwen3-32b-{4n8g,8n8g-async-1off}.yaml, grpo-qwen3-30ba3b-4n8g.yaml;
# GB200 grpo-llama3.1-8b-instruct-2n4g{,-async-1off}.yaml, grpo-qwen3-32b-{4n4g,8n4g-async-1off}
# .yaml; all over examples/configs/grpo_math_1B.yaml):
# - the prompt from the page's own throughput (`nemo_prompt_tokens`), the longest response the
#   rest of max_total_sequence_length 4096 (vllm max_model_len 4096);
# - Llama-3.1-8B trains with Megatron TP1 (grpo_math_1B.yaml's tensor_model_parallel_size 1; the
#   2n4g recipes set it too) and PP1, except the H100 colocated recipe (2n8g), which sets
#   pipeline_model_parallel_size 2 (its async-1off children set it back to 1): pp 2 there.
#   Data parallelism with Megatron's distributed optimizer (use_distributed_optimizer: true)
#   as ZeRO-1, Transformer Engine's fused attention, as the Qwen rows; its micro-batches are
#   sequence-packed to sequence_packing.train_mb_tokens = max_total_sequence_length x
#   train_micro_batch_size = 4,096 x 1 tokens, its log-prob passes to logprob_mb_tokens =
#   4,096 x logprob_batch_size 2 (grpo_math_1B.yaml: sequence_packing.enabled True); the Qwen
#   rows' micro_batch 1 is that packing already (one ~3,360-token sequence a 4,096-token
#   micro-batch; their logprob_batch_size 4 gives the phase's default 16,384-token budget);
# - with PP > 1 NeMo-RL pads every packed micro-batch to the batch's longest one, in the
#   update and in both log-prob passes (NVIDIA-NeMo/RL@108bffda nemo_rl/models/megatron/
#   common.py _get_pack_sequence_parameters_for_megatron: "when PP is used, all sequences must
#   have the same length", pad_packed_seq_to = the batch's max packed length; with PP 1 none;
#   models/policy/workers/megatron_policy_worker.py train, get_logprobs, get_topk_logits): the
#   PP rows (the 8B colocated PP2, the 32B TP4 PP4 ones) set pad_packed_to_longest, each
#   micro-batch padded to its 4,096-token budget (plan/rl_padding.py: the longest a rank's
#   micro-batch can be, an upper end); the 32B rows as packed by that budget (1 sequence a
#   micro-batch, as their micro_batch 1 was), log-prob passes to 4 x 4,096 = 16,384 tokens;
# - Qwen3-32B (TP4 PP4 with sequence parallelism on H100, TP2 on GB200) and Qwen3-30B-A3B (TP1
#   EP8) train without recompute: their recipes leave megatron_cfg.activation_checkpointing at
#   grpo_math_1B.yaml's false (megatron_policy_worker.py sets recompute_granularity "full" only
#   when it is true); the 8B recipes set it true;
# - GB200 as H100: the same recipe bodies, vLLM 0.11.2 (pyproject.toml), enforce_eager False,
#   no attention-backend or CUDA-graph setting for GB200 (vllm_worker.py keys only
#   enable_prefix_caching on the compute capability, >= 8 on both GPUs).
_NEMO_PACKED_8B = {"update_tokens_per_gpu": 4096, "scoring_tokens_per_gpu": 2 * 4096}
# the 32B recipes' packing: train_mb_tokens 4,096 x 1, logprob_mb_tokens 4,096 x 4
_NEMO_PACKED_32B = {"update_tokens_per_gpu": 4096, "scoring_tokens_per_gpu": 4 * 4096}
_NEMO_MEGATRON_PACKED = {k: v for k, v in _NEMO_MEGATRON.items() if k != "micro_batch"}


def _nemo_prompt(row: int) -> dict[str, int]:
    """A NeMo row's prompt (`nemo_prompt_tokens`) and longest response (4,096 - prompt)."""
    prompt = nemo_prompt_tokens(row)
    return {"prompt_tokens": prompt, "max_response_tokens": 4096 - prompt}


def _nemo_assumed(row: int, checkpointing: bool) -> str:
    """The assumed-text every NeMo row shares; a GB200 row (by the CSV's gpu) adds its NVLink
    domain."""
    prompt = nemo_prompt_tokens(row)
    recompute = ("full recompute (the recipe's activation_checkpointing: true)" if checkpointing
                 else "no recompute (grpo_math_1B.yaml's megatron_cfg.activation_checkpointing: "
                 "false; the recipe leaves it)")
    nvl72 = ("; the job's GPUs in one NVLink domain (GB200-NVL72; which trays of which rack not "
             "stated); the Grace host 2.75x the H100 host's time an operator (88 us: torch "
             "Linear's CPU time on GB200 over an H100 DGX's, TransformerEngine issue #2053), "
             "vLLM's engine step too (2.3 -> 6.3 ms a decode step)"
             if rows()[row]["gpu"].startswith("GB200") else "")
    return (f"prompt {prompt} tokens (the page's tokens/s/GPU x step x GPUs / 2,048 sequences, "
            f"less the mean response); the table's 'G-Average Seq len' taken as the mean "
            f"response; longest = 4096 - prompt = {4096 - prompt:,}; Megatron's distributed "
            f"optimizer as ZeRO-1; {recompute}{nvl72}; kernels megatron (the worker builds "
            f"Megatron-Bridge's Transformer Engine layer spec, rope and SwiGLU fusions on: "
            f"megatron_policy_worker.py @108bffda); log-probs by NeMo-RL's DistributedLogprob "
            f"(fp32 log-softmax) costed as the megatron loss kernel (a lower end on its "
            f"traffic)")


# the packed 8B rows' text; with PP > 1 NeMo-RL pads each packed micro-batch to the longest
_NEMO_PACKED_8B_ASSUMED = ("; micro-batches packed to 4,096 tokens, log-prob passes to 8,192 "
                           "(the recipe's sequence packing)")


def _nemo_pp_padding(row: int, sequences_per_micro_batch: int) -> str:
    """The assumed-text of a NeMo row trained with PP > 1: each packed micro-batch padded to the
    longest (pad_packed_to_longest), taken as the 4,096-token budget: an upper end; the share
    it adds to the update's compute, 4,096 over the micro-batch's own tokens at the mean."""
    r = rows()[row]
    seq = nemo_prompt_tokens(row) + float(r["response_tokens_mean"])
    pad = 4096 / (sequences_per_micro_batch * seq) - 1
    return (f"; NeMo-RL pads every packed micro-batch to the longest under PP (megatron/common.py"
            f" @108bffda) in the update and the log-prob passes: each taken as its whole budget, "
            f"an upper end (+{pad:.0%} of the update's compute: {4096:,} tokens for "
            f"{sequences_per_micro_batch} x {seq:,.0f})")


# GPUs one NVLink domain joins, by catalog GPU, where it is not the 8 of a DGX/HGX node: a
# GB200-NVL72 rack's 72 GPUs (18 trays of 4, NeMo-RL's cluster.gpus_per_node 4) all reach each
# other through its NVLink switches at the catalog's 1,800 GB/s (NVIDIA GB200 NVL72 page, the
# catalog's source), so a job of up to 72 GPUs has no inter-node network in its collectives
_NVLINK_DOMAIN_GPUS = {"gb200": 72}
# The host of a GB200 tray is a Grace (Arm) CPU: the catalog's gb200 carries its operator-issue
# ratio (host_op_time_ratio 2.75, NVIDIA/TransformerEngine issue #2053: torch.nn.Linear's CPU
# time 37.08 us on GB200 against 13.48 on an H100 DGX; 33.17 on GH200; TE's Linear 99.66 us on
# GB200, 90.53 on GH200), so every estimate on it, these rows' included, takes 2.75 x the 32 us
# of assumptions.HOST_S_PER_OP: a source-stated ratio, not set from any row. (The TE row of the
# H100 DGX is not read here, so the TE-over-torch ratio, 2.7 on both Grace hosts, is not applied.)
# verl's fully-async README rows on H20 (FSDP2 or Megatron + vLLM): the scripts' settings
_VERL_PROMPT = ("prompt 256 tokens (script: max 2048; DAPO-Math prompts are short, not "
                "stated)")
_VERL_ASSUMED = (_VERL_PROMPT + "; mean response 1/4 of the maximum (not stated: the README says "
                 "lengths change strongly during training)")
# The 7B recipe's mean response, FITTED (`verl_7b_mean_fit`, tuned rows 12 and 14, CSV lines: the
# same two rows as the driver's rate): the README states none, and a quarter of the 28K maximum
# (7,168 tokens, the assumption before) cannot be: at it the 32-GPU update alone needs 586 s at
# 100% of the H20's peak where verl measured 270 s. The mean at which the old-log-prob pass of
# each tuned row takes its measured time (the pass is one forward over every sequence, and the
# driver's transfer, fitted from the same pair, is the part no GPU count removes); rows 13 and
# 15-17 (the same recipe, other runs) are held out. The pass is costed as a forward with no loss
# term (estimate/generation.py scoring_time_s), so the actor's loss kernel (verl-logprobs since
# issue 13, hf before) does not enter the fit: it gives the same under either. 1,672 until
# 2026-11-24, 1,696 since the Hopper attention rates and GEMM efficiency were corrected (the
# H20 is a Hopper part).
VERL_7B_MEAN = 1_696
_VERL_MEAN_FITTED = (_VERL_PROMPT + f"; mean response {VERL_7B_MEAN:,} tokens FITTED on rows 12 "
                     "and 14 (the mean at which their old-log-prob pass takes its measured "
                     "time; the README states none)")
# The fully-async (streamed) runs' mean response, FITTED apart (`verl_7b_streamed_mean_fit`,
# tuned row 17, CSV line; issue 13): the mean at which the estimate's policy update of the
# 64 + 64 run takes its measured 113.16 s. Rows 15, 16 and 42 (the 16 + 16 and 32 + 32 runs and
# the staleness-0 pipeline) are held out. Why the streamed runs get their own mean, read from
# volcengine/verl at b25bb7d4 (2025-10-17, the recipe's first commit, recipe/fully_async_policy/;
# the table's rows were published at 85d5b2ee and 6f0b21c5, whose code diffs leave the lines
# read here as they were): their trainer trains what the synchronous step trains, 512
# prompts x n 16 a README step (fully_async_trainer.py: `required_samples` =
# ppo_mini_batch_size 32 x require_batches 4 prompts a local update,
# `trigger_parameter_sync_step` 4 local updates a parameter sync, the
# timers summed over them, detach_utils.py MetricsAggregator "time_sum"; rollouter
# `total_train_steps` = 512 x 400 / (128 x 4) = 400), with no group filtering
# (ray_trainer.py `_process_batch_common` has none), nothing dropped (message_queue.py drops only
# when its queue is full, counted as dropped_samples), rollout log-probs as the old ones, and
# the actor's update (dp_actor.py `update_policy`: recompute, use_remove_padding, dynamic
# batches) the same code as the synchronous worker's. So only the tokens a sequence can differ,
# and the README says they do: "the number of samples issued each time in streaming affects the
# response length during training, which in turn affects training time" (its require_batches
# ablation on these 64 trainer GPUs: update 181.1 / 128.1 / 95.1 s for 1 / 2 / 4). At the
# synchronous mean, row 15's update would need more than the H20's whole peak
# (`update_bound_sequence_tokens`). The three streamed updates lie on one line a + b/GPUs
# (`streamed_update_line`: rows 15 and 17 give a = 61 s, the estimate's driver transfer being
# 45 s of it, and row 16 lies within 6% of the line), so what differs from the synchronous runs
# is the work per GPU, the tokens, not a fixed cost.
# Note for docs/rl.md (issue 13, the fully-async 7B rows, 2026-11-25; replaces the claims that
# rows 15 and 16 stay 2x off and that a mean fitted on an async row would test nothing):
# - What a README step is, read at the code the table was published with (b25bb7d4, the
#   recipe's first commit; 85d5b2ee and 6f0b21c5 add the rows and change none of the code
#   read here): the trainer's "step" and "update_actor" are each summed over the 4 local updates of
#   one parameter sync (MetricsAggregator "time_sum" for every timing_s/ key, logged at the
#   sync, the x-axis the parameter version), each local update 128 prompts x 16; the totals
#   agree (row 15: 1d 9h 26m / 400 = 301 s for its 294.8 s step; per local update it would
#   be 4 x 294.8 x 400 s, 5.5 days). Not a mini-batch, not one local update.
# - Partial rollout: the streamed rows' rollouts are hidden behind the trainer in the
#   estimate at either mean (190 / 95 / 48 s of production at 1,696 tokens; 74 / 37 / 19 s at
#   560), so the tail it cuts enters no prediction; row 42 (staleness 0, the README's mode b)
#   runs without it, and its step is still set by the longest response at the 28,672-token cap
#   (192 s alone of its 256 s of rollouts).
# - Length statistics: none published. The README (EN and ZH at df340d70 and at the table's
#   first versions), docs/advance/fully_async.md and the recipe's history give none; the
#   README links W&B projects, which are not stored here.
# - The figures: at the synchronous mean (1,696 tokens) rows 15 / 16 / 17 / 42 were +132 /
#   +103 / +55 / +62%; at the streamed mean (560, fitted on row 17's update) +10 / +8 / -4
#   (tuned) / +23%: the held-out updates 293.1 / 173.1 s for 269.8 / 157.0 measured, row 42's
#   113.3 s for 98.8. Held out 20 of 31 -> 23 of 30 within 25%, 2 -> 0 off by more than 2x;
#   no other row moves. What the held-out rows test: the update's scaling with the trainer's
#   GPUs (16 / 32 / 64) and its fixed part (the driver's transfer), the intake, and the
#   staleness-0 pipeline's composition; not the lengths themselves, which are one fitted input
#   for the four streamed runs, as 1,696 is for the three synchronous ones. The runs' own
#   updates imply 480 / 456 / 560 / 368 tokens (update_implied_mean_report): one figure
#   holds them within 25% of their steps.
# - Still off: row 13 (the 64-GPU synchronous run, +64%: its rollouts 323 s for 151 measured,
#   the 28,672-token longest response alone 192 s; its update 203 s for 133; its old-log-prob
#   pass on its siblings' line, 71.8 s for 70.3), and the tuned row 14 (+27%), both with the
#   synchronous mean; the longest response's decode step (6.7 ms at TP 4 on the H20: the
#   SGLang-fitted bandwidth and vLLM V0's host step) is the part a measured vLLM V1 decode on
#   an H20 would settle.
VERL_7B_STREAMED_MEAN = 560
_VERL_STREAMED_MEAN_FITTED = (
    _VERL_PROMPT + f"; mean response {VERL_7B_STREAMED_MEAN:,} tokens FITTED on row 17's update "
    "(the fully-async runs' mean: the README states none and says the streaming changes the "
    "response length; the synchronous runs' fitted 1,696 cannot fit row 15's update at the "
    "H20's peak)")
# the scripts' actor_ppo_max_token_len: 2 x (max prompt + max response) = 61,440 tokens per GPU;
# train_prompt_mini_bsz 32 of the 512 prompts: 16 mini-batches (optimizer steps) a step, each
# packed apart (verl@df340d70 fsdp_workers.py normalises ppo_mini_batch_size x rollout.n over
# GPUs / SP; dp_actor.py update_policy splits by it before packing)
# verl's vLLM runs up to 1,024 sequences at once (rollout.max_num_seqs: 1024 in
# verl/trainer/config/rollout/rollout.yaml, read @035682ed; no script here overrides it), where
# vLLM's own default is 256
_VERL_7B = dict(single_controller=True, prompts_per_step=512, generations_per_prompt=16, prompt_tokens=256,
                response_tokens=VERL_7B_MEAN, max_response_tokens=28672, reference_model=False,
                reward={"kind": "rule"}, rollout_tensor_parallel=4, update_tokens_per_gpu=61_440,
                mini_batches=16, rollout_max_num_seqs=1024)
# Ulysses sequence parallelism (verl's ulysses_sequence_parallel_size 4): verl/utils/ulysses.py
# splits every token-wise layer by sequence and, around attention, all-to-alls
# [b, s/n, h] -> [b, s, h/n] so each GPU attends over the whole sequence for h/n heads: the
# same split of tokens, activations and FLOPs as context parallelism, expressed as cp 4
# The actor's log-probs as verl's FSDP actor takes them (issue 13): the 7B scripts leave
# model.use_fused_kernels at its default False (verl/trainer/config/model/hf_model.yaml
# @df340d70) and entropy_coeff 0 with calculate_entropy false (actor.yaml), so update_policy's
# _forward_micro_batch (verl/workers/actor/dp_actor.py @df340d70) calls the model without labels,
# divides the bf16 logits by the temperature in place and takes flash-attn's Triton
# cross_entropy_loss with inplace_backward=True (verl/utils/torch_functional.py
# logprobs_from_logits): the loss kernel verl-logprobs. flash-attn is verl's GPU extra
# (setup.py GPU_REQUIRES); without it verl falls back to a log-softmax over the whole logits.
_VERL_LOGPROBS = {"loss_kernel": "verl-logprobs"}
_VERL_LOGPROBS_ASSUMED = ("; the actor's log-probs as verl's dp_actor takes them without fused "
                          "kernels (the scripts' default): flash-attn's Triton cross-entropy "
                          "with inplace_backward (loss kernel verl-logprobs; flash-attn "
                          "installed, not stated)")
_VERL_7B_SETTINGS = {"model": "qwen2.5-7b", "method": "full", "checkpointing": True,
                     "zero_stage": 3, "cp": 4, **_VERL_LOGPROBS}
_VERL_7B_SHAPE_ASSUMED = ("; Qwen2.5-Math-7B as qwen2.5-7b (the same shape; "
                          "Math-7B's own config has 4,096 positions, the run's 28K responses a "
                          "longer window, how it was set not stated); Ulysses SP 4 as cp 4 (its "
                          "all-to-alls costed as cp's KV ring); FSDP2 as ZeRO-3"
                          + _VERL_LOGPROBS_ASSUMED)
_VERL_7B_ASSUMED = _VERL_MEAN_FITTED + _VERL_7B_SHAPE_ASSUMED
_VERL_7B_STREAMED_ASSUMED = _VERL_STREAMED_MEAN_FITTED + _VERL_7B_SHAPE_ASSUMED
# the 30B script's actor_ppo_max_token_len: max prompt + max response = 10,240 tokens per GPU;
# its vLLM runs without CUDA graphs: actor_rollout_ref.rollout.enforce_eager=True
# (verl/experimental/fully_async_policy/shell/grpo_30b_a3b_base_math_megatron_96_32.sh
# @df340d70 line 192; verl's default is False, verl/trainer/config/rollout/rollout.yaml line 38),
# taken for the colocated baseline too, like the script's other settings
_VERL_30B = dict(single_controller=True, prompts_per_step=512, generations_per_prompt=16, prompt_tokens=256,
                 response_tokens=2048, max_response_tokens=8192, reference_model=True,
                 reward={"kind": "rule"}, rollout_tensor_parallel=4, update_tokens_per_gpu=10_240,
                 rollout_cuda_graphs="off", rollout_max_num_seqs=1024)
# verl's Megatron actor builds Megatron-Core's GPT model from Transformer Engine's layer spec
# (verl/models/mcore/model_initializer.py @df340d70: get_gpt_decoder_block_spec(...,
# use_transformer_engine=True)), and the 30B script turns on apply_rope_fusion,
# bias_activation_fusion, bias_dropout_fusion, gradient_accumulation_fusion, moe_grouped_gemm
# and moe_permute_fusion (shell/grpo_30b_a3b_base_math_megatron_96_32.sh lines 160-171): the
# kernel path megatron (estimate/host.py MEGATRON_*; issue 13). Its loss kernel then defaults to
# megatron (setup.loss_kernel_of), which is what verl's Megatron actor calls:
# megatron.core.tensor_parallel.vocab_parallel_cross_entropy (verl/utils/megatron/
# tensor_parallel.py vocab_parallel_log_probs_from_logits, megatron_actor.py line 668)
_VERL_30B_SETTINGS = {"model": "qwen3-30b-a3b", "method": "full", "checkpointing": True,
                      "zero_stage": 1, "tp": 2, "ep": 8, "fused_attention": True,
                      "kernels": "megatron"}
_VERL_30B_ASSUMED = (_VERL_ASSUMED + "; Megatron TP2 EP8 and vLLM enforce_eager=True (the async "
                     "script's, for both rows); distributed optimizer as ZeRO-1; checkpointing on "
                     "(not stated); kernels megatron: Megatron-Core's GPT model of Transformer "
                     "Engine's layer spec (verl/models/mcore/model_initializer.py @df340d70) with "
                     "the script's rope, SwiGLU, bias-dropout, wgrad-accumulation and MoE permute "
                     "fusions; the actor's log-probs by Megatron-Core's vocab_parallel_cross_entropy "
                     "(verl/utils/megatron/tensor_parallel.py), the megatron loss kernel")

# the colocated baselines' scripts are not published: vLLM's memory share is the phase's colocated
# assumption (assumptions.COLOCATED_ROLLOUT_MEMORY_UTILISATION), not a stated setting
_VERL_COLOCATED_ASSUMED = ("; vLLM's memory share 0.5, the phase's colocated assumption (the "
                           "baseline's script is not published)")

# verl's fully_async_policy rows (README @df340d70: require_batches 4, trigger_parameter_sync_step
# 4, staleness_threshold 0.5, partial_rollout True; 512 prompts per parameter sync, the README's
# "step": the trainer's timers summed over the 4 local updates of one sync, detach_utils.py
# MetricsAggregator "time_sum"). The scripts' settings at the same commit
# (shell/dapo_7b_math_fsdp2_{16_16,32_32,64_64}.sh): rollout TP 4, gpu_memory_utilization 0.80,
# use_rollout_log_probs (no old-log-prob pass), actor not offloaded, KL off
# Note for docs/rl.md (issue 13, the FSDP2 update rows 15-17 and 42, 2026-11-24): each setting
# that could make verl's update cheaper than the phase's was read again at df340d70 and is
# already what the phase costs, so nothing was changed. use_remove_padding=True (the script):
# dp_actor.py runs the real tokens only, and the phase costs sequences x (prompt + mean), not
# the agent loop's padding to 28K. use_dynamic_bsz: update_policy splits each local update by
# ppo_mini_batch_size (32 x 16 over the SP groups), then prepare_dynamic_batch packs each
# split to ppo_max_token_len_per_gpu x ulysses_sequence_parallel_size (61,440 x 4): the
# phase's update_tokens_per_gpu and cp 4 (micro-batches of 125 / 64 / 32 sequences; the step is
# matmul-bound, 66.7 s of an optimizer step's 74.2 s in matmuls on 16 GPUs, so the count barely
# matters). Recompute: enable_gradient_checkpointing True (model/hf_model.yaml), which
# fsdp_workers.py applies to the actor. ppo_epochs 1, calculate_entropy false and
# entropy_coeff 0 (actor.yaml), use_prefix_grouper false, actor offload False, no reference
# model, compute_prox_log_prob False (old_log_probs = rollout_log_probs, ray_trainer.py
# _process_batch_common). fsdp_size=8 (hybrid sharding inside a node) is not modelled; the
# estimate hides all but 0.9 s of an optimizer step's FSDP traffic either way. A local update takes
# ppo_mini_batch_size x require_batches = 128 samples (fully_async_trainer.py), each one prompt
# repeated rollout.n = 16 times (detach_utils.py prepare_single_generation_data): 8,192
# sequences a sync. At the twin's fitted mean, 8,192 x 1,952 tokens at 43.6 GFLOP a token (6N
# + attention, no recompute) need 294 s on 16 H20s at 100% of 148 TFLOPS, above row 15's
# measured 269.8 s (update_bound_sequence_tokens: at most 1,838 tokens a sequence, 1,379 with
# the recompute): no cost of the update can be wrong enough; the run trained fewer tokens
# than its synchronous twin, which only shorter responses can mean.
_VERL_ASYNC = {"placement": "dedicated", "async_rollout": True, "partial_rollout": True,
               "old_logprob_pass": False}
# the rollouter keeps 16 prompts in flight per rollout server (fully_async_rollouter.py
# set_max_required_samples: max_concurrent_samples = servers x 16, capped by max_required_samples,
# which is larger in every row here), each with its n = 16 responses: 256 sequences an engine
_VERL_IN_FLIGHT = {"rollout_batch": 16 * 16}
_VERL_7B_ASYNC = {**_VERL_7B, **_VERL_ASYNC, **_VERL_IN_FLIGHT, "rollout_memory_utilisation": 0.8,
                  "response_tokens": VERL_7B_STREAMED_MEAN}
# staleness 0 (the README's "stream off policy pipeline", its 128-card mode table): no stream
# across syncs (the rollouter issues one sync's 512 prompts per parameter version and waits for
# the sync), so each sync waits for its longest response; the trainer's 4 local updates of 128
# prompts each (trigger_parameter_sync_step 4, require_batches 4) start as their prompts finish
# the rollouter refills a server's 16 prompts in flight as each finishes (a cap on the sequences
# running, not a blocking generate call that waits for its own longest response): the engine's
# max_num_seqs, 16 x 16 = 256, not rollout_batch (which the paged replay, plan/rl_paged.py, takes
# as blocking calls)
_VERL_7B_PIPELINE = {**_VERL_7B, "rollout_max_num_seqs": 16 * 16, "placement": "dedicated",
                     "old_logprob_pass": False, "rollout_memory_utilisation": 0.8,
                     "updates_per_sync": 4, "response_tokens": VERL_7B_STREAMED_MEAN}
_VERL_ASYNC_ASSUMED = ("; the README's staleness 0.5 (its 7B scripts at df340d70 say 0.1): any "
                       "value above 0 lets the engines run on while the trainer trains; the KV "
                       "cache of a stream taken at prompt + mean response a sequence")
# the 30B script (shell/grpo_30b_a3b_base_math_megatron_96_32.sh @df340d70): 96 rollout GPUs
# (12 nodes), 32 trainer GPUs, rollout TP 4 at 0.7, require_batches 1 x ppo_mini_batch 128 x 4
# syncs = 512 prompts, KL loss (reference model), actor TP2 CP2 EP8, Megatron param_offload,
# grad_offload and optimizer_offload (the actor's state on the host between phases)
_VERL_30B_ASYNC = {**_VERL_30B, **_VERL_ASYNC, **_VERL_IN_FLIGHT, "rollout_memory_utilisation": 0.7,
                   "offload_between_phases": True}

# EasyR1 v0.3.2's performance baselines (assets/baselines.md @55b40c8c; defaults
# examples/config.yaml @8460e817): Qwen2.5-VL GRPO on Geometry3k, 512 prompts x 5, colocated vLLM
# at gpu_memory_utilization 0.6, KL loss (reference model), the vision tower trained
# (freeze_vision_tower false), actor weights and optimizer offloaded between phases
# (actor.offload), FSDP full shard, gradient checkpointing, padding-free dynamic batching
_EASYR1_IMAGE_PIXELS = 262_144  # data.min_pixels: verl/utils/dataset.py process_image scales up
_EASYR1_TEXT_TOKENS = 100       # assumed: chat template + question + format prompt (not stated)
_EASYR1_PADDED = 2048 + 2048    # max_prompt_length + max_response_length: the padded input_ids
# EasyR1's actor takes its log-probs as verl's does (issue 13): _forward_micro_batch divides the
# logits by the temperature in place and calls VF.log_probs_from_logits, flash-attn's Triton
# cross_entropy_loss with inplace_backward=True whenever flash-attn imports (a requirement:
# requirements.txt flash-attn>=2.4.3), under torch.compile (actor use_torch_compile true by
# default): verl/workers/actor/dp_actor.py and verl/utils/torch_functional.py @8460e817. No
# entropy is computed from the logits there, so nothing turns the in-place backward off.
# trainer.val_freq 5 (examples/config.yaml @8460e817): a validation pass inside every 5th step's
# timer over Geometry3k's test split, one response each: 601 problems (the hiyouga/geometry3k
# dataset card: train 2,101, validation 300, test 601, the Inter-GPS img_diagram.png files;
# 12.2 MB for the test split's 601 examples)
_EASYR1_VALIDATION = {"validation_every_steps": 5, "validation_prompts": 601}
# Note for docs/rl.md (EasyR1 rows, issue 13, 2026-11-24): the host's part of EasyR1's phases,
# read at 8460e817, now counted, no constant set from these rows.
# - The vision tower's eager operators (estimate/vision_host.py: Qwen2.5-VL 42 forward, 78
#   backward, 40 recomputed a block, 32 blocks; 36 + 20 an image and 32 outside them; counted
#   on CPU with count_ops, transformers 5.23), combined with the tower's own GPU work apart
#   from the decoder's (timing.host_gpu_combined_s): the tower's output is the decoder's input
#   and `_get_input_embeds` reads the image-token count back to the host between them
#   (verl/models/transformers/qwen2_vl.py `.sum().item()`), so in forward its operators go out
#   while the GPU has nothing else queued. At 5-6 images a micro-batch its 5,300 operators
#   (0.17 s at the assumed 32 us) hide behind 0.06 s of its GPU work. Policy update (GPU work,
#   as the Actor MFU times it) 22.6 / 34.9 / 28.7 / 239.8 / 166.3 s -> 30.3 / 43.9 / 30.2 /
#   243.9 / 181.9 s against 56.6 / 68.3 / 48.7 / 349.8 / 258.4 s from the MFU; the cost per
#   micro-batch fewer (rows 21 -> 22) 0.13 -> 0.28 s of the measured 0.43 s
#   (fsdp_check.py: with none of the FSDP traffic hidden it would now overshoot, 0.50 s).
# - The scoring passes' operators (plan/rl_scoring_host.py): each forward micro-batch of
#   `micro_batch_size_per_device_for_experience` x 4,096 tokens issues the decoder's and the
#   tower's forward operators; 27 micro-batches a GPU a pass for the 3B. Rest of the step
#   43.2 / 56.1 / 57.0 / 195.4 / 228.3 -> 47.0 / 59.3 / 57.7 / 196.7 / 233.9 s (measured
#   63.4 / 76.7 / 71.3 / 230.2 / 271.6). It moves the NeMo rows too (their mapping runs the
#   eager path's operators, which their update already counted; Megatron-Core's are fewer).
# - Read and not the gap: FSDP1 gathers bf16 (MixedPrecision param_dtype) where bf16-amp
#   costs fp32 gathers, and reduce-scatters fp32 (mp_reduce_dtype) where the 32B's bf16 costs
#   bf16: a few tenths of a second exposed either way (not changed: the setup model holds no
#   FSDP dtype); the weight sync gathers fp32 DTensors one tensor at a time
#   (fsdp_vllm.py `full_tensor()`), under 1 s; the optimizer and parameter H2D copies are
#   non_blocking from pinned memory (`.to("cpu", non_blocking=True)` pins), partly inside the
#   update's timer, 0.3-0.5 s. Still not counted: checkpoint saves every 5 steps inside the
#   step timer (the disk is not stated), FSDP1's per-unit hook time (no measured figure), and
#   whatever makes the GPU-bound rows' update (7B at 4 x 4,096 tokens, 32B, L20) 30-38% slower
#   than the GEMM-efficiency roofline plus these (NCCL kernels beside the GEMMs are not costed).
# Note for docs/rl.md (EasyR1 rows, issue 13, second pass, 2026-11-24): read again at 8460e817.
# - Counted now: vLLM's level-1 sleep. The sharding manager wakes the engine's weights before
#   each rollout and validation pass and sleeps it after (fsdp_vllm.py load_vllm_and_sync_weights
#   / offload_vllm; vllm_rollout_spmd.py enable_sleep_mode, sleep(level=1)); vLLM's
#   CuMemAllocator copies the "weights" buffers to pinned host memory and back with plain
#   cudaMemcpy (device_allocator/cumem.py): each GPU's bf16 engine shard down and up, 0.15 /
#   0.33 / 0.33 / 0.66 / 0.33 s a step (rollout_sleep_offload, plan/rl_engine_sleep.py).
# - Where the update's miss lies (easyr1_micro_batch_split, exact from rows 21 and 22, which
#   differ only in their micro-batches): the MFU's update is 0.436 s a micro-batch + 0.174 ms
#   a token; the estimate's 0.302 s + 0.106 ms. Per token the 7B's update runs at about 40% of
#   989 TFLOPS over its counted FLOPs (6N + recompute + the tower's 1,296 patches an image),
#   where the estimate takes the GEMM efficiency 0.69: that, not the micro-batch count, is
#   most of the gap (16 s of row 21's 24.4 s and of row 22's 18.5 s).
# - Read and not the gap, or not expressible: EasyR1's patched flash attention syncs the
#   host three times a decoder layer (flash_attention_utils.py: `(diff(position_ids) >=
#   0).all()` as a bool, `nonzero`, and max_length handed to flash-attn as an int), which caps
#   how far the host runs ahead but, under the host/GPU p-norm, adds nothing that a counted
#   figure could set; FSDP1's own kernels (scripts/fsdp1_unit_ops.py, counted on CPU with
#   gloo, 2 ranks, MixedPrecision, checkpointing, accumulation: 9 a unit a micro-batch, two
#   all-gathers, one reduce-scatter, the casts, and 28 record_function markers, and the
#   plain model's per-parameter gradient adds not issued) are about 5% of a layer's operators;
#   forward_prefetch=False leaves each forward all-gather beside one layer's compute, under a
#   millisecond on NVLink; the update's 4 mini-batches of 80 sequences are balanced only over
#   the whole 320 a rank (ray_trainer.py _balance_batch), so each micro-batch waits for the
#   rank with the most tokens (a few per cent: the response lengths' spread is not stated);
#   the rule reward (mathruler grade_answer, sympy) runs in a Ray actor beside the log-prob
#   passes, its time not stated; checkpoint saves every 5 steps inside the step timer, sharded
#   fp32 weights and AdamW moments (12 bytes a parameter: 45 / 99 / 99 / 99 GB a save for
#   3B / 7B, 201 GB for the 32B's bf16 weights and moments), 9-40 GB a step: the disk's rate
#   is not stated (at 2 GB/s, 4.5-20 s a step).
# Note for docs/rl.md (EasyR1 rows, issue 13, third pass, 2026-11-25): the images outside the
# trainer's passes, read at 8460e817 (vLLM 0.10.0 and transformers 4.54-4.56 as its Dockerfile
# and requirements pin them), now counted (plan/rl_images.py), no constant set from these rows.
# - The engine's vision tower at prefill: vLLM runs Qwen2.5-VL's ViT (32 blocks of 1,280, 4 of
#   them full attention, the rest 112-pixel windows: 1.71 TFLOP for a 504 x 504 image's 1,296
#   patches) on each prompt's image, once a prompt: n = 5 rides in SamplingParams, V1 processes
#   the prompt once and its 4 siblings find its KV blocks (image tokens included) cached at
#   allocation, so no encoder input is scheduled for them. 0.17 s a step on 8 H100s (64 or 128
#   prompts an engine, TP 1/2/8), 1.3 s on the L20s. Counted for every vision-language rollout.
# - The workers' image preparation (`image_prep_by_workers`): the batch carries the dataset's
#   PNG bytes, and inside the step's timer each rollout worker decodes and scales its engine's
#   images (`process_image`) and vLLM runs the HF image processor once a prompt, on every GPU of
#   a TP engine (SPMD); each actor worker prepares the distinct prompts of its share before the
#   old-log-prob pass (`_process_multi_modal_inputs`, cached for the ref pass and the update
#   while the uids match): 512 x (1 - (7/8)^5) = 249 prompts a rank after `_balance_batch`. The
#   validation pass iterates its dataloader inside the timer (`_validate`), a fresh iterator
#   whose one worker builds the single batch of 601 (val_batch_size 1,024). At 12.5 ms an
#   image (0.048 s a megapixel, measured on this project's CPU: scripts/bench_image_processing.py,
#   process_image + the fast processor's torch operations, the median of the 3 quietest runs of
#   11.2-25 ms; 20-30 ms with the PIL processor): rollout 1.6 s (6.4 s for the 32B's TP-8
#   engine, every GPU preparing all 512), actor 3.1 s, validation 7.6 s a pass / 5 steps.
#   The training dataloader's own preparation (8 prefetching workers) is ahead of the step.
# - The batch through the driver as EasyR1 pads it: each prompt left-padded to
#   data.max_prompt_length 2,048 (dataset.py `VF.postprocess_data`), not the ~100-token text
#   prompt the driver's bytes took, and Qwen2-VL's M-RoPE position_ids as (batch, 4, seq)
#   (dataset.py, vllm_rollout_spmd.py), not one row: 245.8 KB a sequence in place of 85.1 KB
#   (`padded_prompt_tokens`, rl_driver.MROPE_POSITION_ROWS), at the driver's fitted rate:
#   driver 20.9 -> 26.1 s a step. The fit's verl rows are text models with no padded width
#   set: unchanged.
# - Rows 20-24 -35.4 / -28.5 / -26.4 / -23.9 / -21.5% -> -25.4 / -20.2 / -16.4 / -21.6 /
#   -18.1% (the images alone: -29.7 / -23.8 / -20.7 / -22.5 / -19.1%); the rest of the step
#   (step less the update's GPU work) -26 / -22 / -19 / -14 / -14% -> -7 / -6 / -2 / -8 / -7%
#   of the measured rest; the update unchanged (-46 / -36 / -38 / -30 / -30% against the Actor
#   MFU's). At the PIL processor's 20 ms an image the images alone would give -26.3 / -21.0 /
#   -17.3 / -21.8 / -17.6%, at the quietest 11.2 ms -30.3 / -24.3 / -21.3 / -22.6 / -19.3%.
# - Read and small, not counted: each pass concatenates every sequence's fp32 pixel values on
#   the host (`batch_collate` + `torch.cat`, 6.1 MB an image, 320 a rank) and FSDP's root
#   forward copies them up, pageable: about 2 GB a pass a rank, a second or so a step at host
#   memcpy rates (no figure for this host); the prompts' own tensors out to the engines (512 x
#   6 rows x 2,048 int64, 50 MB, 0.16 s at the driver's rate); the whole batch handed to the
#   rule reward's Ray actor (`compute_reward.remote(batch)`: Ray serialises it in the driver
#   before the old-log-prob call, ~0.7 GB; the fitted rate covers both ends of a transfer, so
#   it would overstate this one-sided put). The tower is trained (freeze_vision_tower false) and
#   counted in the update since the first pass; what makes the update 1.3-1.9x slower than its
#   estimate is still not found.


def easyr1_mean_sequence(row: int) -> float:
    """Mean tokens per sequence of an EasyR1 row (prompt with its image tokens + response):
    the table's throughput (tokens per GPU-second, verl/trainer/metrics.py
    compute_throughout_metrics @8460e817: the batch's attention-mask tokens over the step's
    time and GPUs) x its step time x GPUs / (512 x 5) sequences. It is the step's token count,
    which the source measured, not a time."""
    r = rows()[row]
    throughput = float(r["other_times"].split()[1])
    return throughput * float(r["step_time_s"]) * int(r["n_gpus"]) / (512 * 5)


def _easyr1(row: int, gpu: str, model: str, micro: int, tp: int, precision: str,
            experience: int) -> Case:
    """An EasyR1 row: the mean response is the row's mean sequence less the image's 324 tokens
    (Qwen2.5-VL's 28-pixel merged patches of a 512 x 512 image: every Geometry3k image is
    taken as no larger than EasyR1's min_pixels, which scales it up to that) and the text
    prompt; dynamic batching packs `micro` x the padded 4,096 tokens per micro-batch
    (dp_actor.py @8460e817: max_token_len = micro_batch_size_per_device x input_ids width),
    its scoring passes `experience` x 4,096 (micro_batch_size_per_device_for_experience, the
    same rule in compute_log_prob); the reference model in host memory (ref.fsdp
    .enable_cpu_offload: true) and a validation pass every 5 steps (`_EASYR1_VALIDATION`)."""
    seq = easyr1_mean_sequence(row)
    response = round(seq - 324 - _EASYR1_TEXT_TOKENS)
    per_micro = max(1, int(_EASYR1_PADDED * micro // seq))
    return Case(row, gpu, dict(
        prompts_per_step=512, generations_per_prompt=5, prompt_tokens=_EASYR1_TEXT_TOKENS,
        response_tokens=response, max_response_tokens=2048, reference_model=True,
        reward={"kind": "rule"}, rollout_tensor_parallel=tp, rollout_memory_utilisation=0.6,
        single_controller=True, offload_between_phases=True, ref_offload=True,
        rollout_sleep_offload=True, scoring_tokens_per_gpu=experience * _EASYR1_PADDED,
        image_prep_by_workers=True, padded_prompt_tokens=2048, **_EASYR1_VALIDATION),
        {"model": model, "method": "full", "gpus": 8, "checkpointing": True, "zero_stage": 3,
         "precision": precision, "images_per_example": 1, "image_pixels": _EASYR1_IMAGE_PIXELS,
         "train_vision": True, "micro_batch": per_micro,
         "grad_accum": max(1, -(-128 * 5 // 8 // per_micro)), **_VERL_LOGPROBS},
        f"mean response {response} tokens: the table's throughput x step x 8 GPUs / 2,560 "
        f"sequences = {seq:.0f} tokens a sequence, less 324 image tokens (each Geometry3k image "
        f"taken as at most 512 x 512, brought up to EasyR1's min_pixels 262,144; image sizes not "
        f"stated) and {_EASYR1_TEXT_TOKENS} text-prompt tokens (assumed); longest = the 2,048 cap; "
        f"dynamic batches of {micro} x 4,096 tokens as {per_micro} sequences; "
        + ("AMP as bf16-amp (fp32 weights and moments); " if precision == "bf16-amp"
           else "BF16 as pure bf16 (adamw_bf16); ") +
        f"the reference model's FSDP CPU offload as ref_offload, its micro-batches {experience} "
        f"x 4,096 tokens; vLLM's level-1 sleep around each rollout and validation pass "
        f"(fsdp_vllm.py @8460e817) as rollout_sleep_offload; each image decoded, scaled and "
        f"processed on the workers' hosts inside the step (fsdp_workers.py "
        f"_process_multi_modal_inputs, vllm_rollout_spmd.py) as image_prep_by_workers, at the "
        f"cost measured on this project's CPU (scripts/bench_image_processing.py), and the "
        f"validation set's images by its one dataloader worker; the batch through the "
        f"driver with each prompt left-padded to data.max_prompt_length 2,048 "
        f"(padded_prompt_tokens) and M-RoPE's 4 rows of positions; "
        f"the actor's log-probs by flash-attn's Triton cross-entropy with "
        f"inplace_backward (loss kernel verl-logprobs: EasyR1's dp_actor, flash-attn in its "
        f"requirements; its torch.compile of the call taken as changing no buffer); "
        f"validation every 5 steps over 601 prompts (hiyouga/geometry3k's test "
        f"split, its dataset card), one response each at the training "
        f"mean, the longest 2,048; each image's decoded pixels through the driver with the "
        f"batch at 512 x 512 RGB (786 KB; the dataset's PNGs are 20 KB, their sizes not read: "
        f"an upper end); checkpoint saves every 5 steps (with the optimizer) not counted: the "
        f"disk is not stated")


# verl issue #7203 (row 41): Qwen3.5-9B (Gated DeltaNet hybrid, multimodal) GRPO on Geo3K, 8
# H800, SGLang rollouts at TP 8 and gpu_memory_utilization 0.35, colocated with a Megatron actor
# of TP 2 PP 1 DP 4 (the issue's config: train_batch_size 32, rollout_n 5, max_prompt_length
# 1,024, max_response_length 2,048, use_dynamic_bsz with ppo_max_token_len_per_gpu 4,096,
# use_remove_padding False "required by GDN", freeze_vision_tower True, free_cache_engine True).
# The issue gives no mean response; its throughput does give the step's tokens: verl's
# perf/throughput is the batch's attention-mask tokens over the step's time and GPUs
# (verl/trainer/ppo/metric_utils.py compute_throughout_metrics), so ~143 tok/s x ~290 s x 8 GPUs
# over 160 sequences is their mean length, image tokens included (`verl_qwen35_mean_sequence`).
# Note for docs/rl.md (row 41, issue 13, 2026-11-25): expressed once Qwen3.5 was covered
# (estimate/delta_net.py: Gated DeltaNet mixers on 24 of its 32 layers, gated attention on 8;
# the catalog's qwen3.5-9b equals transformers' count), held out, nothing set from it.
# Estimate 45.0 s against ~290 s (-84%): rollout 33.0 s against the issue's ~29 s gen (+14%;
# its GDN state in fp32 as the config's mamba_ssm_dtype and SGLang keep it, 31.7 s in bf16);
# old log-prob 3.2 s (~84), ref 3.2 s (~82), update 5.4 s (~91), weight sync 0.1 s (~3.5). The
# miss is the Megatron passes, and the issue says so itself: its actor MFU is 2.3-2.7%; by 6N
# the update's 160 x 2,074 tokens at 47.6 GFLOP a token are 1.58e16 FLOPs, 2.2% of 8 H800s'
# 989.5 TFLOPS over 91 s, where the estimate runs them at its usual GEMM efficiency. The
# measured less the estimate is about the same on the three passes (old log-prob +80.8 s, ref
# +78.8, update +85.6): a cost a pass, some 2 s a sequence (40 a data-parallel rank), that a
# backward pass does not double. Second reading (2026-11-25, the code that ran; no mechanism
# established, nothing fitted):
# - The GDN layer is not a slow path. mbridge's Qwen3.5 (ISEEKYAN/mbridge @10cb17f5,
#   mbridge/models/qwen3_5/base_bridge.py; its pyproject says 0.15.1 from 2025-09 to now, so
#   the issue's "mbridge 0.15.1" is git main, as verl's Qwen3.5 scripts install it) builds
#   Megatron-Core's experimental-attention-variant spec, i.e. core's GatedDeltaNet. At
#   core_v0.16.0 (3bec9aa9) megatron/core/ssm/gated_delta_net.py runs fla's Triton
#   chunk_gated_delta_rule on [b, s, h, d] (the torch chunk reference only under
#   deterministic_mode; no token-by-token recurrence), ignores attention_mask ("TODO") and
#   raises on packed_seq_params: hence use_remove_padding False (THD for GDN first ships in core
#   0.18.0, verl PR #7336). fla v0.5.2's kernels (chunk_delta_h, chunk_o, wy_fast, solve_tril,
#   chunk_scaled_dot_kkt, cumsum, l2norm) take T as do_not_specialize and no autotune key holds
#   T (cumsum's holds B): no recompile or retune for a new length.
# - Padding. verl's legacy Megatron actor was deleted (044bbba2, 2026-04-20) before 0.9.0.dev
#   (8f5e1617, 2026-06-01 to 2026-08-14); the engine at 8446ee4b (2026-07-30) takes each
#   sequence unpadded (a nested tensor) and pads it right to the micro-batch's longest, or with
#   pad_bshd_to_minibatch_max (added 561a4b03, 2026-07-02, default True) to the rank's longest:
#   some 2,404 tokens (356 prompt + the 2,048 cap) against the 2,074 mean, 1.16x, not 1.5x (the
#   first reading took the legacy 1,024-token left-padded prompt). Not expressed.
# - cuDNN fused-attention graph builds (verl PR #6901, 561a4b03: about 1 s of host work for
#   each new padded (b, s) shape, cached per shape in Transformer Engine's thread_local map; its
#   Qwen3.5-35B-A3B run lost 42.9 s on old log-probs and 93.1 s on the update to them, and none
#   on the reference pass, 24.7 s both ways, whose shapes the old pass had cached). Row 41 has
#   the other signature: ref ~ old ~ update. Without the flag, 21-40 micro-batches a rank a pass
#   (82,960 tokens at 4,096 a micro-batch, one or two sequences each) would need 2-4 s a build
#   in every pass to make +80 s; with it (the default if the run postdates 2026-07-02; the issue
#   does not say), one or two builds a pass. Not the gap; not expressed.
# - Offload and recompute. verl's Qwen3.5 Megatron example (run_qwen3_5_35b_megatron.sh @
#   8446ee4b) sets ALL_OFFLOAD True, full recompute, the optimizer on the CPU and dynamic batch
#   off; whether the run kept them is not known (the indexed copy of the issue cuts its config
#   at the Megatron block). Parameter reload is 9.4 GB a GPU (4.7B bf16 at TP 2), 0.4 s a pass
#   at 25 GB/s of PCIe; recompute and a CPU Adam touch only the update. Neither is an ~80 s
#   cost that forward-only passes share.
# - The vision tower (transformers', frozen) runs in each pass, on each TP rank: with at most
#   ~900 image tokens a prompt (max_prompt_length 1,024) it is some 5 TFLOP an image, 40 images
#   a rank: seconds at fp32 rates, not 80 s. M-RoPE's get_rope_index is a loop a sequence.
# No maintainers' answer was found: the issues index holds the (closed) issue's description
# only, cut at its Megatron block (read 2026-11-25). What would settle it: the run's full
# config and an nsys or torch profile of one log-prob pass.
_VERL_QWEN35_TEXT_TOKENS = 100        # assumed, as the EasyR1 Geo3K rows: template + question
_VERL_QWEN35_IMAGE_PIXELS = 262_144   # assumed, as the EasyR1 rows: a Geo3K image at 512 x 512


def verl_qwen35_mean_sequence(row: int) -> float:
    """Mean tokens a sequence of row 41 (prompt, its image tokens and the response): the
    issue's throughput (tokens per GPU-second, read from the row's notes) x its step time x its
    GPUs / (32 x 5) sequences: the step's token count, which the source measured."""
    r = rows()[row]
    throughput = float(r["notes"].split("throughput ~")[1].split()[0])
    return throughput * float(r["step_time_s"]) * int(r["n_gpus"]) / (32 * 5)


def _verl_qwen35(row: int) -> Case:
    """Row 41 (see the comment above): the Megatron actor as the issue states it, kernels
    megatron (verl's mcore GPT model from Transformer Engine's layer spec, as the 30B rows),
    its distributed optimizer as ZeRO-1; the mean response the row's mean sequence less 256
    image tokens (a 512 x 512 image: 32-pixel tokens) and the text prompt."""
    seq = verl_qwen35_mean_sequence(row)
    image_tokens = (512 // 32) ** 2
    response = round(seq - image_tokens - _VERL_QWEN35_TEXT_TOKENS)
    return Case(row, "h800", dict(
        prompts_per_step=32, generations_per_prompt=5, prompt_tokens=_VERL_QWEN35_TEXT_TOKENS,
        response_tokens=response, max_response_tokens=2048, reference_model=True,
        reward={"kind": "rule"}, engine="sglang", rollout_tensor_parallel=8,
        rollout_memory_utilisation=0.35, single_controller=True, padded_prompt_tokens=1024,
        update_tokens_per_gpu=4096, scoring_tokens_per_gpu=4096),
        {"model": "qwen3.5-9b", "method": "full", "gpus": 8, "tp": 2, "zero_stage": 1,
         "checkpointing": False, "fused_attention": True, "kernels": "megatron",
         "images_per_example": 1, "image_pixels": _VERL_QWEN35_IMAGE_PIXELS},
        f"mean response {response} tokens: the issue's throughput x step x 8 GPUs / 160 "
        f"sequences = {seq:.0f} tokens a sequence, less 256 image tokens (each Geo3K image taken "
        f"as 512 x 512, as the EasyR1 rows take them; sizes not stated) and "
        f"{_VERL_QWEN35_TEXT_TOKENS} text-prompt tokens (assumed); longest = the 2,048 cap; "
        "Megatron TP2 PP1 DP4 as the issue states, its distributed optimizer as ZeRO-1, no "
        "recompute (not stated); kernels megatron (verl's mcore GPT model of Transformer "
        "Engine's layer spec, its GDN layers costed as the model's mixers) and the actor's "
        "log-probs by Megatron-Core's vocab_parallel_cross_entropy, the megatron loss kernel, as "
        "the 30B rows; the vision tower "
        "frozen (freeze_vision_tower); dynamic batches of 4,096 tokens for the update and the "
        "log-prob passes (log_prob_max_token_len_per_gpu taken as ppo_max_token_len_per_gpu, "
        "verl's default); SGLang at TP 8 and 0.35, its free_cache_engine not costed (no host "
        "copy); use_remove_padding False (verl's engine pads each micro-batch to its longest, "
        "or with pad_bshd_to_minibatch_max to the rank's longest: about 1.16x) not expressed: "
        "each sequence costed at its own tokens, a lower end")


# NeMo-RL's large-MoE rows and its v0.6 table (CSV lines 43-74, 0-based rows 41-72; issue 13,
# 2026-11-25), held out: no figure was set from them. Each as the recipe the page names sets
# it, read at 108bffda (v0.5 rows) or v0.6.0 (v0.6 rows), over grpo_math_1B.yaml of the same
# commit:
# - DeepSeek-V3 (grpo-deepseek-v3-32n8g.yaml and children): 32 prompts x 16, 1,536-token
#   sequences, Megatron TP1 PP16 EP16 (GB200 PP8; 64n8g/64n4g on-policy EP32), full recompute,
#   packing 1,536 a micro-batch (logprob 1 x 1,536; 2 x in the async-1off recipes), vLLM
#   TP32 (the async and GB200 async recipes TP16), colocated at grpo_math_1B's 0.6 (v0.6
#   GB200 32n4g: 0.3), dedicated at 0.8; the fp8 recipe: Megatron fp8 blockwise, router fp32,
#   vLLM fp8 TP16 with max_num_seqs 32;
# - Qwen3-235B-A22B (grpo-qwen3-235b-16n8g.yaml and children): 16 prompts x 32, 8,192-token
#   sequences, TP2 (sequence parallel) CP2 PP8 EP16 (GB200 PP4), async TP4 CP1, full
#   recompute, packing 8,192 a micro-batch over the CP group, vLLM TP16 (GB200 and async TP8);
#   v0.6 GB200 16n4g at 0.4, 32n4g at 0.6;
# - DAPO (dapo-deepseek-v3-64n8g.yaml): TP8 CP4 EP32 PP8, packing 1,536, vLLM TP64 eager
#   (enforce_eager true), synchronous engine; read as 32 prompts x 16 (the table's G-GBS 512,
#   which its tokens/s agree with; the recipe's 256 x 16 with dynamic sampling would not);
# - Qwen3-30B-A3B: as row 5 (CSV line 7) with each recipe's layout;
# - MoE routing: v0.5's grpo_math_1B.yaml allgather dispatcher with an fp64 frozen router; the
#   DeepSeek and 235B recipes fuse the permute (moe_permute_fusion true), which moe_dispatch
#   cannot say: allgather-unfused (its allgather traffic and fp64 combine; the unfused permute's
#   operators and bytes an upper end). v0.6's default is the all-to-all dispatcher
#   (moe_token_dispatcher_type alltoall, grpo_math_1B.yaml @v0.6.0) with the base config's
#   fp64 frozen router: the 30B recipes inherit its unfused permute (alltoall-unfused), the
#   DeepSeek and 235B recipes fuse it (fused, moe_router_dtype fp64; the FP8 recipe's fp32);
# - every PP > 1 row pads its packed micro-batches to the batch's longest (megatron/common.py),
#   each taken at its whole budget, an upper end; where the v0.5 GB200 DeepSeek recipes turn
#   packing off, the unpacked one-sequence micro-batches under PP are padded to the batch's
#   longest too: the same cost;
# - rollout engines wider than a node (vLLM TP16-64 on 8-GPU DGX nodes) all-reduce through NCCL
#   over the network (estimate/tp_allreduce.py); on GB200 the NVL72 rack is one NVLink domain.
# What they gave (issue 13, 2026-11-25), every row held out, nothing set from them: 20 of the
# 31 expressed rows within 25%, 2 off by more than 2x, median measured / predicted 1.17. No
# version of the page splits a step, so each miss below is read from the estimate's parts and
# the rows' pairs (colocated against dedicated, one GPU type against the other):
# - four mechanisms were added to express them: rollout engines wider than a node (vLLM
#   tensor_parallel_size 16-64; estimate/tp_allreduce.py: NCCL's modelled all-reduce latency,
#   the network's bytes); NeMo-RL's k-step-off stream (rollout_steps_in_flight: the engines
#   hold up to k steps' shares; the 8-step-off row +126% -> -11%); context parallelism's
#   padding of each sequence to 2 x cp (the DAPO and 235B CP rows were refused); vLLM's async
#   scheduling (rollout_async_scheduling: the engine's host step beside the GPU's, vLLM 0.14+'s
#   default), on v0.6's TP-1 engines only (the GB200 30B-A3B colocated row -37% -> -49%: its
#   3,997 decode steps lose the Grace host's 6.3 ms each; the one-step-off twin is update-led);
# - the systems' network: DGX-H100 at the catalog's dgx-h100 50 GB/s a GPU, GB200 at the DGX
#   B200's (assumed, as validation/blackwell.py), where every row had taken 25 GB/s. It moved
#   the old NeMo H100 rows by 1-2 points (CSV lines 2, 5, 6, 7: -22/-20/-11/-23% ->
#   -23/-21/-13/-24%; their weight syncs and PP/DP traffic), none across the 25% line;
# - DeepSeek-V3 on 256-512 GPUs is rollouts and refit in the estimate: vLLM TP32 engines
#   decode 1,424 steps of ~42 ms (each GPU reads ~36 GB of touched experts a step at the width
#   term's 0.25 of bandwidth, hidden 7,168 / 32 = 224, below the TP <= 8 widths it was fitted
#   on; 122 cross-node all-reduces of ~35 us a step) and the refit hands the whole 1.34 TB of
#   bf16 weights to every engine GPU (NeMo-RL's broadcast of each exported HF tensor, or every
#   rank's export under IPC: megatron_policy_worker.py broadcast_weights_for_collective,
#   stream_weights_via_ipc_zmq @108bffda). The dedicated refit's group is every training rank
#   and every engine rank (_NEMO_DEDICATED's comment), whole nodes, so the ring broadcast
#   takes a node's 8 NICs, 400 GB/s at 0.75: 4.5 s (weight_sync_every_rank; it was costed at
#   one GPU's 50 GB/s, 36 s, which put lines 44 and 58 at +54%: now +6% and +5%). The same
#   change took the FP8 one-step-off rows (49, 66: refit-bound before, +2% and +16%) to -45%
#   and -37% and the GB200 ones (51, 69) from +28/+24% to -24/-31%. The FP8 engines cast
#   every bf16 weight they receive, the whole model's on every GPU, to blockwise fp8 in eager
#   torch (quantization/fp8.py load_weights @108bffda, v0.6.0): 49 bytes of traffic a weight,
#   ~12 s a refit on an H100, beside the next buffer's broadcast (refit_fp8_cast), which takes
#   49 and 66 to about -33% and -24%. The export's PP broadcasts and EP all-gathers on the
#   trainer (~84 GB over one NIC's ring and ~1.2 TB over the EP group's 2 nodes a rank for
#   DeepSeek-V3 at PP16 EP16, pipelined with the broadcast) are not costed. Read at vLLM
#   0.11.2, the decode slices are right in bytes
#   (FusedMoE shards each expert's 2,048 intermediate over TP32: 64 a GPU; EP off, vllm_cfg
#   sets no expert_parallel_size, grpo_math_1B.yaml 1): ~36 GB of touched experts a step a
#   GPU, plus ~1.9 GB of MLA's replicated q_a/kv_a projections the per-GPU share (weights /
#   tp) leaves out. The width term on them is not: Triton's fused_moe runs every touched
#   expert in one launch (grid = token blocks x column blocks), ~222 experts x 64 = ~14,200
#   wide, not 224. Costing the routed bytes at that launch width (tried: 0.77 of bandwidth
#   where 0.25) takes lines 44/47/58/61 to +7/+10/+7/-7% but every colocated twin 15-35 points
#   faster (RL 44 -> 40 of 62 within 25%) and the generation table from 354 to 340 of 411
#   (SGLang Qwen3-235B TP8 and vLLM Mixtral at batch 1 too fast): not wired in. The update is
#   3-11 s (512 sequences of ~850 tokens on 128-512 GPUs), the log-prob passes ~1 s. Before the
#   refit's rate, the BF16 one-step-off rows read +48% (H100, lines 44 and 58) and +27/+21%
#   (GB200) where the colocated rows of the same engines read -19 to -30%: the colocated rows
#   say something they alone do is missing (the
#   colocated worker's weights to pinned host memory and back, its optimizer .to("cpu") each
#   step: megatron_policy_worker.py offload_after_refit / move_optimizer, not costed, as noted
#   for the GB200 32B rows). The FP8 one-step-off rows (TP16, fp8, max_num_seqs 32) read 0% and
#   +14%;
# - Qwen3-235B: the colocated rows within -15..+17% but the v0.6 GB200 128-GPU one (-32%, its
#   refit across the two 72-GPU domains); the H100 one-step-off rows +66% (v0.5) and +41% (v0.6),
#   rollout-led at TP8 (16 engines of 32 sequences, 7,941 decode steps of 41 ms: 52 GB of
#   experts read a step at the width term's 0.40 of bandwidth) where the whole measured step is
#   203 / 231 s: the narrow-TP MoE decode again; on GB200 the same engines read -15/-18%;
# - DAPO (line 45) -74%: read as 512 sequences (the table), its recipe's dynamic sampling
#   (up to 10 generation batches of 768 prompts x 16 a step, filtered to prompts whose rewards
#   differ) not modelled: a lower end, and a row whose table and recipe disagree;
# - Qwen3-30B-A3B: the v0.5 rows -9 to -19%; v0.6 -11 to -49% and the GB200 one-step-off on 8
#   + 8 GPUs -62% (measured 301 s, slower than the colocated run on the same 16 GPUs, 221 s).
#   v0.6 runs the all-to-all dispatcher with the unfused permute and the fp64 router
#   (grpo_math_1B.yaml @v0.6.0; every 30B recipe at v0.6.0 inherits moe_permute_fusion false),
#   first costed as moe_dispatch fused with no router or dispatcher operators at all (a dense
#   layer's): a lower end that the Grace host (2.75x an operator) made larger. It is now
#   alltoall-unfused: Megatron-Core's TopKRouter and MoEAlltoAllTokenDispatcher counted
#   (estimate/host.py MEGATRON_ROUTER_OPS, MEGATRON_A2A_*: 39 operators forward and 25
#   backward a layer at EP 8, checked by running the dispatcher on CPU,
#   tests/test_moe_dispatch_ops.py), its permute's bytes (moe_gemm.ROUTING_ELEMENTS), and the
#   host's wait for the token counts in every MoE layer's forward, which stops the host
#   running ahead (timing.host_gpu_combined_s: the forward combined apart from the backward).
#   The cross-version pair on H100 (v0.5 -> v0.6 measured 198 -> 192 s colocated, 154 ->
#   152 s one-step-off) read -24% -> -32% and -19% -> -18% before. With it (nothing set from
#   these rows): CSV line 62 (H100 colocated) -29% -> -25%, 73 (GB200 colocated) -48% -> -24%,
#   74 (GB200 one-step-off, 8 + 8) -58% -> -26%; 63 and 64 are rollout-led and unchanged
#   (+33%, +43%). The v0.6 DeepSeek and 235B rows now count the fused dispatcher's operators
#   and fp64 router: the GB200 235B colocated rows 70 -2% -> +20% and 71 -31% -> -22%, the
#   GB200 DeepSeek-V3 row 67 -19% -> -13%; the v0.5 GB200 235B row 52 -15% -> +2% (the v0.5
#   DeepSeek and 235B rows set no moe_dispatch, so take fused, whose operators now count;
#   their router in fp64 as the base config sets it, _V05_ROUTING). The forward's waits
#   themselves move these rows by under 1%: the operators, on the Grace host at 2.75x, move
#   them. Held out: 42 -> 45 of 62 within 25%.
#: v0.5's MoE routing as _V05_MOE says it is costed: the fused permute's operator count (the
#: rows had set nothing, so took fused with a bf16 router while their text said
#: allgather-unfused; costed as allgather-unfused, an upper end, rows 46 +10% -> +47% and 50
#: -26% -> -23%, 48 of 62 either way)
_V05_ROUTING = {"moe_router_dtype": "fp64"}
_V05_MOE = ("; MoE routing as grpo_math_1B.yaml @108bffda sets it (allgather dispatcher, fp64 "
            "frozen router) with the recipe's fused permute (moe_permute_fusion true), costed "
            "as moe_dispatch fused with the fp64 router: the all-to-all dispatcher's fused "
            "operators, not the allgather's traffic and its three host waits a layer (a lower "
            "end)")
_V06_MOE = ("; MoE routing by grpo_math_1B.yaml @v0.6.0's all-to-all dispatcher "
            "(moe_token_dispatcher_type alltoall) with the recipe's fused permute "
            "(moe_permute_fusion true) and the base config's fp64 router: moe_dispatch fused")
_V06_MOE_30B = ("; MoE routing by grpo_math_1B.yaml @v0.6.0, which the recipe inherits: the "
                "all-to-all dispatcher with the unfused permute (moe_permute_fusion false) and "
                "the fp64 frozen router: moe_dispatch alltoall-unfused")


def _nemo_cap_prompt(row: int, cap: int) -> dict[str, int]:
    """A NeMo row's prompt (`nemo_prompt_tokens`) and longest response (the cap - prompt)."""
    prompt = nemo_prompt_tokens(row)
    return {"prompt_tokens": prompt, "max_response_tokens": cap - prompt}


def _nemo_large(row: int, gpu: str, model: str, cap: int, train: dict[str, Any],
                gen_tp: int, share: float, rollout_gpus: int | None = None,
                pack: tuple[int, int] | None = None, extra_phase: dict[str, Any] | None = None,
                assumed: str = "", async_engine: bool = False) -> Case:
    """One row of NeMo-RL's large-MoE or v0.6 tables: `train` the Megatron layout (gpus = the
    training GPUs), `pack` the (update, log-prob) tokens a packed micro-batch holds on each GPU
    of a CP group (None: one sequence a micro-batch), `rollout_gpus` the dedicated engines'
    GPUs of a one-step-off row (None: colocated), `async_engine` a colocated recipe's
    vllm_cfg.async_engine (AsyncLLM: the logprobs' host work in another process)."""
    r = rows()[row]
    prompts, generations = int(r["prompts_per_step"]), int(r["generations_per_prompt"])
    phase: dict[str, Any] = {
        "prompts_per_step": prompts, "generations_per_prompt": generations,
        "reference_model": True, "reward": {"kind": "rule"},
        "response_tokens": round(float(r["response_tokens_mean"])),
        "rollout_tensor_parallel": gen_tp, **_nemo_cap_prompt(row, cap)}
    refit = ""
    if rollout_gpus is None:
        phase["rollout_memory_utilisation"] = share
        if gpu == "gb200":  # no host link figure (NVLink-C2C): not costed
            refit = _NEMO_HOST_GB200
        else:
            phase.update(_NEMO_HOST_COPIES)
            refit = _NEMO_HOST_ASSUMED
    else:
        phase.update({"rollout_memory_utilisation": share, "placement": "dedicated",
                      "async_rollout": True, "in_flight_weight_updates": True,
                      "weight_sync_every_rank": True, "rollout_gpus": rollout_gpus})
    settings: dict[str, Any] = {**_NEMO_MEGATRON_PACKED, "model": model, **train,
                                "gpus": train["gpus"] + (rollout_gpus or 0)}
    if pack is not None:
        phase.update({"update_tokens_per_gpu": pack[0], "scoring_tokens_per_gpu": pack[1]})
        if train.get("pp", 1) > 1:
            phase["pad_packed_to_longest"] = True
    else:
        dp = train["gpus"] // (train.get("tp", 1) * train.get("pp", 1) * train.get("cp", 1))
        settings.update({"micro_batch": 1, "grad_accum": 512 // dp})
    # vLLM 0.17.1 (v0.6's pin) turns async scheduling on by default where its executor
    # supports it: the uni-process executor NeMo-RL's TP-1 engines run (vllm_worker.py @v0.6.0:
    # distributed_executor_backend None, VLLM_ENABLE_V1_MULTIPROCESSING=0); its TP > 1 engines
    # run Ray's executor, which vLLM's config listed as unsupported ("async scheduling only
    # supports mp, uni, or external_launcher"); whether 0.17.1's does was not read: not applied
    v06 = r["framework"].startswith("NeMo-RL v0.6")
    async_scheduled = v06 and gen_tp == 1
    if async_scheduled:
        phase["rollout_async_scheduling"] = True
    in_process = rollout_gpus is None and not async_engine
    if in_process:
        phase.update(_NEMO_LOGPROBS)
    else:
        phase.update(_NEMO_ASYNC_ENGINE_SEQS)
    phase.update(extra_phase or {})
    layout = ", ".join(f"{k.upper()}{train[k]}" for k in ("tp", "cp", "pp", "ep") if k in train)
    where = (f"{rollout_gpus} dedicated rollout GPUs at {share:g} beside {train['gpus']} "
             f"training GPUs" if rollout_gpus else f"colocated at {share:g}")
    text = (_nemo_assumed(row, settings.get("checkpointing", True)).replace(
                "longest = 4096 - prompt", f"longest = {cap:,} - prompt").replace(
                f"{4096 - nemo_prompt_tokens(row):,}", f"{cap - nemo_prompt_tokens(row):,}")
            + f"; Megatron {layout or 'TP1 PP1'} as the recipe sets them; vLLM TP{gen_tp} "
            f"{where}" + ("" if pack is None else
                          f"; packed micro-batches of {pack[0]:,} tokens a GPU, log-prob "
                          f"passes {pack[1]:,}") + assumed + refit
            + (_NEMO_LOGPROBS_ASSUMED if in_process else _NEMO_ASYNC_ENGINE_ASSUMED)
            + ("; vLLM 0.17.1 (pyproject.toml @v0.6.0) with its default async scheduling "
               "(on from 0.14.0, vllm#27614; NeMo-RL sets no async_scheduling) on the TP-1 "
               "engines' uni-process executor: the engine's host step beside the GPU's"
               if async_scheduled else
               "; vLLM 0.17.1 (pyproject.toml @v0.6.0) on Ray's executor (TP > 1), async "
               "scheduling taken as off (vLLM's config supported it on mp, uni and "
               "external_launcher only; 0.17.1's not read): the host step serial" if v06 else
               "; vLLM 0.11.2 (pyproject.toml @108bffda), no async scheduling: the engine's "
               "host step serial with the GPU"))
    return Case(row, gpu, phase, settings, text)


_DSV3 = {"model": "deepseek-v3"}
_Q235 = {"model": "qwen3-235b-a22b"}
_DS_PACK = (1536, 1536)
_DS_PACK_ASYNC = (1536, 2 * 1536)
# CP 2: the 8,192-token micro-batch over the CP group's two GPUs
_Q235_PACK_CP2 = (4096, 4096)
_Q235_PACK = (8192, 8192)
_EAGER_ROLLOUTS = {"rollout_cuda_graphs": "off"}
_DS_FP8_TRAIN = {"precision": "fp8-mixed"}
# NeMo-RL's fp8 engines cast every bf16 weight the refit hands them (refit_fp8_cast:
# quantization/fp8.py load_weights @108bffda, v0.6.0)
_DS_FP8_ROLLOUT = {"rollout_precision": "fp8", "rollout_max_num_seqs": 32,
                   "refit_fp8_cast": True}
_DS_FP8_ASSUMED = ("; Megatron fp8 (e4m3 blockwise, fp8_param false) and vLLM fp8 (W8A8, "
                   "deep_gemm; max_num_seqs 32) as the recipe sets them; its fp32 router "
                   "costed as the fp64 one where the dispatch is allgather-unfused (v0.5)")
_DS_EP_TABLE = ("; the recipe's EP32 (the table's Training column says 16)")
_DAPO_ASSUMED = ("; DAPO read as 32 prompts x 16 (the table's G-GBS 512; the recipe's 256 x 16 "
                 "with batch_multiplier 3 and dynamic sampling, whose extra generation "
                 "batches the phase does not model, would make its tokens/s/GPU 140 a "
                 "sequence, below the mean response); reference pass kept (the recipe sets "
                 "no skip_reference_policy_logprobs_calculation); vLLM TP64 eager "
                 "(enforce_eager true)")
_Q30_ASYNC_PACK = ("; packed micro-batches of 4,096 tokens, log-prob passes 16,384, padded to "
                   "the longest under PP2")
# v0.6's GB200 30B-A3B recipes (grpo-qwen3-30ba3b-4n4g.yaml @v0.6.0) set logprob_batch_size 2
_Q30_GB200_LOGPROB = {"scoring_tokens_per_gpu": 2 * 4096}
_Q30_GB200_LOGPROB_ASSUMED = "; log-prob passes of 2 x 4,096 tokens (logprob_batch_size 2)"
# NeMo-RL's collector with in-flight weight updates, replayed (in_flight_weight_updates: every
# one-step-off recipe at 108bffda, 9dbd9adc and v0.6.0 sets async_grpo.in_flight_weight_updates
# true with vllm_cfg.async_engine true, directly or through its `defaults:` recipe; the 8-step-off
# one max_trajectory_age_steps 8). nemo_rl/algorithms/async_utils.py @v0.6.0: each prompt group
# is a thread behind a semaphore of num_prompts_per_step x max_trajectory_age_steps permits,
# released when the group's last response is in the replay buffer; groups for weight version
# v+k start only once the engines hold version v (_calculate_target_weights,
# _should_pause_for_generation_limits); prepare_for_refit does not wait for running groups and
# vLLM's engine core runs the refit's collective_rpc between its steps, so they stall through
# it and decode on. plan/rl_inflight.py replays that (estimate/inflight_rollout.py) beside the
# training side. What it found: with one step's groups as slots, a group holding its slot until
# its longest response ends keeps the engines below the step's batch, so the next step's groups
# fill in only part of the tail: the rollout-led rows (DeepSeek-V3 TP32, Qwen3-235B TP8) read
# the same as max(rollouts, training side) + sync or 1-6 points higher (their MoE decode steps
# dearer at the fuller batches the overlap keeps); the rows whose training side is near their
# rollouts gain the overlap: lines 9 +18% -> -7%, 48 +32% -> +18%, 63 +33% -> +17%, 3/4
# -6/-7% -> -14/-16%. The 8-step-off row (line 64), replayed with 8 steps' groups as slots
# (no longer taken as a stream with no tail), +43% -> +32%. The earlier what-if (every
# one-step-off row as partial_rollout: 41 of 62) drops the semaphore's share of the tail.
# Held out 42 -> 44 of 62 within 25% (48 and 63 in), 3 off by more than 2x before and after;
# rows moved > 5 points: 3 -6 -> -14%, 4 -7 -> -16%, 9 +18 -> -7%, 44 +48 -> +54%, 48 +32 ->
# +18%, 58 +48 -> +54%, 63 +33 -> +17%, 64 +43 -> +32%. The replay admits a group at a time, so
# it hangs on what an admission beside running requests costs: taken as what its prefill adds
# to their decode step (vLLM V1 schedules both in one forward, the weights read once). Charged
# a whole prefill each instead, as the synchronous replay's paged_rollout_time_s does its far
# fewer admissions, the table reads 41 of 62 (48/63 +38/+41%, 64 +99%): a what-if, not applied.
_STREAMED_8OFF = {"rollout_steps_in_flight": 8}
_STREAMED_8OFF_ASSUMED = (
    "; max_trajectory_age_steps 8 with in-flight weight updates: up to 8 steps' prompt groups "
    "in flight (_calculate_target_weights: the next 8 weight versions, each a step's 64 "
    "prompt groups), replayed group by group on the engines (in_flight_weight_updates with "
    "rollout_steps_in_flight 8: each group's slot freed when its longest response ends), each "
    "engine's running batch as its KV cache and max_num_seqs allow "
    "(nemo_rl/algorithms/async_utils.py @v0.6.0)")

_NEMO_LARGE_CASES = [
    # v0.5, H100 BF16
    _nemo_large(41, "h100-sxm", "deepseek-v3", 1536,
                {**_DSV3, **_V05_ROUTING, "gpus": 256, "pp": 16, "ep": 16}, 32, 0.6, pack=_DS_PACK,
                async_engine=True,
                assumed=_V05_MOE),
    _nemo_large(42, "h100-sxm", "deepseek-v3", 1536,
                {**_DSV3, **_V05_ROUTING, "gpus": 256, "pp": 16, "ep": 16}, 32, 0.8, rollout_gpus=256,
                pack=_DS_PACK_ASYNC, assumed=_V05_MOE),
    _nemo_large(43, "h100-sxm", "deepseek-v3", 1536,
                {**_DSV3, **_V05_ROUTING, "gpus": 512, "tp": 8, "cp": 4, "pp": 8, "ep": 32}, 64, 0.6,
                pack=(1536 // 4, 1536 // 4), extra_phase=_EAGER_ROLLOUTS,
                assumed=_V05_MOE + _DAPO_ASSUMED),
    _nemo_large(44, "h100-sxm", "qwen3-235b-a22b", 8192,
                {**_Q235, **_V05_ROUTING, "gpus": 128, "tp": 2, "cp": 2, "pp": 8, "ep": 16}, 16, 0.6,
                pack=_Q235_PACK_CP2, async_engine=True,
                assumed=_V05_MOE),
    _nemo_large(45, "h100-sxm", "qwen3-235b-a22b", 8192,
                {**_Q235, **_V05_ROUTING, "gpus": 128, "tp": 4, "pp": 8, "ep": 16}, 8, 0.8, rollout_gpus=128,
                pack=_Q235_PACK, assumed=_V05_MOE),
    _nemo_large(46, "h100-sxm", "qwen3-30b-a3b", 4096,
                {"gpus": 16, "pp": 2, "ep": 8, "checkpointing": False,
                 "moe_dispatch": "allgather-unfused"}, 2, 0.8, rollout_gpus=16,
                pack=(4096, 4 * 4096), assumed=_Q30_ASYNC_PACK),
    # v0.5, H100 FP8
    _nemo_large(47, "h100-sxm", "deepseek-v3", 1536,
                {**_DSV3, **_V05_ROUTING, "gpus": 256, "pp": 16, "ep": 16, **_DS_FP8_TRAIN}, 16, 0.8,
                rollout_gpus=256, pack=_DS_PACK_ASYNC, extra_phase=_DS_FP8_ROLLOUT,
                assumed=_V05_MOE + _DS_FP8_ASSUMED),
    # v0.5, GB200 BF16
    _nemo_large(48, "gb200", "deepseek-v3", 1536,
                {**_DSV3, **_V05_ROUTING, "gpus": 128, "pp": 8, "ep": 16}, 32, 0.6, pack=_DS_PACK,
                async_engine=True,
                assumed=_V05_MOE + "; the recipe's sequence_packing off: one sequence a "
                "micro-batch padded to the batch's longest under PP, costed as the packed rows"),
    _nemo_large(49, "gb200", "deepseek-v3", 1536,
                {**_DSV3, **_V05_ROUTING, "gpus": 128, "pp": 8, "ep": 16}, 16, 0.8, rollout_gpus=128,
                pack=_DS_PACK_ASYNC,
                assumed=_V05_MOE + "; the recipe's sequence_packing off: one sequence a "
                "micro-batch padded to the batch's longest under PP, costed as the packed rows"),
    _nemo_large(50, "gb200", "qwen3-235b-a22b", 8192,
                {**_Q235, **_V05_ROUTING, "gpus": 64, "tp": 2, "cp": 2, "pp": 4, "ep": 16}, 8, 0.6,
                pack=_Q235_PACK_CP2, async_engine=True,
                assumed=_V05_MOE),
    _nemo_large(51, "gb200", "qwen3-235b-a22b", 8192,
                {**_Q235, **_V05_ROUTING, "gpus": 64, "tp": 4, "pp": 4, "ep": 16}, 8, 0.8, rollout_gpus=64,
                pack=_Q235_PACK, assumed=_V05_MOE),
    _nemo_large(52, "gb200", "qwen3-30b-a3b", 4096,
                {"gpus": 16, "ep": 16, "checkpointing": False,
                 "moe_dispatch": "allgather-unfused"}, 1, 0.6,
                assumed="; MoE routing as grpo_math_1B.yaml sets it (allgather-unfused)"),
    _nemo_large(53, "gb200", "qwen3-30b-a3b", 4096,
                {"gpus": 16, "ep": 16, "checkpointing": False,
                 "moe_dispatch": "allgather-unfused"}, 1, 0.8, rollout_gpus=16,
                assumed="; MoE routing as grpo_math_1B.yaml sets it (allgather-unfused)"),
    # v0.6, H100 BF16
    _nemo_large(54, "h100-sxm", "deepseek-v3", 1536,
                {**_DSV3, "gpus": 256, "pp": 16, "ep": 16, "moe_dispatch": "fused",
                 "moe_router_dtype": "fp64"}, 32, 0.6,
                pack=_DS_PACK, async_engine=True,
                assumed=_V06_MOE),
    _nemo_large(55, "h100-sxm", "deepseek-v3", 1536,
                {**_DSV3, "gpus": 512, "pp": 16, "ep": 32, "moe_dispatch": "fused",
                 "moe_router_dtype": "fp64"}, 32, 0.6,
                pack=_DS_PACK, async_engine=True,
                assumed=_V06_MOE + _DS_EP_TABLE),
    _nemo_large(56, "h100-sxm", "deepseek-v3", 1536,
                {**_DSV3, "gpus": 256, "pp": 16, "ep": 16, "moe_dispatch": "fused",
                 "moe_router_dtype": "fp64"}, 32, 0.8,
                rollout_gpus=256, pack=_DS_PACK_ASYNC, assumed=_V06_MOE),
    _nemo_large(57, "h100-sxm", "qwen3-235b-a22b", 8192,
                {**_Q235, "gpus": 128, "tp": 2, "cp": 2, "pp": 8, "ep": 16,
                 "moe_dispatch": "fused",
                 "moe_router_dtype": "fp64"}, 16, 0.6, pack=_Q235_PACK_CP2, async_engine=True,
                assumed=_V06_MOE),
    _nemo_large(58, "h100-sxm", "qwen3-235b-a22b", 8192,
                {**_Q235, "gpus": 256, "tp": 2, "cp": 2, "pp": 8, "ep": 16,
                 "moe_dispatch": "fused",
                 "moe_router_dtype": "fp64"}, 16, 0.6, pack=_Q235_PACK_CP2, async_engine=True,
                assumed=_V06_MOE),
    _nemo_large(59, "h100-sxm", "qwen3-235b-a22b", 8192,
                {**_Q235, "gpus": 128, "tp": 4, "pp": 8, "ep": 16, "moe_dispatch": "fused",
                 "moe_router_dtype": "fp64"},
                8, 0.8, rollout_gpus=128, pack=_Q235_PACK, assumed=_V06_MOE),
    _nemo_large(60, "h100-sxm", "qwen3-30b-a3b", 4096,
                {"gpus": 32, "ep": 8, "checkpointing": False,
                 "moe_dispatch": "alltoall-unfused"}, 2, 0.6,
                assumed=_V06_MOE_30B),
    _nemo_large(61, "h100-sxm", "qwen3-30b-a3b", 4096,
                {"gpus": 16, "pp": 2, "ep": 8, "checkpointing": False,
                 "moe_dispatch": "alltoall-unfused"},
                2, 0.8, rollout_gpus=16, pack=(4096, 4 * 4096),
                assumed=_V06_MOE_30B + _Q30_ASYNC_PACK),
    _nemo_large(62, "h100-sxm", "qwen3-30b-a3b", 4096,
                {"gpus": 128, "ep": 8, "checkpointing": False,
                 "moe_dispatch": "alltoall-unfused"}, 2, 0.8,
                rollout_gpus=64, extra_phase=_STREAMED_8OFF,
                assumed=_V06_MOE_30B + _STREAMED_8OFF_ASSUMED),
    # v0.6, H100 FP8
    _nemo_large(64, "h100-sxm", "deepseek-v3", 1536,
                {**_DSV3, "gpus": 256, "pp": 16, "ep": 16, "moe_dispatch": "fused",
                 "moe_router_dtype": "fp32", **_DS_FP8_TRAIN}, 16, 0.8, rollout_gpus=256,
                pack=_DS_PACK_ASYNC,
                extra_phase=_DS_FP8_ROLLOUT, assumed=_V06_MOE + _DS_FP8_ASSUMED),
    # v0.6, GB200 BF16
    _nemo_large(65, "gb200", "deepseek-v3", 1536,
                {**_DSV3, "gpus": 128, "pp": 8, "ep": 16, "moe_dispatch": "fused",
                 "moe_router_dtype": "fp64"}, 32, 0.3,
                pack=_DS_PACK, async_engine=True,
                assumed=_V06_MOE),
    _nemo_large(66, "gb200", "deepseek-v3", 1536,
                {**_DSV3, "gpus": 256, "pp": 8, "ep": 32, "moe_dispatch": "fused",
                 "moe_router_dtype": "fp64"}, 32, 0.3,
                pack=_DS_PACK, async_engine=True,
                assumed=_V06_MOE + _DS_EP_TABLE),
    _nemo_large(67, "gb200", "deepseek-v3", 1536,
                {**_DSV3, "gpus": 128, "pp": 8, "ep": 16, "moe_dispatch": "fused",
                 "moe_router_dtype": "fp64"}, 16, 0.8,
                rollout_gpus=128, pack=_DS_PACK_ASYNC, assumed=_V06_MOE),
    _nemo_large(68, "gb200", "qwen3-235b-a22b", 8192,
                {**_Q235, "gpus": 64, "tp": 2, "cp": 2, "pp": 4, "ep": 16,
                 "moe_dispatch": "fused",
                 "moe_router_dtype": "fp64"}, 8, 0.4, pack=_Q235_PACK_CP2, async_engine=True,
                assumed=_V06_MOE),
    _nemo_large(69, "gb200", "qwen3-235b-a22b", 8192,
                {**_Q235, "gpus": 128, "tp": 2, "cp": 2, "pp": 4, "ep": 16,
                 "moe_dispatch": "fused",
                 "moe_router_dtype": "fp64"}, 8, 0.6, pack=_Q235_PACK_CP2, async_engine=True,
                assumed=_V06_MOE),
    _nemo_large(70, "gb200", "qwen3-235b-a22b", 8192,
                {**_Q235, "gpus": 64, "tp": 4, "pp": 4, "ep": 16, "moe_dispatch": "fused",
                 "moe_router_dtype": "fp64"},
                8, 0.8, rollout_gpus=64, pack=_Q235_PACK, assumed=_V06_MOE),
    _nemo_large(71, "gb200", "qwen3-30b-a3b", 4096,
                {"gpus": 16, "ep": 16, "checkpointing": False,
                 "moe_dispatch": "alltoall-unfused"}, 1, 0.6,
                extra_phase=_Q30_GB200_LOGPROB,
                assumed=_V06_MOE_30B + _Q30_GB200_LOGPROB_ASSUMED),
    _nemo_large(72, "gb200", "qwen3-30b-a3b", 4096,
                {"gpus": 8, "ep": 8, "checkpointing": False,
                 "moe_dispatch": "alltoall-unfused"}, 1, 0.8,
                rollout_gpus=8, extra_phase=_Q30_GB200_LOGPROB,
                assumed=_V06_MOE_30B + _Q30_GB200_LOGPROB_ASSUMED
                + "; the recipe's 8 + 8 GPUs and EP8 "
                "(grpo-qwen3-30ba3b-4n4g-async-1off.yaml @v0.6.0; the table's Training column "
                "says EP16, which 8 training GPUs cannot hold)"),
]


CASES = [
    # the H100 colocated recipe (2n8g) sets pipeline_model_parallel_size 2: 8 data-parallel
    # ranks of 2 stages; 3 packed sequences a micro-batch (4,096 // 1,146)
    Case(0, "h100-sxm", {**_NEMO_8B, **_NEMO_COLOCATED, **_NEMO_LOGPROBS, "response_tokens": 1019,
                         **_NEMO_HOST_COPIES,
                         **_nemo_prompt(0), **_NEMO_PACKED_8B, "pad_packed_to_longest": True},
         {**_NEMO_MEGATRON_PACKED, "model": "llama-3.1-8b", "gpus": 16, "pp": 2},
         _nemo_assumed(0, True) + "; Megatron PP2 (the recipe's pipeline_model_parallel_size)"
         + _NEMO_PACKED_8B_ASSUMED + _nemo_pp_padding(0, 3)
         + _NEMO_HOST_ASSUMED + _NEMO_LOGPROBS_ASSUMED),
    Case(1, "h100-sxm", {**_NEMO_8B, "response_tokens": 1123, **_NEMO_DEDICATED, "rollout_gpus": 8,
                         **_nemo_prompt(1), **_NEMO_PACKED_8B},
         {**_NEMO_MEGATRON_PACKED, "model": "llama-3.1-8b", "gpus": 16},
         _nemo_assumed(1, True) + _NEMO_PACKED_8B_ASSUMED
         + _NEMO_ASYNC_ENGINE_ASSUMED),
    # the FP8 recipe (grpo-llama3.1-8b-instruct-2n8g-fp8-async-1off.yaml): Megatron fp8 training
    # (Transformer Engine, e4m3 blockwise, fp8_param false) and vLLM fp8 generation (W8A8,
    # deep_gemm), over the BF16 one-step-off recipe (TP1 PP1, packing, recompute)
    Case(2, "h100-sxm", {**_NEMO_8B, "response_tokens": 1128, **_NEMO_DEDICATED, "rollout_gpus": 8,
                         "rollout_precision": "fp8", "refit_fp8_cast": True,
                         **_nemo_prompt(2), **_NEMO_PACKED_8B},
         {**_NEMO_MEGATRON_PACKED, "model": "llama-3.1-8b", "gpus": 16,
          "precision": "fp8-mixed"},
         _nemo_assumed(2, True) + _NEMO_PACKED_8B_ASSUMED + "; fp8 generation as W8A8 (1 byte "
         "per weight, fp8 GEMMs; the KV cache bf16, not stated)"
         + _NEMO_ASYNC_ENGINE_ASSUMED),
    Case(3, "h100-sxm", {**_NEMO_QWEN, **_NEMO_COLOCATED, **_NEMO_LOGPROBS,
                         "response_tokens": 3251,
                         **_NEMO_HOST_COPIES,
                         "rollout_tensor_parallel": 4, **_nemo_prompt(3), **_NEMO_PACKED_32B,
                         "pad_packed_to_longest": True},
         {**_NEMO_MEGATRON_PACKED, "model": "qwen3-32b", "gpus": 32, "tp": 4, "pp": 4,
          "grad_accum": 256, "checkpointing": False},
         _nemo_assumed(3, False) + "; Megatron TP4 (sequence parallel) PP4 as the recipe sets "
         "them; 256 micro-batches per optimizer step (512 sequences over data parallelism 2)"
         + _nemo_pp_padding(3, 1)
         + _NEMO_HOST_ASSUMED + _NEMO_LOGPROBS_ASSUMED),
    Case(4, "h100-sxm", {**_NEMO_QWEN, "response_tokens": 3252, "rollout_tensor_parallel": 4,
                         **_NEMO_DEDICATED, "rollout_gpus": 32, **_nemo_prompt(4),
                         **_NEMO_PACKED_32B, "pad_packed_to_longest": True},
         {**_NEMO_MEGATRON_PACKED, "model": "qwen3-32b", "gpus": 64, "tp": 4, "pp": 4,
          "grad_accum": 256, "checkpointing": False},
         _nemo_assumed(4, False) + "; Megatron TP4 (sequence parallel) PP4 as the recipe sets "
         "them; 256 micro-batches per optimizer step (512 sequences over data parallelism 2)"
         + _nemo_pp_padding(4, 1)
         + _NEMO_ASYNC_ENGINE_ASSUMED),
    Case(5, "h100-sxm", {**_NEMO_QWEN, **_NEMO_COLOCATED, **_NEMO_LOGPROBS,
                         "response_tokens": 3196,
                         **_NEMO_HOST_COPIES,
                         "rollout_tensor_parallel": 2, **_nemo_prompt(5)},
         {**_NEMO_MEGATRON, "model": "qwen3-30b-a3b", "gpus": 32, "ep": 8, "grad_accum": 16,
          "checkpointing": False, "moe_dispatch": "allgather-unfused"},
         _nemo_assumed(5, False) + "; Megatron TP1 PP1 EP8 as the recipe sets them; 16 "
         "micro-batches per optimizer step (512 sequences over 32 data-parallel ranks); MoE "
         "routing as grpo_math_1B.yaml sets it (allgather dispatcher, unfused permute, fp64 "
         "router: moe_dispatch allgather-unfused, its operators counted from Megatron-LM@4bbcd72d "
         "and its combine reduce-scattered in fp64)"
         + _NEMO_HOST_ASSUMED + _NEMO_LOGPROBS_ASSUMED),
    Case(6, "gb200", {**_NEMO_8B, **_NEMO_COLOCATED, **_NEMO_LOGPROBS, "response_tokens": 1066,
                      **_nemo_prompt(6), **_NEMO_PACKED_8B},
         {**_NEMO_MEGATRON_PACKED, "model": "llama-3.1-8b", "gpus": 8},
         _nemo_assumed(6, True) + _NEMO_PACKED_8B_ASSUMED
         + _NEMO_HOST_GB200 + _NEMO_LOGPROBS_ASSUMED),
    Case(7, "gb200", {**_NEMO_8B, "response_tokens": 1107, **_NEMO_DEDICATED, "rollout_gpus": 4,
                      **_nemo_prompt(7), **_NEMO_PACKED_8B},
         {**_NEMO_MEGATRON_PACKED, "model": "llama-3.1-8b", "gpus": 8},
         _nemo_assumed(7, True) + _NEMO_PACKED_8B_ASSUMED
         + _NEMO_ASYNC_ENGINE_ASSUMED),
    Case(8, "gb200", {**_NEMO_QWEN, **_NEMO_COLOCATED, **_NEMO_LOGPROBS,
                      "response_tokens": 3253,
                      **_nemo_prompt(8)},
         {**_NEMO_MEGATRON, "model": "qwen3-32b", "gpus": 16, "tp": 2, "grad_accum": 64,
          "checkpointing": False},
         _nemo_assumed(8, False) + "; 64 micro-batches per optimizer step (512 sequences over "
         "data parallelism 8)"
         + _NEMO_HOST_GB200 + _NEMO_LOGPROBS_ASSUMED),
    Case(9, "gb200", {**_NEMO_QWEN, "response_tokens": 3258, **_NEMO_DEDICATED,
                      "rollout_gpus": 16, **_nemo_prompt(9)},
         {**_NEMO_MEGATRON, "model": "qwen3-32b", "gpus": 32, "tp": 2, "grad_accum": 64,
          "checkpointing": False},
         _nemo_assumed(9, False) + "; 64 micro-batches per optimizer step (512 sequences over "
         "data parallelism 8)"
         + _NEMO_ASYNC_ENGINE_ASSUMED),
    Case(10, "h20", _VERL_7B, {**_VERL_7B_SETTINGS, "gpus": 32},
         _VERL_7B_ASSUMED + _VERL_COLOCATED_ASSUMED),
    Case(11, "h20", _VERL_7B, {**_VERL_7B_SETTINGS, "gpus": 64},
         _VERL_7B_ASSUMED + _VERL_COLOCATED_ASSUMED),
    Case(12, "h20", _VERL_7B, {**_VERL_7B_SETTINGS, "gpus": 128},
         _VERL_7B_ASSUMED + _VERL_COLOCATED_ASSUMED),
    Case(16, "h20", _VERL_30B, {**_VERL_30B_SETTINGS, "gpus": 128},
         _VERL_30B_ASSUMED + _VERL_COLOCATED_ASSUMED),
    Case(13, "h20", {**_VERL_7B_ASYNC, "rollout_gpus": 16}, {**_VERL_7B_SETTINGS, "gpus": 32},
         _VERL_7B_STREAMED_ASSUMED + _VERL_ASYNC_ASSUMED),
    Case(14, "h20", {**_VERL_7B_ASYNC, "rollout_gpus": 32}, {**_VERL_7B_SETTINGS, "gpus": 64},
         _VERL_7B_STREAMED_ASSUMED + _VERL_ASYNC_ASSUMED),
    Case(15, "h20", {**_VERL_7B_ASYNC, "rollout_gpus": 64}, {**_VERL_7B_SETTINGS, "gpus": 128},
         _VERL_7B_STREAMED_ASSUMED + _VERL_ASYNC_ASSUMED),
    Case(40, "h20", {**_VERL_7B_PIPELINE, "rollout_gpus": 64}, {**_VERL_7B_SETTINGS, "gpus": 128},
         _VERL_7B_STREAMED_ASSUMED + "; 64 rollout + 64 trainer GPUs (the same table's partial-rollout "
         "run's split; not stated for this row); the rollouter's 16 prompts in flight per "
         "server, refilled as each finishes, as the engine's max_num_seqs (256); the first "
         "local update's prompts done after a quarter "
         "of the rollouts"),
    Case(17, "h20", {**_VERL_30B_ASYNC, "rollout_gpus": 96},
         {**_VERL_30B_SETTINGS, "gpus": 128, "cp": 2},
         _VERL_30B_ASSUMED + "; the script's CP 2 too" + _VERL_ASYNC_ASSUMED
         + "; the script's Megatron param/grad/optimizer offload as offload between phases, "
         "its CPU Adam (optimizer_cpu_offload) not expressed (a per-step CPU optimizer is "
         "modelled for data parallelism only)"),
    _easyr1(18, "h100-sxm", "qwen2.5-vl-3b", 1, 2, "bf16-amp", 2),
    _easyr1(19, "h100-sxm", "qwen2.5-vl-7b", 1, 2, "bf16-amp", 2),
    _easyr1(20, "h100-sxm", "qwen2.5-vl-7b", 4, 2, "bf16-amp", 8),
    _easyr1(21, "l20", "qwen2.5-vl-7b", 1, 2, "bf16-amp", 2),
    # the 32B row's script (examples/qwen2_5_vl_32b_geo3k_grpo.sh @8460e817): the defaults with
    # worker.actor.fsdp.torch_dtype=bf16, worker.actor.optim.strategy=adamw_bf16 and
    # worker.rollout.tensor_parallel_size=8 (the table's "BF16"); the model added to the catalog
    # for it (issue 13), set nothing from the row
    _easyr1(22, "h100-sxm", "qwen2.5-vl-32b", 1, 8, "bf16", 2),
    _verl_qwen35(39),
    Case(23, "a800-80gb", {**_DSCHAT, "rollout_batch": 8, **_DSCHAT_CRITIC_OFFLOADED,
                           "reward": {"kind": "model", "model": "llama-2-7b"}},
         {"model": "llama-2-7b", "method": "full", "gpus": 8, "checkpointing": True,
          "zero_stage": 2, "offload": "optimizer", "micro_batch": 8, "grad_accum": 2,
          **_DS_NO_OVERLAP, **_DSCHAT_PAGEABLE},
         _DSCHAT_ASSUMED + _DSCHAT_NO_OVERLAP),
    # the table's row 'DeepspeedChat(w/o offload)': the script without --offload (the optimizer
    # on the GPU), with the row's micro batches
    Case(24, "a800-80gb", {**_DSCHAT, "rollout_batch": 4, **_DSCHAT_CRITIC,
                           "reward": {"kind": "model", "model": "llama-2-7b"}},
         {"model": "llama-2-7b", "method": "full", "gpus": 8, "checkpointing": True,
          "zero_stage": 2, "micro_batch": 4, "grad_accum": 4},
         _DSCHAT_ASSUMED + "; the 7B script's settings without --offload (the row's 'w/o "
         "offload') and with the row's micro batches 4 / 4"),
    # OpenRLHF without Ray (train_ppo.py): every model on the 8 GPUs, HF generate per
    # micro_rollout_batch_size prompts; ZeRO stage and offload as its example script of the
    # same commit sets them (examples/scripts/train_ppo_llama.sh @dbdd43b: --zero_stage 2
    # --adam_offload), the row not stating them
    Case(25, "a800-80gb", {**_DSCHAT, "rollout_batch": 8,
                           "reward": {"kind": "model", "model": "llama-2-7b"}},
         {"model": "llama-2-7b", "method": "full", "gpus": 8, "checkpointing": True,
          "zero_stage": 2, "offload": "optimizer", "micro_batch": 8, "grad_accum": 2,
          **_DS_NO_OVERLAP, **_ORLHF_PAGEABLE_STEP},
         "prompts and responses all 1,024 tokens (the benchmark's max; means not given; "
         "OpenRLHF's HF generate stops once every sequence of a batch has its EOS: an upper "
         "end); reward model = the actor's size; ZeRO-2 with --adam_offload (the branch's train_ppo_llama.sh "
         "@dbdd43b; not stated for the row); transformers 4.38's host time per layer as "
         "4.46's fit (4.38's 15% more operators a layer counted, not applied: docs/rl.md)"
         + _ORLHF_NO_OVERLAP),
    Case(28, "a800-80gb", {**_DSCHAT, "rollout_batch": 2, **_DSCHAT_CRITIC_OFFLOADED,
                           "reward": {"kind": "model", "model": "llama-2-13b"}},
         {"model": "llama-2-13b", "method": "full", "gpus": 8, "checkpointing": True,
          "zero_stage": 2, "offload": "optimizer", "micro_batch": 2, "grad_accum": 8,
          **_DS_NO_OVERLAP, **_DSCHAT_PAGEABLE},
         _DSCHAT_ASSUMED + _DSCHAT_NO_OVERLAP),
    # OpenRLHF with Ray and no vLLM (issue 13): the 7B Ray script of the branch
    # (examples/scripts/train_ppo_llama_ray.sh @dbdd43b: reference 1, reward 1, critic 2, actor 4
    # GPUs, --zero_stage 2 --adam_offload --gradient_checkpointing --micro_rollout_batch_size 16
    # --micro_train_batch_size 8, train_batch_size 128, transformers 4.38.2 per the benchmark's
    # README). Without vLLM engines each actor rank generates with HF generate
    # (ppo_utils/experience_maker.py RemoteExperienceMaker._generate_local: self.actor.generate on
    # micro_rollout_batch_size prompts a call; ppo_trainer.py fit: rollout_batch_size //
    # (actor world size x micro_rollout_batch_size) calls per rank) on the 4 GPUs it trains on,
    # then scores; the reference, reward and critic GPUs wait for its sequences: placement actor
    Case(26, "a800-80gb", {**_DSCHAT, "placement": "actor", "actor_gpus": 4, "critic_gpus": 2,
                           "rollout_batch": 16,
                           "reward": {"kind": "model", "model": "llama-2-7b"}},
         {"model": "llama-2-7b", "method": "full", "gpus": 8, "checkpointing": True,
          "zero_stage": 2, "offload": "optimizer", "micro_batch": 8, "grad_accum": 4,
          **_DS_NO_OVERLAP, **_ORLHF_PAGEABLE_STEP},
         _ORLHF_HF_ASSUMED + "; the table's training micro-batch 8, accumulation 4 "
         "(train_batch_size 128 over the actor's 4 GPUs)" + _ORLHF_NO_OVERLAP),
    # the 13B row: no 13B Ray script on the branch; the 7B script's split and settings with the
    # table's micro batches
    Case(29, "a800-80gb", {**_DSCHAT, "placement": "actor", "actor_gpus": 4, "critic_gpus": 2,
                           "rollout_batch": 8,
                           "reward": {"kind": "model", "model": "llama-2-13b"}},
         {"model": "llama-2-13b", "method": "full", "gpus": 8, "checkpointing": True,
          "zero_stage": 2, "offload": "optimizer", "micro_batch": 4, "grad_accum": 8,
          **_DS_NO_OVERLAP, **_ORLHF_PAGEABLE_STEP},
         _ORLHF_HF_ASSUMED + "; no 13B Ray script: the 7B script's 1:1:4:2 split, ZeRO-2 and "
         "--adam_offload; the table's training micro-batch 4, accumulation 8 "
         "(train_batch_size 128 over the actor's 4 GPUs)" + _ORLHF_NO_OVERLAP),
    # the table's 1:1:2:2:2 as reference:reward:actor:critic:vLLM (the order of the 70B
    # script's flags, whose 2:2:4:4:4 it matches); the 7B Ray script's ZeRO-2 and --adam_offload
    # (train_ppo_llama_ray.sh @dbdd43b); accumulation = train_batch_size 128 / (the table's
    # training micro-batch x the actor's 2 GPUs)
    Case(27, "a800-80gb", {**_ORLHF, "rollout_gpus": 2, "rollout_batch": 16,
                           "actor_gpus": 2, "critic_gpus": 2,
                           "reward": {"kind": "model", "model": "llama-2-7b"}},
         {"model": "llama-2-7b", "method": "full", "gpus": 8, "checkpointing": True,
          "zero_stage": 2, "offload": "optimizer", "micro_batch": 8, "grad_accum": 8,
          **_DS_NO_OVERLAP, **_ORLHF_PAGEABLE_STEP},
         _ORLHF_ASSUMED + _ORLHF_ROLES_ASSUMED + _ORLHF_NO_OVERLAP),
    Case(30, "a800-80gb", {**_ORLHF, "rollout_gpus": 2, "rollout_batch": 8,
                           "actor_gpus": 2, "critic_gpus": 2,
                           "reward": {"kind": "model", "model": "llama-2-13b"}},
         {"model": "llama-2-13b", "method": "full", "gpus": 8, "checkpointing": True,
          "zero_stage": 2, "offload": "optimizer", "micro_batch": 4, "grad_accum": 16,
          **_DS_NO_OVERLAP, **_ORLHF_PAGEABLE_STEP},
         _ORLHF_ASSUMED + _ORLHF_ROLES_ASSUMED + _ORLHF_NO_OVERLAP),
    # OpenRLHF's 70B recipe of the same role split (examples/scripts/train_ppo_llama_ray_70b.sh
    # @0ae587675465372d0f38a4c13275d84339c9350a: actor 4, critic 4, reference 2, reward 2 GPUs,
    # 2 vLLM engines of tensor parallel 2; --zero_stage 3 --adam_offload --gradient_checkpointing)
    Case(32, "a800-80gb", {**_ORLHF, "rollout_gpus": 4, "rollout_tensor_parallel": 2,
                           "rollout_batch": 4, "actor_gpus": 4, "critic_gpus": 4,
                           "reward": {"kind": "model", "model": "llama-2-70b"}},
         {"model": "llama-2-70b", "method": "full", "gpus": 16, "checkpointing": True,
          "zero_stage": 3, "offload": "optimizer", "micro_batch": 4, "grad_accum": 8,
          "zero3_engine": "deepspeed", **_ORLHF_PAGEABLE_STEP},
         "prompts and responses all 1,024 tokens (the benchmark's max; means not given; "
         "OpenRLHF's vLLM sampling stops at EOS: an upper end); reward model = the actor's "
         "size; the settings of OpenRLHF's 70B script of the same 2:2:4:4:4 split "
         "(train_ppo_llama_ray_70b.sh @0ae5876: ZeRO-3 with --adam_offload, 2 vLLM engines of "
         "TP 2; actor 4 and critic 4 GPUs, each training on its own at once; DeepSpeed's ZeRO-3 "
         "engine; pinned buffers, but deepspeed 0.13.2's step copy up through pageable memory), "
         "the table's row "
         "not stating them; the table's training micro-batch 4, accumulation 8 "
         "(train_batch_size 128 over the actor's 4 GPUs)"),
    *_NEMO_LARGE_CASES,
]


# The rule reward's host work (issue 13; plan/rl_reward_host.py), as each framework's config
# sets it, read not fitted:
# - NeMo-RL (@108bffda and v0.6.0): grpo_math_1B.yaml's env.math (num_workers 8,
#   math_verify_impl hf_math_verify: Math-Verify's math_metric in HFVerifyWorker), which the
#   performance recipes inherit; the DAPO recipe (dapo-deepseek-v3-64n8g.yaml) sets 64 workers
#   and dapo_math_verify (verl's math_dapo, the last 300 characters). Where vLLM's async_engine
#   is false (the rows this harness gives rollout_returns_logprobs: vllm.LLM in the worker, see
#   _NEMO_LOGPROBS) run_multi_turn_rollout scores the whole batch after generation, chunked
#   over the workers; where it is true (every one-step-off recipe, the colocated DeepSeek-V3
#   GRPO and Qwen3-235B ones) run_async_multi_turn_rollout scores each sample as it finishes
#   through the one environment actor (per_response).
# - verl's fully_async_policy shells (@df340d70) set reward_model.reward_manager=dapo
#   (math_dapo's string match, data source math_dapo); at that commit reward_model.use_reward_loop
#   is true by default (_generated_ppo_trainer.yaml) and, with no reward model, the agent loop
#   scores each sample as its generation ends in its RewardLoopWorker (agent_loop.py
#   _compute_score), beside the rollout; ray_trainer.py's "reward" timer then reads rm_scores.
# Other rows: verifier unset, not costed: reward models (OpenRLHF, DeepSpeed-Chat); EasyR1,
# whose Ray actor grades beside the old-log-prob and reference passes (this doc's EasyR1
# section: about 12 s of mathruler beside 11.5 s of passes, @8460e817); verl's Geo3K row.
def _with_reward_host(c: Case) -> Case:
    r = rows()[c.row]
    if r["reward"] != "rule":
        return c
    if r["framework"].startswith("NeMo-RL"):
        if "dapo-deepseek-v3" in r["source"]:
            reward = {"kind": "rule", "verifier": "string-match", "workers": 64}
            text = ("; the reward on the host: dapo_math_verify (verl's math_dapo) over the "
                    "recipe's 64 env workers after the rollout (dapo-deepseek-v3-64n8g.yaml, "
                    "async_engine false), 28 us a response measured on this VM "
                    "(scripts/bench_reward_host.py), taken for the host's CPU")
        elif c.phase.get("placement") == "dedicated" or not c.phase.get(
                "rollout_returns_logprobs"):
            reward = {"kind": "rule", "verifier": "math-verify", "per_response": True}
            text = ("; the reward on the host: Math-Verify's math_metric (HFVerifyWorker, "
                    "grpo_math_1B.yaml hf_math_verify) on each response as it finishes, one at "
                    "a time through the environment actor (async_engine true: "
                    "run_async_multi_turn_rollout), beside the rollout; 2-6 ms a response "
                    "measured on this VM (scripts/bench_reward_host.py), taken for the host's "
                    "CPU")
        else:
            reward = {"kind": "rule", "verifier": "math-verify", "workers": 8}
            text = ("; the reward on the host: Math-Verify's math_metric (HFVerifyWorker, "
                    "grpo_math_1B.yaml hf_math_verify) over env.math.num_workers 8 after the "
                    "rollout (async_engine false: run_multi_turn_rollout), 2-6 ms a response "
                    "measured on this VM (scripts/bench_reward_host.py), taken for the host's "
                    "CPU")
    elif r["framework"].startswith("verl (") and "fully_async_policy" in r["source"]:
        reward = {"kind": "rule", "verifier": "string-match", "per_response": True}
        text = ("; the reward on the host: the shells' reward_manager=dapo (math_dapo's string "
                "match) in the agent loop's reward loop, each response as it finishes, beside "
                "the rollout (use_reward_loop true, agent_loop.py _compute_score @df340d70), 28 "
                "us a response measured on this VM (scripts/bench_reward_host.py), taken for "
                "the host's CPU")
    else:
        return c
    return Case(c.row, c.gpu, {**c.phase, "reward": reward}, c.settings, c.assumed + text)


CASES = [_with_reward_host(c) for c in CASES]

_INFLIGHT_ASSUMED = (
    "; NeMo-RL's collector with in-flight weight updates replayed group by group "
    "(in_flight_weight_updates: async_utils.py @v0.6.0, the recipe's async_grpo."
    "in_flight_weight_updates true): a prompt group's slot freed when its longest response "
    "ends, the engines stalled through the refit; each group's responses taken to spread as "
    "the batch's do (consecutive draws of the batch's interleaved lengths), every step the same "
    "draw, the engines as one pool sharing the running sequences evenly (round-robin requests), "
    "an admission's prefill beside running requests costing only what it adds to their decode "
    "step")


def _with_inflight_text(c: Case) -> Case:
    """The in-flight replay's assumptions in the rows that use it."""
    if not c.phase.get("in_flight_weight_updates"):
        return c
    return Case(c.row, c.gpu, c.phase, c.settings, c.assumed + _INFLIGHT_ASSUMED)


CASES = [_with_inflight_text(c) for c in CASES]

# Rows left out, each with why: what the source does not state, or what the rl phase cannot
# express (0-based rows of rl_steps.csv)
_VERL_ASYNC_WHY = ("verl's fully-async mode (partial rollouts, staleness 0.5, 4 mini-batches per "
                   "sync): its 'step' is the trainer's, fed by a stream of rollouts, not a "
                   "synchronous step; and the mean response is not stated")
_README_WHY = ("the README gives no model family, prompt or response lengths, micro-batches or "
               "GPU split between roles")
NOT_EXPRESSED: dict[int, str] = {
    31: "'Llama-2-34B' as the table names it: no Llama-2 34B was released (the 34B of that "
        "family is Code Llama's), so the model's shape is not known",
    33: _README_WHY, 34: _README_WHY, 35: _README_WHY, 36: _README_WHY,
    37: "DeepSpeed-Chat's Hybrid Engine (inference kernels inside the training engine) and "
        "the prompt and response lengths are not stated",
    38: "an unnamed 13B model; prompts per step, completion length, KL and reward not stated",
    63: "Nemotron-3-Nano-30B-A3B is in the catalog (nemotron-3-nano, a hybrid of Mamba-2, "
        "attention and MoE "
        "layers), but the row is multi-turn SWE-agent RL at a 131,072-token cap whose prompts "
        "per step, generations per prompt, turns a sample and environment (sandboxed "
        "repositories, tool calls, test runs between turns) are not stated (the page gives "
        "only its G-Average Seq len, 31,599, and 37.5 tokens/s/GPU); the page names no recipe "
        "for it at v0.6.0 (its dataset link points to the super-v3 branch's "
        "docs/guides/nemotron-3-super.md), and the training TP 8 its table states cannot "
        "split the model's 2 query groups, which Megatron-Core's divide(num_query_groups, tp) "
        "requires",
}


#: the scoring forwards' parts of a step's details: the policy's log-probs, the reference, the
#: reward model and PPO's critic values
_SCORING_PARTS = ("old_policy_log_probs_s", "reference_model_s", "reward_model_s",
                  "critic_value_pass_s")


def timer_leaves_out_scoring(framework: str) -> bool:
    """Whether the framework's step time leaves the scoring forwards out: DeepSpeed-Chat's
    e2e_time is the generate calls x generation batches + the training loop ("it is an
    approximation, we did not include, e.g., rw forward time", DeepSpeedExamples step3 main.py;
    the benchmark's End-to-End latency = its Generation + Training columns)."""
    return framework.startswith("DeepSpeed-Chat")


#: the network between nodes of a system a row names (its CSV gpu column), by catalog node:
#: NeMo-RL's pages say "System: DGX-H100" (the catalog's dgx-h100: 8 ConnectX-7 400 Gb/s, 50
#: GB/s a GPU) and "GB200-NVL72" (between racks InfiniBand, its rate per GPU not read: the DGX
#: B200's 400 Gb/s, as validation/blackwell.py assumes for Megatron-Bridge's GB200 rows).
#: Rows that name no system keep the plan's default (25 GB/s a GPU)
_SYSTEM_NODES = {"H100 (DGX-H100)": "dgx-h100", "GB200 (GB200-NVL72)": "dgx-b200"}


def system_network_gb_per_s(gpu_column: str) -> float | None:
    """GB/s per GPU, one way, between the nodes of the system a row names; None: not named."""
    from gpuhours import catalog

    name = _SYSTEM_NODES.get(gpu_column)
    return None if name is None else catalog.node(name).inter_node_gb_per_s_one_way


def predict(case: Case) -> tuple[float | None, str]:
    """(predicted step time in s as the row's framework times it, or None; the bottleneck or
    the error)."""
    details, why = _details(case)
    if details is None:
        return None, why
    step = float(details["step_time_s"])
    if timer_leaves_out_scoring(rows()[case.row]["framework"]):
        step -= sum(float(details.get(k, 0.0)) for k in _SCORING_PARTS)
    return step, why


#: each case's phase as evaluated in this process, by its inputs: the tables, the record and
#: the tests ask for the same case many times, and a plan's evaluation is seconds for some
_EVALUATED: dict[str, tuple[dict[str, Any] | None, str]] = {}


def _details(case: Case) -> tuple[dict[str, Any] | None, str]:
    """The phase's details (None when not expressed) and its bottleneck (or the error); a copy,
    kept per case (_EVALUATED) but under a what-if (patched_estimate)."""
    from gpuhours_dev.validation import estimate_patched

    if estimate_patched():  # a what-if: neither read nor kept
        return _evaluated(case)
    key = json.dumps([case.row, case.gpu, case.phase, case.settings], sort_keys=True,
                     default=repr)
    if key not in _EVALUATED:
        _EVALUATED[key] = _evaluated(case)
    details, why = _EVALUATED[key]
    return (None if details is None else copy.deepcopy(details)), why


def _evaluated(case: Case) -> tuple[dict[str, Any] | None, str]:
    from gpuhours.errors import InputError
    from gpuhours.plan.budget import evaluate
    from gpuhours.plan.load import load_plan

    # a GB200 job's GPUs in NVLink domains of whole trays as Megatron-Bridge's launcher asks
    # Slurm for them (validation/blackwell.py gb200_nvlink_domain_gpus: all its trays up to 18,
    # else the largest divisor of the tray count up to 18: 64 GPUs a domain for a job of 128;
    # NeMo-RL's page does not say how its jobs were placed: an assumption), where a rack of 72
    # taken whole would leave TP and EP groups across its edge; DGX/HGX nodes of 8
    from gpuhours_dev.validation.blackwell import gb200_nvlink_domain_gpus

    per_node = (gb200_nvlink_domain_gpus(case.settings["gpus"])
                if case.gpu in _NVLINK_DOMAIN_GPUS else 8)
    hardware = {"gpu": case.gpu, "gpus_per_node": per_node,
                "nodes": max(1, -(-case.settings["gpus"] // per_node))}
    network = system_network_gb_per_s(rows()[case.row]["gpu"])
    if network is not None:
        hardware["inter_node_gb_per_s_one_way"] = network
    plan = {"project": f"rl-row-{case.row}", "hardware": hardware,
            "phases": [{"name": "rl", "kind": "rl", "steps": 1, **case.settings, **case.phase}]}
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "plan.yaml"
        f.write_text(yaml.safe_dump(plan, sort_keys=False))
        try:
            p = evaluate(load_plan(f)).phases[0]
        except InputError as e:  # DoesNotFit included: the reason, without the temporary path
            return None, f"not expressed: {e.message}"
    return p.details, p.bottleneck


def _measured_old_logprob_s(r: dict[str, str]) -> float | None:
    for part in r["other_times"].split(";"):
        words = part.split()
        if len(words) == 2 and words[0] == "old_log_prob":
            return float(words[1])
    return None


#: the rows the driver's rate and the verl 7B mean are set from (0-based): verl's colocated 7B
#: step on 32 and 128 H20s
DRIVER_TUNED = (10, 12)
#: the row the fully-async 7B runs' mean response is set from (0-based): the 64 + 64 run
#: (CSV line 17), the fully-async run the README reuses in its mode, staleness and
#: require_batches tables
STREAMED_TUNED = (15,)
#: every row a figure was set from; the rest are held out
TUNED = DRIVER_TUNED + STREAMED_TUNED


def driver_rate_fit() -> tuple[float, float, float]:
    """(intercept s, bytes, bytes/s): the old-log-prob pass of the DRIVER_TUNED rows, one recipe
    on two GPU counts, as a + b/GPUs; `a` is what no GPU count removes, taken as the padded
    batch through verl's driver (gpuhours.plan.rl_driver) at the returned rate; the rate is
    assumptions.RL_DRIVER_BYTES_PER_S, rounded."""
    from gpuhours.plan import rl_driver

    data = rows()
    (g1, t1), (g2, t2) = ((int(data[r]["n_gpus"]), _measured_old_logprob_s(data[r]) or 0.0)
                          for r in DRIVER_TUNED)
    slope = (t1 - t2) / (1 / g1 - 1 / g2)
    intercept = t1 - slope / g1
    c = next(c for c in CASES if c.row == DRIVER_TUNED[0])
    moved = rl_driver.scoring_pass_bytes(
        c.phase["prompts_per_step"] * c.phase["generations_per_prompt"],
        c.phase["prompt_tokens"], c.phase["max_response_tokens"], 2)
    return intercept, moved, moved / intercept


def _inferred_mean(c: Case, target: float) -> tuple[int, dict[str, Any]]:
    """The mean response (a multiple of 8 tokens: a context-parallel layout must divide the
    sequence) at which the case's old-policy log-prob pass takes `target` seconds (bisection),
    and the phase's details at it."""

    def with_mean(mean: int) -> dict[str, Any] | None:
        return _details(Case(c.row, c.gpu, {**c.phase, "response_tokens": mean},
                             c.settings, c.assumed))[0]

    lo, hi = 16, int(c.phase["max_response_tokens"]) // 8 * 8
    while hi - lo > 8:
        mid = (lo + hi) // 16 * 8
        d = with_mean(mid)
        if d is not None and d["old_policy_log_probs_s"] < target:
            lo = mid
        else:
            hi = mid
    # the bracket's end whose pass is nearer the target (not always the lower one)
    ends = [(m, with_mean(m)) for m in (lo, hi)]
    mean, d = min(((m, x) for m, x in ends if x is not None),
                  key=lambda e: abs(e[1]["old_policy_log_probs_s"] - target))
    return mean, d


def verl_7b_mean_fit() -> int:
    """The verl 7B recipe's mean response (tokens, a multiple of 8), FITTED on the DRIVER_TUNED
    rows: for each, the mean at which its old-log-prob pass (a forward over every sequence plus
    the driver's transfer) takes its measured time; their average, rounded to 8 tokens. The pass
    does not depend on the update's setup, so the fit holds whatever the update's model."""
    data = rows()
    means = [_inferred_mean(c, _measured_old_logprob_s(data[c.row]) or 0.0)[0]
             for c in CASES if c.row in DRIVER_TUNED]
    return 8 * math.floor(sum(means) / len(means) / 8 + 0.5)  # half up, not Python's to-even


def _update_implied_mean(c: Case, target: float) -> int:
    """The mean response (a multiple of 8 tokens) at which the case's policy update (with the
    driver's transfer) takes `target` seconds: bisection, then the bracket's end nearer."""

    def update_s(mean: int) -> float:
        d = _details(Case(c.row, c.gpu, {**c.phase, "response_tokens": mean}, c.settings,
                          c.assumed))[0]
        assert d is not None
        return float(d["policy_update_s"])

    lo, hi = 16, int(c.phase["max_response_tokens"]) // 8 * 8
    while hi - lo > 8:
        mid = (lo + hi) // 16 * 8
        lo, hi = (mid, hi) if update_s(mid) < target else (lo, mid)
    return min((lo, hi), key=lambda m: abs(update_s(m) - target))


def verl_7b_streamed_mean_fit() -> int:
    """The fully-async verl 7B runs' mean response (tokens, a multiple of 8), FITTED on the
    STREAMED_TUNED row: the mean at which its policy update takes its measured time. The
    streamed runs measured no old-log-prob pass (they take the rollout's log-probs), so their
    update is the one phase that weighs their tokens; the 16 + 16 and 32 + 32 runs and the
    staleness-0 pipeline are held out. It rests on the driver's rate (fitted on DRIVER_TUNED)."""
    data = rows()
    (c,) = [c for c in CASES if c.row in STREAMED_TUNED]
    return _update_implied_mean(c, float(data[c.row]["update_time_s"]))


def streamed_update_line() -> tuple[float, float, float, float]:
    """(a s, b GPU-s, predicted s, measured s): the fully-async 7B runs' measured updates as
    a + b/trainer GPUs through the 16 + 16 and 64 + 64 runs (CSV lines 15 and 17), and the
    32 + 32 run's (line 16) on that line beside its measured update. A diagnostic, counted
    nowhere, set from measurements alone: a is what no trainer GPU count removes (the driver's
    transfers are of that kind), b the work that the GPUs share."""
    data = rows()
    ends = []
    for row in (13, 15):
        c = next(c for c in CASES if c.row == row)
        ends.append((c.settings["gpus"] - c.phase["rollout_gpus"],
                     float(data[row]["update_time_s"])))
    (g1, t1), (g2, t2) = ends
    b = (t1 - t2) / (1 / g1 - 1 / g2)
    a = t1 - b / g1
    mid = next(c for c in CASES if c.row == 14)
    g = mid.settings["gpus"] - mid.phase["rollout_gpus"]
    return a, b, a + b / g, float(data[14]["update_time_s"])


def inferred_mean_report() -> str:
    """A diagnostic, counted nowhere: for the expressed rows that state no mean response but
    measured the old-policy log-prob pass (a forward over every sequence, nothing else), the
    mean response that makes that pass take its measured time (bisection), and the step
    predicted with it. It sets an input from the row itself, so its errors are not
    predictions; it says whether the rest of the step holds once the mean is known."""
    data = rows()
    lines = ["| row | assumed mean | inferred mean | measured step | predicted | error |",
             "|---|---|---|---|---|---|"]
    for c in CASES:
        r = data[c.row]
        target = _measured_old_logprob_s(r)
        if r["response_tokens_mean"] or target is None:
            continue
        lo, d = _inferred_mean(c, target)
        measured = float(r["step_time_s"])
        lines.append(f"| {c.row + 2} | {c.phase['response_tokens']:,} | {lo:,} | "
                     f"{measured:,.1f} s | {d['step_time_s']:,.1f} s | "
                     f"{d['step_time_s'] / measured - 1:+.0%} |")
    return "\n".join(lines)


def streamed_at_twin_mean_report() -> str:
    """A diagnostic, counted nowhere: verl's fully-async rows measured no old-log-prob pass,
    so their mean response cannot be inferred from themselves; this runs each at the mean
    inferred for its synchronous twin (the colocated row of the same recipe on as many GPUs)
    and sets the update beside the measured one. The async runs are other runs, whose lengths
    the README says change strongly during training: a check of the stream's parts, not a
    prediction."""
    data = rows()
    lines = ["| row | twin | twin's inferred mean | measured step | predicted | error | "
             "update measured | update predicted | intake predicted | gen measured |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in CASES:
        r = data[c.row]
        if not c.phase.get("partial_rollout") or r["response_tokens_mean"]:
            continue
        twin = next((t for t in CASES if not t.phase.get("partial_rollout")
                     and t.settings.get("model") == c.settings.get("model")
                     and t.settings["gpus"] == c.settings["gpus"]
                     and _measured_old_logprob_s(data[t.row]) is not None), None)
        if twin is None:
            continue
        mean, _ = _inferred_mean(twin, _measured_old_logprob_s(data[twin.row]) or 0.0)
        d = _details(Case(c.row, c.gpu, {**c.phase, "response_tokens": mean}, c.settings,
                          c.assumed))[0]
        assert d is not None
        measured = float(r["step_time_s"])
        lines.append(f"| {c.row + 2} | {twin.row + 2} | {mean:,} | {measured:,.1f} s | "
                     f"{d['step_time_s']:,.1f} s | {d['step_time_s'] / measured - 1:+.0%} | "
                     f"{float(r['update_time_s']):,.1f} s | {d['policy_update_s']:,.1f} s | "
                     f"{d['rollout_intake_s']:,.1f} s | {float(r['gen_time_s']):,.1f} s |")
    return "\n".join(lines)


def update_implied_mean_report() -> str:
    """A diagnostic, counted nowhere (issue 13): for each verl 7B row, the mean response at
    which the estimate's policy update (with the driver's transfer) takes the row's measured
    update (bisection, 8-token steps), beside the recipe's mean fitted on rows 12 and 14's
    old-log-prob pass, and the row's update GPU-seconds. It sets an input from the row's own
    update, so it predicts nothing: it says how long the responses of each run would have to be
    for the update as modelled, which is how far apart the runs' lengths (or the update's
    efficiency on the H20) must be."""
    data = rows()
    lines = ["| row | GPUs (trainer) | placement | update measured | update GPU-s | "
             "update at the fitted mean | mean the update implies | of the fitted mean |",
             "|---|---|---|---|---|---|---|---|"]
    for c in CASES:
        r = data[c.row]
        if c.settings.get("model") != "qwen2.5-7b" or not r["update_time_s"]:
            continue
        target = float(r["update_time_s"])
        mean = _update_implied_mean(c, target)
        train = c.settings["gpus"] - (c.phase.get("rollout_gpus") or 0)
        # against the synchronous recipe's mean, whichever mean the row runs at
        at_sync = _details(Case(c.row, c.gpu, {**c.phase, "response_tokens": VERL_7B_MEAN},
                                c.settings, c.assumed))[0]
        assert at_sync is not None
        lines.append(f"| {c.row + 2} | {train} | {r['placement'][:28]} | {target:,.1f} s | "
                     f"{target * train:,.0f} | {at_sync['policy_update_s']:,.1f} s | {mean:,} | "
                     f"{mean / VERL_7B_MEAN:.2f} |")
    return "\n".join(lines)


def _config_matmul_weights(model: str) -> tuple[int, int, int]:
    """From a catalog model's config.json, not the estimator: its matmul weights (q, k, v, o;
    gate, up, down, per layer; the output head), its layers and its KV width (KV heads x
    head_dim), for the diagnostics below."""
    import json

    import gpuhours

    cfg_path = Path(gpuhours.__file__).parent / "catalog" / "data" / "models" / f"{model}.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    d, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    head_dim = cfg.get("head_dim") or d // cfg["num_attention_heads"]
    q = cfg["num_attention_heads"] * head_dim
    kv = cfg["num_key_value_heads"] * head_dim
    matmul = layers * (2 * d * q + 2 * d * kv + 3 * d * cfg["intermediate_size"]) \
        + cfg["vocab_size"] * d
    return matmul, layers, kv


def update_bound_sequence_tokens(c: Case, recompute: bool = True) -> float:
    """The longest mean sequence (prompt + response, tokens) a verl row's measured update could
    have trained, at 100% of the GPU's dense bf16 peak on its trainer GPUs: measured update s x
    trainer GPUs x peak / (FLOPs a token x the step's sequences). A token costs 6 x the matmul
    weights (forward and backward), 8 x with verl's default recomputation (model
    `enable_gradient_checkpointing: True`, verl/trainer/config/model/hf_model.yaml @df340d70;
    the 7B scripts leave it on). Everything else is left out (attention scores, the optimizer,
    FSDP traffic, the driver's transfers inside the timer), so the real bound is lower. A
    diagnostic, counted nowhere, set from nothing fitted (issue 13): it says which runs cannot
    have trained sequences as long as the mean fitted on rows 12 and 14, whatever the update's
    efficiency."""

    from gpuhours import catalog

    r = rows()[c.row]
    matmul, _, _ = _config_matmul_weights(c.settings["model"])
    per_token = (8 if recompute else 6) * matmul
    train_gpus = c.settings["gpus"] - (c.phase.get("rollout_gpus") or 0)
    sequences = c.phase["prompts_per_step"] * c.phase["generations_per_prompt"]
    bf16_tflops = catalog.gpu(c.gpu).dense_tflops.bf16
    assert bf16_tflops is not None, c.gpu
    return float(r["update_time_s"]) * train_gpus * bf16_tflops * 1e12 / (per_token * sequences)


# The README's cumulative "total time" columns (volcengine/verl
# verl/experimental/fully_async_policy/README.md @df340d70, the 7B table "Asynchronous Training on
# 7B Model" and the 30B table "30B Model Mode Experiment"): each run's wall time after 100, 200,
# 300 and 400 steps, as printed, keyed by 0-based CSV row. Their differences / 100 are each
# quarter's mean step, measured by the source. Nothing is set from them: `run_drift_report`
# shows how one run's step changes over its 400 steps and whether the three GPU counts of the
# synchronous 7B recipe agree at one stage of training.
README_TOTALS: dict[int, tuple[str, str, str, str]] = {
    10: ("13h 44m", "1d 3h 43m", "2d 9h 22m", "3d 17h 5m"),
    11: ("10h 22m", "20h 45m", "1d 7h 6m", "1d 17h 32m"),
    12: ("8h 36m", "17h 56m", "1d 5h 6m", "1d 16h 48m"),
    13: ("7h 58m", "16h 21m", "1d 0h 53m", "1d 9h 26m"),
    14: ("4h 57m", "10h 14m", "16h 58m", "21h 40m"),
    15: ("3h 13m", "6h 46m", "10h 53m", "17h 22m"),
    16: ("13h 36m", "1d 3h 48m", "1d 19h 4m", "2d 11h 39m"),
    17: ("6h 45m", "14h 48m", "1d 0h 9m", "1d 10h 41m"),
    # the 128-card mode table's staleness-0 row ("stream off policy pipeline")
    40: ("4h 25m", "9h 41m", "15h 2m", "1d 1h 53m"),
}


def duration_s(text: str) -> float:
    """Seconds of a README duration such as '1d 3h 43m' (days, hours, minutes)."""
    unit_s = {"d": 86_400.0, "h": 3_600.0, "m": 60.0}
    return sum(float(part[:-1]) * unit_s[part[-1]] for part in text.split())


def quarter_steps_s(row: int) -> list[float]:
    """Mean step (s) of steps 1-100, 101-200, 201-300 and 301-400 of a verl README run: the
    differences of its cumulative totals over 100 steps (they include validation every 20
    steps and anything else between steps, as the totals do)."""
    totals = [duration_s(t) for t in README_TOTALS[row]]
    return [(b - a) / 100 for a, b in zip([0.0, *totals[:-1]], totals, strict=True)]


def first_quarter_line() -> tuple[float, float, float, float]:
    """The synchronous 7B recipe's first 100 steps as a + b/GPUs, from its 32- and 128-GPU runs
    (rows 12 and 14, CSV lines): (a s, b GPU-s, a + b/64, the 64-GPU run's measured mean of its
    first 100 steps). A check that the three runs agree at one stage of training, where their
    response lengths have had the least time to part; it sets nothing."""
    s32, s64, s128 = (quarter_steps_s(r)[0] for r in (10, 11, 12))
    b = (s32 - s128) / (1 / 32 - 1 / 128)
    a = s128 - b / 128
    return a, b, a + b / 64, s64


def run_drift_report() -> str:
    """A diagnostic, counted nowhere: each verl README run's mean step by quarter of its 400
    steps (`quarter_steps_s`), beside the mean step its table gives."""
    data = rows()
    lines = ["| row | GPUs | placement | steps 1-100 | 101-200 | 201-300 | 301-400 | last / first "
             "| table's step |", "|---|---|---|---|---|---|---|---|---|"]
    for row in sorted(README_TOTALS):
        r = data[row]
        q = quarter_steps_s(row)
        lines.append(f"| {row + 2} | {r['n_gpus']} | {r['placement'][:28]} | "
                     + " | ".join(f"{s:,.0f} s" for s in q)
                     + f" | {q[-1] / q[0]:.2f} | {float(r['step_time_s']):,.1f} s |")
    a, b, at64, measured64 = first_quarter_line()
    lines.append(f"\nFirst 100 steps of the synchronous 7B recipe as a + b/GPUs from rows 12 and "
                 f"14: a = {a:,.0f} s, b = {b:,.0f} GPU-s; at 64 GPUs {at64:,.0f} s, row 13's "
                 f"run measured {measured64:,.0f} s ({at64 / measured64 - 1:+.1%}).")
    return "\n".join(lines)


# Note for docs/rl.md (issue 13, the synchronous verl rows 12-14 and 18, 2026-11-25; adds to
# "Why the 64-GPU synchronous run is 2.2x faster"; no figure set, no row moves):
# - The parts (`verl_sync_parts_report`, measured / predicted): gen 357 / 429, 151 / 324,
#   178 / 272 s; old_log_prob 107.7 / 107.6, 70.3 / 71.8, 53.9 / 53.9 s (the fit); update
#   313.8 / 352.7, 133.4 / 203.0, 113.8 / 128.2 s; the rest (reward, advantages, validation)
#   11.2 / 10.9 / 10.7 s measured, none in the estimate.
# - The tuned pair misses by a part no GPU count shrinks: rows 12 and 14 are +99.5 and +97.5 s.
#   As a + b/GPUs through them, the estimate's b is the measured one within 0.5% (18,594
#   against 18,509 GPU-s) and its a is 97 s above (309 against 212 s). Row 13's +64% is that
#   a (x1.20: 599 s on the estimate's line at 64 GPUs against 501 s on the measured one) times
#   the run's own 27% below its siblings' line (x1.37: 501 s against 365 s), the run whose
#   first 100 steps sit on the siblings' first-quarter line within 1% (`run_drift_report`).
# - Where the 97 s lies: in gen (+72 s at 32 GPUs, +94 s at 128), whose fixed part in the
#   estimate is the longest response alone at the 28,672-token cap, 6.7 ms a step (vLLM's host
#   step 2.3 ms, fitted on vLLM 0.6.3 V0 rows; 3.9 ms of weights at the H20's 1,900 GB/s, fitted
#   on SGLang 0.4.6 rows, x the TP-4 width efficiency 0.51; 0.56 ms of all-reduces): 192 s.
#   If the cap was reached in a typical step, the 64- and 128-GPU runs' measured gen less the
#   estimate's driver transfer and weight sync leaves at most 4.2 and 5.1 ms a step
#   (`tail_step_bound_ms`). The same team's one-step-off README (volcengine/verl@15a9b0f5
#   recipe/one_step_off_policy/README.md: Qwen2.5-Math-7B DAPO, 32 H20, FSDP2, 20K cap,
#   colocate sync) gives its gen, 321 s, and a generate_sequences column, 247 s (which timer,
#   not said): 74 s outside it (in verl's colocated path the gen timer also holds the engines'
#   wake-up with the weight load, their sleep, the batch's post-processing); a 28K run
#   spending as much there would leave under 3 ms. Whether the cap was reached is not
#   published (verl logs response_length/max and clip_ratio to the README's W&B projects, not
#   stored here).
# - Tried, not adopted: (1) vLLM V1's host step from generation_published row 308 (its one V1
#   batch-1 row: GPT-2 on an H200, 41.8 ms for prefill + 32 tokens, 1.31 ms a token; the
#   estimate 2.49 ms, -47%) at 1.2 ms: rows 12 / 13 / 14 +13 / +64 / +27% -> +9 / +55 / +19%,
#   row 42 +23 -> +10%, but the NeMo-RL rows (vLLM V1 on H100 and GB200, already -11 to -37%)
#   fall further, row 8 -23 -> -36%, row 9 -13 -> -26%, rows 2-4 by 5-8 points, the other
#   NeMo rows by 0-5 and EasyR1's by 0-3: a change that helps these rows and moves others the
#   wrong way. (2) With it, the H20 at 3.1 TB/s (bytedance-iaas/sglang#753: SGLang of 2026 on
#   a 27B; an SGLang figure, not vLLM):
#   rows 12 / 13 / 14 -6 / +34 / +2%, row 42 -14%; the catalog's 1,900 GB/s is the fit of the
#   six SGLang 0.4.6 H20 rows, and no vLLM decode on an H20 is stored to replace it. The
#   measured vLLM V1 decode step on an H20 at TP 4 is what would settle this part.
# - Ruled out, with what was read:
#   (a) A setting that differs with the GPU count: the colocated baseline's script was never
#       shipped (the history of recipe/fully_async_policy/shell and
#       verl/experimental/fully_async_policy/shell on every ref holds none); the shipped 7B
#       scripts (df340d70 shell/dapo_7b_math_fsdp2_{16_16,32_32,64_64}.sh) differ only in
#       NNODES and staleness (0.1 / 0.1 / 0.5): rollout TP 4, gpu_memory_utilization 0.80,
#       max_num_batched_tokens 30,720 with chunked prefill, ppo_max_token_len_per_gpu 61,440,
#       log-prob 92,160, Ulysses SP 4, fsdp_size 8, dynamic batches, 32-prompt mini-batches,
#       n 16 at every size. The same team's colocated 7B script for one-step-off
#       (recipe/one_step_off_policy/shell/dapo_7b_math_fsdp2_colocate.sh before 2bb42bae: 8K
#       cap, n 12) runs vLLM at 0.80 with the actor offloaded; at 0.80 in place of the assumed
#       0.5 rows 12-14 do not move (no waves, no preemption either way).
#   (b) KV preemption at 32 GPUs: 1,024 sequences an engine x (256 + 1,696) tokens = 2.0M,
#       below the 2.73M-token cache at 0.5 (4.74M at 0.80), so no spread of lengths can
#       preempt at the fitted mean; the replay preempts nothing up to a mean of 4,800 tokens
#       on all three GPU counts. Only a 32-GPU mean above 2,407 tokens (at 0.5) could, in the
#       run's slow second half (4,369 at 0.80); its lengths are not published (verl's
#       agent_loop/num_preempted goes to W&B).
#   (c) A fixed cost the estimate under-counts: the opposite. Its fixed part is 97 s too
#       large; the one it lacks, the 10.7-11.2 s rest, is the same on all three counts and
#       shapes no scaling.
#   (d) A GPU-count effect in the update: the 64-GPU run's update (133.4 s) is 26% below its
#       siblings' line (313.8 and 113.8 s as a + b/GPUs: 180.5 s at 64) while its
#       old-log-prob pass is on theirs (70.3 s for 71.9). The same GPUs and layout run both
#       (one dynamic micro-batch a mini-batch and data-parallel group at this mean on every
#       count: 64 / 32 / 16 sequences of 1,952 tokens under 61,440 x 4), so what differs is
#       the run's sequences, not its GPUs.
# - Row 18 (the 30B run, -25%): its miss is in gen (348 s measured, 268 predicted), the update
#   (86 / 64 s) and the old-log-prob pass (28.7 / 22.2 s), the other way from the 7B rows, at
#   its assumed mean (2,048 tokens, a quarter of the cap; its old-log-prob pass implies 3,152,
#   at which the step is -12%: `inferred_mean_report`); its vLLM runs eager (enforce_eager), a
#   different decode step; not worked further here.

#: verl's synchronous colocated rows whose source splits the step into its timers (0-based):
#: the 7B DAPO runs on 32, 64 and 128 H20s (CSV lines 12-14) and the 30B GRPO run (line 18)
VERL_SYNC_SPLIT = (10, 11, 12, 16)


def _measured_part_s(r: dict[str, str], name: str) -> float:
    """A phase from a row's `other_times` ("old_log_prob 107.71; ref 20.86"), 0 if absent."""
    for part in r["other_times"].split(";"):
        words = part.split()
        if len(words) == 2 and words[0] == name:
            return float(words[1])
    return 0.0


def verl_sync_parts(row: int) -> dict[str, tuple[float, float]]:
    """A synchronous verl row's timers, (measured s, predicted s) each, as verl times them
    (volcengine/verl@df340d70 ray_trainer.py `fit`: gen, old_log_prob, ref and update_actor
    nest in step). The estimate's gen is its rollouts plus the weight sync: in the hybrid
    (colocated) mode the agent loop's generate_sequences wakes the engines, which loads the
    actor's weights into vLLM, inside the gen timer (agent_loop.py `generate_sequences` calls
    `wake_up`; vllm_async_server.py `wake_up`, RolloutMode.HYBRID). `rest` is what the step
    does besides the four (reward, advantages, the validation every test_freq steps); the
    estimate has nothing there (its reward is scored beside the rollout: `reward_host_s`,
    plan/rl_reward_host.py)."""
    r = rows()[row]
    case = next(c for c in CASES if c.row == row)
    d, why = _details(case)
    assert d is not None, why
    measured = {"gen": float(r["gen_time_s"]), "old_log_prob": _measured_part_s(r, "old_log_prob"),
                "ref": _measured_part_s(r, "ref"), "update_actor": float(r["update_time_s"])}
    predicted = {"gen": d["rollout_generation_s"] + d["weight_sync_s"],
                 "old_log_prob": d["old_policy_log_probs_s"], "ref": d["reference_model_s"],
                 "update_actor": d["policy_update_s"]}
    step_m, step_p = float(r["step_time_s"]), float(d["step_time_s"])
    out = {k: (measured[k], float(predicted[k])) for k in measured}
    out["rest"] = (step_m - sum(measured.values()), step_p - sum(predicted.values()))
    out["step"] = (step_m, step_p)
    return out


def verl_sync_line() -> dict[str, float]:
    """The synchronous 7B recipe's 400-step means as a + b/GPUs through its 32- and 128-GPU
    runs (rows 12 and 14, CSV lines, the tuned pair), measured and as the estimate predicts
    them, each carried to 64 GPUs beside row 13's measured step. A diagnostic, counted
    nowhere: b is the work the GPUs share, a what no GPU count removes. Keys: a_measured,
    b_measured, a_predicted, b_predicted, at64_measured (the measured line at 64 GPUs),
    at64_predicted (the estimate's line there), row13_measured, row13_predicted."""
    out: dict[str, float] = {}
    for key in ("measured", "predicted"):
        s32, s128 = (verl_sync_parts(row)["step"][key == "predicted"] for row in (10, 12))
        b = (s32 - s128) / (1 / 32 - 1 / 128)
        out[f"a_{key}"] = s128 - b / 128
        out[f"b_{key}"] = b
        out[f"at64_{key}"] = out[f"a_{key}"] + b / 64
    out["row13_measured"], out["row13_predicted"] = verl_sync_parts(11)["step"]
    return out


def tail_step_bound_ms(row: int) -> tuple[float, float]:
    """(bound, estimate) in ms: the longest decode step a synchronous verl 7B run's measured
    gen timer leaves room for, if its longest response reached the max_response_tokens cap in
    a typical step: (gen - the estimate's driver transfer of the rollouts - its weight sync) /
    the cap's decode steps, an upper bound (the rest of the batch's work, the prefill, the
    engines' wake-up and sleep are left in the gen); beside it the estimate's step for that
    response alone (rollout_tail_s / the cap). Whether the cap was reached is not stated
    (verl logs response_length/max and clip_ratio to W&B, not stored here)."""
    r = rows()[row]
    case = next(c for c in CASES if c.row == row)
    d, why = _details(case)
    assert d is not None, why
    cap = int(case.phase["max_response_tokens"])
    room = float(r["gen_time_s"]) - d["driver_rollout_generation_s"] - d["weight_sync_s"]
    return room / cap * 1e3, d["rollout_tail_s"] / cap * 1e3


def verl_sync_parts_report() -> str:
    """A diagnostic, counted nowhere (issue 13): each synchronous verl row's timers, measured
    and predicted (`verl_sync_parts`), where the estimate's misses lie; then the 7B recipe's
    line through its tuned rows (`verl_sync_line`), which splits row 13's miss into the
    estimate's part and the run's own, and the decode step the 64- and 128-GPU runs' gen
    leaves room for (`tail_step_bound_ms`)."""
    data = rows()
    names = ("gen", "old_log_prob", "ref", "update_actor", "rest", "step")
    lines = ["| row | GPUs | " + " | ".join(names) + " |",
             "|---|---|" + "---|" * len(names)]
    for row in VERL_SYNC_SPLIT:
        parts = verl_sync_parts(row)
        cells = []
        for n in names:
            m, p = parts[n]
            cells.append("-" if m == 0 and p == 0 else f"{m:,.1f} / {p:,.1f} s")
        lines.append(f"| {row + 2} | {data[row]['n_gpus']} | " + " | ".join(cells) + " |")
    line = verl_sync_line()
    fixed = line["at64_predicted"] / line["at64_measured"]
    run = line["at64_measured"] / line["row13_measured"]
    lines.append(
        f"\nCells: measured / predicted. The 7B step's 400-step means as a + b/GPUs through "
        f"rows 12 and 14: measured a = {line['a_measured']:,.0f} s, b = {line['b_measured']:,.0f} GPU-s; "
        f"predicted a = {line['a_predicted']:,.0f} s, b = {line['b_predicted']:,.0f} GPU-s. At "
        f"64 GPUs the measured line gives {line['at64_measured']:,.0f} s and the estimate's "
        f"{line['at64_predicted']:,.0f} s; row 13 measured {line['row13_measured']:,.1f} s: its "
        f"{line['row13_predicted'] / line['row13_measured'] - 1:+.0%} is {fixed:.2f}x (the "
        f"estimate's a) times {run:.2f}x (the run below its siblings' line).")
    bounds = [(row, *tail_step_bound_ms(row)) for row in (11, 12)]
    lines.append("Room for the longest response's decode step in the measured gen, if it "
                 "reached the 28,672-token cap: " + ", ".join(
                     f"row {row + 2} {bound:.1f} ms" for row, bound, _ in bounds)
                 + f"; the estimate's {bounds[0][2]:.1f} ms.")
    return "\n".join(lines)


#: the peaks EasyR1's Actor MFU divides by (verl/utils/flops_counter.py get_device_flops
#: @8460e817: "H100" 989e12, "L20" 119.5e12 FLOP/s), keyed by the cases' catalog GPU
_EASYR1_MFU_PEAK = {"h100-sxm": 989e12, "l20": 119.5e12}


def _actor_mfu(r: dict[str, str]) -> float | None:
    for part in r["other_times"].split(";"):
        words = part.split()
        if len(words) == 2 and words[0] == "actor_mfu":
            return float(words[1].rstrip("%")) / 100
    return None


def easyr1_update_from_mfu_s(c: Case) -> float:
    """Seconds of an EasyR1 row's `update_policy`, as the table's Actor MFU says it took: the
    FLOPs EasyR1 counts for it (verl/utils/flops_counter.py `_estimate_llama_flops` @8460e817:
    6 x the language model's dense parameters x the batch's tokens + 12 x sum(seqlen^2) x
    head_dim x heads x layers; the vision tower not counted) / (MFU x the peak it divides by x
    the GPUs; one PPO epoch). The tokens are the row's (throughput x step x GPUs); sum(seqlen^2)
    is taken at the mean sequence (a lower bound: the lengths are not stated), so the time is
    too. Measured by the source, through its own formula; nothing is set from it."""
    import json

    import gpuhours

    r = rows()[c.row]
    mfu = _actor_mfu(r)
    assert mfu is not None, c.row
    cfg_path = (Path(gpuhours.__file__).parent / "catalog" / "data" / "models"
                / f"{c.settings['model']}.json")
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    d, layers, heads = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
    head_dim = d // heads
    kv = cfg["num_key_value_heads"] * head_dim
    dense = ((3 * d * cfg["intermediate_size"] + d * (d + 2 * kv + d)) * layers
             + 2 * cfg["vocab_size"] * d)
    sequences = c.phase["prompts_per_step"] * c.phase["generations_per_prompt"]
    gpus = int(r["n_gpus"])
    tokens = easyr1_mean_sequence(c.row) * sequences
    mean = tokens / sequences
    flops = 6 * dense * tokens + 12 * sequences * mean ** 2 * head_dim * heads * layers
    return flops / (mfu * _EASYR1_MFU_PEAK[c.gpu] * gpus)


def easyr1_update_report() -> str:
    """A diagnostic, counted nowhere: each EasyR1 row's update as its Actor MFU says it took
    (`easyr1_update_from_mfu_s`) beside the predicted one (the update's GPU work: its part less
    the driver's transfer, which the MFU's timer inside the worker does not see), and the rest
    of the step (measured step - that update) beside the predicted rest: where the miss lies."""
    data = rows()
    lines = ["| row | model | GPUs | measured step | update (from the table's Actor MFU) | "
             "predicted update | rest of the step, measured | predicted rest |",
             "|---|---|---|---|---|---|---|---|"]
    for c in CASES:
        r = data[c.row]
        if _actor_mfu(r) is None:
            continue
        d, _ = _details(c)
        if d is None:
            continue
        step = float(r["step_time_s"])
        update = easyr1_update_from_mfu_s(c)
        # the worker's update_policy, as the MFU's timer takes it: without the driver's transfer
        predicted = d["policy_update_s"] - d.get("driver_policy_update_s", 0.0)
        rest = d["step_time_s"] - predicted
        lines.append(f"| {c.row + 2} | {r['model']} | {r['n_gpus']} x {r['gpu']} | {step:,.0f} s "
                     f"| {update:,.1f} s | {predicted:,.1f} s "
                     f"({predicted / update - 1:+.0%}) | {step - update:,.1f} s | "
                     f"{rest:,.1f} s ({rest / (step - update) - 1:+.0%}) |")
    return "\n".join(lines)


#: the EasyR1 pair that differs only in its micro-batches (0-based rows): Qwen2.5-VL-7B on 8
#: H100s, micro_batch_size_per_device_for_update / _for_experience 1 / 2 and 4 / 8
_EASYR1_MICRO_PAIR = (19, 20)


def easyr1_update_micro_batches(c: Case, per_micro: int) -> tuple[int, float]:
    """(update micro-batches, tokens) one GPU runs in an EasyR1 row's update: 4 mini-batches
    (global_batch_size 128 prompts x 5 of the 512 x 5) of 80 sequences a GPU, each packed into
    ceil(80 / `per_micro`) dynamic micro-batches (seqlen_balancing.py rearrange_micro_batches
    @8460e817: ceil(tokens / max_token_len), the maximum over the ranks), and the GPU's 320
    sequences at the row's mean sequence."""
    sequences = c.phase["prompts_per_step"] * c.phase["generations_per_prompt"] // 8
    mini = sequences // 4
    return 4 * -(-mini // per_micro), sequences * easyr1_mean_sequence(c.row)


def easyr1_micro_batch_split() -> dict[str, tuple[float, float]]:
    """A diagnostic, counted nowhere: the two 7B H100 rows that differ only in their
    micro-batches (`_EASYR1_MICRO_PAIR`) solved for a cost per update micro-batch (s) and per
    token (ms), update = micro-batches x a + tokens x b, from the update their Actor MFU says
    it took ("measured") and from the predicted update's GPU work ("predicted", less the
    driver's transfer as in easyr1_update_report). Two equations, two unknowns: exact, no
    fit."""
    out = {}
    for key in ("measured", "predicted"):
        eqs = []
        for row in _EASYR1_MICRO_PAIR:
            c = next(x for x in CASES if x.row == row)
            d, _ = _details(c)
            assert d is not None, row
            n, tokens = easyr1_update_micro_batches(c, int(d["update_micro_batch"]))
            t = (easyr1_update_from_mfu_s(c) if key == "measured"
                 else d["policy_update_s"] - d.get("driver_policy_update_s", 0.0))
            eqs.append((n, tokens, t))
        (n1, k1, t1), (n2, k2, t2) = eqs
        det = n1 * k2 - n2 * k1
        a = (t1 * k2 - t2 * k1) / det
        b = (n1 * t2 - n2 * t1) / det
        out[key] = (a, b * 1e3)
    return out


#: the OpenRLHF benchmark table (rl_steps_README.md source 4): its rows split each step into
#: generation and training latency
_BENCHMARK_SOURCE = "wuxibin/benchmark"


def _timed_parts(framework: str, d: dict[str, Any]) -> tuple[float, float, str]:
    """(predicted generation s, predicted training s, what each timer holds) as the row's
    framework times its phases.

    - DeepSpeed-Chat (DeepSpeedExamples step3_rlhf_finetuning/main.py, the benchmark's
      scripts): generation is the `generate` calls alone, training the `train_rlhf` loop (the
      actor's and critic's updates); the scoring forwards are in neither ("it is an
      approximation, we did not include, e.g., rw forward time").
    - OpenRLHF (@dbdd43b0 openrlhf/trainer/ppo_trainer.py `fit`): generation runs from the
      first `make_experience` to the last (the rollouts and every scoring forward: the policy's
      log-probs, reference, reward, the critic's values), training is `ppo_train` (the
      updates; with Ray the weight broadcast to the engines too, ray/ppo_actor.py)."""
    rollouts = float(d["rollout_generation_s"])
    updates = (float(d["policy_update_s"]) + float(d["critic_s"])
               - float(d.get("critic_value_pass_s", 0.0)) + float(d["host_offload_s"]))
    if timer_leaves_out_scoring(framework):
        return rollouts, updates, "generate / updates"
    scoring = sum(float(d[k]) for k in _SCORING_PARTS)
    return rollouts + scoring, updates + float(d["weight_sync_s"]), \
        "rollouts + scoring forwards / updates + weight sync"


def phase_split_report() -> str:
    """The OpenRLHF benchmark rows' generation and training latencies against the estimate's
    parts, each as the row's framework times it (`_timed_parts`; issue 13: which part of a
    step misses)."""
    data = rows()
    lines = ["| row | framework | model | rollout batch | measured generation | predicted | "
             "error | measured training | predicted | error | timers (generation / training) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in CASES:
        r = data[c.row]
        if _BENCHMARK_SOURCE not in r["source"] or not r["gen_time_s"]:
            continue
        details, _ = _details(c)
        if details is None:
            continue
        gen, train = float(r["gen_time_s"]), float(r["update_time_s"])
        p_gen, p_train, timers = _timed_parts(r["framework"], details)
        lines.append(f"| {c.row + 2} | {r['framework'][:32]} | {r['model']} | "
                     f"{c.phase.get('rollout_batch', '-')} | {gen:,.1f} s | {p_gen:,.1f} s | "
                     f"{p_gen / gen - 1:+.0%} | {train:,.1f} s | {p_train:,.1f} s | "
                     f"{p_train / train - 1:+.0%} | {timers} |")
    return "\n".join(lines)


def vllm_rollout_floor_s(c: Case) -> float:
    """The least time, in s, an OpenRLHF benchmark row's generation timer can hold at the
    lengths the case assumes (every prompt `prompt_tokens`, every response `response_tokens`):
    each engine's generate calls one after another, each call decoding its batch one token a
    step, every step reading the engine GPU's share of the weights and of the batch's KV cache
    at the datasheet bandwidth (100%), plus the call's prefill and the actor rank's own
    log-prob forward over the call's sequences, each at the datasheet bf16 peak (100%).

    Read from OpenRLHF @dbdd43b0 (openrlhf/trainer/ppo_utils/experience_maker.py
    RemoteExperienceMaker.make_experience: `_generate_vllm` on micro_rollout_batch_size
    prompts, `llm = self.vllm_engines[rank % len(self.vllm_engines)]`, `ray.get` of the call,
    then `self.actor(sequences, ...)` on the rank's GPU before the next call; an engine is one
    Ray actor, so the calls of the ranks it serves run one after another): calls per engine =
    prompts / (engines x the call's batch). Counted from the model's config.json, not the
    estimator: weights read a step = 2 bytes x (layers x (q, k, v, o, gate, up, down) + the
    output head); the forward's FLOPs = 2 x those parameters a token; KV = 2 (K, V) x layers x
    KV heads x head_dim x 2 bytes a token, split over the engine's tensor-parallel GPUs. Left
    out, so the real time is longer: attention FLOPs, host time, the bandwidth and compute the
    kernels do not reach, the reference, reward and critic forwards the rank waits for. A
    diagnostic, counted nowhere, set from nothing (issue 13): where it exceeds the measured
    generation, the run's lengths cannot have been the case's."""

    from gpuhours import catalog

    matmul, layers, kv = _config_matmul_weights(c.settings["model"])
    kv_bytes_per_token = 2 * layers * kv * 2
    tp = int(c.phase.get("rollout_tensor_parallel", 1))
    engines = c.phase["rollout_gpus"] // tp
    batch = c.phase["rollout_batch"]
    calls = c.phase["prompts_per_step"] * c.phase["generations_per_prompt"] / (engines * batch)
    prompt, response = c.phase["prompt_tokens"], c.phase["response_tokens"]
    gpu = catalog.gpu(c.gpu)
    bandwidth = gpu.memory_bw_gb_per_s * 1e9
    peak = gpu.dense_tflops.bf16
    assert peak is not None, c.gpu
    # step t (0-based) of a call holds prompt + t tokens a sequence
    kv_read = batch * kv_bytes_per_token * (response * prompt + response * (response - 1) / 2)
    decode_s = (response * 2 * matmul + kv_read) / tp / bandwidth
    prefill_s = 2 * matmul * batch * prompt / tp / (peak * 1e12)
    logprob_s = 2 * matmul * batch * (prompt + response) / (peak * 1e12)
    return calls * (decode_s + prefill_s + logprob_s)


def rollout_floor_report() -> str:
    """The OpenRLHF benchmark's vLLM rows: `vllm_rollout_floor_s` at the assumed 1,024-token
    prompts and responses against the measured generation (issue 13)."""
    data = rows()
    lines = ["| row | model | engines x TP | sequences a call | floor at the caps | "
             "measured generation | floor / measured |", "|---|---|---|---|---|---|---|"]
    for c in CASES:
        r = data[c.row]
        if _BENCHMARK_SOURCE not in r["source"] or c.phase.get("engine") != "vllm-v0":
            continue
        floor, gen = vllm_rollout_floor_s(c), float(r["gen_time_s"])
        tp = int(c.phase.get("rollout_tensor_parallel", 1))
        lines.append(f"| {c.row + 2} | {r['model']} | {c.phase['rollout_gpus'] // tp} x {tp} | "
                     f"{c.phase['rollout_batch']} | {floor:,.0f} s | {gen:,.1f} s | "
                     f"{floor / gen:.0%} |")
    return "\n".join(lines)


def held_out_errors() -> list[float]:
    """predicted / measured - 1 of each expressed row outside TUNED (report's held-out tally)."""
    data = rows()
    out = []
    for c in CASES:
        if c.row in TUNED:
            continue
        predicted, _ = predict(c)
        if predicted is not None:
            out.append(predicted / float(data[c.row]["step_time_s"]) - 1)
    return out


def rl_track_record(as_of: str) -> TrackRecord:
    """The record a plan's RL phase prints (estimate/track_record.py): the held-out rows'
    measured step over the plan's, as report's tally counts them."""
    return summarise([1 / (1 + e) for e in held_out_errors()], 0.25,
                     "an RL step as the plan models it; published GRPO/PPO runs held out",
                     "step time", "docs/rl.md, the held-out rows of the step table", as_of)


def report() -> str:
    data = rows()
    lines = ["| row | framework | model | GPUs | placement | measured step | predicted | error "
             "| bottleneck | assumed |", "|---|---|---|---|---|---|---|---|---|---|"]
    errors = []
    expressed = []
    for c in CASES:
        r = data[c.row]
        measured = float(r["step_time_s"])
        predicted, why = predict(c)
        err = "" if predicted is None else f"{predicted / measured - 1:+.0%}"
        if predicted is not None:
            errors.append(predicted / measured - 1)
            expressed.append(c)
        lines.append(f"| {c.row + 2} | {r['framework'][:30]} | {r['model']} | {r['n_gpus']} x "
                     f"{r['gpu'][:14]} | {r['placement'][:40]} | {measured:,.1f} s | "
                     f"{'-' if predicted is None else f'{predicted:,.1f} s'} | {err} | "
                     f"{why} | {c.assumed} |")
    if errors:
        # held-out rows first: the rows the driver's rate and the 7B mean were set from are
        # residuals of a fit, not predictions
        tuned = {c.row: e for c, e in zip(expressed, errors, strict=True) if c.row in TUNED}
        held = [e for c, e in zip(expressed, errors, strict=True) if c.row not in TUNED]
        lines.append(f"\nHeld out (set nothing): {sum(abs(e) <= 0.25 for e in held)} of "
                     f"{len(held)} within 25%, {sum(e < -0.5 or e > 1.0 for e in held)} off by "
                     "more than 2x. Tuned (the driver's rate and the verl 7B means were set "
                     "from them): " + ", ".join(f"row {row + 2} {e:+.0%}"
                                          for row, e in sorted(tuned.items())) + ".")
        # the held-out rows whose source states the mean response length (the rest assume it)
        stated = [e for c, e in zip(expressed, errors, strict=True)
                  if data[c.row]["response_tokens_mean"] and c.row not in TUNED]
        lines.append(f"Of the {len(stated)} held-out rows whose source states the mean response: "
                     f"{sum(abs(e) <= 0.25 for e in stated)} within 25%, "
                     f"{sum(e < -0.5 or e > 1.0 for e in stated)} off by more than 2x. "
                     f"All {len(errors)} rows together: "
                     f"{sum(abs(e) <= 0.25 for e in errors)} within 25%.")
    lines.append("\nNot expressed, with why:\n")
    for row, why in sorted(NOT_EXPRESSED.items()):
        r = data[row]
        lines.append(f"- row {row + 2} ({r['framework'][:40]}, {r['model'][:40]}, "
                     f"{r['n_gpus']} x {r['gpu'][:14]}): {why}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
