"""Reading a workflow file's YAML, within its limits.

A file larger than `MAX_FILE_BYTES` is refused before it is parsed; the event stream is scanned
against `bounded`'s limits before anything is built; the loader refuses duplicate keys and keeps
timestamps as text. Every problem is a one-line `WorkflowFileError` naming the file (and the
line and column where YAML knows them).
"""

from __future__ import annotations

import os
from typing import Any, Final

import yaml

from core.workflows import bounded
from core.workflows.decl import WorkflowFileError

MAX_FILE_BYTES: Final = 1024 * 1024
"""The reference's import limit; larger files are refused before they are parsed."""


def read_file(path: str | os.PathLike[str]) -> str:
    """The text of the file at `path`: at most `MAX_FILE_BYTES` of UTF-8."""
    source = os.fspath(path)
    try:
        if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
            # a FIFO or a device: reading it may never end (a FIFO without a writer)
            raise WorkflowFileError("not a regular file", file=source)
        with open(path, "rb") as handle:
            # One byte past the limit is enough to know the file is too large.
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise WorkflowFileError(f"cannot read: {exc.strerror or exc}", file=source) from exc
    if len(data) > MAX_FILE_BYTES:
        raise WorkflowFileError("file is larger than 1 MiB", file=source)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkflowFileError(f"not UTF-8 text ({exc.reason})", file=source) from exc


def parse(text: str, source: str) -> Any:
    """`text` parsed as YAML, after its size and encodability are checked."""
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        line = text.count("\n", 0, exc.start) + 1
        column = exc.start - text.rfind("\n", 0, exc.start)
        raise WorkflowFileError(
            f"text contains a lone surrogate (U+{ord(text[exc.start]):04X})",
            file=source,
            field=f"line {line}, column {column}",
        ) from None
    if size > MAX_FILE_BYTES:
        raise WorkflowFileError("file is larger than 1 MiB", file=source)
    return _parse_yaml(text, source)


class _Loader(bounded.PARSER):  # type: ignore[misc]
    """SafeLoader that refuses duplicate keys and keeps timestamps as strings.

    A duplicate key (two `on_enter:` in one step) would otherwise silently drop the first
    list. A date-looking value (`payload: {since: 2024-01-01}`) would become a `date`, which
    the store cannot encode as JSON; the author meant the text. Integers are range-checked
    (`bounded.construct_int`).
    """


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        # Merge keys (`<<: *base`) may legitimately be overridden; only literal keys count.
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    mapping: dict[Any, Any] = loader.construct_mapping(node, deep=True)
    return mapping


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor("tag:yaml.org,2002:int", bounded.construct_int)


def _parse_yaml(text: str, source: str) -> Any:
    try:
        # Limits first, on the event stream: nothing is built for a file that crosses one.
        bounded.scan(text)
        # _Loader derives from SafeLoader: no arbitrary object construction.
        return yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "malformed"
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else None
        what = problem if isinstance(exc, bounded.LimitError) else f"invalid YAML: {problem}"
        raise WorkflowFileError(what, file=source, field=where) from exc
    except yaml.YAMLError as exc:
        raise WorkflowFileError(f"invalid YAML: {exc}", file=source) from exc
    except (ValueError, KeyError, AttributeError, TypeError, OverflowError) as exc:
        # PyYAML's constructors raise these for an explicit tag whose text is not of its type
        # (`!!timestamp foo`, `!!int 0x`, `!!bool maybe`)
        detail = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        raise WorkflowFileError(
            f"invalid YAML: a tagged value is not of its tag's type ({type(exc).__name__}: "
            f"{str(detail)[:200]})",
            file=source,
        ) from exc
