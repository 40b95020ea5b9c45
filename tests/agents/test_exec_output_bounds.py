"""Issue 38 item 7: an exec agent's output is bounded. A stdout line of many megabytes (with or
without its newline), a flood of short lines and a flood of stderr each go through a real
`laneway worker --once` whose peak memory (VmHWM) stays within a bound of a quiet agent's
worker, however much the agent wrote; the transcript keeps a bounded number of bounded rows,
and the session row keeps no copy of the transcript."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from core.agents.item_queue import TURN_ITEMS
from core.store import tables as t
from core.text import MAX_TEXT
from tests.agents.conftest import (
    enqueue,
    inspect_host,
    laneway_script,
    plain_workflow,
    python_agent,
    script_env,
)
from tests.conftest import open_host

pytestmark = [pytest.mark.slow, pytest.mark.one_database]

MIB = 1024 * 1024
VOLUME = 96
"""Megabytes the loud agents write: today's worker held all of it (several times over)."""
SLACK = 48 * MIB
"""What the worker may grow past a quiet agent's worker: a few line caps and item batches,
never the output itself."""


def _agent(body: str) -> list[str]:
    """An agent that reads its prompt, then runs `body` with `w` writing bytes to stdout and
    `e` to stderr in 1 MiB pieces (the agent itself stays small)."""
    return python_agent(
        "import sys\n"
        "sys.stdin.read()\n"
        "w = sys.stdout.buffer.write\n"
        "e = sys.stderr.buffer.write\n"
        "M = b'x' * (1024 * 1024)\n" + body + "\nsys.stdout.flush()\n"
    )


def _work(url: str, cwd: Path) -> int:
    """`laneway worker --once` as a process of its own: its peak RSS in bytes."""
    proc = subprocess.Popen(
        [laneway_script(), "--db", url, "worker", "--once"],
        cwd=cwd,
        env=script_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = 0
    while proc.poll() is None:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
        except FileNotFoundError:
            break
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                peak = max(peak, int(line.split()[1]) * 1024)
        time.sleep(0.05)
    _out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return peak


def _turn(url: str, tmp_path: Path, name: str, body: str) -> tuple[int, str]:
    """One run of an agent `body` worked by its own worker: (peak RSS, session id)."""
    with open_host(url) as host:
        known = [w.id for w in host.workflows.list() if w.name == "Plain"]
        wf = known[0] if known else plain_workflow(host, tmp_path / name)
        agent = host.profiles.add(name, command=_agent(body)).id
        task = host.tasks.create(workflow=wf, title=name).id
        session = host.sessions.start(task, profile=name, external=False).id
        enqueue(host, agent, task)
    return _work(url, tmp_path), session


def _rows(url: str, session_id: str) -> tuple[int, int, int, str | None]:
    """The session's transcript rows, their text's total length, its metadata's length and
    its last error."""
    items = t.transcript_items
    with inspect_host(url) as host, host.store.read() as conn:
        count, chars = conn.execute(
            sa.select(
                sa.func.count(), sa.func.coalesce(sa.func.sum(sa.func.length(items.c.text)), 0)
            ).where(items.c.session_id == session_id)
        ).one()
        session = host.sessions.get(session_id)
        meta = conn.execute(
            sa.select(t.task_sessions.c.metadata).where(t.task_sessions.c.id == session_id)
        ).scalar_one()
        return int(count), int(chars), len(meta), session.error_message


@pytest.fixture
def baseline(db_url: str, tmp_path: Path) -> int:
    """A quiet agent's worker on the same board: the memory bound's base."""
    (tmp_path / "quiet").mkdir()
    peak, _session = _turn(db_url, tmp_path, "quiet", "w(b'fine\\n')")
    return peak


@pytest.mark.parametrize(
    ("body", "line"),
    [
        (f"for _ in range({VOLUME}): w(M)", "no newline"),
        (f"for _ in range({VOLUME}): w(M)\nw(b'\\nafter\\n')", "then a newline"),
    ],
    ids=["no-newline", "newline"],
)
def test_issue_38_item_7_a_huge_stdout_line_is_cut_in_bounded_memory(
    db_url: str, tmp_path: Path, baseline: int, body: str, line: str
) -> None:
    (tmp_path / "loud").mkdir()
    peak, session = _turn(db_url, tmp_path, "loud", body)
    assert peak < baseline + SLACK, (line, peak, baseline)
    count, chars, meta, _error = _rows(db_url, session)
    assert count <= 4  # the prompt, the cut line (and the line after it)
    assert chars < 4 * MAX_TEXT + 1000
    assert meta < 4096  # no transcript copy in the session row
    with inspect_host(db_url) as host:
        said = [i.text for i in host.sessions.items(session) if i.kind == "output"]
    assert said[0].startswith("xxxx")
    assert said[0].endswith(f"... [cut: {VOLUME * MIB - MAX_TEXT + 100} more bytes of this line]")
    if line == "then a newline":
        assert said[1:] == ["after"]


def test_issue_38_item_7_a_million_short_lines_keep_a_bounded_transcript(
    db_url: str, tmp_path: Path
) -> None:
    """Scaled down (a tenth of TURN_ITEMS more than the cap, several times over): rows stay at
    the cap, and the last item says how many were not kept."""
    lines = 4 * TURN_ITEMS
    (tmp_path / "chatty").mkdir()
    _peak, session = _turn(
        db_url,
        tmp_path,
        "chatty",
        f"for i in range({lines}): w(b'line %d\\n' % i)\n"
        f'for i in range({lines}): w(b\'{{"log": "note %d"}}\\n\' % i)',
    )
    count, _chars, meta, _error = _rows(db_url, session)
    assert count <= TURN_ITEMS + 3  # the prompt, the cut's two notes
    assert meta < 4096
    with inspect_host(db_url) as host:
        items = host.sessions.items(session, after=count - 3, limit=10)
    assert items[-1].kind == "log"
    assert f"{2 * lines - TURN_ITEMS} more items of this turn were not kept" in items[-1].text


def test_issue_38_item_7_a_flood_of_stderr_keeps_its_tail_only(
    db_url: str, tmp_path: Path, baseline: int
) -> None:
    (tmp_path / "noisy").mkdir()
    peak, session = _turn(
        db_url,
        tmp_path,
        "noisy",
        f"for _ in range({VOLUME}): e(M + b'\\n')\ne(b'the real reason\\n')\nsys.exit(3)",
    )
    assert peak < baseline + SLACK, (peak, baseline)
    count, chars, meta, error = _rows(db_url, session)
    assert error == "agent exited with status 3: the real reason"
    assert count <= 3  # the prompt and the stderr tail
    assert chars < 3 * MAX_TEXT
    assert meta < 4096


def test_issue_38_item_7_a_transcript_copy_left_in_a_session_row_goes_at_its_next_write(
    db_url: str, tmp_path: Path
) -> None:
    """A session row written before the change still holds a transcript copy: the next merge
    into its metadata drops it."""
    with open_host(db_url) as host:
        wf = plain_workflow(host, tmp_path)
        host.profiles.add("old", command=["true"])
        task = host.tasks.create(workflow=wf, title="old").id
        session = host.sessions.start(task, profile="old", external=False).id
        with host.store.transaction() as uow:
            uow.conn.execute(
                sa.update(t.task_sessions)
                .where(t.task_sessions.c.id == session)
                .values(metadata='{"transcript": ["' + "x" * 100_000 + '"], "keep": 1}')
            )
        after = host.sessions.record_effect(session, noted=True)
    assert "transcript" not in after.metadata
    assert after.metadata["keep"] == 1
    assert after.metadata["noted"] is True
