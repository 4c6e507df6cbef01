"""Weights as a model is released: the format of its checkpoint (the catalog's
`released_weights`, from the hub config's quantization_config) and which of its weights are in
it. gpt-oss ships its routed experts in MXFP4 (4.25 bits a weight: 32 FP4 values share one
8-bit scale) and its attention, router, embedding and LM head in bf16; vLLM and SGLang serve that
checkpoint as it is. `generation` takes the released format by default (walk finding F5: the
bf16 sizing, 233.7 GB for gpt-oss-120b, told an 80 GB H100 it could not run a model OpenAI's card
says runs on one); training and RL rollouts take the bf16 model, as their recipes dequantise it
first (verl-project/verl@709c8dfb examples/grpo_trainer/run_gptoss_20b.sh loads the
checkpoint with Mxfp4Config(dequantize=True) and trains and rolls out the bf16 copy)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuhours.estimate.blocks import routed_expert_params
from gpuhours.estimate.params import count_params

if TYPE_CHECKING:
    from gpuhours.catalog.schema import ReleasedWeights
    from gpuhours.estimate.arch import ModelArch

#: the Generation.released_format that quantises only the routed experts
EXPERTS_ONLY = ("mxfp4",)


def released_weights(model: str | None) -> ReleasedWeights | None:
    """The catalog row's released weight format for `model` (a catalog name), or None: not a
    catalog model, or one released in 16 bits."""
    if not model:
        return None
    from gpuhours import catalog
    from gpuhours.errors import InputError

    try:
        entry, _ = catalog.model(model)
    except InputError:
        return None
    return None if entry is None else entry.released_weights


def sixteen_bit_params(arch: ModelArch, released_format: str | None) -> int:
    """Parameters outside the embedding table and LM head that stay 16-bit beside quantised
    weights: none when every linear layer is quantised (GPTQ, AWQ, fp8; released_format None),
    all but the routed experts when only they are (gpt-oss's MXFP4 release; the experts' biases
    are counted with them, 0.04B parameters for gpt-oss-120b)."""
    if released_format not in EXPERTS_ONLY:
        return 0
    p = count_params(arch)
    table = 0 if arch.tie_embeddings else p.embedding
    head = p.embedding if arch.tie_embeddings else p.lm_head
    return p.total - table - head - routed_expert_params(arch)


def released_note(released_format: str | None, bytes_per_param: float) -> str:
    """What the basis says of weights taken as released; '' for weights given by the caller."""
    if released_format is None:
        return ""
    which = "routed experts" if released_format in EXPERTS_ONLY else "linear layers"
    return (f"; weights as released: {released_format.upper()} {which}, "
            f"{bytes_per_param * 8:.4g} bits a weight, the rest bf16 (catalog released_weights; "
            f"--weight-bytes-per-param to override)")
