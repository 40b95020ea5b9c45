"""Make a task arrive at a step through each entry path, E1 to E5, by the real routes.

`build_board` imports a portable workflow of three steps, ``Src -> Target -> Out``, where
Target (WIP limit 1) declares the on_enter actions under test, plus a one-step workflow
``... away`` that E4 switches from. Then ``enter(host, board, path)`` puts a fresh task at
Target through `path`:

====  ===================================================================================
E1    a session is started, and ``host.turns.complete`` fires Src's on_turn_complete
      ``move_to_step`` to Target
E2    ``host.tasks.move(task, "Target")``
E3    WIP promotion: a holder fills Target, the task queues for it, and archiving the holder
      promotes the task
E4    ``host.tasks.switch_workflow`` from the away workflow into Target
E5    ``host.tasks.update(task, step="Target")``
====  ===================================================================================

`stage` and `arrive` are the two halves of `enter`, for a test that needs to act between
them (close the host, arrange state, arm a fault point in a subprocess).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import yaml

from core.host import Host
from plugins.api import Step, Task, Workflow

ENTRY_PATHS: Final = ("E1", "E2", "E3", "E4", "E5")
TARGET: Final = "Target"
SOURCE: Final = "Src"
OUT: Final = "Out"

_numbers = itertools.count(1)


def action(kind: str, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One declared action, as a workflow file writes it."""
    return {"type": kind, "config": dict(config or {})}


@attrs.frozen
class Board:
    """The workflows `build_board` imported."""

    workflow: Workflow
    away: Workflow
    """The one-step workflow E4 switches from."""

    @property
    def target(self) -> Step:
        step = self.workflow.step(TARGET)
        assert step is not None
        return step

    def step(self, name: str) -> Step:
        step = self.workflow.step(name)
        assert step is not None, f"no step {name!r} in {self.workflow.name!r}"
        return step


def board_document(
    name: str,
    on_enter: Sequence[Mapping[str, Any]],
    *,
    on_agent_error: Sequence[Mapping[str, Any]] = (),
    wip_limit: int = 1,
) -> dict[str, Any]:
    """The portable workflow file `build_board` imports."""
    target_events: dict[str, Any] = {"on_enter": [dict(a) for a in on_enter]}
    if on_agent_error:
        target_events["on_agent_error"] = [dict(a) for a in on_agent_error]
    return {
        "version": 1,
        "type": "kandev_workflow",
        "workflows": [
            {
                "name": name,
                "steps": [
                    {
                        "name": SOURCE,
                        "position": 0,
                        "is_start_step": True,
                        "events": {
                            "on_turn_complete": [action("move_to_step", {"step_position": 1})]
                        },
                    },
                    {
                        "name": TARGET,
                        "position": 1,
                        "wip_limit": wip_limit,
                        "events": target_events,
                    },
                    {"name": OUT, "position": 2},
                ],
            },
            {"name": f"{name} away", "steps": [{"name": "Away", "position": 0}]},
        ],
    }


def build_board(
    host: Host,
    directory: Path,
    on_enter: Sequence[Mapping[str, Any]],
    *,
    on_agent_error: Sequence[Mapping[str, Any]] = (),
    wip_limit: int = 1,
    name: str | None = None,
) -> Board:
    """Import the board into `host` (the file is written to `directory`)."""
    number = next(_numbers)
    name = name or f"Contract board {number}"
    document = board_document(name, on_enter, on_agent_error=on_agent_error, wip_limit=wip_limit)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"board-{number}.yml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    workflow, away = host.workflows.import_file(path)
    return Board(workflow, away)


@attrs.frozen
class Staged:
    """A task placed so that `arrive` brings it to Target through `path`."""

    task_id: str
    path: str
    board: Board
    holder_id: str | None = None
    """E3: the task holding Target's only WIP slot."""


def stage(
    host: Host, board: Board, path: str, *, session: bool = True, title: str = "contract task"
) -> Staged:
    """Create a task positioned for `path`; with `session`, start a live session for it.

    E1 always has a session: a turn completes on one.
    """
    if path not in ENTRY_PATHS:
        raise ValueError(f"unknown entry path {path!r}: one of {', '.join(ENTRY_PATHS)}")
    if path == "E4":
        task = host.tasks.create(workflow=board.away.id, title=title)
    else:
        task = host.tasks.create(workflow=board.workflow.id, title=title, step=SOURCE)
    if session or path == "E1":
        host.sessions.start(task.id)
    holder: str | None = None
    if path == "E3":
        holder = host.tasks.create(
            workflow=board.workflow.id, title=f"{title} (holder)", step=TARGET
        ).id
        queued = host.tasks.move(task.id, TARGET)
        if queued.wip_admitted:
            raise AssertionError("E3 needs Target full: its wip_limit must be 1")
    return Staged(task.id, path, board, holder)


def arrive(host: Host, staged: Staged) -> Task:
    """Drive the staged task into Target through its path's real route; returns the task."""
    path = staged.path
    if path == "E1":
        result = host.turns.complete(staged.task_id)
        if result.get("transitioned") is not True:
            raise AssertionError(f"E1: the turn completed without a transition: {result}")
    elif path == "E2":
        host.tasks.move(staged.task_id, TARGET)
    elif path == "E3":
        assert staged.holder_id is not None
        host.tasks.archive(staged.holder_id)
    elif path == "E4":
        host.tasks.switch_workflow(staged.task_id, workflow=staged.board.workflow.id, step=TARGET)
    elif path == "E5":
        host.tasks.update(staged.task_id, step=TARGET)
    task = host.tasks.get(staged.task_id)
    if (task.workflow_step_id, task.wip_admitted) != (staged.board.target.id, True):
        raise AssertionError(f"{path}: the task did not arrive at Target (it stands at {task})")
    return task


def enter(
    host: Host, board: Board, path: str, *, session: bool = True, title: str = "contract task"
) -> Task:
    """A fresh task arrives at Target through `path`; returns it as it stands afterwards."""
    return arrive(host, stage(host, board, path, session=session, title=title))


@attrs.frozen
class Arrivals:
    """The `laneway_arrivals` fixture: the functions above, with the test's scratch directory
    for workflow files."""

    directory: Path
    paths: tuple[str, ...] = ENTRY_PATHS

    def board(
        self,
        host: Host,
        on_enter: Sequence[Mapping[str, Any]],
        *,
        on_agent_error: Sequence[Mapping[str, Any]] = (),
        wip_limit: int = 1,
        name: str | None = None,
    ) -> Board:
        return build_board(
            host,
            self.directory,
            on_enter,
            on_agent_error=on_agent_error,
            wip_limit=wip_limit,
            name=name,
        )

    def stage(self, host: Host, board: Board, path: str, *, session: bool = True) -> Staged:
        return stage(host, board, path, session=session)

    def arrive(self, host: Host, staged: Staged) -> Task:
        return arrive(host, staged)

    def enter(self, host: Host, board: Board, path: str, *, session: bool = True) -> Task:
        return enter(host, board, path, session=session)
