"""YAML read once with its line numbers: the data and the node tree, errors naming the line.

Safe loading only (the safe constructors of PyYAML for every scalar), with guards that PyYAML
does not have:

- **nesting depth**: PyYAML's composers recurse once per level (the C one overflows the C stack,
  a segfault, near 30,000 levels). Here the tree is built from libyaml's event stream with an
  explicit stack, and more than `MAX_DEPTH` levels is an error naming the line.
- **size after aliases**: `*alias` repeats a node; nine nested levels of ten aliases are a
  billion values. The expanded size of every node is counted as it closes.
- **duplicate keys**: YAML says keys are unique, PyYAML keeps the last one silently; here a
  key given twice in one mapping is an error naming both lines.

The tree and the data are built in one pass with the garbage collector paused (a fresh tree has
no cycles to collect; collection passes over 700,000 new nodes tripled the load time of a
100,000-experiment plan).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import yaml

from gpuhours.errors import InputError

#: the C parser, when PyYAML has it, is ~10x faster (catalogs are read on every command)
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: lists and mappings inside each other; a plan needs about 6, a catalog 3
MAX_DEPTH = 64
#: values after aliases are expanded; a 100,000-experiment plan has about 700,000
MAX_VALUES = 20_000_000

#: scalars whose tag and value are remembered (keys and small values repeat)
_CACHED = 100_000
_STR, _SEQ, _MAP = ("tag:yaml.org,2002:str", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map")
_MERGE = "tag:yaml.org,2002:merge"

#: (node or None below the node depth, data, expanded size, start mark) of a finished value
Built = tuple[yaml.Node | None, Any, int, Any]


class _Bad(Exception):
    """A problem at a mark; turned into an InputError naming the file and line."""

    def __init__(self, mark: Any, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.mark, self.message, self.hint = mark, message, hint


def _mapping_data(items: list[Built]) -> dict[Any, Any]:
    """The dict of a mapping: merges (<<) first, then its own keys, each key at most once."""
    merged: list[dict[Any, Any]] = []
    own: dict[Any, Any] = {}
    lines: dict[Any, int] = {}
    for (_, key, _, key_mark), (_, value, _, value_mark) in zip(items[::2], items[1::2],
                                                                strict=True):
        if key is _MERGE_KEY:
            parts = value if isinstance(value, list) else [value]
            if not all(isinstance(p, dict) for p in parts):
                raise _Bad(value_mark, "a merge (<<) needs a mapping or a list of mappings.")
            merged += reversed(parts)  # in a list, the first mapping wins
            continue
        line = key_mark.line + 1
        try:
            first = lines.setdefault(key, line)
        except TypeError:
            raise _Bad(key_mark, "a list or mapping cannot be a key.") from None
        if key in own:
            raise _Bad(key_mark,
                       f"key {key!r} is given twice in one mapping (lines {first} and {line}); "
                       f"YAML keeps only the last, so the other would be silently ignored.",
                       "Remove or rename one of them.")
        own[key] = value
    if not merged:
        return own
    out: dict[Any, Any] = {}
    for part in merged:
        out.update(part)
    out.update(own)
    return out


class _MergeKey(str):
    """The data of a `<<` key, told apart from the string '<<' by identity."""


_MERGE_KEY = _MergeKey("<<")


def _build(loader: yaml.SafeLoader, max_depth: int, node_depth: int) -> Built | None:
    """The document's (node, data, size, mark), from the event stream, without recursion.

    Nodes are made down to `node_depth` levels (the root is level 1); deeper values have data
    only (no node objects: most of a large file's memory and time)."""
    resolve, construct = loader.resolve, loader.construct_object
    # keys and small values repeat (a grid's `name`, `steps`, `priority: 1`): their tag and
    # their (immutable) value are looked up once
    tags: dict[tuple[str, Any], str] = {}
    values: dict[tuple[str, str], Any] = {}
    anchors: dict[str, Built] = {}
    # (node or None, finished children, anchor, start mark, is a sequence)
    stack: list[tuple[yaml.Node | None, list[Built], str | None, Any, bool]] = []
    root: Built | None = None
    documents = 0
    while True:
        event = loader.get_event()
        kind = type(event)
        done: Built | None = None
        if kind is yaml.ScalarEvent:
            tag, value = event.tag, event.value
            if tag is None or tag == "!":
                tag = tags.get((value, event.implicit))
                if tag is None:
                    tag = resolve(yaml.ScalarNode, value, event.implicit)
                    if len(tags) < _CACHED:
                        tags[(value, event.implicit)] = tag
            node: yaml.Node | None = (
                yaml.ScalarNode(tag, value, event.start_mark, None, style=event.style)
                if len(stack) < node_depth else None)
            if tag == _STR:
                data = value
            elif tag == _MERGE:
                data = _MERGE_KEY
            elif (tag, value) in values:
                data = values[(tag, value)]
            else:
                data = construct(node or yaml.ScalarNode(tag, value, event.start_mark, None))
                if len(values) < _CACHED and isinstance(data, int | float | bool | None):
                    values[(tag, value)] = data
            done = (node, data, 1, event.start_mark)
            if event.anchor is not None:
                anchors[event.anchor] = done
        elif kind is yaml.SequenceStartEvent or kind is yaml.MappingStartEvent:
            seq = kind is yaml.SequenceStartEvent
            tag = event.tag
            if tag is None or tag == "!":
                tag = _SEQ if seq else _MAP  # the safe resolver has no path-based tags
            if tag != (_SEQ if seq else _MAP):
                raise _Bad(event.start_mark, f"the tag {tag!r} is not supported here.")
            if len(stack) >= max_depth:
                raise _too_deep(event.start_mark, max_depth)
            node_kind = yaml.SequenceNode if seq else yaml.MappingNode
            node = (node_kind(tag, [], event.start_mark, None, flow_style=event.flow_style)
                    if len(stack) < node_depth else None)
            stack.append((node, [], event.anchor, event.start_mark, seq))
            continue
        elif kind is yaml.SequenceEndEvent or kind is yaml.MappingEndEvent:
            node, items, anchor, mark, seq = stack.pop()
            size = 1 + sum(item[2] for item in items)
            if size > MAX_VALUES:
                raise _Bad(mark, f"expands to more than {MAX_VALUES:,} values (aliases repeat "
                                 f"what they name).")
            if node is not None and len(stack) + 1 < node_depth:
                # (an alias of a value anchored deeper than the node depth has no node: its
                # place holds an empty one at the alias's line)
                nodes = [item[0] or yaml.ScalarNode(_STR, "", item[3], None) for item in items]
                node.value = nodes if seq else list(zip(nodes[::2], nodes[1::2], strict=True))
            data = [item[1] for item in items] if seq else _mapping_data(items)
            done = (node, data, size, mark)
            if anchor is not None:
                anchors[anchor] = done
        elif kind is yaml.AliasEvent:
            if event.anchor not in anchors:
                raise _Bad(event.start_mark, f"the alias *{event.anchor} names no anchor before "
                                             f"it (or a list or mapping that contains it).")
            done = anchors[event.anchor]
        elif kind is yaml.DocumentStartEvent:
            documents += 1
            if documents > 1:
                raise _Bad(event.start_mark, "expected a single YAML document; found another "
                                             "one (`---`).")
        elif kind is yaml.StreamEndEvent:
            return root
        if done is not None:
            if stack:
                stack[-1][1].append(done)
            else:
                root = done


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a large, acyclic structure is built.

    Each collection pass walks every live object; building 700,000 nodes (or 100,000 validated
    models) triggers many, so a build that is linear in its size becomes much slower."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _too_deep(mark: Any, max_depth: int) -> _Bad:
    return _Bad(mark, f"nested more than {max_depth} levels deep (lists and mappings inside "
                      f"each other); a plan or catalog needs fewer than 10.",
                "Check for unclosed brackets.")


def compose(text: str, label: str, max_depth: int = MAX_DEPTH,
            node_depth: int = MAX_DEPTH) -> tuple[yaml.Node | None, Any]:
    """(node tree, data) of YAML text, safely loaded; `label` names the file in errors.

    The node tree (for line numbers) goes `node_depth` levels deep (the root is level 1): a
    collection at the last level has no children, and nothing below it has a node. A large
    plan needs lines only near the top until an error asks for one deeper.

    Raises InputError for invalid YAML, nesting deeper than `max_depth`, more than
    `MAX_VALUES` values once aliases are expanded, and a key given twice in one mapping."""
    loader = _LOADER(text)
    try:
        with gc_paused():
            built = _build(loader, max_depth, node_depth)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        if mark is not None and "nesting depth" in problem:
            # PyYAML 6.0.4's scanner limits flow nesting itself ("exceeded maximum nesting
            # depth"), looking ahead of the events the depth check above reads: the same error
            bad = _too_deep(mark, max_depth)
            raise InputError(f"{label}, line {mark.line + 1}", bad.message, bad.hint) from None
        where = f"{label}, line {mark.line + 1}, column {mark.column + 1}" if mark else label
        raise InputError(where, f"not valid YAML: {problem}.") from None
    except _Bad as bad:
        raise InputError(f"{label}, line {bad.mark.line + 1}", bad.message, bad.hint) from None
    finally:
        loader.dispose()
    return (None, None) if built is None else (built[0], built[1])
