"""`Registry.unavailable` / `unavailable_guard`: the one wording of why a kind cannot run (or a
guard never passes), which the workflow check reports and the dispatcher's WARNING carries as
its ``why`` field (house issue 26, item 1: one `unavailable(name)` answer used by every caller).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from core.plugin.kinds import (
    ActionContext,
    ActionKind,
    Features,
    GuardContext,
    GuardKind,
    GuardResult,
    Outcome,
)
from core.plugin.loading import load_plugins
from core.plugin.registry import Registry, build_registry
from core.plugin.selection import PluginSelection
from plugins import hookimpl


def _run(ctx: ActionContext, config: Any) -> Outcome | None:
    return None


def _never(ctx: GuardContext, config: Any) -> GuardResult:
    return GuardResult(False)


class Declaring:
    @hookimpl
    def laneway_register_action_kinds(self, register: Callable[[ActionKind], None]) -> None:
        register(ActionKind("runs", "durable", execute=_run))
        register(ActionKind("officeish", "durable", execute=_run, feature="office"))
        register(ActionKind("declared_only", "durable"))

    @hookimpl
    def laneway_register_guards(self, register: Callable[[GuardKind], None]) -> None:
        register(GuardKind("clock", lambda c: c, _never))
        register(GuardKind("quorumish", lambda c: c, _never, feature="office"))


def _registry(office: bool) -> Registry:
    loaded = load_plugins(PluginSelection(entry_points=False, extra=(("decl", Declaring()),)))
    return build_registry(loaded, Features(office=office))


@pytest.mark.parametrize(
    ("office", "kind", "why"),
    [
        (True, "runs", None),
        (False, "runs", None),
        (True, "officeish", None),
        (False, "officeish", "kind 'officeish' has no executor (feature 'office' is off)"),
        (True, "teleport", "kind 'teleport' is not declared by any loaded plugin"),
        (
            True,
            "declared_only",
            "kind 'declared_only' has no executor (plugin 'decl' declares no executor)",
        ),
    ],
)
def test_unavailable_says_why_a_kind_cannot_run(office: bool, kind: str, why: str | None) -> None:
    """Issue 26: None exactly when the kind runs (`executable`); else one line naming the kind
    and why: nobody declares it, its feature is off, or its plugin gave it no executor."""
    registry = _registry(office)
    assert registry.unavailable(kind) == why
    registered = registry.kind(kind)
    assert (why is None) == (registered is not None and registered.executable)


@pytest.mark.parametrize(
    ("office", "guard", "on", "why"),
    [
        (True, "clock", None, None),
        (False, "clock", None, None),
        (True, "quorumish", None, None),
        (False, "quorumish", None, "guard 'quorumish' never passes (feature 'office' is off)"),
        (
            False,
            "quorumish",
            "move_to_next",
            "guard 'quorumish' on kind 'move_to_next' never passes (feature 'office' is off)",
        ),
        (True, "votes", None, "guard 'votes' is not declared by any loaded plugin"),
    ],
)
def test_unavailable_guard_says_why_a_guard_never_passes(
    office: bool, guard: str, on: str | None, why: str | None
) -> None:
    """Issue 26: a guard's answer in the same words, naming the kind it sits on when given."""
    registry = _registry(office)
    assert registry.unavailable_guard(guard, on=on) == why
    registered = registry.guard(guard)
    assert (why is None) == (registered is not None and registered.enabled)
