"""What `gpuhours trace --module` reports for a user's own nn.Module. No torch here.

Every column has its basis in `ModuleTraceResult.sources`: "trace" (live tensor storage on fake
tensors), "model of the allocator" (trace/allocator.py), "assumed" (estimate/assumptions.py),
"catalog" (the GPU's memory and peaks), "roofline model" (traced FLOPs and bytes over the
catalog peaks at the named efficiencies).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

#: the memory parts of a training step, in report order
PARTS = ("parameters", "gradients", "optimizer state", "activations", "workspace")

#: trace roles (trace/accounting.py) -> the part they belong to
PART_OF_ROLE = {
    "parameters": "parameters", "gradients": "gradients", "optimizer state": "optimizer state",
    "inputs": "activations", "activations": "activations",
    "recomputed activations": "activations", "logits and loss": "activations",
    "autocast weight copies": "workspace", "backward temporaries": "workspace",
    "optimizer temporaries": "workspace", "other": "workspace",
}


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BatchMemory(_Out):
    """Memory of one training step at one batch size, bytes."""

    batch: int
    #: live tensor bytes by part at the step's peak (trace)
    parts_bytes: dict[str, float]
    #: the peak of live tensors (trace) and when it happened ("forward in vit", ...)
    peak_live_bytes: float
    peak_at: str
    #: what the CUDA caching allocator would reserve (model of the allocator)
    reserved_bytes: float
    #: the CUDA context (assumed)
    cuda_context_bytes: float
    #: reserved + context: what nvidia-smi would show
    total_bytes: float
    fits: bool


class ModuleCost(_Out):
    """One top-level module's share of the step at the roofline."""

    module: str
    params: int
    trainable_params: int
    forward_flops: float
    #: backward, and recomputation of checkpointed parts
    backward_flops: float
    #: tensor bytes its operators read and write (inputs + outputs of each), all phases
    bytes: float
    forward_s: float
    backward_s: float
    #: forward + backward + the optimizer step's (the optimizer's own row)
    time_s: float
    #: the part of time_s spent in operators bound by compute (the rest by memory bandwidth)
    compute_bound_s: float
    share: float


class CompileRange(_Out):
    """torch.compile's effect as a range, never a prediction."""

    fastest_s: float
    slowest_s: float
    basis: str


class ModuleRoofline(_Out):
    device: str
    batch: int
    rows: list[ModuleCost]
    step_time_s: float
    compute_bound_s: float
    memory_bound_s: float
    #: the efficiencies used, each with its name in estimate/assumptions.py and value
    assumptions: list[str]
    compile: CompileRange
    note: str


class ModuleTraceResult(_Out):
    """Memory as the batch grows, the largest batch that fits, and the per-module roofline."""

    module: str
    inputs: list[str]
    precision: str
    optimizer: str
    gpu: str
    gpu_memory_bytes: float
    headroom_fraction: float
    #: gpu memory x (1 - headroom fraction)
    limit_bytes: float
    total_params: int
    trainable_params: int
    by_batch: list[BatchMemory]
    #: 0 when batch 1 does not fit
    largest_batch: int
    #: GPU memory - total at the largest batch, bytes: what is left free on the device
    headroom_bytes: float
    #: where largest_batch came from ("traced at every batch, bisected between ...")
    largest_basis: str
    roofline: ModuleRoofline
    sources: dict[str, str]
    notes: list[str]
    traces: int
    trace_wall_s: float
