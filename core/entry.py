"""The entry dispatcher: walks one arrival's declared on_enter sequence.

It is the only component that executes a step's entry sequence, for every route. It reads the
bundle once and uses the declaration the transition read (the same snapshot the ledger's
digest was computed from). Session kinds need a live session and hold no marker; durable kinds
run behind ledger markers.

Order: on E1-E3 and E5 kinds that declare a placement are hoisted (first, second, ..., last);
on E4 (switch_workflow) the declared order holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loguru import logger

from core.kinds import ActionContext, ActionFailed, ConfigError
from core.model import ActionDecl
from core.registry import Registry

if TYPE_CHECKING:
    from core.host import Host
    from core.transition import Arrival

HOISTED_PATHS = frozenset({"E1", "E2", "E3", "E5"})
_HEAD = {"first": 0, "second": 1}


def order_actions(
    actions: tuple[ActionDecl, ...], registry: Registry, path: str
) -> list[ActionDecl]:
    """The walk order for an entry: declared order, with placements hoisted except on E4."""
    if path not in HOISTED_PATHS:
        return list(actions)

    def placement(decl: ActionDecl) -> str | None:
        registered = registry.kind(decl.kind)
        return registered.kind.placement if registered else None

    head = sorted(
        (a for a in actions if placement(a) in _HEAD),
        key=lambda a: (_HEAD[placement(a) or "first"], a.position),
    )
    tail = [a for a in actions if placement(a) == "last"]
    middle = [a for a in actions if placement(a) not in _HEAD and placement(a) != "last"]
    return head + middle + tail


def dispatch(host: Host, arrival: Arrival) -> None:
    """Execute the arrival's entry sequence. Called after the step change committed and before
    the committing caller returns."""
    bundle = host.bundle
    registry = bundle.registry
    task, step = arrival.task, arrival.step
    log = logger.bind(
        task_id=task.id,
        step_id=step.id,
        workflow_id=step.workflow_id,
        step_name=step.name,
        entry_path=arrival.entry_path,
        entry_id=arrival.entry.id if arrival.entry else None,
        entry_seq=arrival.entry.entry_seq if arrival.entry else None,
    )
    log.bind(event="arrival", from_step_id=arrival.from_step_id).info("arrival")
    session = host.sessions.live(task.id)
    ran_once: set[str] = set()
    for decl in order_actions(step.actions("on_enter"), registry, arrival.entry_path):
        action_log = log.bind(action_type=decl.kind, position=decl.position)
        registered = registry.kind(decl.kind)
        if registered is None or registered.kind.owner != "session":
            _durable_seam(action_log, decl)
            continue
        kind = registered.kind
        if arrival.entry_path not in kind.paths:
            action_log.warning("action kind has no owner on this entry path; skipped")
            continue
        if kind.once_per_entry and decl.kind in ran_once:
            continue
        if session is None:
            action_log.debug("no live session; session action skipped")
            continue
        if not registered.executable or kind.execute is None:
            action_log.bind(feature=kind.feature).warning("action kind has no executor; skipped")
            continue
        ran_once.add(decl.kind)
        ctx = ActionContext(
            task=task,
            step=step,
            trigger="on_enter",
            position=decl.position,
            session=session,
            services=host,
            logger=action_log,
            entry_path=arrival.entry_path,
            epoch=host.epoch,
        )
        _run_session_kind(kind.validate, kind.execute, ctx, decl, action_log)


def _run_session_kind(
    validate: Any, execute: Any, ctx: ActionContext, decl: ActionDecl, log: Any
) -> None:
    try:
        value = validate(decl.config)
    except ConfigError as exc:
        log.bind(reason="malformed", cause=str(exc)).warning("malformed action config; skipped")
        return
    try:
        outcome = execute(ctx, value)
    except ActionFailed as exc:
        log.bind(cause=exc.cause).error("entry action failed; the entry continues")
        return
    except Exception as exc:  # noqa: BLE001 - a plugin's bug must not stop the entry
        log.bind(cause=f"{type(exc).__name__}: {exc}").exception(
            "entry action raised; the entry continues"
        )
        return
    if outcome is not None and outcome.state == "failed":
        log.bind(cause=outcome.cause).error("entry action failed; the entry continues")


def _durable_seam(log: Any, decl: ActionDecl) -> None:
    """Durable kinds run behind ledger markers; until the marker walk lands they are reported,
    never dropped silently."""
    log.warning("durable entry action not executed: the ledger walk is not in this build")
