"""spec/on-enter-action-dispatch, group H (defaults and repeated declarations): AC-H1 ... AC-H9.

AC-H7's canonical digest is asserted by its observable consequence, not by reading the key's
format: an entry whose fan-out ran and whose process then "died" before the marker settled is
resumed by the next host (AC-B9) after its declaration's config was edited (same kinds and
order, so the declaration digest still matches); when the edit is canonically equal, the
re-run produces the same keys and is idempotency-suppressed; when it is not, new runs appear.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core import ids, runs
from core.plugin.kinds import Features
from core.runs import RunRequest
from core.store import tables as t
from tests.on_enter.helpers import (
    PATHS,
    KindsPlugin,
    Timeline,
    World,
    act,
    fan_out_infos,
    open_host,
    open_world,
)

RULES = [{"agent_name": "claude", "operation": "keep"}]


@pytest.fixture
def world(db_url: str, tmp_path: Path) -> Iterator[World]:
    with open_world(db_url, tmp_path) as w:
        yield w


# -- AC-H1 / AC-H2 / AC-H3 -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "reason"),
    [({}, "on_enter"), ({"reason": "on_enter"}, "on_enter"), ({"reason": "review"}, "review")],
    ids=["omitted", "explicit-default", "explicit"],
)
def test_ac_h1_omitted_reason_is_on_enter(
    world: World, config: dict[str, Any], reason: str
) -> None:
    """AC-H1: a fan-out without `reason` queues its run with the literal reason on_enter (not
    empty, not the step name); an explicit reason is kept."""
    wf = world.flow([act("queue_run_for_each_participant", role="reviewer", **config)])
    world.seat(wf, "reviewer", "rev")
    task = world.enter(wf, "E2")
    assert [r.reason for r in world.runs(task.id)] == [reason]


@pytest.mark.parametrize(
    ("config", "stored"),
    [({}, None), ({"payload": None}, None), ({"payload": {"pr": 7}}, {"pr": 7})],
    ids=["omitted", "explicit-null", "given"],
)
def test_ac_h2_omitted_payload_is_sql_null(
    world: World, config: dict[str, Any], stored: Any
) -> None:
    """AC-H2: a fan-out without `payload` (or with an explicit null) enqueues its run with no
    payload: SQL NULL, not an empty object."""
    wf = world.flow([act("queue_run_for_each_participant", role="reviewer", **config)])
    world.seat(wf, "reviewer", "rev")
    task = world.enter(wf, "E2")
    ((raw,),) = world.raw_payloads(task.id)
    if stored is None:
        assert raw is None
    else:
        assert json.loads(raw) == stored
    assert [r.payload for r in world.runs(task.id)] == [stored]


def test_ac_h3_fan_out_selects_by_role_alone(world: World) -> None:
    """AC-H3: participants are selected by role alone: a reviewer seated with
    decision_required false gets a run just like one with it true."""
    wf = world.flow([act("queue_run_for_each_participant", role="reviewer")])
    world.seat(wf, "reviewer", "required", decision_required=True)
    world.seat(wf, "reviewer", "optional", position=1, decision_required=False)
    task = world.enter(wf, "E2")
    assert sorted(r.agent_profile_id for r in world.runs(task.id)) == sorted(
        [world.profile("required").id, world.profile("optional").id]
    )


# -- AC-H4 / AC-H5 / AC-H8 -------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_ac_h4_a_repeated_kind_runs_each_declaration_in_order(world: World, path: str) -> None:
    """AC-H4: the same kind declared more than once executes once per declaration, in
    declared order (session and durable kinds alike)."""
    boss = world.profile("boss")
    wf = world.flow(
        [
            act("set_session_mode", mode="a"),
            act("queue_run", target=f"agent_profile_id:{boss.id}", reason="r1"),
            act("set_session_mode", mode="b"),
            act("queue_run", target=f"agent_profile_id:{boss.id}", reason="r2"),
            act("clear_decisions"),
            act("clear_decisions"),
        ]
    )
    timeline = Timeline().install(world.host)
    task = world.enter(wf, path)
    assert timeline.of(task.id) == [
        "set_session_mode:a",
        "enqueue:r1",
        "set_session_mode:b",
        "enqueue:r2",
        "clear_decisions",
        "clear_decisions",
    ]
    assert world.meta(task.id)["session_mode"] == "b"
    markers = world.markers(task.id)
    assert {p: m.state for p, m in markers.items()} == {1: "done", 3: "done", 4: "done", 5: "done"}


def test_ac_h5_the_same_fan_out_declared_twice_fans_out_twice(
    world: World, laneway_logs: list[dict[str, Any]]
) -> None:
    """AC-H5 (+ AC-B4's negative): queue_run_for_each_participant{role: reviewer} declared
    twice with identical config, one reviewer: two runs for that reviewer, not one; their keys
    differ in position, and neither enqueue is an idempotency suppression (one AC-G1 record
    per declaration, suppressed=0 in both)."""
    wf = world.flow(
        [
            act("queue_run_for_each_participant", role="reviewer"),
            act("queue_run_for_each_participant", role="reviewer"),
        ]
    )
    world.seat(wf, "reviewer", "rev")
    task = world.place(wf, "E2")
    laneway_logs.clear()
    world.arrive(wf, task.id, "E2")
    found = world.runs(task.id)
    assert [r.agent_profile_id for r in found] == [world.profile("rev").id] * 2
    assert found[0].idempotency_key != found[1].idempotency_key
    infos = fan_out_infos(laneway_logs, task.id)
    assert [(i["extra"]["enqueued"], i["extra"]["suppressed"]) for i in infos] == [(1, 0), (1, 0)]


@pytest.mark.parametrize("path", PATHS)
def test_ac_h8_reset_and_configure_run_at_most_once_per_entry(world: World, path: str) -> None:
    """AC-H8: reset_agent_context and configure_session declared twice each execute at most
    once per entry (configure_session not at all on E4, where it has no owner)."""
    wf = world.flow(
        [
            act("reset_agent_context"),
            act("configure_session", rules=RULES),
            act("clear_decisions"),
            act("reset_agent_context"),
            act("configure_session", rules=RULES),
        ]
    )
    timeline = Timeline().install(world.host)
    task = world.enter(wf, path)
    got = timeline.of(task.id)
    assert got.count("reset_agent_context") == 1
    assert got.count("configure_session") == (0 if path == "E4" else 1)
    meta = world.meta(task.id)
    assert len(meta["context_resets"]) == 1
    assert len(meta.get("configured", [])) == (0 if path == "E4" else 1)


# -- AC-H6 -----------------------------------------------------------------------------------------


def test_ac_h6_idempotency_window_is_fixed_at_24_hours(world: World) -> None:
    """AC-H6 (the spec asks no test: it only says the constant is not made configurable; this
    pins it): the window is the module constant 24h, not a host feature or setting, and it
    behaves as 24h: a key first requested 23h59m ago suppresses, one from 24h01m ago does
    not."""
    assert runs.IDEMPOTENCY_WINDOW_S == 24 * 3600
    assert "idempotency" not in " ".join(a.name for a in Features.__attrs_attrs__)
    agent = world.profile("rev").id
    now = ids.now()
    for key, age in (("recent", 24 * 3600 - 60), ("old", 24 * 3600 + 60)):
        with world.host.store.transaction() as uow:
            uow.conn.execute(
                sa.insert(t.runs).values(
                    id=ids.new_id(),
                    agent_profile_id=agent,
                    reason=f"r-{key}",
                    idempotency_key=key,
                    status="finished",
                    requested_at=ids.shift(now, -age),
                )
            )
    recent = world.host.runs.enqueue(
        RunRequest(agent, None, None, "x-recent", idempotency_key="recent")
    )
    old = world.host.runs.enqueue(RunRequest(agent, None, None, "x-old", idempotency_key="old"))
    assert (recent.outcome, old.outcome) == ("suppressed", "inserted")


# -- AC-H7 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("edited", "same_key"),
    [
        ({"role": "reviewer", "reason": "on_enter", "payload": None}, True),
        ({"payload": None, "role": "reviewer"}, True),
        ({"role": "reviewer", "note": "not a key field"}, True),
        ({"role": "reviewer", "reason": "other"}, False),
        ({"role": "reviewer", "payload": {"pr": 1}}, False),
    ],
    ids=["explicit-defaults", "explicit-null-reordered", "unnamed-field", "reason", "payload"],
)
def test_ac_h7_config_digest_is_canonical(
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    laneway_logs: list[dict[str, Any]],
    edited: dict[str, Any],
    same_key: bool,
) -> None:
    """AC-H7: the key's config digest covers role, reason and payload after defaults, with
    sorted keys: `{role: reviewer}` and `{role: reviewer, reason: on_enter, payload: null}`
    (in any key order) and a variant differing only in an unnamed field give the same key (a
    replay is suppressed); a different reason or payload gives a different key (new run)."""
    plugin = KindsPlugin()
    files = tmp_path / "files"
    files.mkdir()

    with open_host(db_url, plugin) as first:
        world = World(first, files, plugin, db_url)
        wf = world.flow([act("queue_run_for_each_participant", role="reviewer")])
        world.seat(wf, "reviewer", "rev")
        task = world.place(wf, "E2")
        world.arrive(wf, task.id, "E2")
        # the fan-out commits runs and marker together: reopen the marker as a fan-out
        # recorded apart from its runs would have left it, so recovery replays it
        world.reopen(task.id, 0)
        (before,) = world.runs(task.id)
        target = world.step_id(wf)
        s = t.workflow_steps
        with first.store.transaction() as uow:
            events = json.loads(
                uow.conn.execute(sa.select(s.c.events).where(s.c.id == target)).scalar_one()
            )
            events["on_enter"][0]["config"] = edited
            uow.conn.execute(sa.update(s).where(s.c.id == target).values(events=json.dumps(events)))

    laneway_logs.clear()
    with open_host(db_url, plugin) as second:  # recovery re-runs the fan-out
        world = World(second, files, plugin, db_url)
        after = world.runs(task.id)
        (info,) = fan_out_infos(laneway_logs, task.id)
        assert world.markers(task.id)[0].state == "done"
        if same_key:
            assert [r.id for r in after] == [before.id]
            assert info["extra"]["suppressed"] == 1
        else:
            assert len(after) == 2
            assert after[1].idempotency_key != before.idempotency_key
            assert info["extra"]["suppressed"] == 0


# -- AC-H9 -----------------------------------------------------------------------------------------


def test_ac_h9_on_enter_runs_are_excluded_from_coalescing(world: World) -> None:
    """AC-H9: a re-entry within the 5-second window, while the previous entry's run is still
    queued, enqueues a new runnable run instead of being merged into it: both rows exist,
    queued, carrying the discrete coalescing-exclusion field, each with coalesced_count 1.
    (The window is live: two ordinary requests for the same agent and reason do coalesce.)"""
    wf = world.flow([act("queue_run_for_each_participant", role="reviewer", reason="review")])
    world.seat(wf, "reviewer", "rev")
    task = world.enter(wf, "E2")
    world.host.tasks.move(task.id, "Out")
    world.host.tasks.move(task.id, "Target")
    found = world.runs(task.id)
    assert [(r.status, r.coalesce_exempt, r.coalesced_count) for r in found] == [
        ("queued", True, 1)
    ] * 2
    assert found[0].idempotency_key != found[1].idempotency_key

    agent = world.profile("rev").id
    first = world.host.runs.enqueue(RunRequest(agent, task.id, None, "plain"))
    second = world.host.runs.enqueue(RunRequest(agent, task.id, None, "plain"))
    assert (first.outcome, second.outcome) == ("inserted", "coalesced")
    # and an ordinary request never coalesces into an on_enter run either
    third = world.host.runs.enqueue(RunRequest(agent, task.id, None, "review"))
    assert third.outcome == "inserted"
