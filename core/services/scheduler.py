"""The scheduler every `worker` and `serve` runs: a thread making a trigger pass
(`TriggerService.run_pass`: the outbox's triggers, then the heartbeats due, then the hosts runs
wait for with no worker alive, `core.services.unattended`; then the schedules' tasks due,
`ScheduleService.fire_due`) every
`interval` seconds until stopped, and beside it the webhook `Deliverer` (core.services.hooks).

No leader is elected: passes in any number of processes overlap freely, and the operation
ids decide which of them evaluates each trigger (`core.services.triggers`). A pass that
fails is logged and the next one runs as usual: a trigger left undelivered stays in the
outbox, a heartbeat stays due until its slot ends. A database that is away (a server restart,
a network cut, SQLite locked past its busy timeout) is one WARNING when it goes and one INFO
when it is back, however many passes fail meanwhile.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol, Self

from core.logs import logger
from core.services.hooks import Deliverer
from core.store.database import database_away

if TYPE_CHECKING:
    from core.services.schedules import ScheduleService
    from core.services.triggers import TriggerService
    from core.store.database import Store


class Peers(Protocol):
    """What a pass calls: the trigger service and the schedules; and the store the webhook
    deliverer reads."""

    @property
    def triggers(self) -> TriggerService: ...

    @property
    def schedules(self) -> ScheduleService: ...

    @property
    def store(self) -> Store: ...


INTERVAL_S = 1.0
"""Seconds between passes: a heartbeat's slot is at least one second long."""


class Scheduler:
    """`with Scheduler(host):` runs passes in a daemon thread for the block's duration."""

    def __init__(self, host: Peers, interval: float = INTERVAL_S) -> None:
        self.host = host
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="laneway-scheduler", daemon=True)
        # webhooks go out from a thread (and pool) of their own: an endpoint never slows passes
        self._hooks = Deliverer(host.store)

    def __enter__(self) -> Self:
        self._thread.start()
        self._hooks.__enter__()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._hooks.__exit__()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        away = False
        while True:
            away = run_pass(self.host, away=away)
            if self._stop.wait(self.interval):
                return


def run_pass(host: Peers, *, away: bool = False) -> bool:
    """One pass; what it raises is logged, never propagated (the next pass tries again).

    `away` says the last pass found the database away; the result says this one did."""
    try:
        report = host.triggers.run_pass()
        scheduled = host.schedules.fire_due()
    except Exception as exc:  # noqa: BLE001 - the scheduler outlives one bad pass
        cause = f"{type(exc).__name__}: {exc}".splitlines()[0]
        if not database_away(exc):
            logger.bind(cause=cause).error("scheduler pass failed")
            return away
        if not away:
            logger.bind(cause=cause).warning(
                "database unavailable; trigger passes wait for it and run again when it is back"
            )
        return True
    if away:
        logger.info("database available again; trigger passes run again")
    if report.delivered or report.heartbeats or report.failed or scheduled:
        logger.bind(**report.as_dict(), scheduled=scheduled).debug("scheduler pass")
    return False
