"""Two threads made to interleave at a chosen point, for the tests of what two processes
doing one thing at once decide: the first is held at the point (its transaction open, a row
or a lock possibly held) while the second runs, on its own, for `ALONE_S`; then both are let
go. A fix that makes the second wait for the first shows as the second finishing only after
the release; without it, the second finished on its own, inside the first's window.

    hold = Hold()
    monkeypatch.setattr(module, "step", hold.after(module.step))  # or hold.before(...)
    race(hold, first_thing, second_thing)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

HELD_S = 60.0
"""The longest the first thread is held, and each thread is waited for."""
ALONE_S = 2.0
"""How long the second thread runs while the first is held: well beyond what it needs on
its own, so that one not made to wait by the first has finished by then."""

R = TypeVar("R")
FIRST = "interleave-first"


class Hold:
    """The point the first thread (named `FIRST`) waits at; other threads pass it."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self._go = threading.Event()

    def here(self) -> None:
        if threading.current_thread().name == FIRST:
            self.reached.set()
            self._go.wait(HELD_S)

    def release(self) -> None:
        self._go.set()

    def before(self, step: Callable[..., R]) -> Callable[..., R]:
        """`step`, held before it runs."""

        def held(*args: Any, **kwargs: Any) -> R:
            self.here()
            return step(*args, **kwargs)

        return held

    def after(self, step: Callable[..., R]) -> Callable[..., R]:
        """`step`, held after it ran (its effect made, not yet committed)."""

        def held(*args: Any, **kwargs: Any) -> R:
            done = step(*args, **kwargs)
            self.here()
            return done

        return held


def race(hold: Hold, first: Callable[[], object], second: Callable[[], object]) -> None:
    """`first` in a thread held at `hold` while `second` runs on its own for `ALONE_S`, then
    both let go and waited for; an exception either raised is raised here."""
    failed: list[BaseException] = []

    def running(what: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            try:
                what()
            except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
                failed.append(exc)

        return run

    one = threading.Thread(target=running(first), name=FIRST)
    two = threading.Thread(target=running(second), name="interleave-second")
    one.start()
    try:
        assert hold.reached.wait(HELD_S), "the first thread never reached the held point"
        two.start()
        two.join(ALONE_S)
    finally:
        hold.release()
    one.join(HELD_S)
    if two.ident is not None:
        two.join(HELD_S)
    assert not one.is_alive(), "the first thread did not end"
    assert not two.is_alive(), "the second thread did not end"
    if failed:
        raise failed[0]
