"""The ledger (SQLite) and training callbacks: benchmark measurements, device probes, tracked runs.

Tracking (docs/doctor.md): `track_run(...)` for a plain PyTorch loop, `hf_callback(...)` for a
Hugging Face Trainer. Neither imports torch or transformers until it is used.
"""

from gpuhours.track.callbacks import hf_callback
from gpuhours.track.loop import track_run

__all__ = ["hf_callback", "track_run"]
