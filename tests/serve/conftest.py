"""`laneway serve` as users run it: the installed console script in a subprocess, on a real
database, reached over loopback HTTP. The board it serves is built beforehand in this process
(an Office Default board with seats, as the demo builds it), and the host is closed before
`serve` opens the database."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest

from office_plugin import demo
from tests import zygote
from tests.conftest import open_host

LANEWAY = str(Path(sys.executable).with_name("laneway"))
TOKEN = "test-token-0123456789abcdef"


OPENED_MS = 60_000
"""How long a page may take to load its board and open its event stream: a hang guard, sized for
CI's two cores with the subprocess tier beside the page; a page that never opens fails saying
why (`wait_live`). What the page is held to once it is open (HTTP.md's one-second live update)
is asserted by the tests themselves."""


def wait_live(page: Any, errors: list[str] | None = None) -> None:
    """Wait for the page to open its event stream; if it never does, fail saying what the page
    showed (its toasts, its live label) and what it logged, not only that a selector timed out."""
    try:
        page.wait_for_selector(".live[data-state='live']", timeout=OPENED_MS)
    except Exception as exc:
        shown = page.evaluate(
            "[...document.querySelectorAll('.toast, .live')].map((e) => e.textContent.trim())"
        )
        raise AssertionError(
            f"the page never opened its event stream: it shows {shown}, logged {errors}"
        ) from exc


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANEWAY_")}
    env["LANEWAY_PLUGINS_ALLOW"] = "kanban,office"
    env.update(extra or {})
    return env


def laneway(db: str, *args: str, check: bool = True, timeout: float = 60) -> Any:
    """`laneway --db DB --json ARGS...` in a subprocess; its JSON value."""
    # a process of its own, forked from a warm one (tests/zygote.py)
    done = zygote.run(["--db", db, "--json", *args], env=cli_env(), timeout=timeout)
    if check:
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)
    return done


@attrs.define
class Served:
    """A running `laneway serve`: its base URL, token, process and stderr file."""

    url: str
    token: str
    proc: subprocess.Popen[str]
    stderr_path: Path

    def client(self, *, token: str | None = None, timeout: float = 30.0) -> httpx.Client:
        given = self.token if token is None else token
        headers = {"Authorization": f"Bearer {given}"} if given else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


def start_serve(
    db: str,
    tmp_path: Path,
    *args: str,
    token: str = TOKEN,
    env: Mapping[str, str] | None = None,
    json_line: bool = True,
    global_args: tuple[str, ...] = (),
    port: int = 0,
) -> Served:
    """Start `laneway serve` (on any free port unless told) and wait for its first line."""
    stderr_path = tmp_path / f"serve-{time.monotonic_ns()}.err"
    argv = [LANEWAY, "--db", db, *global_args]
    if json_line:
        argv.append("--json")
    argv += ["serve", "--port", str(port), *args]
    if token:
        argv += ["--token", token]
    with stderr_path.open("w") as err:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=err, text=True, env=cli_env(env)
        )
    assert proc.stdout is not None
    line = _first_line(proc, timeout=60.0)
    if not line:
        proc.kill()
        proc.wait()
        raise AssertionError(f"serve printed nothing: {stderr_path.read_text()}")
    if json_line:
        shown = json.loads(line)
        url, given = shown["url"].rstrip("/"), shown["token"]
    else:
        url, given = line.removeprefix("laneway serve: ").split("/#token=")
    return Served(url=url, token=given, proc=proc, stderr_path=stderr_path)


def _first_line(proc: subprocess.Popen[str], *, timeout: float) -> str:
    found: list[str] = []
    reader = threading.Thread(target=lambda: found.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout)
    return found[0].strip() if found else ""


@attrs.frozen
class OfficeBoard:
    db: str
    workflow_id: str
    workflow_name: str
    task_id: str
    steps: Mapping[str, str]
    """step name -> id"""
    seats: Mapping[str, str]
    """seat role+index (reviewer-1, reviewer-2, approver) -> participant id"""
    profiles: Mapping[str, str]


def build_office(db: str, tmp_path: Path, *, extra_tasks: int = 0) -> OfficeBoard:
    """An Office Default board (the demo's: scripted agents in its seats) and one task."""
    with open_host(db) as host:
        board = demo.build_board(host, tmp_path / "agents")
        for n in range(extra_tasks):
            host.tasks.create(workflow=board.workflow.id, title=f"Extra task {n + 1}")
        wf = board.workflow
        steps = {s.name: s.id for s in wf.steps}
        seats: dict[str, str] = {}
        for name in ("Review", "Approval"):
            for n, seat in enumerate(host.participants.list(step=steps[name], workflow=wf.id)):
                seats[f"{seat.role}-{n + 1}"] = seat.id
    return OfficeBoard(
        db=db,
        workflow_id=wf.id,
        workflow_name=wf.name,
        task_id=board.task_id,
        steps=steps,
        seats=seats,
        profiles=dict(board.profiles),
    )


@pytest.fixture
def office(sqlite_url: str, tmp_path: Path) -> OfficeBoard:
    laneway(sqlite_url, "init")
    return build_office(sqlite_url, tmp_path)


@pytest.fixture
def served(office: OfficeBoard, tmp_path: Path) -> Iterator[Served]:
    running = start_serve(office.db, tmp_path)
    try:
        yield running
    finally:
        running.stop(signal.SIGKILL)


# -- reading the event stream --------------------------------------------------------------------


@attrs.frozen
class StreamEvent:
    id: int
    type: str
    data: Mapping[str, Any]


class EventReader:
    """Reads `/api/events` on a thread of its own, collecting every event it is sent."""

    def __init__(
        self, served: Served, *, last_id: int | None = None, task: str | None = None
    ) -> None:
        headers = {"Authorization": f"Bearer {served.token}"}
        if last_id is not None:
            headers["Last-Event-ID"] = str(last_id)
        params = {"task": task} if task else {}
        self.events: list[StreamEvent] = []
        self.connected = threading.Event()
        self.status: int | None = None
        self._stop = threading.Event()
        self._client = httpx.Client(base_url=served.url, headers=headers, timeout=None)
        self._params = params
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        assert self.connected.wait(30), "event stream did not connect"

    def _read(self) -> None:
        try:
            with self._client.stream("GET", "/api/events", params=self._params) as response:
                self.status = response.status_code
                self.connected.set()
                block: dict[str, str] = {}
                for line in response.iter_lines():
                    if self._stop.is_set():
                        return
                    if not line:
                        if "data" in block:
                            self.events.append(
                                StreamEvent(
                                    int(block["id"]), block["event"], json.loads(block["data"])
                                )
                            )
                        block = {}
                        continue
                    if line.startswith(":"):
                        continue
                    field, _, value = line.partition(":")
                    block[field] = value.removeprefix(" ")
        except httpx.HTTPError:
            pass
        finally:
            self.connected.set()

    def wait_for(self, predicate: Any, timeout: float = 20.0) -> list[StreamEvent]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self.events):
                return list(self.events)
            time.sleep(0.02)
        raise AssertionError(f"timed out; got {[(e.id, e.type) for e in self.events]}")

    def close(self) -> None:
        self._stop.set()
        self._client.close()
