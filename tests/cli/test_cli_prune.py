"""Issue 25 item 12 (issue 22 item 1): `laneway prune --transcripts-older-than DURATION`
deletes a session's transcript items by age and touches nothing else; `--dry-run` only
counts; `--json` prints `{"transcript_items_deleted": N, ...}`. Each session's newest item
stays, so its numbering never goes back."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from core import ids
from core.store import tables as t
from tests.cli.conftest import Laneway
from tests.conftest import open_host

DAY = 86400.0
OTHER_TABLES = (t.tasks, t.task_sessions, t.runs, t.board_events, t.step_entries)


def _counts(url: str) -> dict[str, int]:
    with open_host(url, read_only=True) as host, host.store.read() as conn:
        return {
            table.name: int(
                conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
            )
            for table in OTHER_TABLES
        }


def _items(url: str) -> dict[str, list[int]]:
    items = t.transcript_items
    with open_host(url, read_only=True) as host, host.store.read() as conn:
        found: dict[str, list[int]] = {}
        for row in conn.execute(sa.select(items.c.session_id, items.c.seq).order_by(items.c.seq)):
            found.setdefault(row.session_id, []).append(row.seq)
        return found


def _board(lw: Laneway) -> tuple[str, str]:
    """Two sessions with items of known ages: A 40d, 35d, 2d, 1h old; B 50d and 45d old."""
    lw.json("workflow", "create", "--template", "simple")
    lw.json("profile", "add", "coder", "--command", "true")
    task = lw.json("task", "create", "--workflow", "Kanban", "--title", "Keep it small")
    a = lw.json("session", "start", task["id"], "--profile", "coder")["id"]
    other = lw.json("task", "create", "--workflow", "Kanban", "--title", "Old news")
    b = lw.json("session", "start", other["id"], "--profile", "coder")["id"]
    now = ids.now()
    ages = {a: [40 * DAY, 35 * DAY, 2 * DAY, 3600.0], b: [50 * DAY, 45 * DAY]}
    with open_host(lw.url) as host:
        for session, seconds in ages.items():
            seqs = host.sessions.append_items(session, [("log", f"line {n}", {}) for n in seconds])
            with host.store.transaction() as uow:
                for seq, age in zip(seqs, seconds, strict=True):
                    uow.conn.execute(
                        sa.update(t.transcript_items)
                        .where(
                            t.transcript_items.c.session_id == session,
                            t.transcript_items.c.seq == seq,
                        )
                        .values(at=ids.shift(now, -age))
                    )
    return a, b


def test_prune_deletes_old_transcript_items_and_nothing_else(laneway: Laneway) -> None:
    lw = laneway
    a, b = _board(lw)
    before = _counts(lw.url)

    dry: dict[str, Any] = lw.json("prune", "--transcripts-older-than", "30d", "--dry-run")
    assert (dry["transcript_items_deleted"], dry["transcript_items_matched"]) == (0, 3)
    assert dry["dry_run"] is True
    assert _items(lw.url) == {a: [1, 2, 3, 4], b: [1, 2]}
    said = lw.run("prune", "--transcripts-older-than", "4w2d", "--dry-run").stdout
    assert said.startswith("would delete 3 transcript items stamped before ")

    done = lw.json("prune", "--transcripts-older-than", "30d")
    assert done["transcript_items_deleted"] == 3
    assert done["dry_run"] is False
    # A keeps its last 2 days; B, all older, keeps its newest: the next item is numbered 3
    assert _items(lw.url) == {a: [3, 4], b: [2]}
    assert _counts(lw.url) == before
    with open_host(lw.url) as host:
        assert host.sessions.append_items(b, [("log", "after the prune", {})]) == [3]

    # B's old item is no longer its newest: it goes now
    again = lw.run("prune", "--transcripts-older-than", "1d")
    assert again.stdout.startswith("deleted 2 transcript items stamped before ")
    assert _items(lw.url) == {a: [4], b: [3]}
    line = lw.fails("prune", "--transcripts-older-than", "a month")
    assert "--transcripts-older-than 'a month': expected a duration" in line
    assert "Usage:" in lw.fails("prune", code=2)
