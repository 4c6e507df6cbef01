"""What runs (Workload) and where (Hardware): the inputs of an estimate.

Strict pydantic models: unknown fields are refused, and conflicting options are rejected by a
validator that names the conflict.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpuhours.catalog.schema import GpuSpec
from gpuhours.errors import InputError
from gpuhours.estimate.arch import ModelArch

Method = Literal["full", "lora", "qlora"]
Precision = Literal["fp32", "bf16", "fp16", "bf16-mixed", "fp16-mixed", "bf16-amp", "fp16-amp"]
Optimizer = Literal["adamw", "adamw-8bit", "sgd", "sgd-momentum"]
#: foreach: torch's default on GPU (one state-sized set of temporaries per step); fused:
#: torch's fused=True or bitsandbytes' kernels; per-parameter: a Python loop over parameters
#: (transformers' own AdamW, the Trainer's default before 2023): temporaries of one tensor only
OptimizerImpl = Literal["foreach", "fused", "per-parameter"]
LoraTargets = Literal["all-linear", "attention", "qv"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)


class Training(_Strict):
    """One training setup: the model, the method and the batch, per GPU."""

    arch: ModelArch
    method: Method = "full"
    #: bf16-mixed: half-precision weights and grads, fp32 master weights and moments (the
    #: 16 bytes/param of the ZeRO paper; DeepSpeed, Megatron, FSDP mixed precision);
    #: bf16-amp: torch.autocast over fp32 weights (Hugging Face Trainer's bf16=True on a model
    #: loaded in fp32): fp32 weights, grads and moments plus autocast's half-precision weight
    #: copies during the step; bf16: everything in bf16, moments included (`model.to(bfloat16)`
    #: + torch AdamW); fp32: everything in fp32.
    precision: Precision = "bf16-mixed"
    optimizer: Optimizer = "adamw"
    optimizer_impl: OptimizerImpl = "foreach"
    micro_batch: int = Field(default=1, ge=1, le=1_000_000)
    seq_len: int = Field(default=2048, ge=1, le=10_000_000)
    grad_accum: int = Field(default=1, ge=1, le=1_000_000)
    checkpointing: bool = False
    flash_attention: bool = True
    #: logits upcast to fp32 for the loss (transformers' causal-LM loss does this)
    logits_fp32: bool = True
    lora_rank: int = Field(default=16, ge=1, le=65536)
    lora_targets: LoraTargets = "all-linear"
    #: ZeRO stage over the data-parallel GPUs: 0 = plain DDP; 3 = ZeRO-3 / FSDP full shard
    zero_stage: Literal[0, 1, 2, 3] = 0

    @model_validator(mode="after")
    def _check(self) -> Training:
        # InputError is a ValueError: pydantic wraps it, and the CLI unwraps it with its options
        if self.method == "qlora" and self.precision == "fp32":
            raise InputError("--method/--precision", "qlora computes in bf16 or fp16 on a 4-bit "
                                                     "base; --precision fp32 conflicts with it.")
        if self.method == "qlora" and self.zero_stage == 3:
            raise InputError("--method/--zero", "qlora with --zero 3 is not modelled: the 4-bit "
                                                "base is not sharded. Use --zero 0-2.")
        if self.arch.position_embeddings and self.seq_len > self.arch.position_embeddings:
            raise InputError("--seq", f"{self.arch.name} has learned position embeddings for "
                                      f"{self.arch.position_embeddings} positions; --seq "
                                      f"{self.seq_len} cannot run.")
        return self

    @property
    def tokens_per_micro_batch(self) -> int:
        return self.micro_batch * self.seq_len


class Hardware(_Strict):
    """Where it runs: an accelerator, how many, how they are connected."""

    gpu: GpuSpec
    num_gpus: int = Field(default=1, ge=1, le=1_000_000)
    gpus_per_node: int = Field(default=8, ge=1, le=1024)
    #: network bandwidth between nodes per GPU, GB/s (one direction). Default 25 GB/s:
    #: a 200 Gb/s InfiniBand/RoCE NIC per GPU (8 x 200 Gb/s per node, e.g. DGX A100).
    inter_node_gbps_per_gpu: float = Field(default=25.0, gt=0)

    @property
    def num_nodes(self) -> int:
        return math.ceil(self.num_gpus / self.gpus_per_node)


class Generation(_Strict):
    """An inference/generation setup (RL rollouts, evaluation, serving), per GPU replica."""

    arch: ModelArch
    prompt_tokens: int = Field(ge=1, le=10_000_000)
    output_tokens: int = Field(ge=0, le=10_000_000)
    #: concurrent sequences; None = as many as fit in memory
    batch: int | None = Field(default=None, ge=1, le=1_000_000)
    weight_bytes_per_param: float = Field(default=2.0, gt=0, le=4)
    kv_bytes_per_element: float = Field(default=2.0, gt=0, le=4)
    #: fraction of peak bandwidth and FLOPs a serving engine reaches; assumption, see timing.py
    engine: Literal["vllm", "hf-generate"] = "vllm"
