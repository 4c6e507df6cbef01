"""Megatron-LM's own transformer layer before Megatron-Core: the kernel path `megatron-2021`.

The code of the PTD-P paper (Narayanan et al. 2021, arXiv 2104.04473), read at
NVIDIA/Megatron-LM@50a4b5fa (2021-04-08, the commit of its README's weak-scaling table):
megatron/model/transformer.py ParallelTransformerLayer, ParallelAttention, ParallelMLP;
megatron/mpu/layers.py; megatron/model/fused_softmax.py, fused_bias_gelu.py,
fused_layer_norm.py; megatron/model/distributed.py. What differs from Megatron-Core's layer of
Transformer Engine modules (the `megatron` path, estimate/host.py MEGATRON_*):

- no flash kernel: attention is a `baddbmm` of q and k into the full S x S score matrix, the
  fused scaled upper-triangular masked softmax (fp16 in, fp16 out), dropout on the
  probabilities, a `bmm` with v and a contiguous copy back to [s, b, h];
- LayerNorm is its own fused CUDA kernel (not fused into the next linear); the bias adds ride in
  jit-scripted bias-GeLU and bias-dropout-add functions; gradients are added into the gradient
  buffer by a hook per parameter (no gradient-accumulation fusion in the wgrad GEMM).

Counted by hand from that code (each kernel named below); no constant is fitted. The layer has a
LayerNorm, a GeLU MLP and biases (GPT-2's shape); setup.py refuses other shapes on this path.
"""

from __future__ import annotations

from gpuhours.estimate.arch import ModelArch

#: device kernels per layer, forward, with attention dropout on (--attention-dropout 0.1 and
#: --hidden-dropout 0.1, arguments.py's defaults at 50a4b5fa): input LayerNorm (1); the qkv
#: ColumnParallelLinear, F.linear on a 3-D input with its bias (matmul, add_: 2); baddbmm into the
#: scores (1); the fused upper-triangular masked softmax (1); dropout on the probabilities (1);
#: bmm with v (1); the permute's contiguous copy (1); the output RowParallelLinear, bias skipped
#: (matmul: 1); bias-dropout-add, jit-scripted, its dropout a bernoulli_ beside one fused
#: elementwise kernel (2); post-attention LayerNorm (1); dense_h_to_4h, bias skipped (1); the
#: fused bias-GeLU (1); dense_4h_to_h (1); bias-dropout-add (2): 17. The tensor-parallel
#: all-reduces are costed by estimate/parallel.py, not here.
LAYER_FORWARD_OPS = 17.0
#: ... backward, besides the gradient adds (GRAD_ADD_OPS_PER_TENSOR): each bias-dropout-add's
#: fused gradient and its bias-gradient sum (2 x 2); dense_4h_to_h, dense_h_to_4h, dense and the
#: qkv linear's dgrad and wgrad GEMMs (4 x 2); the bias-GeLU backward and its bias sum (2); the
#: qkv bias's sum (1); two LayerNorm backwards, three kernels each (grad input, the partial and
#: final gamma/beta sums: 6); the two residual branch points' gradient sums (2); bmm's two
#: gradients (2); dropout's backward (1); the softmax backward (1); baddbmm's two gradients,
#: each a bmm and its mul_ by alpha (4); the cat of the split q, k, v gradients (1): 32.
LAYER_BACKWARD_OPS = 32.0
#: the attention-probability dropout's kernel, forward and backward (in the counts above; off
#: when the model trains without dropout)
ATTENTION_DROPOUT_OPS = (1.0, 1.0)
#: each parameter's gradient added into its buffer once a micro-batch: the DDP hook's
#: main_grad.add_ (distributed.py _make_param_hook) or autograd's accumulation into .grad
GRAD_ADD_OPS_PER_TENSOR = 1.0


def parameter_tensors_per_layer(arch: ModelArch) -> int:
    """Parameter tensors of one layer: two LayerNorms (weight and bias each), four linears
    (fused qkv, dense, dense_h_to_4h, dense_4h_to_h) and their biases."""
    norms = 2 * (2 if arch.norm_bias else 1)
    biases = int(arch.qkv_bias) + int(arch.out_bias) + 2 * int(arch.mlp_bias)
    return norms + 4 + biases


def layer_ops(arch: ModelArch) -> tuple[float, float]:
    """(forward, backward) device kernels one layer issues per micro-batch on this path
    (LAYER_FORWARD_OPS, LAYER_BACKWARD_OPS, one gradient add per parameter tensor; the
    attention dropout's kernels only when the model trains with dropout)."""
    fwd, bwd = LAYER_FORWARD_OPS, LAYER_BACKWARD_OPS
    if not arch.dropout:
        fwd, bwd = fwd - ATTENTION_DROPOUT_OPS[0], bwd - ATTENTION_DROPOUT_OPS[1]
    return fwd, bwd + GRAD_ADD_OPS_PER_TENSOR * parameter_tensors_per_layer(arch)


def score_bytes_per_element(dropout: bool, checkpointing: bool, element_bytes: float = 2.0
                            ) -> float:
    """Bytes of HBM traffic per element of the S x S score matrix (one head, one query, one
    key) in one micro-batch's step, the matrix held in the activation dtype (`element_bytes`;
    fp16 in the paper's runs), its dropout mask one byte.

    Forward: baddbmm writes the scores (1 element); the fused softmax reads them and writes the
    probabilities (2); dropout reads those and writes its output and the mask (2 + mask); bmm
    reads the output (1): 4 elements without dropout, 6 + mask with it. Backward: bmm's
    gradient writes dP (1) and its dV GEMM reads the probabilities (1); dropout's backward reads
    dP and the mask and writes (2 + mask); the softmax backward reads the gradient and its
    output and writes (3); baddbmm's two gradient GEMMs read dS (2): 7 elements without
    dropout, 9 + mask with it. Under full recomputation the forward runs twice. Counted over
    the full matrix: the upper-triangular softmax writes every element (zeros above the
    diagonal) though it reads about half. fp16, with dropout, recomputed: 2 x 13 + 19 = 45."""
    mask = 1.0 if dropout else 0.0
    forward = (6.0 if dropout else 4.0) * element_bytes + mask
    backward = (9.0 if dropout else 7.0) * element_bytes + mask
    return forward * (2.0 if checkpointing else 1.0) + backward


def score_bytes_per_token_layer(arch: ModelArch, seq_len: int, checkpointing: bool,
                                element_bytes: float = 2.0) -> float:
    """Score-matrix traffic per token and layer (all heads; a GPU of a tensor-parallel group
    moves 1/tp of it): heads x seq_len elements at score_bytes_per_element."""
    return arch.num_heads * seq_len * score_bytes_per_element(arch.dropout, checkpointing,
                                                              element_bytes)
