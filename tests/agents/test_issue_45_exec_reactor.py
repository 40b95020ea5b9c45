"""Issue 45 item 4: an exec turn's stdout, stderr and exit are waited on by the process's one
reactor thread, not by threads handed each turn (core/agents/protocols/exec_reactor.py). What
must stay true: every line and the stderr tail of every turn, however many run at once; an
agent whose leftover holds its output open past its exit still ends its turn (the sweep at
the exit); a forked child gets a reactor of its own."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from core.agents.protocols import exec_process as process

pytestmark = pytest.mark.slow  # agents are real processes: the subprocess tier

WAIT_S = 30.0


def _turn(code: str, execution_id: str) -> tuple[process.TurnResult, list[str]]:
    lines: list[str] = []
    agent = process.start(
        (sys.executable, "-c", code),
        prompt="",
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        execution_id=execution_id,
        on_message=lambda _m: None,
        on_line=lines.append,
    )
    return agent.wait(), lines


def test_issue_45_item_4_turns_at_once_keep_every_line_and_stderr_tail_on_one_thread(
    handed_jobs: list[Callable[[], None]],
) -> None:
    """Eight agents at once, each printing 2,000 lines and a stderr of 20,000 bytes ending in
    its own name: each turn has its own lines in order and its own stderr tail. No turn hands a
    job to another thread (the sweep after the turns, one for all, aside), and one reactor
    thread served them."""
    code = (
        "import sys\n"
        "name = {name!r}\n"
        "for n in range(2000):\n"
        "    print(name, n)\n"
        "sys.stderr.write('x' * 20000 + ' the end of ' + name + '\\n')\n"
    )

    def one(n: int) -> tuple[process.TurnResult, list[str]]:
        return _turn(code.format(name=f"agent-{n}"), f"reactor-{n}")

    with ThreadPoolExecutor(8) as pool:
        done = list(pool.map(one, range(8)))
    for n, (result, lines) in enumerate(done):
        assert result.exit_code == 0
        assert lines == [f"agent-{n} {i}" for i in range(2000)]
        assert result.stderr_tail.endswith(f" the end of agent-{n}\n")
        assert len(result.stderr_tail) == process.STDERR_TAIL
    # the deferred sweep (one for every turn that ended within its wait) is the only job
    assert all(getattr(job, "__name__", "") == "_sweep_soon" for job in handed_jobs), handed_jobs
    readers = [t for t in threading.enumerate() if t.name == "laneway-exec-io"]
    assert len(readers) == 1


def test_issue_45_item_4_a_leftover_holding_the_output_is_swept_at_the_agents_exit() -> None:
    """The agent exits at once, its `setsid` child holding stdout and stderr open for 300 s:
    the reactor sees the exit, the output still open 0.1 s later is swept, and the turn ends
    long before the child would have (within a minute even on a loaded machine; a second on a
    quiet one), the child killed."""
    code = (
        "import subprocess, sys\n"
        "child = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        "print('child', child.pid, flush=True)\n"
    )
    began = time.monotonic()
    result, lines = _turn(code, "reactor-held")
    assert time.monotonic() - began < 60
    assert result.exit_code == 0
    child = int(lines[0].split()[1])
    deadline = time.monotonic() + WAIT_S
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, killed and not yet reaped by init, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except OSError:
        return False
    return data[data.rindex(b")") + 2 :].split()[0] != b"Z"


def test_issue_45_item_4_a_forked_child_runs_turns_on_a_reactor_of_its_own() -> None:
    """A worker forked after turns ran (its parent's reactor thread is not in it) still reads
    its agents' output: the child gets a new reactor at the fork."""
    _turn("print('before the fork')", "reactor-parent")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            result, lines = _turn("print('in the child')", "reactor-child")
            os.write(write, f"{result.exit_code} {lines}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read()
    os.waitpid(pid, 0)
    assert said.decode() == "0 ['in the child']"
