"""Exact lookup of catalog rows by name or alias, case and separators folded; never by substring."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Generic, TypeVar

from gpuhours.errors import InputError, UnknownNameError

Row = TypeVar("Row")

_SEPARATORS = re.compile(r"[\s_-]+")

#: difflib similarity below which a name is not offered as a suggestion.
_CLOSE_CUTOFF = 0.6
_MAX_CLOSE = 3
#: shortest typed text for which names that start with it are suggested first.
_MIN_PREFIX = 2


def normalise(name: str) -> str:
    """The lookup key of a name: lower case, each run of spaces, underscores and hyphens one hyphen.

    'H100-80GB SXM', 'h100_80gb_sxm' and 'h100-80gb-sxm' share a key; 'a100' and 'a100-80gb' do not.
    """
    return _SEPARATORS.sub("-", name.strip().lower()).strip("-")


class NameIndex(Generic[Row]):
    """Rows of one catalog, found by the exact normalised key of a name or an alias.

    Two rows that share a key are a load-time error: which row a name means must never depend on the
    order of the rows.
    """

    def __init__(
        self,
        kind: str,
        how_to_add: str,
        entries: Iterable[tuple[str, Iterable[str], Row]],
        where: str,
    ) -> None:
        """entries: (canonical name, other names, row); where: the file, for error messages."""
        self.kind = kind
        self.how_to_add = how_to_add
        self._rows: dict[str, Row] = {}
        self._canonical: dict[str, str] = {}
        for name, others, row in entries:
            for key in {normalise(n) for n in (name, *others)}:
                owner = self._canonical.get(key)
                if owner is not None and owner != name:
                    raise InputError(
                        where,
                        f"{kind} name or alias {key!r} belongs to both {owner!r} and {name!r}.",
                        "Names and aliases must be unique after lower-casing and turning spaces "
                        "and underscores into hyphens.",
                    )
                if owner == name:  # the same row reached twice, or two rows with one name
                    if self._rows[key] is not row:
                        raise InputError(where, f"{kind} {name!r} appears in two rows.")
                    continue
                self._canonical[key] = name
                self._rows[key] = row

    def get(self, name: str) -> Row | None:
        """The row whose name or alias matches exactly after normalising, or None."""
        return self._rows.get(normalise(name))

    def lookup(self, name: str) -> Row:
        """The row for `name`; UnknownNameError with up to 3 close names when there is none."""
        row = self.get(name)
        if row is None:
            raise UnknownNameError(self.kind, name, self.close_matches(name), self.how_to_add)
        return row

    def close_matches(self, name: str) -> list[str]:
        """Canonical names of up to 3 rows to suggest for `name` (suggestions only, never a match).

        First rows with a name or alias that starts with `name` (shortest first: 'a100' suggests the
        A100 variants), then the most similar by difflib's ratio.
        """
        query = normalise(name)
        extending = (
            sorted((k for k in self._rows if k.startswith(query)), key=lambda k: (len(k), k))
            if len(query) >= _MIN_PREFIX
            else []
        )
        similar = difflib.get_close_matches(
            query, list(self._rows), n=len(self._rows), cutoff=_CLOSE_CUTOFF
        )
        close: list[str] = []
        for key in (*extending, *similar):
            canonical = self._canonical[key]
            if canonical not in close:
                close.append(canonical)
            if len(close) == _MAX_CLOSE:
                break
        return close


#: name endings of instruction-, chat- or otherwise-tuned releases that keep the base model's
#: architecture (Qwen2.5-7B-Instruct, Llama-2-7b-chat-hf, gemma-2-9b-it): a name ending so is
#: looked up again without them
TUNED_SUFFIXES = ("instruct", "chat", "it", "base", "hf")


def base_names(name: str) -> list[str]:
    """Lookup keys to try for a model `name` whose exact key is unknown, nearest first: its
    normalised form with tuned-release endings taken off one at a time ('Llama-2-7b-chat-hf'
    -> 'llama-2-7b-chat', 'llama-2-7b'). Empty when nothing can be taken off."""
    key = normalise(name)
    out: list[str] = []
    while True:
        head, _, last = key.rpartition("-")
        if not head or last not in TUNED_SUFFIXES:
            return out
        key = head
        out.append(key)


def close_keys(query: str, keys: Iterable[str], n: int = _MAX_CLOSE) -> list[str]:
    """Up to `n` of `keys` most similar to `query` by difflib's ratio (normalised first)."""
    return difflib.get_close_matches(normalise(query), list(keys), n=n, cutoff=_CLOSE_CUTOFF)
