"""Who is acting: `user:<name>`, `agent:<profile>` or `system` (CLI.md: every event and every
row a person writes names its actor).

The actor is a context variable, set where a request enters the process (the CLI's group,
an HTTP request, an agent's tool call) and read where rows and events are written. A
parameter threaded through every service and the engine would have to reach some thirty
event write sites that today know nothing of people; a context variable reaches them all and
stays narrow (one string). Threads and background tasks the process starts on its own begin
with an empty context, so what the engine does by itself reads `system`, never the person
whose request happened to start the process; a request's worker thread gets a copy of the
request's context (Starlette's threadpool copies it), so it reads the request's actor.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator
from typing import Final

SYSTEM: Final = "system"
USER_ENV: Final = "LANEWAY_USER"

_current: contextvars.ContextVar[str] = contextvars.ContextVar("laneway_actor", default=SYSTEM)


def current() -> str:
    """The actor of what this context writes now."""
    return _current.get()


MAX_NAME: Final = 100
"""An actor is stored in 200 characters; a profile's or a login's name is cut to this."""


def _clean(name: str) -> str:
    return "".join(ch for ch in " ".join(name.split()) if ch.isprintable())[:MAX_NAME]


def user(name: str) -> str:
    return f"user:{_clean(name)}"


def agent(profile: str) -> str:
    return f"agent:{_clean(profile)}"


@contextlib.contextmanager
def acting(actor: str) -> Iterator[None]:
    """Write as `actor` inside the block."""
    token = _current.set(actor)
    try:
        yield
    finally:
        _current.reset(token)


def cli_user() -> str:
    """The CLI's person: `$LANEWAY_USER`, else the login name, else `someone`."""
    name = os.environ.get(USER_ENV, "").strip()
    if not name:
        try:
            name = _login_name()
        except (KeyError, OSError):  # no passwd entry in a container
            name = ""
    return user(_clean(name) or "someone")


def _login_name() -> str:
    """`getpass.getuser()`, as it finds the name (the environment's LOGNAME, USER, LNAME or
    USERNAME, else the password database), without importing `getpass`: it loads `termios`
    for its prompt, which every command paid for at start-up (issue 45 item 6)."""
    for variable in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        found = os.environ.get(variable)
        if found:
            return found
    import pwd

    return pwd.getpwuid(os.getuid())[0]
