"""The hooks a laneway plugin may implement. This module is the plugin author's reference.

A plugin is a module (or object) with functions decorated by :data:`plugins.hookimpl`, found
through the ``laneway.plugins`` entry-point group; the entry point's name is the plugin's name
in allow- and block-lists. Every hook name starts with ``laneway_``; an implementation whose
name is unknown fails the host's start (``check_pending``), so a typo never goes unnoticed.

Hooks that *contribute* (kinds, guards, commands) receive a ``register`` callback or an object
to extend, rather than returning values: the host records which plugin contributed what, and
two plugins contributing one name stop the host with an error naming both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

from core.model import AgentFailure, FailureCase, Task, Workspace
from core.plugin.kinds import ActionKind, Forge, GuardKind
from core.plugin.views import PluginHost

if TYPE_CHECKING:
    import click

    from core.store.events import Event  # typing only: the store (SQLAlchemy) loads later

hookspec = pluggy.HookspecMarker("laneway")


@hookspec
def laneway_register_action_kinds(register: Callable[[ActionKind], None]) -> None:
    """Declare the action kinds this plugin provides.

    :param register: call once per kind with an :class:`core.plugin.kinds.ActionKind`.

    Called once each time the host builds a bundle (at open, and again when features or the
    plugin selection change). Declare every kind whatever the host's features are: when the
    kind's ``feature`` is off the host keeps the declaration (the kind stays recognised and
    durable) and drops only its executor.
    """


@hookspec
def laneway_register_guards(register: Callable[[GuardKind], None]) -> None:
    """Declare the transition guards this plugin provides.

    :param register: call once per guard with a :class:`core.plugin.kinds.GuardKind`.

    Called with :func:`laneway_register_action_kinds`. A guard is written in a workflow as
    ``if: {<name>: {...}}`` on a move action (or, legacy form, ``<name>: {...}`` at the top of
    the move's config).
    """


@hookspec
def laneway_register_forges(register: Callable[[Forge], None]) -> None:
    """Declare the forges (GitHub, ...) this plugin speaks to.

    :param register: call once per forge with a :class:`core.plugin.kinds.Forge`; a workflow
        names it by its ``name`` (`workflow set --forge NAME`).
    """


@hookspec(firstresult=True)
def laneway_task_ownership(task: Task, workspace: Workspace) -> str | None:
    """Claim a task for a plugin's own handling (Office claims its tasks).

    :param task: the task row.
    :param workspace: the task's workspace.
    :return: the owning plugin's name, or None for "not mine".

    Called when the host needs to know who owns a task (agent failure routing, auto-start).
    Stops at the first non-None result.
    """


@hookspec
def laneway_agent_failed(host: PluginHost, failure: AgentFailure, case: FailureCase) -> None:
    """Observe a terminal agent failure (plugins with their own recovery path act here).

    :param host: the host, typed as :class:`plugins.api.PluginHost`.
    :param failure: the :class:`core.model.AgentFailure`: task, session, route,
        message, execution id, run id, and whether the user initiated it (route R6).
    :param case: the :class:`core.model.FailureCase`, the failure as the host decided it once:
        the task's owner, the task as it stands at the dispatch (None when the dispatch stopped
        before reading it), and whether the host's own dispatch ran. An implementation reads
        ownership from here rather than deciding it again.

    Called once per terminal failure, after the host's own bookkeeping and its on_agent_error
    dispatch for tasks it owns, with the session's guard released. Office implements it for
    Office-owned tasks that have a claimed Office run. Exceptions are logged, never raised.
    """


@hookspec
def laneway_host_started(host: PluginHost) -> None:
    """React to a host that has finished opening.

    :param host: the host (:class:`plugins.api.PluginHost`), with its store open, lock held,
        recovery done.

    Called once per :meth:`core.Host.open`, after the first bundle is published and the
    recovery scan ran, before the host is returned to its caller.
    """


@hookspec
def laneway_cli_commands(group: click.Group) -> None:
    """Add commands to the ``laneway`` command line.

    :param group: the top-level click group; call ``group.add_command(...)``.

    Called once when the ``laneway`` command starts, before arguments are parsed.
    """


@hookspec
def laneway_event(event: Event) -> None:
    """Observe something that happened on the board, after it committed.

    :param event: a :class:`core.store.events.Event` (frozen): ``id`` (grows in commit order;
        0 for an event that is not stored), ``type``, ``task_id`` (None: board-wide), ``at``
        (ISO time it was recorded) and ``data``, the type's fields (ids, never names):

        - ``task.created`` ``{workflow_id, step_id, queued}``; ``task.archived``,
          ``task.deleted`` ``{workflow_id}``; ``task.updated`` ``{workflow_id, fields}``
          (the names of what changed: ``title``, ``description``); ``task.unarchived``
          ``{workflow_id, step_id}``;
        - ``task.moved`` ``{workflow_id, from_step_id, to_step_id, entry_path, queued,
          entry_id, entry_seq}`` (``queued``: waiting for a WIP slot, no arrival yet);
        - ``entry.marker`` ``{entry_id, position, kind, state, reason}``: an entry action
          began (``in_progress``) or settled (``done``, ``failed``, ``skipped``, ...);
        - ``run.queued``, ``run.started``, ``run.finished``, ``run.failed``,
          ``run.cancelled`` ``{run_id, agent_profile_id}`` (``run.queued`` adds ``reason``;
          ``run.cancelled`` of a queued run has ``reason``, no agent);
        - ``decision.recorded`` ``{step_id, participant_id, verdict, decision_id}``;
        - ``session.state`` ``{session_id, state}``;
        - ``agent_error.dispatched`` ``{path, run_id, session_id, operation_id, step_id,
          action_count}``: an agent's terminal failure ran its step's on_agent_error actions
          (``path``: ``"host"``, or the plugin that dispatched it, e.g. ``"office"``);
        - ``agent.output`` ``{run_id, session_id, text}``: a line an agent said (delivered as
          it happens, never stored: ``id`` 0).

    Called once per event, after the transaction that recorded it committed, in commit order
    (events committed by this process only; a rolled-back change delivers nothing), on the
    committing thread with the store's writer lock free: an observer may read and write.
    Each implementation is called in its own guard: one that raises is logged with its
    plugin's name and never stops the others nor the change, which has committed already.
    When no plugin implements this hook, the host does no work for it at all. The same
    events, stored, are the HTTP stream's (``GET /api/events``).
    """
