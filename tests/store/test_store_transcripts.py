"""The storage half of real agents over ACP (issue 29), on a real SQLite file and PostgreSQL:
transcript items (AGENTS.md "What the board sees"; CLI.md: an *item*), the agent's reported
state on the session, and what a run spent (CLI.md: agents report cost and tokens)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core import Host
from core.errors import LanewayError, NotFound
from core.store import tables as t
from core.text import MAX_DATA, MAX_TEXT
from tests.agents.conftest import session_with_run


def _session(host: Host, tmp_path: Path) -> tuple[str, str, str]:
    """A task with a session of profile `agent` and a run of it: (task, session, run)."""
    return session_with_run(host, tmp_path, title="talk")


def _events(host: Host, type_: str) -> list[dict[str, Any]]:
    with host.store.read() as conn:
        found = conn.execute(
            sa.select(t.board_events.c.data)
            .where(t.board_events.c.type == type_)
            .order_by(t.board_events.c.id)
        ).scalars()
        return [json.loads(d) for d in found]


def test_append_items_numbers_per_session_in_order_and_lists_them(
    host: Host, tmp_path: Path
) -> None:
    """CLI.md item: `{"seq", "session_id", "run_id", "kind", "text", "data", "at"}`, a
    per-session sequence number; `items` pages by `after`/`limit` and filters by run."""
    _task, session, run = _session(host, tmp_path)

    first = host.sessions.append_items(
        session, [("prompt", "do it", {}), ("message", "done", {"n": 1})], run_id=run
    )
    second = host.sessions.append_items(session, [("log", "outside a run", {})])

    assert first == [1, 2]
    assert second == [3]
    every = host.sessions.items(session)
    assert [(i.seq, i.kind, i.text, i.run_id) for i in every] == [
        (1, "prompt", "do it", run),
        (2, "message", "done", run),
        (3, "log", "outside a run", None),
    ]
    assert dict(every[1].data) == {"n": 1}
    assert all(i.session_id == session and i.at for i in every)
    assert [i.seq for i in host.sessions.items(session, run_id=run)] == [1, 2]
    assert [i.seq for i in host.sessions.items(session, after=1, limit=1)] == [2]
    assert [i.seq for i in host.sessions.run_items(run)] == [1, 2]
    assert host.sessions.append_items(session, []) == []


def test_each_item_is_an_agent_item_event_with_its_text_cut_to_4_kib(
    host: Host, tmp_path: Path
) -> None:
    """HTTP.md events: `agent.item` carries session_id, run_id, seq, kind, text (4 KiB)."""
    task, session, run = _session(host, tmp_path)
    host.sessions.append_items(
        session, [("thought", "x" * 10_000, {}), ("plan", "p", {})], run_id=run
    )

    found = _events(host, "agent.item")
    assert [(e["seq"], e["kind"], e["session_id"], e["run_id"]) for e in found] == [
        (1, "thought", session, run),
        (2, "plan", session, run),
    ]
    assert found[0]["text"].startswith("x" * 4096)
    assert "[cut: 5904 more characters]" in found[0]["text"]
    assert found[1]["text"] == "p"
    with host.store.read() as conn:
        tasks = set(
            conn.execute(
                sa.select(t.board_events.c.task_id).where(t.board_events.c.type == "agent.item")
            ).scalars()
        )
    assert tasks == {task}


def test_a_larger_item_is_cut_saying_so(host: Host, tmp_path: Path) -> None:
    """AGENTS.md: each item is bounded in size (a larger item is cut, saying so)."""
    _task, session, _run = _session(host, tmp_path)
    host.sessions.append_items(
        session,
        [("output", "y" * (MAX_TEXT + 500), {"blob": "z" * (MAX_DATA + 10)})],
    )

    (kept,) = host.sessions.items(session)
    assert kept.text.startswith("y" * MAX_TEXT)
    assert kept.text.endswith("... [cut: 500 more characters]")
    assert kept.data["cut"] is True
    assert kept.data["chars"] > MAX_DATA
    assert len(json.dumps(dict(kept.data))) <= MAX_DATA


def test_issue_37_item_4_an_agents_item_is_cut_once_on_its_way_to_the_row(
    host: Host, tmp_path: Path
) -> None:
    """Issue 37 item 4: an item a protocol made (`core.agents.bounds.item`) keeps its one shape
    through the board record to the row and is cut once: the stored text says how much of the
    agent's text was cut, not how much of an already cut text was cut again."""
    from core.agents.bounds import item
    from core.agents.record import BoardRecord

    task, session, run = _session(host, tmp_path)
    made = item("output", "y" * (MAX_TEXT + 500), {"blob": "z" * (MAX_DATA + 10)})
    BoardRecord(host, task, session, run).items([made])

    (kept,) = host.sessions.items(session)
    assert kept.text == made.text
    assert kept.text.endswith("y... [cut: 500 more characters]")
    assert dict(kept.data) == dict(made.data)
    assert kept.data["cut"] is True


def test_text_no_database_can_store_is_kept_readable(host: Host, tmp_path: Path) -> None:
    """An agent's output with a NUL or a lone surrogate is kept (replaced), not refused."""
    _task, session, _run = _session(host, tmp_path)
    host.sessions.append_items(session, [("output", "a\x00b\ud800c", {})])
    (kept,) = host.sessions.items(session)
    assert kept.text == "a\ufffdb?c"


def test_bad_kind_and_unknown_session_are_one_line_errors(host: Host, tmp_path: Path) -> None:
    _task, session, _run = _session(host, tmp_path)
    with pytest.raises(LanewayError, match="item kind 'shout'") as bad:
        host.sessions.append_items(session, [("shout", "hi", {})])
    assert "\n" not in str(bad.value)
    with pytest.raises(NotFound):
        host.sessions.append_items("no-such-session", [("log", "hi", {})])
    with pytest.raises(LanewayError, match="limit"):
        host.sessions.items(session, limit=0)
    assert host.sessions.items(session) == []


def test_items_go_with_their_task(host: Host, tmp_path: Path) -> None:
    """CLI.md: delete cascades the task's sessions, and so their transcripts."""
    task, session, _run = _session(host, tmp_path)
    host.sessions.append_items(session, [("log", "gone soon", {})])
    host.tasks.delete(task)
    with host.store.read() as conn:
        left = conn.execute(sa.select(sa.func.count()).select_from(t.transcript_items)).scalar()
    assert left == 0


def test_record_agent_merges_what_the_agent_reported(host: Host, tmp_path: Path) -> None:
    """AGENTS.md: the session row holds what the agent reported (ACP session id, modes...)."""
    _task, session, _run = _session(host, tmp_path)
    host.sessions.record_agent(session, acp_session_id="s-1", modes=["code", "plan"], mode="code")
    merged = host.sessions.record_agent(session, mode="plan", model="m")

    assert dict(merged.agent) == {
        "acp_session_id": "s-1",
        "modes": ["code", "plan"],
        "mode": "plan",
        "model": "m",
    }
    assert dict(host.sessions.get(session).agent) == dict(merged.agent)
    assert dict(merged.metadata) == {}  # the workflow's half is not touched
    with pytest.raises(NotFound):
        host.sessions.record_agent("no-such-session", mode="x")


def test_record_usage_accumulates_over_the_run(host: Host, tmp_path: Path) -> None:
    """CLI.md: agents report cost and tokens; a run's usage adds them up."""
    _task, _session_id, run = _session(host, tmp_path)
    assert host.runs.get(run).usage is None  # type: ignore[union-attr]

    host.runs.record_usage(run, {"cost_usd": 0.25, "input_tokens": 100})
    host.runs.record_usage(run, {"cost_usd": 0.5, "output_tokens": 7, "other": "ignored"})

    found = host.runs.get(run)
    assert found is not None
    assert dict(found.usage or {}) == {"cost_usd": 0.75, "input_tokens": 100, "output_tokens": 7}
    with pytest.raises(LanewayError, match="usage cost_usd"):
        host.runs.record_usage(run, {"cost_usd": "a lot"})
    with pytest.raises(NotFound):
        host.runs.record_usage("no-such-run", {"cost_usd": 1})


def test_runs_and_sessions_are_found_by_a_unique_suffix(host: Host, tmp_path: Path) -> None:
    """CLI.md: a run or session may be named by its id or a unique suffix of 6+ characters."""
    _task, session, run = _session(host, tmp_path)
    assert host.runs.find(run[-8:]).id == run
    assert host.runs.find(run).id == run
    assert host.sessions.find(session[-6:]).id == session
    with pytest.raises(NotFound):
        host.runs.find(run[-5:])
    with pytest.raises(NotFound):
        host.sessions.find("zzzzzzzz")


def test_issue_45_item_2_a_batch_of_items_is_one_insert_numbered_once(
    host: Host, tmp_path: Path
) -> None:
    """Issue 45 item 2: a batch of transcript items is written by one multi-row INSERT, its
    seqs decided once for the batch (not one `INSERT ... max(seq) + 1` per item), numbered
    on from what the session already has; a run's prompt among them is still kept once and
    keeps its place in the order."""
    _task, session, run = _session(host, tmp_path)
    host.sessions.append_items(session, [("log", "first", {})])
    inserts: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO TRANSCRIPT_ITEMS"):
            inserts.append(statement)

    sa.event.listen(host.store.engine, "before_cursor_execute", seen)
    try:
        batch = [("message" if n % 2 else "thought", f"item {n}", {"n": n}) for n in range(40)]
        seqs = host.sessions.append_items(session, batch, run_id=run)
        assert len(inserts) == 1
        inserts.clear()
        mixed = [
            ("message", "before", {}),
            ("prompt", "do it", {"turn": 1}),
            ("message", "after", {}),
            ("prompt", "do it", {"turn": 1}),  # the same turn's prompt again: not kept twice
            ("message", "last", {}),
        ]
        more = host.sessions.append_items(session, mixed, run_id=run)
    finally:
        sa.event.remove(host.store.engine, "before_cursor_execute", seen)
    assert seqs == list(range(2, 42))
    assert more == [42, 43, 44, 45]
    items = host.sessions.items(session, limit=1000)
    assert [i.text for i in items] == [
        "first",
        *(f"item {n}" for n in range(40)),
        "before",
        "do it",
        "after",
        "last",
    ]
    assert [i.seq for i in items] == list(range(1, 46))
    told = [e["seq"] for e in _events(host, "agent.item")]
    assert told == list(range(1, 46))


@pytest.mark.parametrize(
    "data",
    [
        {"i": 7},
        {"text": "x" * 5000},
        {"emoji": "\U0001f600" * 700},
        {"big": 2**80, "neg": -(2**63), "f": -2.2250738585072014e-308, "b": False, "n": None},
        {"nested": {"a": [1, 2, 3]}},
        {1: "a key that is not text"},
        {"inf": float("inf")},
    ],
)
def test_issue_45_item_2_item_data_is_measured_without_encoding_only_when_surely_short(
    data: dict[str, Any],
) -> None:
    """An item's data measured without encoding it (a flat mapping counted at its longest)
    is cut exactly when its JSON is longer than the bound: at every bound around its length,
    `bounded_data` keeps or cuts it as encoding it says."""
    from core.text import bounded_data, finite_json

    measured = data if "inf" not in data else finite_json(data)
    length = len(json.dumps(measured, default=str))
    for limit in (length - 1, length, length + 1, 12 * length, MAX_DATA):
        kept = bounded_data(data, limit)
        if length > limit:
            assert kept["cut"] is True
            assert kept["chars"] == length
        else:
            assert kept == measured
