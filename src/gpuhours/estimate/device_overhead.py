"""What a device-level reading (nvidia-smi's or NVML's "used" memory) holds beyond PyTorch's
reserved memory, as a pure function of a stated software stack (issue 14: memory reported the
way each tool reports it).

A process's device memory is torch's caching allocator's reservation (`memory_reserved`) plus
what CUDA and the libraries allocate outside it. By stack, from sources (each part's docstring
names them; the published figures are also in scripts/gpuhours_dev/validation/data/
device_overhead_sources.csv):

- the CUDA context with the kernels loaded into it. Lazy module loading (CUDA_MODULE_LOADING=
  LAZY: CUDA 11.7+ runtime and driver) loads a kernel when it is first called; eager loading
  loads every kernel of every library (torch's, cuBLAS's, flash-attn's, DeepSpeed's ops) at
  context creation.
- cuBLAS's workspace: inside the caching allocator (so in `memory_reserved`) from torch 2.0;
  cuBLAS's own allocation before.
- NCCL's channel buffers, when a process group with more than one rank has connected.

Not counted: cuDNN (its handle is created by the first cuDNN operator, which the language
models' training steps modelled here do not call: flash-attn or SDPA's flash/efficient kernels,
cuBLAS GEMMs); under eager loading, the whole fatbins of extensions (flash-attn, apex,
DeepSpeed's ops), for which no published size was read. The estimator's default stack is a
lazily loading CUDA 12 stack on one rank: its figure is assumptions.CUDA_CONTEXT_BYTES.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpuhours.estimate import assumptions as A

MIB = 2**20

#: A lazily loading stack's context: the estimator's assumption (assumptions.CUDA_CONTEXT_BYTES,
#: 0.5 GiB). Published lazily loading contexts right after the first kernel: 287,047,680 bytes
#: (pytorch/pytorch#86509, the PR that made LAZY torch's default), "~300MB" (ptrblck,
#: pytorch/pytorch#107667), "around 400MB" (ptrblck, pytorch/pytorch#109888), 426 MiB
#: (unslothai/unsloth-zoo#1053, torch 2.10 + CUDA 13.0): 0.27-0.42 GiB before a training step's
#: kernels load; the assumption's 0.5 GiB leaves room for those.
LAZY_CONTEXT_BYTES = A.CUDA_CONTEXT_BYTES.value

#: An eagerly loading stack's context: 1343 MiB, what huggingface/transformers'
#: docs/source/en/perf_train_gpu_one.mdx (commit 0016acf7) measured with NVML after moving a
#: 1x1 tensor to a V100 ("the kernels alone take up 1.3GB"). Other published eager figures:
#: 666,632,192 bytes (pytorch/pytorch#86509, CUDA_MODULE_LOADING=DEFAULT on CUDA 11.7, after a
#: randn(20, 16, 50, 100).cuda() only) and ">1000MB" before CUDA 11.7 (ptrblck,
#: pytorch/pytorch#107667). The guide's is the one taken in a training setup (the Trainer).
EAGER_CONTEXT_BYTES = 1343 * MIB

#: An eagerly loading context measured on an A100 (the GPU of Qwen's and most rows here): 815
#: MiB of nvidia-smi memory.used after torch's first CUDA operation, torch's master of September
#: 2022 (pytorch/pytorch#85017, drisspg's measurement before adding xformers' kernels; 825 MiB
#: after). Eager contexts depend on the GPU and the build (the kernels compiled for the GPU's
#: architecture): 0.62-1.31 GiB published. Used for the validation's what-if, not the default.
EAGER_CONTEXT_A100_BYTES = 815 * MIB

#: cuBLAS's default internal workspace pool per handle, used when the caller sets none: 4 MiB
#: (NVIDIA cuBLAS docs, cublasSetWorkspace: "the recommended size of user-provided workspace is
#: at least 4MiB (to match cuBLAS' default workspace pool)", quoted in pytorch/pytorch#74159).
CUBLAS_DEFAULT_POOL_BYTES = 4 * MIB

#: cuBLAS handles a training process holds on one device: torch keeps one per thread per device
#: (aten/src/ATen/cuda/CublasHandlePool.cpp) and autograd runs backward on its own device
#: thread, so the forward's thread and the backward's: 2 (an assumption from that structure).
CUBLAS_HANDLES_PER_TRAINING_PROCESS = 2

#: The torch release from which cuBLAS's workspace comes from the caching allocator (and so is in
#: memory_reserved): pytorch/pytorch#83461 ("Explicitly set the workspace for cuBLAS handles",
#: opened 2022-08-15) allocates it there; #91564 (merged January 2023) changed that code, so
#: 2.0 (branch cut February 2023) has it. Whether 1.13 had it was not checked: earlier releases
#: are taken as cuBLAS's own allocation.
CUBLAS_WORKSPACE_IN_ALLOCATOR_FROM_TORCH = (2, 0)

#: NCCL's per-connection buffer per protocol, NVIDIA/nccl v2.14.3-1 (c4e2aa6c; torch 2.0's PyPI
#: wheels pin nvidia-nccl-cu11==2.14.3, as pip logs of torch==2.0.0 and 2.0.1 show)
#: src/init.cc:475-477 and src/include/devcomm.h: LL = 8 lines per thread x
#: 512 threads x 8 steps x 16 bytes; LL128 = 120 elements per thread x 640 threads x 8 steps x
#: 8 bytes; Simple = NCCL_BUFFSIZE, 4 MiB by default.
NCCL_LL_BYTES = 8 * 512 * 8 * 16
NCCL_LL128_BYTES = 120 * 640 * 8 * 8
NCCL_SIMPLE_BYTES = 4 * MIB

ModuleLoading = Literal["lazy", "eager"]


@dataclass(frozen=True)
class SoftwareStack:
    """The software a training process runs on, as a source states it."""

    #: who states it (a README, a benchmark's notes), printed with the figure
    name: str
    #: PyTorch's (major, minor) release
    torch_version: tuple[int, int]
    #: the CUDA runtime's (major, minor) version
    cuda_version: tuple[int, int]
    #: CUDA_MODULE_LOADING as the run set it; None: what the stack does by default
    module_loading: ModuleLoading | None = None
    #: the driver's branch (470, 515, 535, ...); None: not stated, taken as one that supports
    #: the runtime's lazy loading (CUDA 11's minor version compatibility lets an 11.8 runtime
    #: run on R450+ drivers, which predate lazy loading: such a stack loads eagerly)
    driver_branch: int | None = None
    #: the process group: "nccl" when torch.distributed (or DeepSpeed, which initialises one even
    #: on one GPU) is initialised
    distributed: Literal["none", "nccl"] = "none"
    #: ranks of that process group
    world_size: int = 1
    #: NCCL channels per connection set (NCCL's log: "n coll channels"); needed with more than one
    #: rank, as NCCL picks it from the topology at run time
    nccl_channels: int | None = None
    #: NCCL connections a channel receives on (ring: 1; tree or more peers: more)
    nccl_recv_peers: int = 1
    #: extension kernels loaded beside torch's (flash-attn, DeepSpeed's ops), for the record
    extensions: tuple[str, ...] = ()


#: The estimator's default: a lazily loading CUDA 12 stack on one rank (the figure the
#: estimate prints as the CUDA context, assumptions.CUDA_CONTEXT_BYTES).
DEFAULT_STACK = SoftwareStack(name="assumed: a lazily loading CUDA 12 stack, one rank",
                              torch_version=(2, 4), cuda_version=(12, 4))


@dataclass(frozen=True)
class DeviceOverhead:
    """Bytes a device-level reading holds beyond torch's reserved memory, by part; each part's
    line in `basis` says what it is and where it comes from."""

    module_loading: ModuleLoading
    context_bytes: float
    cublas_workspace_bytes: float
    nccl_buffer_bytes: float
    basis: tuple[str, ...]

    @property
    def total_bytes(self) -> float:
        return self.context_bytes + self.cublas_workspace_bytes + self.nccl_buffer_bytes


def module_loading(stack: SoftwareStack) -> tuple[ModuleLoading, str]:
    """(how kernels load, why). NVIDIA's CUDA Programming Guide, 4.7 "Lazy Loading" (table 17
    and 4.7.3): introduced in CUDA 11.7, disabled by default; enabled by default on Linux from
    12.2; a joint feature of runtime and driver, available only when both meet its version
    requirements, and only libraries compiled with an 11.7+ toolkit load lazily (the runtime
    is linked statically into each). A driver older than CUDA 11.7's (R515) is taken as
    lacking it. torch sets CUDA_MODULE_LOADING=LAZY when the user has not set it from 1.13
    (pytorch/pytorch#85692, cherry-picked for 1.13 as #86509)."""
    if stack.module_loading is not None:
        return stack.module_loading, f"CUDA_MODULE_LOADING={stack.module_loading.upper()} as set"
    if stack.driver_branch is not None and stack.driver_branch < 515:
        return "eager", (f"driver R{stack.driver_branch} predates lazy loading (CUDA 11.7's "
                         "R515)")
    if stack.cuda_version < (11, 7):
        return "eager", (f"CUDA {_v(stack.cuda_version)}: lazy loading needs CUDA 11.7+")
    if stack.torch_version >= (1, 13):
        return "lazy", (f"torch {_v(stack.torch_version)} sets CUDA_MODULE_LOADING=LAZY "
                        f"(from 1.13: pytorch#85692/#86509), CUDA {_v(stack.cuda_version)}")
    if stack.cuda_version >= (12, 2):
        return "lazy", f"CUDA {_v(stack.cuda_version)}: lazy by default on Linux from 12.2"
    return "eager", (f"torch {_v(stack.torch_version)} does not set CUDA_MODULE_LOADING "
                     f"(from 1.13) and CUDA {_v(stack.cuda_version)} loads eagerly by default")


def context_bytes(loading: ModuleLoading) -> float:
    """The CUDA context with its loaded kernels: LAZY_CONTEXT_BYTES or EAGER_CONTEXT_BYTES."""
    return LAZY_CONTEXT_BYTES if loading == "lazy" else EAGER_CONTEXT_BYTES


def cublas_workspace_outside_bytes(torch_version: tuple[int, int]) -> float:
    """cuBLAS workspace outside torch's allocator: 0 from CUBLAS_WORKSPACE_IN_ALLOCATOR_FROM_TORCH
    (counted in memory_reserved then), else cuBLAS's default pool per handle x the handles of
    a training process."""
    if torch_version >= CUBLAS_WORKSPACE_IN_ALLOCATOR_FROM_TORCH:
        return 0.0
    return CUBLAS_DEFAULT_POOL_BYTES * CUBLAS_HANDLES_PER_TRAINING_PROCESS


def nccl_buffer_bytes(world_size: int, channels: int | None, recv_peers: int = 1) -> float:
    """NCCL's channel buffers on one rank: channels x connections received on x (LL + LL128 +
    Simple): each connection holds one buffer per protocol, on the receive side (Simple on the
    send side under P2P read; NVIDIA/nccl v2.14.3-1 src/transport/p2p.cc:234, 285). One rank
    connects nothing: initTransportsRank skips the ring and tree connections when nRanks == 1
    (src/init.cc:787, 797), so DeepSpeed
    or torch.distributed on one GPU adds no buffers. More ranks need the channel count, which
    NCCL picks from the topology (its log's "coll channels")."""
    if world_size <= 1:
        return 0.0
    if channels is None:
        raise ValueError("NCCL's channel count is needed for more than one rank (NCCL picks it "
                         "from the topology: its INFO log's 'n coll channels')")
    return channels * recv_peers * (NCCL_LL_BYTES + NCCL_LL128_BYTES + NCCL_SIMPLE_BYTES)


def device_overhead(stack: SoftwareStack) -> DeviceOverhead:
    """What a device-level reading holds beyond torch's reserved memory for `stack`."""
    loading, why = module_loading(stack)
    context = context_bytes(loading)
    src = ("published lazy contexts 0.27-0.42 GiB (pytorch#86509, #107667, #109888), "
           "assumptions.CUDA_CONTEXT_BYTES" if loading == "lazy"
           else "transformers perf_train_gpu_one @0016acf7, V100, NVML")
    ext = f"; {', '.join(stack.extensions)}: kernels loaded as called" if (
        stack.extensions and loading == "lazy") else (
        f"; {', '.join(stack.extensions)}: their eager fatbins not counted (no published size)"
        if stack.extensions else "")
    lines = [f"CUDA context {context / 2**30:.2f} GiB: {loading} module loading ({why}); {src}"
             f"{ext}"]
    cublas = cublas_workspace_outside_bytes(stack.torch_version)
    lines.append(
        f"cuBLAS workspace outside the allocator {cublas / MIB:.0f} MiB: "
        + ("torch >= 2.0 takes it from the caching allocator (pytorch#83461)" if cublas == 0
           else f"{CUBLAS_HANDLES_PER_TRAINING_PROCESS} handles x cuBLAS's 4 MiB default pool"))
    nccl = 0.0
    if stack.distributed == "nccl":
        nccl = nccl_buffer_bytes(stack.world_size, stack.nccl_channels, stack.nccl_recv_peers)
        lines.append(
            f"NCCL buffers {nccl / MIB:.0f} MiB: "
            + ("one rank connects no channels (NVIDIA/nccl v2.14.3 init.cc)"
               if stack.world_size <= 1 else
               f"{stack.nccl_channels} channels x {stack.nccl_recv_peers} peers x "
               "(LL 0.5 + LL128 4.7 + Simple 4 MiB)"))
    return DeviceOverhead(module_loading=loading, context_bytes=context,
                          cublas_workspace_bytes=cublas, nccl_buffer_bytes=nccl,
                          basis=tuple(lines))


def device_level_bytes(stack: SoftwareStack = DEFAULT_STACK) -> float:
    """Bytes above torch's reserved memory that a device-level reading shows for `stack`."""
    return device_overhead(stack).total_bytes


def _v(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"
