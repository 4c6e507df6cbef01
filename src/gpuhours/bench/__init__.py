"""Real training steps on this machine, measured (torch)."""
