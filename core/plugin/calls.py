"""Calling plugins' hook implementations, each in its own guard.

`guarded` is the one per-implementation loop: every caller (the typed `Hooks`, the registry's
registration, the store's event delivery in `core.observe`) runs its implementations through
it, so one that raises is reported by plugin name as a structured record and the others
still run. What a failure *means* (skipped, dropped, or raised as `PluginError` in strict
mode) is the caller's `failed` callback.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeVar

import attrs

from core.logs import logger
from core.model import FailureCase
from core.plugin.loaded import PluginError

if TYPE_CHECKING:
    import click
    import pluggy

    from core.model import AgentFailure, Task, Workspace
    from core.plugin.views import PluginHost

__all__ = [
    "DUTIES",
    "HookCall",
    "Hooks",
    "guarded",
    "hook_calls",
    "hook_failure",
    "report_hook_failure",
]

T = TypeVar("T")

DUTIES: Final[Mapping[str, str]] = {
    "laneway_register_action_kinds": "register its kinds",
    "laneway_register_guards": "register its guards",
    "laneway_register_forges": "register its forges",
    "laneway_cli_commands": "add its commands",
    "laneway_host_started": "start with the host",
    "laneway_task_ownership": "answer task ownership",
    "laneway_agent_failed": "observe an agent failure",
    "laneway_event": "observe an event",
}
"""What each hook asks of a plugin, as a failure names it."""


def hook_failure(plugin: str, hook: str, exc: BaseException) -> str:
    """``plugin 'x' failed to register its kinds: ValueError: ...``"""
    duty = DUTIES.get(hook, f"run {hook}")
    return f"plugin {plugin!r} failed to {duty}: {type(exc).__name__}: {exc}"


def report_hook_failure(
    plugin: str,
    hook: str,
    exc: BaseException,
    *,
    skipped: bool,
    context: Mapping[str, object] | None = None,
) -> str:
    """Log one failing hook implementation as a structured ERROR record; return the message.

    Fields: ``plugin``, ``hook``, ``error`` (type and text), ``skipped`` (whether the plugin's
    contributions were dropped, as for the registration hooks, or only this call failed),
    and the `context` fields (an observer's task and session ids).
    """
    message = hook_failure(plugin, hook, exc)
    logger.bind(
        **(context or {}),
        plugin=plugin,
        hook=hook,
        error=f"{type(exc).__name__}: {exc}",
        skipped=skipped,
    ).error("plugin hook raised; the other plugins carry on")
    return message


@attrs.frozen
class HookCall:
    """One plugin's implementation of one hook, callable with the hook's keyword arguments."""

    plugin: str
    hook: str
    function: Callable[..., Any]
    argnames: tuple[str, ...]

    def __call__(self, **kwargs: Any) -> Any:
        # as pluggy does: an implementation receives only the arguments it names
        return self.function(**{name: kwargs[name] for name in self.argnames})


def hook_calls(manager: pluggy.PluginManager, hook: str) -> list[HookCall]:
    """The implementations of `hook` in pluggy's call order (last registered first)."""
    return list(reversed(registered_calls(manager, hook)))


def registered_calls(manager: pluggy.PluginManager, hook: str) -> list[HookCall]:
    """The implementations of `hook` in registration order (core first); none for a hook
    the manager does not know."""
    caller = getattr(manager.hook, hook, None)
    if caller is None:
        return []
    return [
        HookCall(manager.get_name(impl.plugin) or "?", hook, impl.function, tuple(impl.argnames))
        for impl in caller.get_hookimpls()
    ]


def guarded(
    calls: Iterable[HookCall],
    run: Callable[[HookCall], T],
    failed: Callable[[HookCall, Exception], None],
) -> Iterator[tuple[HookCall, T]]:
    """Run each call (`run(call)`), yielding what it returned; one that raises goes to
    `failed`, which reports it (and may raise, to stop the loop), and the next one runs."""
    for call in calls:
        try:
            result = run(call)
        except Exception as exc:  # noqa: BLE001 - isolated per plugin; `failed` reports it
            failed(call, exc)
            continue
        yield call, result


@attrs.frozen
class Hooks:
    """Typed calls over the plugin manager, each implementation in its own guard."""

    manager: pluggy.PluginManager
    strict: bool = False

    def observe(
        self, hook: str, context: Mapping[str, object] | None = None, **kwargs: Any
    ) -> None:
        """Call every implementation of an observer hook; a raising one is reported (with
        the `context` fields) and the rest still run. Never raises, in strict mode too: an
        observer cannot stop the host."""

        def failed(call: HookCall, exc: Exception) -> None:
            report_hook_failure(call.plugin, hook, exc, skipped=False, context=context)

        for _done in guarded(hook_calls(self.manager, hook), lambda c: c(**kwargs), failed):
            pass

    def _start_failed(self, call: HookCall, exc: Exception) -> None:
        """A start-time hook's failure: raised as `PluginError` naming the plugin (strict),
        else reported and skipped."""
        if self.strict:
            raise PluginError(hook_failure(call.plugin, call.hook, exc)) from exc
        report_hook_failure(call.plugin, call.hook, exc, skipped=True)

    def task_ownership(self, task: Task, workspace: Workspace) -> str | None:
        """The first owner named, in pluggy's order; a raising plugin counts as no answer."""

        def failed(call: HookCall, exc: Exception) -> None:
            report_hook_failure(call.plugin, call.hook, exc, skipped=False)

        calls = hook_calls(self.manager, "laneway_task_ownership")
        for _call, owner in guarded(calls, lambda c: c(task=task, workspace=workspace), failed):
            if owner is not None:
                return str(owner)
        return None

    def agent_failed(
        self, host: PluginHost, failure: AgentFailure, case: FailureCase | None = None
    ) -> None:
        """Every observer of `failure`; `case` is how the host decided it (an undecided case,
        owner unknown and nothing read, when a caller reports a failure it did not decide)."""
        context = {"task_id": failure.task_id, "session_id": failure.session_id}
        decided = case if case is not None else FailureCase(failure)
        self.observe("laneway_agent_failed", context, host=host, failure=failure, case=decided)

    def host_started(self, host: PluginHost) -> None:
        calls = hook_calls(self.manager, "laneway_host_started")
        for _done in guarded(calls, lambda c: c(host=host), self._start_failed):
            pass

    def cli_commands(self, group: click.Group) -> list[str]:
        """Each plugin adds its commands; a plugin that raises has the commands it added
        before raising taken back, so the command line never holds half a plugin. Returns
        the failures' messages (the command line shows them once its logging is set up)."""
        failures: list[str] = []
        before: set[str] = set()

        def run(call: HookCall) -> None:
            before.clear()
            before.update(group.commands)
            call(group=group)

        def failed(call: HookCall, exc: Exception) -> None:
            for name in set(group.commands) - before:
                del group.commands[name]
            if self.strict:
                raise PluginError(hook_failure(call.plugin, call.hook, exc)) from exc
            failures.append(report_hook_failure(call.plugin, call.hook, exc, skipped=True))

        for _done in guarded(hook_calls(self.manager, "laneway_cli_commands"), run, failed):
            pass
        return failures
