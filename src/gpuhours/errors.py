"""Errors that reach the user: each says what input was wrong and what was expected.

The CLI turns every `InputError` into a one-paragraph message and exit code 2, never a traceback.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad input from the user: a name, a number, a file.

    `where` names the input (a CLI option, a file and field, a line when known).
    """

    def __init__(self, where: str, message: str, hint: str | None = None) -> None:
        self.where = where
        self.message = message
        self.hint = hint
        text = f"{where}: {message}"
        if hint:
            text += f" {hint}"
        super().__init__(text)


class UnknownNameError(InputError):
    """A catalog name that matches no row; carries the closest names."""

    def __init__(self, kind: str, name: str, close: list[str], how_to_add: str) -> None:
        self.kind = kind
        self.name = name
        self.close = close
        suggestion = f" Did you mean: {', '.join(close)}?" if close else ""
        super().__init__(kind, f"unknown {kind} {name!r}.{suggestion}", how_to_add)
