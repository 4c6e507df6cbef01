"""The torch-side toolkit that `bench` (real steps) and `trace` (fake tensors) share. Imports no
torch itself; each module imports it where it needs it.

- `formulas`: FLOPs of attention and grouped matmuls from tensor shapes (pure arithmetic), and the
  attention conventions: "mfu" (gpuhours' own, for MFU and HFU everywhere: causal half, backward
  twice the forward, as gpuhours.estimate.flops) and "torch" (torch's flop counter: full S x S,
  five matmuls backward).
- `flops`: the FLOP registry over aten and custom operators (the CPU attention kernels, our
  CUDA-like attention operator, grouped GEMMs of MoE experts) and `count_flops` of one step.
- `flash_attention`: the `gpuhours::flash_attention` operator: attention that keeps what CUDA's
  flash kernel keeps, runnable on CPU and fake tensors (used by the trace).
- `storage`: live tensor storages by identity (a weak reference per storage), and the live-storage
  tracker of a step's peak with its split into weights, gradients, optimizer state and the rest.

The peaks MFU is measured against stay in bench/peak.py: they need the device probes and the
ledger, which only `bench` has; a trace has no time and so no MFU.
"""
