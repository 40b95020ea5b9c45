"""Keeping a laneway process's secrets out of `/proc`, where its agents could read them.

An agent runs as the worker's user, and a process of the same user may read another's
`/proc/<pid>/environ`, `mem`, `fd/*`, `maps` and `cmdline`. Two steps close that without a
sandbox (docs/operations.md, "What an agent of the same user can and cannot reach"):

- `hide()`: `prctl(PR_SET_DUMPABLE, 0)`. The kernel then answers `environ`, `mem`, `maps`,
  `fd/*`, `cwd`, `root` and `exe` of this process, and `ptrace` of it, only to a process with
  `CAP_SYS_PTRACE` (root), not to a process of the same user; no core dump is written. It is
  inherited by a fork until exec, so the agents laneway starts (each an exec) are ordinary
  processes again. `cmdline` and `stat`/`status` stay readable to everyone;
- `scrub_argv(values)`: `cmdline` is the process's original argument block, so a secret given
  on the command line (`laneway --db postgresql://user:password@...`, `serve --token T`) is
  overwritten there, in place, with `*` of the same length: `ps` and `/proc/<pid>/cmdline`
  show `--db ****`.

Both run first thing in the process (`core.console`, the agent's tool server), before it
reads a secret; what a same-user process could read before that, in the first milliseconds
of the interpreter's start, docs/operations.md says. Linux only; elsewhere both do nothing.
Imports only the standard library.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Callable, Iterable
from typing import Final

_PR_SET_DUMPABLE: Final = 4
_PR_GET_DUMPABLE: Final = 3
_ARG_START: Final = 48
"""The field of /proc/<pid>/stat holding the argument block's first address (proc(5))."""


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


def hide() -> bool:
    """Make this process non-dumpable; True when it is."""
    prctl = _prctl()
    if prctl is None:
        return False
    prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    return hidden()


def hidden() -> bool:
    """Whether this process is non-dumpable (its /proc is closed to its user's processes)."""
    prctl = _prctl()
    return prctl is not None and prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0) == 0


SECRET_OPTIONS: Final = ("--db", "--token")
"""The options whose values are secrets: the database URL, `serve`'s bearer token."""


def secret_values(argv: Iterable[str]) -> list[str]:
    """The values of the secret-bearing options (`SECRET_OPTIONS`) in a laneway command line."""
    args = list(argv)
    found = []
    for i, arg in enumerate(args):
        name, equals, value = arg.partition("=")
        if name not in SECRET_OPTIONS:
            continue
        if equals:
            found.append(value)
        elif i + 1 < len(args):
            found.append(args[i + 1])
    return [v for v in found if v]


def scrub_argv(values: Iterable[str]) -> int:
    """Overwrite each argument equal to one of `values` (or the value of `--db=<value>`,
    `--token=<value>`) in this process's argument block with `*`; the number overwritten."""
    wanted = {os.fsencode(v) for v in values if v}
    if not wanted or not sys.platform.startswith("linux"):
        return 0
    try:
        with open("/proc/self/stat", "rb") as stat:
            data = stat.read()
        fields = data[data.rindex(b")") + 2 :].split()
        start, end = int(fields[_ARG_START - 3]), int(fields[_ARG_START - 2])
    except (OSError, ValueError, IndexError):
        return 0
    if not start or end <= start:
        return 0
    block = ctypes.string_at(start, end - start)
    done = 0
    offset = 0
    for arg in block.split(b"\0"):
        value_at = offset
        value = arg
        name, equals, rest = arg.partition(b"=")
        if equals and name.decode(errors="replace") in SECRET_OPTIONS:
            value_at, value = offset + len(name) + 1, rest
        if value in wanted:
            with contextlib.suppress(OSError, ValueError):
                ctypes.memmove(start + value_at, b"*" * len(value), len(value))
                done += 1
        offset += len(arg) + 1
    return done
