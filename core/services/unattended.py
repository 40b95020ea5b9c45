"""Runs that wait for a host no worker is alive on (issue 43 item 1): said once.

A queued run of a task whose worktree lives on host H (and whose branch does not travel
through a remote) is claimed only by a worker on H (core.runs). When such a run has waited
longer than `LANEWAY_UNATTENDED_S` (default 600 seconds) and no `worker` process on H holds a
live epoch (`host_epochs.worker`, liveness by lock as everywhere: core.store.liveness), the
scheduler pass (every `worker` and writable `serve`, and `laneway recover`) says so: one
WARNING and one `host.unattended` event, once per host and oldest waiting run, whichever
process notices first (the operation id `unattended:<host>:<run>` decides).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final, Protocol

import sqlalchemy as sa

from core import ids, runs
from core.logs import logger
from core.store import events
from core.store import tables as t

if TYPE_CHECKING:
    from core.operations import Operations
    from core.store.database import Store

DEFAULT_BOUND_S = 600.0
SCAN_LIMIT = 500
"""Waiting runs looked at per pass (the oldest first): enough to find every host waited for."""


class Peers(Protocol):
    @property
    def store(self) -> Store: ...

    @property
    def operations(self) -> Operations: ...


MAX_BOUND_S: Final = 365 * 24 * 3600.0
"""The longest `LANEWAY_UNATTENDED_S` taken (a year): past it, the bound's moment is no date."""


def bound_s() -> float:
    """`LANEWAY_UNATTENDED_S`, when it is a number of seconds from 0 to a year; else the
    default (an infinite, negative or not-a-number value would overflow the moment it names)."""
    raw = os.environ.get("LANEWAY_UNATTENDED_S")
    try:
        found = float(raw) if raw else DEFAULT_BOUND_S
    except ValueError:
        return DEFAULT_BOUND_S
    return found if 0 <= found <= MAX_BOUND_S else DEFAULT_BOUND_S


def notice(peers: Peers, bound: float | None = None) -> list[str]:
    """Say, once, which hosts queued runs have waited for longer than `bound` seconds with no
    live worker there; the hosts said now."""
    cutoff = ids.shift(ids.now(), -(bound_s() if bound is None else bound))
    R, T, W = t.runs, t.tasks, t.workflows
    with peers.store.read() as conn:
        found = conn.execute(
            sa.select(R.c.id, T.c.workspace, W.c.remote)
            .select_from(R.join(T, T.c.id == R.c.task_id).outerjoin(W, W.c.id == T.c.workflow_id))
            .where(R.c.status == "queued", R.c.requested_at <= cutoff, T.c.workspace.is_not(None))
            .order_by(R.c.requested_at, R.c.id)
            .limit(SCAN_LIMIT)
        ).all()
    oldest: dict[str, str] = {}
    count: dict[str, int] = {}
    for run_id, workspace, remote in found:
        host = runs.pinned_host(workspace, remote)
        if host is not None:
            oldest.setdefault(host, run_id)
            count[host] = count.get(host, 0) + 1
    said = []
    for host, run_id in oldest.items():
        if _worker_alive(peers, host):
            continue
        operation = f"unattended:{host}:{run_id}"
        if not peers.operations.claim(operation):
            continue
        with peers.store.transaction() as uow:
            events.record(uow, "host.unattended", None, host=host, runs=count[host], run_id=run_id)
        peers.operations.mark_applied(operation)
        logger.bind(host=host, runs=count[host], run_id=run_id).warning(
            f"runs wait for a worker on {host}, and no worker there is alive: start one there"
            " (or give the workflow a remote, so any host's worker may take them)"
        )
        said.append(host)
    return said


def _worker_alive(peers: Peers, host: str) -> bool:
    E = t.host_epochs
    with peers.store.read() as conn:
        epochs = conn.execute(
            sa.select(E.c.epoch).where(
                E.c.hostname == host, E.c.closed_at.is_(None), E.c.worker.is_(True)
            )
        ).scalars()
        listed = list(epochs)
    return any(not peers.store.liveness.is_dead(epoch) for epoch in listed)
