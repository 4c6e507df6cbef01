"""Run a small real Qwen-VL vision tower (transformers, CPU) the way the vision tests measure
it: one image of GRID_H x GRID_W patches (grid_thw [[1, h, w]]), its forward FLOPs by torch's
FlopCounterMode, its parameters, and the storage autograd keeps in a training forward."""

from __future__ import annotations

from typing import Any

from saved_storage import saved_storages

GRID_H, GRID_W = 8, 12


def forward_flops_and_params(torch: Any, tower: Any, patch_values: int) -> tuple[int, int]:
    """(FLOPs of one no-grad forward of the image, the tower's parameter count); each patch
    holds `patch_values` inputs (channels x temporal patch x patch^2)."""
    from torch.utils.flop_counter import FlopCounterMode

    tower.eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        tower(torch.randn(GRID_H * GRID_W, patch_values),
              grid_thw=torch.tensor([[1, GRID_H, GRID_W]]))
    return counter.get_total_flops(), sum(p.numel() for p in tower.parameters())


def saved_bytes(torch: Any, tower: Any, patch_values: int) -> int:
    """Bytes of the storages autograd keeps in one training forward of the image under SDPA
    (the parameters and the pixels excluded)."""
    tower.config._attn_implementation = "sdpa"
    tower.train()
    pixels = torch.randn(GRID_H * GRID_W, patch_values)
    with saved_storages([*tower.parameters(), pixels]) as saved:
        out = tower(pixels, grid_thw=torch.tensor([[1, GRID_H, GRID_W]]))
    real = sum(s.nbytes for s in saved.values())
    del out
    return real
