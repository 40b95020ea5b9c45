"""The methods attrs generates for laneway's classes, compiled once and kept between processes.

attrs writes each class's `__init__`, `__eq__`, `__hash__` and `__repr__` as Python source
and compiles it when the class is made: about 70 classes are made before `laneway task move`
does anything, and those compiles were a tenth of its CPU (issue 45 item 6). Python keeps a
module's bytecode in `__pycache__`; this keeps the bytecode of the generated methods beside it,
in one file per interpreter and attrs install, keyed by attrs' own name for the code and
checked against the source attrs generated this time: a class whose fields changed compiles
afresh, and the file learns its new code at the process's exit.

Nothing is written where bytecode is not (`PYTHONDONTWRITEBYTECODE`, a read-only install), and
an unreadable file or an attrs without the hook (`attr._make._compile_and_eval`) only means
compiling as attrs does.
"""

from __future__ import annotations

import atexit
import contextlib
import marshal
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from types import CodeType
from typing import Any, Final

import attr
import attr._make

from core import kept

MAX_ENTRIES: Final = 1000
"""A file that grew past this (classes made and changed over many versions) is written again
with only what the last process used: every process reads the whole file."""

_TYPE_HASH: Final = re.compile(r"(hash\(\(\n +)(-?\d+),\n")
"""The salt attrs writes into a `__hash__` as a number (its first hashed value)."""
_SALT: Final = "_laneway_attrs_type_hash"
_SIGNATURE: Final = ("script", "globs", "locs", "filename")
"""The arguments of the attrs hook this replaces (attrs 23.2 to 26.1 at least); an attrs whose
hook differs is left alone."""

_known: dict[str, tuple[str, CodeType | bytes]] = {}
"""By attrs' filename for the code: the source it was compiled from and the code, still
marshalled while no class of this process has used it (a process makes a few dozen of the
file's hundreds of classes, and unmarshalling them all was most of reading the file)."""
_used: set[str] = set()
_learned = False


def cache_file() -> Path:
    """The file for this interpreter and this attrs: named by the interpreter's bytecode tag
    and by the size and time of attrs' code generator (`attr.__version__` would read attrs'
    metadata through the `email` package, 10 ms and more)."""
    try:
        made = os.stat(attr._make.__file__)
        attrs_tag = f"{made.st_size}-{made.st_mtime_ns}"
    except (OSError, TypeError):
        attrs_tag = "unknown"
    return kept.beside(__file__, f"attrs-code-{attrs_tag}")


def _read(path: Path) -> dict[str, tuple[str, CodeType | bytes]]:
    try:
        data = marshal.loads(path.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        name: entry
        for name, entry in data.items()
        if isinstance(entry, tuple)
        and len(entry) == 2
        and isinstance(entry[0], str)
        and isinstance(entry[1], bytes)
    }


def _compile_and_eval(
    script: str,
    globs: dict[str, Any] | None,
    locs: Mapping[str, object] | None = None,
    filename: str = "",
) -> None:
    """attrs' `_compile_and_eval`, taking the bytecode from the file when it was compiled
    from this very source."""
    global _learned
    if globs is not None and (found := _TYPE_HASH.search(script)) is not None:
        # `__hash__` salts with hash() of a string, which differs from process to process: the
        # kept code reads this process's salt from the methods' globals instead
        globs[_SALT] = int(found[2])
        script = f"{script[: found.start(2)]}{_SALT}{script[found.end(2) :]}"
    # a class made inside a function (a test's, a factory's) is made again with every call,
    # under one name: not kept, or the file would fill with them
    kept = bool(filename) and "<locals>" not in filename
    known = _known.get(filename) if kept else None
    if known is not None and known[0] == script:
        code = _code(filename, known)
    else:
        code = compile(script, filename, "exec")
        if kept:
            _known[filename] = (script, code)
            _learned = True
    if kept:
        _used.add(filename)
    eval(code, globs, locs)


def _code(filename: str, known: tuple[str, CodeType | bytes]) -> CodeType:
    script, code = known
    if isinstance(code, CodeType):
        return code
    try:
        loaded = marshal.loads(code)
    except (ValueError, EOFError, TypeError):
        loaded = None
    if not isinstance(loaded, CodeType):
        loaded = compile(script, filename, "exec")  # a damaged entry: compiled as attrs does
    _known[filename] = (script, loaded)
    return loaded


def install() -> None:
    """Serve attrs' compiles from the file (once per process)."""
    original = getattr(attr._make, "_compile_and_eval", None)
    if original is None:
        return
    code = getattr(original, "__code__", None)
    if code is not None and code.co_varnames[: code.co_argcount] != _SIGNATURE:
        return  # an attrs whose hook takes other arguments: compile as it does
    if attr._make._compile_and_eval is _compile_and_eval:
        return
    _known.update(_read(cache_file()))
    attr._make._compile_and_eval = _compile_and_eval
    atexit.register(save)


def save() -> None:
    """Write what this process compiled to the file, with what other processes wrote
    meanwhile; never fails the process."""
    global _learned
    if not _learned or sys.dont_write_bytecode:
        return
    _learned = False
    path = cache_file()
    with contextlib.suppress(OSError, ValueError):
        merged = {**_read(path), **_known}
        if len(merged) > MAX_ENTRIES:
            merged = {name: _known[name] for name in _used if name in _known}
        kept.write(
            path, marshal.dumps({name: _marshalled(entry) for name, entry in merged.items()})
        )


def _marshalled(entry: tuple[str, CodeType | bytes]) -> tuple[str, bytes]:
    script, code = entry
    return script, code if isinstance(code, bytes) else marshal.dumps(code)


def _forked() -> None:
    """A forked child saves only what it compiles itself: what its parent learned is the
    parent's to write (a warm process forking commands would have each rewrite the file)."""
    global _learned
    _learned = False


os.register_at_fork(after_in_child=_forked)

# imported first by `core` itself (core/__init__.py), so before any of laneway's classes
install()
