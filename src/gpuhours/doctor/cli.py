"""The `gpuhours doctor` command. Registered on the main app by gpuhours.cli; this module must
not import torch at import time (imports go inside the command functions)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this capability's commands to `app`."""
