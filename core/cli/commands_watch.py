"""`laneway watch` (alias `events`): the board's event stream, tailed in a terminal.

It reads the event log (`board_events`) the way `laneway serve`'s stream does
(core/serve/stream.py): every event after the last id it printed, in id order, woken by a
PostgreSQL NOTIFY or, on SQLite, a byte on its wake-up socket (`core.store.wake`). So it needs
no `serve` running, and sees what every process does (commands, workers, `serve`). It opens
the board read-only: no epoch, no recovery scan.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import click

from core.cli.app import Settings, pass_settings, reader
from core.cli.numbers import whole
from core.errors import LanewayError
from core.store import events
from core.store.events import Event

if TYPE_CHECKING:
    from core.host import Host

SQLITE_POLL_S: Final = 0.2
"""How long a wait lasts on a SQLite board where no wake-up socket could be had."""
NOTIFIED_POLL_S: Final = 1.0
"""How long a wait lasts with no wake-up: a NOTIFY (PostgreSQL) or a byte on this process's
socket (SQLite, `core.store.wake`) ends it at once."""
PAGE: Final = 500


def short(ref: str | None) -> str:
    """An id as the board page shows it: its last 8 characters (they name it on the command
    line too, CLI.md)."""
    return ref[-8:] if ref else "-"


class Names:
    """Names for the ids events carry, read once each while the host is open; an id that no
    longer resolves (a deleted task, a removed profile) prints as its short form."""

    def __init__(self, host: Host) -> None:
        self._host = host
        self._steps: dict[str, str] = {}
        self._profiles: dict[str, str] = {}
        self._titles: dict[str, str | None] = {}

    def step(self, step_id: str | None) -> str:
        if not step_id:
            return "-"
        if step_id not in self._steps:
            try:
                self._steps[step_id] = self._host.workflows.step_by_id(step_id)[1].name
            except LanewayError:
                self._steps[step_id] = short(step_id)
        return self._steps[step_id]

    def agent(self, profile_id: str | None) -> str:
        if not profile_id:
            return "-"
        if profile_id not in self._profiles:
            self._profiles.update({p.id: p.name for p in self._host.profiles.list()})
        return self._profiles.get(profile_id, short(profile_id))

    def task(self, task_id: str | None) -> str:
        if task_id is None:
            return "board"
        if task_id not in self._titles:
            try:
                self._titles[task_id] = self._host.tasks.get(task_id).title
            except LanewayError:
                self._titles[task_id] = None
        title = self._titles[task_id]
        return f"{short(task_id)} {title!r}" if title is not None else short(task_id)


def _detail(event: Event, names: Names) -> str:
    d: Mapping[str, Any] = event.data
    kind = event.type
    if kind == "task.moved":
        how = f" ({d['entry_path']})" if d.get("entry_path") else ""
        queued = " queued: the step is full" if d.get("queued") else ""
        return (
            f"{names.step(d.get('from_step_id'))} -> {names.step(d.get('to_step_id'))}{how}{queued}"
        )
    if kind == "entry.marker":
        why = f" ({d['reason']})" if d.get("reason") else ""
        return f"[{d.get('position')}] {d.get('kind')}: {d.get('state')}{why}"
    if kind == "task.created":
        queued = " (queued: the step is full)" if d.get("queued") else ""
        return f"created at {names.step(d.get('step_id'))}{queued}"
    if kind.startswith("run."):
        agent = names.agent(d.get("agent_profile_id"))
        extra = "".join(f"  {d[k]}" for k in ("reason", "status") if d.get(k))
        return f"run {short(d.get('run_id'))}  agent={agent}{extra}"
    if kind == "decision.recorded":
        return f"{d.get('verdict')} at {names.step(d.get('step_id'))}"
    if kind == "session.state":
        return f"session {short(d.get('session_id'))} {d.get('state')}"
    if kind == "agent.item":
        first = str(d.get("text") or "").splitlines()[:1]
        return f"{d.get('kind')}: {first[0] if first else ''}"
    if kind.startswith("permission."):
        return f"permission {short(d.get('permission_id'))} {d.get('state')}"
    if kind.startswith("question."):
        return f"question {short(d.get('question_id'))} {d.get('state')}"
    if kind == "comment.added":
        return f"comment {short(d.get('comment_id'))}"
    return "  ".join(f"{k}={v}" for k, v in d.items() if not k.endswith("_id"))


def event_line(event: Event, names: Names) -> str:
    """One event as a person reads it: when, its id, its type, the task, what happened."""
    at = event.at[:19].replace("T", " ")
    task = names.task(event.task_id)
    return f"{at}  #{event.id:<6} {event.type:<22} {task}  {_detail(event, names)}".rstrip()


def follow(
    host: Host,
    *,
    after: int,
    on_event: Callable[[Event], None],
    task_id: str | None = None,
    stop: Callable[[], bool] = lambda: False,
    count: int | None = None,
) -> int:
    """Hand every event after id `after` (of one task, or all) to `on_event`, in id order,
    then each new one as it is committed, until `stop()` or `count` events; how many."""
    commits = events.Commits(host.store)
    poll = NOTIFIED_POLL_S if commits.listening or not host.store.is_sqlite else SQLITE_POLL_S
    seen = 0
    try:
        while not stop():
            with host.store.read() as conn:
                page = events.after(conn, after, task_id=task_id, limit=PAGE)
            for event in page:
                on_event(event)
                after = event.id
                seen += 1
                if count is not None and seen >= count:
                    return seen
            if len(page) < PAGE:
                commits.wait(poll)
    finally:
        commits.close()
    return seen


@click.command("watch")
@click.option("--task", "task_ref", metavar="T", help="Only this task's events.")
@click.option(
    "--since",
    type=whole(0),
    default=None,
    metavar="ID",
    help="Replay the retained events after this id first (0: all). Default: from now.",
)
@click.option(
    "--count",
    type=whole(1),
    default=None,
    metavar="N",
    help="Exit after N events.",
)
@click.option("--json", "as_json", is_flag=True, help="JSON lines (as the global --json).")
@pass_settings
def watch(
    settings: Settings,
    task_ref: str | None,
    since: int | None,
    count: int | None,
    as_json: bool,
) -> None:
    """Tail the board's events in the terminal (alias: `events`).

    The events as `serve`'s stream sends them: one readable line per event (JSON lines
    with --json: each the stream's `data:` object), from now unless --since replays the
    retained ones; needs no `serve` running. Ctrl-C ends it quietly (exit 0).
    """
    json_lines = as_json or settings.json
    with reader(settings) as host:
        task_id = host.tasks.get(task_ref).id if task_ref is not None else None
        with host.store.read() as conn:
            after = events.latest_id(conn) if since is None else since
        names = Names(host)

        def show(event: Event) -> None:
            if json_lines:
                click.echo(json.dumps(event.as_json(), ensure_ascii=False))
            else:
                click.echo(event_line(event, names))
            sys.stdout.flush()

        where = host.store.display_url
        if json_lines:
            click.echo(
                json.dumps({"watching": where, "after": after, "task_id": task_id}), err=True
            )
        else:
            scope = f" of task {short(task_id)}" if task_id else ""
            click.echo(
                f"laneway watch: events{scope} on {where} after #{after} (Ctrl-C stops)", err=True
            )
        with contextlib.suppress(KeyboardInterrupt):
            follow(host, after=after, on_event=show, task_id=task_id, count=count)


events_command = click.Command(
    "events",
    callback=watch.callback,
    params=watch.params,
    help=(
        "An alias of `watch`: tail the board's events. It is `watch` under the event "
        "stream's own name; `laneway watch --help` says the rest."
    ),
)

COMMANDS: tuple[click.Command, ...] = (watch, events_command)
