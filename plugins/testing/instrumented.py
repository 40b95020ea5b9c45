"""The instrumented plugin: the plugin under test wrapped, not changed, plus the kit's own.

`InstrumentedPlugin` forwards every hook of the plugin under test and records each call of
the kind's executor (`Recorder`, `ExecutorCall`): its context, whether a session guard was
held, what it returned. `Sentinel` is the kit's ``laneway_contract_kit`` plugin, a durable
``contract_sentinel`` kind that shows whether an entry went on.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final, cast

import attrs
import pytest
from loguru import logger

from core import harness
from core.host import Host
from plugins import hookimpl
from plugins.api import ActionContext, ActionKind, Outcome

SENTINEL_PLUGIN: Final = "laneway_contract_kit"
SENTINEL_KIND: Final = "contract_sentinel"
DEAD_EPOCH: Final = harness.DEAD_EPOCH
"""The epoch of a process that is gone (a host mints random hex, never this)."""
CALL_FIELD: Final = "laneway_contract_call"
GUARD_WAIT_S: Final = 20.0


@attrs.define
class ExecutorCall:
    """One call of the kind's executor, as the wrapper saw it."""

    number: int
    trigger: str
    task_id: str
    step_id: str
    entry_path: str | None
    entry_id: str | None
    entry_seq: int | None
    session_id: str | None
    """The session the context carried (session kinds: the live session)."""
    live_session_id: str | None
    """The task's live session when the call began (whatever the kind's owner)."""
    guard_held: bool | None
    """Whether that session's guard was held when the call began (None: no live session)."""
    outcome: Outcome | None = None
    raised: str | None = None
    finished: bool = False

    @property
    def failed(self) -> bool:
        return self.raised is not None or (
            self.outcome is not None and self.outcome.state == "failed"
        )

    @property
    def state(self) -> str:
        if self.raised is not None:
            return "failed"
        return self.outcome.state if self.outcome is not None else "done"


@attrs.define
class Recorder:
    calls: list[ExecutorCall] = attrs.field(factory=list)
    guard_reentries: list[str] = attrs.field(factory=list)
    executor_modules: set[str] = attrs.field(factory=set)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    def of(self, task_id: str, trigger: str | None = "on_enter") -> list[ExecutorCall]:
        return [
            c
            for c in self.calls
            if c.task_id == task_id and (trigger is None or c.trigger == trigger)
        ]

    def new_call(self, ctx: ActionContext) -> ExecutorCall:
        # the kit opened this host itself: it reads the host's public API, not a plugin's view
        host = cast("Host", ctx.services)
        live = host.sessions.live(ctx.task.id)
        with self._lock:
            call = ExecutorCall(
                number=len(self.calls) + 1,
                trigger=ctx.trigger,
                task_id=ctx.task.id,
                step_id=ctx.step.id,
                entry_path=ctx.entry_path,
                entry_id=ctx.entry_id,
                entry_seq=ctx.entry_seq,
                session_id=ctx.session.id if ctx.session is not None else None,
                live_session_id=live.id if live is not None else None,
                guard_held=host.runtime.guard_held(live.id) if live is not None else None,
            )
            self.calls.append(call)
        return call


def _hookimpl_of(plugin: object, name: str) -> Callable[..., Any] | None:
    found: Callable[..., Any] | None = getattr(plugin, name, None)
    if callable(found) and getattr(found, "laneway_impl", None) is not None:
        return found
    return None


class InstrumentedPlugin:
    """Stands in for the plugin under test: forwards every hook to it, and wraps the
    executor of the kind under test so that each call is observed."""

    def __init__(self, plugin: object, kind: str, recorder: Recorder) -> None:
        self.plugin = plugin
        self.kind = kind
        self.recorder = recorder

    def declarations(self) -> list[ActionKind]:
        """What the plugin declares, asked directly (no host)."""
        declared: list[ActionKind] = []
        impl = _hookimpl_of(self.plugin, "laneway_register_action_kinds")
        if impl is not None:
            impl(register=declared.append)
        return declared

    def _observed(self, execute: Callable[[ActionContext, Any], Outcome | None]) -> Any:
        recorder = self.recorder

        def execute_observed(ctx: ActionContext, config: Any) -> Outcome | None:
            call = recorder.new_call(ctx)
            with logger.contextualize(**{CALL_FIELD: call.number}):
                try:
                    outcome = execute(ctx, config)
                except BaseException as exc:
                    call.raised = f"{type(exc).__name__}: {exc}"
                    call.finished = True
                    raise
            call.outcome = outcome
            call.finished = True
            return outcome

        return execute_observed

    @hookimpl
    def laneway_register_action_kinds(self, register: Callable[[ActionKind], None]) -> None:
        impl = _hookimpl_of(self.plugin, "laneway_register_action_kinds")
        if impl is None:
            return

        def register_observed(kind: ActionKind) -> None:
            if isinstance(kind, ActionKind) and kind.name == self.kind and kind.execute:
                self.recorder.executor_modules.add(getattr(kind.execute, "__module__", ""))
                kind = attrs.evolve(kind, execute=self._observed(kind.execute))
            register(kind)

        impl(register=register_observed)

    @hookimpl
    def laneway_register_guards(self, register: Callable[..., None]) -> None:
        impl = _hookimpl_of(self.plugin, "laneway_register_guards")
        if impl is not None:
            impl(register=register)

    @hookimpl
    def laneway_task_ownership(self, task: Any, workspace: Any) -> str | None:
        impl = _hookimpl_of(self.plugin, "laneway_task_ownership")
        return impl(task=task, workspace=workspace) if impl is not None else None

    @hookimpl
    def laneway_agent_failed(self, host: Any, failure: Any, case: Any) -> None:
        impl = _hookimpl_of(self.plugin, "laneway_agent_failed")
        if impl is not None:
            # as pluggy does: the implementation receives only the arguments it names
            given = {"host": host, "failure": failure, "case": case}
            named = inspect.signature(impl).parameters
            impl(**{name: value for name, value in given.items() if name in named})

    @hookimpl
    def laneway_host_started(self, host: Any) -> None:
        impl = _hookimpl_of(self.plugin, "laneway_host_started")
        if impl is not None:
            impl(host=host)

    @hookimpl
    def laneway_cli_commands(self, group: Any) -> None:
        impl = _hookimpl_of(self.plugin, "laneway_cli_commands")
        if impl is not None:
            impl(group=group)


@attrs.define
class Sentinel:
    """The kit's own plugin: a durable kind declared after the kind under test, so a check
    sees whether the rest of the entry ran."""

    calls: list[str] = attrs.field(factory=list)

    def _execute(self, ctx: ActionContext, _config: Any) -> None:
        self.calls.append(ctx.task.id)

    @hookimpl
    def laneway_register_action_kinds(self, register: Callable[[ActionKind], None]) -> None:
        register(
            ActionKind(
                SENTINEL_KIND,
                "durable",
                execute=self._execute,
                description="the contract kit's witness that an entry went on",
            )
        )


def watch_guards(host: Host, recorder: Recorder) -> None:
    """Make this host's session guards report a re-entry instead of deadlocking on it."""
    runtime = host.runtime
    original = runtime.guards.guard  # the failure room takes the guard here
    holders: dict[str, int] = {}

    @contextmanager
    def guard(session_id: str) -> Iterator[None]:
        me = threading.get_ident()
        if holders.get(session_id) == me:
            recorder.guard_reentries.append(session_id)
            raise AssertionError(f"session guard re-entered by the thread holding it: {session_id}")
        with original(session_id):
            holders[session_id] = me
            try:
                yield
            finally:
                holders.pop(session_id, None)

    runtime.guards.guard = guard  # type: ignore[method-assign]


def _resolve(plugin: object) -> object:
    return importlib.import_module(plugin) if isinstance(plugin, str) else plugin


def _module_of(plugin: object) -> str:
    if isinstance(plugin, types.ModuleType):
        return plugin.__name__
    return type(plugin).__module__


def _top(module: str) -> str:
    return module.split(".", 1)[0]


def _ref_of(plugin: object, owner: type | None = None) -> str | None:
    """An import reference ("module" or "module:attr.path") a child process can load."""
    if isinstance(plugin, str):
        return plugin
    if isinstance(plugin, types.ModuleType):
        return plugin.__name__
    module = sys.modules.get(type(plugin).__module__)
    if module is not None:
        for name, value in vars(module).items():
            if value is plugin:
                return f"{module.__name__}:{name}"
    if owner is not None:
        for klass in owner.__mro__:
            for name, value in vars(klass).items():
                if value is plugin:
                    return f"{klass.__module__}:{klass.__qualname__}.{name}"
    return None


# -- the suite -----------------------------------------------------------------------------------


def _entry_point(name: str) -> object:
    from importlib.metadata import entry_points

    from core.plugin.loading import GROUP

    found = [ep for ep in entry_points(group=GROUP) if ep.name == name]
    if not found:
        pytest.skip(f"plugin {name!r} is not installed (no {GROUP!r} entry point)")
    return found[0].load()
