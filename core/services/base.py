"""What every service shares: the host's shared parts (`core.services.peers.Peers`, never
the host itself; the other services a service calls are named in its own constructor), a
guard against writing read-only, and a check of argument types at the public API's edge.

The services are what an embedding application calls, with whatever it has at hand:
`tasks.create(title=123)` must be a `LanewayError` naming the argument, not an
`AttributeError` from deep inside. Every public method of a service is wrapped, once, when the
class is defined (its annotations are read at its first call): each parameter annotated with
plain types (`str`, `int`, `bool`, `None` and unions of them) is checked on each call; others
are left to the method.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from core.errors import LanewayError, ReadOnly

if TYPE_CHECKING:
    from core.services.peers import Peers

T = TypeVar("T")

Lazy: TypeAlias = Callable[[], T]
"""A collaborator a service names in its constructor, built when first called: the host builds
each service on first use, and two services may name each other."""

_PLAIN: dict[Any, tuple[type, ...]] = {
    str: (str,),
    int: (int,),
    bool: (bool,),
    type(None): (type(None),),
}


def _allowed(hint: Any) -> tuple[type, ...] | None:
    """The types a plain annotation admits, or None when it is not plain."""
    if hint in _PLAIN:
        return _PLAIN[hint]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        found: list[type] = []
        for arg in typing.get_args(hint):
            part = _allowed(arg)
            if part is None:
                return None
            found.extend(part)
        return tuple(found)
    return None


def _type_name(value: Any) -> str:
    return type(value).__name__


_Plan = tuple[list[str], dict[str, tuple[type, ...]]]
"""A method's positional parameter names, and the types each checked parameter admits."""


def _plan(fn: Callable[..., Any]) -> _Plan:
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - an annotation we cannot resolve is simply not checked
        return [], {}
    params = list(inspect.signature(fn).parameters.values())[1:]  # without self
    checks: dict[str, tuple[type, ...]] = {}
    for param in params:
        allowed = _allowed(hints.get(param.name))
        if allowed is not None:
            checks[param.name] = allowed
    return [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD], checks


def _checked(fn: Callable[..., Any], owner: str) -> Callable[..., Any]:
    """`fn`, checking its plainly annotated arguments on each call. The annotations are read
    at the method's first call, not when its class is defined: resolving every public
    method's annotations cost each command milliseconds for methods it never calls. The
    class is never changed after it is defined: a method with nothing to check costs one
    extra call, not a rewrite of its class."""
    plans: list[_Plan] = []

    def check(checks: dict[str, tuple[type, ...]], name: str, value: Any) -> None:
        allowed = checks.get(name)
        if allowed is None or type(value) in allowed:
            return
        if isinstance(value, allowed) and not (bool not in allowed and isinstance(value, bool)):
            return
        wanted = " or ".join("None" if t is type(None) else t.__name__ for t in allowed)
        raise LanewayError(
            f"{owner}.{fn.__name__}: argument {name!r} must be {wanted}, got {_type_name(value)}"
        )

    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not plans:
            plans.append(_plan(fn))  # two first calls at once compute the same plan
        positional, checks = plans[0]
        if checks:
            for name, value in zip(positional, args, strict=False):
                if type(value) not in checks.get(name, (type(value),)):
                    check(checks, name, value)
            for name, value in kwargs.items():
                if type(value) not in checks.get(name, (type(value),)):
                    check(checks, name, value)
        return fn(self, *args, **kwargs)

    return wrapper


class Service:
    """A service: built with the host's shared parts (`peers`) and, keyword by keyword in its
    own constructor, each service it calls (`Lazy`, built when it first calls it)."""

    def __init__(self, peers: Peers) -> None:
        self.peers = peers

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        base = cls.__name__.removesuffix("Service")
        # named as the host's attribute is: host.tasks, host.entries, host.workspace
        owner = {"Workspace": "workspace", "Entry": "entries"}.get(base, base.lower() + "s")
        for name, value in list(vars(cls).items()):
            if name.startswith("_") or not inspect.isfunction(value):
                continue
            setattr(cls, name, _checked(value, owner))

    def _require_writer(self) -> None:
        if not self.peers.writable:
            raise ReadOnly("this host was opened read-only")
