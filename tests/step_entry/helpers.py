"""Routes by which a task can arrive at a step, for spec/step-entry-sequence
(AC-OFFICE-STEP-ENTRY-001.x). Builds on tests.on_enter.helpers.

Each route gets its own workflow pair (`<name>` with Src -> Target -> Out, and `<name>-away`)
shaped for that route, and `drive` performs the arrival at Target through the route's real
entry point, returning the task.
"""

from __future__ import annotations

from typing import Any

import attrs

from core.model import Task, Workflow
from tests.on_enter.helpers import World, act


@attrs.frozen
class Route:
    name: str
    entry_path: str
    needs_session: bool = False


ROUTES = (
    Route("turn_complete", "E1", needs_session=True),
    Route("turn_start", "E1", needs_session=True),
    Route("decision", "E1"),
    Route("manual_move", "E2"),
    Route("promotion_in_place", "E3"),
    Route("promotion_from_feeder", "E3"),
    Route("switch_workflow", "E4"),
    Route("switch_workflow_action", "E4", needs_session=True),
    Route("task_update", "E5"),
    Route("task_start", "E5"),
)
ROUTE_IDS = [r.name for r in ROUTES]


def route_flow(world: World, route: Route, on_enter: list[dict[str, Any]]) -> Workflow:
    """Import the workflow pair `route` needs; returns the one holding Target."""
    name = f"{route.name}-{len(world.away) + 1}"
    to_target = act("move_to_step", step_position=1)
    src_events: dict[str, Any] = {}
    if route.name == "turn_complete":
        src_events["on_turn_complete"] = [to_target]
    elif route.name == "turn_start":
        src_events["on_turn_start"] = [to_target]
    elif route.name == "decision":
        src_events["on_turn_complete"] = [
            act(
                "move_to_step",
                step_position=1,
                **{"if": {"wait_for_quorum": {"role": "reviewer", "threshold": "all_approve"}}},
            )
        ]
    target: dict[str, Any] = {
        "name": "Target",
        "position": 1,
        "is_start_step": True,
        "wip_limit": 1,
        "events": {"on_enter": on_enter},
    }
    if route.name == "promotion_from_feeder":
        target["pull_from_step_position"] = 0
    away_events: dict[str, Any] = {}
    if route.name == "switch_workflow_action":
        away_events["on_turn_complete"] = [act("switch_workflow", workflow=name, step="Target")]
    wf, away = world.import_doc(
        [
            {
                "name": name,
                "steps": [
                    {"name": "Src", "position": 0, "events": src_events},
                    target,
                    {"name": "Out", "position": 2},
                ],
            },
            {
                "name": f"{name}-away",
                "steps": [{"name": "Away", "position": 0, "events": away_events}],
            },
        ]
    )
    world.away[wf.id] = away
    return wf


def place(world: World, wf: Workflow, route: Route, *, session: bool) -> Task:
    """A task set up so that `arrive` takes it into Target by `route`."""
    host = world.host
    if route.entry_path == "E4":
        task = host.tasks.create(workflow=world.away[wf.id].id, title=route.name)
    else:
        task = host.tasks.create(workflow=wf.id, title=route.name, step="Src")
    if session or route.needs_session:
        host.sessions.start(task.id)
    if route.name == "decision":
        world.seat(wf, "reviewer", "gatekeeper", step="Src")
    if route.name in ("promotion_in_place", "promotion_from_feeder"):
        holder = host.tasks.create(workflow=wf.id, title="holder", step="Target")
        world.holders[task.id] = holder.id
        if route.name == "promotion_in_place":
            assert host.tasks.move(task.id, "Target").wip_admitted is False
    return host.tasks.get(task.id)


def arrive(world: World, wf: Workflow, task_id: str, route: Route) -> None:
    host = world.host
    name = route.name
    if name == "turn_complete":
        host.turns.complete(task_id)
    elif name == "turn_start":
        host.turns.start(task_id)
    elif name == "decision":
        (seat,) = host.participants.list(step="Src", task=task_id)
        host.decisions.record(task_id, "Src", seat.id, "approved")
    elif name == "manual_move":
        host.tasks.move(task_id, "Target")
    elif name in ("promotion_in_place", "promotion_from_feeder"):
        host.tasks.move(world.holders.pop(task_id), "Out")
    elif name == "switch_workflow":
        host.tasks.switch_workflow(task_id, workflow=wf.id, step="Target")
    elif name == "switch_workflow_action":
        host.turns.complete(task_id)
    elif name == "task_update":
        host.tasks.update(task_id, step="Target")
    elif name == "task_start":
        host.tasks.start(task_id)
    else:
        raise AssertionError(name)
    got = host.tasks.get(task_id)
    assert (got.workflow_step_id, got.wip_admitted) == (World.step_id(wf), True), name


def drive(
    world: World, route: Route, on_enter: list[dict[str, Any]], *, session: bool = True
) -> tuple[Workflow, Task]:
    wf = route_flow(world, route, on_enter)
    task = place(world, wf, route, session=session)
    arrive(world, wf, task.id, route)
    return wf, world.host.tasks.get(task.id)
