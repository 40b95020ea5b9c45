"""Features keyed by the names plugins declare (house issue 26, item 1): a third-party plugin
whose kind and guard name a feature of their own (``lights``) gets a board switch for it,
stored in board settings like Office's, on until switched off; `office` keeps working beside
it, and a feature nobody declares is refused by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from core import Features, Host, LanewayError
from core.plugin.kinds import (
    ActionContext,
    ActionKind,
    GuardContext,
    GuardKind,
    GuardResult,
    Outcome,
)
from core.plugin.selection import PluginSelection
from core.store import tables as t
from plugins import hookimpl

FEATURE = "lights"


def _run(ctx: ActionContext, config: Any) -> Outcome | None:
    return None


def _always(ctx: GuardContext, config: Any) -> GuardResult:
    return GuardResult(True)


class Lights:
    """A plugin of someone else's: one durable kind and one guard, both in its own feature."""

    @hookimpl
    def laneway_register_action_kinds(self, register: Callable[[ActionKind], None]) -> None:
        register(ActionKind("lights_on", "durable", execute=_run, feature=FEATURE))

    @hookimpl
    def laneway_register_guards(self, register: Callable[[GuardKind], None]) -> None:
        register(GuardKind("lights_green", lambda c: c, _always, feature=FEATURE))


def _open(url: str) -> Host:
    allow = frozenset({"office", FEATURE})
    selection = PluginSelection(allow=allow, extra=((FEATURE, Lights()),))
    return Host.open(url, plugins=selection)


def _stored(url: str) -> str:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return str(conn.execute(sa.select(t.board_settings.c.features)).scalar_one())
    finally:
        engine.dispose()


def test_a_declared_feature_is_listed_and_on_until_switched_off(sqlite_url: str) -> None:
    """Issue 26: the registry lists the features its plugins declare, beside `office`; a
    declared feature nobody switched is on, so the plugin's kind runs and its guard passes."""
    with _open(sqlite_url) as host:
        assert host.registry.declared_features == ("lights", "office")
        assert host.features.enabled(FEATURE) is True
        assert host.registry.unavailable("lights_on") is None
        assert host.registry.unavailable_guard("lights_green") is None


def test_a_declared_feature_switches_off_and_on_in_board_settings(sqlite_url: str) -> None:
    """Issue 26: `set_features(lights=False)` is stored in board settings (as Office's
    switch is), the plugin's kind loses its executor and its guard never passes, a host
    opened later follows the board, and switching it on again restores both; `office` is
    untouched throughout."""
    with _open(sqlite_url) as host:
        host.set_features(lights=False)
        assert host.features == Features(lights=False)
        assert host.features.office is True
        assert host.registry.unavailable("lights_on") == (
            "kind 'lights_on' has no executor (feature 'lights' is off)"
        )
        assert host.registry.unavailable_guard("lights_green") == (
            "guard 'lights_green' never passes (feature 'lights' is off)"
        )
        assert host.registry.unavailable("clear_decisions") is None  # office's, still on
    assert '"lights":false' in _stored(sqlite_url)
    with _open(sqlite_url) as later:
        assert later.board_features().as_dict() == {"lights": False, "office": True}
        assert later.features.enabled(FEATURE) is False
        later.set_features(lights=True, office=False)
        assert later.registry.unavailable("lights_on") is None
        assert later.features.office is False
        assert later.registry.unavailable("clear_decisions") == (
            "kind 'clear_decisions' has no executor (feature 'office' is off)"
        )


def test_a_feature_nobody_declares_is_refused_by_name(sqlite_url: str) -> None:
    """Issue 26: a switch for a feature no loaded plugin declares is a one-line error naming
    it and the known ones (the declared feature among them); the board is unchanged."""
    with _open(sqlite_url) as host:
        with pytest.raises(
            LanewayError, match=r"unknown feature 'turbo' \(known: lights, office\)"
        ):
            host.set_features(turbo=True)
        assert host.board_features() == Features()


def test_features_equal_by_their_switches() -> None:
    """`Features()` is Office on; `Features(office=True)` is the same value, and a declared
    feature given on is a different value that still leaves Office on."""
    assert Features() == Features(office=True)
    assert Features().as_dict() == {"office": True}
    assert Features(lights=True).as_dict() == {"lights": True, "office": True}
    assert Features(office=False).switched(lights=False).as_dict() == {
        "lights": False,
        "office": False,
    }
    assert Features().enabled("never_declared") is True
    assert Features().enabled(None) is True
