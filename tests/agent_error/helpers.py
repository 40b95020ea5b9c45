"""Shared helpers for the on_agent_error dispatch acceptance tests
(spec/on-agent-error-dispatch.txt; mapping in DESIGN.md).

- `Probe`: plugin `aeprobe`, giving the tests durable action kinds that record what a dispatch
  sees (`ae_probe`), fail (`ae_fail`, an ActionFailed) or blow up (`ae_boom`, a stray exception:
  Python's counterpart of a Go panic), a guard `ae_gate` that is satisfied only when its config
  says `open: true`, and a `laneway_agent_failed` observer that can be told to raise.
  `ae_probe`, run under on_agent_error, also records whether the failed session's guard was free
  at that moment (`guard_held`, `guard_acquired`: taken from another thread with a timeout) and
  which thread it ran on; a test may add its own callable (`Probe.on_run`).
- `World`: one host with the probe loaded, portable-YAML workflows (version 1, type
  kandev_workflow, on_agent_error under a step's events) imported through
  `host.workflows.import_file`, agent profiles that run REAL subprocesses (the shipped
  `core.agents.scripted` roles, or tiny /bin/sh scripts for shapes no role has), sessions,
  and synthetic `AgentFailure`s delivered through the runtime's own failure handling.
- `dispatch_records(logs)`: the dispatch's own records, identified by `extra["event"]`
  (AC-F9: the identity is the field, never the message text).
"""

from __future__ import annotations

import stat
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import sqlalchemy as sa
import yaml

from core import Host
from core.agents.values import TurnOutcome
from core.model import AgentFailure, AgentProfile, Run, Session, Task, Workflow
from core.plugin.kinds import ActionContext, ActionFailed, ActionKind, GuardKind, GuardResult
from core.plugin.selection import PluginSelection
from core.store import tables as t
from plugins import hookimpl
from tests.conftest import board_office

EVENT = "agent_error.dispatch"
"""`extra["event"]` of every record the dispatch itself emits (AC-F9)."""

GUARD_TIMEOUT = 3.0
SCRIPTED = (sys.executable, "-m", "core.agents.scripted")
FAST_RETRIES = (0.01, 0.01)


# -- the probe plugin ------------------------------------------------------------------------------


def try_guard(host: Host, session_id: str, timeout: float = GUARD_TIMEOUT) -> bool:
    """Whether `host.runtime.guard(session_id)` can be taken (from another thread) in time."""
    got = threading.Event()

    def take() -> None:
        with host.runtime.guard(session_id):
            got.set()

    worker = threading.Thread(target=take, daemon=True)
    worker.start()
    worker.join(timeout)
    return got.is_set()


@attrs.define
class Probe:
    """Plugin `aeprobe` (see the module docstring)."""

    seen: list[dict[str, Any]] = attrs.field(factory=list)
    on_run: Callable[[ActionContext, dict[str, Any]], None] | None = None
    failures: list[AgentFailure] = attrs.field(factory=list)
    hook_raises: bool = False
    check_guard: bool = True

    def _probe(self, ctx: ActionContext, config: Any) -> None:
        host = ctx.services
        payload = dict(ctx.payload or {})
        seen: dict[str, Any] = {
            "trigger": ctx.trigger,
            "label": dict(config).get("label"),
            "task_id": ctx.task.id,
            "task_description": ctx.task.description,
            "step_id": ctx.step.id,
            "step_name": ctx.step.name,
            "entry_path": ctx.entry_path,
            "operation_id": ctx.operation_id,
            "payload": payload,
            "session_id": ctx.session.id if ctx.session is not None else None,
            "thread": threading.get_ident(),
        }
        failed = payload.get("failed_session_id")
        if ctx.trigger == "on_agent_error" and failed and self.check_guard:
            seen["guard_held"] = host.runtime.guard_held(failed)
            seen["guard_acquired"] = try_guard(host, failed)
        if self.on_run is not None:
            self.on_run(ctx, seen)
        self.seen.append(seen)

    def _fail(self, _ctx: ActionContext, config: Any) -> None:
        raise ActionFailed(str(dict(config).get("cause", "ae_fail failed")))

    def _boom(self, _ctx: ActionContext, _config: Any) -> None:
        raise RuntimeError("ae_boom: a callback blew up")

    def _gate(self, _ctx: Any, config: Any) -> GuardResult:
        is_open = bool(dict(config).get("open"))
        return GuardResult(is_open, reason="" if is_open else "ae_gate is closed")

    @hookimpl
    def laneway_register_action_kinds(self, register: Callable[[ActionKind], None]) -> None:
        register(ActionKind("ae_probe", "durable", execute=self._probe))
        register(ActionKind("ae_fail", "durable", execute=self._fail))
        register(ActionKind("ae_boom", "durable", execute=self._boom))

    @hookimpl
    def laneway_register_guards(self, register: Callable[[GuardKind], None]) -> None:
        register(GuardKind("ae_gate", validate=lambda config: config, evaluate=self._gate))

    @hookimpl
    def laneway_agent_failed(self, host: Any, failure: AgentFailure) -> None:
        self.failures.append(failure)
        if self.hook_raises:
            raise RuntimeError("aeprobe: the agent-failed observer blew up")

    # views

    def on_agent_error(self) -> list[dict[str, Any]]:
        return [s for s in self.seen if s["trigger"] == "on_agent_error"]

    def labels(self, trigger: str = "on_agent_error") -> list[Any]:
        return [s["label"] for s in self.seen if s["trigger"] == trigger]


PLUGINS = frozenset({"kanban", "office", "aeprobe"})


def open_world_host(url: str, probe: Probe, *, office: bool = True) -> Host:
    selection = PluginSelection(allow=PLUGINS, extra=(("aeprobe", probe),))
    return board_office(Host.open(url, plugins=selection), office)


# -- declarations ----------------------------------------------------------------------------------


def act(kind: str, **config: Any) -> dict[str, Any]:
    """One declared action, as a portable file writes it."""
    return {"type": kind, "config": config} if config else {"type": kind}


def probe(label: str) -> dict[str, Any]:
    return act("ae_probe", label=label)


def step(
    name: str,
    position: int,
    *,
    start: bool = False,
    wip_limit: int = 0,
    prompt: str = "",
    **events: list[dict[str, Any]],
) -> dict[str, Any]:
    """One portable step; `events` maps a trigger name to its action list."""
    out: dict[str, Any] = {"name": name, "position": position}
    if start:
        out["is_start_step"] = True
    if wip_limit:
        out["wip_limit"] = wip_limit
    if prompt:
        out["prompt"] = prompt
    if events:
        out["events"] = events
    return out


# -- records ---------------------------------------------------------------------------------------


def dispatch_records(logs: list[dict[str, Any]], **fields: Any) -> list[dict[str, Any]]:
    """The dispatch's own records (AC-A6's four outcomes and the recording guards' lines)."""
    return [
        r
        for r in logs
        if r["extra"].get("event") == EVENT
        and all(r["extra"].get(k) == v for k, v in fields.items())
    ]


def with_fields(logs: list[dict[str, Any]], level: str, **fields: Any) -> list[dict[str, Any]]:
    """Records at `level` whose extra fields include every one of `fields`."""
    return [
        r
        for r in logs
        if r["level"] == level and all(r["extra"].get(k) == v for k, v in fields.items())
    ]


def walk_warnings(logs: list[dict[str, Any]], session_id: str) -> list[dict[str, Any]]:
    """AC-E4's walk WARNINGs: the six fields, the failed session among them (the engine's own
    per-action warnings carry no session id, so they never match)."""
    return [
        r
        for r in logs
        if r["level"] == "WARNING"
        and r["extra"].get("session_id") == session_id
        and "action_type" in r["extra"]
        and r["extra"].get("event") != EVENT
    ]


def errors_and_warnings(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in logs if r["level"] in ("WARNING", "ERROR", "CRITICAL")]


# -- the world -------------------------------------------------------------------------------------


@attrs.define
class World:
    host: Host
    probe: Probe
    tmp: Path
    url: str
    _n: int = 0

    # workflows

    def flow(self, *steps: dict[str, Any], name: str | None = None) -> Workflow:
        self._n += 1
        doc = {
            "version": 1,
            "type": "kandev_workflow",
            "workflows": [{"name": name or f"Board {self._n}", "steps": list(steps)}],
        }
        path = self.tmp / f"wf{self._n}.yml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        (wf,) = self.host.workflows.import_file(path)
        return wf

    def board(
        self,
        on_agent_error: list[dict[str, Any]] | None,
        *,
        recover_on_enter: list[dict[str, Any]] | None = None,
        **work_events: list[dict[str, Any]],
    ) -> Workflow:
        """Work (0, start; declares `on_agent_error`) -> Recover (1) -> Done (2).
        Recover's on_enter is a probe labelled "enter-recover" unless given."""
        events = dict(work_events)
        if on_agent_error is not None:
            events["on_agent_error"] = on_agent_error
        recover = recover_on_enter if recover_on_enter is not None else [probe("enter-recover")]
        return self.flow(
            step("Work", 0, start=True, **events),
            step("Recover", 1, on_enter=recover),
            step("Done", 2),
        )

    @staticmethod
    def step_id(wf: Workflow, name: str) -> str:
        found = wf.step(name)
        assert found is not None, name
        return found.id

    def step_name(self, task_id: str) -> str | None:
        task = self.host.tasks.get(task_id)
        if task.workflow_id is None or task.workflow_step_id is None:
            return None
        found = self.host.workflows.by_id(task.workflow_id).step(task.workflow_step_id)
        return found.name if found is not None else None

    # agents

    def scripted(self, name: str, role: str, *args: str, **kwargs: Any) -> AgentProfile:
        """A profile running a shipped scripted agent as a real subprocess (a name already
        taken returns that profile: tests reuse one agent for several tasks)."""
        command = [*SCRIPTED, role, *args]
        for existing in self.host.profiles.list():
            if existing.name == name:
                assert list(existing.command) == command, f"profile {name!r} reused differently"
                return existing
        return self.host.profiles.add(name, command=command, **kwargs)

    def script(self, name: str, body: str, **kwargs: Any) -> AgentProfile:
        """A profile whose command is an executable /bin/sh script (a real subprocess)."""
        path = self.tmp / f"{name}.sh"
        path.write_text("#!/bin/sh\n" + textwrap.dedent(body).lstrip())
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return self.host.profiles.add(name, command=[str(path)], **kwargs)

    def crashing(self, name: str = "crashy", status: int = 3) -> AgentProfile:
        """A real agent process that reads nothing, complains on stderr and exits `status`
        (a terminal failure, route R1). A /bin/sh script: it starts in milliseconds."""
        existing = [p for p in self.host.profiles.list() if p.name == name]
        if existing:
            return existing[0]
        return self.script(
            name,
            f"""
            echo "{name}: the build tool crashed" >&2
            exit {status}
            """,
        )

    def state_file(self, name: str) -> str:
        return str(self.tmp / f"{name}.state")

    # tasks and sessions

    def task(self, wf: Workflow, *, title: str = "t", description: str = "", **kw: Any) -> Task:
        return self.host.tasks.create(workflow=wf.id, title=title, description=description, **kw)

    def session(self, task: Task, profile: AgentProfile | None = None) -> Session:
        """A session laneway runs itself (not external), for `profile`'s agent."""
        return self.host.sessions.start(
            task.id, profile=profile.id if profile is not None else None, external=False
        )

    def turn(self, session: Session, prompt: str = "work on it") -> TurnOutcome:
        """One real agent turn (blocking)."""
        return self.host.runtime.run_turn(session.id, prompt)

    def failure(self, task: Task, session: Session | None, **kw: Any) -> AgentFailure:
        values: dict[str, Any] = {"route": "R1", "error_message": "agent exited with status 1"}
        values.update(kw)
        return AgentFailure(task.id, session.id if session is not None else None, **values)

    def fail(self, task: Task, session: Session | None, **kw: Any) -> AgentFailure:
        """Deliver a synthetic terminal failure through the runtime's own failure handling
        (bookkeeping under the guard, then the dispatch with the guard released)."""
        failure = self.failure(task, session, **kw)
        self.host.runtime.fail_and_dispatch(failure)
        return failure

    # rows

    def runs(self, task: Task) -> list[Run]:
        return self.host.runs.list(task=task.id)

    def history(self, task: Task) -> list[dict[str, Any]]:
        h = t.session_step_history
        with self.host.store.read() as conn:
            return [
                dict(r)
                for r in conn.execute(
                    sa.select(h).where(h.c.task_id == task.id).order_by(h.c.created_at, h.c.id)
                ).mappings()
            ]

    def write(self, statement: Any) -> None:
        with self.host.store.transaction() as uow:
            uow.conn.execute(statement)

    def delete_session_row(self, session_id: str) -> None:
        self.write(sa.delete(t.task_sessions).where(t.task_sessions.c.id == session_id))

    def make_ephemeral(self, task: Task) -> None:
        self.write(sa.update(t.tasks).where(t.tasks.c.id == task.id).values(is_ephemeral=True))


@contextmanager
def patched(obj: Any, name: str, replacement: Any) -> Iterator[None]:
    """Replace an attribute of one object (e.g. one host's service method) for a block."""
    had = name in vars(obj)
    original = vars(obj).get(name)
    setattr(obj, name, replacement)
    try:
        yield
    finally:
        if had:
            setattr(obj, name, original)
        else:
            delattr(obj, name)


def run_in_thread(fn: Callable[[], Any], timeout: float) -> tuple[bool, list[Any]]:
    """Run `fn` on a daemon thread; (finished in time, [result or exception])."""
    out: list[Any] = []

    def body() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            out.append(exc)

    worker = threading.Thread(target=body, daemon=True)
    worker.start()
    worker.join(timeout)
    return not worker.is_alive(), out


def background(fn: Callable[[], Any]) -> list[Any]:
    """Start `fn` on a daemon thread; the list receives its result (or exception) at the end."""
    out: list[Any] = []

    def body() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            out.append(exc)

    threading.Thread(target=body, daemon=True).start()
    return out


def wait_for(out: list[Any], timeout: float) -> Any:
    """The result `background` delivered, waiting up to `timeout` seconds; re-raises."""
    deadline = time.monotonic() + timeout
    while not out:
        assert time.monotonic() < deadline, "the background call did not end in time"
        time.sleep(0.01)
    result = out[0]
    if isinstance(result, BaseException):
        raise result
    return result
