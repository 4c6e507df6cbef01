"""transformers' generate over several GPUs by `device_map="auto"`: the layers split in sequence.

`from_pretrained(..., device_map="auto")` (transformers 4.46.0 modeling_utils.py, lines
4120-4170) asks accelerate for a balanced `max_memory` (`get_balanced_memory`) and then for a
device map (`infer_auto_device_map`), and dispatches the model over it (`dispatch_model`). The
GPUs run in sequence: a forward runs the first GPU's layers, the hidden states hop to the next
GPU, and so on; one GPU is busy at a time. So

- memory: each GPU holds its layers' weights and KV cache (`DynamicCache.update` keeps each
  layer's K and V on the device of its key states), the first GPU the embedding and generate's
  sampling, the last the final norm and LM head (`device_map_split`, counted from accelerate
  1.0.1's code, the release beside transformers 4.46: huggingface/accelerate@a427548f
  src/accelerate/utils/modeling.py get_balanced_memory, infer_auto_device_map);
- time: the GPUs' work is one GPU's (the same bytes read at one GPU's bandwidth, in sequence);
  the host issues the same kernels and, in addition, runs accelerate's hooks
  (`device_map_hook_calls`): the GPUs' hops (a P2P copy of batch x d x 2 bytes, 16 KB at
  batch 1 for d = 8,192, N - 1 a forward) are left out;
- GPU hours: the wall time x the GPUs (every GPU is held for the whole run).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuhours.errors import FieldDoesNotFit, FieldError
from gpuhours.estimate import assumptions as A
from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.hf_fp8 import SEPARATE_TYPES
from gpuhours.estimate.params import count_params

#: bytes of the embedding table and LM head under 8/4-bit weights (generation._UNQUANTISED_BYTES:
#: the quantisers leave both 16-bit)
_VOCAB_MIN_BYTES = 2.0

#: accelerate's hooks outside the decoder layers, one call each a forward, counted on
#: transformers 4.46.0's Qwen2 with accelerate 1.0.1 (gpuhours_dev.validation.device_map_hooks):
#: the whole model's (io_same_device), the embedding's, the final norm's, the rotary
#: embedding's (a device-map entry of its own since 4.45) and the LM head's
HOOKS_OUTSIDE_LAYERS = 5


@dataclass(frozen=True)
class DeviceShare:
    """One GPU's share of a device_map split. Sizes in bytes."""

    gpu: int
    #: decoder layers first_layer .. first_layer + layers - 1
    first_layer: int
    layers: int
    embedding: bool
    head: bool
    weights_bytes: float


def _block_bytes(arch: ModelArch, bytes_per_param: float) -> tuple[float, float, float, float]:
    """(embedding table, one decoder layer, final norm, untied LM head) in bytes, as accelerate's
    compute_module_sizes counts them (parameters x dtype size; a tied LM head's weight is the
    table's, counted once: 0)."""
    p = count_params(arch)
    vocab = max(bytes_per_param, _VOCAB_MIN_BYTES)
    layer = (p.attention_per_layer + p.mlp_per_layer + p.norms_per_layer) * bytes_per_param
    head = 0.0 if arch.tie_embeddings else p.lm_head * vocab
    return p.embedding * vocab, float(layer), p.final_norm * bytes_per_param, head


def leaf_modules_per_layer(arch: ModelArch) -> int:
    """Modules with their own parameters in one dense decoder layer (what accelerate's
    get_module_leaves counts): q, k, v, o, Qwen3's q and k norms, the MLP's 3 (gated) or 2
    linears, and the layer's norms (norms_per_layer / the width of one norm)."""
    p = count_params(arch)
    width = arch.hidden_size * (2 if arch.norm_bias else 1)
    norms = max(1, round(p.norms_per_layer / width))
    return 4 + (2 if arch.qk_norm else 0) + (3 if arch.gated_mlp else 2) + norms


def balanced_max_memory(arch: ModelArch, bytes_per_param: float, gpus: int,
                        free_bytes: float) -> list[float]:
    """accelerate's get_balanced_memory (1.0.1, utils/modeling.py lines 951-1075) for `gpus`
    GPUs of `free_bytes` free each: every GPU but the last may take the model's size / gpus +
    1.25 x max(the largest no-split block, the mean leaf module) (a decoder layer: its
    `_no_split_modules`), the last all its free memory."""
    embed, layer, norm, head = _block_bytes(arch, bytes_per_param)
    total = embed + arch.num_layers * layer + norm + head
    leaves = arch.num_layers * leaf_modules_per_layer(arch) + 2 + (0 if arch.tie_embeddings
                                                                    else 1)
    buffer = int(1.25 * max(layer, total / leaves))
    per_gpu = total // gpus + buffer
    return [min(per_gpu, free_bytes)] * (gpus - 1) + [free_bytes]


def unsplittable(arch: ModelArch) -> str:
    """Why the split by device_map (and its hooks) does not describe `arch`, "" when it does:
    the split places the embedding, alike decoder layers, the norm and the head only, and the
    hooks count separate q, k, v, o and gate, up, down linears (leaf_modules_per_layer)."""
    if arch.is_moe or arch.ssm is not None or count_params(arch).layers_remainder:
        return (f"{arch.name}'s layers are not all alike (MoE, hybrid or mixed layers): the "
                "split by device_map and its hooks are modelled for dense decoder layers only.")
    if (arch.vision is not None or arch.mla is not None or arch.encoder
            or arch.model_type not in SEPARATE_TYPES):
        return (f"the split by device_map is modelled for text decoders with separate "
                f"projections ({', '.join(sorted(SEPARATE_TYPES))}); {arch.name} "
                f"({arch.model_type}) has a vision tower, latent attention or fused "
                "projections, whose placement and hooks are not counted.")
    return ""


def device_map_split(arch: ModelArch, bytes_per_param: float, gpus: int,
                     free_bytes: float) -> list[DeviceShare]:
    """The layers of `arch` over `gpus` GPUs as accelerate 1.0.1's infer_auto_device_map places
    them (utils/modeling.py lines 1096-1396) under balanced_max_memory: the blocks in the
    model's order (embedding, decoder layers, final norm, LM head), each on the current GPU while
    it fits, else on the next; the first GPU keeps room for the largest block still to place
    (the first device is a "main device", where an offloaded layer would be brought back), the
    others none. A tied LM head goes with the embedding (its weight is the table). What does not
    fit on the last GPU would be offloaded to the CPU: refused (not modelled).
    `free_bytes`: what torch.cuda.mem_get_info reports free on each GPU."""
    why = unsplittable(arch)
    if why:
        raise FieldError("device_map_gpus", why)
    embed, layer, norm, head = _block_bytes(arch, bytes_per_param)
    limits = balanced_max_memory(arch, bytes_per_param, gpus, free_bytes)
    # (name, bytes) in the model's order; the tied head rides with the embedding
    blocks = ([("embedding", embed)] + [(f"layer {i}", layer) for i in range(arch.num_layers)]
              + [("norm", norm)] + ([] if arch.tie_embeddings else [("head", head)]))
    placed: list[list[str]] = [[] for _ in range(gpus)]
    used = [0.0] * gpus
    device = 0
    for i, (name, size) in enumerate(blocks):
        while True:
            if device == gpus:
                raise FieldDoesNotFit(
                    ("device_map_gpus", "gpu"),
                    f"{arch.name}'s weights ({sum(b for _, b in blocks) / 1e9:.1f} GB) do not fit "
                    f"on {gpus} GPUs of {free_bytes / 1e9:.1f} GB free as accelerate splits "
                    f"them: {name} would be offloaded to the CPU (not modelled).",
                    "Use more GPUs (--device-map-gpus), a larger GPU or a quantised model.")
            reserve = max((b for _, b in blocks[i + 1:]), default=0.0) if device == 0 else 0.0
            if used[device] + size <= limits[device] - reserve:
                placed[device].append(name)
                used[device] += size
                break
            device += 1
    out = []
    first = 0
    for g, names in enumerate(placed):
        n = sum(name.startswith("layer ") for name in names)
        out.append(DeviceShare(gpu=g, first_layer=first, layers=n,
                               embedding="embedding" in names,
                               head=("head" in names) or (arch.tie_embeddings
                                                          and "embedding" in names),
                               weights_bytes=used[g]))
        first += n
    return out


def hooks_per_layer(arch: ModelArch) -> int:
    """accelerate hooks one dense decoder layer runs a forward under device_map: dispatch_model
    puts an AlignDevicesHook on each block of the map and `attach_execution_device_hook` one on
    every submodule below it with a state dict (accelerate 1.0.1 hooks.py lines 400-440,
    537-660): the layer, its attention and MLP modules, and each module with parameters in them
    (leaf_modules_per_layer; the rotary embedding's buffer is not persistent, so no hook):
    12 for a Qwen2 or Llama layer, counted on a tiny Qwen2 dispatched on the CPU
    (gpuhours_dev.validation.device_map_hooks)."""
    return 3 + leaf_modules_per_layer(arch)


def device_map_hook_calls(arch: ModelArch) -> int:
    """Hook calls of one forward: layers x hooks_per_layer + HOOKS_OUTSIDE_LAYERS, however many
    GPUs (every block is hooked once the map has two devices)."""
    return arch.num_layers * hooks_per_layer(arch) + HOOKS_OUTSIDE_LAYERS


def device_map_hooks_s(arch: ModelArch) -> float:
    """Host seconds accelerate's hooks add to one forward: device_map_hook_calls x
    ACCELERATE_HOOK_HOST_S (assumptions.py: measured in units of the step's own time per
    operator, at the host time per operator of the hf-generate fit)."""
    return device_map_hook_calls(arch) * A.ACCELERATE_HOOK_HOST_S.value
