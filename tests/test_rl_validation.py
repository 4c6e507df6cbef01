"""The rl phase against published RL steps (scripts/gpuhours_dev/validation/rl.py, docs/rl.md).

Three figures were set from these rows: two from rows 12 and 14 (CSV lines, header = line 1),
the driver's rate and the verl 7B recipe's mean response of its synchronous runs, and one from
row 17, the mean response of its fully-async runs; the floor below is today's result, held so
that a change that makes it worse fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuhours_dev.validation import rl

DOC = Path(__file__).resolve().parents[1] / "docs" / "rl.md"


def test_every_case_names_a_real_row_and_states_its_assumptions():
    data = rl.rows()
    # 41 -> 73 (issue 13): NeMo-RL's v0.5 large-MoE rows and its v0.6 table, appended
    assert len(data) == 73
    for c in rl.CASES:
        assert data[c.row]["step_time_s"], c.row
        assert c.assumed


def test_published_rl_steps_floor():
    results = {}
    for c in rl.CASES:
        predicted, why = rl.predict(c)
        measured = float(rl.rows()[c.row]["step_time_s"])
        results[c.row] = None if predicted is None else predicted / measured - 1
    errors = [e for e in results.values() if e is not None]
    # 30 -> 33 (issue 13): EasyR1's Qwen2.5-VL-32B row (its catalog row added) and OpenRLHF's
    # Ray rows without vLLM (placement actor), all three held out
    # 33 -> 34 (issue 13): verl's Qwen3.5-9B row (CSV line 41), held out, when Qwen3.5's
    # Gated DeltaNet hybrid was covered (estimate/delta_net.py)
    # 34 -> 65 (issue 13): NeMo-RL's v0.5 DeepSeek-V3, Qwen3-235B, DAPO and remaining
    # Qwen3-30B-A3B rows and its v0.6 table (CSV lines 43-74), all held out; the v0.6
    # Nemotron-3-Nano SWE row not expressed
    assert len(errors) == 65
    # held out: the rows no figure was set from (rows 12, 14 and 17, CSV lines, are tuned)
    held = [e for row, e in results.items() if e is not None and row not in rl.TUNED]
    assert len(held) == 62
    # the 31 rows held out before them: 25 within 25%, as before (test_new_nemo_rows_floor
    # holds the new rows)
    assert sum(abs(e) <= 0.25 for row, e in results.items()
               if e is not None and row not in rl.TUNED and row < 41) >= 25
    # 14: the EasyR1 row on L20s left the band when Ada's GEMM efficiency was derived from
    # matmul microbenchmarks (0.70 -> 0.77; docs/rl.md, row 23); the 30B-A3B colocated row came
    # in with its eager decode steps. 16 -> 15 when the verl and EasyR1 rows took the loss kernel
    # their actors run (verl-logprobs, issue 13): EasyR1's row 22 (CSV line) went from -25.0% to
    # -25.2% by the logits' traffic alone (90.0 -> 89.8 s for 120; docs/rl.md)
    # 15 -> 17 with OpenRLHF's Ray rows without vLLM (-18%, -24%)
    # 19 -> 17 when a paged engine's batch was replayed through its admission
    # (plan/rl_paged.py, issue 13): the cache no longer reserved for the longest response,
    # NeMo-RL's 30B-A3B and GB200 32B colocated rows left the band (+7% -> -26%, -5% -> -28%)
    # 17 -> 18 when the vision tower's host operators were counted (EasyR1's 32B row -26% ->
    # -23%; estimate/vision_host.py, issue 13)
    # 18 -> 16 when the NeMo-RL rows and verl's Megatron rows took the megatron kernel path
    # their workers run (issue 13): NeMo's GB200 8B one-step-off -7% -> -41% and verl's 30B-A3B
    # colocated -23% -> -25% (fewer host operators in host-bound updates)
    # 16 -> 18 with the Grace host's operator time (catalog gb200 host_op_time_ratio); 18 -> 20
    # when vLLM's engine step took it too (estimate/generation.py host_cpu_ratio): NeMo-RL's
    # GB200 8B rows -41% -> -23%, -26% -> -13%
    # 20 of 31 -> 23 of 30 when the fully-async 7B runs took their own mean response, fitted on
    # row 17's update (CSV line; now tuned, +55% -> -4%): held-out rows 15, 16 and 42 +132 /
    # +103 / +62% -> +10 / +8 / +23% (issue 13)
    # 23 -> 25 when the engine's vision tower at prefill and EasyR1's workers preparing each
    # image inside the step were counted (plan/rl_images.py, issue 13), and its batch through
    # the driver at its padded prompt width with M-RoPE's 4 position rows: EasyR1's 7B rows on
    # 8 H100s -29 / -26% -> -20 / -16% (the 3B -35% -> -25.4%, just outside)
    assert sum(abs(e) <= 0.25 for e in held) >= 25
    # 3 with the replay: the staleness-0 pipeline (CSV line 42) +41% -> +116%, its engines
    # handed two calls of 256 each waiting for its own longest response (rollout_batch, the
    # rollouter's in-flight cap)
    # 0 since the fully-async 7B runs' own mean (above); 1 with verl's Qwen3.5-9B row (CSV
    # line 41, -84%): its rollout within 15% of the measured gen, its Megatron passes at the
    # reporter's own actor MFU of 2.3-2.7% (docs/rl.md), where the estimate runs them at the
    # GEMM efficiency of its other rows
    # 1 -> 3 with NeMo-RL's new rows (issue 13): the DAPO DeepSeek-V3 row (CSV line 45, -74%:
    # its dynamic sampling's extra generation batches not modelled) and the v0.6 GB200
    # Qwen3-30B-A3B one-step-off on 8 + 8 GPUs (CSV line 74, -62%, measured slower than its
    # colocated twin on 16)
    # 3 -> 2 when Megatron-Core's all-to-all dispatcher was counted (alltoall-unfused: the
    # v0.6 30B-A3B rows' router, unfused permute and forward waits; estimate/host.py
    # MEGATRON_A2A_*): the GB200 one-step-off row (CSV line 74) -58% -> -26%
    assert sum(e < -0.5 or e > 1.0 for e in held) == 2
    # 3: the fully-async 7B rows on 16 + 16 and 32 + 32 H20s at the recipe's fitted mean
    # (+130%, +101%: at it the update alone would need more than the H20's peak; docs/rl.md;
    # +133% with the hf loss, whose logits halved the 16-GPU update's micro-batch);
    # (EasyR1's Qwen2.5-VL-3B row was the third, -66%, until its validation, scoring tower and
    # images through the driver were counted: -48%; docs/rl.md)
    # (+116% for CSV line 42 with the paged replay, above); none since the fully-async runs'
    # own mean; verl's Qwen3.5-9B row since it was expressed (above); 3 -> 2 when the v0.6
    # GB200 30B-A3B one-step-off row (CSV line 74) took its all-to-all dispatcher (above)
    assert sum(e < -0.5 or e > 1.0 for e in errors) == 2
    # that row's rollout is the part the estimate gets: within 15% of the issue's ~29 s gen
    d, _ = rl._details(next(c for c in rl.CASES if c.row == 39))
    assert d is not None and abs(d["rollout_generation_s"] / 29 - 1) < 0.15
    # the 30B-A3B colocated row: its script runs vLLM with enforce_eager=True, and its eager
    # decode steps (issue 13) took it from -50% to within 25% (-23%); -25.1% when its actor took
    # the megatron kernel path verl's Megatron worker runs (TE layer spec, the script's fusions;
    # issue 13): the update's host operators 144 + 55 -> 37 + 14 a layer, update 71.5 -> 63.6 s
    assert -0.30 < results[16] < -0.20
    # the verl 7B colocated rows: the two tuned within 30% (their rollouts, which the fit does
    # not touch, moved with generation's TP width term; +4/+22% -> +12/+27% with the paged
    # replay: the whole batch at once, its long responses decoding beside each other where the
    # wave rule took the longest alone), the held-out 64-GPU run within 65% (+56% -> +63%)
    assert abs(results[10]) <= 0.25 and abs(results[12]) <= 0.30 and abs(results[11]) <= 0.65
    # EasyR1's rows fast, none by 2x since their validation, scoring tower and images through
    # the driver are counted (issue 13: -66/-49/-43/-29% -> -48/-34/-25/-22%); the 7B on 8
    # L20s (a catalog row added for it) -29% with Ada's derived GEMM efficiency (0.77; -24% at
    # 0.70) before them
    assert all(-0.5 < results[row] < 0 for row in (18, 19, 20, 21, 22))
    # the 32B (CSV line 24, TP-8 rollouts, bf16 with adamw_bf16 as its script sets): -30%, the
    # same side and size as the 3B and 7B on H100s; -26% -> -23% (and the L20 row -25% -> -24%,
    # the 3B -45% -> -39%, the 7B -37/-29% -> -31/-27%) when the vision tower's host operators
    # were counted, apart from the decoder's (estimate/vision_host.py, issue 13)
    # -21% -> -18% with the images prepared on the workers' hosts (plan/rl_images.py: its TP-8
    # engine's every GPU prepares all 512 prompts' images, 6.4 s a step) and the padded batch
    # through the driver; -18% -> -27% when its vllm.LLM engine (EasyR1 sets no max_num_seqs)
    # took vLLM V1's own default on an H100, 1,024 sequences, for the 256 assumed before
    assert -0.30 < results[22] < -0.23
    assert -0.25 < results[21] < -0.20
    # verl's staleness-0 pipeline on 128 H20s (CSV line 42): 4 local updates a sync, all but
    # the last under the rollouts (+99% as the plain sum); its update, like rows 15-17's, is
    # twice the measured one at the recipe's fitted mean. +41% -> +116% with the paged replay
    # while rollout_batch 256 (the rollouter's 16 prompts x 16 in flight a server) stood for
    # it, replayed as blocking calls each waiting for its longest response; the rollouter
    # refills as prompts finish, a cap on the sequences running: rollout_max_num_seqs 256, +61%.
    # +62% -> +23% at the fully-async runs' own mean (fitted on CSV line 17's update; this row
    # held out): update 203.0 -> 113.3 s, rollouts 322.8 -> 255.9 s, now rollout-led by the
    # longest response at the 28,672-token cap (192 s alone)
    assert 0.15 < results[40] < 0.25
    # the fully-async 7B rows at their own mean: the held-out 16 + 16 and 32 + 32 runs +10% and
    # +8% (were +132% and +103% at the synchronous runs' mean), the tuned 64 + 64 run -4%
    assert all(0.05 < results[row] < 0.15 for row in (13, 14))
    assert abs(results[15]) < 0.05
    # verl's fully-async 30B-A3B row (streamed rollouts on 96 GPUs, 32 train): within 25%
    assert abs(results[17]) <= 0.25
    # the rows whose source states the mean response (NeMo-RL): none off by 2x
    stated = [e for row, e in results.items()
              if e is not None and rl.rows()[row]["response_tokens_mean"] and row < 41]
    assert len(stated) == 10 and all(-0.5 < e < 1.0 for e in stated)
    # 8 -> 6 with the paged replay (the 30B-A3B H100 and 32B GB200 colocated rows, below);
    # 6 -> 5 with the megatron kernel path (the GB200 8B one-step-off row -7% -> -41%, below)
    # 5 -> 6 with the Grace host's operator time, 6 -> 8 with vLLM's engine step on it (the
    # GB200 8B rows)
    assert sum(abs(e) <= 0.25 for e in stated) >= 8
    # the NeMo-RL Llama-3.1-8B H100 rows: a tail-led step, colocated and async; Qwen3-32B on
    # 32 H100s with Megatron's TP4 PP4 (vLLM's memory share as NeMo-RL sets it, 0.6 colocated and
    # 0.8 dedicated). vLLM's profiling reserve (estimate/engine_reserve.py) kept out of the cache:
    # the colocated 8B step ran 3 waves of 62 (2 waves of 65 without it); the colocated 32B
    # rollouts 3 waves of 124 where 130 ran 2. Read from their recipes (issue 13: the prompt from
    # the page's throughput, the 8B's Megatron TP1 as ZeRO-1 with 4,096-token packed
    # micro-batches, PP2 on the colocated recipe, where a ZeRO-3 stand-in was; the 32B and 30B-A3B
    # without recompute): 8B colocated -1% -> -8%, one-step-off -2% -> -4%, FP8 -9% -> -11%; the
    # 32B colocated +16% -> 0%, one-step-off +18% -> -9%; the 30B-A3B +7% -> 0%. Then the paged
    # replay (plan/rl_paged.py: admission at the tokens a request has, not its longest response;
    # issue 13): the 8B's 128 sequences a GPU run at once: -8/-4/-11% -> -22/-13/-14%; the 32B
    # colocated 0% -> -19%, one-step-off -9% (rollout-led, dedicated engines); the 30B-A3B
    # colocated 0% -> -31%. Then the PP rows' packed micro-batches padded to the longest
    # (pad_packed_to_longest, plan/rl_padding.py: NeMo-RL's megatron/common.py under PP): the 8B
    # PP2 colocated -23% -> -18% (update x1.19), the 32B PP4 colocated -19% -> -9% and
    # one-step-off -9% -> +10% (update and log-probs x1.22, now update-led). Then the kernel
    # path the worker runs (kernels megatron: Megatron-Bridge's Transformer Engine layer spec,
    # issue 13): the host issues 31 kernels a layer (37 with Qwen3's q/k norms, +12 recomputed)
    # where the eager count was 144 (+55; autocast), and these updates were host-bound at the eager count
    # (with it restored the figures come back within 1 point): 8B colocated -17% -> -22%
    # (update 24.6 -> 20.6 s), one-step-off -11% -> -15%, FP8 -11% -> -16%; 32B colocated
    # -7% -> -20% (update 166 -> 121 s), one-step-off +14% -> -11%; 30B-A3B -30% -> -35%.
    # Then its MoE routing as grpo_math_1B.yaml sets it (moe_dispatch allgather-unfused: the
    # router's and allgather dispatcher's operators, +39 forward and +26 backward a layer, and the
    # combine reduce-scattered in fp64): update 17.8 -> 27.7 s, -35% -> -30%; and its scoring
    # forwards' expert traffic (plan/rl_scoring.py expert_scoring_s): log-prob passes 2.97 ->
    # 7.52 s each, -30% -> -25%; and the unfused permute's and fp64 combine casts' memory traffic
    # (moe_gemm.allgather_routing_bytes_per_token): update 27.7 -> 29.4 s, -25% -> -24%
    # The one-step-off rows' engines are AsyncLLMs made without a usage context: vLLM's 128
    # sequences an engine (SchedulerConfig.DEFAULT_MAX_NUM_SEQS) where 256 was assumed: 8B
    # one-step-off -15% -> -6%, FP8 -16% -> -8%; the 32B colocated (vllm.LLM, 1,024 on an H100)
    # -19% -> -17%. Replayed under NeMo-RL's collector with in-flight weight updates
    # (in_flight_weight_updates, plan/rl_inflight.py): the next step's prompt groups run under
    # the 8B's training side, 61.2 -> 56.0 s and 49.1 -> 44.5 s: -6/-7% -> -14/-16%
    assert -0.26 < results[0] < -0.19 and -0.18 < results[1] < -0.10
    assert -0.20 < results[2] < -0.12 and -0.24 < results[3] < -0.14
    # Qwen3-30B-A3B colocated on H100 (allgather-unfused, EP 8): -21% -> -19% once Megatron-Core's
    # router and dispatcher operators are costed at their measured host time
    # (assumptions.MEGATRON_MOE_HOST_OP_RATIO)
    assert -0.15 < results[4] < -0.07 and -0.30 < results[5] < -0.17
    # the GB200 Qwen3-32B colocated step (+32% at a 0.5 share, +10% at NeMo-RL's 0.6; -5% with
    # the recipe's prompt, no recompute and one NVLink domain, issue 13); -28% with the paged
    # replay: 128 sequences a GPU in 164,885 tokens of cache, 98 preempted and recomputed, the
    # cache used at the tokens each holds where 4 waves of 40 reserved the longest; -39% on the
    # megatron kernel path (update 111.5 -> 70.7 s: host-bound at the eager count, issue 13);
    # -32% with the Grace host's time an operator, 2.75x the H100 host's (rl.py
    # the catalog gb200 host_op_time_ratio, TransformerEngine issue #2053's torch Linear CPU times)
    # -25% when vLLM's engine step took the same Grace ratio (estimate/generation.py
    # host_cpu_ratio: 2.3 -> 6.3 ms a decode step; rollouts 126.7 -> 152.8 s)
    assert -0.29 < results[8] < -0.21
    # the other GB200 rows as their recipes set them (issue 13: prompt from the page's
    # throughput, the 8B's Megatron TP1 PP1 as ZeRO-1 with 4,096-token packed micro-batches,
    # the 32B without recompute): the 8B colocated -44% -> -36%, one-step-off -35% -> -14%; the
    # 32B one-step-off -5% -> -29% (no recompute halves nothing of its rollouts). The host
    # issuing the scoring passes' forwards (plan/rl_scoring_host.py, issue 13: the eager path's
    # operators, as these rows' update already counts them; 86 packed micro-batches of 8,192
    # tokens a GPU a pass on the 4 training GPUs) took the 8B one-step-off -15% -> -7%. On the
    # megatron kernel path NeMo-RL's worker runs (issue 13: 31 + 12 recomputed kernels a layer
    # where the eager count was 144 + 55; these updates were host-bound at the eager count) the
    # 8B colocated -34% -> -47% (update 24.2 -> 14.3 s), one-step-off -7% -> -41% (49.2 ->
    # 29.6 s, now rollout-led), the 32B one-step-off -28% -> -50% (111.6 -> 70.9 s). With the
    # Grace host 2.75x the H100 host's time an operator (catalog gb200 host_op_time_ratio): the 8B
    # colocated -47% -> -41% (update 14.3 -> 18.8 s), one-step-off -41% -> -26%, the 32B
    # one-step-off -50% -> -37% (update 70.9 -> 94.5 s, update-led again). With vLLM's engine
    # step on the same Grace host (estimate/generation.py host_cpu_ratio: its 2.3 ms host step
    # x 2.75, serial with the GPU in vLLM 0.11.2 without async scheduling): the 8B colocated
    # -41% -> -23% (rollouts 28.0 -> 43.9 s over 3,968 decode steps), one-step-off -26% -> -13%
    # (41.6 -> 61.5 s); the 32B one-step-off stays -37% (update-led, rollouts 87 -> 103 s)
    # (the 8B one-step-off, its AsyncLLM at vLLM's 128 sequences an engine for the 256 assumed
    # before: -13% -> +18%; replayed under the collector with in-flight weight updates, its
    # training side beside the next step's groups: 83.8 -> 66.4 s, +18% -> -7%)
    assert -0.28 < results[6] < -0.18 and -0.12 < results[7] < -0.02
    assert -0.42 < results[9] < -0.32
    # OpenRLHF's vLLM rows, each engine given the table's generation micro batch per call
    # (rollout_batch), the actor and critic each training on its own GPUs at once (actor_gpus,
    # critic_gpus; issue 13): 13B and the 70B on 16 GPUs with TP-2 engines within 25%; the 7B
    # +35% (+13% before the roles, +28% before DeepSpeedCPUAdam's published rate and the
    # offloaded copies as DeepSpeed 0.13.2 makes them, which took its training from -23% to -5%),
    # long because its prompts and responses are taken at the 1,024-token max where OpenRLHF's
    # vLLM sampling stops at EOS (its generation +69%)
    assert all(abs(results[row]) <= 0.25 for row in (30, 32))
    assert 0.0 < results[27] <= 0.40
    # DeepSpeed-Chat / OpenRLHF without Ray (HF generate at 2-8 sequences): within 2x
    assert all(-0.5 < results[row] < 1.0 for row in (23, 24, 25, 28))
    # OpenRLHF with Ray and no vLLM (CSV lines 28 and 31): the actor's 4 GPUs generate with
    # HF generate while the other 4 wait (placement actor): -13% and -17% (-18% and -24% before
    # issue 14's offload), short like the other HF-generate rows
    assert -0.25 < results[26] < -0.10 and -0.30 < results[29] < -0.15


def test_every_row_is_expressed_or_says_why_not():
    cased = {c.row for c in rl.CASES}
    assert not cased & set(rl.NOT_EXPRESSED)
    assert cased | set(rl.NOT_EXPRESSED) == set(range(len(rl.rows())))
    assert all(len(why) > 20 for why in rl.NOT_EXPRESSED.values())


def test_the_doc_holds_the_current_table():
    assert rl.report() in DOC.read_text(encoding="utf-8")


def test_the_shipped_rl_track_record_is_current():
    """What a plan's rl phase prints (estimate/track_record.py) is this harness's held-out
    record as scripts/regen_docs.py writes it: stale when the RL model moved and the script
    was not run (the date aside)."""
    from gpuhours.estimate.track_record import load

    shipped = load("rl")
    assert shipped == rl.rl_track_record(shipped.as_of), (
        "src/gpuhours/catalog/data/track_record_rl.json is stale: run "
        "python scripts/regen_docs.py rl")


def test_the_doc_holds_the_inferred_mean_diagnostic():
    table = "\n".join("  " + line for line in rl.inferred_mean_report().split("\n"))
    assert table in DOC.read_text(encoding="utf-8")
    # it covers the rows that state no mean but measured the old-log-prob pass (verl's
    # Qwen3.5-9B row, CSV line 41, since it was expressed: its pass short of the measured even
    # at the 2,048-token cap)
    assert table.count("\n") == 6


def test_the_driver_rate_is_the_fit_of_the_tuned_rows():
    from gpuhours.estimate import assumptions as A

    intercept, moved, rate = rl.driver_rate_fit()
    # 107.71 s on 32 GPUs, 53.92 on 128: b = 53.79 / (1/32 - 1/128) = 2,295 s, a = 35.99 s
    assert intercept == pytest.approx(35.99, abs=0.01)
    assert moved == pytest.approx(8192 * 1_384_448)
    assert A.RL_DRIVER_BYTES_PER_S.value == pytest.approx(rate, rel=0.005)
    # held out: the same recipe on 64 GPUs, a + b/64 against its measured 70.26 s
    assert intercept + (107.71 - intercept) * 32 / 64 == pytest.approx(70.26, rel=0.03)


def test_verl_inferred_means_agree_across_gpu_counts():
    """With the driver's transfer counted, the mean response that makes each verl 7B row's
    old-log-prob pass take its measured time is one mean for the three GPU counts of the one
    recipe (it was 2,600 / 3,432 / 5,264 tokens without it)."""
    means = [int(line.split("|")[3].replace(",", ""))
             for line in rl.inferred_mean_report().split("\n")[2:]
             if line.split("|")[1].strip() in ("12", "13", "14")]
    assert len(means) == 3 and max(means) / min(means) < 1.10


def test_streamed_rows_at_their_twins_mean():
    """verl's fully-async rows at the mean inferred for their synchronous twin: the doc holds
    the table; the trainer's intake of the padded batch from the message queue (30 s for the
    7B rows, whatever the mean: 8,192 sequences padded to 256 + 28,672 tokens) is held out
    against the trainer's measured 'gen' (21-33 s), and the update is what is off."""
    table = rl.streamed_at_twin_mean_report()
    assert "\n".join("  " + line for line in table.split("\n")) in DOC.read_text(encoding="utf-8")
    assert table.count("\n") == 5
    for line in table.split("\n")[2:5]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        intake, gen = float(cells[8].rstrip(" s")), float(cells[9].rstrip(" s"))
        assert 0.6 < intake / gen < 1.5


def test_the_verl_7b_mean_is_the_fit_of_the_tuned_rows():
    """The mean response the verl 7B rows run at is the one fitted on rows 12 and 14 (their
    old-log-prob passes at 107.71 and 53.92 s), not typed; a quarter of the 28K maximum, the
    assumption before, is not physical: 6 x 7.6B params x 8,192 x (256 + 7,168) tokens over 32
    GPUs at the H20's whole 148 TFLOPS is 586 s for an update measured at 270 s."""
    assert rl.verl_7b_mean_fit() == rl.VERL_7B_MEAN
    # the synchronous (colocated) runs; the fully-async ones run at their own (below)
    assert all(c.phase["response_tokens"] == rl.VERL_7B_MEAN for c in rl.CASES
               if c.settings.get("model") == "qwen2.5-7b" and c.phase.get("placement") is None)
    # the verl 7B rows run at it, and their old-log-prob pass then takes its measured time on
    # the tuned rows (to within the bisection's 8 tokens), whatever their update's setup
    data = rl.rows()
    for c in rl.CASES:
        if c.row in rl.DRIVER_TUNED:
            details, _ = rl._details(c)
            assert details is not None
            measured = rl._measured_old_logprob_s(data[c.row])
            assert details["old_policy_log_probs_s"] == pytest.approx(measured, rel=0.01)


def test_the_streamed_mean_is_the_fit_of_row_17s_update():
    """The fully-async 7B rows (CSV lines 15-17 and 42) run at the mean fitted on row 17's
    update (113.16 s on 64 trainer GPUs), not typed and not the synchronous runs' mean: the
    estimate's update of row 17 takes its measured time at it (to the bisection's 8 tokens),
    and the held-out rows run at the same figure."""
    from dataclasses import replace

    assert rl.verl_7b_streamed_mean_fit() == rl.VERL_7B_STREAMED_MEAN
    streamed = {c.row: c for c in rl.CASES
                if c.settings.get("model") == "qwen2.5-7b" and c.phase.get("placement")}
    assert sorted(streamed) == [13, 14, 15, 40]
    assert all(c.phase["response_tokens"] == rl.VERL_7B_STREAMED_MEAN for c in streamed.values())
    assert all("FITTED on row 17's update" in c.assumed for c in streamed.values())
    assert rl.STREAMED_TUNED == (15,) and set(rl.TUNED) == {10, 12, 15}
    details, _ = rl._details(streamed[15])
    assert details is not None
    assert details["policy_update_s"] == pytest.approx(113.16, rel=0.01)
    # 8 tokens either way moves the update more than the fit's residual
    for step in (-8, 8):
        d, _ = rl._details(replace(streamed[15], phase={
            **streamed[15].phase, "response_tokens": rl.VERL_7B_STREAMED_MEAN + step}))
        assert d is not None
        assert abs(d["policy_update_s"] - 113.16) > abs(details["policy_update_s"] - 113.16)


def test_the_streamed_updates_lie_on_one_line():
    """By hand from the README: the 16 + 16 and 64 + 64 runs' updates, 269.80 and 113.16 s on
    16 and 64 trainer GPUs, as a + b/GPUs: b = 156.64 / (1/16 - 1/64) = 3,341.65 GPU-s,
    a = 269.80 - 3,341.65 / 16 = 60.95 s; on 32 GPUs the line gives 165.37 s, the 32 + 32
    run's measured 156.98 within 6%. Measured alone (counted nowhere): what differs between
    the streamed runs is work the GPUs share, and the part no GPU count removes is of the
    size of the driver's transfer the estimate puts in the update (45 s)."""
    a, b, at32, measured = rl.streamed_update_line()
    assert b == pytest.approx(3341.65, abs=0.01)
    assert a == pytest.approx(60.95, abs=0.01)
    assert at32 == pytest.approx(165.37, abs=0.01) and measured == pytest.approx(156.98)
    assert at32 / measured - 1 == pytest.approx(0.053, abs=0.001)
    d, _ = rl._details(next(c for c in rl.CASES if c.row == 15))
    assert d is not None and d["driver_policy_update_s"] == pytest.approx(45.0, abs=0.5)


def test_the_fitted_mean_predicts_the_held_out_old_logprob_pass():
    """The one out-of-sample check of the fitted mean: the 64-GPU run of the same recipe (row 13,
    held out) timed its old-log-prob pass at 70.26 s; at the mean fitted on rows 12 and 14 the
    estimate's pass must land near it (a wrong mean moves it: the forward is ~2N FLOPs a token
    over 8,192 sequences of 256 + mean tokens)."""
    data = rl.rows()
    (case,) = [c for c in rl.CASES if c.row == 11]  # 0-based 11: CSV line 13
    assert case.settings.get("model") == "qwen2.5-7b" and case.row not in rl.DRIVER_TUNED
    details, _ = rl._details(case)
    assert details is not None
    measured = rl._measured_old_logprob_s(data[case.row])
    assert measured == pytest.approx(70.26, abs=0.01)
    assert details["old_policy_log_probs_s"] == pytest.approx(measured, rel=0.05)


def test_the_readme_totals_give_each_quarter_of_a_run():
    """verl's README prints each run's wall time after 100, 200, 300 and 400 steps; their
    differences are the run's mean step by quarter (a diagnostic, nothing is set from it)."""
    # row 12 (CSV line): 13h 44m = 49,440 s; 1d 3h 43m = 99,780 s; 2d 9h 22m = 206,520 s;
    # 3d 17h 5m = 320,700 s
    assert rl.duration_s("1d 3h 43m") == 99_780
    assert rl.quarter_steps_s(10) == pytest.approx([494.4, 503.4, 1067.4, 1141.8])
    # the 400-step mean, 801.75 s, is the table's 790.1 s within 2%
    assert sum(rl.quarter_steps_s(10)) / 4 == pytest.approx(790.1, rel=0.02)
    a, b, at64, measured = rl.first_quarter_line()
    # 494.4 s on 32 GPUs and 309.6 s (8h 36m / 100) on 128: b = 184.8 / (1/32 - 1/128)
    assert b == pytest.approx(7884.8) and a == pytest.approx(248.0, abs=0.05)
    # the 64-GPU run (row 13, 10h 22m = 37,320 s) is on that line within 1%, where the tables'
    # 400-step means (790.1 / 365.3 / 356.3 s) put it 27% below a + b/64 of the same pair
    assert measured == pytest.approx(373.2) and at64 == pytest.approx(measured, rel=0.01)
    b400 = (790.1 - 356.3) / (1 / 32 - 1 / 128)
    assert 365.3 / (356.3 - b400 / 128 + b400 / 64) - 1 == pytest.approx(-0.27, abs=0.01)
    table = rl.run_drift_report()
    indented = "\n".join("  " + line if line else "" for line in table.split("\n"))
    assert indented in DOC.read_text(encoding="utf-8")
    assert table.count("\n| ") == 9  # the 9 runs below the header
    # row 42 (CSV line; 0-based 40), the staleness-0 pipeline: 4h 25m = 15,900 s, then
    # 9h 41m = 34,860 s, 15h 2m = 54,120 s, 1d 1h 53m = 93,180 s
    assert rl.quarter_steps_s(40) == pytest.approx([159.0, 189.6, 192.6, 390.6])


def test_verl_7b_timers_nest_in_their_step():
    """verl's timers nest: gen, old_log_prob and update_actor run inside step (ray_trainer.py
    `fit`; fully_async_trainer.py `fit`, each summed over a sync's local updates by
    MetricsAggregator), so step - gen - old_log_prob - update is what a step does besides
    them, and no run can leave less than nothing. By hand from the README: colocated 790.10 -
    357.41 - 107.71 - 313.81 = 11.17, 365.28 - 150.72 - 70.26 - 133.41 = 10.89, 356.30 -
    177.85 - 53.92 - 113.81 = 10.72; async 294.77 - 21.26 - 269.80 = 3.71, 189.26 - 28.46 -
    156.98 = 3.82, 150.63 - 33.14 - 113.16 = 4.33, staleness 0: 231.34 - 128.47 - 98.77 = 4.10.
    The cells of the README at df340d70 (colocate 32 269.80, 16:16 313.81, swapped by the
    table's reformatting in 15a9b0f5) leave 55.17 and -40.84 (rl_steps_README.md)."""
    data = rl.rows()

    def rest_s(row: int) -> float:
        r = data[row]
        old = rl._measured_old_logprob_s(r) or 0.0
        return (float(r["step_time_s"]) - float(r["gen_time_s"]) - old
                - float(r["update_time_s"]))

    assert [round(rest_s(row), 2) for row in (10, 11, 12)] == [11.17, 10.89, 10.72]
    assert [round(rest_s(row), 2) for row in (13, 14, 15, 40)] == [3.71, 3.82, 4.33, 4.10]
    # the swapped cells, for the record: the 16:16 update would outlast its own step
    assert 294.77 - 21.26 - 313.81 < 0 < 790.10 - 357.41 - 107.71 - 269.80


def test_async_7b_updates_take_less_gpu_time_than_their_synchronous_twins():
    """docs/rl.md: the same 8,192 sequences a step, yet the fully-async runs' updates took
    0.50-0.59x their synchronous twins' GPU time at 32 and 64 GPUs (the runs' shorter
    responses, not a setting of the step)."""
    data = rl.rows()
    gpu_s = {row: float(data[row]["update_time_s"]) * int(data[row]["n_gpus"])
             for row in (10, 11, 12)}
    # async rows 15-17 (CSV lines) train on half their GPUs (16 + 16, 32 + 32, 64 + 64)
    gpu_s |= {row: float(data[row]["update_time_s"]) * (int(data[row]["n_gpus"]) // 2)
              for row in (13, 14, 15)}
    # 269.80 x 16, 156.98 x 32, 113.16 x 64 against 313.81 x 32, 133.41 x 64, 113.81 x 128
    assert [round(gpu_s[r]) for r in (13, 14, 15)] == [4317, 5023, 7242]
    assert [round(gpu_s[r]) for r in (10, 11, 12)] == [10042, 8538, 14568]
    assert gpu_s[13] / gpu_s[10] == pytest.approx(0.43, abs=0.005)
    assert gpu_s[14] / gpu_s[11] == pytest.approx(0.59, abs=0.005)


def test_the_parts_no_gpu_count_shrinks_against_the_first_quarter():
    """The estimate's parts of the verl 7B step that do not depend on the mean response nor
    shrink with the GPUs (the longest response alone at the 28,672-token cap, the driver's
    padded transfers, the weight sync) against the intercept of the recipe's first 100 steps
    as a + b/GPUs (248 s), measured apart from the old-log-prob pass the driver's rate was set
    from: 304 s, within 25%."""
    case = next(c for c in rl.CASES if c.row == 10)
    d, _ = rl._details(case)
    assert d is not None
    fixed = d["rollout_tail_s"] + d["driver_transfer_s"] + d["weight_sync_s"]
    assert fixed == pytest.approx(304, abs=2)
    a = rl.first_quarter_line()[0]
    assert fixed / a - 1 == pytest.approx(0.23, abs=0.02)


def test_the_update_implies_shorter_responses_in_the_async_runs():
    """docs/rl.md: the mean at which the estimate's update takes each verl 7B row's measured
    update (a diagnostic from the row itself, counted nowhere). Whatever the update's
    efficiency, each async run's update implies a third to a half of the mean its synchronous
    twin's does (same recipe, same GPU count: 480 / 448 / 552 against 1,448 / 816 / 1,336);
    and the synchronous rows' updates imply less than the mean fitted on their old-log-prob
    pass (the update's cost against the forward's)."""
    table = rl.update_implied_mean_report()
    assert "\n".join("  " + line for line in table.split("\n")) in DOC.read_text(encoding="utf-8")
    implied = {int(cells[0]): int(cells[6].replace(",", ""))
               for cells in ([c.strip() for c in line.strip("|").split("|")]
                             for line in table.split("\n")[2:])}
    assert sorted(implied) == [12, 13, 14, 15, 16, 17, 42]
    for sync, streamed in ((12, 15), (13, 16), (14, 17)):
        assert 0.3 < implied[streamed] / implied[sync] < 0.6
    assert all(implied[row] < rl.VERL_7B_MEAN for row in (12, 13, 14))
    # the staleness-0 pipeline's update (98.8 s on 64 trainer GPUs), too
    assert implied[42] < implied[14] / 2


def test_the_doc_holds_the_easyr1_update_diagnostic():
    """EasyR1's rows: the update as the table's Actor MFU says it took, beside the predicted
    one (issue 13). Row 21 by hand: Qwen2.5-VL-7B's language model, 6 x 7,615,283,200 dense
    parameters (EasyR1's count: 28 layers x (3 x 3,584 x 18,944 + 3,584 x 8,192) + 2 x
    152,064 x 3,584) x 1,600 x 145 x 8 tokens, over 16.0% x 989 TFLOPS x 8: 67.0 s, plus the
    attention term at the mean sequence (725 tokens): 68.3 s."""
    table = rl.easyr1_update_report()
    assert "\n".join("  " + line for line in table.split("\n")) in DOC.read_text(encoding="utf-8")
    # the five EasyR1 rows (the 32B, CSV line 24, expressed with its catalog row: issue 13)
    assert table.count("\n") == 6
    c21 = next(c for c in rl.CASES if c.row == 19)
    dense = 28 * (3 * 3584 * 18944 + 3584 * 8192) + 2 * 152064 * 3584
    assert dense == 7_615_283_200
    tokens = 1600 * 145 * 8
    attention = 12 * 2560 * (tokens / 2560) ** 2 * 128 * 28 * 28
    assert rl.easyr1_update_from_mfu_s(c21) == pytest.approx(
        (6 * dense * tokens + attention) / (0.16 * 989e12 * 8), rel=1e-9)
    assert 6 * dense * tokens / (0.16 * 989e12 * 8) == pytest.approx(67.0, abs=0.05)


def test_the_doc_holds_the_phase_split():
    table = "\n".join("  " + line for line in rl.phase_split_report().split("\n"))
    assert table in DOC.read_text(encoding="utf-8")


def test_the_benchmark_rows_miss_in_training_not_deepspeed_chat_generation():
    """docs/rl.md (issue 13): the OpenRLHF benchmark splits each step into generation and
    training, each compared as its framework times it. DeepSpeed-Chat's generation (HF
    generate, transformers 4.38, at 8, 4 and 2 sequences a GPU) is within 10% with the host
    time fitted on 4.46; every row's training is short; OpenRLHF's own run of row 25's setup
    (same model, release, GPUs, batch) generates 23% slower than estimated (scoring forwards
    in its timer), which no release-wide host cost could tell from row 25. The Ray rows'
    training, with the actor and critic each on its 2 or 4 GPUs at once (and, on one node, their
    CPU Adam sharing the host), was 23-44% short (49-60% when the six or twelve training GPUs ran
    both updates in turn). Issue 14, held out (DeepSpeedCPUAdam at DeepSpeed issue #6834's
    per-node rate; the offloaded gradients' copies as DeepSpeed 0.13.2's code makes them, on
    the compute stream without overlap_comm, through pageable memory where pin_memory is off
    (DeepSpeed-Chat) and for the step's copy up (PR #5301's 4.5x); DeepSpeed-Chat's critic at
    its scripts' ZeRO-3, its weights on the host): OpenRLHF's --adam_offload updates -33/-23/-39%
    -> -19/-5/-18% (lines 27, 29, 32), the 70B ZeRO-3 -44% -> -37%; DeepSpeed-Chat's rows
    -65/-32/-73% -> -51/-29/-44% (lines 25, 26, 30), still short."""
    data = rl.rows()
    lines = rl.phase_split_report().split("\n")[2:]
    split = {int(c[1]): (float(c[7].strip(" %")) / 100, float(c[10].strip(" %")) / 100)
             for c in (line.split("|") for line in lines)}
    assert sorted(split) == [25, 26, 27, 28, 29, 30, 31, 32, 34]
    for row in (25, 26, 30):
        assert data[row - 2]["framework"].startswith("DeepSpeed-Chat")
        assert abs(split[row][0]) <= 0.10
    assert all(split[row][1] < -0.2 for row in (25, 26, 30))
    assert split[27][0] < -0.2
    assert all(-0.25 <= split[row][1] < 0 for row in (27, 29, 32))
    assert -0.45 < split[34][1] < -0.3
    # the Ray rows without vLLM (placement actor, issue 13): generation (HF generate on the
    # actor's 4 GPUs, then the scoring forwards) 20-22% short; training -12% and -31% before
    # issue 14's offload, +14% and -3% with it (the 7B's critic on 2 GPUs sets the pair)
    assert all(-0.25 < split[row][0] < -0.15 for row in (28, 31))
    assert 0 < split[28][1] < 0.2 and -0.1 < split[31][1] < 0


def test_the_benchmark_step_is_its_generation_plus_training():
    """The OpenRLHF benchmark's End-to-End latency is its Generation + Training columns (to the
    table's 0.1 s), so a DeepSpeed-Chat step holds no time its `e2e_time` leaves out: the
    scoring forwards, which that framework times in neither phase, are not compared (issue 13;
    OpenRLHF's generation timer holds them)."""
    data = rl.rows()
    for c in rl.CASES:
        r = data[c.row]
        if "wuxibin/benchmark" not in r["source"]:
            continue
        assert float(r["step_time_s"]) == pytest.approx(
            float(r["gen_time_s"]) + float(r["update_time_s"]), abs=0.15)
        details, _ = rl._details(c)
        assert details is not None
        predicted, _ = rl.predict(c)
        scoring = sum(details[k] for k in ("old_policy_log_probs_s", "reference_model_s",
                                           "reward_model_s", "critic_value_pass_s"))
        left_out = r["framework"].startswith("DeepSpeed-Chat")
        assert scoring > 0
        assert predicted == pytest.approx(details["step_time_s"] - (scoring if left_out else 0))


def test_verl_rows_run_the_loss_kernel_their_actor_runs():
    """verl's FSDP actor and EasyR1's take log-probs with flash-attn's Triton cross-entropy
    (verl@df340d70 and EasyR1@8460e817 dp_actor.py): loss kernel verl-logprobs; verl's Megatron
    actor (the 30B rows, CSV lines 18-19) takes Megatron-Core's vocab-parallel cross-entropy
    (verl/utils/megatron/tensor_parallel.py), the megatron kernel: the default on the megatron
    kernel path those rows now run (issue 13; hf before, as an upper end). NeMo-RL's rows run
    the megatron path too, their DistributedLogprob costed as the megatron kernel."""
    from gpuhours.setup import Training, loss_kernel_of

    data = rl.rows()
    for c in rl.CASES:
        framework = data[c.row]["framework"]
        if framework.startswith("verl (FSDP2") or framework.startswith("EasyR1"):
            assert c.settings["loss_kernel"] == "verl-logprobs", c.row
            assert "verl-logprobs" in c.assumed
        elif framework.startswith(("verl (Megatron", "NeMo-RL")) or "Megatron-Core" in framework:
            assert "loss_kernel" not in c.settings and c.settings["kernels"] == "megatron"
            t = Training(model=c.settings["model"], kernels="megatron")
            assert loss_kernel_of(t) == "megatron", c.row
            assert "megatron loss kernel" in c.assumed, c.row
        else:
            assert "loss_kernel" not in c.settings, c.row
            assert c.settings.get("kernels", "eager") == "eager", c.row


def test_hf_logits_halved_the_16_gpu_async_update_and_verl_logprobs_does_not():
    """CSV line 15: 16 trainer GPUs in 4 Ulysses groups of 4; 512 x 16 sequences in 16
    mini-batches are 128 a group per mini-batch, and the group's budget, 61,440 x 4 tokens,
    packs 125 sequences of 256 + 1,696 = 1,952 tokens (the fitted mean). hf's logits of 125 x 1,952
    tokens over 4 GPUs (61,000 tokens x 152,064 vocabulary x 10 bytes in the forward, 12 at
    backward's start: 86-104 GiB) do not fit the H20's memory beside the model, so the phase halves
    the micro-batch (62); verl-logprobs holds 2 bytes a logit (4 at backward's start) and packs 125.
    The old-log-prob pass, which the tuned fits use, is the same under both."""
    from dataclasses import replace

    c = next(c for c in rl.CASES if c.row == 13)
    # at the synchronous runs' mean (the row itself runs at the fully-async runs' own)
    c = replace(c, phase={**c.phase, "response_tokens": rl.VERL_7B_MEAN})
    verl, _ = rl._details(c)
    hf, _ = rl._details(replace(c, settings={**c.settings, "loss_kernel": "hf"}))
    assert verl is not None and hf is not None
    assert (hf["update_micro_batch"], verl["update_micro_batch"]) == (62, 125)
    assert verl["policy_update_s"] < hf["policy_update_s"]
    tuned = next(c for c in rl.CASES if c.row == 10)
    t_verl, _ = rl._details(tuned)
    t_hf, _ = rl._details(replace(tuned, settings={**tuned.settings, "loss_kernel": "hf"}))
    assert t_verl is not None and t_hf is not None
    assert t_verl["old_policy_log_probs_s"] == t_hf["old_policy_log_probs_s"]


def test_no_efficiency_fits_the_fitted_mean_into_the_async_updates():
    """rl.update_bound_sequence_tokens by hand: Qwen2.5-7B's matmul weights are 28 x (2 x 3,584
    x 3,584 + 2 x 3,584 x 512 + 3 x 3,584 x 18,944) + 152,064 x 3,584 = 7,070,285,824; row 15
    (CSV line) trained 8,192 sequences in 269.80 s on 16 H20s at 148 TFLOPS: 269.80 x 16 x
    148e12 / (6 x 7,070,285,824 x 8,192) = 1,838 tokens a sequence without recomputation,
    1,379 with verl's (8 x). The fitted mean's sequence, 256 + 1,696 = 1,952 tokens, fits
    neither at 100% of the peak, nor (with recomputation) row 16's 1,604; the tuned rows 12 and
    14 hold it 1.6x and 2.4x over (with recomputation), so the fitted mean is possible there."""
    cases = {c.row: c for c in rl.CASES}
    fitted = 256 + rl.VERL_7B_MEAN
    assert rl.update_bound_sequence_tokens(cases[13], recompute=False) == pytest.approx(
        269.80 * 16 * 148e12 / (6 * 7_070_285_824 * 8192))
    assert rl.update_bound_sequence_tokens(cases[13], recompute=False) == pytest.approx(1838.4,
                                                                                       abs=0.1)
    assert rl.update_bound_sequence_tokens(cases[13]) == pytest.approx(1838.4 * 6 / 8, abs=0.1)
    assert rl.update_bound_sequence_tokens(cases[13], recompute=False) < fitted
    assert rl.update_bound_sequence_tokens(cases[14]) == pytest.approx(1604.5, abs=0.1)
    assert rl.update_bound_sequence_tokens(cases[14]) < fitted
    # the tuned rows: 313.81 x 32 and 113.81 x 128 H20-seconds hold it
    assert [round(rl.update_bound_sequence_tokens(cases[r]) / fitted, 1) for r in (10, 12)] \
        == [1.6, 2.4]


def test_nemo_prompt_is_the_page_throughput_less_the_mean_response():
    # CSV line 8 (GB200, Llama-3.1-8B colocated): 3,359 tokens/s/GPU x 91.0 s x 8 GPUs / 2,048
    # sequences = 1,194.0 tokens a sequence, less the 1,066-token mean response = 128
    assert rl.nemo_prompt_tokens(6) == 128
    # CSV line 10 (GB200, Qwen3-32B colocated): 1,127 x 381 x 16 / 2,048 = 3,354.6 - 3,253 = 102
    assert rl.nemo_prompt_tokens(8) == 102
    # the ten runs, each its own measurement, agree per model family: the same prompts, Llama
    # 3.1's chat template ~25 tokens longer (its default system header)
    llama = [rl.nemo_prompt_tokens(r) for r in (0, 1, 2, 6, 7)]
    qwen = [rl.nemo_prompt_tokens(r) for r in (3, 4, 5, 8, 9)]
    assert all(125 <= p <= 140 for p in llama), llama
    assert all(100 <= p <= 112 for p in qwen), qwen


def test_nemo_8b_update_packs_its_micro_batches_to_the_recipe_budget():
    # NeMo-RL's sequence packing: train_mb_tokens = 4,096 x train_micro_batch_size 1; a
    # sequence is the prompt + the mean response: GB200 4,096 // (128 + 1,066) = 3 (colocated),
    # 4,096 // (133 + 1,107) = 3 (one-step-off); H100 4,096 // (127 + 1,019) = 3 (colocated,
    # PP2), // (131 + 1,123) = 3 and // (136 + 1,128) = 3 (one-step-off, BF16 and FP8)
    cases = {c.row: c for c in rl.CASES}
    for row in (0, 1, 2, 6, 7):
        details, _ = rl._details(cases[row])
        assert details is not None and details["update_micro_batch"] == 3


def test_the_easyr1_micro_batch_split_solves_the_pair_by_hand():
    """The two Qwen2.5-VL-7B H100 rows differ only in their micro-batches (1 / 2 and 4 / 8):
    4 mini-batches of 80 sequences a GPU, packed 5 and 21 sequences a micro-batch (4,096 and
    16,384 tokens at 725 and 750 a sequence): 4 x ceil(80 / 5) = 64 and 4 x ceil(80 / 21) = 16
    micro-batches. The split (a s a micro-batch, b ms a token) gives back each row's update."""
    c21, c22 = (next(c for c in rl.CASES if c.row == r) for r in (19, 20))
    n21, k21 = rl.easyr1_update_micro_batches(c21, 5)
    n22, k22 = rl.easyr1_update_micro_batches(c22, 21)
    assert (n21, n22) == (64, 16)
    assert k21 == pytest.approx(320 * 1600 * 145 * 8 / 2560)
    split = rl.easyr1_micro_batch_split()
    a, b = split["measured"]
    for c, n, k in ((c21, n21, k21), (c22, n22, k22)):
        assert n * a + k * b / 1e3 == pytest.approx(rl.easyr1_update_from_mfu_s(c), rel=1e-9)
    # both the cost per micro-batch and per token exceed what the estimate costs (issue 13)
    pa, pb = split["predicted"]
    assert a > pa and b > pb


def test_the_tuned_verl_rows_miss_by_a_part_no_gpu_count_shrinks():
    """docs/rl.md (issue 13, the synchronous verl rows): the 400-step means of rows 12 and 14
    as a + b/GPUs, by hand: b = (790.10 - 356.30) / (1/32 - 1/128) = 433.8 x 128 / 3 =
    18,508.8 GPU-s, a = 356.30 - 18,508.8 / 128 = 211.7 s, at 64 GPUs 211.7 + 289.2 = 500.9 s.
    The estimate's own line through the same rows shares that b within 1% (its GPU-shared work
    is right on the tuned pair) and misses by its a alone, about 97 s more than the measured
    one; row 13's miss is that part times the run's own 27% below its siblings' line."""
    line = rl.verl_sync_line()
    assert line["b_measured"] == pytest.approx(18_508.8)
    assert line["a_measured"] == pytest.approx(211.7)
    assert line["at64_measured"] == pytest.approx(500.9)
    assert line["b_predicted"] == pytest.approx(line["b_measured"], rel=0.01)
    assert line["a_predicted"] > line["a_measured"]  # the fixed part is the over-count
    # the run below its siblings' line: 500.9 / 365.28 = 1.371 (1 - 365.28 / 500.9 = 27%)
    assert line["at64_measured"] / line["row13_measured"] == pytest.approx(1.371, abs=0.001)
    # the estimate is a + b/GPUs in all but 1 s, so the two factors make its whole miss
    fixed = line["at64_predicted"] / line["at64_measured"]
    whole = line["row13_predicted"] / line["row13_measured"]
    assert fixed * line["at64_measured"] / line["row13_measured"] == pytest.approx(whole,
                                                                                  rel=0.002)
    assert fixed > 1 and whole > fixed


def test_the_verl_sync_timers_sum_to_their_step_and_the_miss_lies_in_gen():
    """Each synchronous verl row's parts (`verl_sync_parts`) sum to its step, measured and
    predicted; the old-log-prob pass of rows 12 and 14 is the fit (within 0.2 s), so the
    tuned rows' excess (+99.5 and +97.5 s) is in gen and the update, gen's the larger on the
    128-GPU run (+93.8 s of +97.5) where the update's share of the work is smallest."""
    for row in rl.VERL_SYNC_SPLIT:
        parts = rl.verl_sync_parts(row)
        for i in (0, 1):
            assert sum(parts[k][i] for k in parts if k != "step") == pytest.approx(
                parts["step"][i])
    p12, p14 = rl.verl_sync_parts(10), rl.verl_sync_parts(12)
    for p in (p12, p14):
        assert p["old_log_prob"][1] == pytest.approx(p["old_log_prob"][0], abs=0.2)
    excess = {k: p14[k][1] - p14[k][0] for k in p14}
    assert excess["step"] > 0 and excess["gen"] > excess["update_actor"] > 0
    # the measured rest (reward, advantages, validation) is 10.7 s; the estimate has none (the
    # reward is scored beside the rollout, its last response's 28 us on the step)
    assert excess["rest"] == pytest.approx(-10.72, abs=0.01)
    table = rl.verl_sync_parts_report()
    assert table.count("\n| ") == len(rl.VERL_SYNC_SPLIT)


def test_the_measured_gen_leaves_less_room_than_the_estimates_tail_step():
    """If the 64- and 128-GPU runs' longest response reached the 28,672-token cap, their gen
    (150.72 and 177.85 s) less the estimate's driver transfer of the rollouts (30.04 s) and
    weight sync (0.81 s) leaves (150.72 - 30.04 - 0.81) / 28,672 = 4.18 ms and
    (177.85 - 30.04 - 0.82) / 28,672 = 5.13 ms a decode step, where the estimate takes
    192.1 / 28,672 = 6.70 ms for that response alone (the V0-fitted host step and the
    SGLang-fitted H20 bandwidth, docs/rl.md)."""
    bound13, tail = rl.tail_step_bound_ms(11)
    bound14, _ = rl.tail_step_bound_ms(12)
    # the claim (the figures above are the prose's, at the estimate of 2026-11-25): the runs'
    # measured gen leaves less room a step than the estimate's tail step takes
    assert bound13 < bound14 < tail


def test_no_length_spread_makes_the_32_gpu_engines_preempt_at_the_fitted_mean():
    """At 32 GPUs each TP-4 engine holds 8,192 / 8 = 1,024 sequences, all running at once
    (verl's max_num_seqs 1024); at the fitted mean they need 1,024 x (256 + 1,696) =
    1,998,848 tokens of cache if every one were held at its full length at once, less than the
    engine's cache in the colocated 0.5 share: no spread of lengths can preempt, and the replay
    preempts nothing. The cache would run out only above a mean of cache / 1,024 - 256 tokens
    (2,407), which no published figure says the run reached."""
    case = next(c for c in rl.CASES if c.row == 10)
    d, _ = rl._details(case)
    assert d is not None
    assert d["rollout_peak_running_sequences"] == 1024
    assert 1024 * (256 + rl.VERL_7B_MEAN) == 1_998_848 < d["rollout_kv_cache_tokens"]
    assert d["rollout_preemptions"] == 0 and d["rollout_admissions"] == 1
    assert d["rollout_kv_cache_tokens"] / 1024 - 256 > rl.VERL_7B_MEAN


def test_the_7b_vllm_row_is_faster_than_its_floor_at_the_assumed_lengths():
    """OpenRLHF's Llama-2-7B Ray + vLLM row (CSV line 29, issue 13): at the case's 1,024-token
    prompts and responses its generation timer could not read less than 486 s, even with every
    decode step at the A800's datasheet 2,039 GB/s and every prefill and log-prob forward at
    its 312 TFLOPS; it read 481.86 s. Worked by hand from Llama-2-7B's config (hidden 4,096,
    32 layers of 32 KV heads, MLP 11,008, vocabulary 32,000): matmul parameters
    32 x (4 x 4,096^2 + 3 x 4,096 x 11,008) + 32,000 x 4,096 = 6,607,077,376 (the model's
    6,738,415,616 less its embedding table and norms), 13,214,154,752 bytes read a step;
    524,288 KV bytes a token. Each of the 2 engines makes 1,024 / (2 x 16) = 32 calls; a call
    reads 1,024 x 13,214,154,752 + 16 x 524,288 x (1,024 x 1,024 + 1,024 x 1,023 / 2) =
    26,721,139,032,064 bytes (13.105 s), prefills 16 x 1,024 tokens (0.694 s) and the actor
    takes the log-probs of 16 x 2,048 (1.388 s): 32 x 15.187 = 486.0 s. The 13B and 70B rows
    stay above their floors (90% and 71% of the measured generation)."""
    cases = {c.row + 2: c for c in rl.CASES}
    by_hand = 32 * (26_721_139_032_064 / 2.039e12 + 13_214_154_752 * 16 * (1024 + 2048) / 312e12)
    assert by_hand == pytest.approx(486.0, abs=0.05)
    assert rl.vllm_rollout_floor_s(cases[29]) == pytest.approx(by_hand, rel=1e-9)
    data = rl.rows()
    share = {row: rl.vllm_rollout_floor_s(cases[row]) / float(data[row - 2]["gen_time_s"])
             for row in (29, 32, 34)}
    assert share[29] > 1.0
    assert 0.85 < share[32] < 0.95 and 0.65 < share[34] < 0.75
    assert rl.rollout_floor_report().count("\n") == 4


def test_the_gb200_one_step_off_row_is_bounded_by_its_training_side():
    """NeMo-RL's GB200 Qwen3-32B one-step-off row (CSV line 11): its step is max(rollouts,
    training side) + sync, and the training side (two log-prob passes and the update) outlasts
    the rollouts, which are still its longest single part: the bound is the update."""
    case = next(c for c in rl.CASES if c.row == 9)
    d, why = rl._details(case)
    assert d is not None
    train = d["old_policy_log_probs_s"] + d["reference_model_s"] + d["policy_update_s"]
    assert d["policy_update_s"] < d["rollout_generation_s"] < train
    assert d["step_time_s"] == pytest.approx(train + d["weight_sync_s"])
    assert why == "policy update"


#: NeMo-RL's rows added for issue 13 (0-based): v0.5's large-MoE and remaining Qwen3-30B-A3B
#: rows (CSV lines 43-55) and the v0.6 table (CSV lines 56-74)
NEMO_NEW = range(41, 73)


def test_every_new_nemo_row_is_expressed_or_says_why():
    cased = {c.row for c in rl.CASES}
    for row in NEMO_NEW:
        assert (row in cased) != (row in rl.NOT_EXPRESSED), row
    # the only one not expressed: Nemotron-3-Nano's SWE-agent run (CSV line 65)
    assert [row for row in NEMO_NEW if row in rl.NOT_EXPRESSED] == [63]
    assert "Nemotron-3-Nano" in rl.NOT_EXPRESSED[63] and "SWE" in rl.NOT_EXPRESSED[63]
    for row in NEMO_NEW:
        if row in cased:
            assert rl.predict(next(c for c in rl.CASES if c.row == row))[0] is not None, row


def test_new_nemo_prompt_is_the_page_throughput_over_its_own_sequences():
    # CSV line 43 (v0.5 H100, DeepSeek-V3 on-policy): 32 prompts x 16 = 512 sequences;
    # 12.7 tokens/s/GPU x 134 s x 256 GPUs / 512 = 850.9 tokens a sequence, less the 744-token
    # mean response = 106.9 -> 107
    assert rl.nemo_prompt_tokens(41) == 107
    # CSV line 46 (v0.5 H100, Qwen3-235B on-policy): 16 x 32 = 512; 54.1 x 431 x 128 / 512 =
    # 5,829.3 - 5,700 = 129.3 -> 129
    assert rl.nemo_prompt_tokens(44) == 129
    # and the longest response the row runs is the cap less it: 1,536 - 107 = 1,429
    case = next(c for c in rl.CASES if c.row == 41)
    assert case.phase["max_response_tokens"] == 1429
    assert case.phase["prompts_per_step"] * case.phase["generations_per_prompt"] == 512


def test_new_nemo_rows_floor():
    """NeMo-RL's 31 expressed new rows, all held out: nothing was set from them."""
    data = rl.rows()
    results = {}
    for c in rl.CASES:
        if c.row in NEMO_NEW:
            predicted, _ = rl.predict(c)
            assert predicted is not None
            results[c.row] = predicted / float(data[c.row]["step_time_s"]) - 1
    assert len(results) == 31
    # 20 of 31 within 25% when first expressed (issue 13); 17 since each engine runs the
    # max_num_seqs its code gives it (vLLM's AsyncLLM without a usage context: 128, where 256
    # was assumed; vllm.LLM on H100/GB200: 1,024): the one-step-off Qwen3-30B-A3B rows (CSV lines
    # 48, 63) -19/-18% -> +32/+33%, the 8-step-off (line 64) -11% -> +43%
    assert sum(abs(e) <= 0.25 for e in results.values()) >= 17
    # off by more than 2x: DAPO (CSV line 45); the v0.6 GB200 30B-A3B one-step-off (line 74)
    # was too (-58%) until its all-to-all dispatcher with the unfused permute was counted
    # (moe_dispatch alltoall-unfused: -26%)
    assert sorted(r for r, e in results.items() if e < -0.5 or e > 1.0) == [43]
    # the 8-step-off row (CSV line 64): the engines hold up to 8 steps' shares
    # (rollout_steps_in_flight 8): +126% as one step's share, -11% with them at 256 sequences
    # an engine, +43% at the 128 its AsyncLLM runs as a stream; +32% replayed under the
    # collector with in-flight weight updates (8 steps' prompt groups as its slots, each freed
    # when its longest response ends)
    assert 0.25 < results[62] < 0.6
    # the cross-version check: v0.6's Qwen3-30B-A3B H100 rows re-measure v0.5 setups (CSV
    # lines 7 -> 62 colocated, 48 -> 63 one-step-off): the estimate moves alike under both
    assert results[60] < 0 and abs(results[61] - results[46]) < 0.05


def test_dedicated_deepseek_rows_wait_on_the_refit_of_the_whole_model():
    # the one-step-off DeepSeek-V3 rows hand all 1.34 TB of bf16 weights to every engine GPU
    # each step, broadcast as NCCL rings over every NIC of the group's whole nodes
    # (weight_sync_every_rank): 8 x 50 GB/s a DGX-H100 node (catalog dgx-h100) x the
    # collective efficiency 0.75 = 300 GB/s, so 1.34e12 / 300e9 = 4.47 s of the 64.9 s step
    # (CSV line 44); through one NIC it had been 36 s
    d, _ = rl._details(next(c for c in rl.CASES if c.row == 42))
    assert d is not None and 4.2 < d["weight_sync_s"] < 4.7
    assert rl.system_network_gb_per_s("H100 (DGX-H100)") == 50
    assert rl.system_network_gb_per_s("H20") is None
