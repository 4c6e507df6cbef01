"""DeepSpeed's PipelineEngine (GPT-NeoX, Megatron-DeepSpeed): the gradients all-reduced after
the last backward and ZeRO-1's updated weights all-gathered, none of it beside compute
(estimate/pipe_engine.py), by hand."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpuhours.cli import app
from gpuhours.errors import FieldError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.fit import fit
from gpuhours.estimate.flops import training_flops
from gpuhours.estimate.memory import training_memory
from gpuhours.estimate.pipe_engine import pipe_engine_grad_sync_bytes
from gpuhours.estimate.timing import training_step_time
from gpuhours.setup import Hardware, Training


def test_the_engines_traffic_by_hand():
    # 1e9 parameters on 4 ranks, a ring moving 3/4 of a buffer per all-gather: the gradients'
    # all-reduce 2 x 3/4 x 2 GB = 3 GB; ZeRO-1's all-gather of the updated 2-byte weights
    # 3/4 x 2 GB = 1.5 GB more
    assert pipe_engine_grad_sync_bytes(1e9, 2, 2, 4, zero_stage=0) == 3e9
    assert pipe_engine_grad_sync_bytes(1e9, 2, 2, 4, zero_stage=1) == 4.5e9
    assert pipe_engine_grad_sync_bytes(1e9, 2, 2, 1, zero_stage=1) == 0.0
    with pytest.raises(ValueError, match="ZeRO stage 0 or 1"):
        pipe_engine_grad_sync_bytes(1e9, 2, 2, 4, zero_stage=2)


def test_the_engine_refuses_zero_2_and_3():
    with pytest.raises(FieldError, match="PipelineEngine runs ZeRO stage 0 or 1"):
        Training(model="llama-2-7b", zero_stage=2, deepspeed_pipe_engine=True)


def _step(engine: bool, tp: int = 1, precision: str = "fp16-mixed", blocking: bool = False):
    t = Training(model="llama-2-7b", seq_len=2048, micro_batch=1, grad_accum=4,
                 checkpointing=True, zero_stage=1, tp=tp, deepspeed_pipe_engine=engine,
                 precision=precision, cuda_launch_blocking=blocking)
    hw = Hardware(gpu="a100-80gb", num_gpus=16)  # 2 nodes, 25 GB/s per GPU between them
    mem = training_memory(t.arch, t, 16)
    return training_step_time(t.arch, t, hw, training_flops(t), mem.trainable_params), mem


def test_all_of_the_engines_traffic_is_exposed_by_hand():
    st, mem = _step(True)
    # 16 ranks across two nodes: the network's 25 GB/s at the collective efficiency assumed;
    # 2 x 15/16 of the fp16 gradients and 15/16 of the fp16 weights
    bytes_moved = 3 * 15 / 16 * mem.trainable_params * 2
    assert st.communication_s == pytest.approx(
        bytes_moved / (25e9 * A.COLLECTIVE_EFFICIENCY.value))
    assert st.communication_exposed_s == st.communication_s
    # nothing else in the step moves: the engine adds its exposed traffic and no more
    plain, _ = _step(False)
    assert plain.communication_exposed_s < plain.communication_s  # partly hidden beside backward
    assert st.step_time_s - plain.step_time_s == pytest.approx(
        st.communication_exposed_s - plain.communication_exposed_s)
    assert st.matmul_s == plain.matmul_s and st.optimizer_s == plain.optimizer_s


def test_with_bf16_the_engine_reduces_fp32_gradients():
    # DeepSpeed's BF16_Optimizer: its fp32 gradients all-reduced (2 x 15/16 x 4 bytes), the
    # updated bf16 weights all-gathered (15/16 x 2 bytes): 10 x 15/16 bytes per parameter
    st, mem = _step(True, precision="bf16-mixed")
    assert st.communication_s == pytest.approx(
        10 * 15 / 16 * mem.trainable_params / (25e9 * A.COLLECTIVE_EFFICIENCY.value))


def test_with_tensor_parallelism_the_data_parallel_ranks_sync_in_full():
    st, mem = _step(True, tp=2)
    dp = st.collectives[-1]
    assert dp.name == "data-parallel gradients"
    assert dp.exposed_s == dp.seconds > 0
    # 8 data-parallel ranks of half the weights each (tensor parallelism 2), across nodes
    half = dp.seconds * 25e9 * A.COLLECTIVE_EFFICIENCY.value / (3 * 7 / 8 * 2)
    assert half == pytest.approx(mem.trainable_params / 2, rel=0.02)


def test_fit_keeps_the_engine_below_zero_2():
    t = Training(model="llama-2-7b", seq_len=2048, deepspeed_pipe_engine=True,
                 precision="fp16-mixed")
    r = fit(t, Hardware(gpu="a100-80gb", num_gpus=16), effective_batch=64)
    assert r.fastest is not None
    assert {c.zero_stage for c in [r.fastest, *r.alternatives]} <= {0, 1}
    # with bf16, BF16_Optimizer: ZeRO-1's sharding only
    bf16 = Training(model="llama-2-7b", seq_len=2048, deepspeed_pipe_engine=True, zero_stage=1)
    r = fit(bf16, Hardware(gpu="a100-80gb", num_gpus=16), effective_batch=64)
    assert {c.zero_stage for c in [r.fastest, *r.alternatives]} == {1}


def test_fit_over_layouts_keeps_the_engine_on_plain_1f1b():
    t = Training(model="llama-2-70b", seq_len=4096, deepspeed_pipe_engine=True, zero_stage=1)
    r = fit(t, Hardware(gpu="h100-sxm", num_gpus=64), search_layouts=True)
    assert r.fastest is not None
    for c in [r.fastest, *r.alternatives]:
        assert c.zero_stage == 1 and c.virtual_stages == 1
        assert not c.tp_comm_overlap and not c.moe_a2a_overlap


def test_the_cli_refuses_the_engine_with_zero_3():
    result = CliRunner().invoke(app, ["estimate", "--model", "llama-2-7b", "--gpu", "a100-80gb",
                                      "--gpus", "8", "--zero", "3", "--deepspeed-pipe-engine"])
    assert result.exit_code == 2
    assert "deepspeed" in result.output.lower() and "Traceback" not in result.output


def test_the_estimate_says_where_the_exposed_traffic_comes_from():
    from gpuhours.estimate.estimator import estimate_training

    t = Training(model="llama-2-7b", seq_len=2048, micro_batch=1, grad_accum=4,
                 checkpointing=True, zero_stage=1, deepspeed_pipe_engine=True)
    e = estimate_training(t, Hardware(gpu="a100-80gb", num_gpus=16))
    exposed = e.step_time_breakdown_s["communication_exposed_s"]
    assert "PipelineEngine" in exposed.source and "comm_overlap" not in exposed.source
    blocking = estimate_training(t.model_copy(update={"cuda_launch_blocking": True}),
                                 Hardware(gpu="a100-80gb", num_gpus=16))
    assert "CUDA_LAUNCH_BLOCKING" in blocking.step_time_breakdown_s["host_exposed_s"].source


def test_bf16_under_the_engine_needs_zero_1():
    # DeepSpeed runs bf16 under BF16_Optimizer whenever the engine pipelines (ZeRO-1-like)
    with pytest.raises(FieldError, match="BF16_Optimizer"):
        Training(model="llama-2-7b", precision="bf16-mixed", zero_stage=0,
                 deepspeed_pipe_engine=True)
    Training(model="llama-2-7b", precision="fp16-mixed", zero_stage=0, deepspeed_pipe_engine=True)


@pytest.mark.parametrize("update", [{"pp": 4, "virtual_stages": 2, "grad_accum": 8},
                                    {"tp": 2, "tp_comm_overlap": True}])
def test_the_engine_runs_plain_1f1b_without_megatron_overlaps(update: dict):
    with pytest.raises(FieldError, match="TrainSchedule") as caught:
        Training(model="llama-2-7b", zero_stage=1, deepspeed_pipe_engine=True, **update)
    # the field named is the one set, not always virtual_stages
    assert set(update) - {"pp", "tp", "grad_accum"} <= set(caught.value.fields)


def test_bf16_under_the_engine_holds_a_full_fp32_gradient_buffer():
    # BF16_Optimizer's fp32_groups_gradients_flat: 4 bytes for every trainable parameter on
    # every rank, beside the bf16 .grad (2 bytes): 6 bytes a parameter in all, not 2
    t = Training(model="llama-2-7b", seq_len=2048, micro_batch=1, zero_stage=1,
                 precision="bf16-mixed")
    plain = training_memory(t.arch, t, 16)
    engine = training_memory(t.arch, t.model_copy(update={"deepspeed_pipe_engine": True}), 16)
    assert engine.gradients_bytes - plain.gradients_bytes == pytest.approx(6_738_415_616 * 4)
    fp16 = t.model_copy(update={"precision": "fp16-mixed"})
    assert (training_memory(t.arch, fp16.model_copy(update={"deepspeed_pipe_engine": True}), 16)
            .gradients_bytes == training_memory(t.arch, fp16, 16).gradients_bytes)


@pytest.mark.parametrize("gpu", ["tpu-v4"])
def test_the_cuda_runtime_flags_are_refused_off_cuda(gpu: str):
    for field in ("deepspeed_pipe_engine", "cuda_launch_blocking"):
        t = Training(model="llama-2-7b", seq_len=512, zero_stage=1, **{field: True})
        hw = Hardware(gpu=gpu, num_gpus=1)
        with pytest.raises(FieldError, match=field):
            training_step_time(t.arch, t, hw, training_flops(t), 6_738_415_616)



def test_pure_bf16_under_the_engine_is_refused():
    with pytest.raises(FieldError, match="bf16-mixed"):
        Training(model="llama-2-7b", precision="bf16", zero_stage=1, deepspeed_pipe_engine=True)


def test_the_fp32_gradient_buffer_is_in_the_peak_without_accumulation():
    # BF16_Optimizer makes its buffer at start-up: at grad_accum 1 (GPT-NeoX's pp 1 runs) it is
    # still there through the forward and backward, 4 bytes a parameter
    t = Training(model="llama-2-7b", seq_len=2048, micro_batch=1, grad_accum=1, zero_stage=1,
                 precision="bf16-mixed")
    plain = training_memory(t.arch, t, 8)
    engine = training_memory(t.arch, t.model_copy(update={"deepspeed_pipe_engine": True}), 8)
    assert engine.tensors_bytes - plain.tensors_bytes >= 6_738_415_616 * 4 * 0.999


def test_remedies_keep_zero_1_for_bf16_under_the_engine():
    from gpuhours.estimate.pipe_engine import runnable_zero_stages

    bf16 = Training(model="llama-2-7b", deepspeed_pipe_engine=True, zero_stage=1)
    assert runnable_zero_stages(bf16, 1) == [1] and runnable_zero_stages(bf16, 8) == [1]
    fp16 = bf16.model_copy(update={"precision": "fp16-mixed"})
    assert runnable_zero_stages(fp16, 1) == [0] and runnable_zero_stages(fp16, 8) == [0, 1]
    plain = bf16.model_copy(update={"deepspeed_pipe_engine": False})
    assert runnable_zero_stages(plain, 8) == [0, 1, 2, 3]
    # llama-2-70b in 4 stages on 4 A100-40GB does not fit in full: the LoRA remedy stays on
    # offer with bf16 as with fp16 (it was lost to a ZeRO-0 variant the setup refuses)
    hw = Hardware(gpu="a100-40gb", num_gpus=4)
    big = Training(model="llama-2-70b", pp=4, grad_accum=4, zero_stage=1,
                   deepspeed_pipe_engine=True)
    for t in (big, big.model_copy(update={"precision": "fp16-mixed"})):
        assert any(r.method == "lora" for r in fit(t, hw).alternatives), t.precision
