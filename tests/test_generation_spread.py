"""A spread of output lengths (the run waits for its longest output) and the engine's host
time per running sequence (vLLM V0, SGLang), worked by hand from the estimate's own parts."""

from __future__ import annotations

import pytest

from gpuhours import catalog
from gpuhours.errors import InputError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.generation import estimate_generation
from gpuhours.resolve import resolve_model
from gpuhours.setup import Generation

ARCH, _ = resolve_model("qwen2.5-7b")
GPU = catalog.gpu("a100-80gb")


def gen(**kw) -> Generation:
    return Generation(**{"arch": ARCH, "prompt_tokens": 200, "output_tokens": 100,
                         "batch": 64, **kw})


def test_the_run_waits_for_its_longest_output() -> None:
    even = estimate_generation(gen(), GPU)
    spread = estimate_generation(gen(max_output_tokens=1000), GPU)
    alone = estimate_generation(gen(batch=1, output_tokens=1000), GPU)
    # one wave of 64: the mean work, then the longest output decoded alone beyond it
    assert even.tail_s == 0.0
    assert spread.tail_s == pytest.approx(alone.batch_time_s - even.batch_time_s)
    assert spread.batch_time_s == pytest.approx(alone.batch_time_s)
    assert spread.output_tokens_per_s == pytest.approx(64 * 100 / alone.batch_time_s)
    # a longest output no longer than the last wave's work costs nothing more
    assert estimate_generation(gen(max_output_tokens=100), GPU).tail_s == 0.0


def test_a_run_of_many_batches_waits_for_the_longest_output_once() -> None:
    from gpuhours.estimate.generation import generation_summary

    even = estimate_generation(gen(), GPU)
    spread = estimate_generation(gen(max_output_tokens=1000), GPU)
    hours = {k: generation_summary(e, gen(), GPU, sequences=64_000)["gpu_hours"]["value"]
             for k, e in (("even", even), ("spread", spread))}
    # 1,000 batches of 64 at the steady rate, then one tail (not a tail per batch)
    assert hours["even"] == pytest.approx(1000 * even.batch_time_s / 3600)
    assert hours["spread"] == pytest.approx(hours["even"] + spread.tail_s / 3600)


def test_a_longest_output_below_the_mean_names_the_field() -> None:
    with pytest.raises(InputError, match="below the mean") as caught:
        gen(max_output_tokens=50)
    assert "max_output_tokens" in caught.value.fields


@pytest.mark.parametrize("running", [1, 64, 256])
def test_vllm_v0_adds_its_host_time_per_running_sequence(running: int) -> None:
    v1 = estimate_generation(gen(batch=running), GPU)
    v0 = estimate_generation(gen(batch=running, engine="vllm-v0"), GPU)
    per_seq = A.DECODE_HOST_PER_SEQUENCE_S["vllm-v0"].value
    assert per_seq == 84e-6 and A.DECODE_HOST_PER_SEQUENCE_S["vllm"].value == 0.0
    # the same step otherwise: 84 us for each running sequence, every decode step
    assert v0.decode_step_s_first - v1.decode_step_s_first == pytest.approx(running * per_seq)
    assert v0.decode_s - v1.decode_s == pytest.approx(100 * running * per_seq)
    assert v0.prefill_s == pytest.approx(v1.prefill_s)


def test_w8a8_runs_compute_bound_prefill_at_the_fp8_rate() -> None:
    h100 = catalog.gpu("h100-sxm")
    long = dict(prompt_tokens=8192, output_tokens=0, batch=8, weight_bytes_per_param=1.0)
    bf16 = estimate_generation(gen(**long), h100)
    fp8 = estimate_generation(gen(**long, matmul_precision="fp8"), h100)
    # a compute-bound prefill: time less the host step scales as bf16 peak / fp8 peak
    host = A.DECODE_HOST_STEP_S["vllm"].value
    ratio = h100.dense_tflops.bf16 / h100.dense_tflops.fp8
    assert (fp8.prefill_s - host) == pytest.approx((bf16.prefill_s - host) * ratio, rel=0.01)
    # a GPU without fp8 tensor cores names the field
    with pytest.raises(InputError, match="fp8") as caught:
        estimate_generation(gen(matmul_precision="fp8"), GPU)
    assert "matmul_precision" in caught.value.fields


def test_w8a8_weights_are_one_byte_unless_given_and_never_two() -> None:
    # W8A8 stores fp8 weights: the default is 1 byte, and the weights read are half bf16's
    fp8, bf16 = gen(matmul_precision="fp8"), gen()
    assert (fp8.weight_bytes_per_param, bf16.weight_bytes_per_param) == (1.0, 2.0)
    assert gen(matmul_precision="fp8", weight_bytes_per_param=0.56).weight_bytes_per_param == 0.56
    with pytest.raises(InputError, match="1 byte each") as caught:
        gen(matmul_precision="fp8", weight_bytes_per_param=2.0)
    assert "weight_bytes_per_param" in caught.value.fields
