"""`Host.set_plugins(allow=..., block=...)` at runtime.

A dispatch already running finishes on the bundle it read; arrivals after the switch see the
new plugin set: a kind whose plugin is no longer loaded is unknown, so its position is marked
skipped(unrecognised) with a WARNING (spec AC-D2), and loading the plugin again brings the
kind back. A plugin the host was opened without never loads by accident.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core import Host
from core.plugin.kinds import ActionKind
from core.plugin.selection import PluginSelection
from plugins import hookimpl
from plugins.testing.arrivals import action, arrive, build_board, stage
from plugins.testing.logs import LogRecord, matching
from tests.hosts.conftest import WAIT_S, Gate, markers_at, run_in_thread, states

QUEUE_RUN = action("queue_run", {"target": "participant_role:reviewer"})
UNRECOGNISED = "no plugin declares this action kind; skipped"


class Bystander:
    """A plugin given to the host but not on its allow-list: it must never load."""

    @hookimpl
    def laneway_register_action_kinds(self, register: Callable[[ActionKind], None]) -> None:
        register(ActionKind("bystander_kind", "durable", execute=lambda ctx, config: None))


def _board(host: Host, files: Path) -> Any:
    board = build_board(host, files, [action("gate"), QUEUE_RUN], wip_limit=0)
    profile = host.profiles.add("reviewer", command=["true"], role="reviewer")
    host.participants.add(
        step="Target", role="reviewer", profile=profile.id, workflow=board.workflow.id
    )
    return board


@pytest.mark.parametrize(
    "switch",
    [
        {"block": ["office"], "allow": ["kanban", "gate"]},
        {"allow": ["kanban", "gate"]},
    ],
    ids=["block", "allow"],
)
def test_dropping_a_plugin_mid_dispatch_and_loading_it_again(
    gated_host: Host,
    gate: Gate,
    files: Path,
    laneway_logs: list[LogRecord],
    switch: dict[str, list[str]],
) -> None:
    host = gated_host
    board = _board(host, files)
    running, later, again = (stage(host, board, "E2") for _ in range(3))

    thread, errors = run_in_thread(lambda: arrive(host, running))
    assert gate.entered.wait(WAIT_S)
    host.set_plugins(**switch)
    assert host.registry.kind("queue_run") is None
    assert "office" not in {p["name"] for p in host.plugins.list() if p["enabled"]}
    gate.release.set()
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert errors == []

    arrive(host, later)
    host.set_plugins(allow=["kanban", "office", "gate"], block=[])  # each list as given
    arrive(host, again)

    first, second, third = (host.tasks.get(s.task_id) for s in (running, later, again))
    assert states(markers_at(host, first))[1] == ("queue_run", "done", None)
    assert states(markers_at(host, second))[1] == ("queue_run", "skipped", "unrecognised")
    assert states(markers_at(host, third))[1] == ("queue_run", "done", None)
    assert [len(host.runs.list(task=t.id)) for t in (first, second, third)] == [1, 0, 1]
    (warning,) = matching(laneway_logs, "WARNING", task_id=second.id)
    assert (warning["message"], warning["extra"]["action_type"]) == (UNRECOGNISED, "queue_run")
    assert matching(laneway_logs, "ERROR") == []


def _host_without_bystander(url: str) -> Host:
    """kanban and office allowed; `bystander` given directly but not on the allow-list."""
    selection = PluginSelection(
        allow=frozenset({"kanban", "office"}), extra=(("bystander", Bystander()),)
    )
    return Host.open(url, plugins=selection)


def test_a_plugin_outside_the_allow_list_stays_out_across_switches(db_url: str) -> None:
    with _host_without_bystander(db_url) as host:
        assert host.registry.kind("bystander_kind") is None
        host.set_plugins(allow=["kanban"])
        assert host.registry.kind("clear_decisions") is None
        assert host.registry.kind("bystander_kind") is None
        assert host.registry.kind("move_to_next") is not None  # core is never dropped
        host.set_plugins(allow=["kanban", "office"])
        assert host.registry.kind("clear_decisions") is not None
        assert host.registry.kind("bystander_kind") is None


def test_blocking_a_plugin_keeps_the_rest_of_the_selection(db_url: str) -> None:
    with _host_without_bystander(db_url) as host:
        host.set_plugins(block=["office"])
        assert host.registry.kind("clear_decisions") is None
        assert host.registry.kind("bystander_kind") is None, "a plugin never allowed loaded"
