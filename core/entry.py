"""The entry dispatcher: walks one arrival's declared on_enter sequence.

It is the only component that executes a step's entry sequence, for every route and for the
recovery scan. It reads the bundle once, and uses the declaration the transition read (the
snapshot whose digest the ledger recorded); the declaration is never re-read mid-walk.

- Order: on E1-E3 and E5, kinds declaring a placement are hoisted (first, second) or deferred
  (last); on E4 (switch_workflow) the declared order holds.
- Session kinds need a live session, hold no marker, and run at most once per dispatch (not
  across a crash: recovery never runs them).
- Durable kinds (and kinds nobody declares) run behind a ledger marker: claim by
  compare-and-set, run, settle done / skipped(reason) / failed(cause). Losing a claim to a live
  peer abandons the entry silently: the peer walks the same declaration in the same order.
- A failure is recorded and the walk goes on, except after a kind that halts the entry.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from core import faults, ledger, memo
from core.kernel import HasKernel, Kernel, Published, kernel_of
from core.logs import logger
from core.model import ActionDecl, Session, Step, StepEntry, Task, Workflow
from core.plugin.kinds import (
    ActionContext,
    ActionKind,
    ConfigError,
    Outcome,
    failed_by,
    run_executor,
)
from core.plugin.registry import RegisteredKind, Registry

HOISTED_PATHS = frozenset({"E1", "E2", "E3", "E5"})
_HEAD = {"first": 0, "second": 1}

WalkEnd = Literal["completed", "abandoned", "halted", "declaration_changed", "vacated", "no_entry"]


@attrs.frozen
class Arrival:
    """One committed arrival (the transition commits it, the dispatcher walks it): the task
    as committed, where it arrived, and by which path."""

    task: Task
    workflow: Workflow
    step: Step
    entry_path: str
    from_step_id: str | None
    session_id: str | None
    entry: StepEntry | None = None


def order_actions(
    actions: tuple[ActionDecl, ...], registry: Registry, path: str
) -> list[ActionDecl]:
    """The walk order for an entry: declared order, with placements hoisted except on E4."""
    return list(actions if path not in HOISTED_PATHS else _hoisted(actions, registry))


@memo.by_identity
def _hoisted(actions: tuple[ActionDecl, ...], registry: Registry) -> tuple[ActionDecl, ...]:
    def placement(decl: ActionDecl) -> str | None:
        registered = registry.kind(decl.kind)
        return registered.kind.placement if registered else None

    head = sorted(
        (a for a in actions if placement(a) in _HEAD),
        key=lambda a: (_HEAD[placement(a) or "first"], a.position),
    )
    tail = [a for a in actions if placement(a) == "last"]
    middle = [a for a in actions if placement(a) not in _HEAD and placement(a) != "last"]
    return (*head, *middle, *tail)


@attrs.frozen
class Walk:
    """One walk over an entry's declaration: everything it reads once."""

    kernel: Kernel
    bundle: Published
    task: Task
    step: Step
    actions: tuple[ActionDecl, ...]
    entry: StepEntry | None
    path: str
    recovering: bool
    log: Any
    session: Session | None
    """The session the arrival's session kinds act on (None: no session, or recovering)."""


def dispatch(
    kernel: Kernel | HasKernel, arrival: Arrival, session: Session | None = None
) -> WalkEnd:
    """Execute a fresh arrival's entry sequence: after its step change committed, before the
    committing caller returns. `session` is the one its session kinds act on, prepared by the
    arrival layer (`core.arrival`)."""
    walk = _walk_for(
        kernel_of(kernel), arrival.task, arrival.step, arrival.entry, arrival.entry_path, session
    )
    walk.log.bind(event="arrival", from_step_id=arrival.from_step_id).info("arrival")
    return run(walk)


def apply_session_kinds(
    kernel: Kernel | HasKernel, task: Task, step: Step, session: Session, path: str = "E5"
) -> None:
    """What the step's on_enter declares for its agent's session (its session kinds, in the
    entry's order, except those that start the agent), applied to `session` for a task
    started at the step it already stands at: no step changed, so no arrival, no entry
    record and no durable action (the E5 rule), yet the first turn runs as the step says."""
    walk = _walk_for(kernel_of(kernel), task, step, None, path, session)
    registry = walk.bundle.registry
    ran_once: set[str] = set()
    for decl in order_actions(walk.actions, registry, path):
        registered = registry.kind(decl.kind)
        if registered is None or registered.kind.owner != "session" or registered.kind.starts_agent:
            continue
        log = walk.log.bind(action_type=decl.kind, position=decl.position)
        _session_action(walk, registered, decl, session, ran_once, log)
    walk.log.bind(session_id=session.id, applied=sorted(ran_once)).info(
        "task started at its step: the step's session kinds applied (no arrival)"
    )


def redispatch(kernel: Kernel | HasKernel, task: Task, step: Step, entry: StepEntry) -> WalkEnd:
    """Resume an entry left non-terminal (recovery): durable positions only."""
    return run(
        _walk_for(kernel_of(kernel), task, step, entry, entry.entry_path, None, recovering=True)
    )


def _walk_for(
    kernel: Kernel,
    task: Task,
    step: Step,
    entry: StepEntry | None,
    path: str,
    session: Session | None,
    *,
    recovering: bool = False,
) -> Walk:
    log = logger.bind(
        task_id=task.id,
        step_id=step.id,
        workflow_id=step.workflow_id,
        step_name=step.name,
        entry_path=path,
        entry_id=entry.id if entry else None,
        entry_seq=entry.entry_seq if entry else None,
    )
    return Walk(
        kernel,
        kernel.bundle(),
        task,
        step,
        step.actions("on_enter"),
        entry,
        path,
        recovering,
        log,
        session,
    )


def run(walk: Walk) -> WalkEnd:
    registry = walk.bundle.registry
    store = walk.kernel.store
    markers: dict[tuple[int, str], Any] = {}
    if walk.entry is not None:
        digest = ledger.declaration_digest(walk.actions)
        if digest != walk.entry.declaration_digest:
            try:
                with store.transaction(follow_board=False) as uow:
                    ledger.skip_entry(
                        uow,
                        registry,
                        walk.entry.id,
                        walk.actions,
                        "declaration_changed",
                        epoch=walk.kernel.live_epoch(),
                    )
            except ledger.ClaimLost:
                return "abandoned"
            walk.log.bind(
                recorded_digest=walk.entry.declaration_digest, current_digest=digest
            ).warning("step declaration changed since the entry began; entry abandoned")
            return "declaration_changed"
        if walk.recovering:
            with store.read() as conn:
                markers = ledger.load_markers(conn, walk.entry.id)
        # A fresh arrival's entry was allocated by its own transition: it has no markers yet.
    # Durable positions not yet known terminal; the one that empties it also closes the entry.
    open_positions = {
        (d.position, d.kind)
        for d in ledger.durable_positions(registry, walk.actions)
        if (m := markers.get((d.position, d.kind))) is None or m.state not in ledger.TERMINAL
    }
    session = walk.session
    ran_once: set[str] = set()
    closed = False  # whether a settled marker already closed the entry in its transaction
    ordered = order_actions(walk.actions, registry, walk.path)
    at = 0
    while at < len(ordered):
        decl = ordered[at]
        at += 1
        registered = registry.kind(decl.kind)
        action_log = walk.log.bind(action_type=decl.kind, position=decl.position)
        owner = registered.kind.owner if registered else "durable"
        if owner == "session":
            if not walk.recovering:
                _session_action(walk, registered, decl, session, ran_once, action_log)
            continue
        if owner == "structural":
            action_log.warning("action kind cannot run on on_enter; skipped")
            continue
        if walk.entry is None:
            # The registry changed between allocation and dispatch; nothing can hold a marker.
            action_log.warning("durable action has no entry record; skipped")
            continue
        marker = markers.get((decl.position, decl.kind))
        if marker is not None and marker.state in ledger.TERMINAL:
            if marker.state == "failed" and registered and registered.kind.halts_entry_on_failure:
                return "halted"
            continue
        member = _member(registered, decl, action_log)
        if member is not None:
            # this transactional kind and the ones straight after it share one transaction
            group = [member]
            while at < len(ordered):
                following = _groupable(walk, registry, markers, ordered[at])
                if following is None:
                    break
                group.append(following)
                at += 1
            try:
                end = _transactional_group(walk, group, open_positions)
            except ledger.ClaimLost:
                return "abandoned"
            except _Vacated as left:
                return _vacated(walk, left)
            if end == "halted":
                return "halted"
            closed = end == "closed"
            continue
        open_positions.discard((decl.position, decl.kind))
        last = not open_positions
        try:
            outcome = _durable_action(walk, registered, decl, action_log, last)
        except ledger.ClaimLost:
            return "abandoned"
        except _Vacated as left:
            return _vacated(walk, left)
        closed = last and outcome is not None
        if (
            outcome is not None
            and outcome.state == "failed"
            and registered is not None
            and registered.kind.halts_entry_on_failure
        ):
            return "halted"
    if walk.entry is not None and not closed:
        with store.transaction(follow_board=False) as uow:
            ledger.finish_if_complete(uow, registry, walk.entry.id, walk.actions)
    return "completed"


def _context(
    walk: Walk, decl: ActionDecl, session: Any, log: Any, uow: Any = None, epoch: str | None = None
) -> ActionContext:
    entry = walk.entry
    return ActionContext(
        task=walk.task,
        step=walk.step,
        trigger="on_enter",
        position=decl.position,
        session=session,
        services=walk.kernel.services,
        logger=log,
        entry_id=entry.id if entry else None,
        entry_seq=entry.entry_seq if entry else None,
        entry_path=walk.path,
        epoch=epoch or walk.kernel.epoch(),
        uow=uow,
    )


def _session_action(
    walk: Walk,
    registered: RegisteredKind | None,
    decl: ActionDecl,
    session: Any,
    ran_once: set[str],
    log: Any,
) -> None:
    assert registered is not None
    kind = registered.kind
    if walk.path not in kind.paths:
        log.warning("action kind has no owner on this entry path; skipped")
        return
    if kind.once_per_entry and decl.kind in ran_once:
        return
    if session is None:
        log.debug("no live session; session action skipped")
        return
    if not registered.executable or kind.execute is None:
        log.bind(feature=kind.feature, why=walk.bundle.registry.unavailable(decl.kind)).warning(
            "action kind has no executor; skipped"
        )
        return
    ran_once.add(decl.kind)
    try:
        value = kind.validate(decl.config)
    except ConfigError as exc:
        log.bind(cause=str(exc)).error("malformed action config; skipped")
        return
    outcome = run_executor(kind.execute, _context(walk, decl, session, log), value)
    if outcome is not None and outcome.state == "failed":
        log.bind(cause=outcome.cause).error("entry action failed; the entry continues")


def _skip_position(walk: Walk, decl: ActionDecl, reason: str, last: bool) -> bool:
    """Claim and mark skipped(reason) in one transaction; False if already terminal."""
    assert walk.entry is not None
    with walk.kernel.store.transaction(follow_board=False) as uow:
        epoch = walk.kernel.live_epoch()
        if not ledger.skip_position(
            uow, walk.entry.id, decl.position, decl.kind, reason, epoch=epoch
        ):
            return False
        if last:
            ledger.set_terminal(uow, walk.entry.id)
    return True


class _Vacated(Exception):
    """The task no longer occupies the entry's step: the entry was closed without its effect."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _vacated(walk: Walk, left: _Vacated) -> Literal["vacated"]:
    walk.log.bind(reason=left.reason).info(
        "the task no longer occupies this entry's step; entry closed without running"
    )
    return "vacated"


def _close_if_vacated(
    uow: Any, walk: Walk, decl: ActionDecl, epoch: str, entry: StepEntry
) -> str | None:
    """Newer entries win, live as in recovery: with our marker just claimed, and in the
    transaction that would commit the effect, settle the whole entry skipped when the task
    has left the step or a newer entry superseded this one. Returns the reason, for the
    caller to raise `_Vacated` once this transaction has committed."""
    reason = ledger.vacated(uow, entry)
    if reason is not None:
        ledger.settle(
            uow, entry.id, decl.position, decl.kind, "skipped", epoch=epoch, reason=reason
        )
        ledger.skip_entry(uow, walk.bundle.registry, entry.id, walk.actions, reason, epoch=epoch)
    return reason


def _durable_action(
    walk: Walk, registered: RegisteredKind | None, decl: ActionDecl, log: Any, last: bool
) -> Outcome | None:
    """One durable position: claim, run, settle (closing the entry when `last`).

    Returns None when the marker was already terminal (someone else settled it); raises
    ClaimLost to abandon the entry.
    """
    entry = walk.entry
    assert entry is not None
    if registered is None:
        if not _skip_position(walk, decl, "unrecognised", last):
            return None
        log.bind(why=walk.bundle.registry.unavailable(decl.kind)).warning(
            "no plugin declares this action kind; skipped"
        )
        return Outcome.skipped("unrecognised")
    kind = registered.kind
    if not registered.executable or kind.execute is None:
        if not _skip_position(walk, decl, "no_executor", last):
            return None
        log.bind(feature=kind.feature, why=walk.bundle.registry.unavailable(decl.kind)).warning(
            "action kind has no executor in this configuration; skipped"
        )
        return Outcome.skipped("no_executor")
    try:
        value = kind.validate(decl.config)
    except ConfigError as exc:
        if not _skip_position(walk, decl, "malformed", last):
            return None
        log.bind(cause=str(exc), field=exc.field).error("malformed action config; skipped")
        return Outcome.skipped("malformed")

    store = walk.kernel.store
    faults.reach("dispatch.before_claim")
    epoch = walk.kernel.live_epoch()
    # An effect outside this transaction cannot be guarded by it: the occupancy is decided
    # with the claim, the last moment the database can decide it for such a kind.
    # (Transactional kinds take `_transactional_group` instead.)
    with store.transaction(follow_board=False) as uow:
        if not ledger.claim(uow, entry.id, decl.position, decl.kind, epoch):
            return None
        left = _close_if_vacated(uow, walk, decl, epoch, entry)
    if left is not None:
        raise _Vacated(left)
    faults.reach("dispatch.after_claim")
    ctx = _context(walk, decl, None, log, epoch=epoch)
    outcome = run_executor(kind.execute, ctx, value) or Outcome.done()
    if outcome.state == "failed" and walk.kernel.live_epoch() != epoch:
        # This process was fenced while the effect ran (a claim-checking kind refused to act
        # on it): it settles nothing, and the process that declares its epoch dead runs it.
        log.bind(cause=outcome.cause).warning("claim lost during the action; left to recovery")
        raise ledger.ClaimLost
    faults.reach("dispatch.after_effect")
    with store.transaction(follow_board=False) as uow:
        _settle(uow, entry.id, decl, outcome, last, epoch)
    _log_failure(kind, outcome, log)
    return outcome


def _log_failure(kind: ActionKind, outcome: Outcome, log: Any) -> None:
    if outcome.state != "failed":
        return
    if kind.halts_entry_on_failure:
        log.bind(cause=outcome.cause).error(
            "entry halted: an action that guards the rest of the entry failed"
        )
    elif not kind.logs_own_failures:
        log.bind(cause=outcome.cause).error("entry action failed; the entry continues")


# -- transactional kinds: claim, effect and done-marker in one transaction ----------------------


@attrs.frozen
class _Member:
    """A transactional position ready to run: its declaration, kind and validated config."""

    decl: ActionDecl
    kind: ActionKind
    execute: Any
    value: Any
    log: Any


def _member(registered: RegisteredKind | None, decl: ActionDecl, log: Any) -> _Member | None:
    """The position as a transactional group member; None for any other durable position
    (no plugin, no executor, a malformed config, an effect outside the database)."""
    if registered is None or not registered.executable:
        return None
    kind = registered.kind
    if kind.owner != "durable" or not kind.transactional or kind.execute is None:
        return None
    try:
        value = kind.validate(decl.config)
    except ConfigError:
        return None  # the one-position path records it skipped(malformed)
    return _Member(decl, kind, kind.execute, value, log)


def _groupable(
    walk: Walk, registry: Registry, markers: dict[tuple[int, str], Any], decl: ActionDecl
) -> _Member | None:
    """The next declaration as a member of the group before it, or None to end the group."""
    marker = markers.get((decl.position, decl.kind))
    if marker is not None and marker.state in ledger.TERMINAL:
        return None
    log = walk.log.bind(action_type=decl.kind, position=decl.position)
    return _member(registry.kind(decl.kind), decl, log)


class _ClaimApart(Exception):
    """The group's claim up front found a member's marker held already: undo it, and claim
    the members one by one (each then sees what holds its marker)."""


class _GroupRollback(Exception):
    """A member raised: undo the whole group's transaction; its failure is recorded when the
    group runs again (the members before it run afresh, the ones after it too)."""

    def __init__(self, index: int, outcome: Outcome) -> None:
        super().__init__(outcome.cause)
        self.index = index
        self.outcome = outcome


GroupEnd = Literal["open", "closed", "halted"]


def _transactional_group(
    walk: Walk, group: list[_Member], open_positions: set[tuple[int, str]]
) -> GroupEnd:
    """Consecutive transactional positions, each claimed, run and settled, all in ONE
    transaction: every effect commits with its terminal marker, and the group's markers
    commit together or not at all (an in_progress or absent marker still proves its effect
    never committed). The entry closes in the same transaction when the group empties it.

    A member that *raises* may leave a partial effect (on PostgreSQL, an aborted
    transaction): the transaction is rolled back and the group runs again with that member's
    failure recorded instead of run. A *returned* failure keeps what the executor wrote (a
    fan-out's seats that succeeded), committed with its marker. A member whose failure halts
    the entry ends the group there.
    """
    failures: dict[int, Outcome] = {}
    # The group claims under the epoch as last checked, without checking the liveness lock
    # first (on PostgreSQL a round trip to the lock connection): its claims never commit as
    # `in_progress` - every marker it claims commits settled, or not at all - so no other
    # process ever acts on the epoch they name. A lost claim is where a lost lock could
    # matter (a marker of our own old epoch, which others may have declared dead): the lock is
    # checked then, and the group runs again under the new epoch if this process was fenced.
    epoch = walk.kernel.epoch()
    checked = epoch is None
    if epoch is None:
        epoch = walk.kernel.live_epoch()
    apart = False
    while True:
        try:
            settled, end = _group_once(walk, group, open_positions, failures, epoch, apart)
        except _GroupRollback as undone:
            failures[undone.index] = undone.outcome
            continue
        except _ClaimApart:
            apart = True
            continue
        except ledger.ClaimLost:
            if checked:
                raise
            checked = True
            live = walk.kernel.live_epoch()
            if live == epoch:
                raise
            epoch = live
            continue
        for member, outcome in settled:
            open_positions.discard((member.decl.position, member.decl.kind))
            _log_failure(member.kind, outcome, member.log)
        return end


def _group_once(
    walk: Walk,
    group: list[_Member],
    open_positions: set[tuple[int, str]],
    failures: dict[int, Outcome],
    epoch: str,
    apart: bool = False,
) -> tuple[list[tuple[_Member, Outcome]], GroupEnd]:
    entry = walk.entry
    assert entry is not None
    store = walk.kernel.store
    settled: list[tuple[_Member, Outcome]] = []
    remaining = set(open_positions)
    end: GroupEnd = "open"
    left: str | None = None
    faults.reach("dispatch.before_claim")
    with store.transaction(follow_board=False) as uow:
        occupancy_checked = False
        # Every member claimed, and the occupancy checked, in one statement (the common case);
        # when it claims none, each member is claimed on its own and the occupancy checked
        # after the first claim, which tells a vacated entry from a marker held already; when
        # it claims some but not all (a marker held already), the group runs again apart.
        up_front: list[tuple[int, str]] = []
        if not apart:
            keys = [(m.decl.position, m.decl.kind) for m in group]
            claimed = ledger.claim_all_if_occupied(uow, entry, keys, epoch)
            if claimed == len(keys):
                up_front, occupancy_checked = keys, True
            elif claimed:
                raise _ClaimApart
        for index, member in enumerate(group):
            decl = member.decl
            if index:
                faults.reach("dispatch.before_claim")
            # claimed, then settled or rolled back, in this transaction: no in_progress event
            if not up_front and not ledger.claim(
                uow, entry.id, decl.position, decl.kind, epoch, settles_here=True
            ):
                remaining.discard((decl.position, decl.kind))
                continue  # terminal already: someone else settled it
            recorded = failures.get(index)
            if recorded is None:
                faults.reach("dispatch.after_claim")
            if not occupancy_checked:
                # Newer entries win: decided once, with the first claim, in the transaction
                # that commits every effect of the group (the task row is held till COMMIT).
                occupancy_checked = True
                left = _close_if_vacated(uow, walk, decl, epoch, entry)
                if left is not None:
                    break
            if recorded is not None:
                outcome = recorded
            else:
                ctx = _context(walk, decl, None, member.log, uow, epoch)
                try:
                    outcome = member.execute(ctx, member.value) or Outcome.done()
                except Exception as exc:  # noqa: BLE001 - recorded as failed, as by run_executor
                    raise _GroupRollback(index, failed_by(ctx, exc)) from None
            _settle(uow, entry.id, decl, outcome, False, epoch, claimed_here=True)
            settled.append((member, outcome))
            remaining.discard((decl.position, decl.kind))
            if outcome.state == "failed" and member.kind.halts_entry_on_failure:
                end = "halted"
                # the members after it were claimed up front: unclaimed, they commit no marker
                ledger.unclaim(uow, entry.id, up_front[index + 1 :], epoch)
                break
        if left is None and settled and not remaining:
            ledger.set_terminal(uow, entry.id)
            if end == "open":
                end = "closed"
    if left is not None:
        raise _Vacated(left)
    return settled, end


def _settle(
    uow: Any,
    entry_id: str,
    decl: ActionDecl,
    outcome: Outcome,
    last: bool,
    epoch: str,
    *,
    claimed_here: bool = False,
) -> None:
    ledger.settle(
        uow,
        entry_id,
        decl.position,
        decl.kind,
        outcome.state,
        epoch=epoch,
        reason=outcome.reason,
        cause=outcome.cause,
        claimed_here=claimed_here,
    )
    if last:
        ledger.set_terminal(uow, entry_id)
