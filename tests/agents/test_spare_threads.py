"""Issue 45 item 1: a turn's threads are reused by the next turn (core.agents.spare): a
transcript writer per turn no longer starts a thread per turn."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from core.agents.item_queue import ItemQueue
from core.agents.values import TranscriptItem


def test_issue_45_item_1_the_next_turns_writer_runs_on_the_thread_the_last_one_left() -> None:
    writers: list[threading.Thread] = []  # the objects: an ended thread's ident is reused
    kept: list[str] = []

    def write(items: Sequence[TranscriptItem]) -> None:
        writers.append(threading.current_thread())
        kept.extend(i.text for i in items)

    for turn in range(5):
        said = ItemQueue(write)
        said.put([TranscriptItem("message", f"turn {turn}", {})])
        said.close()  # everything written, the writer ended: its thread is spare again
    assert kept == [f"turn {n}" for n in range(5)]
    assert len({id(w) for w in writers}) == 1
    assert threading.current_thread() not in writers


def test_issue_45_item_1_a_stopped_queue_waits_for_its_writer_to_end() -> None:
    started, release = threading.Event(), threading.Event()
    done: list[str] = []

    def write(items: Sequence[TranscriptItem]) -> None:
        started.set()
        release.wait(5)
        done.extend(i.text for i in items)

    said = ItemQueue(write)
    said.put([TranscriptItem("message", "slow", {})])
    assert started.wait(5)
    threading.Timer(0.2, release.set).start()
    said.stop()  # returns only once the write in progress has ended
    assert done == ["slow"]
