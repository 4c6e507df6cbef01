"""Regenerate the command outputs README.md shows, at 80 columns (the width when piped).

Each shown output sits under a marker naming its command:

    <!-- output: gpuhours fit --model qwen2.5-7b --gpu a100-40gb; lines=40 -->
    ```text
    $ gpuhours fit --model qwen2.5-7b --gpu a100-40gb
    ...
    ```

The block is the command line, then its output. The command runs from the repository root as a
user would run it piped through `cat`: 80 columns, no colour, stdout and stderr as they
interleave, no ledger (so no measurement of this machine changes the numbers). Trailing spaces
are dropped; `lines=N` keeps the first N lines and says how many were left out.
`python scripts/readme_outputs.py` rewrites README.md (atomically); `--check` exits 1 naming
each stale block (tests/test_readme_outputs.py runs the check).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
COLUMNS = 80
_BLOCK = re.compile(r"<!-- output: (?P<command>[^;>]+?)(?:; lines=(?P<lines>\d+))? -->\n"
                    r"```text\n(?P<body>.*?)```\n", re.S)


@dataclass(frozen=True)
class Shown:
    command: str
    lines: int | None
    body: str
    start: int
    end: int


def shown_outputs(text: str) -> list[Shown]:
    """Every marked output block of a README's text."""
    return [Shown(m["command"].strip(), int(m["lines"]) if m["lines"] else None, m["body"],
                  m.start("body"), m.end("body")) for m in _BLOCK.finditer(text)]


def run_output(command: str, lines: int | None) -> str:
    """`command` (starting with `gpuhours`) as printed at 80 columns when piped."""
    argv = shlex.split(command)
    if argv[0] != "gpuhours":
        raise ValueError(f"a README output must be of a gpuhours command, not {command!r}")
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "COLUMNS": str(COLUMNS), "NO_COLOR": "1", "TERM": "dumb",
               "PYTHONUNBUFFERED": "1", "GPUHOURS_LEDGER": str(Path(tmp) / "no-ledger.sqlite")}
        env.pop("FORCE_COLOR", None)
        proc = subprocess.run([sys.executable, "-m", "gpuhours.cli", *argv[1:]], cwd=ROOT,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=300, check=False)
    if proc.returncode not in (0, 1):  # 1: "does not fit" is an answer, not a failure
        raise RuntimeError(f"`{command}` exited {proc.returncode}:\n{proc.stdout[-2000:]}")
    out = [line.rstrip() for line in proc.stdout.splitlines()]
    if lines is not None and len(out) > lines:
        left = len(out) - lines
        out = out[:lines] + [f"[... {left} more lines]"]
    return "\n".join(out) + "\n"


def refreshed(text: str) -> tuple[str, list[str]]:
    """(the README with every block regenerated, the commands whose block changed)."""
    stale: list[str] = []
    for block in reversed(shown_outputs(text)):
        now = f"$ {block.command}\n" + run_output(block.command, block.lines)
        if now != block.body:
            stale.append(block.command)
            text = text[:block.start] + now + text[block.end:]
    return text, stale[::-1]


def main(argv: list[str]) -> int:
    text = README.read_text(encoding="utf-8")
    new, stale = refreshed(text)
    if "--check" in argv:
        for command in stale:
            print(f"README.md: the output of `{command}` is stale", file=sys.stderr)
        return 1 if stale else 0
    if stale:
        tmp = README.with_name(f".{README.name}.tmp")
        tmp.write_text(new, encoding="utf-8")
        os.replace(tmp, README)
    print(f"README.md: {len(stale)} output block(s) rewritten"
          + (": " + "; ".join(stale) if stale else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
