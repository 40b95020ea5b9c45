"""Fixtures for the transition tests: a host carrying a probe plugin whose on_enter session
kind records, at dispatch time, what a separate connection sees committed."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from core import Host
from core.model import Task, Workflow
from core.plugin.kinds import ActionContext, ActionKind
from core.plugin.selection import PluginSelection
from plugins import hookimpl
from tests.conftest import board_office


@attrs.define
class Probe:
    """A plugin with one session kind, `probe`, that records each dispatch it sees."""

    seen: list[dict[str, Any]] = attrs.field(factory=list)

    def _execute(self, ctx: ActionContext, _config: Any) -> None:
        committed = ctx.services.tasks.get(ctx.task.id)  # a pooled connection: commits only
        self.seen.append(
            {
                "task_id": ctx.task.id,
                "step_id": ctx.step.id,
                "entry_path": ctx.entry_path,
                "committed_step_id": committed.workflow_step_id,
                "committed_admitted": committed.wip_admitted,
            }
        )

    @hookimpl
    def laneway_register_action_kinds(self, register: Callable[[ActionKind], None]) -> None:
        register(ActionKind("probe", "session", execute=self._execute))


BOARD = """
version: 1
type: kandev_workflow
workflows:
  - name: Board
    steps:
      - {name: Inbox, position: 0, events: {on_enter: [{type: probe}]}}
      - name: Doing
        position: 1
        is_start_step: true
        events:
          on_enter: [{type: probe}]
          on_turn_complete: [{type: move_to_next}]
          on_turn_start: [{type: move_to_previous}]
      - {name: Check, position: 2, events: {on_enter: [{type: probe}]}}
      - {name: Done, position: 3, events: {on_enter: [{type: probe}]}}
  - name: Other
    steps:
      - {name: Start, position: 0, is_start_step: true, events: {on_enter: [{type: probe}]}}
      - {name: End, position: 1, events: {on_enter: [{type: probe}]}}
"""


@attrs.define
class Board:
    host: Host
    probe: Probe
    board: Workflow
    other: Workflow
    tmp: Path

    def task(self, title: str = "t", step: str | None = None, session: bool = True) -> Task:
        task = self.host.tasks.create(workflow=self.board.id, title=title, step=step)
        if session:
            self.host.sessions.start(task.id)
        return task

    def step_name(self, task_id: str) -> str:
        task = self.host.tasks.get(task_id)
        assert task.workflow_id
        assert task.workflow_step_id
        wf = self.host.workflows.by_id(task.workflow_id)
        step = wf.step(task.workflow_step_id)
        assert step is not None
        return step.name

    def import_yaml(self, text: str) -> list[Workflow]:
        path = self.tmp / f"wf{len(list(self.tmp.iterdir()))}.yml"
        path.write_text(textwrap.dedent(text))
        return self.host.workflows.import_file(path)


def open_with_probe(url: str, probe: Probe, *, office: bool = True) -> Host:
    selection = PluginSelection(
        allow=frozenset({"kanban", "office", "probe"}), extra=(("probe", probe),)
    )
    return board_office(Host.open(url, plugins=selection), office)


@pytest.fixture
def board(db_url: str, tmp_path: Path) -> Iterator[Board]:
    probe = Probe()
    files = tmp_path / "files"
    files.mkdir()
    (files / "board.yml").write_text(BOARD)
    with open_with_probe(db_url, probe) as host:
        board_wf, other_wf = host.workflows.import_file(files / "board.yml")
        yield Board(host, probe, board_wf, other_wf, files)


def arrivals(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r["extra"] for r in records if r["extra"].get("event") == "arrival"]
