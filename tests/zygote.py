"""One-shot `laneway` commands for the suite, each a process of its own forked from a warm one.

The subprocess tier runs about 1,100 one-shot commands (`laneway --db URL --json task ...`),
and each spent ~0.3 s of CPU starting the interpreter and importing SQLAlchemy, psycopg and
laneway before it did anything: a third of the tier's CPU, on CI's two cores. Here one zygote
per pytest process imports them once; a command is a `fork()` of it that takes the caller's
arguments, environment, working directory and standard streams (passed as file descriptors)
and runs the console script's own `core.console.main`, then exits as the script would (threads
joined, `atexit` run, streams flushed).

Each command is still a process of its own: its own pid, memory, database connections, exit
status and view of the environment, sharing nothing with the test or with other commands. What
it does not go through is the interpreter's start and the imports, which
tests/cli/test_cli_startup.py, tests/cli/test_issue_45_startup.py and the benchmarks exercise
with the installed script itself; so does every process a test starts with `Popen` (workers,
`serve`, anything it signals or kills). `LANEWAY_TEST_ZYGOTE=0` runs every command as the
installed script instead.

Nothing here is laneway's: it is how the suite starts its commands, as pytest's `pytester`
runs pytest in-process or in a subprocess.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = str(Path(sys.executable).with_name("laneway"))
on_start: list[Callable[[str], None]] = []
"""Told of each command started (tests/conftest.py's process watch: a fork is a process)."""

# What a command imports, loaded once in the zygote (import only: nothing here reads the
# environment, opens a database or asks entry points for plugins, which each command does).
_WARM = (
    "core.console",
    "core.cli.app",
    "core.cli.catalogue",
    "core.host",
    "core.store.migrate",
    "alembic.command",
    "alembic.config",
    "alembic.runtime.migration",
    "alembic.script",
    "alembic.operations",
    "core.plugin.loading",
    "sqlalchemy.dialects.sqlite.pysqlite",
    "sqlalchemy.dialects.postgresql.psycopg",
    "psycopg",
    "kanban_plugin",
    "office_plugin",
    # What the commands that run a turn (`worker --until-idle`, `agent`, `session`) and the
    # write commands load after their start: the agents' machinery with the ACP SDK and
    # pydantic under it (0.45 s of CPU in each such command), the services, the trigger
    # engine and the ledger. Measured on three files of agent and schedule tests: 83 s of CPU
    # before, 58 s after.
    "core.agents.feedback",
    "core.agents.protocols.acp.client",
    "core.agents.protocols.acp.conversation",
    "core.agents.protocols.acp.facade",
    "core.agents.protocols.acp.turn",
    "core.agents.protocols.exec",
    "core.agents.runtime",
    "core.agents.tools.access",
    "core.agents.tools.broker",
    "core.agents.turns",
    "core.agents.worker",
    "core.arrival",
    "core.bundle",
    "core.engine",
    "core.observe",
    "core.operations",
    "core.plugin.registry",
    "core.services.blockers",
    "core.services.entries",
    "core.services.participants",
    "core.services.profiles",
    "core.services.runs",
    "core.services.scheduler",
    "core.services.sessions",
    "core.services.tasks",
    "core.services.triggers",
    "core.services.turns",
    "core.services.workflows",
    "core.services.workspace",
    "core.services.worktrees",
    "core.structural",
    "office_plugin.cli",
    "_strptime",
)


# -- the client (the test's side) -----------------------------------------------------------


class _Zygote:
    def __init__(self) -> None:
        self.path = os.path.join(tempfile.gettempdir(), f"lwz-{os.getpid()}-{os.urandom(4).hex()}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("LANEWAY_")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.zygote", self.path, str(os.getpid())],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline().strip()
        if ready != "ready":
            self.proc.kill()
            raise RuntimeError(f"the laneway zygote did not start: {ready!r}")
        atexit.register(self.close)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


_zygote: list[_Zygote] = []


def _enabled() -> bool:
    return os.environ.get("LANEWAY_TEST_ZYGOTE", "1") != "0"


def run(
    args: Sequence[str],
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """`laneway ARGS...` as `subprocess.run(..., stdin=DEVNULL, capture_output=True, text=True)`
    would run the installed script: a process of its own, its exit status and its streams."""
    command = [SCRIPT, *args]
    environ = dict(os.environ if env is None else env)
    if not _enabled():
        return subprocess.run(
            command,
            cwd=cwd,
            env=environ,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    if not _zygote or _zygote[0].proc.poll() is not None:
        _zygote[:] = [_Zygote()]
    for tell in on_start:
        tell("laneway")
    request = json.dumps(
        {"args": list(args), "cwd": os.fspath(cwd or os.getcwd()), "env": environ}
    ).encode()
    with (
        open(os.devnull, "rb") as stdin,
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn,
    ):
        conn.connect(_zygote[0].path)
        message = len(request).to_bytes(8, "big") + request
        sent = socket.send_fds(conn, [message], [stdin.fileno(), out.fileno(), err.fileno()])
        conn.sendall(message[sent:])
        conn.settimeout(timeout)
        reply = b""
        pid = 0
        try:
            while reply.count(b"\n") < 2:
                chunk = conn.recv(64)
                if not chunk:
                    break
                reply += chunk
                if not pid and b"\n" in reply:
                    pid = int(reply.split(b"\n", 1)[0])
        except TimeoutError:
            if pid:
                _kill(pid)
            raise subprocess.TimeoutExpired(command, timeout or 0, _read(out), _read(err)) from None
        lines = reply.split(b"\n")
        if len(lines) < 3:
            raise RuntimeError(f"the laneway zygote went away during `laneway {' '.join(args)}`")
        code = int(lines[1])
        return subprocess.CompletedProcess(command, code, _read(out), _read(err))


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _read(file: Any) -> str:
    file.seek(0)
    return file.read().decode("utf-8", errors="replace").replace("\r\n", "\n")


# -- the zygote (`python -m tests.zygote PATH PARENT`) -----------------------------------------


def _warm() -> None:
    import importlib

    from core.console import import_loguru_without_default_handler

    import_loguru_without_default_handler()
    for name in _WARM:
        importlib.import_module(name)
    from core.cli.catalogue import BUILTIN_COMMANDS

    for module_name in {module for module, _ in BUILTIN_COMMANDS.values()}:
        importlib.import_module(f"core.cli.{module_name}")


def _serve(path: str, parent: int) -> None:
    import gc
    import selectors

    _warm()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(128)
    gc.collect()
    gc.freeze()  # the heap the children share stays shared: their collections skip it
    print("ready", flush=True)
    # one thread, no signal handlers: each command's end is its pidfd turning readable, and
    # its exit status (os._exit's, a signal's) goes back to the caller as `run` would see it
    waiting = selectors.DefaultSelector()
    waiting.register(listener, selectors.EVENT_READ, None)
    while True:
        ready = waiting.select(timeout=1.0)
        if not ready and os.getppid() != parent:  # the pytest process is gone
            return
        for key, _ in ready:
            if key.data is None:
                conn, _ = listener.accept()
                pid = os.fork()
                if pid == 0:
                    for other in list(waiting.get_map().values()):
                        if other.data is not None:
                            os.close(other.fd)
                            other.data[1].close()
                    waiting.close()
                    listener.close()
                    _command(conn)
                conn.sendall(f"{pid}\n".encode())
                waiting.register(os.pidfd_open(pid), selectors.EVENT_READ, (pid, conn))
            else:
                pid, conn = key.data
                waiting.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                with contextlib.suppress(OSError):  # the caller gave up (its timeout)
                    conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                conn.close()


def _command(conn: socket.socket) -> NoReturn:
    code = 70
    try:
        message, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
        size = int.from_bytes(message[:8], "big")
        body = message[8:]
        while len(body) < size:
            more = conn.recv(size - len(body))
            if not more:
                os._exit(code)
            body += more
        conn.close()
        request = json.loads(body)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        import random

        random.seed()
        sys.argv = [SCRIPT, *request["args"]]
        from core.console import main

        try:
            main(request["args"])
        except SystemExit as exit_:
            code = _status(exit_.code)
        _exit_as_a_script_would()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed stream has nothing to flush
                stream.flush()
        os._exit(code)


def _status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _exit_as_a_script_would() -> None:
    import threading

    threading._shutdown()  # type: ignore[attr-defined]  # joins non-daemon threads, as exit does
    atexit._run_exitfuncs()


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
