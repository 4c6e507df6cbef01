"""Exact memory and FLOPs of a model's training step on fake tensors (torch)."""
