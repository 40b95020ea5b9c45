"""Shared helpers for the on_enter dispatch acceptance tests (spec/on-enter-action-dispatch) and
the step-entry-sequence tests (spec/step-entry-sequence).

Plain functions and classes, imported explicitly by the test modules (no conftest here).

- `open_world(url, tmp)`: a host with the kanban and office plugins plus `t`, a test plugin
  whose durable kinds probe what a dispatch sees (`t_probe`) or fail (`t_fail`).
- `World.flow(on_enter)`: imports a portable workflow `Src -> Target -> Out` (Target carries the
  declaration, Src's on_turn_complete moves to Target) plus a one-step `...-away` workflow, so
  `World.place` / `World.arrive` can drive a task into Target through any entry path:
  E1 `host.turns.complete`, E2 `host.tasks.move`, E3 WIP promotion, E4
  `host.tasks.switch_workflow`, E5 `host.tasks.update` ("E5-update") and `host.tasks.start`
  ("E5-start").
- `Timeline`: wraps the host's service methods the built-in kinds act through (instance
  attributes, so only this host is affected) and records, per task, the order their effects
  took place in: the observable order of an entry sequence.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import sqlalchemy as sa
import yaml

from core import Host
from core.model import AgentProfile, Marker, Run, StepEntry, Task, Workflow
from core.plugin.kinds import ActionContext, ActionFailed, ActionKind
from core.plugin.selection import PluginSelection
from core.store import tables as t
from plugins import hookimpl
from tests.conftest import board_office

DEAD_EPOCH = "dead0000dead0000dead0000dead0000"
"""The epoch of a process that is gone (no host ever mints it: epochs are random hex)."""

PATHS = ("E1", "E2", "E3", "E4", "E5-update", "E5-start")
"""Every entry path, with E5's two sites (generic update, task start) separately."""

HOISTING_PATHS = ("E1", "E2", "E3", "E5-update", "E5-start")

SESSION_LABELS = {
    "context_resets": "reset_agent_context",
    "configured": "configure_session",
    "session_mode": "set_session_mode",
    "workflow_data": "set_workflow_data",
    "prompts": "auto_start_agent",
}


def entry_path(path: str) -> str:
    """The `entry_path` value recorded for a PATHS item."""
    return path.split("-", 1)[0]


# -- the test plugin -------------------------------------------------------------------------------


@attrs.define
class KindsPlugin:
    """Plugin `t`: durable kinds for tests.

    - `t_probe` records, when it runs, its context and what another connection sees committed
      (the task's step, and the entry records for the task at the step).
    - `t_fail` always fails with `config.cause` (default "t_fail failed").
    - `t_block` (non-transactional: it holds no transaction while it waits): its first
      execution sets `blocked` and waits for `release`; later ones return at once.
    """

    seen: list[dict[str, Any]] = attrs.field(factory=list)
    blocked: threading.Event = attrs.field(factory=threading.Event)
    release: threading.Event = attrs.field(factory=threading.Event)
    block_runs: list[int | None] = attrs.field(factory=list)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    def _probe(self, ctx: ActionContext, config: Any) -> None:
        host = ctx.services
        committed = host.tasks.get(ctx.task.id)  # a pooled connection: commits only
        e = t.step_entries
        with host.store.read() as conn:
            seqs = list(
                conn.execute(
                    sa.select(e.c.entry_seq)
                    .where(e.c.task_id == ctx.task.id, e.c.step_id == ctx.step.id)
                    .order_by(e.c.entry_seq)
                ).scalars()
            )
        self.seen.append(
            {
                "task_id": ctx.task.id,
                "step_id": ctx.step.id,
                "entry_id": ctx.entry_id,
                "entry_seq": ctx.entry_seq,
                "entry_path": ctx.entry_path,
                "position": ctx.position,
                "label": dict(config).get("label"),
                "committed_step_id": committed.workflow_step_id,
                "committed_admitted": committed.wip_admitted,
                "committed_entry_seqs": seqs,
            }
        )

    def _fail(self, _ctx: ActionContext, config: Any) -> None:
        raise ActionFailed(str(dict(config).get("cause", "t_fail failed")))

    def _block(self, ctx: ActionContext, _config: Any) -> None:
        with self._lock:
            first = not self.block_runs
            self.block_runs.append(ctx.entry_seq)
        if first:
            self.blocked.set()
            assert self.release.wait(20), "t_block was never released"

    @hookimpl
    def laneway_register_action_kinds(self, register: Callable[[ActionKind], None]) -> None:
        register(ActionKind("t_probe", "durable", execute=self._probe))
        register(ActionKind("t_fail", "durable", execute=self._fail))
        register(ActionKind("t_block", "durable", execute=self._block))


ALL_PLUGINS = frozenset({"kanban", "office", "t"})


def open_host(url: str, plugin: KindsPlugin, *, office: bool = True) -> Host:
    selection = PluginSelection(allow=ALL_PLUGINS, extra=(("t", plugin),))
    return board_office(Host.open(url, plugins=selection), office)


# -- declarations ----------------------------------------------------------------------------------


def act(kind: str, **config: Any) -> dict[str, Any]:
    """One declared action, as a portable file writes it."""
    return {"type": kind, "config": config} if config else {"type": kind}


def flow_doc(
    name: str,
    on_enter: list[dict[str, Any]] | None,
    *,
    wip_limit: int = 1,
    src_on_turn_complete: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """`name`: Src(0) -> Target(1, start step, declares `on_enter`) -> Out(2), plus
    `name-away` with one step, Away, the E4 departure point."""
    target_events: dict[str, Any] = {
        "on_turn_complete": [act("move_to_step", step_position=0)],
    }
    if on_enter is not None:
        target_events["on_enter"] = on_enter
    src_tc = src_on_turn_complete or [act("move_to_step", step_position=1)]
    return [
        {
            "name": name,
            "steps": [
                {"name": "Src", "position": 0, "events": {"on_turn_complete": src_tc}},
                {
                    "name": "Target",
                    "position": 1,
                    "is_start_step": True,
                    "wip_limit": wip_limit,
                    "events": target_events,
                },
                {"name": "Out", "position": 2},
            ],
        },
        {"name": f"{name}-away", "steps": [{"name": "Away", "position": 0}]},
    ]


# -- the world -------------------------------------------------------------------------------------


@attrs.define
class World:
    host: Host
    tmp: Path
    plugin: KindsPlugin
    url: str
    away: dict[str, Workflow] = attrs.field(factory=dict)
    holders: dict[str, str] = attrs.field(factory=dict)
    _n: int = 0

    # workflows

    def import_doc(self, workflows: list[dict[str, Any]]) -> list[Workflow]:
        self._n += 1
        path = self.tmp / f"wf{self._n}.yml"
        doc = {"version": 1, "type": "kandev_workflow", "workflows": workflows}
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return self.host.workflows.import_file(path)

    def flow(
        self,
        on_enter: list[dict[str, Any]] | None,
        *,
        name: str | None = None,
        wip_limit: int = 1,
        src_on_turn_complete: list[dict[str, Any]] | None = None,
    ) -> Workflow:
        wf, away = self.import_doc(
            flow_doc(
                name or f"W{self._n + 1}",
                on_enter,
                wip_limit=wip_limit,
                src_on_turn_complete=src_on_turn_complete,
            )
        )
        self.away[wf.id] = away
        return wf

    @staticmethod
    def step_id(wf: Workflow, name: str = "Target") -> str:
        step = wf.step(name)
        assert step is not None
        return step.id

    # tasks and arrivals

    def place(self, wf: Workflow, path: str, *, session: bool = True, title: str = "t") -> Task:
        """A task positioned so that `arrive(wf, task, path)` enters Target by `path`."""
        if path == "E4":
            task = self.host.tasks.create(workflow=self.away[wf.id].id, title=title)
        else:
            task = self.host.tasks.create(workflow=wf.id, title=title, step="Src")
        if session or path == "E1":
            self.host.sessions.start(task.id)
        if path == "E3":
            holder = self.host.tasks.create(workflow=wf.id, title=f"{title}-holder", step="Target")
            self.holders[task.id] = holder.id
            queued = self.host.tasks.move(task.id, "Target")
            assert queued.wip_admitted is False, "Target must be full (wip_limit 1) for E3"
        return task

    def arrive(self, wf: Workflow, task_id: str, path: str) -> None:
        """Drive the task into Target through the real entry point of `path`."""
        host = self.host
        if path == "E1":
            result = host.turns.complete(task_id)
            assert result["transitioned"] is True
        elif path == "E2":
            host.tasks.move(task_id, "Target")
        elif path == "E3":
            host.tasks.move(self.holders.pop(task_id), "Out")  # vacates Target: promotion
        elif path == "E4":
            host.tasks.switch_workflow(task_id, workflow=wf.id, step="Target")
        elif path == "E5-update":
            host.tasks.update(task_id, step="Target")
        elif path == "E5-start":
            host.tasks.start(task_id)  # Target is the start step
        else:
            raise AssertionError(path)
        got = host.tasks.get(task_id)
        assert (got.workflow_step_id, got.wip_admitted) == (self.step_id(wf), True)

    def enter(
        self, wf: Workflow, path: str = "E2", *, session: bool = True, title: str = "t"
    ) -> Task:
        task = self.place(wf, path, session=session, title=title)
        self.arrive(wf, task.id, path)
        return self.host.tasks.get(task.id)

    # seats, decisions

    def profile(self, name: str) -> AgentProfile:
        try:
            return self.host.profiles.get(name)
        except Exception:  # noqa: BLE001 - not there yet
            return self.host.profiles.add(name, command=["true"])

    def seat(
        self,
        wf: Workflow,
        role: str,
        profile: str,
        *,
        step: str = "Target",
        task: str | None = None,
        position: int = 0,
        decision_required: bool | None = None,
    ) -> str:
        agent = self.profile(profile)
        seat = self.host.participants.add(
            step=step,
            role=role,
            profile=agent.id,
            task=task,
            workflow=None if task else wf.id,
            decision_required=decision_required,
            position=position,
        )
        return seat.id

    def raw_seat(
        self,
        step_id: str,
        role: str,
        agent_profile_id: str,
        *,
        task_id: str = "",
        position: int = 0,
        seat_id: str | None = None,
    ) -> str:
        """A seat written directly (the service refuses an empty agent_profile_id)."""
        from core import ids

        sid = seat_id or ids.new_id()
        with self.host.store.transaction() as uow:
            uow.conn.execute(
                sa.insert(t.workflow_step_participants).values(
                    id=sid,
                    step_id=step_id,
                    task_id=task_id,
                    role=role,
                    agent_profile_id=agent_profile_id,
                    decision_required=True,
                    position=position,
                    created_at=ids.now(),
                )
            )
        return sid

    def add_decision(
        self, task_id: str, step_id: str, *, participant_id: str = "p-seeded", verdict: str = "x"
    ) -> str:
        """A decision row written directly (any step, any workflow)."""
        from core import ids

        did = ids.new_id()
        with self.host.store.transaction() as uow:
            uow.conn.execute(
                sa.insert(t.workflow_step_decisions).values(
                    id=did,
                    task_id=task_id,
                    step_id=step_id,
                    participant_id=participant_id,
                    decision=verdict,
                    decided_at=ids.now(),
                )
            )
        return did

    def decision_ids(self, task_id: str, step_id: str) -> list[str]:
        return [d.id for d in self.host.decisions.list(task_id, step_id)]

    # observations

    def runs(self, task_id: str | None = None) -> list[Run]:
        return self.host.runs.list(task=task_id)

    def entries(self, task_id: str) -> list[tuple[StepEntry, list[Marker]]]:
        return self.host.entries.list(task=task_id)

    def markers(self, task_id: str, entry_seq: int = 1) -> dict[int, Marker]:
        for entry, markers in self.entries(task_id):
            if entry.entry_seq == entry_seq:
                return {m.position: m for m in markers}
        raise AssertionError(f"no entry {entry_seq} for task {task_id}")

    def reopen(self, task_id: str, position: int, epoch: str = DEAD_EPOCH) -> None:
        """Leave the task's first entry as an effect committed apart from its marker leaves it
        (a non-transactional kind killed at dispatch.after_effect, or a fan-out recorded by a
        build that committed its runs apart): the marker at `position` in_progress under a
        dead epoch, the entry non-terminal."""
        ((entry, _markers), *_rest) = self.entries(task_id)
        m, e = t.step_entry_markers, t.step_entries
        with self.host.store.transaction() as uow:
            uow.conn.execute(
                sa.update(m)
                .where(m.c.entry_id == entry.id, m.c.position == position)
                .values(state="in_progress", epoch=epoch, reason=None, cause=None)
            )
            uow.conn.execute(sa.update(e).where(e.c.id == entry.id).values(terminal=False))

    def meta(self, task_id: str) -> dict[str, Any]:
        """The metadata of the task's newest session (where session kinds record effects)."""
        sessions = self.host.sessions.list(task=task_id)
        return dict(sessions[-1].metadata) if sessions else {}

    def reviews(self, task_id: str) -> list[dict[str, Any]]:
        r = t.task_review_runs
        with self.host.store.read() as conn:
            return [
                dict(row)
                for row in conn.execute(
                    sa.select(r).where(r.c.task_id == task_id).order_by(r.c.created_at)
                ).mappings()
            ]

    def raw_payloads(self, task_id: str) -> list[Any]:
        r = t.runs
        with self.host.store.read() as conn:
            return list(conn.execute(sa.select(r.c.payload).where(r.c.task_id == task_id)))

    def task_seats(self, task_id: str, step_id: str) -> list[Any]:
        p = t.workflow_step_participants
        with self.host.store.read() as conn:
            return list(
                conn.execute(
                    sa.select(p.c.role, p.c.agent_profile_id).where(
                        p.c.task_id == task_id, p.c.step_id == step_id
                    )
                )
            )


@contextlib.contextmanager
def open_world(url: str, tmp: Path, *, office: bool = True) -> Iterator[World]:
    plugin = KindsPlugin()
    files = tmp / "files"
    files.mkdir(exist_ok=True)
    with open_host(url, plugin, office=office) as host:
        yield World(host, files, plugin, url)


# -- observing effects in order --------------------------------------------------------------------


@attrs.define
class Timeline:
    """The order in which entry actions took effect, per task.

    Wraps, on one host instance, the service methods the built-in kinds act through:
    `sessions.record_effect` (every kanban kind), `decisions.clear` (clear_decisions),
    `runs.enqueue` (fan-out and queue_run; label `enqueue:<reason>`), `runs.start_review`
    (run_code_review) and `participants.ensure_task_seat` (ensure_participant_seat).
    """

    events: list[tuple[str, str]] = attrs.field(factory=list)
    calls: dict[str, int] = attrs.field(factory=dict)
    requests: list[Any] = attrs.field(factory=list)
    """Every RunRequest that was enqueued successfully, in order."""

    def _add(self, task_id: str | None, label: str) -> None:
        self.events.append((task_id or "", label))
        self.calls[label] = self.calls.get(label, 0) + 1

    def of(self, task_id: str) -> list[str]:
        return [label for tid, label in self.events if tid == task_id]

    def install(self, host: Host) -> Timeline:
        sessions, decisions, runs, seats = (
            host.sessions,
            host.decisions,
            host.runs,
            host.participants,
        )
        record_effect, clear = sessions.record_effect, decisions.clear
        enqueue, start_review = runs.enqueue, runs.start_review
        ensure = seats.ensure_task_seat

        def spy_record_effect(session_id: str, **changes: Any) -> Any:
            session = record_effect(session_id, **changes)
            for key, value in changes.items():
                if key == "plan_mode":
                    label = "enable_plan_mode" if value else "disable_plan_mode"
                elif key == "session_mode":
                    label = f"set_session_mode:{value}"
                else:
                    label = SESSION_LABELS.get(key, key)
                self._add(session.task_id, label)
            return session

        def spy_clear(uow: Any, task_id: str, step_id: str) -> int:
            removed = clear(uow, task_id, step_id)
            self._add(task_id, "clear_decisions")
            return removed

        def spy_enqueue(request: Any) -> Any:
            result = enqueue(request)
            self.requests.append(request)
            self._add(request.task_id, f"enqueue:{request.reason}")
            return result

        def spy_start_review(task_id: str, step_id: str, agent: str | None) -> str:
            review = start_review(task_id, step_id, agent)
            self._add(task_id, "run_code_review")
            return review

        def spy_ensure(task_id: str, *args: Any, **kwargs: Any) -> Any:
            seat = ensure(task_id, *args, **kwargs)
            self._add(task_id, "ensure_participant_seat")
            return seat

        sessions.record_effect = spy_record_effect  # type: ignore[method-assign]
        decisions.clear = spy_clear  # type: ignore[method-assign]
        runs.enqueue = spy_enqueue  # type: ignore[method-assign]
        runs.start_review = spy_start_review  # type: ignore[method-assign]
        seats.ensure_task_seat = spy_ensure  # type: ignore[method-assign]
        return self


# -- log records -----------------------------------------------------------------------------------


def records(
    logs: list[dict[str, Any]], level: str | None = None, **extra: Any
) -> list[dict[str, Any]]:
    """Records at `level` (any when None) whose extra fields include every `extra` item."""
    return [
        r
        for r in logs
        if (level is None or r["level"] == level)
        and all(k in r["extra"] and r["extra"][k] == v for k, v in extra.items())
    ]


def with_field(logs: list[dict[str, Any]], level: str, field: str) -> list[dict[str, Any]]:
    return [r for r in logs if r["level"] == level and field in r["extra"]]


def problems(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """WARNING and ERROR records (and worse) of everything but the import: a workflow file's
    own warnings (an unknown kind, issue 38 item 4) name the `file` and are not dispatch
    records."""
    return [
        r
        for r in logs
        if r["level"] in ("WARNING", "ERROR", "CRITICAL") and "file" not in r["extra"]
    ]


def fan_out_infos(logs: list[dict[str, Any]], task_id: str) -> list[dict[str, Any]]:
    """The AC-G1 INFO records of the task's fan-outs (identified by their count fields)."""
    return [
        r
        for r in logs
        if r["level"] == "INFO"
        and r["extra"].get("task_id") == task_id
        and {"matching", "enqueued", "suppressed"} <= set(r["extra"])
    ]


def assert_discrete(record: dict[str, Any], fields: Mapping[str, Any]) -> None:
    """AC-G2: each identifying field is a discrete structured field with the expected value,
    and the message does not carry the value interpolated instead."""
    for name, value in fields.items():
        assert record["extra"].get(name) == value, (name, record["extra"])
        if isinstance(value, str) and len(value) >= 8:
            assert value not in record["message"], (name, record["message"])


def cause_of(marker: Marker) -> dict[str, Any]:
    assert marker.cause is not None
    value: dict[str, Any] = json.loads(marker.cause)
    return value
