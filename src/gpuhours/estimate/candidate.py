"""One configuration `fit` evaluates: its memory per GPU against the limit (device memory less
the headroom) and its speed. Shared by the sweep (estimate/fit.py) and the remedies
(estimate/remedies.py)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, FieldSerializationInfo, field_serializer

from gpuhours.estimate.figures import BasisKind, Figure
from gpuhours.estimate.flops import training_flops
from gpuhours.estimate.step_replay import reserved_training_memory
from gpuhours.estimate.timing import training_step_time
from gpuhours.setup import Hardware, Training, check_kernel_path


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Candidate(_Out):
    """One configuration that was evaluated."""

    change: str
    micro_batch: int
    grad_accum: int
    checkpointing: bool
    method: str
    zero_stage: int
    num_gpus: int
    #: the parallel layout (estimate/parallel.py); data_parallel = GPUs / (tp pp cp)
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    #: model chunks per pipeline rank of the interleaved schedule (1: plain 1F1B)
    virtual_stages: int = 1
    data_parallel: int = 1
    #: overlap of tensor-parallel and expert all-to-all traffic with compute (setup.py)
    tp_comm_overlap: bool = False
    moe_a2a_overlap: bool = False
    #: CPU offload (setup.py Training.offload): none, optimizer, optimizer+params
    offload: str = "none"
    #: the kernel path it is costed on (setup.py Training.kernels): a searched tensor,
    #: pipeline, context or expert layout takes Megatron-Core's when the kernels are left open
    kernels: str = "eager"
    gpu: str
    #: in JSON (`fit --json`), these three are figures: {value, unit, basis, source}
    memory_total_bytes: float
    memory_limit_bytes: float
    fits: bool
    tokens_per_s_per_gpu: float

    @field_serializer("memory_total_bytes", "memory_limit_bytes", "tokens_per_s_per_gpu",
                      when_used="json")
    def _figure(self, value: float, info: FieldSerializationInfo) -> dict[str, Any]:
        """In JSON each quantity says where it came from, as estimate's figures do."""
        unit, source = _CANDIDATE_SOURCES[info.field_name]
        if info.field_name == "tokens_per_s_per_gpu" and not value and not self.fits:
            source = "not computed: the setup does not fit (the search only needs that)"
        return figure_json(value, unit, "formula", source)


#: the unit and source of each of a Candidate's quantities (see Candidate._figure)
_CANDIDATE_SOURCES = {
    "memory_total_bytes": ("bytes", "estimate/memory.py training_memory: peak of live tensors + "
                                    "allocator reserve + CUDA context (what nvidia-smi shows)"),
    "memory_limit_bytes": ("bytes", "accelerator catalog memory x (1 - headroom)"),
    "tokens_per_s_per_gpu": ("tokens/s", "tokens per step / (tp x pp x cp) / step time "
                                         "(estimate/timing.py roofline, assumed efficiencies)"),
}


def figure_json(value: float, unit: str, basis: BasisKind, source: str) -> dict[str, Any]:
    """A quantity as JSON's {value, unit, basis, source} (estimate.figures.Figure)."""
    return Figure(value=value, unit=unit, basis=basis, source=source).model_dump(mode="json")




def evaluate(t: Training, hw: Hardware, headroom: float, change: str,
              speed_if_too_big: bool = True) -> Candidate:
    """One configuration's memory and speed; `speed_if_too_big` False leaves the speed of one
    that does not fit at 0 (the sweep only needs to know that it does not). A setup its
    kernel path does not run raises FieldError (setup.check_kernel_path)."""
    check_kernel_path(t)
    mem = reserved_training_memory(t, hw.num_gpus, hw.gpu.stack, hw.gpu.memory_bytes)
    limit = hw.gpu.memory_bytes * (1 - headroom)
    mp = t.tp * t.pp * t.cp
    if not speed_if_too_big and mem.total_bytes > limit:
        return Candidate(
            change=change, micro_batch=t.micro_batch, grad_accum=t.grad_accum,
            checkpointing=t.checkpointing, method=t.method, zero_stage=t.zero_stage,
            num_gpus=hw.num_gpus, gpu=hw.gpu.name, memory_total_bytes=mem.total_bytes,
            memory_limit_bytes=limit, fits=False, tokens_per_s_per_gpu=0.0,
            tp=t.tp, pp=t.pp, cp=t.cp, ep=t.ep, data_parallel=hw.num_gpus // mp,
            virtual_stages=t.virtual_stages,
            tp_comm_overlap=t.tp_comm_overlap, moe_a2a_overlap=t.moe_a2a_overlap,
            offload=t.offload, kernels=t.kernels)
    return Candidate(
        change=change, micro_batch=t.micro_batch, grad_accum=t.grad_accum,
        checkpointing=t.checkpointing, method=t.method, zero_stage=t.zero_stage,
        num_gpus=hw.num_gpus, gpu=hw.gpu.name, memory_total_bytes=mem.total_bytes,
        memory_limit_bytes=limit, fits=mem.total_bytes <= limit,
        tokens_per_s_per_gpu=tokens_per_s_per_gpu(t, hw, mem.trainable_params),
        tp=t.tp, pp=t.pp, cp=t.cp, ep=t.ep, data_parallel=hw.num_gpus // mp,
        virtual_stages=t.virtual_stages,
        tp_comm_overlap=t.tp_comm_overlap, moe_a2a_overlap=t.moe_a2a_overlap,
        offload=t.offload, kernels=t.kernels,
    )


def tokens_per_s_per_gpu(t: Training, hw: Hardware, trainable_params: int) -> float:
    """A configuration's speed, tokens/s per GPU: the tokens of a step over the GPUs of a model
    replica (tp x pp x cp), over the step time (estimate/timing.py). `trainable_params` is
    the memory breakdown's (training_memory: the allocator reserve does not change it)."""
    flops = training_flops(t)  # images and their vision tower included (issue 15)
    st = training_step_time(t.arch, t, hw, flops, trainable_params)
    return t.tokens_per_micro_batch * t.grad_accum / (t.tp * t.pp * t.cp) / st.step_time_s
