"""Checking a workflow's declarations against the plugins actually loaded.

Two strengths, on purpose:

- `check_workflow` (``laneway workflow check``) reports everything that would make an action
  or guard not run: kinds nobody declares, kinds without an executor, kinds a trigger cannot
  run, guards nobody declares or whose feature is off, and config errors.
- `validate_with_registry` (import) refuses only what a loaded plugin says is wrong: config
  errors of kinds and guards that are registered. An unknown kind or guard is accepted there,
  because the plugin that provides it may be installed later.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs

from core.model import TRIGGERS, ActionDecl, Events, Step, Workflow
from core.plugin.kinds import AgentUse, ConfigError
from core.workflows.decl import StepDecl, WorkflowDecl, WorkflowFileError

if TYPE_CHECKING:
    from core.plugin.registry import Registry

GUARD_KEY: Final = "if"
TRANSITION_PREFIX: Final = "move_"
"""Kinds whose top-level mapping-valued config keys are legacy guards (reference 2.3)."""


@attrs.frozen
class _Problem:
    step: str
    field: str
    problem: str
    at_import: bool
    """True when import must refuse it too; False when only `check` reports it."""


def check_workflow(workflow: Workflow, registry: Registry) -> list[str]:
    """Every problem that would keep one of `workflow`'s actions or guards from running.

    Each line names the workflow, step, trigger and position (as ``events.<trigger>[<i>]``)
    and the kind. An empty list means every declaration has a plugin that runs it.
    """
    return [
        str(WorkflowFileError(p.problem, workflow=workflow.name, step=p.step, field=p.field))
        for p in _problems(workflow.steps, registry)
    ]


@attrs.frozen
class AgentUseAt:
    """An agent an action of a workflow can start or seat, and where the action is."""

    step: str
    field: str
    kind: str
    use: AgentUse


def agent_uses(steps: Iterable[Step | StepDecl], registry: Registry) -> list[AgentUseAt]:
    """Every agent the workflow's actions can start or seat, as their kinds declare it.

    A workflow file can start the board's agents (a `queue_run` names the CEO agent or any
    profile, with a prompt of its own): this is what an operator reviews before trusting one.
    Actions whose kind is unknown, or whose config does not validate, are left out (the check
    reports those as problems).
    """
    found: list[AgentUseAt] = []
    for step in sorted(steps, key=lambda s: s.position):
        for trigger in _triggers(step.events):
            for action in step.events[trigger]:
                registered = registry.kind(action.kind)
                if registered is None or registered.kind.agents is None:
                    continue
                try:
                    config = registered.kind.validate(action.config)
                    uses = list(registered.kind.agents(config))
                except (ConfigError, ValueError, TypeError, KeyError):
                    continue
                at = f"events.{trigger}[{action.position}]"
                found += [AgentUseAt(step.name, at, action.kind, use) for use in uses]
    return found


def validate_with_registry(declared: WorkflowDecl | Workflow, registry: Registry) -> None:
    """Raise `WorkflowFileError` for the first config error a loaded plugin reports.

    Used at import, after the file itself decoded: kinds and guards nobody declares pass.
    """
    source = declared.source if isinstance(declared, WorkflowDecl) else None
    for p in _problems(declared.steps, registry):
        if p.at_import:
            raise WorkflowFileError(
                p.problem, file=source, workflow=declared.name, step=p.step, field=p.field
            )


def _problems(steps: Iterable[Step | StepDecl], registry: Registry) -> Iterator[_Problem]:
    for step in sorted(steps, key=lambda s: s.position):
        yield from _source_problems(step)
        for trigger in _triggers(step.events):
            for action in step.events[trigger]:
                at = f"events.{trigger}[{action.position}]"
                yield from _kind_problems(step.name, at, trigger, action, registry)
                yield from _guard_problems(step.name, at, action, registry)


def _source_problems(step: Step | StepDecl) -> Iterator[_Problem]:
    """A declared trigger the step itself keeps from ever firing (docs/workflow-format.md,
    "What fires where"): on_heartbeat needs the step's `heartbeat_seconds`."""
    if step.events.get("on_heartbeat") and step.heartbeat_seconds is None:
        yield _Problem(
            step.name,
            "events.on_heartbeat",
            "on_heartbeat never fires here: the step has no heartbeat_seconds",
            False,
        )
    if step.heartbeat_seconds is not None and not step.events.get("on_heartbeat"):
        yield _Problem(
            step.name,
            "heartbeat_seconds",
            "the heartbeat fires nothing: the step declares no on_heartbeat actions",
            False,
        )


def _triggers(events: Events) -> list[str]:
    # Canonical order first so reports read top to bottom like the file.
    return [t for t in TRIGGERS if t in events] + [t for t in events if t not in TRIGGERS]


def _kind_problems(
    step: str, at: str, trigger: str, action: ActionDecl, registry: Registry
) -> Iterator[_Problem]:
    kind = action.kind
    registered = registry.kind(kind)
    why = registry.unavailable(kind)
    if why is not None:
        yield _Problem(step, at, why, False)
    if registered is None:
        return
    if not registered.kind.trigger_ok(trigger):
        yield _Problem(step, at, f"kind '{kind}' cannot run on {trigger}", False)
    error = _validate(registered.kind.validate, action.config)
    if error is not None:
        field, message = error
        yield _Problem(
            step, _path(f"{at}.config", field), f"invalid config for kind '{kind}': {message}", True
        )


def _guard_problems(
    step: str, at: str, action: ActionDecl, registry: Registry
) -> Iterator[_Problem]:
    config = action.config
    guards: list[tuple[str, str, Any]] = []
    if GUARD_KEY in config:
        declared = config[GUARD_KEY]
        if not isinstance(declared, Mapping):
            yield _Problem(
                step,
                f"{at}.config.{GUARD_KEY}",
                f"kind '{action.kind}': '{GUARD_KEY}' must map guard names to their configs",
                True,
            )
        else:
            guards += [(str(n), f"{at}.config.{GUARD_KEY}.{n}", c) for n, c in declared.items()]
    if action.kind.startswith(TRANSITION_PREFIX):
        guards += [
            (key, f"{at}.config.{key}", value)
            for key, value in config.items()
            if key != GUARD_KEY and isinstance(value, Mapping)
        ]
    for name, field, guard_config in guards:
        registered = registry.guard(name)
        subject = f"guard '{name}' on kind '{action.kind}'"
        why = registry.unavailable_guard(name, on=action.kind)
        if why is not None:
            yield _Problem(step, field, why, False)
        if registered is None:
            continue
        error = _validate(registered.guard.validate, guard_config)
        if error is not None:
            sub, message = error
            yield _Problem(
                step, _path(field, sub), f"invalid config for {subject}: {message}", True
            )


def _validate(validate: Any, config: Any) -> tuple[str | None, str] | None:
    """(field, message) when a plugin's validator refuses `config`, else None."""
    try:
        validate(config)
    except ConfigError as exc:
        return exc.field, str(exc)
    except (ValueError, TypeError, KeyError) as exc:
        # A validator that trips over user input without a ConfigError still describes a
        # config problem; report it as one line rather than a traceback.
        return None, f"{type(exc).__name__}: {exc}"
    return None


def _path(prefix: str, field: str | None) -> str:
    """`prefix` ends in `.config`; validators name fields either bare or as `config.<key>`."""
    if not field:
        return prefix
    if field == "config" or field.startswith("config."):
        return f"{prefix.removesuffix('.config')}.{field}"
    return f"{prefix}.{field}"
