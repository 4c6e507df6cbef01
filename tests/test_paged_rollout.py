"""The paged-cache replay of a synchronous rollout batch (estimate/paged_rollout.py), on
hand-worked batches: every figure below is counted by hand from the scheduler's rule (vLLM V1
scheduler.py `schedule`: running requests first, the newest preempted to the front of the
queue, no admission in a step that preempted; SGLang's new_token_ratio reservation)."""

from __future__ import annotations

import pytest

from gpuhours.estimate.paged_rollout import (
    Admission,
    DecodeStretch,
    SglangAdmission,
    VllmAdmission,
    paged_rollout,
    response_lengths_tokens,
)


def test_a_batch_that_fits_runs_at_once_until_its_longest_response() -> None:
    # 4 prompts of 10 tokens, responses 2, 4, 6, 8 in a cache of 1,000 tokens: all admitted
    # at once (40 tokens); each stretch ends when one completes
    r = paged_rollout(10, [2, 4, 6, 8], 1000.0, None)
    assert r.admissions == (Admission(4, 10.0, False),)
    assert r.stretches == (
        DecodeStretch(2, 4, 11.5),  # contexts 11 and 12 in its two steps
        DecodeStretch(2, 3, 13.5),
        DecodeStretch(2, 2, 15.5),
        DecodeStretch(2, 1, 17.5),
    )
    assert (r.decode_steps, r.preemptions, r.peak_running_sequences) == (8, 0, 4)


def test_max_num_seqs_admits_the_rest_as_slots_free() -> None:
    # the same batch, at most 2 running: 2 and 4 first; the 6 takes the 2's slot at step 2,
    # the 8 takes the 4's at step 4; the last ends at step 4 + 8 = 12
    r = paged_rollout(10, [2, 4, 6, 8], 1000.0, 2)
    assert [a.sequences for a in r.admissions] == [2, 1, 1]
    assert [(s.steps, s.running_sequences) for s in r.stretches] == [
        (2, 2), (2, 2), (4, 2), (4, 1)]
    assert (r.decode_steps, r.peak_running_sequences, r.preemptions) == (12, 2, 0)


def test_a_full_cache_preempts_the_newest_and_recomputes_it() -> None:
    # 2 prompts of 10, responses of 10, a cache of 35 tokens: both admitted (20 tokens); after
    # 7 steps they hold 34 and the next step needs 2 more: the newer (17 tokens) is preempted
    # to the queue; the older ends at step 10 (20 tokens freed); the newer comes back with its
    # prompt and its 7 tokens prefilled again (17) and decodes its last 3 tokens
    r = paged_rollout(10, [10, 10], 35.0, None)
    assert r.preemptions == 1
    assert r.admissions == (Admission(2, 10.0, False), Admission(1, 17.0, True))
    assert [(s.steps, s.running_sequences) for s in r.stretches] == [(7, 2), (3, 1), (3, 1)]
    assert r.decode_steps == 13 and r.recomputed_tokens == 17.0


def test_admission_keeps_room_for_the_step_of_the_running_requests() -> None:
    # a cache of 30, nothing running: both prompts (10 each) admitted, 20 tokens; the two
    # then need 2 slots a step: the 1-token response ends at step 1, the other at step 20
    r = paged_rollout(10, [20, 1], 30.0, None)
    assert r.admissions[0] == Admission(2, 10.0, False)
    assert r.preemptions == 0 and r.decode_steps == 20


def test_the_vllm_v0_watermark_keeps_blocks_free_at_admission() -> None:
    # a cache of 100 with 41 kept free: 59 for prompts of 20; two fit (40), the third (60)
    # waits until they complete at step 5, then decodes its 5 tokens
    without = paged_rollout(20, [5, 5, 5], 100.0, None)
    kept = paged_rollout(20, [5, 5, 5], 100.0, None, VllmAdmission(watermark_tokens=41.0))
    assert without.admissions[0].sequences == 3
    assert kept.admissions[0].sequences == 2 and kept.decode_steps == 10


def test_sglang_reserves_the_longest_for_a_new_request() -> None:
    # SGLang: a new request needs prompt 10 + min(max_new 20, 4096) = 30 < what is left;
    # in a cache of 70, two are admitted (60 reserved), the third waits; at step 1 the two
    # running hold 22 and reserve 0.7 x 19 each -> 70 - 22 - 26.6 = 21.4 < 30: still waiting,
    # and so until both complete at step 20; the third then takes 20 more
    r = paged_rollout(10, [20, 20, 20], 70.0, None, SglangAdmission(max_new_tokens=20))
    assert r.admissions == (Admission(2, 10.0, False), Admission(1, 10.0, False))
    assert r.preemptions == 0 and r.decode_steps == 40
    # vLLM admits all three at once (30 tokens); after 13 steps they hold 69 and need 3 more:
    # the newest (23) is preempted; the two end at step 20, the third, its 23 tokens
    # prefilled again, decodes its last 7: step 27
    v = paged_rollout(10, [20, 20, 20], 70.0, None)
    assert (v.decode_steps, v.preemptions, v.recomputed_tokens) == (27, 1, 23.0)


def test_one_sequence_that_cannot_fit_is_refused() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        paged_rollout(10, [100], 50.0, None)


def test_response_lengths_hold_the_mean_and_the_longest() -> None:
    lengths = response_lengths_tokens(1000, 4000, 1024)
    assert max(lengths) == 4000
    assert sum(lengths) / len(lengths) == pytest.approx(1000, rel=0.01)
    # k = 1 (mean half the longest): evenly spread, 1..4 for 4 responses, interleaved
    assert sorted(response_lengths_tokens(2, 4, 4)) == [1, 2, 3, 4]
    assert response_lengths_tokens(2, 4, 4) != [1, 2, 3, 4]
    assert response_lengths_tokens(3, 3, 3) == [3, 3, 3]


def test_sglang_retracts_the_fewest_output_tokens_and_prefills_them_again() -> None:
    # new requests reserve min(max_new 40, clip 5) = 5 beside their prompt of 10: three fit
    # in 60 (45); after 10 steps they hold 60 and the step needs 3: retract (at least one, then
    # until 20 steps of the rest fit) the last of equal outputs, twice, leaving one (20 tokens);
    # the ratio becomes (10 + 20) / 41; one comes back, its 10 + 10 tokens prefilled again
    r = paged_rollout(10, [40, 40, 40], 60.0, None,
                      SglangAdmission(max_new_tokens=40, clip_tokens=5))
    assert r.admissions[:2] == (Admission(3, 10.0, False), Admission(1, 20.0, True))
    assert [(s.steps, s.running_sequences) for s in r.stretches[:2]] == [(10, 3), (10, 2)]
