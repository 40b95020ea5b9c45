"""Helpers for the on_enter recovery and crash tests.

An Office board (the shipped Office Default workflow, three reviewer seats on its Review step,
tasks created at Work) and direct row access to the entry ledger through SQLAlchemy Core, on a
connection of its own that takes no ownership lock and mints no epoch. A test writes the rows a
crash leaves behind, then opens a host - a fresh `Host` is a restart: new epoch, recovery scan
at open - and asserts on the rows again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import attrs
import pytest
import sqlalchemy as sa

from core import ids, ledger
from core.store import dialect, rows
from core.store import tables as t
from tests.conftest import open_host

DEAD_EPOCH = "dead0000dead0000dead0000dead0000"
"""The epoch of a process that is gone (no host ever mints it: epochs are random hex)."""

CLEAR = "clear_decisions"
FAN_OUT = "queue_run_for_each_participant"

E = t.step_entries
M = t.step_entry_markers
D = t.workflow_step_decisions


@attrs.frozen
class Office:
    """Ids of an Office board built by `build_office`; no host is left open."""

    url: str
    workflow_id: str
    steps: dict[str, str]
    reviewers: tuple[str, ...]
    """Agent profile ids of the three reviewers."""
    seats: tuple[str, ...]
    """Their participant (seat) ids at Review, in the same order."""
    tasks: tuple[str, ...]

    @property
    def task(self) -> str:
        return self.tasks[0]

    @property
    def review(self) -> str:
        return self.steps["Review"]

    @property
    def work(self) -> str:
        return self.steps["Work"]

    @property
    def approval(self) -> str:
        return self.steps["Approval"]


def build_office(url: str, *, tasks: int = 1, reviewers: int = 3) -> Office:
    """Office Default with `reviewers` reviewer seats at Review and `tasks` tasks at Work."""
    with open_host(url) as host:
        wf = host.workflows.create_from_template("office-default")
        profiles, seats = [], []
        for i in range(reviewers):
            profile = host.profiles.add(f"reviewer-{i}", command=["true"])
            seat = host.participants.add(
                step="Review", role="reviewer", profile=profile.id, workflow=wf.id
            )
            profiles.append(profile.id)
            seats.append(seat.id)
        made = [host.tasks.create(workflow=wf.id, title=f"task {i}").id for i in range(tasks)]
        return Office(
            url=url,
            workflow_id=wf.id,
            steps={s.name: s.id for s in wf.steps},
            reviewers=tuple(profiles),
            seats=tuple(seats),
            tasks=tuple(made),
        )


@pytest.fixture
def office(db_url: str) -> Office:
    """An Office board on a fresh database (SQLite file, and PostgreSQL when available)."""
    return build_office(db_url)


# -- direct access to the rows ---------------------------------------------------------------------


@contextmanager
def raw(url: str) -> Iterator[sa.Connection]:
    """One committed transaction on a connection of its own (no lock, no epoch, no scan)."""
    engine = dialect.create_engine(dialect.normalise_url(url))
    try:
        with engine.begin() as conn:
            yield conn
    finally:
        engine.dispose()


def place(conn: sa.Connection, task_id: str, step_id: str) -> None:
    """Stand the task at a step by writing its fields only (no arrival, no entry record)."""
    conn.execute(
        sa.update(t.tasks)
        .where(t.tasks.c.id == task_id)
        .values(workflow_step_id=step_id, wip_admitted=True, queued_for_step_id=None)
    )


def on_enter(conn: sa.Connection, step_id: str) -> list[dict[str, Any]]:
    raw_events = conn.execute(
        sa.select(t.workflow_steps.c.events).where(t.workflow_steps.c.id == step_id)
    ).scalar_one()
    return list(json.loads(raw_events).get("on_enter", []))


def set_on_enter(conn: sa.Connection, step_id: str, actions: Sequence[dict[str, Any]]) -> None:
    """Rewrite a step's on_enter declaration in place, as a git sync would."""
    raw_events = conn.execute(
        sa.select(t.workflow_steps.c.events).where(t.workflow_steps.c.id == step_id)
    ).scalar_one()
    events = json.loads(raw_events)
    events["on_enter"] = [dict(a) for a in actions]
    conn.execute(
        sa.update(t.workflow_steps)
        .where(t.workflow_steps.c.id == step_id)
        .values(events=json.dumps(events))
    )


def digest_of(actions: Sequence[dict[str, Any]]) -> str:
    """The declaration digest the ledger records for an on_enter list."""
    decls = rows.decode_events({"on_enter": list(actions)})["on_enter"]
    return ledger.declaration_digest(decls)


def add_entry(
    conn: sa.Connection,
    task_id: str,
    step_id: str,
    entry_seq: int,
    digest: str,
    *,
    terminal: bool = False,
    path: str = "E2",
) -> str:
    entry_id = ids.new_id()
    conn.execute(
        sa.insert(E).values(
            id=entry_id,
            task_id=task_id,
            step_id=step_id,
            entry_seq=entry_seq,
            entry_path=path,
            declaration_digest=digest,
            terminal=terminal,
            created_at=ids.now(),
        )
    )
    return entry_id


def add_marker(
    conn: sa.Connection,
    entry_id: str,
    position: int,
    kind: str,
    state: str,
    *,
    epoch: str | None = DEAD_EPOCH,
    reason: str | None = None,
    cause: str | None = None,
) -> None:
    conn.execute(
        sa.insert(M).values(
            entry_id=entry_id,
            position=position,
            kind=kind,
            state=state,
            epoch=epoch,
            reason=reason,
            cause=cause,
            updated_at=ids.now(),
        )
    )


def add_decision(
    conn: sa.Connection, task_id: str, step_id: str, seat_id: str, verdict: str = "approved"
) -> str:
    decision_id = ids.new_id()
    conn.execute(
        sa.insert(D).values(
            id=decision_id,
            task_id=task_id,
            step_id=step_id,
            participant_id=seat_id,
            decision=verdict,
            comment="",
            decided_at=ids.now(),
            decider_type="agent",
            decider_id="",
            role="reviewer",
        )
    )
    return decision_id


def decision_ids(conn: sa.Connection, task_id: str, step_id: str) -> set[str]:
    """The step's standing decisions: a clear keeps its round's rows, stamped `cleared_at`
    (issue 22), and they stand no longer."""
    return set(
        conn.execute(
            sa.select(D.c.id).where(
                D.c.task_id == task_id, D.c.step_id == step_id, D.c.cleared_at.is_(None)
            )
        )
        .scalars()
        .all()
    )


def entries(conn: sa.Connection, task_id: str) -> list[dict[str, Any]]:
    """The task's entries in (step, seq) order, each with its markers as
    (position, kind, state, reason) tuples in position order."""
    found = [
        dict(r)
        for r in conn.execute(
            sa.select(E).where(E.c.task_id == task_id).order_by(E.c.step_id, E.c.entry_seq)
        ).mappings()
    ]
    for entry in found:
        entry["terminal"] = bool(entry["terminal"])
        entry["markers"] = [
            (m.position, m.kind, m.state, m.reason)
            for m in conn.execute(
                sa.select(M).where(M.c.entry_id == entry["id"]).order_by(M.c.position, M.c.kind)
            )
        ]
    return found


def marker_rows(conn: sa.Connection, entry_id: str) -> dict[tuple[int, str], Any]:
    return {
        (m.position, m.kind): m
        for m in conn.execute(sa.select(M).where(M.c.entry_id == entry_id)).mappings()
    }


def run_rows(conn: sa.Connection, task_id: str) -> list[Any]:
    return list(
        conn.execute(
            sa.select(t.runs).where(t.runs.c.task_id == task_id).order_by(t.runs.c.requested_at)
        ).mappings()
    )


def records(logs: list[dict[str, Any]], level: str, **fields: Any) -> list[dict[str, Any]]:
    """Log records at `level` whose extra fields include every one of `fields`."""
    return [
        r
        for r in logs
        if r["level"] == level and all(r["extra"].get(k) == v for k, v in fields.items())
    ]
