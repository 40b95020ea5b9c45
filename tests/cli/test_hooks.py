"""Issue 42 item 1: outbound webhooks, driven by the `hook` commands and a `Deliverer` (the
thread every worker and writable serve runs) against a loopback receiver, on both databases.
Across real processes (a worker delivering, a sender killed mid-send):
tests/multiprocess/test_hook_deliveries.py."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from core.services import hooks
from core.services.hooks import Deliverer
from core.store import events
from tests.cli.conftest import Laneway
from tests.conftest import eventually, open_host
from tests.hooks.receiver import receiver

SECRET = "s3cret-for-tests"


@pytest.fixture(autouse=True)
def _quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANEWAY_HOOK_RETRY_BASE", "0.2")


@pytest.fixture
def board(laneway: Laneway) -> Laneway:
    laneway.json("workflow", "create", "--template", "simple")
    return laneway


def _deliveries(lw: Laneway, *args: str) -> list[dict[str, object]]:
    found: list[dict[str, object]] = lw.json("hook", "deliveries", *args)
    return found


def test_issue_42_item_1_fails_twice_then_delivered_once_signed(board: Laneway) -> None:
    """Two failures then 200: three attempts with one delivery id and a valid signature."""
    with receiver(lambda n: 500 if n < 2 else 200) as rec:
        hook = board.json(
            "hook",
            "add",
            rec.url,
            "--events",
            "task.created",
            "--secret-env",
            "HOOK_SECRET",
            env={"HOOK_SECRET": SECRET},
        )
        assert set(hook) == {"id", "url", "events", "created_at"}
        task = board.json("task", "create", "--workflow", "Kanban", "--title", "called")
        with open_host(board.url) as host, Deliverer(host.store):
            eventually(
                lambda: _deliveries(board, "--state", "delivered"), timeout=60, what="delivered"
            )
    [delivery] = _deliveries(board, "--hook", hook["id"])
    assert delivery["state"] == "delivered"
    assert delivery["attempts"] == 3
    assert delivery["last_status"] == 200
    assert len(rec.got) == 3
    assert {g.headers["x-laneway-delivery"] for g in rec.got} == {str(delivery["event_id"])}
    for got in rec.got:
        assert got.headers["content-type"] == "application/json"
        assert got.headers["x-laneway-event"] == "task.created"
        expected = "sha256=" + hmac.new(SECRET.encode(), got.body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(got.headers["x-laneway-signature"], expected)
        body = json.loads(got.body)
        assert body["type"] == "task.created"
        assert body["task_id"] == task["id"]
        assert body["id"] == delivery["event_id"]


def test_issue_42_item_1_gives_up_after_the_window_with_one_hook_failed_event(
    board: Laneway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANEWAY_HOOK_RETRY_WINDOW", "1.5")
    with receiver(lambda _n: 500) as rec:
        hook = board.json("hook", "add", rec.url, "--events", "task.created")
        board.json("task", "create", "--workflow", "Kanban", "--title", "nobody listens")
        with open_host(board.url) as host, Deliverer(host.store):
            eventually(lambda: _deliveries(board, "--state", "failed"), timeout=60, what="failed")
            [delivery] = _deliveries(board)
            failed = [e for e in events.read_all(host.store) if e.type == "hook.failed"]
    assert delivery["state"] == "failed"
    assert delivery["last_status"] == 500
    assert int(str(delivery["attempts"])) >= 2
    assert len(rec.got) == delivery["attempts"]
    assert [(e.data["hook_id"], e.data["delivery_id"]) for e in failed] == [
        (hook["id"], delivery["id"])
    ]


def test_issue_42_item_1_per_hook_order_and_a_failing_hook_holds_only_its_own_queue(
    board: Laneway,
) -> None:
    with receiver() as good, receiver(lambda _n: 500) as bad:
        ok_hook = board.json("hook", "add", good.url, "--events", "task.created")
        bad_hook = board.json("hook", "add", bad.url, "--events", "task.created")
        titles = [f"t{i}" for i in range(6)]
        made = [
            board.json("task", "create", "--workflow", "Kanban", "--title", title)["id"]
            for title in titles
        ]
        with open_host(board.url) as host, Deliverer(host.store):
            eventually(
                lambda: (
                    len(_deliveries(board, "--hook", ok_hook["id"], "--state", "delivered")) == 6
                ),
                timeout=60,
                what="all six delivered to the good hook",
            )
            eventually(lambda: len(bad.got) >= 2, timeout=60, what="the bad hook retried")
    assert [json.loads(g.body)["task_id"] for g in good.got] == made
    # the failing hook only ever tried its oldest delivery
    assert len({g.headers["x-laneway-delivery"] for g in bad.got}) == 1
    pending = _deliveries(board, "--hook", bad_hook["id"], "--state", "pending")
    assert len(pending) == 6
    assert [d["attempts"] for d in pending[1:]] == [0] * 5


def test_issue_42_item_1_bad_input_is_one_line_each(board: Laneway) -> None:
    assert "http" in board.fails("hook", "add", "ftp://example.com/x")
    assert "http" in board.fails("hook", "add", "not a url")
    line = board.fails("hook", "add", "http://127.0.0.1:9/x", "--secret-env", "NO_SUCH_VAR_42")
    assert "NO_SUCH_VAR_42" in line
    assert "Nonsense!" in board.fails(
        "hook", "add", "http://127.0.0.1:9/x", "--events", "task.created,Nonsense!"
    )
    assert "no hook" in board.fails("hook", "remove", "nope")
    assert board.json("hook", "list") == []


def test_issue_42_item_1_hook_list_never_shows_the_secret(board: Laneway) -> None:
    env = {"HOOK_SECRET": SECRET}
    made = board.run("hook", "add", "http://127.0.0.1:9/x", "--secret-env", "HOOK_SECRET", env=env)
    assert made.exit_code == 0
    assert SECRET not in made.output
    made_json = board.run(
        "--json", "hook", "add", "https://example.com/h", "--secret-env", "HOOK_SECRET", env=env
    )
    assert SECRET not in made_json.output
    listed = board.json("hook", "list")
    assert len(listed) == 2
    assert all(set(h) == {"id", "url", "events", "created_at"} for h in listed)
    assert SECRET not in board.run("hook", "list").output
    assert SECRET not in board.run("--json", "hook", "list").output
    gone = board.json("hook", "remove", listed[0]["id"])
    assert gone["id"] == listed[0]["id"]
    assert [h["id"] for h in board.json("hook", "list")] == [listed[1]["id"]]


def test_issue_42_item_1_pruning_the_event_log_keeps_what_a_hook_has_not_taken(
    board: Laneway,
) -> None:
    """Deliveries are taken from the event log by a cursor: pruning stops at the slowest
    hook's cursor, so an event is never pruned before every hook has taken it."""
    hook = board.json("hook", "add", "http://127.0.0.1:9/x", "--events", "task.created")
    board.json("task", "create", "--workflow", "Kanban", "--title", "kept")
    later = "2999-01-01T00:00:00.000000Z"
    with open_host(board.url) as host:
        before = events.read_all(host.store)
        assert events.prune(host.store, now=later) == 0
        assert hooks.take(host.store) == 1
        assert events.prune(host.store, now=later) == len(before)
    [delivery] = _deliveries(board, "--hook", hook["id"])
    assert delivery["type"] == "task.created"
    assert delivery["state"] == "pending"


def test_issue_42_item_1_a_hook_removed_while_its_events_are_taken_leaves_nothing_behind(
    board: Laneway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`hook remove` in one process while another takes the hook's events (its cursor moved,
    its deliveries not yet written): on PostgreSQL the deliveries were committed after the
    removal had deleted the hook's, and outlived it; the next pass then failed on them before
    reaching the other hooks, whose deliveries stayed pending for good. The removal now waits
    for the take, and takes its deliveries with it; the other hook is still sent to."""
    from core import ids
    from tests.interleave import Hold, race

    gone = board.json("hook", "add", "http://127.0.0.1:9/gone", "--events", "task.created")
    board.json("task", "create", "--workflow", "Kanban", "--title", "an event for it")
    hold = Hold()
    # held making its first delivery row: the cursor moved, nothing inserted, not committed
    monkeypatch.setattr(ids, "new_id", hold.before(ids.new_id))
    # two hosts, as two processes: one host's writes share one connection
    with open_host(board.url) as taker, open_host(board.url) as remover:
        race(hold, lambda: hooks.take(taker.store), lambda: hooks.remove(remover.store, gone["id"]))
    monkeypatch.undo()
    kept = board.json("hook", "add", "http://127.0.0.1:9/kept", "--events", "task.created")
    board.json("task", "create", "--workflow", "Kanban", "--title", "an event for the other")
    with open_host(board.url) as host:
        hooks.take(host.store)
        claimed = hooks.claim_next(host.store, "me", set())
    left = _deliveries(board)
    assert {d["hook_id"] for d in left} == {kept["id"]}, left
    assert [c.hook_id for c in claimed] == [kept["id"]]


def test_issue_42_item_1_deliveries_left_by_a_removed_hook_hold_back_no_other_hook(
    board: Laneway,
) -> None:
    """Deliveries an earlier version left behind when their hook was removed (the race
    above) go when a pass reaches them, and the other hooks are sent to in the same pass."""
    import sqlalchemy as sa

    from core import ids
    from core.store import tables as t

    kept = board.json("hook", "add", "http://127.0.0.1:9/kept", "--events", "task.created")
    board.json("task", "create", "--workflow", "Kanban", "--title", "an event")
    with open_host(board.url) as host:
        assert hooks.take(host.store) == 1
        with host.store.transaction() as uow:
            uow.conn.execute(
                sa.insert(t.hook_deliveries).values(
                    id=ids.new_id(), hook_id="0-removed", event_id=1, type="task.created",
                    body="{}", state="pending", attempts=0, next_at=ids.now(),
                    created_at=ids.now(),
                )
            )  # fmt: skip
        claimed = hooks.claim_next(host.store, "me", set())
    assert [c.hook_id for c in claimed] == [kept["id"]]
    assert {d["hook_id"] for d in _deliveries(board)} == {kept["id"]}
