"""Issue 45 item 2, "the agent never slowed by more than 1.2x through the pipe": an exec agent's
stdout is drained by a thread of its own into a bounded buffer and its lines processed apart
(core/agents/protocols/exec_pipe.py). What must stay true: every line in order, a line split
across reads whole, the backlog processed before the output ends, the buffer bounded (the pipe
pushes back instead), and a stop that drops a backlog rather than waiting for it.

The pipe's side is a plain `os.pipe` written by a thread (no process): the reader's states are
waited for through its own hooks (`wait_read`, `held`), never a sleep. The stop through a real
agent is in the subprocess tier."""

from __future__ import annotations

import fcntl
import os
import sys
import threading
from collections.abc import Iterator

import pytest
from loguru import logger

from core import logs
from core.agents.bounds import item
from core.agents.item_queue import ItemQueue
from core.agents.protocols import exec_pipe
from core.agents.protocols import exec_process as process
from core.agents.protocols.exec_pipe import Pipe
from core.agents.values import TranscriptItem

WAIT_S = 30.0


class _Writer:
    """Writes `data` to a pipe's write end in `piece`-byte writes on a thread, then closes it;
    `written` counts the bytes of finished writes."""

    def __init__(self, fd: int, data: bytes, piece: int) -> None:
        self.fd, self.data, self.piece = fd, data, piece
        self.written = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            view = memoryview(self.data)
            while self.written < len(self.data):
                self.written += os.write(self.fd, view[self.written : self.written + self.piece])
        except BrokenPipeError:
            pass  # the test ended (failed) before reading it all
        finally:
            os.close(self.fd)


@pytest.fixture
def pipe() -> Iterator[tuple[Pipe, int]]:
    """A Pipe reading a fresh os.pipe: (the Pipe, the write end)."""
    read, write = os.pipe()
    reader = Pipe(read)
    os.close(read)  # the Pipe reads its own descriptor, as it does a Popen's
    reader.start()
    yield reader, write
    reader.abandon()


def _all(reader: Pipe, limit: int = 1024 * 1024) -> list[tuple[str, int]]:
    return list(reader.lines(limit))


def test_issue_45_item_2_a_line_split_across_two_reads_is_whole(pipe: tuple[Pipe, int]) -> None:
    """A JSON line and a UTF-8 character each cut between two reads of the pipe come out
    whole."""
    reader, write = pipe
    os.write(write, b'{"log": "caf\xc3')
    assert reader.wait_read(13, WAIT_S)  # the first read took the line's first half
    os.write(write, b'\xa9"}\nnext')
    assert reader.wait_read(21, WAIT_S)
    os.write(write, b" line\r\n")
    os.close(write)
    assert _all(reader) == [('{"log": "café"}', 0), ("next line\r", 0)]


def test_issue_45_item_2_lines_keep_their_order_across_chunks(pipe: tuple[Pipe, int]) -> None:
    """120,000 lines (3 MiB, several reads of up to a megabyte each) written in pieces that
    cut lines anywhere, and a line past the bound cut across reads: all in order, the long
    one cut to the bound with the count of the rest."""
    reader, write = pipe
    lines = [f"line {n} of a chatty agent".encode() for n in range(120_000)]
    long = b"y" * 5000
    data = b"\n".join([*lines[:1000], long, *lines[1000:]]) + b"\nlast without a newline"
    writer = _Writer(write, data, 4093)
    got = _all(reader, limit=2000)
    writer.thread.join(WAIT_S)
    expected = [(line.decode(), 0) for line in lines]
    expected.insert(1000, ("y" * 2000, 3000))
    expected.append(("last without a newline", 0))
    assert got == expected
    assert reader.read_bytes == len(data)


def test_issue_45_item_2_the_backlog_is_processed_after_the_output_ends(
    pipe: tuple[Pipe, int],
) -> None:
    """The agent has written everything and closed its output before a line is processed:
    every buffered line still comes (a turn ends only after them; the whole turn's case is
    tests/agents/test_item_queue.py's burst)."""
    reader, write = pipe
    data = b"".join(b"%d\n" % n for n in range(50_000))
    _Writer(write, data, 65536)
    reader.wait_ended()
    assert reader.buffered == len(data)  # all of it waiting, none processed yet
    assert _all(reader) == [(str(n), 0) for n in range(50_000)]
    assert reader.buffered == 0


def test_issue_45_item_2_a_full_buffer_pushes_back_on_the_pipe() -> None:
    """Lines not processed fill the buffer to its bound and no further: reading pauses (one
    warning), the writer blocks on its full pipe with most of its output unwritten, and the
    worker's memory does not grow with what the agent writes. Processed, every line comes."""
    warned: list[dict[str, object]] = []
    logger.enable("core")  # laneway is silent until its application enables it (core.logs)
    sink = logger.add(
        lambda m: warned.append({"text": m.record["message"], **m.record["extra"]}),
        level="WARNING",
    )
    read, write = os.pipe()
    bound = 64 * 1024
    reader = Pipe(read, bound=bound)
    os.close(read)
    reader.start()
    capacity = fcntl.fcntl(write, fcntl.F_GETPIPE_SZ)
    data = b"".join(b"line %d\n" % n for n in range(400_000))  # 4.9 MB
    writer = _Writer(write, data, 4096)
    try:
        assert reader.held.wait(WAIT_S)
        assert reader.buffered <= bound
        assert reader.peak <= bound
        # the reader stopped at the bound: what the writer got out is that and a pipe's worth,
        # and it waits to write the rest
        assert writer.written <= bound + capacity < len(data)
        got = _all(reader)
        writer.thread.join(WAIT_S)
    finally:
        logger.remove(sink)
        logs.disable()
        reader.abandon()
    assert got == [(f"line {n}", 0) for n in range(400_000)]
    assert reader.peak <= bound
    paused = [w for w in warned if w.get("bound") == bound]
    assert len(paused) == 1, warned
    assert "reading paused" in str(paused[0]["text"])


def test_issue_45_item_2_a_stop_drops_the_backlog(pipe: tuple[Pipe, int]) -> None:
    """Stopped with 49,999 lines buffered and not processed, the reader ends after the line in
    hand: the rest is counted as unread, not processed."""
    reader, write = pipe
    data = b"".join(b"%d\n" % n for n in range(50_000))
    _Writer(write, data, 65536)
    reader.wait_ended()
    lines = reader.lines(1024)
    assert next(lines) == ("0", 0)
    reader.abandon()
    assert list(lines) == []
    assert reader.unread == len(data) - 2
    assert reader.buffered == 0


def test_issue_45_item_2_a_stop_at_the_bound_reads_the_rest_and_drops_it() -> None:
    """Stopped while reading is paused at the bound (the writer blocked), the reader resumes,
    reads the pipe to its end and drops it: the writer finishes, nothing more is processed,
    every byte not processed is counted."""
    read, write = os.pipe()
    bound = 32 * 1024
    reader = Pipe(read, bound=bound)
    os.close(read)
    reader.start()
    data = b"".join(b"line %d\n" % n for n in range(200_000))
    writer = _Writer(write, data, 4096)
    lines = reader.lines(1024)
    assert next(lines) == ("line 0", 0)
    assert reader.held.wait(WAIT_S)
    reader.abandon()
    assert list(lines) == []
    writer.thread.join(WAIT_S)
    assert writer.written == len(data)
    reader.wait_ended()
    assert reader.unread == len(data) - len(b"line 0\n")
    assert reader.peak <= bound


def test_issue_45_item_2_a_stops_note_is_kept_past_the_turns_item_limit() -> None:
    """The item saying a stop dropped output is kept even when the turn's items ran out (a
    chatty agent's turn is the one that stops with a backlog), before the limit's last note."""
    written: list[TranscriptItem] = []
    queue = ItemQueue(written.extend, limit=2)
    for n in range(4):
        queue.put([item("output", str(n))])
    queue.note(item("log", "stopped: 10 bytes the agent wrote were not yet read"))
    queue.close()
    texts = [i.text for i in written]
    assert texts[:2] == ["0", "1"]
    assert texts[3] == "stopped: 10 bytes the agent wrote were not yet read"
    assert "2 more items of this turn were not kept" in texts[4]


@pytest.mark.slow  # it starts an agent: the subprocess tier
def test_issue_45_item_2_a_stopped_agent_does_not_wait_for_its_backlog() -> None:
    """A real agent writes 200,000 lines while the turn is still on its first, then waits:
    `kill` (a stop, a timeout) from another thread ends the turn after that line, the rest
    reported unread, not processed. Its pipe was enlarged where the system allows."""
    code = (
        "import signal, sys\n"
        "sys.stdout.buffer.write(b''.join(b'line %d\\n' % n for n in range(200000)))\n"
        "sys.stdout.flush()\n"
        "signal.pause()\n"  # only the kill ends it
    )
    total = sum(len(b"line %d\n" % n) for n in range(200_000))
    lines: list[str] = []
    holder: list[process.AgentProcess] = []

    def on_line(text: str) -> None:
        lines.append(text)
        if len(lines) == 1:
            agent = holder[0]
            assert agent.pipe.wait_read(total, WAIT_S)  # all of it buffered by now
            stop = threading.Thread(target=agent.kill)
            stop.start()
            stop.join(WAIT_S)

    agent = process.start(
        (sys.executable, "-c", code),
        prompt="",
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        execution_id="stop-backlog",
        on_message=lambda _m: None,
        on_line=on_line,
    )
    holder.append(agent)
    assert agent.popen.stdout is not None
    size = fcntl.fcntl(agent.popen.stdout.fileno(), fcntl.F_GETPIPE_SZ)
    assert size == max(65536, min(exec_pipe.PIPE_SIZE, exec_pipe._PIPE_MAX))
    result = agent.wait()
    assert result.exit_code == -9
    assert lines == ["line 0"]
    assert result.unread == total - len(b"line 0\n")
