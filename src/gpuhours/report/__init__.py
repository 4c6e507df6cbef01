"""Rendering of estimates: terminal (Rich), JSON. Formatting lives here, not in the physics."""
