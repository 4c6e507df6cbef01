"""Storage: budgets, checkpoint retention, cache eviction, consolidation of batch files.

- `budget`: bytes of checkpoints, datasets, rollout buffers and logs; checkpoint write time.
- `storage_report`: bytes by kind under a directory and what a retention policy would remove.
- `prune`: carry out a retention policy on Hugging Face checkpoint directories, safely.
- `LruCache` / `evict`: a cache directory under a size cap, least recently used out first.
- `prune` also takes checkpoints kept as single files (`epoch_3.ckpt`, `checkpoint_step_500.pt`).
- `consolidate`: batch files into one, originals removed only after the result is verified;
  `torch_merge.TorchMerge` merges .pt files into one torch can load (torch imported only there,
  inside its functions).
No torch at import.
"""

from importlib import import_module
from typing import Any

# Loaded on first use (PEP 562), so that `gpuhours` commands that never touch storage do not
# pay for importing it.
_EXPORTS = {
    "Eviction": "cache", "LruCache": "cache", "evict": "cache", "plan_lru_eviction": "cache",
    "Consolidation": "consolidation", "consolidate": "consolidation",
    "PruneResult": "pruning", "prune": "pruning",
    "StorageReport": "report", "storage_report": "report",
    "RetentionPlan": "retention", "RetentionPolicy": "retention", "decide": "retention",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f"gpuhours.storage.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'gpuhours.storage' has no attribute {name!r}")
