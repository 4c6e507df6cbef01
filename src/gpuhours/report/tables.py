"""Tables that fit the terminal: no name a user must type and no number is cut.

Every table of the reports is described by its columns, each of a kind:
- "name" (a model, a GPU, a phase: something the user types back) and "number": never wrapped
  inside and never cut with "…"; when the table is narrowed the column keeps the width of its
  widest cell and only its header may wrap;
- "text": prose that may wrap between words (and fold, never "…", inside a word too long);
- "basis": the long text saying where a number comes from. When the whole table fits the console
  it stays in the table; when it does not (a pipe is 80 columns), each becomes a numbered
  footnote, `[3]`, printed under the table (a short one, or the short lead of one, stays while
  the table fits), so that the table keeps about its wide length instead of folding every row
  into four lines. Several basis columns (a plan's bottleneck and basis) share one note column.
  A compact table first tries one line a row: short bases inline, then fewer, then none, then
  headers wrapped to their cells' width; only when none of these fits do the "stack" columns go
  under their neighbours (two lines a row).

A catalog listing too wide for the console moves its long columns (Hugging Face ids, aliases)
to a second table keyed by the name (`print_split`). `--wide` keeps every table whole and lets
lines be as long as they need (gpuhours.cli_common.console_for).

Cells are Rich markup; user text in them is escaped by the caller (gpuhours.report.text.esc).
"""

from __future__ import annotations

import functools
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.errors import MarkupError
from rich.markup import escape, render
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

Kind = Literal["name", "number", "text", "basis"]

#: the width a table is measured at to learn its natural (unfolded) width
_UNBOUNDED = 10_000
#: a basis this short (in cells) stays in a compact table: a marker would save little
INLINE_CELLS = 28


@dataclass(frozen=True)
class Col:
    """One column: its header, its kind (module docstring) and its alignment."""

    header: str
    kind: Kind = "text"
    justify: Literal["left", "right"] = "left"
    #: when the table is compact, this column's cells go under the previous column's, in one
    #: column (a provider and its instance): one column fewer to share the width
    stack: bool = False


@dataclass
class Notes:
    """Numbered footnotes of one report: identical texts share a number, numbering continues
    from table to table, and each table prints the notes it introduced under itself."""

    texts: list[str] = field(default_factory=list)
    printed: int = 0
    #: texts this short (in cells) stay in the table; 0 when even those do not fit
    inline_cells: int = INLINE_CELLS

    def ref(self, markup: str) -> str:
        """The marker of `markup` (`[n]`, as Rich markup), adding it as a note if new. A short
        text stays as it is, and a short lead before "; " stays beside the marker of the rest
        (`fits in 80.00 GiB [3]`), so that a verdict is read in the table."""
        if Text.from_markup(markup).cell_len <= self.inline_cells:
            return markup
        lead, sep, rest = markup.partition("; ")
        if sep and Text.from_markup(lead).cell_len <= self.inline_cells and _closed(lead, rest):
            return f"{lead} {self.ref(rest)}"
        if markup not in self.texts:
            self.texts.append(markup)
        return escape(f"[{self.texts.index(markup) + 1}]")

    def print_new(self, console: Console) -> None:
        """Print the notes not printed yet, each with a hanging indent."""
        if self.printed == len(self.texts):
            return
        rows = [(escape(f"[{number}]"), text)
                for number, text in enumerate(self.texts[self.printed:], start=self.printed + 1)]
        console.print(_hanging(console, rows, justify="right"))
        self.printed = len(self.texts)


def _closed(*parts: str) -> bool:
    """Whether each markup part is whole by itself: no tag closed that it did not open."""
    try:
        for part in parts:
            render(part)
    except MarkupError:
        return False
    return True


def print_list(console: Console, items: Sequence[str], marker: str = "  -") -> None:
    """A bulleted list of markup lines, each wrapped under its own start (a hanging indent)."""
    console.print(_hanging(console, [(f"[dim]{escape(marker)}[/dim]", item) for item in items]))


def _hanging(console: Console, rows: Sequence[tuple[str, str]],
             justify: Literal["left", "right"] = "left") -> Table:
    """Markers and texts, each text wrapped under its own start. The widths are given (the
    markers' widest; the texts' widest, at most what is left of the line), so that Rich does
    not measure every cell again."""
    marker_width = max((cell_width(marker) for marker, _ in rows), default=0)
    text_width = max((cell_width(text) for _, text in rows), default=0)
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify=justify, no_wrap=True, width=marker_width)
    grid.add_column(overflow="fold",
                    width=max(1, min(text_width, console.width - marker_width - 1)))
    for row in rows:
        grid.add_row(*row)
    return grid


def natural_width(console: Console, table: Table) -> int:
    """The width `table` takes when nothing in it is wrapped, borders included, as Rich
    measures it (the tests hold `_natural_width`, the arithmetic used here, equal to it)."""
    options = console.options.update_width(_UNBOUNDED)
    return Measurement.get(console, options, table).maximum


@functools.lru_cache(maxsize=8192)
def cell_width(markup: str) -> int:
    """The printed width of the longest line of a markup cell, as Rich measures a Text."""
    return max((cell_len(line) for line in Text.from_markup(markup).plain.splitlines()),
               default=0)


@dataclass(frozen=True)
class _Layout:
    """A table's columns and cells as they will be printed, and each column's width when
    nothing wraps (a compact table's name and number columns are fixed at their widest cell)."""

    cols: list[Col]
    cells: list[list[str]]
    widths: list[int]
    fixed: list[bool]
    compact: bool

    @property
    def natural_width(self) -> int:
        """Columns, padding and borders: the boxed table pads each column by one cell on
        both sides and draws n + 1 rules; the compact one leaves two cells between columns."""
        n = len(self.widths)
        if self.compact:
            return sum(self.widths) + 2 * (n - 1)
        return sum(self.widths) + 3 * n + 1


def _layout(cols: Sequence[Col], rows: Sequence[Sequence[str]], console: Console,
            notes: Notes | None, stack: bool = True, wrap_headers: bool = False) -> _Layout:
    """The layout; with `notes`, compact: basis cells as footnote markers, stacked columns
    merged (unless not `stack`), headers wrapped to their cells' width (`wrap_headers`), and
    each name and number column fixed at its widest cell so that Rich narrows only the text."""
    cols = list(cols)
    basis = [i for i, col in enumerate(cols) if col.kind == "basis"]
    if notes is not None and len(basis) > 1:  # one note column: its texts joined by "; "
        rows = [["; ".join(row[j] for j in basis if row[j]) if i == basis[0] else cell
                 for i, cell in enumerate(row) if i not in basis[1:]] for row in rows]
        header = " / ".join(cols[i].header for i in basis)
        cols = [Col(header, "basis") if i == basis[0] else col
                for i, col in enumerate(cols) if i not in basis[1:]]
    if notes is not None and stack and any(col.stack for col in cols):
        keep = [i for i, col in enumerate(cols) if not col.stack]
        merged = [Col(f"{col.header} / {cols[i + 1].header}", col.kind, col.justify)
                  if i + 1 < len(cols) and cols[i + 1].stack else col
                  for i, col in enumerate(cols) if not col.stack]
        rows = [[f"{row[i]}\n{row[i + 1]}" if i + 1 < len(cols) and cols[i + 1].stack
                 else row[i] for i in keep] for row in rows]
        cols = merged
    cells = [[notes.ref(cell) if col.kind == "basis" and notes is not None and cell else cell
              for col, cell in zip(cols, row, strict=True)] for row in rows]
    widest = [max((cell_width(row[i]) for row in cells), default=0) for i in range(len(cols))]
    natural = [max(w, cell_width(col.header)) for w, col in zip(widest, cols, strict=True)]
    if notes is None:
        return _Layout(cols, cells, natural, [False] * len(cols), compact=False)
    if wrap_headers:  # a header over its cells' width goes on lines of that width, by words
        cols = [replace(col, header="\n".join(textwrap.wrap(
                    col.header, max(w, *(len(word) for word in col.header.split()))))) if
                col.header.strip() else col for w, col in zip(widest, cols, strict=True)]
        natural = [max(w, cell_width(col.header)) for w, col in zip(widest, cols, strict=True)]
    pinned = {i: max(widest[i], max((len(word) for word in col.header.split()), default=1), 1)
              for i, col in enumerate(cols) if col.kind in ("name", "number")}
    width_of_fixed = sum(pinned.values()) + 2 * (len(cols) - 1) + 4 * (len(cols) - len(pinned))
    if width_of_fixed > console.width:  # too narrow for the names: they fold, numbers not
        pinned = {i: w for i, w in pinned.items() if cols[i].kind != "name"}
    return _Layout(cols, cells, [pinned.get(i, w) for i, w in enumerate(natural)],
                   [i in pinned for i in range(len(cols))], compact=True)


def _table(layout: _Layout, title: str | None, caption: str | None, *,
           pin_all: bool = False) -> Table:
    """The Rich table of `layout`: boxed, or compact (a light frame). `pin_all` (the table fits)
    gives every column its natural width, so that Rich need not measure the cells again."""
    if not layout.compact:
        table = Table(title=title, title_justify="left", caption=caption,
                      caption_justify="left")
    else:  # two spaces between columns and no frame: 3 columns more than the boxed table
        table = Table(title=title, title_justify="left", caption=caption,
                      caption_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
                      padding=(0, 1, 0, 0), pad_edge=False)
    for col, width, fixed in zip(layout.cols, layout.widths, layout.fixed, strict=True):
        table.add_column(col.header, justify=col.justify,
                         width=width if fixed or pin_all else None, overflow="fold")
    for row in layout.cells:
        table.add_row(*row)
    return table


def fits(console: Console, cols: Sequence[Col], rows: Sequence[Sequence[str]]) -> bool:
    """Whether the whole table, nothing wrapped, fits the console's width."""
    return _layout(cols, rows, console, None).natural_width <= console.width


def print_table(console: Console, cols: Sequence[Col], rows: Sequence[Sequence[str]], *,
                notes: Notes, wide: bool = False, title: str | None = None,
                caption: str | None = None) -> None:
    """Print a table whole when it fits the console (or `wide`); otherwise compact: a light
    frame, name and number columns kept whole, basis columns as numbered footnotes (`notes`)
    printed under it."""
    whole = _layout(cols, rows, console, None)
    if wide or whole.natural_width <= console.width:
        console.print(_table(whole, title, caption, pin_all=True))
        return
    known, inline = len(notes.texts), notes.inline_cells
    # one line a row first: fewer texts kept in the table until it fits; only then the stacked
    # columns (a kind over its runs) share one, two lines a row
    tries = [(stack, wrap, cells) for stack in (False, True) for wrap in (False, True)
             for cells in (inline, inline // 2, 0) if stack or any(col.stack for col in cols)]
    for stack, wrap, cells in tries:
        del notes.texts[known:]
        notes.inline_cells = cells
        layout = _layout(cols, rows, console, notes, stack=stack, wrap_headers=wrap)
        if layout.natural_width <= console.width:
            break
    notes.inline_cells = inline
    console.print(_table(layout, title, caption, pin_all=layout.natural_width <= console.width))
    notes.print_new(console)


def print_split(console: Console, cols: Sequence[Col], rows: Sequence[Sequence[str]],
                details: Sequence[int], *, wide: bool = False, title: str | None = None) -> None:
    """A catalog listing: whole when it fits (or `wide`); otherwise compact, with the columns
    `details` (long names, such as Hugging Face ids or aliases) moved to a second table keyed by
    the first column, so that neither table cuts a name or a number."""
    whole = _layout(cols, rows, console, None)
    if wide or whole.natural_width <= console.width:
        console.print(_table(whole, title, None, pin_all=True))
        return
    keep = [i for i in range(len(cols)) if i not in details]
    moved = [0, *details]
    print_table(console, [cols[i] for i in keep], [[row[i] for i in keep] for row in rows],
                notes=Notes(), title=title)
    print_table(console, [cols[0], *(Col(cols[i].header) for i in details)],
                [[row[i] for i in moved] for row in rows], notes=Notes())
