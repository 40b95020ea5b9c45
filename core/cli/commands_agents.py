"""Commands about agents at work: messages to a session, cancelling a retry loop, reporting an
external agent's failure, and the runs worker (`laneway demo` is the Office plugin's).

`session send` and `session cancel-retry` belong to the `session` group of
`commands_task`; `SESSION_COMMANDS` lists them for that group to take in when first used.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import IO

import attrs
import click

from core.agents import worker
from core.agents.failure import why_not_dispatched
from core.agents.values import TurnOutcome
from core.cli.app import Settings, pass_settings, reader, writer
from core.cli.numbers import FiniteFloat, whole
from core.cli.output import emit, item_line
from core.errors import LanewayError
from core.host import Host
from core.model import AgentFailure, FailureCase, Item, Run, Session
from core.shapes import item_json, session_json
from core.store import events


def _session_line(session: Session) -> str:
    queued = len(session.metadata.get("queued_messages") or ())
    delivered = len(session.metadata.get("messages_delivered") or ())
    return (
        f"{session.id}  task={session.task_id}  state={session.state}  "
        f"queued={queued}  delivered={delivered}"
    )


# -- session send / cancel-retry -------------------------------------------------------------


@click.command("send")
@click.argument("session_id", metavar="S")
@click.argument("text", metavar="TEXT")
@pass_settings
def session_send(settings: Settings, session_id: str, text: str) -> None:
    """Send a message to the session's agent.

    It starts a new turn when the session waits for input, or is queued and delivered when
    the running turn ends.
    """
    with writer(settings) as host:
        sent = host.sessions.send(host.sessions.find(session_id).id, text)
        shaped = session_json(sent, host.profiles.list())
    emit(settings.json, shaped, [_session_line(sent)])


@click.command("cancel-retry")
@click.argument("session_id", metavar="S")
@pass_settings
def session_cancel_retry(settings: Settings, session_id: str) -> None:
    """Stop the agent's retry loop after a passing failure: it is not retried again, and no
    on_agent_error fires for it.

    The loop runs in the worker's process, so the request is recorded on the session for
    that process to see; within one process it is also handed to the runtime directly.
    """
    with writer(settings) as host:
        cancelled = host.sessions.request_cancel_retry(host.sessions.find(session_id).id)
        host.runtime.cancel_retry(cancelled.id)
        shaped = session_json(cancelled, host.profiles.list())
    emit(
        settings.json,
        shaped,
        [f"{_session_line(cancelled)}  cancel requested"],
    )


FOLLOW_POLL_S = 0.5
"""How long `session log --follow` waits for a commit's wake-up before it looks for new items
anyway (a fallback: an item's event wakes it at once)."""


@click.command("log")
@click.argument("session_ref", metavar="S")
@click.option("--run", "run_ref", metavar="R", help="Only this run's items.")
@click.option(
    "--after",
    type=whole(0),
    default=0,
    metavar="SEQ",
    help="Only items after this sequence number.",
)
@click.option("--follow", is_flag=True, help="Keep printing new items until interrupted.")
@pass_settings
def session_log(
    settings: Settings, session_ref: str, run_ref: str | None, after: int, follow: bool
) -> None:
    """The session's transcript, item by item.

    With --follow, new items are printed as they are kept (JSON lines with --json) until
    Ctrl-C, which ends the command quietly.
    """
    with reader(settings) as host:
        session = host.sessions.find(session_ref)
        run_id = host.runs.find(run_ref).id if run_ref is not None else None
        if not follow:
            found: list[Item] = []
            while True:
                page = host.sessions.items(session.id, run_id=run_id, after=after, limit=1000)
                found += page
                if len(page) < 1000:
                    break
                after = page[-1].seq
            emit(settings.json, [item_json(i) for i in found], [item_line(i) for i in found])
            return
        # bound before the first read: an item kept after it wakes the wait at once (each
        # comes with an `agent.item` event: PostgreSQL's NOTIFY, SQLite's wake-up socket)
        commits = events.Commits(host.store)
        with contextlib.suppress(KeyboardInterrupt), contextlib.closing(commits):
            while True:
                page = host.sessions.items(session.id, run_id=run_id, after=after, limit=1000)
                for found_item in page:
                    if settings.json:
                        click.echo(json.dumps(item_json(found_item), ensure_ascii=False))
                    else:
                        click.echo(item_line(found_item))
                    after = found_item.seq
                sys.stdout.flush()
                if len(page) < 1000:
                    commits.wait(FOLLOW_POLL_S)


SESSION_COMMANDS: tuple[click.Command, ...] = (session_send, session_cancel_retry, session_log)


# -- agent fail -------------------------------------------------------------------------------


def report_failure(host: Host, failure: AgentFailure) -> FailureCase:
    """An external agent's terminal failure, handled as the runtime handles its own agents':
    decided once, bookkeeping under the session guard, then (guard released) the dispatch.
    The case as the dispatch left it (`dispatched`: the step's on_agent_error trigger ran)."""
    return host.runtime.settle(failure)()


@click.group()
def agent() -> None:
    """Agents that run outside laneway."""


@agent.command("fail")
@click.argument("task_ref", metavar="T")
@click.option("--session", "session_id", required=True, metavar="S")
@click.option(
    "--execution",
    "execution_id",
    default="",
    metavar="E",
    help="The id of the execution that failed (part of the operation id).",
)
@click.option("--message", default="", metavar="M", help="What went wrong.")
@pass_settings
def agent_fail(
    settings: Settings, task_ref: str, session_id: str, execution_id: str, message: str
) -> None:
    """Report that an agent running outside laneway failed for good: on_agent_error fires."""
    with writer(settings) as host:
        task = host.tasks.get(task_ref)
        session = host.sessions.resolve(task.id, session_id)
        if not session.external:
            raise LanewayError(
                f"session {session.id} is run by laneway: its agent's failures are its own "
                "runtime's to report"
            )
        failure = AgentFailure(
            task_id=task.id,
            session_id=session.id,
            route="R1",
            error_message=message,
            agent_execution_id=execution_id,
            agent_profile_id=session.agent_profile_id or "",
        )
        case = report_failure(host, failure)
        reason = None if case.dispatched else why_not_dispatched(host, case)
    line = f"on_agent_error dispatched (operation {failure.operation_id})"
    if reason is not None:
        line = f"on_agent_error not dispatched (operation {failure.operation_id}): {reason}"
    emit(
        settings.json,
        {"dispatched": case.dispatched, "operation_id": failure.operation_id}
        | ({"reason": reason} if reason is not None else {}),
        [line],
    )


# -- worker -----------------------------------------------------------------------------------


class WorkerProgress:
    """What the worker prints on stderr as it goes.

    JSON lines with `--json`; plain lines when stderr is not a terminal; on a terminal, a
    line per finished run plus one live status line, rewritten in place (`\\r`).
    """

    def __init__(self, host: Host, *, as_json: bool, stream: IO[str] | None = None) -> None:
        self.host = host
        self.stream: IO[str] = stream or sys.stderr
        self.as_json = as_json
        self.live = not as_json and self.stream.isatty()
        self.names: dict[str, str] = {}
        self.running: dict[str, str] = {}
        self.counts = {"claimed": 0, "finished": 0, "failed": 0}

    def name_of(self, profile_id: str) -> str:
        if profile_id not in self.names:
            try:
                self.names[profile_id] = self.host.profiles.get(profile_id).name
            except LanewayError:
                self.names[profile_id] = profile_id
        return self.names[profile_id]

    def __call__(self, kind: str, run: Run, outcome: TurnOutcome | None) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        agent = self.name_of(run.agent_profile_id)
        if kind == "claimed":
            self.running[run.id] = agent
        else:
            self.running.pop(run.id, None)
        if self.as_json:
            self._write(
                json.dumps(
                    {
                        "event": kind,
                        "run_id": run.id,
                        "agent_profile_id": run.agent_profile_id,
                        "task_id": run.task_id,
                        "workflow_step_id": run.workflow_step_id,
                        "reason": run.reason,
                        "ok": outcome.ok if outcome is not None else None,
                        "error": outcome.error if outcome is not None else None,
                    }
                )
                + "\n"
            )
            return
        line = (
            f"{kind:<8} run {run.id}  agent={agent}  reason={run.reason}  task={run.task_id or '-'}"
        )
        if outcome is not None and outcome.error:
            line += f"  error={outcome.error}"
        if not self.live:
            self._write(line + "\n")
            return
        if kind == "claimed":
            self._status()
        else:
            self._write("\r\x1b[K" + line + "\n")
            self._status()

    def _status(self) -> None:
        names = ", ".join(self.running.values()) or "idle"
        c = self.counts
        self._write(
            f"\r\x1b[Kworking: {names}  (claimed {c['claimed']}, finished {c['finished']}, "
            f"failed {c['failed']})"
        )

    def close(self) -> None:
        if self.live:
            self._write("\r\x1b[K")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def _notice(text: str, *, as_json: bool) -> None:
    """A line on stderr from a signal handler: a raw write, never through a buffered stream
    the interrupted code may be in the middle of writing to."""
    line = json.dumps({"event": "shutdown", "message": text}) if as_json else f"laneway: {text}"
    with contextlib.suppress(OSError, ValueError, AttributeError):  # no real stderr (tests)
        os.write(sys.stderr.fileno(), f"{line}\n".encode())


@attrs.define
class Shutdown:
    """Ctrl-C (SIGINT) or SIGTERM while the worker runs.

    The first signal stops claiming and gives running agents `grace` seconds to end their
    turn; then they are stopped and their runs go back to the queue (re-queued, not failed:
    they are not the agents' failures; no on_agent_error). A second signal stops them at once;
    a third leaves at once (runs still claimed are re-queued by the next worker start: their
    epoch is gone).
    """

    host: Host
    stop: threading.Event
    grace: float
    as_json: bool = False
    signals: int = 0
    timer: threading.Timer | None = None

    def handle(self, _signum: int, _frame: FrameType | None) -> None:
        self.signals += 1
        if self.signals == 1:
            self.stop.set()
            _notice(
                f"stopping: no new runs; running agents get {self.grace:g}s to end their turn "
                "(interrupt again to kill them now)",
                as_json=self.as_json,
            )
            self.timer = threading.Timer(self.grace, self.kill)
            self.timer.daemon = True
            self.timer.start()
        elif self.signals == 2:
            self.kill()
        else:
            _notice("interrupted", as_json=self.as_json)
            self.host.runtime.kill_all()
            os._exit(130)

    def kill(self) -> None:
        _notice(
            "stopping the agents still running; their runs go back to the queue",
            as_json=self.as_json,
        )
        self.host.runtime.kill_all()

    @contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self.timer is not None:
                self.timer.cancel()


@click.command("worker")
@click.option("--once", is_flag=True, help="Take what is queued (and what it queues), then exit.")
@click.option("--max-runs", type=whole(1), metavar="N", help="Claim at most N runs.")
@click.option(
    "--concurrency",
    type=whole(1),
    default=1,
    show_default=True,
    metavar="K",
    help="Agents running at once.",
)
@click.option(
    "--grace",
    type=FiniteFloat(min=0),
    default=None,
    metavar="SECONDS",
    help=f"After Ctrl-C, how long running agents may take to end their turn before their "
    f"runs are put back in the queue [default: {worker.KILL_GRACE_S:g}].",
)
@click.option(
    "--profiles",
    metavar="P,...",
    default=None,
    help="Claim only runs of these agent profiles (names or ids, comma-separated).",
)
@pass_settings
def worker_command(
    settings: Settings,
    once: bool,
    max_runs: int | None,
    concurrency: int,
    grace: float | None,
    profiles: str | None,
) -> None:
    """Claim and execute queued runs.

    Without --once it keeps polling until interrupted. Ctrl-C (or SIGTERM) stops claiming and
    lets running agents end their turn within the grace period; the agents still running
    then are stopped and their runs put back in the queue (not failed: no on_agent_error,
    the next worker takes them). A second Ctrl-C stops them at once.
    """
    stop = threading.Event()
    with writer(settings) as host:
        shutdown = Shutdown(
            host, stop, worker.KILL_GRACE_S if grace is None else grace, as_json=settings.json
        )
        served = _served(host, profiles)
        host.register_worker()  # its host's runs have a worker alive (core.services.unattended)
        progress = WorkerProgress(host, as_json=settings.json)
        try:
            with shutdown.installed(), _scheduling(host, once):
                summary = worker.work(
                    host,
                    once=once,
                    max_runs=max_runs,
                    concurrency=concurrency,
                    stop=stop,
                    progress=progress,
                    profiles=served,
                )
        finally:
            progress.close()
    c = summary.as_dict()
    emit(
        settings.json,
        c,
        [f"claimed {c['claimed']}, finished {c['finished']}, failed {c['failed']}"],
    )


def _served(host: Host, profiles: str | None) -> list[str] | None:
    """`--profiles`: the ids of the named profiles (each by name or id); an unknown one is
    refused here, before anything is claimed."""
    if profiles is None:
        return None
    refs = [p.strip() for p in profiles.split(",") if p.strip()]
    if not refs:
        raise LanewayError("--profiles: name at least one agent profile")
    return [host.profiles.get(ref).id for ref in refs]


@contextlib.contextmanager
def _scheduling(host: Host, once: bool) -> Iterator[None]:
    """The trigger scheduler beside the worker (core.services.scheduler): one pass first, so
    that `--once` works what it delivered too, then, without `--once`, a pass a second."""
    from core.services import scheduler

    scheduler.run_pass(host)
    if once:
        yield
        return
    with scheduler.Scheduler(host):
        yield


COMMANDS: tuple[click.Command, ...] = (agent, worker_command)
