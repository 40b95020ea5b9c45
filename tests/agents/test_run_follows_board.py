"""A run skips the board-version read while it does its short writes (issue 30: from its claim
to its agent's start, and from its agent's end to its release), yet a catalogue change made
while its agent works is what its turn's end acts on: the first transaction or read after the
agent follows the board again. The board's Office switch stands for any catalogue change (a
profile or workflow edit bumps the same version)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from core.host import Host
from core.store import tables as t
from tests.conftest import open_host
from tests.tools.board import review_board


def _follows(host: Host) -> list[int]:
    """Counts the store's board follows (its `on_begin`: the version read)."""
    seen: list[int] = []
    follow = host.store.on_begin
    assert follow is not None

    def counted(conn: Connection) -> None:
        seen.append(1)
        follow(conn)

    host.store.on_begin = counted
    return seen


def test_issue_30_a_run_acts_on_the_board_as_its_agent_left_it(db_url: str) -> None:
    with open_host(db_url, office=True) as worker_side, open_host(db_url) as other:
        assert worker_side.features.office
        with worker_side.store.keeping_board():
            other.set_features(office=False)  # another process switches Office off
            worker_side.tasks.list()
            assert worker_side.features.office, "kept: the claim's view of the board"
            with worker_side.store.agent_turn():
                pass  # the agent works; the board moved meanwhile
            worker_side.tasks.list()  # the first read after the agent follows the board
            assert not worker_side.features.office
            other.set_features(office=True)
            worker_side.tasks.list()
            assert not worker_side.features.office, "kept again until the next agent turn"
        worker_side.tasks.list()  # outside a run: every read follows, as before
        assert worker_side.features.office


def test_issue_30_a_kept_run_reads_no_board_version(db_url: str) -> None:
    """The point of keeping: no version read per transaction and read of the run's life,
    while inside `agent_turn` (the agent's own writes) every one still follows."""
    with open_host(db_url) as host:
        follows = _follows(host)
        with host.store.keeping_board():
            for _ in range(3):
                host.tasks.list()
                with host.store.transaction() as uow:
                    uow.conn.execute(sa.select(t.tasks.c.id).limit(1))
            assert follows == []
            with host.store.agent_turn():
                host.tasks.list()
                host.tasks.list()
            assert len(follows) == 2
            host.tasks.list()  # the first after the agent follows
            host.tasks.list()
            assert len(follows) == 3
        host.tasks.list()
        assert len(follows) == 4


def test_issue_45_item_1_an_agents_transcript_items_read_no_board_version(db_url: str) -> None:
    """What an agent says is kept whatever the catalogue holds: its items' writes, even inside
    `agent_turn`, read no board version (two of a live ACP turn's four); a read after them
    still follows the board."""
    with open_host(db_url) as host:
        session = host.sessions.start(review_board(host).task.id)
        follows = _follows(host)
        with host.store.keeping_board(), host.store.agent_turn():
            host.sessions.append_items(session.id, [("message", "hello", {})])
            host.sessions.append_items(session.id, [("thought", "hmm", {})])
            assert follows == []
            host.tasks.list()
            assert len(follows) == 1
