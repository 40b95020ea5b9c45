"""`Host.set_features(office=...)` at runtime (DESIGN: the bundle is published by one atomic
swap and read once per dispatch; spec AC-A6/AC-D2 for a disabled Office).

- A dispatch already running finishes on the bundle it read; arrivals after the switch see
  the new one, both ways (on -> off and off -> on).
- With Office off, Office's kinds are recognised but have no executor: each is marked
  skipped(no_executor) with a WARNING naming the kind and the feature; nothing errors, no
  entry is left open, and its guard never passes. Off at open and switched off at runtime
  behave alike.
- A kanban workflow behaves exactly the same with Office on, off, and switched either way.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from core import Host
from core.model import Task
from plugins.testing.arrivals import action, arrive, build_board, stage
from plugins.testing.logs import LogRecord, matching
from tests.hosts.conftest import (
    WAIT_S,
    Gate,
    markers_at,
    open_with,
    problems,
    run_in_thread,
    states,
)

QUEUE_RUN = action("queue_run", {"target": "participant_role:reviewer"})
NO_EXECUTOR = "action kind has no executor in this configuration; skipped"


def _reviewer_at_target(host: Host, workflow_id: str) -> None:
    profile = host.profiles.add("reviewer", command=["true"], role="reviewer")
    host.participants.add(step="Target", role="reviewer", profile=profile.id, workflow=workflow_id)


@pytest.mark.parametrize("office_before", [True, False], ids=["on-to-off", "off-to-on"])
def test_a_running_dispatch_finishes_on_the_bundle_it_read(
    gated_host: Host,
    gate: Gate,
    files: Path,
    laneway_logs: list[LogRecord],
    office_before: bool,
) -> None:
    host = gated_host
    host.set_features(office=office_before)
    board = build_board(host, files, [action("gate"), QUEUE_RUN], wip_limit=0)
    _reviewer_at_target(host, board.workflow.id)
    running, later = stage(host, board, "E2"), stage(host, board, "E2")

    thread, errors = run_in_thread(lambda: arrive(host, running))
    assert gate.entered.wait(WAIT_S), "the first dispatch never reached the gate"
    before = host.bundle.generation
    host.set_features(office=not office_before)  # while that dispatch is mid-walk
    assert host.bundle.generation == before + 1
    assert host.bundle.registry.kind("queue_run").executable is (not office_before)  # type: ignore[union-attr]
    gate.release.set()
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert errors == []
    arrive(host, later)

    def outcome(office: bool) -> tuple[str, str | None]:
        return ("done", None) if office else ("skipped", "no_executor")

    first, second = host.tasks.get(running.task_id), host.tasks.get(later.task_id)
    assert states(markers_at(host, first)) == [
        ("gate", "done", None),
        ("queue_run", *outcome(office_before)),
    ]
    assert states(markers_at(host, second)) == [
        ("gate", "done", None),
        ("queue_run", *outcome(not office_before)),
    ]
    assert len(host.runs.list(task=first.id)) == int(office_before)
    assert len(host.runs.list(task=second.id)) == int(not office_before)
    skipped = first if not office_before else second
    (warning,) = matching(laneway_logs, "WARNING", task_id=skipped.id, action_type="queue_run")
    assert (warning["message"], warning["extra"]["feature"]) == (NO_EXECUTOR, "office")
    assert [r for r in problems(laneway_logs) if r is not warning] == []


# -- Office off: warn, never error, never stall -----------------------------------------------


def _office_board(host: Host) -> tuple[str, list[str]]:
    """Office Default with two reviewer seats at Review; returns (workflow id, seat ids)."""
    wf = host.workflows.create_from_template("office-default")
    seats = []
    for name in ("rev-a", "rev-b"):
        profile = host.profiles.add(name, command=["true"], role="reviewer")
        seats.append(
            host.participants.add(
                step="Review", role="reviewer", profile=profile.id, workflow=wf.id
            ).id
        )
    return wf.id, seats


@pytest.mark.parametrize("switched", ["at-open", "at-runtime"])
def test_with_office_off_its_kinds_warn_and_nothing_errors_or_stalls(
    db_url: str, laneway_logs: list[LogRecord], switched: str
) -> None:
    with open_with(db_url, office=switched != "at-open") as host:
        if switched == "at-runtime":
            host.set_features(office=False)
        workflow_id, seats = _office_board(host)
        task = host.tasks.create(workflow=workflow_id, title="office is off")
        host.sessions.start(task.id)

        moved = host.turns.complete(task.id)  # Work -> Review (E1)
        assert moved["transitioned"] is True
        at_review = host.tasks.get(task.id)
        assert states(markers_at(host, at_review)) == [
            ("clear_decisions", "skipped", "no_executor"),
            ("queue_run_for_each_participant", "skipped", "no_executor"),
        ]
        assert host.entries.list(task=task.id, non_terminal=True) == []
        assert host.runs.list(task=task.id) == []

        # the quorum guard is Office's too: its transitions are never taken, with a warning
        for seat in seats:
            host.decisions.record(task.id, "Review", seat, "approved")
        assert host.turns.complete(task.id)["transitioned"] is False
        assert host.tasks.get(task.id).workflow_step_id == at_review.workflow_step_id

        # a manual move still works and its entry closes the same way
        host.tasks.move(task.id, "Approval")
        assert states(markers_at(host, host.tasks.get(task.id))) == [
            ("clear_decisions", "skipped", "no_executor"),
            ("queue_run_for_each_participant", "skipped", "no_executor"),
        ]
        assert host.entries.list(task=task.id, non_terminal=True) == []

    assert matching(laneway_logs, "ERROR") == []
    skipped = matching(laneway_logs, "WARNING", task_id=task.id, feature="office")
    assert sorted((r["extra"]["action_type"], r["message"]) for r in skipped) == sorted(
        [
            ("clear_decisions", NO_EXECUTOR),
            ("queue_run_for_each_participant", NO_EXECUTOR),
        ]
        * 2
    )
    guard_warnings = matching(laneway_logs, "WARNING", task_id=task.id, guard="wait_for_quorum")
    assert guard_warnings, "a guard whose feature is off must say why its move was not taken"


# -- a kanban workflow does not notice -------------------------------------------------------------

KANBAN = """
version: 1
type: kandev_workflow
workflows:
  - name: Plain
    steps:
      - name: Todo
        position: 0
        is_start_step: true
        events:
          on_turn_complete: [{type: move_to_next}]
      - name: Plan
        position: 1
        events:
          on_enter:
            - {type: auto_start_agent}
            - {type: enable_plan_mode}
            - {type: set_session_mode, config: {mode: plan}}
            - {type: set_workflow_data, config: {key: phase, value: plan}}
            - type: configure_session
              config: {rules: [{agent_name: claude, operation: set, model: opus}]}
            - {type: reset_agent_context}
          on_turn_complete: [{type: move_to_next}]
      - name: Build
        position: 2
        events:
          on_enter:
            - {type: disable_plan_mode}
            - {type: set_session_mode, config: {mode: build}}
            - {type: auto_start_agent}
          on_turn_complete: [{type: move_to_next}]
          on_turn_start: [{type: move_to_previous}]
      - name: Done
        position: 3
        events:
          on_enter: [{type: set_workflow_data, config: {key: phase, value: done}}]
"""

_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _named(value: Any, names: dict[str, str]) -> Any:
    """`value` with every id replaced by a name (steps, workflows) or a placeholder."""
    if isinstance(value, dict):
        return {k: _named(v, names) for k, v in sorted(value.items()) if not k.endswith("_at")}
    if isinstance(value, list | tuple):
        return [_named(v, names) for v in value]
    if isinstance(value, str) and value in names:
        return names[value]
    if isinstance(value, str) and _ID.match(value):
        return "<id>"
    return value


def _kanban_trace(host: Host, files: Path, logs: list[LogRecord]) -> list[Any]:
    """Walk a task through a kanban workflow (and the shipped Kanban template) and record,
    after every step, everything observable, with ids replaced by names."""
    (plain,) = build_kanban(host, files)
    simple = host.workflows.create_from_template("simple")
    names = {s.id: s.name for wf in (plain, simple) for s in wf.steps}
    names.update({plain.id: plain.name, simple.id: simple.name})
    trace: list[Any] = []

    def snapshot(label: str, task: Task) -> None:
        now = host.tasks.get(task.id)
        session = host.sessions.live(task.id)
        trace.append(
            {
                "after": label,
                "step": names.get(now.workflow_step_id or ""),
                "state": now.state,
                "session": _named(dict(session.metadata), names) if session else None,
                "entries": [
                    (names[e.step_id], e.entry_seq, e.entry_path, e.terminal, states(m))
                    for e, m in host.entries.list(task=task.id)
                ],
                "runs": [(r.reason, r.status) for r in host.runs.list(task=task.id)],
                "problems": [
                    (r["level"], r["message"], r["extra"].get("action_type"))
                    for r in problems(logs)
                    if r["extra"].get("task_id") == task.id
                ],
            }
        )

    task = host.tasks.create(workflow=plain.id, title="plain")
    host.sessions.start(task.id)
    for label in ("todo->plan", "plan->build", "build->done"):
        host.turns.complete(task.id)
        snapshot(label, task)
    host.tasks.move(task.id, "Build")
    snapshot("manual back to build", task)
    host.turns.start(task.id)  # on_turn_start: back to Plan
    snapshot("turn start", task)
    host.tasks.update(task.id, step="Done")
    snapshot("update to done", task)

    other = host.tasks.create(workflow=simple.id, title="simple", step="Backlog")
    host.sessions.start(other.id)
    host.tasks.start(other.id)  # to the start step, In Progress: auto_start_agent
    snapshot("simple start", other)
    host.turns.complete(other.id)
    snapshot("simple turn complete", other)
    return trace


def build_kanban(host: Host, files: Path) -> list[Any]:
    path = files / "plain.yml"
    path.write_text(KANBAN)
    return host.workflows.import_file(path)


def _trace_for(db_url: str, files: Path, how: str) -> list[Any]:
    from plugins.testing.logs import captured

    office_at_open = how in ("on", "on-then-off")
    with captured() as logs, open_with(db_url, office=office_at_open) as host:
        if how == "on-then-off":
            host.set_features(office=False)
        elif how == "off-then-on":
            host.set_features(office=True)
        return _kanban_trace(host, files, logs)


@pytest.mark.parametrize("how", ["off", "on-then-off", "off-then-on"])
def test_a_kanban_workflow_behaves_the_same_whatever_office_is(
    db_url: str, tmp_path: Path, how: str
) -> None:
    baseline_dir, other_dir = tmp_path / "on", tmp_path / how
    baseline_dir.mkdir()
    other_dir.mkdir()
    # two databases side by side: a fresh one for each run (SQLite files; PostgreSQL is reset)
    if db_url.startswith("sqlite"):
        baseline_url = f"sqlite:///{baseline_dir / 'board.db'}"
        other_url = f"sqlite:///{other_dir / 'board.db'}"
        baseline = _trace_for(baseline_url, baseline_dir, "on")
        other = _trace_for(other_url, other_dir, how)
    else:
        baseline = _trace_for(db_url, baseline_dir, "on")
        _reset(db_url)
        other = _trace_for(db_url, other_dir, how)
    assert other == baseline
    # and the walk did do something: the trace is not trivially equal
    assert baseline[0]["step"] == "Plan"
    assert baseline[0]["session"]["plan_mode"] is True
    assert baseline[1]["session"]["session_mode"] == "build"
    assert all(p == [] for p in (s["problems"] for s in baseline[:3]))


def _reset(url: str) -> None:
    from tests.conftest import _reset_postgres

    _reset_postgres(url)
