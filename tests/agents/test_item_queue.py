"""Issue 22 "Transcripts people read": a chatty exec agent's lines are kept in order, as they
arrive, by a writer that batches what arrives while a transaction commits
(core/agents/item_queue.py)."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from core.agents.bounds import item
from core.agents.item_queue import BATCH, ItemQueue
from core.agents.values import TranscriptItem
from core.host import Host
from core.model import Item
from tests.agents.test_acp_worker import workflow_yaml
from tests.conftest import open_host


def test_items_are_written_in_order_and_batched_while_a_write_is_in_flight() -> None:
    """What arrives while one write runs goes in the next: 300 lines against a slow store take
    a handful of writes, in the order they were put, each at most BATCH items."""
    writes: list[list[str]] = []

    def slow(items: Sequence[TranscriptItem]) -> None:
        time.sleep(0.02)
        writes.append([i.text for i in items])

    queue = ItemQueue(slow)
    for n in range(300):
        queue.put([item("log", str(n))])
    queue.close()
    assert [text for batch in writes for text in batch] == [str(n) for n in range(300)]
    assert 1 <= len(writes) <= 10
    assert max(len(batch) for batch in writes) <= BATCH


def test_flush_returns_once_everything_put_before_it_is_written() -> None:
    written: list[str] = []
    gate = threading.Event()

    def gated(items: Sequence[TranscriptItem]) -> None:
        gate.wait(5)
        written.extend(i.text for i in items)

    queue = ItemQueue(gated)
    queue.put([item("log", "a"), item("log", "b")])
    flushed = threading.Event()
    waiter = threading.Thread(target=lambda: (queue.flush(), flushed.set()))
    waiter.start()
    assert not flushed.wait(0.1)  # the write has not happened: flush waits for it
    gate.set()
    waiter.join(5)
    assert flushed.is_set()
    assert written == ["a", "b"]
    queue.close()


def test_a_failed_write_reaches_the_turn_and_nothing_after_it_is_written() -> None:
    """The board refusing an item (its task deleted under it, say) ends the turn: the next put
    or flush raises it, and later items are not written out of order around the gap."""
    written: list[str] = []

    def failing(items: Sequence[TranscriptItem]) -> None:
        if any(i.text == "bad" for i in items):
            raise RuntimeError("no such session")
        written.extend(i.text for i in items)

    queue = ItemQueue(failing)
    queue.put([item("log", "ok")])
    queue.flush()
    queue.put([item("log", "bad")])
    with pytest.raises(RuntimeError, match="no such session"):
        queue.flush()
    with pytest.raises(RuntimeError):
        queue.put([item("log", "after")])
    queue.stop()
    assert written == ["ok"]


def test_issue_45_item_1_an_inline_queue_writes_on_its_callers_thread_at_flush() -> None:
    """An ACP turn's items are written by the thread waiting on the turn, between the agent's
    updates (`inline`): nothing is written before the caller's flush, everything put since the
    last flush goes in one write (a batch is written as soon as it is full), in order, on the
    caller's own thread - no thread switch per item."""
    writes: list[tuple[int, list[str]]] = []

    def write(items: Sequence[TranscriptItem]) -> None:
        writes.append((threading.get_ident(), [i.text for i in items]))

    queue = ItemQueue(write, inline=True)
    for n in range(3):
        queue.put([item("message", str(n))])
    assert writes == []
    queue.flush()
    assert writes == [(threading.get_ident(), ["0", "1", "2"])]
    queue.flush()  # nothing new: no write
    assert len(writes) == 1
    burst = [item("log", f"b{n}") for n in range(BATCH + 10)]
    queue.put(burst)  # a full batch is written at once, the rest at the next flush
    assert [len(texts) for _, texts in writes] == [3, BATCH]
    queue.close()
    assert [len(texts) for _, texts in writes] == [3, BATCH, 10]
    assert [t for _, texts in writes[1:] for t in texts] == [i.text for i in burst]
    assert {thread for thread, _ in writes} == {threading.get_ident()}


def test_issue_45_item_1_an_inline_queues_failed_write_is_raised_and_ends_it() -> None:
    written: list[str] = []

    def failing(items: Sequence[TranscriptItem]) -> None:
        if any(i.text == "bad" for i in items):
            raise RuntimeError("no such session")
        written.extend(i.text for i in items)

    queue = ItemQueue(failing, inline=True)
    queue.put([item("log", "ok"), item("log", "bad"), item("log", "after")])
    with pytest.raises(RuntimeError, match="no such session"):
        queue.flush()
    with pytest.raises(RuntimeError):
        queue.put([item("log", "later")])
    queue.stop()
    assert written == []  # the batch the failure was in is not partly kept by the queue


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_a_burst_of_lines_is_kept_whole_and_in_order(db_url: str, tmp_path: Path) -> None:
    """An exec agent printing 2,000 lines as fast as it can: every line is a transcript item,
    numbered in the order printed, all on the board when its turn ends."""
    path = tmp_path / "wf.yml"
    path.write_text(workflow_yaml([]))
    code = (
        "import json, sys; sys.stdin.read()\n"
        "for n in range(2000): print(json.dumps({'log': f'line {n}'}))\n"
    )
    with open_host(db_url) as host:
        (workflow,) = host.workflows.import_file(path)
        host.profiles.add("chatty", command=[sys.executable, "-c", code])
        task = host.tasks.create(workflow=workflow.id, title="Card", step="Backlog")
        session = host.sessions.start(task.id, profile="chatty", external=False)
        outcome = host.runtime.run_turn(session.id, "talk")
        assert outcome.ok, outcome
        logs = [i.text for i in _items(host, session.id) if i.kind == "log"]
        host.runtime.close()
    assert logs == [f"line {n}" for n in range(2000)]


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_issue_45_item_1_an_acp_agents_burst_is_kept_whole_and_in_order_in_a_live_turn(
    db_url: str, tmp_path: Path
) -> None:
    """An ACP agent saying 1,200 things in one turn of a live conversation, as fast as its
    SDK sends them: written by the thread waiting on the turn (full batches as they fill, the
    rest when it has handled all it was handed), every one is kept, in the order said."""
    path = tmp_path / "wf.yml"
    path.write_text(workflow_yaml([]))
    # a thought first: the agent's echo of the prompt is a message of its own before it
    said = [f"t{n}" if n % 2 == 0 else f"m{n}" for n in range(1200)]
    steps = [{"message": s} if s[0] == "m" else {"thought": s} for s in said]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [[], steps]}))
    fake = str(Path(__file__).resolve().with_name("fake_acp_agent.py"))
    with open_host(db_url) as host:
        (workflow,) = host.workflows.import_file(path)
        host.profiles.add(
            "chatty",
            command=[sys.executable, fake],
            protocol="acp",
            env={"FAKE_ACP_SCRIPT_FILE": str(script)},
        )
        task = host.tasks.create(workflow=workflow.id, title="Card", step="Backlog")
        session = host.sessions.start(task.id, profile="chatty", external=False)
        assert host.runtime.run_turn(session.id, "first").ok  # the conversation starts
        first = host.sessions.items(session.id, limit=1000)[-1].seq
        outcome = host.runtime.run_turn(session.id, "talk")  # a live conversation's turn
        assert outcome.ok, outcome
        kept = [i.text for i in _items(host, session.id, first) if i.kind in ("message", "thought")]
        host.runtime.close()
    assert [k for k in kept if not k.startswith("echo: ")] == said


def _items(host: Host, session_id: str, after: int = 0) -> list[Item]:
    """The session's transcript after `after`, read page by page."""
    found: list[Item] = []
    while page := host.sessions.items(session_id, after=after, limit=500):
        found += page
        after = page[-1].seq
    return found
