"""Results remembered per identity of their arguments.

For values derived from immutable objects that are not hashable by value (a published step's
tuple of declarations, whose configs are dicts; a registry): an arrival asks for the same
derivation at allocation and again at dispatch. The cache holds the arguments themselves, so
an id is never reused while its entry is remembered, and it is emptied when it reaches
`LIMIT` entries (a board publishes few declarations; a new bundle replaces them all).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

LIMIT = 4096


def by_identity(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn`, remembered per identity of its positional arguments."""
    cache: dict[tuple[int, ...], tuple[tuple[Any, ...], R]] = {}

    @functools.wraps(fn)
    def remembered(*args: P.args, **kwargs: P.kwargs) -> R:
        assert not kwargs, "by_identity takes positional arguments only"
        key = tuple(map(id, args))
        found = cache.get(key)
        if found is not None and all(a is b for a, b in zip(found[0], args, strict=True)):
            return found[1]
        result = fn(*args, **kwargs)
        if len(cache) >= LIMIT:
            cache.clear()
        cache[key] = (args, result)
        return result

    return remembered
