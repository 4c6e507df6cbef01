"""Pydantic models of the catalog rows: accelerators, prices, model architectures.

Units are in the field names. GB is 10^9 bytes (as vendors market memory), GiB is 2^30.
Every row carries its source and the date it was read.
"""

from __future__ import annotations

from datetime import date
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Precision = Literal["fp32", "tf32", "fp16", "bf16", "fp8"]

Generation = Literal[
    "volta", "turing", "ampere", "ada", "hopper", "blackwell", "cdna2", "cdna3", "tpu", "cpu"
]


#: a row's date: a YAML date, or ISO text (JSON, CSV) - text is no mistake here, unlike a
#: `true` for a number
AsOf = Annotated[date, Field(strict=False)]


class _Strict(BaseModel):
    # strict: a YAML `true` is not a number; CSV rows (text) are read with strict=False by
    # catalog/_load.py, which converts each cell by its column's type
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class DenseTflops(_Strict):
    """Dense peak TFLOPS per precision (no 2:4 sparsity); None where the part has no such unit."""

    fp32: float | None = None
    tf32: float | None = None
    fp16: float | None = None
    bf16: float | None = None
    fp8: float | None = None


#: decode_bw_source of a bandwidth the user gave (resolve_gpu): the figure is an input, not the
#: catalog's
USER_BANDWIDTH_SOURCE = "given by the user (--bandwidth-gb-per-s)"


class GpuSpec(_Strict):
    """One accelerator, per device (not per board or instance)."""

    name: str = Field(description="canonical short name, lower case, e.g. 'a100-80gb'")
    aliases: list[str] = Field(default_factory=list, description="other names, matched exactly")
    full_name: str
    #: "other" for a device measured by `gpuhours bench` that is no catalog part (a CPU model,
    #: an Apple chip): its vendor is then in full_name
    vendor: Literal["NVIDIA", "AMD", "Google", "Intel", "Apple", "other"]
    generation: Generation
    memory_gb: float = Field(gt=0, description="device memory in GB (10^9 bytes) as marketed")
    memory_total_mib: float | None = Field(
        default=None, gt=0,
        description="memory.total as nvidia-smi reports it, MiB; HBM parts marketed as '80GB' "
                    "hold 80 GiB, so this is used when known, memory_gb x 10^9 otherwise")
    memory_bw_gb_per_s: float = Field(gt=0, description="memory bandwidth, GB/s")
    #: the memory bandwidth a generation engine's decode step reaches on this part where that is
    #: known to fall short of the datasheet figure (GB/s, before estimate/generation.py's width
    #: term), with where it comes from in `decode_bw_source`; None: memory_bw_gb_per_s
    decode_bw_gb_per_s: float | None = Field(
        default=None, gt=0,
        description="decode bandwidth reached by generation engines, GB/s, when below the "
                    "datasheet's (a fitted or measured figure; decode_bw_source says which)")
    decode_bw_source: str = ""
    #: streaming multiprocessors (compute units) and the boost clock, MHz: their product is the
    #: rate at which the part issues instructions, which caps a kernel whose per-weight
    #: instruction count (the dequantisation of 4/8-bit weights) outruns its memory reads
    #: (estimate/generation.py dequant_weights_per_s); None: not recorded (not costed)
    sm_count: int | None = Field(default=None, gt=0, description="streaming multiprocessors")
    boost_clock_mhz: float | None = Field(default=None, gt=0, description="boost clock, MHz")
    #: where sm_count and boost_clock_mhz come from
    sm_source: str = ""
    dense_tflops: DenseTflops
    tdp_w: float | None = Field(default=None, gt=0)
    interconnect: Literal["nvlink", "pcie", "xgmi", "ici", "none"]
    interconnect_gb_per_s_two_way: float | None = Field(
        default=None, gt=0, description="GPU-to-GPU bandwidth per GPU, GB/s, bidirectional total"
    )
    #: whether two of these cards in one host can address each other's memory
    #: (cudaDeviceCanAccessPeer). Without it NCCL's P2P transport declines the pair
    #: (NVIDIA/nccl src/transport/p2p.cc p2pCanConnect) and its SHM transport stages every
    #: transfer through host memory (src/transport/shm.cc): estimate/timing.py then takes
    #: `host_staged_gb_per_s_two_way` as the link. None: not recorded (taken as able).
    peer_to_peer: bool | None = None
    host_staged_gb_per_s_two_way: float | None = Field(
        default=None, gt=0,
        description="GPU-to-GPU bandwidth per GPU without peer-to-peer (copies staged through "
                    "host memory), GB/s, bidirectional total: cuda-samples "
                    "p2pBandwidthLatencyTest's 'Bidirectional P2P=Disabled' figure")
    #: where peer_to_peer and host_staged_gb_per_s_two_way come from
    peer_to_peer_source: str = ""
    #: the on-chip L2 cache, MiB (NVIDIA's "40 MB" is 40,960 KB): where a tensor that one kernel
    #: writes and the next reads can stay on chip. Read by the L2 check of the LoRA branch's
    #: traffic (scripts/gpuhours_dev/validation/l2_check.py), not by the estimate.
    l2_cache_mib: float | None = Field(
        default=None, gt=0, description="L2 cache size, MiB (whitepaper figure); None: not read")
    #: where l2_cache_mib comes from
    l2_cache_source: str = ""
    #: the CUDA compute capability, "major.minor" (NVIDIA parts): which kernels a library builds
    #: for the part. Blackwell spans two: 10.x (B200, GB200: tcgen05 tensor-core instructions and
    #: tensor memory, which cuDNN's sm100 attention and FlashAttention-4 are written for) and
    #: 12.x (GeForce RTX 50: without them). Read by estimate/timing.py's attention rate.
    #: None: not recorded.
    compute_capability: str | None = Field(
        default=None, pattern=r"^[0-9]+\.[0-9]+$",
        description="CUDA compute capability, major.minor; None: not recorded")
    #: where compute_capability comes from
    compute_capability_source: str = ""
    #: the time the part's own host CPU takes to issue one PyTorch operator, as a multiple of
    #: the x86 host that assumptions.HOST_S_PER_OP was measured on: a superchip's Arm CPU
    #: (Grace) issues them slower. None: an x86 host like that one (1x).
    host_op_time_ratio: float | None = Field(
        default=None, gt=0, le=10, description="host time an operator vs the x86 host of "
        "HOST_S_PER_OP; None: 1")
    #: where host_op_time_ratio comes from
    host_op_time_source: str = ""
    #: the median rate of torch's square bf16 matmul (fp16 on Volta and Turing) that users
    #: measured on this part, TFLOPS (zzc0721/torch-performance-test-data; every used entry in
    #: scripts/gpuhours_dev/validation/data/matmul_microbench.csv). estimate/timing.py scales the
    #: generation's GEMM efficiency by this / the dense peak over the generation's reference
    #: product's share (assumptions.GEMM_REFERENCE_MATMUL_SHARE). None: not measured (factor 1).
    matmul_measured_tflops: float | None = Field(
        default=None, gt=0, description="median measured square-matmul rate, TFLOPS; None: "
        "not measured")
    #: where matmul_measured_tflops comes from (the entries and their issues)
    matmul_measured_source: str = ""
    source: str
    as_of: AsOf
    notes: str = ""

    @model_validator(mode="after")
    def _p2p_sourced(self) -> GpuSpec:
        if (self.peer_to_peer is not None or self.host_staged_gb_per_s_two_way) \
                and not self.peer_to_peer_source:
            raise ValueError(f"{self.name}: peer_to_peer / host_staged_gb_per_s_two_way need a "
                             f"peer_to_peer_source (where the figure was read)")
        return self

    @model_validator(mode="after")
    def _matmul_sourced(self) -> GpuSpec:
        if (self.matmul_measured_tflops is None) != (not self.matmul_measured_source):
            raise ValueError(f"{self.name}: matmul_measured_tflops and matmul_measured_source "
                             f"go together (the rate and where it was measured)")
        return self

    @model_validator(mode="after")
    def _l2_sourced(self) -> GpuSpec:
        if (self.l2_cache_mib is None) != (not self.l2_cache_source):
            raise ValueError(f"{self.name}: l2_cache_mib and l2_cache_source go together (the "
                             f"size and the document it was read from)")
        return self

    @model_validator(mode="after")
    def _host_op_time_sourced(self) -> GpuSpec:
        if (self.host_op_time_ratio is None) != (not self.host_op_time_source):
            raise ValueError(f"{self.name}: host_op_time_ratio and host_op_time_source go "
                             f"together (the ratio and the measurement it was read from)")
        return self

    @model_validator(mode="after")
    def _compute_capability_sourced(self) -> GpuSpec:
        if (self.compute_capability is None) != (not self.compute_capability_source):
            raise ValueError(f"{self.name}: compute_capability and compute_capability_source go "
                             f"together (the figure and the document it was read from)")
        return self

    @model_validator(mode="after")
    def _sm_sourced(self) -> GpuSpec:
        if (self.sm_count is None) != (self.boost_clock_mhz is None):
            raise ValueError(f"{self.name}: sm_count and boost_clock_mhz go together (their "
                             f"product is what is used)")
        if self.sm_count is not None and not self.sm_source:
            raise ValueError(f"{self.name}: sm_count / boost_clock_mhz need an sm_source "
                             f"(where the figures were read)")
        return self

    @model_validator(mode="after")
    def _decode_bw_sourced(self) -> GpuSpec:
        if self.decode_bw_source and self.decode_bw_gb_per_s is None:
            raise ValueError(f"{self.name}: decode_bw_source is given without a "
                             "decode_bw_gb_per_s for it to describe")
        if self.decode_bw_gb_per_s is not None:
            if not self.decode_bw_source:
                raise ValueError(f"{self.name}: decode_bw_gb_per_s needs a decode_bw_source "
                                 f"(the rows or measurement it comes from)")
            if self.decode_bw_gb_per_s > self.memory_bw_gb_per_s:
                raise ValueError(f"{self.name}: decode_bw_gb_per_s ({self.decode_bw_gb_per_s:g})"
                                 f" is above memory_bw_gb_per_s ({self.memory_bw_gb_per_s:g})")
        return self

    @property
    def memory_bytes(self) -> int:
        if self.memory_total_mib is not None:
            return int(self.memory_total_mib * 2**20)
        return int(self.memory_gb * 1e9)

    @property
    def stack(self) -> str:
        """The software stack a training step runs on here: "torch-cuda" for NVIDIA and AMD
        (PyTorch eager; ROCm builds keep the torch.cuda interface, its caching allocator and
        per-operator kernel launches on HIP: pytorch docs/source/notes/hip.rst), "xla" for
        TPUs (JAX jit or PyTorch/XLA: the step traced and compiled by XLA into one program
        that the host launches once), "cpu" for a measured CPU, "other" otherwise (no Intel
        or Apple device is in the catalog)."""
        if self.generation == "tpu":
            return "xla"
        if self.generation == "cpu":
            return "cpu"
        return "torch-cuda" if self.vendor in ("NVIDIA", "AMD") else "other"


class NodeSpec(_Strict):
    """One node type: the GPUs it carries and each GPU's network to other nodes."""

    name: str = Field(description="canonical short name, lower case, e.g. 'dgx-h100'")
    aliases: list[str] = Field(default_factory=list, description="other names, matched exactly")
    gpus: list[str] = Field(min_length=1, description="canonical names of the GPUs it carries")
    gpus_per_node: int = Field(ge=1, le=1024)
    within_node: str
    network: str
    inter_node_gb_per_s_one_way: float = Field(
        gt=0, description="per GPU, one direction, GB/s: the node's network over its GPUs")
    source: str
    as_of: AsOf


class PriceRow(_Strict):
    """A price of one GPU-hour at one provider (instance price divided by its GPU count)."""

    provider: str
    provider_kind: Literal["cloud", "marketplace"]
    gpu: str = Field(description="canonical GPU name in the accelerator catalog")
    instance: str
    gpus_per_instance: int = Field(gt=0)
    region: str
    on_demand_usd_per_gpu_hour: float | None = Field(default=None, gt=0)
    spot_usd_per_gpu_hour: float | None = Field(default=None, gt=0)
    source: str
    as_of: AsOf
    notes: str = ""


class ReleasedWeights(_Strict):
    """The weight format a model's checkpoint is released in, when it is not 16-bit throughout
    (the hub config.json's quantization_config): what `generation` takes by default."""

    format: str = Field(description="the quant_method, e.g. 'mxfp4'")
    bits_per_weight: float = Field(gt=0, le=16, description="stored bits a quantised weight, "
                                   "its shared scales included (MXFP4: 4 + 8 / 32 = 4.25)")
    quantised: Literal["routed experts", "linear layers"] = Field(
        description="which weights are in the format (the decoder's linear layers: all but the "
                    "embedding table and LM head); the rest stay 16-bit")
    source: str


class ModelEntry(_Strict):
    """A model architecture in the catalog: a Hugging Face config.json plus its published size."""

    name: str = Field(description="canonical short name, lower case, e.g. 'llama-2-7b'")
    aliases: list[str] = Field(default_factory=list)
    hf_id: str = Field(description="the Hugging Face repository the config comes from")
    config_file: str = Field(description="file under catalog/data/models/")
    published_params: float = Field(gt=0, description="parameter count as published")
    published_params_source: str
    #: what the published figure counts: the whole model, or only its language model (a
    #: vision-language model whose card gives the language model's size, as Qwen3.5's do)
    published_params_scope: Literal["model", "language_model"] = "model"
    as_of: AsOf
    #: the released checkpoint's weight format, when not 16-bit (None: bf16/fp16 as released)
    released_weights: ReleasedWeights | None = None
    notes: str = ""
