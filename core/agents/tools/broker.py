"""The worker's half of the tool server: answers an agent's tool calls for the run it granted.

The agent's MCP server (`core.agents.tools.server`) runs in the agent's environment, which
holds nothing that opens the database. What it holds instead is a per-run capability: the
path of this broker's unix socket (in a 0700 directory), the broker's authkey (the stdlib
`multiprocessing.connection` challenge-response, so a process without the key cannot talk to
the broker at all) and the run's token, which names exactly one task, step and seat. Every
call is checked against its token's grant; a revoked or unknown token, or a call naming
another task, is refused. And the capability is bound to the run's own agent: where the
runtime says which process runs the grant's turn (`owner`), a call is answered only on a
connection made by that process or one of its descendants (the kernel's `SO_PEERCRED` names
the connecting process), so a key and token another process of the same user found are
refused (docs/operations.md, "What an agent of the same user can and cannot reach"). The
tools call the same services as an exec agent's JSON lines (`core.agents.protocols.exec`), so
a verdict or a completion signal means the same either way.
"""

from __future__ import annotations

import os
import secrets
import select
import shutil
import socket
import struct
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from multiprocessing import AuthenticationError
from multiprocessing.connection import (
    Connection,
    Listener,
    answer_challenge,
    deliver_challenge,
)
from typing import TYPE_CHECKING, Any, ClassVar, Self

import attrs

from core import actors
from core.agents.tools import wire
from core.errors import LanewayError
from core.logs import logger

if TYPE_CHECKING:
    from acp.schema import McpServerStdio

    from core.agents.ports import AgentPort
    from core.model import Decision

VERDICTS = ("approved", "rejected", "changes_requested")


@attrs.frozen
class Grant:
    """What one run may do through the tool server, and how its server reaches the broker."""

    token: str
    task_id: str
    step_id: str | None
    run_id: str | None
    session_id: str | None
    agent_profile_id: str | None
    address: str
    """The broker's unix socket."""
    authkey: bytes = attrs.field(repr=False)


def mcp_server(grant: Grant) -> McpServerStdio:
    """The stdio MCP server `laneway` for session/new's and session/load's `mcpServers`: the
    agent starts it with exactly these three variables (no database URL among them)."""
    from acp.schema import EnvVariable, McpServerStdio

    return McpServerStdio(
        name=wire.SERVER_NAME,
        command=sys.executable,
        args=["-m", "core.agents.tools"],
        env=[
            EnvVariable(name=wire.SOCKET_ENV, value=grant.address),
            EnvVariable(name=wire.KEY_ENV, value=grant.authkey.hex()),
            EnvVariable(name=wire.TOKEN_ENV, value=grant.token),
        ],
    )


class ToolRefused(LanewayError):
    """A tool call its grant does not allow (or no grant at all)."""

    code: ClassVar[str] = "tool_refused"
    http_status: ClassVar[int] = 403


Tool = Callable[[Grant, Mapping[str, Any]], Any]


Owner = Callable[[Grant], "int | None"]
"""The pid of the agent process running a grant's turn now (None: none runs it)."""


class ToolBroker:
    """Listens on its own unix socket, on a daemon thread (one thread per connection), until
    `close()`. Built with the services it calls (a `AgentPort`), never a host.

    :param owner: which process runs a grant's turn; given, a call is answered only when the
        connecting process is that one or descends from it."""

    def __init__(self, peers: AgentPort, owner: Owner | None = None) -> None:
        self._peers = peers
        self._owner = owner
        self._authkey = secrets.token_bytes(32)
        self._grants: dict[str, Grant] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        # mkdtemp makes the directory 0700: only the worker's user reaches the socket at all
        self._dir = tempfile.mkdtemp(prefix="laneway-tools-")
        self.address = os.path.join(self._dir, "broker.sock")
        # The handshake runs on each connection's own thread (`_serve`), not in accept():
        # a peer that connects and never answers the challenge stalls only its thread.
        self._listener = Listener(self.address, family="AF_UNIX", backlog=16)
        self._tools: dict[str, Tool] = {
            "get_task": self._get_task,
            "decide": self._decide,
            "complete_step": self._complete_step,
            "comment": self._comment,
            "ask": self._ask,
        }
        self._asking: dict[str, int] = {}
        """Tokens whose turn waits for a person now (an `ask` call in flight), and how many."""
        self._thread = threading.Thread(
            target=self._accept, name="laneway-tool-broker", daemon=True
        )
        self._thread.start()

    # -- grants -----------------------------------------------------------------------------------

    def grant(
        self,
        *,
        task_id: str,
        step_id: str | None,
        run_id: str | None,
        session_id: str | None,
        agent_profile_id: str | None,
        token: str | None = None,
    ) -> Grant:
        """A new capability for one run: its token is unguessable and names only this task,
        step and seat.

        :param token: a token an earlier run of the same conversation held: an ACP agent keeps
            the tool server it was given for its whole conversation, so a later run of that
            conversation takes the token over (the earlier run's grant was revoked when it
            ended, so the token never acts for two runs)."""
        if self._closed.is_set():
            raise LanewayError("the tool broker is closed")
        made = Grant(
            token=token or secrets.token_urlsafe(32),
            task_id=task_id,
            step_id=step_id,
            run_id=run_id,
            session_id=session_id,
            agent_profile_id=agent_profile_id,
            address=self.address,
            authkey=self._authkey,
        )
        with self._lock:
            self._grants[made.token] = made
        return made

    def revoke(self, token: str) -> None:
        """The run is over: its token no longer acts (a server the agent keeps is refused)."""
        with self._lock:
            self._grants.pop(token, None)

    def asking(self, token: str) -> bool:
        """Whether the run holding `token` waits for a person's answer now (AGENTS.md: the
        wait counts as neither silence nor work)."""
        with self._lock:
            return self._asking.get(token, 0) > 0

    def _over(self, grant: Grant) -> bool:
        """Whether `grant`'s turn is over: revoked (its turn ended), the broker closed, or no
        agent runs it any more."""
        if self._closed.is_set():
            return True
        with self._lock:
            if self._grants.get(grant.token) is not grant:
                return True
        return self._owner is not None and self._owner(grant) is None

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        with self._lock:
            self._grants.clear()
        try:
            self._listener.close()
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the channel ------------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn = self._listener.accept()
            except OSError:
                if self._closed.is_set():
                    return
                logger.bind(address=self.address).exception("tool broker: accept failed")
                continue
            threading.Thread(
                target=self._serve, args=(conn,), name="laneway-tool-call", daemon=True
            ).start()

    def _serve(self, conn: Connection) -> None:
        with conn:
            try:
                deliver_challenge(conn, self._authkey)
                answer_challenge(conn, self._authkey)
            except (AuthenticationError, OSError, EOFError, ValueError) as exc:
                # a peer without the key gets no answer at all, only a closed connection
                logger.bind(reason=str(exc) or type(exc).__name__).warning(
                    "tool broker: a connection failed authentication"
                )
                return
            peer = peer_pid(conn)
            pinned = pin(peer)
            try:
                while not self._closed.is_set():
                    try:
                        request = wire.receive(conn)
                    except (EOFError, OSError):
                        return
                    except ValueError as exc:
                        wire.send(conn, {"error": f"bad request: {exc}"})
                        continue
                    if pinned is not None and ended(pinned):
                        # its pid may be another process's now (one in another run's agent):
                        # whoever holds the connection, the caller it was checked as is gone
                        logger.bind(peer_pid=peer).warning(
                            "agent tool call refused: the process that connected has ended"
                        )
                        wire.send(conn, {"error": "the process that connected has ended"})
                        return
                    wire.send(conn, self.answer(request, peer=peer))
            finally:
                if pinned is not None:
                    os.close(pinned)

    def answer(self, request: Mapping[str, Any], *, peer: int | None = None) -> dict[str, Any]:
        """One request `{"token", "tool", "args"}`: `{"ok": result}` or `{"error": line}`.

        :param peer: the pid of the process that sent it over the socket (None: in-process)."""
        token, tool, args = request.get("token"), request.get("tool"), request.get("args", {})
        with self._lock:
            grant = self._grants.get(token) if isinstance(token, str) else None
        if grant is None:
            return {"error": "this tool token is unknown or was revoked (its run is over)"}
        if peer is not None and self._owner is not None and not descends(peer, self._owner(grant)):
            logger.bind(
                task_id=grant.task_id, run_id=grant.run_id, peer_pid=peer, tool=tool
            ).warning("agent tool call refused: not made by the run's own agent")
            return {"error": "this tool token is not this process's: it acts for another run"}
        log = logger.bind(
            task_id=grant.task_id, run_id=grant.run_id, session_id=grant.session_id, tool=tool
        )
        try:
            if not isinstance(tool, str) or tool not in self._tools:
                raise ToolRefused(f"no tool {tool!r}: the tools are {', '.join(wire.TOOLS)}")
            if not isinstance(args, dict):
                raise ToolRefused(f"tool {tool}: arguments must be an object")
            named = args.get("task_id")
            if named not in (None, "", grant.task_id):
                raise ToolRefused(f"this run acts for task {grant.task_id} only")
            # what the agent writes through its tools names it (CLI.md `agent:<profile>`)
            with actors.acting(self._actor(grant)):
                result = self._tools[tool](grant, args)
        except LanewayError as exc:
            log.bind(error=str(exc)).warning("agent tool call refused")
            return {"error": _one_line(str(exc))}
        except Exception as exc:  # the agent gets one line; the log keeps the rest
            log.exception("agent tool call failed")
            return {"error": _one_line(f"tool {tool} failed: {type(exc).__name__}: {exc}")}
        log.info("agent tool call")
        return {"ok": result}

    def _actor(self, grant: Grant) -> str:
        if not grant.agent_profile_id:
            return actors.agent("agent")
        try:
            return actors.agent(self._peers.profiles.get(grant.agent_profile_id).name)
        except LanewayError:  # the profile was removed while its run went on
            return actors.agent(grant.agent_profile_id)

    # -- the tools --------------------------------------------------------------------------------

    def _get_task(self, grant: Grant, args: Mapping[str, Any]) -> dict[str, Any]:
        from core.prompts import build_prompt
        from core.shapes import plain

        peers = self._peers
        task = peers.tasks.get(grant.task_id)
        step_id = grant.step_id or task.workflow_step_id
        step_json: dict[str, Any] | None = None
        prompt = task.description
        decisions: list[dict[str, Any]] = []
        if task.workflow_id is not None and step_id:
            wf = peers.workflows.by_id(task.workflow_id)
            step = wf.step(step_id)
            if step is not None:
                step_json = {"id": step.id, "name": step.name, "prompt": step.prompt}
                prompt = build_prompt(wf.prompt, step.prompt, task.description)
                # every round at the step: a new entry clears a round from the quorum, not
                # from what the agent may read (AGENTS.md: "the step's previous rounds")
                decisions = [_verdict_json(d) for d in peers.decisions.rounds(task.id, step.id)]
        return {
            "run_id": grant.run_id,
            "task": {
                "id": task.id,
                "title": task.title,
                "description": task.description,
                "state": task.state,
                "step": step_json,
            },
            "prompt": prompt,
            "decisions": decisions,
            "comments": [plain(c) for c in peers.comments.list(task.id)],
            "feedback": _feedback_json(peers, grant),
        }

    def _decide(self, grant: Grant, args: Mapping[str, Any]) -> dict[str, Any]:
        from core.shapes import decision_result_json

        verdict = args.get("verdict")
        if verdict not in VERDICTS:
            raise ToolRefused(f"decide: verdict must be one of {', '.join(VERDICTS)}")
        comment = args.get("comment") or ""
        if not isinstance(comment, str):
            raise ToolRefused("decide: comment must be text")
        result = self._peers.decisions.record_for_agent(
            grant.task_id,
            grant.step_id,
            grant.agent_profile_id,
            str(verdict),
            comment=comment,
            run_id=grant.run_id,
        )
        shaped = decision_result_json(result)
        shaped["recorded"] = bool(result.get("recorded", True))
        return shaped

    def _complete_step(self, grant: Grant, args: Mapping[str, Any]) -> dict[str, Any]:
        if not grant.step_id or not grant.session_id:
            raise ToolRefused("complete_step: this run works no step of a session")
        if grant.run_id:
            from core import runs

            with self._peers.store.transaction() as uow:
                refused = runs.fence(uow, grant.run_id, uow.store.liveness.own())
            if refused is not None:
                logger.bind(run_id=grant.run_id, reason=refused, write="step signal").warning(
                    "run's step signal not recorded: its claim or its step entry is no longer"
                    " current"
                )
                raise ToolRefused(f"complete_step: not recorded ({refused})")
        self._peers.sessions.record_effect(grant.session_id, pending_step_signal=grant.step_id)
        return {"step_complete": True, "step_id": grant.step_id}

    def _comment(self, grant: Grant, args: Mapping[str, Any]) -> dict[str, Any]:
        from core.shapes import plain

        text = args.get("text")
        if not isinstance(text, str):
            raise ToolRefused("comment: text must be text")
        author = "agent"
        if grant.agent_profile_id:
            author = self._peers.profiles.get(grant.agent_profile_id).name
        added = self._peers.comments.add(
            grant.task_id, text, author=author, by_agent=grant.agent_profile_id
        )
        result: dict[str, Any] = plain(added)
        return result

    def _ask(self, grant: Grant, args: Mapping[str, Any]) -> dict[str, Any]:
        """A question to a person (CLI.md *question*, one field `answer`, of `choices` when
        given); blocks this call's thread until it is answered, declined, or the turn is over
        (then it ends `cancelled` and the agent is told so)."""
        text = args.get("question")
        if not isinstance(text, str) or not text.strip():
            raise ToolRefused("ask: question must be non-empty text")
        choices = args.get("choices") or []
        if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
            raise ToolRefused("ask: choices must be a list of text")
        if not grant.session_id:
            raise ToolRefused("ask: this run works in no session")
        questions = self._peers.questions
        # from the call on, the turn waits for a person: not the agent's silence
        with self._lock:
            self._asking[grant.token] = self._asking.get(grant.token, 0) + 1
        try:
            asked = questions.ask(
                grant.task_id,
                grant.session_id,
                run_id=grant.run_id,
                message=text,
                fields=[{"name": "answer", "type": "string", "required": True, "choices": choices}],
            )
            logger.bind(task_id=grant.task_id, run_id=grant.run_id, question_id=asked.id).info(
                "agent question waits for a person"
            )
            found = questions.wait(asked.id, stop=lambda: self._over(grant))
        finally:
            with self._lock:
                left = self._asking.get(grant.token, 1) - 1
                if left > 0:
                    self._asking[grant.token] = left
                else:
                    self._asking.pop(grant.token, None)
        if found.state == "pending":
            # the turn ended first: the question is withdrawn, an answer would reach no one
            questions.cancel(asked.id, by="turn_ended")
            found = questions.get(asked.id)
        if found.state == "answered":
            given = dict(found.answer or {})
            return {
                "question_id": found.id,
                "state": "answered",
                "answer": given.get("answer"),
                "answered_by": found.answered_by,
            }
        if found.state == "declined":
            return {"question_id": found.id, "state": "declined", "answer": None}
        raise ToolRefused(f"ask: question {found.id} was cancelled ({found.answered_by})")


def peer_pid(conn: Connection) -> int | None:
    """The pid of the process at the other end of `conn` (the one that connected), from the
    kernel (`SO_PEERCRED`); None where that cannot be asked."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    try:
        with socket.socket(fileno=os.dup(conn.fileno())) as sock:
            raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    pid: int = struct.unpack("3i", raw)[0]
    return pid or None


def pin(pid: int | None) -> int | None:
    """A pidfd of process `pid` (None where there is none to take): it keeps meaning that
    process after the process ends, when its pid may be given to another."""
    if pid is None or not hasattr(os, "pidfd_open"):
        return None
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def ended(pidfd: int) -> bool:
    """Whether the process `pidfd` pins has ended (a pidfd polls readable then)."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


def descends(pid: int, ancestor: int | None, hops: int = 256) -> bool:
    """Whether process `pid` is `ancestor` or one of its descendants (read from /proc); False
    when `ancestor` is None, and where there is no /proc to read, True (nothing to check)."""
    if ancestor is None:
        return False
    if not os.path.isdir("/proc/self"):
        return True
    for _ in range(hops):
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                data = stat.read()
            pid = int(data[data.rindex(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= 500 else line[:497] + "..."


def _verdict_json(d: Decision) -> dict[str, Any]:
    return {
        "verdict": d.decision,
        "comment": d.comment,
        "participant_id": d.participant_id,
        "role": d.role,
        "decided_at": d.decided_at,
        "superseded": d.superseded_at is not None,
        "run_id": d.run_id,
        "step_id": d.step_id,
        "round": d.round,
        "cleared": d.cleared,
    }


def _feedback_json(peers: AgentPort, grant: Grant) -> dict[str, Any] | None:
    """What the run's prompt carried as its feedback block (core.agents.feedback), at every step of
    the task; None for a first run or when nothing was new."""
    from core.agents import feedback
    from core.shapes import plain

    run = peers.runs.get(grant.run_id) if grant.run_id else None
    given = feedback.since_last_turn(peers, run) if run is not None else None
    if given is None:
        return None
    return {
        "since": given.since,
        "decisions": [_verdict_json(d) for d in given.verdicts],
        "comments": [plain(c) for c in given.comments],
        "conflict": dict(given.conflict) if given.conflict is not None else None,
    }
