"""Reading YAML with limits, so a hostile workflow file costs little before it is refused.

The 1 MiB file cap does not bound what a file *means*: a few hundred bytes of nested aliases
expand to gigabytes once anything walks them (the JSON encoder does, at import), deep nesting
exhausts the interpreter's recursion, and a long run of digits is an integer no column holds.
So the event stream is checked before any node is built: nesting depth, the number of aliases,
and the *expanded* number of nodes and scalar bytes (an alias counts as a full copy of what it
names). The scan stops at the first limit it crosses, so its cost is bounded by the limits,
not by the file. Scalars are checked too: no NUL, no lone surrogate, no integer outside the
signed 64-bit range. Only a document that passes is composed and constructed.

libyaml (PyYAML's C parser) does the scanning when PyYAML was built with it, which every
PyPI wheel is; the pure-Python parser is the fallback.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final, NoReturn

import attrs
import yaml

from core.text import check_text

MAX_DEPTH: Final = 64
"""Nested sequences/mappings; the shipped templates nest at most 8 deep."""
MAX_ALIASES: Final = 256
MAX_NODES: Final = 20_000
"""Expanded: every alias counts as a copy of the node it names. Shipped templates use < 300."""
MAX_SCALAR_BYTES: Final = 1024 * 1024
"""Expanded characters over all scalars, keys included."""
MAX_INT_DIGITS: Final = 80
"""Longer integer spellings are refused before conversion; 2**63 in binary with its `0b`
prefix fits."""
INT_MIN: Final = -(2**63)
INT_MAX: Final = 2**63 - 1

PARSER: Final[type[Any]] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class LimitError(yaml.MarkedYAMLError):
    """A limit crossed while reading; `problem` names it, `problem_mark` says where."""

    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem=problem, problem_mark=mark)


@attrs.define
class _Budget:
    nodes: int = 0
    scalar_bytes: int = 0
    aliases: int = 0

    def take(self, nodes: int, scalar_bytes: int, mark: Any) -> None:
        self.nodes += nodes
        self.scalar_bytes += scalar_bytes
        if self.nodes > MAX_NODES:
            _refuse(f"more than {MAX_NODES} nodes once aliases are expanded (limit)", mark)
        if self.scalar_bytes > MAX_SCALAR_BYTES:
            _refuse(
                f"more than {MAX_SCALAR_BYTES} characters of text once aliases are expanded "
                "(limit)",
                mark,
            )


def _refuse(problem: str, mark: Any) -> NoReturn:
    raise LimitError(problem, mark)


def scan(text: str) -> None:
    """Walk the YAML event stream of `text` and raise LimitError at the first limit crossed.

    YAML syntax errors surface as PyYAML's own `MarkedYAMLError`.
    """
    budget = _Budget()
    # anchor -> (nodes, scalar bytes) of the node it names, once that node is complete
    sizes: dict[str, tuple[int, int]] = {}
    # collections still open: (anchor, nodes before, bytes before)
    open_: list[tuple[str | None, int, int]] = []
    for event in _events(text):
        mark = event.start_mark
        if isinstance(event, yaml.ScalarEvent):
            _check_scalar(event)
            budget.take(1, len(event.value), mark)
            if event.anchor is not None:
                sizes[event.anchor] = (1, len(event.value))
        elif isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
            if len(open_) >= MAX_DEPTH:
                _refuse(f"nested deeper than {MAX_DEPTH} levels (limit)", mark)
            open_.append((event.anchor, budget.nodes, budget.scalar_bytes))
            budget.take(1, 0, mark)
        elif isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
            anchor, nodes, scalar_bytes = open_.pop()
            if anchor is not None:
                sizes[anchor] = (budget.nodes - nodes, budget.scalar_bytes - scalar_bytes)
        elif isinstance(event, yaml.AliasEvent):
            budget.aliases += 1
            if budget.aliases > MAX_ALIASES:
                _refuse(f"more than {MAX_ALIASES} aliases (limit)", mark)
            size = sizes.get(event.anchor or "")
            if size is None:
                if any(anchor == event.anchor for anchor, _, _ in open_):
                    _refuse(f"alias *{event.anchor} refers to a node that contains it", mark)
                _refuse(f"found undefined alias *{event.anchor}", mark)
            budget.take(*size, mark)


def _events(text: str) -> Iterator[Any]:
    loader = PARSER(text)
    try:
        while loader.check_event():
            yield loader.get_event()
    finally:
        loader.dispose()


def _check_scalar(event: Any) -> None:
    problem = check_text(event.value)
    if problem is not None:
        _refuse(f"text {problem}", event.start_mark)


def construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    """SafeConstructor's int, refusing spellings too long to convert cheaply and values
    outside the signed 64-bit range."""
    if len(node.value) > MAX_INT_DIGITS:
        _refuse(f"integer out of range ({INT_MIN}..{INT_MAX})", node.start_mark)
    value = yaml.SafeLoader.construct_yaml_int(loader, node)
    if not INT_MIN <= value <= INT_MAX:
        _refuse(f"integer out of range ({INT_MIN}..{INT_MAX})", node.start_mark)
    return int(value)
