"""Issue 14, target 2: statements whose result nothing waits for (`prepared.defer`).

On PostgreSQL a deferred statement is sent in one pipeline with the next statement on the
connection, whichever path sends that one (a prepared statement, SQLAlchemy, the flush before
COMMIT); on SQLite it runs at once. Either way the transaction sees the statements in the order
they were issued, and a deferred statement's check still decides inside its transaction: what
it raises rolls the whole transaction back.
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import sqlalchemy as sa

from core import Host
from core.store import prepared
from core.store import tables as t

T = t.tasks
_RETITLE = sa.update(T).where(T.c.id == sa.bindparam("b_id")).values(title=sa.bindparam("b_title"))
_TITLE = sa.select(T.c.title).where(T.c.id == sa.bindparam("task_id"))


class Refused(Exception):
    pass


def _refuse_unless_one(rowcount: int) -> None:
    if rowcount != 1:
        raise Refused(rowcount)


def _task(host: Host, title: str) -> str:
    workflow = host.workflows.create_from_template("office-default")
    return host.tasks.create(workflow=workflow.id, title=title).id


def _title(host: Host, task_id: str) -> str:
    return host.tasks.get(task_id).title


def test_issue14_deferred_statements_reach_the_database_in_the_order_issued(host: Host) -> None:
    """Issue 14: a deferred UPDATE is seen by the next statement of its transaction, sent
    through SQLAlchemy or as a prepared statement, and commits with the transaction even when
    nothing follows it."""
    task_id = _task(host, "before")
    with host.store.transaction() as uow:
        prepared.defer(uow.conn, _RETITLE, {"b_id": task_id, "b_title": "one"})
        seen = uow.conn.execute(sa.select(T.c.title).where(T.c.id == task_id)).scalar_one()
        assert seen == "one"
        prepared.defer(uow.conn, _RETITLE, {"b_id": task_id, "b_title": "two"})
        assert uow.run(_TITLE, {"task_id": task_id}).scalar_one() == "two"
        prepared.defer(uow.conn, _RETITLE, {"b_id": task_id, "b_title": "three"})
    assert _title(host, task_id) == "three"


def test_issue14_a_deferred_statements_check_rolls_its_whole_transaction_back(
    host: Host,
) -> None:
    """Issue 14: a deferred statement whose row count is not what its caller needed raises
    from inside its transaction (at the latest before COMMIT), and nothing of the transaction
    commits - neither the deferred statement's neighbours nor what came before it."""
    task_id = _task(host, "kept")

    def refused_transaction() -> None:
        with host.store.transaction() as uow:
            uow.run(_RETITLE, {"b_id": task_id, "b_title": "lost"})
            prepared.defer(
                uow.conn, _RETITLE, {"b_id": "no such task", "b_title": "x"}, _refuse_unless_one
            )

    with pytest.raises(Refused):
        refused_transaction()
    assert _title(host, task_id) == "kept"
    # the connection is usable afterwards, with nothing left queued from the rolled-back one
    with host.store.transaction() as uow:
        uow.run(_RETITLE, {"b_id": task_id, "b_title": "next"})
    assert _title(host, task_id) == "next"


def test_issue14_a_failed_block_drops_what_it_deferred_and_keeps_what_came_before(
    host: Host,
) -> None:
    """Issue 14: `Store.isolated` on PostgreSQL (a savepoint, sent with the block's first
    statement): a block that fails takes its own statements, deferred or not, with it; the
    transaction's earlier writes commit. (SQLite needs no savepoint: a failed statement there
    leaves the transaction usable, and the block keeps what it wrote.)"""
    if host.store.is_sqlite:
        pytest.skip("SQLite's isolated blocks take no savepoint")
    task_id = _task(host, "before")
    with host.store.transaction() as uow:
        prepared.defer(uow.conn, _RETITLE, {"b_id": task_id, "b_title": "kept"})

        def failing_block() -> None:
            with host.store.isolated():
                uow.run(_RETITLE, {"b_id": task_id, "b_title": "undone"})
                prepared.defer(uow.conn, _RETITLE, {"b_id": task_id, "b_title": "undone too"})
                raise Refused(0)

        with pytest.raises(Refused):
            failing_block()
    assert _title(host, task_id) == "kept"


def _syncs_of_a_read_a_deferred_write_and_commit(
    host: Host, task_id: str, trace: Path, title: str
) -> list[str]:
    """The frontend messages of one transaction (a prepared read, which must see the title
    committed before, a deferred retitle to `title`, the COMMIT), from libpq's protocol trace:
    the Syncs, and any BEGIN, in order."""
    before = _title(host, task_id)
    with open(trace, "w") as out, host.store.transaction(follow_board=False) as uow:
        pgconn = uow.conn.connection.dbapi_connection.pgconn  # type: ignore[union-attr]
        pgconn.trace(out.fileno())
        try:
            assert uow.run(_TITLE, {"task_id": task_id}).scalar_one() == before
            assert uow.conn.connection.dbapi_connection.info.transaction_status != 0  # type: ignore[union-attr]
            prepared.defer(uow.conn, _RETITLE, {"b_id": task_id, "b_title": title})
            prepared.flush_deferred(uow.conn, commit=True)
        finally:
            pgconn.untrace()
    sent = [line for line in trace.read_text().splitlines() if "\tF\t" in line]
    return [
        "BEGIN" if "BEGIN" in line else "Sync"
        for line in sent
        if "BEGIN" in line or line.split("\t")[3:4] == ["Sync"]
    ]


def test_issue14_a_transaction_begins_in_the_round_trip_of_its_first_statement(
    host: Host, tmp_path: Path
) -> None:
    """Issue 14: on PostgreSQL a transaction whose first statement is a prepared one sends its
    BEGIN in that statement's round trip (psycopg alone would send BEGIN and wait for it), and
    its deferred statements go with the COMMIT: two round trips (two Syncs on the wire, read
    from libpq's protocol trace) for a read, a deferred write and the COMMIT - and the
    transaction is a real one (the write commits, a failure rolls back what came before)."""
    if host.store.is_sqlite:
        pytest.skip("SQLite has no round trips")
    task_id = _task(host, "before")
    assert _syncs_of_a_read_a_deferred_write_and_commit(
        host, task_id, tmp_path / "libpq.trace", "after"
    ) == ["BEGIN", "Sync", "Sync"]
    assert _title(host, task_id) == "after"

    def failing() -> None:
        with host.store.transaction(follow_board=False) as uow:
            uow.run(_RETITLE, {"b_id": task_id, "b_title": "undone"})
            raise Refused(0)

    with pytest.raises(Refused):
        failing()
    assert _title(host, task_id) == "after"


def test_issue14_a_psycopg_release_not_checked_begins_its_own_transactions(
    host: Host, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sending BEGIN in the first statement's round trip relies on psycopg's pipeline
    internals, read in 3.1 to 3.3. With a release outside that range psycopg begins the
    transaction itself: one round trip more (BEGIN, then its Sync), and the same transaction
    (the deferred write commits, in order)."""
    if host.store.is_sqlite:
        pytest.skip("SQLite has no round trips")
    task_id = _task(host, "before")
    monkeypatch.setattr(prepared, "BEGIN_CHECKED_RELEASES", ((3, 1), (3, 1)))
    prepared._begin_fits.cache_clear()
    try:
        assert _syncs_of_a_read_a_deferred_write_and_commit(
            host, task_id, tmp_path / "libpq.trace", "after"
        ) == ["BEGIN", "Sync", "Sync", "Sync"]
    finally:
        prepared._begin_fits.cache_clear()
    assert _title(host, task_id) == "after"


@pytest.mark.parametrize(
    ("version", "fits"),
    [
        ("3.1.0", True),
        ("3.2.10", True),
        ("3.3.9", True),
        ("3.0.18", False),
        ("3.4.0", False),
        ("4.0.0.dev1", False),
        ("unknown", False),
        (None, False),
    ],
)
def test_issue14_begin_in_the_pipeline_only_for_the_psycopg_releases_it_was_read_in(
    version: str | None, fits: bool
) -> None:
    """`BEGIN_CHECKED_RELEASES`: 3.1 up to, not including, 3.4; anything else, or a module
    without a readable version, begins its transactions the way psycopg does."""
    driver = (
        types.SimpleNamespace() if version is None else types.SimpleNamespace(__version__=version)
    )
    assert prepared._begin_fits.__wrapped__(driver) is fits
