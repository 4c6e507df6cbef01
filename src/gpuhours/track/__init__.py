"""The ledger (SQLite) and training callbacks: benchmark measurements, device probes, tracked runs.

Tracking (docs/doctor.md): `track_run(...)` for a plain PyTorch loop, `hf_callback(...)` for a
Hugging Face Trainer. Neither imports torch or transformers until it is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuhours.track.callbacks import hf_callback
    from gpuhours.track.loop import track_run

__all__ = ["hf_callback", "track_run"]


def __getattr__(name: str) -> Any:
    # loaded on first use: `estimate` reaches gpuhours.track.paths on every run and needs
    # neither the callbacks nor the loop tracker
    if name == "hf_callback":
        from gpuhours.track.callbacks import hf_callback
        return hf_callback
    if name == "track_run":
        from gpuhours.track.loop import track_run
        return track_run
    raise AttributeError(f"module 'gpuhours.track' has no attribute {name!r}")
