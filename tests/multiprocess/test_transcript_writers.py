"""Transcripts across processes (issue 29): two real processes appending to one session's
transcript at once never take one seq twice nor skip one (the seq is decided by the INSERT
under the session row's lock), on SQLite and PostgreSQL; and `session log --follow` in its
own process prints items as another process keeps them, and ends quietly on Ctrl-C."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from core import Host, runs
from core.store import events
from tests.agents.conftest import plain_workflow
from tests.conftest import open_host
from tests.multiprocess.conftest import LANEWAY, Board, child_env

WRITER = """
import sys
import time
from core import Host
from core.plugin.selection import PluginSelection

url, session, name, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with Host.open(url, plugins=PluginSelection(allow=frozenset({"kanban"}))) as host:
    print("ready", flush=True)
    sys.stdin.readline()  # both writers start together
    for i in range(rounds):
        host.sessions.append_items(
            session, [("log", f"{name} {i} a", {}), ("output", f"{name} {i} b", {"i": i})]
        )
        time.sleep(0.005)  # SQLite's queued writer gets its turn (else one writer may run through)
print("done", flush=True)
"""

ROUNDS = 40

BATCH_WRITER = """
import sys
import time
from core import Host
from core.plugin.selection import PluginSelection

url, session, name = sys.argv[1:4]
rounds, size = int(sys.argv[4]), int(sys.argv[5])
with Host.open(url, plugins=PluginSelection(allow=frozenset({"kanban"}))) as host:
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(rounds):
        kinds = ("thought", "message")
        batch = [(kinds[n % 2], f"{name} {i} {n}", {"n": n}) for n in range(size)]
        host.sessions.append_items(session, batch)
        time.sleep(0.005)
print("done", flush=True)
"""

USAGE_WRITER = """
import sys
import time
from core import Host
from core.plugin.selection import PluginSelection

url, run, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
with Host.open(url, plugins=PluginSelection(allow=frozenset({"kanban"}))) as host:
    print("ready", flush=True)
    sys.stdin.readline()
    for _ in range(rounds):
        host.runs.record_usage(run, {"cost_usd": 0.5, "input_tokens": 2, "output_tokens": 1})
        time.sleep(0.005)
"""


def _session(url: str, tmp_path: Path) -> str:
    with open_host(url) as host:
        wf = plain_workflow(host, tmp_path)
        host.profiles.add("agent", command=["true"])
        task = host.tasks.create(workflow=wf, title="busy")
        return host.sessions.start(task.id, profile="agent", external=False).id


def test_two_processes_appending_to_one_session_never_double_nor_lose_a_seq(
    board: Board, tmp_path: Path
) -> None:
    """AGENTS.md "What the board sees": one row per item with a per-session sequence
    number - under two concurrent writer processes, 1..N each exactly once, each writer's
    items in its own order and each call's two items adjacent."""
    session = _session(board.url, tmp_path)
    _together([[WRITER, board.url, session, name, str(ROUNDS)] for name in ("w1", "w2")])

    with Host.open(board.url, read_only=True) as host:
        items = host.sessions.items(session, limit=1000)
    total = 2 * 2 * ROUNDS
    assert [i.seq for i in items] == list(range(1, total + 1))
    for name in ("w1", "w2"):
        mine = [i.text for i in items if i.text.startswith(name + " ")]
        assert mine == [f"{name} {i} {part}" for i in range(ROUNDS) for part in ("a", "b")]
    for first, second in zip(items[::2], items[1::2], strict=True):
        assert second.text == first.text[:-1] + "b"  # one call's items stay together
    writer_of = [i.text.split()[0] for i in items]
    switches = sum(1 for a, b in itertools.pairwise(writer_of) if a != b)
    assert switches > 1, "the writers did not run at the same time"


def test_issue_45_item_2_batches_from_two_processes_keep_each_sessions_order(
    board: Board, tmp_path: Path
) -> None:
    """Issue 45 item 2: a batch is one multi-row INSERT numbered once for the batch; two writer
    processes appending 25-item batches to one session at once still give 1..N each exactly
    once, each batch contiguous and in its order, each writer's batches in its order, and one
    `agent.item` event per item with its row's seq."""
    session = _session(board.url, tmp_path)
    rounds, size = 12, 25
    _together([[BATCH_WRITER, board.url, session, n, str(rounds), str(size)] for n in ("w1", "w2")])
    with Host.open(board.url, read_only=True) as host:
        items = host.sessions.items(session, limit=1000)
        told = [e.data for e in events.read_all(host.store) if e.type == "agent.item"]
    total = 2 * rounds * size
    assert [i.seq for i in items] == list(range(1, total + 1))
    for at in range(0, total, size):
        batch = [i.text.split() for i in items[at : at + size]]
        assert {w for w, _i, _n in batch} == {batch[0][0]}  # one writer's batch, whole
        assert [int(n) for _w, _i, n in batch] == list(range(size))
    for name in ("w1", "w2"):
        mine = [i.text for i in items if i.text.startswith(name + " ")]
        assert mine == [f"{name} {i} {n}" for i in range(rounds) for n in range(size)]
    assert [(d["seq"], d["text"]) for d in told if d["session_id"] == session] == [
        (i.seq, i.text) for i in items
    ]


def _together(scripts: list[list[str]]) -> None:
    """Start each script, wait until every one is ready, let them all go, wait for them."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        for argv in scripts
    ]
    for p in procs:
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "ready", p.stderr.read() if p.stderr else ""
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        _out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err


def test_usage_reported_by_two_processes_at_once_all_counts(board: Board, tmp_path: Path) -> None:
    """CLI.md: agents report cost and tokens; a run's usage adds up every report, even when
    two processes report at once (the run's row is locked for the read and the write)."""
    with open_host(board.url) as host:
        wf = plain_workflow(host, tmp_path)
        profile = host.profiles.add("agent", command=["true"])
        task = host.tasks.create(workflow=wf, title="spend")
        run = host.runs.enqueue(
            runs.RunRequest(
                agent_profile_id=profile.id,
                task_id=task.id,
                workflow_step_id=task.workflow_step_id,
                reason="task_assigned",
            )
        ).run_id
    _together([[USAGE_WRITER, board.url, run, str(ROUNDS)] for _ in range(2)])
    with Host.open(board.url, read_only=True) as host:
        found = host.runs.get(run)
    assert found is not None
    assert dict(found.usage or {}) == {
        "cost_usd": 2 * ROUNDS * 0.5,
        "input_tokens": 2 * ROUNDS * 2,
        "output_tokens": 2 * ROUNDS,
    }


def test_session_log_follow_prints_new_items_as_json_lines_and_ctrl_c_exits_zero(
    board: Board, tmp_path: Path
) -> None:
    """CLI.md: `session log S --follow` prints new items as they come until interrupted
    (JSON lines with --json); Ctrl-C ends it with exit 0 and nothing on stderr."""
    session = _session(board.url, tmp_path)
    with open_host(board.url) as host:
        host.sessions.append_items(session, [("prompt", "old", {})])
    follower = subprocess.Popen(
        [LANEWAY, "--db", board.url, "--json", "session", "log", session, "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        cwd=tmp_path,
    )
    assert follower.stdout is not None
    try:
        first = json.loads(follower.stdout.readline())
        assert (first["seq"], first["kind"], first["text"]) == (1, "prompt", "old")
        with open_host(board.url) as host:
            host.sessions.append_items(session, [("message", "new", {}), ("log", "newer", {})])
        lines = [json.loads(follower.stdout.readline()) for _ in range(2)]
        assert [(i["seq"], i["text"]) for i in lines] == [(2, "new"), (3, "newer")]
        time.sleep(0.2)
        follower.send_signal(signal.SIGINT)
        _rest, err = follower.communicate(timeout=30)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert follower.returncode == 0
    assert err == ""
