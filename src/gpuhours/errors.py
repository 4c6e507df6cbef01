"""Errors that reach the user: each says what input was wrong and what was expected.

The CLI turns every `InputError` into a one-paragraph message and exit code 2, never a traceback.
InputError is not a ValueError on purpose: raised in a pydantic validator it reaches the caller
as itself (pydantic wraps only ValueError and AssertionError), so `Training(...)` raises the
FieldError that names the fields, for the CLI and the library user alike.
"""

from __future__ import annotations


class InputError(Exception):
    """Bad input from the user: a name, a number, a file.

    `where` names the input (a file and field, a line when known; a field name for a
    FieldError). `fields` are the setup fields at fault, when the error is about fields.
    """

    fields: tuple[str, ...] = ()
    #: the value the user gave, when the error is about one of several (a run id, a URI): `where`
    #: names it after the field, the CLI after the option (`--run 9`)
    given: str | None = None

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


class FieldError(InputError):
    """A bad value of a setup field, keyed by the library's field names (`seq_len`,
    `method`...), not by how the user gave it: the CLI names the option that set each field
    (gpuhours.cli_common.OPTION_OF_FIELD), a plan the key and its line."""

    def __init__(self, fields: str | tuple[str, ...], message: str,
                 hint: str | None = None, *, given: str | None = None) -> None:
        self.fields: tuple[str, ...] = (fields,) if isinstance(fields, str) else tuple(fields)
        self.given = given
        named = "/".join(self.fields)
        super().__init__(named if given is None else f"{named} {given}", message, hint)


class DoesNotFit(InputError):
    """A setup whose memory exceeds the device's: not malformed input but a verdict, so every
    command exits with DOES_NOT_FIT_EXIT_CODE for it (estimate, fit, plan, bench)."""


class FieldDoesNotFit(FieldError, DoesNotFit):
    """A setup field whose value does not fit in memory (a generation's batch, a model whose
    weights leave no room for a KV cache): named by its fields as a FieldError is, and a
    verdict (exit code 1) as DoesNotFit is, not bad input."""


#: the exit code of "does not fit" in every command (2 is bad input)
DOES_NOT_FIT_EXIT_CODE = 1
