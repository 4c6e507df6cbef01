"""FLOPs per token of training and generation (one multiply-add = 2 FLOPs).

Conventions, stated once:
- Matmul FLOPs: 2 x (matmul weights a token passes through) forward (Kaplan et al. 2020, eq. 2.1;
  the "6N" rule with the backward at twice the forward). Embedding lookups and norms are left
  out; the LM head is in.
- Attention scores: QK^T and AV cost 2 x 2 x (heads x head_dim) x context FLOPs per token and
  layer forward. A causal mask makes the mean context (S+1)/2, and FlashAttention skips the
  masked blocks, so we count the causal half. PaLM (Chowdhery et al. 2022, app. B) and
  llm-foundry count the full S (12 L H Q T), so our MFU reads lower than theirs on long sequences.
- Backward = 2 x forward for every matmul whose weights train. A frozen weight (LoRA base) needs
  only the input gradient: 1 x forward. Attention scores have no weights: 2 x forward.
- Full activation recomputation (gradient checkpointing) adds one forward of the layers (not
  of the LM head, which sits outside the checkpointed blocks).
  MFU counts model FLOPs (without recomputation), HFU counts hardware FLOPs (with it).
- Sliding-window layers attend to min(context, window) tokens, chunked layers (Llama 4) to the
  earlier tokens of their chunk (ModelArch.attended_tokens, causal_mean_attended).
- State-space (Mamba-2) layers: in_proj and out_proj are matmuls; the scan is counted with the
  attention part (a kernel, not a GEMM): the SSD algorithm's chunked products (Dao & Gu 2024,
  arXiv:2405.21060, sec. 6; MambaMixer.scan_flops_per_token), per token whatever the context,
  backward 2 x forward like attention (assumption); a decode step is the recurrence
  (MambaMixer.decode_flops_per_token).
- Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434): the low-rank projections are
  matmuls like any other (estimate/blocks.py); scores over keys qk_nope + qk_rope wide and
  values v_head_dim wide per head, the expanded form training and prefill kernels compute
  (ModelArch.score_flops_per_key). Decoding kernels that absorb kv_b_proj into q and o
  (FlashMLA) attend over the 576-wide latent instead: not modelled.
- A vision-language model's images: each image's vision-tower forward (estimate/vision.py),
  spread over the language-model tokens of its example (text + image tokens), so that
  tokens x FLOPs/token is the step's work. A frozen tower has no backward (its input, the
  pixels, needs no gradient); a trained one 2 x forward, and its forward again under
  checkpointing. Vision attention is bidirectional within its windows.
- The loss kernel: Cut Cross-Entropy (Wijmans et al. 2024, arXiv:2411.09009, sec. 4) never
  stores the logits and recomputes them blockwise in backward: one more forward of the LM head,
  counted as recomputation. Liger's fused linear cross-entropy computes the LM head's
  gradients inside its forward, chunk by chunk (Liger-Kernel ops/fused_linear_cross_entropy.py):
  the same FLOPs as the unfused head, no recomputation. Chunked cross-entropy changes no FLOPs.
- LoRA with trainable embeddings (peft modules_to_save): the LM head's copy trains, so its
  backward is 2 x forward like full fine-tuning's; the rest of the base stays frozen.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gpuhours.estimate.arch import ModelArch
from gpuhours.estimate.lora import lm_head_adapter_params, lora_active_params, lora_params
from gpuhours.estimate.params import count_params
from gpuhours.estimate.peft_methods import peft_method_flops_per_token
from gpuhours.estimate.vision import (
    DEFAULT_MAX_PIXELS,
    VisionTower,
    image_size_note,
    vision_forward_flops,
)
from gpuhours.setup import loss_kernel_of

if TYPE_CHECKING:  # setup imports arch; flops is imported by memory, which setup does not
    from gpuhours.setup import Training


@dataclass(frozen=True)
class TrainingFlops:
    """FLOPs per trained token, by part. All in FLOPs/token."""

    matmul_forward: float
    matmul_backward: float
    lora_forward: float
    lora_backward: float
    attention_forward: float
    attention_backward: float
    recompute: float

    @property
    def model_flops_per_token(self) -> float:
        """Work the algorithm needs (MFU's numerator): forward + backward, no recomputation."""
        return (
            self.matmul_forward + self.matmul_backward + self.lora_forward + self.lora_backward
            + self.attention_forward + self.attention_backward + self.vision_forward
            + self.vision_backward + self.vision_attention_forward
            + self.vision_attention_backward
        )

    @property
    def hardware_flops_per_token(self) -> float:
        """Work the hardware does (HFU's numerator): model FLOPs + recomputation."""
        return self.model_flops_per_token + self.recompute

    @property
    def matmul_flops_per_token(self) -> float:
        """Dense matmul part of the hardware FLOPs (runs at GEMM efficiency)."""
        mm = self.matmul_forward + self.matmul_backward + self.lora_forward + self.lora_backward
        return mm + self.vision_forward + self.vision_backward + self.recompute_matmul

    @property
    def attention_flops_per_token(self) -> float:
        """Attention-score part of the hardware FLOPs (runs at attention-kernel efficiency)."""
        return (self.attention_forward + self.attention_backward + self.vision_attention_forward
                + self.vision_attention_backward + self.recompute_attention)

    recompute_matmul: float = 0.0
    recompute_attention: float = 0.0
    #: the vision tower's matmuls and attention per language-model token (0 without images)
    vision_forward: float = 0.0
    vision_backward: float = 0.0
    vision_attention_forward: float = 0.0
    vision_attention_backward: float = 0.0
    #: the part of recompute_matmul and recompute_attention that is the vision tower's forward
    #: again (a trained tower under checkpointing)
    vision_recompute_matmul: float = 0.0
    vision_recompute_attention: float = 0.0

    @property
    def vision_matmul_flops_per_token(self) -> float:
        """The vision tower's share of matmul_flops_per_token (0 without images)."""
        return self.vision_forward + self.vision_backward + self.vision_recompute_matmul

    @property
    def vision_attention_flops_per_token(self) -> float:
        """The vision tower's share of attention_flops_per_token (0 without images)."""
        return (self.vision_attention_forward + self.vision_attention_backward
                + self.vision_recompute_attention)


def attention_forward_flops_per_token(arch: ModelArch, seq_len: int, causal: bool = True) -> float:
    """Forward FLOPs/token of QK^T and AV over all layers: 4 x L x (heads x head_dim) x context
    (MLA: 2 x L x heads x (qk_nope + qk_rope + v_head_dim) x context; ModelArch.score_flops_per_key),
    plus the SSM layers' scans (ModelArch.ssm_scan_flops_per_token), which do not grow with context.

    context = (seq_len + 1) / 2 under a causal mask (mean over positions), seq_len otherwise.
    """
    if not causal:
        return arch.score_flops_per_key * seq_len
    return (arch.score_flops_per_key * causal_mean_attended(arch, seq_len)
            + arch.ssm_scan_flops_per_token)


def causal_mean_attended(arch: ModelArch, seq_len: float) -> float:
    """Mean over positions and layers of the keys a query attends to under a causal mask:
    (S + 1) / 2 on a global layer; with a window W < S, position p (1-based) sees min(p, W)
    keys, a mean of (S W - W (W - 1) / 2) / S; on a chunked layer (Llama 4, chunk C < S) the
    earlier tokens of its chunk, (k C (C + 1) / 2 + r (r + 1) / 2) / S with S = k C + r."""
    global_mean = (seq_len + 1) / 2
    w, c = arch.sliding_window, arch.attention_chunk
    shift = 0.0  # (local mean - global mean) summed over the local layers
    if w and arch.sliding_layers and w < seq_len:
        shift += arch.sliding_layers * ((seq_len * w - w * (w - 1) / 2) / seq_len - global_mean)
    if c and arch.chunked_layers and c < seq_len:
        # position p (0-based) sees (p mod C) + 1 keys: k whole chunks and r tokens more
        k, r = divmod(seq_len, c)
        chunked_mean = (k * c * (c + 1) / 2 + r * (r + 1) / 2) / seq_len
        shift += arch.chunked_layers * (chunked_mean - global_mean)
    return global_mean + shift / arch.num_layers


def lora_params_per_layer(arch: ModelArch, rank: int, targets: str) -> int:
    """LoRA A and B matrices of one layer, the mean over the layers rounded down (the whole
    model's count, exact, is estimate/lora.py lora_params: which linears peft adapts per family).

    targets: "all-linear" (peft's `all-linear`), "attention" (q, k, v, o), "qkv" (q, k, v),
    "qv" (q and v).
    """
    return lora_params(arch, rank, targets) // arch.num_layers


def lora_active_params_per_layer(arch: ModelArch, rank: int, targets: str) -> float:
    """LoRA weights one token passes through, per layer (for an MoE, the routed experts'
    adapters in the proportion top-k / E: estimate/lora.py lora_active_params)."""
    return lora_active_params(arch, rank, targets) / arch.num_layers


def training_flops_per_token(
    arch: ModelArch,
    seq_len: int,
    method: str = "full",
    lora_rank: int = 16,
    lora_targets: str = "all-linear",
    checkpointing: bool = False,
    loss_kernel: str = "hf",
) -> TrainingFlops:
    """FLOPs per trained token of one training step, by part (see the module docstring)."""
    counts = count_params(arch)
    mm_fwd = 2.0 * counts.matmul_active
    attn_fwd = 0.0 if arch.encoder else attention_forward_flops_per_token(arch, seq_len)
    if arch.encoder:
        attn_fwd = attention_forward_flops_per_token(arch, seq_len, causal=False)
    frozen = method in ("lora", "qlora")
    mm_bwd = (1.0 if frozen else 2.0) * mm_fwd
    lora_fwd = lora_bwd = 0.0
    if frozen:
        lora_fwd = 2.0 * arch.num_layers * lora_active_params_per_layer(arch, lora_rank, lora_targets)
        lora_bwd = 2.0 * lora_fwd
    # checkpointing wraps the decoder layers: the LM head's matmul is not recomputed
    recompute_mm = (mm_fwd - 2.0 * counts.lm_head_matmul + lora_fwd) if checkpointing else 0.0
    if loss_kernel == "cut-ce" and not arch.encoder:
        recompute_mm += 2.0 * counts.lm_head_matmul  # logits recomputed in the loss's backward
    recompute_attn = attn_fwd if checkpointing else 0.0
    return TrainingFlops(
        matmul_forward=mm_fwd,
        matmul_backward=mm_bwd,
        lora_forward=lora_fwd,
        lora_backward=lora_bwd,
        attention_forward=attn_fwd,
        attention_backward=2.0 * attn_fwd,
        recompute=recompute_mm + recompute_attn,
        recompute_matmul=recompute_mm,
        recompute_attention=recompute_attn,
    )


def generation_flops_per_token(arch: ModelArch, context_tokens: float) -> float:
    """Forward FLOPs to process one token with `context_tokens` of context before it
    (min(context, window) on sliding-window layers; an SSM layer's one recurrent step)."""
    return (2.0 * count_params(arch).matmul_active
            + arch.score_flops_per_key * arch.attended_tokens(context_tokens)
            + arch.ssm_decode_flops_per_token)


def prefill_flops_per_token(arch: ModelArch, prompt_tokens: float) -> float:
    """Forward FLOPs per token of a causal pass over `prompt_tokens` tokens (a prefill, a
    scoring pass): the matmuls and the causal mean of attended keys, which on sliding-window
    layers is the mean of min(position, window) (causal_mean_attended)."""
    return (2.0 * count_params(arch).matmul_active
            + arch.score_flops_per_key * causal_mean_attended(arch, prompt_tokens)
            + arch.ssm_scan_flops_per_token)


def training_flops(t: Training) -> TrainingFlops:
    """FLOPs per language-model token of the training setup `t`: the decoder over its whole
    sequence (text and image tokens) and, with images, the vision tower's work spread over the
    example's tokens (see the module docstring)."""
    arch = t.arch
    # the attention spans one document of a packed sequence where its kernel keeps them apart
    f = training_flops_per_token(arch, t.attention_span, t.method, t.lora_rank, t.lora_targets,
                                 t.checkpointing, loss_kernel_of(t))
    if t.peft_method != "lora":  # IA3, LoHa, LoKr, VeRA, prompt/prefix (estimate/peft_methods.py)
        fwd, bwd = peft_method_flops_per_token(arch, t)
        again = (fwd - f.lora_forward) if t.checkpointing else 0.0  # checkpointing's forward
        f = replace(f, lora_forward=fwd, lora_backward=bwd, recompute=f.recompute + again,
                    recompute_matmul=f.recompute_matmul + again)
    if t.lora_trainable_embeddings and t.method != "full":
        # the LM head's trainable copy (peft modules_to_save) adds its weight gradient, one
        # more head matmul in backward; the embedding's gradient is a scatter-add, no matmul
        f = replace(f, matmul_backward=f.matmul_backward + 2.0 * count_params(arch).lm_head_matmul)
    if t.lora_lm_head and t.method != "full":
        # an adapter on the LM head (r x (d + vocab)): 2 FLOPs per parameter forward, 4 backward
        # (A's and B's weight gradients and the input gradient through both)
        head = lm_head_adapter_params(arch, t.lora_rank)
        f = replace(f, lora_forward=f.lora_forward + 2.0 * head,
                    lora_backward=f.lora_backward + 4.0 * head)
    grid = t.image_grid
    if grid is None or arch.vision is None:
        return f
    per_image = vision_forward_flops(arch.vision, grid)
    share = t.images_per_example / t.llm_seq_len  # images per language-model token
    mm, attn = per_image.matmul * share, per_image.attention * share
    trains = t.train_vision
    recompute_mm = mm if (trains and t.checkpointing) else 0.0
    recompute_attn = attn if (trains and t.checkpointing) else 0.0
    return replace(
        f,
        vision_forward=mm,
        vision_backward=2.0 * mm if trains else 0.0,
        vision_attention_forward=attn,
        vision_attention_backward=2.0 * attn if trains else 0.0,
        recompute=f.recompute + recompute_mm + recompute_attn,
        recompute_matmul=f.recompute_matmul + recompute_mm,
        recompute_attention=f.recompute_attention + recompute_attn,
        vision_recompute_matmul=recompute_mm,
        vision_recompute_attention=recompute_attn,
    )


def images_note(t: Training) -> str | None:
    """What the images of a vision-language setup add, with the rule each figure comes from;
    None without images."""
    grid, v = t.image_grid, t.arch.vision
    if grid is None or v is None:
        return None
    if t.image_tokens is not None:
        size = f"{t.image_tokens} tokens each (given)"
    else:
        assert t.image_pixels is not None
        # the processor's own bound unless the setup gives one (a ViT tower resizes to its
        # fixed size and takes none)
        max_pixels = t.image_max_pixels or (v.max_pixels if isinstance(v, VisionTower)
                                            else DEFAULT_MAX_PIXELS)
        size = image_size_note(v, grid, t.image_pixels, max_pixels)
    fwd = vision_forward_flops(v, grid)
    tower = ("trained (full): forward, backward and its state" if t.train_vision else
             "frozen (the default, as LLaMA-Factory's freeze_vision_tower and Qwen's "
             "tune_mm_vision=False run it): forward only, no gradients, optimizer state or "
             "activations")
    return (f"images: {t.images_per_example} per example, {size}; the language model sees "
            f"{t.seq_len} text + {t.llm_seq_len - t.seq_len} image tokens = {t.llm_seq_len} "
            f"per sequence; vision tower {fwd.total / 1e12:.3g} TFLOP forward per image "
            f"(estimate/vision.py), {tower}")
