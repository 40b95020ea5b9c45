"""The arrival layer: what follows a committed step change, above the transition.

`core.transition.move` commits a step change and returns what changed. `move` here calls it
and then, still inside the caller's call, runs what follows the commit, in order:

1. the `on_exit` actions of the step the task left (`core.actions.run_exit`; the first failure
   aborts them);
2. for an arrival, its session is prepared (`Arrivals.prepare_session`, supplied by the layer
   that runs agents) and the entry dispatcher walks its entry sequence (`core.entry`);
3. queued tasks are promoted into the step the task vacated (`promote`), each promotion its
   own transaction and its own E3 arrival, dispatched before the next is considered.

So when a caller's move returns, the entry sequence has run.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from core import actions, entry, transition
from core.entry import Arrival
from core.errors import LanewayError
from core.kernel import Kernel
from core.model import Session, Task
from core.transition import Change, StepChoice

SessionPreparer = Callable[[Arrival], Session | None]
"""Given a committed arrival, the session its session kinds act on (None: none). It may switch
the task to the step's agent; the layer that runs agents supplies it."""


@attrs.frozen
class Arrivals:
    """What the arrival layer works with: the kernel, and how an arrival's session is
    prepared (without one, the arrival's live session is read as it stands)."""

    kernel: Kernel
    prepare_session: SessionPreparer | None = None


def move(
    arrivals: Arrivals,
    task_id: str,
    to_step: StepChoice,
    *,
    path: str,
    label: str,
    expected_step_id: str | None = None,
    actor: str = "",
    by_trigger: bool | None = None,
) -> Change:
    """`core.transition.move`, then what follows its commit (see the module)."""
    change = transition.move(
        arrivals.kernel,
        task_id,
        to_step,
        path=path,
        label=label,
        expected_step_id=expected_step_id,
        actor=actor,
        by_trigger=by_trigger,
    )
    if change.changed and change.left is not None:
        follow(arrivals, change.left, change.from_step_id, change.arrival)
    return change


def follow(arrivals: Arrivals, before: Task, source: str | None, arrival: Arrival | None) -> None:
    """on_exit of the step left, the arrival's entry sequence, then promotion into the gap."""
    kernel = arrivals.kernel
    if source is not None and before.wip_admitted and before.workflow_id is not None:
        actions.run_exit(kernel, kernel.bundle().registry, before, source)
    if arrival is not None:
        dispatch(arrivals, arrival)
    if source is not None and before.wip_admitted:
        promote(arrivals, source)


def dispatch(arrivals: Arrivals, arrival: Arrival) -> entry.WalkEnd:
    """Prepare the arrival's session, then walk its entry sequence."""
    if arrivals.prepare_session is not None:
        session = arrivals.prepare_session(arrival)
    elif arrival.session_id is not None:
        session = arrivals.kernel.read.session(arrival.session_id)
    else:
        session = None
    return entry.dispatch(arrivals.kernel, arrival, session)


def promote(arrivals: Arrivals, step_id: str) -> list[Arrival]:
    """Admit queued tasks into `step_id` while it has room (entry path E3).

    Each admission is its own transaction and its own arrival, dispatched before the next is
    considered; a feeder task pulled forward vacates the feeder, which is promoted in turn.
    """
    kernel = arrivals.kernel
    try:
        workflow, step = kernel.read.step(step_id)
    except LanewayError:
        return []
    if step.wip_limit <= 0:
        return []  # an unlimited step is never full, so nothing can be queued for it
    promoted: list[Arrival] = []
    while True:
        admitted = transition.admit_next(kernel, workflow, step)
        if admitted is None:
            return promoted
        promoted.append(admitted.arrival)
        source = admitted.source
        if source is not None and source != step.id:
            actions.run_exit(kernel, kernel.bundle().registry, admitted.left, source)
            dispatch(arrivals, admitted.arrival)
            promoted.extend(promote(arrivals, source))
        else:
            dispatch(arrivals, admitted.arrival)


def restore_step(arrivals: Arrivals, task_id: str, step_id: str) -> Task:
    """Put the task back at a step from history (no entry work), then fill the step it left."""
    return _then_fill(arrivals, *transition.restore_step(arrivals.kernel, task_id, step_id))


def detach(arrivals: Arrivals, task_id: str) -> Task:
    """Take the task out of its workflow, then fill the step it left."""
    return _then_fill(arrivals, *transition.detach(arrivals.kernel, task_id))


def _then_fill(arrivals: Arrivals, before: Task, committed: Task) -> Task:
    """After a move without an arrival: the step the task left, if it left one, admits the
    next task queued for it."""
    if before.workflow_step_id and before.workflow_step_id != committed.workflow_step_id:
        promote(arrivals, before.workflow_step_id)
    return committed
