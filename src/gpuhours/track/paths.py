"""Where the ledger lives, without opening it (nor importing sqlite3): `estimate` asks on every
run whether there is a ledger to calibrate from, and usually there is none."""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "GPUHOURS_LEDGER"
DEFAULT_RELATIVE_PATH = Path(".gpuhours") / "ledger.sqlite"


def ledger_path(given: str | Path | None = None) -> Path:
    """The ledger file: `given` (--ledger), else $GPUHOURS_LEDGER, else ./.gpuhours/ledger.sqlite."""
    if given is not None and str(given).strip():
        return Path(given).expanduser()
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return Path(env).expanduser()
    return Path.cwd() / DEFAULT_RELATIVE_PATH
