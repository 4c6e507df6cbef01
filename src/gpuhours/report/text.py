"""User strings made safe to print: the one place where gpuhours neutralises what a plan name, a
directory name, a model name or a ledger string could do to a terminal.

Two dangers, two steps:
- terminal control: an escape sequence (`\\x1b[31m`, a `\\x1b]8;;...` hyperlink, a cursor move)
  or a bare control character (carriage return, backspace, C1 controls) in a name would recolour,
  overwrite or hide what is printed. Each such character is shown as its escape, `\\x1b`, so the
  reader sees exactly what the name holds and the terminal interprets nothing;
- Rich markup: `[/x]` crashes Rich (a closing tag with nothing open), `[link=...]` becomes a
  hyperlink, `[bold]` styles and `[anything]` that looks like a tag disappears. `rich.markup.escape`
  makes brackets literal.

    from gpuhours.report.text import esc      # for Rich markup strings (console.print, tables)
    console.print(f"[bold]{esc(plan.project)}[/bold]")
    from gpuhours.report.text import plain    # for plain text (sys.stdout.write, Markdown)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

#: C0 controls except tab and newline, DEL, and the C1 controls (U+0080-U+009F, which some
#: terminals read as 8-bit escape sequences: U+009B is a CSI)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _visible(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def plain(value: object) -> str:
    """`value` as text with every terminal control character shown as its escape (`\\x1b`), so
    that nothing in it is interpreted by the terminal. Tabs and newlines are kept."""
    return _CONTROL.sub(_visible, str(value))


def esc(value: object) -> str:
    """`value` as text for a Rich markup string: control characters shown as escapes, then
    brackets escaped so that Rich prints them literally."""
    from rich.markup import escape

    return escape(plain(value))


def print_price_flags(console: Any, rows: Iterable[tuple[str, str, Iterable[str]]]) -> None:
    """One line per doubtful price row under a cost table: (provider, instance, flag texts)."""
    for provider, instance, flags in rows:
        for flag in flags:
            console.print(f"[yellow]price flag[/yellow] {esc(provider)} {esc(instance)}: "
                          f"{esc(flag)}")
