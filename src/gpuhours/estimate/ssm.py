"""State-space (Mamba) and Gated DeltaNet layers: what they keep for backward. Parameters are in
estimate/blocks.py, FLOPs and the recurrent state on ModelArch, MambaMixer and GatedDeltaNet
(estimate/delta_net.py)."""

from __future__ import annotations

from gpuhours.estimate.arch import ModelArch


def hybrid_layer_bytes(arch: ModelArch, attention: float, mlp: float, a: int,
                       full: bool) -> float:
    """Bytes per token of a layer's token mixer and MLP, as means over the layers of an SSM
    model or hybrid: the attention tensors (`attention`, estimate/memory.py's count for one
    attention layer) on the attention layers, the Mamba-2 mixer's on the SSM layers, the MLP
    (`mlp`) on the layers that have one.

    The mixer's, assumed from mamba_ssm's fused kernels (what transformers' CUDA path runs in
    training), which recompute the scan in backward: a x MambaMixer.saved_width (Mamba-2's
    mamba_split_conv1d_scan_combined keeps in_proj's output, inner + conv_dim + heads wide;
    Mamba-1's mamba_inner_fn x and z, the conv output, x_proj's output and dt; a Gated
    DeltaNet's, GatedDeltaNet.saved_width and saved_fp32_width, from fla's kernels); full
    fine-tuning adds the inputs of in_proj (a d) and out_proj (a inner). Not checked against a
    run: on the CPU transformers runs an unfused path that keeps more."""
    s = arch.ssm
    assert s is not None
    mixer = (a * s.saved_width + 4 * s.saved_fp32_width
             + (a * (arch.hidden_size + s.inner) if full else 0))
    n = arch.num_layers
    return (attention * arch.attention_layer_count + mixer * arch.ssm_layers
            + mlp * (n - arch.mlp_free_layers)) / n
