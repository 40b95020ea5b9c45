"""Issue 42 item 1 across real processes: a `laneway worker` delivers the events `laneway`
commands made; a worker killed with SIGKILL in the middle of a send leaves the delivery to be
sent again by the next one (at least once: duplicates never more than kills)."""

from __future__ import annotations

import json
import signal
import threading

import pytest

from tests.conftest import eventually
from tests.hooks.receiver import receiver
from tests.multiprocess.conftest import Board

pytestmark = pytest.mark.slow

QUICK = {"LANEWAY_HOOK_RETRY_BASE": "0.2", "LANEWAY_HOOK_LEASE": "2"}


def test_issue_42_item_1_a_worker_delivers_what_cli_commands_did(board: Board) -> None:
    board.json("workflow", "create", "--template", "simple")
    with receiver() as rec:
        hook = board.json("hook", "add", rec.url)
        worker = board.spawn("worker", env=QUICK)
        try:
            task = board.json("task", "create", "--workflow", "Kanban", "--title", "t")
            board.json("task", "move", task["id"], "Done")
            eventually(
                lambda: (
                    {"task.created", "task.moved"}
                    <= {g.headers["x-laneway-event"] for g in rec.got}
                ),
                timeout=60,
                what="both events delivered",
            )
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=30)
    bodies = [json.loads(g.body) for g in rec.got]
    assert [b["id"] for b in bodies] == sorted(b["id"] for b in bodies)
    created = next(b for b in bodies if b["type"] == "task.created")
    assert created["task_id"] == task["id"]
    states = {d["state"] for d in board.json("hook", "deliveries", "--hook", hook["id"])}
    assert states == {"delivered"}


def test_issue_42_item_1_a_sender_killed_mid_send_leaves_it_to_be_sent_again(
    board: Board,
) -> None:
    board.json("workflow", "create", "--template", "simple")
    with receiver() as rec:
        rec.hold = threading.Event()
        board.json("hook", "add", rec.url, "--events", "task.created")
        task = board.json("task", "create", "--workflow", "Kanban", "--title", "t")
        first = board.spawn("worker", env=QUICK)
        try:
            assert rec.first_arrived.wait(60), "the first worker never sent"
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=30)
        finally:
            rec.hold.set()
        [pending] = board.json("hook", "deliveries")
        assert pending["state"] == "pending"
        second = board.spawn("worker", env=QUICK)
        try:
            eventually(
                lambda: board.json("hook", "deliveries", "--state", "delivered"),
                timeout=60,
                what="delivered by the second worker",
            )
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(timeout=30)
    [delivery] = board.json("hook", "deliveries")
    sent = rec.of(delivery["event_id"])
    assert 2 <= len(sent) <= 1 + 1  # the killed send, and one more: duplicates <= kills
    assert all(json.loads(g.body)["task_id"] == task["id"] for g in sent)
