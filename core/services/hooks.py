"""Outbound webhooks (issue 42 item 1; CLI.md "webhook delivery").

Deliveries are derived from the event log by a per-hook cursor rather than written by every
event's transaction: the event log already commits ids in order (core/store/events.py), so a
hook's cursor that takes "every event above N" can never skip one, and the hot path of every
change stays the single insert it was. Taking events is one transaction per hook: a
conditional UPDATE of the cursor (its row count decides which process takes them) and the
delivery rows, each holding the event's JSON as it was, so pruning the log loses nothing
taken.

Sending: every `worker` and writable `serve` runs a `Deliverer` thread beside its scheduler.
A delivery is claimed by a conditional UPDATE (pending, due, no live lease) whose row count
decides; the lease outlives the 10 s send, so a process killed mid-send leaves the row to be
claimed again when the lease runs out (at least once). Only the oldest pending delivery of a
hook is ever claimed, so a hook's deliveries go out in event order and a failing endpoint holds
back only its own queue. Sends run on a small thread pool with bounded timeouts and a bounded
read, never following redirects, so an endpoint never slows runs or answers.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import http.client
import json
import os
import random
import re
import socket
import threading
import urllib.parse
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final, Self

import attrs
import sqlalchemy as sa

from core import ids
from core.errors import LanewayError, NotFound
from core.logs import logger
from core.store import events
from core.store import tables as t

if TYPE_CHECKING:
    from core.store.database import Store

H = t.hooks
D = t.hook_deliveries
STATES: Final = ("pending", "delivered", "failed")
TIMEOUT_S: Final = 10.0
SEND_S: Final = 30.0
"""The longest a send may take, whole: an endpoint that answers a byte at a time keeps each
read within TIMEOUT_S, and is cut off here (`post`)."""
LEASE_S: Final = 60.0
"""Longer than a send can take (`SEND_S`): a claim never runs out while its send is on, so no
other process sends the same delivery meanwhile."""
LEASE_ENV: Final = "LANEWAY_HOOK_LEASE"
"""Seconds; shortened only by tests of a sender killed mid-send."""
READ_LIMIT: Final = 64 * 1024
MAX_IN_FLIGHT: Final = 4
TAKE_BATCH: Final = 500
WINDOW_ENV: Final = "LANEWAY_HOOK_RETRY_WINDOW"
BASE_ENV: Final = "LANEWAY_HOOK_RETRY_BASE"
DEFAULT_WINDOW_S: Final = 86400.0
_TYPE: Final = re.compile(r"[a-z][a-z_]*(\.[a-z][a-z_]*)+")


@attrs.frozen
class Hook:
    id: str
    url: str
    events: tuple[str, ...]
    created_at: str

    def as_json(self) -> dict[str, Any]:
        """CLI.md's hook: never the secret."""
        return {
            "id": self.id,
            "url": self.url,
            "events": list(self.events),
            "created_at": self.created_at,
        }


@attrs.frozen
class Delivery:
    id: str
    hook_id: str
    event_id: int
    type: str
    state: str
    attempts: int
    last_status: int | None
    last_error: str | None
    next_at: str | None
    delivered_at: str | None

    def as_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _hook(row: Any) -> Hook:
    return Hook(row.id, row.url, tuple(json.loads(row.events)), row.created_at)


def _delivery(row: Any) -> Delivery:
    return Delivery(
        id=row.id,
        hook_id=row.hook_id,
        event_id=int(row.event_id),
        type=row.type,
        state=row.state,
        attempts=int(row.attempts),
        last_status=row.last_status,
        last_error=row.last_error,
        next_at=row.next_at if row.state == "pending" else None,
        delivered_at=row.delivered_at,
    )


# -- managing hooks ---------------------------------------------------------------------------


def check_url(url: str) -> str:
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # raises for a port out of range or not a number
    except ValueError as exc:
        raise LanewayError(f"hook URL {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LanewayError(f"hook URL {url!r} is not an http:// or https:// URL")
    if port == 0:
        raise LanewayError(f"hook URL {url!r}: port 0 is no port")
    return url


def url_origin(url: str) -> str:
    """Where `url` sends (`scheme://host[:port]`), its path, query and any user:password
    replaced by `/***`: what may be shown to someone who may not hold the URL itself."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address, as a URL writes it
    try:
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{host}{port}/***"


def parse_events(spec: str | None) -> tuple[str, ...]:
    if not spec:
        return ()
    wanted = tuple(dict.fromkeys(s.strip() for s in spec.split(",") if s.strip()))
    # the stream's types are `noun.verb` words; not only events.TYPES (other wings add their own)
    odd = [w for w in wanted if not _TYPE.fullmatch(w)]
    if odd:
        raise LanewayError(
            f"--events: {odd[0]!r} is not an event type (such as {', '.join(events.TYPES[:3])})"
        )
    return wanted


MAX_SECRET: Final = 512
"""A webhook secret is a shared random string (`openssl rand -hex 32` is 64 characters)."""


def check_secret(secret: str | None) -> str | None:
    """Refuse what is not a shared secret: a private key (someone's `$(cat ~/.ssh/id_rsa)`
    would be stored and sent nowhere, but it has no business in a board's database), a file's
    worth of text, control characters a header-minded receiver could not type back."""
    if secret is None:
        return None
    if "PRIVATE KEY" in secret or secret.lstrip().startswith("-----BEGIN"):
        raise LanewayError(
            "hook secret: that is a key file, not a shared secret; use a random string "
            "both sides know (for example `openssl rand -hex 32`)"
        )
    if len(secret) > MAX_SECRET:
        raise LanewayError(
            f"hook secret: {len(secret):,} characters; a shared secret is at most {MAX_SECRET}"
        )
    if not secret.isprintable():
        raise LanewayError("hook secret: holds control characters or line breaks")
    return secret


def add(store: Store, url: str, event_types: Sequence[str], secret: str | None) -> Hook:
    """A hook taking the events committed from now on."""
    check_url(url)
    check_secret(secret)
    hook = Hook(ids.new_id(), url, tuple(event_types), ids.now())
    with store.transaction() as uow:
        uow.conn.execute(
            sa.insert(H).values(
                id=hook.id,
                url=url,
                events=json.dumps(list(hook.events)),
                secret=secret,
                cursor=events.latest_id(uow.conn),
                created_at=hook.created_at,
            )
        )
    return hook


def list_hooks(store: Store) -> list[Hook]:
    with store.read() as conn:
        return [_hook(r) for r in conn.execute(sa.select(H).order_by(H.c.created_at, H.c.id))]


def remove(store: Store, hook_id: str) -> Hook:
    with store.transaction() as uow:
        # Locked first: a `take` of this hook's events (which moves its cursor, locking the
        # row) then either commits its deliveries before this reads them, or finds the hook
        # gone. Unlocked, on PostgreSQL, deliveries committed between the two deletes outlived
        # their hook.
        row = uow.conn.execute(sa.select(H).where(H.c.id == hook_id).with_for_update()).first()
        if row is None:
            raise NotFound(f"no hook {hook_id!r}")
        uow.conn.execute(sa.delete(D).where(D.c.hook_id == hook_id))
        uow.conn.execute(sa.delete(H).where(H.c.id == hook_id))
    return _hook(row)


def deliveries(
    store: Store, *, hook_id: str | None = None, state: str | None = None
) -> list[Delivery]:
    query = sa.select(D).order_by(D.c.event_id, D.c.hook_id)
    if hook_id is not None:
        query = query.where(D.c.hook_id == hook_id)
    if state is not None:
        query = query.where(D.c.state == state)
    with store.read() as conn:
        return [_delivery(r) for r in conn.execute(query)]


# -- taking events ----------------------------------------------------------------------------


def take(store: Store) -> int:
    """Turn the events each hook has not yet taken into its delivery rows; returns how many."""
    with store.read() as conn:
        hooks = conn.execute(sa.select(H.c.id, H.c.events, H.c.cursor)).all()
        latest = events.latest_id(conn)
    made = 0
    for hook_id, types_text, cursor in hooks:
        if int(cursor) >= latest:
            continue
        types = set(json.loads(types_text))
        with store.transaction(follow_board=False) as uow:
            page = events.after(uow.conn, int(cursor), limit=TAKE_BATCH)
            if not page:
                continue
            moved = uow.conn.execute(
                sa.update(H)
                .where(H.c.id == hook_id, H.c.cursor == cursor)
                .values(cursor=page[-1].id)
            ).rowcount
            if moved != 1:
                continue  # another process took this page
            now = ids.now()
            rows = [
                {
                    "id": ids.new_id(),
                    "hook_id": hook_id,
                    "event_id": e.id,
                    "type": e.type,
                    "body": json.dumps(e.as_json(), separators=(",", ":"), default=str),
                    "state": "pending",
                    "attempts": 0,
                    "next_at": now,
                    "created_at": now,
                }
                for e in page
                if not types or e.type in types
            ]
            if rows:
                uow.conn.execute(sa.insert(D), rows)
            made += len(rows)
    return made


# -- sending ----------------------------------------------------------------------------------


MAX_SETTING_S: Final = 30 * 24 * 3600.0
"""The longest any of the `LANEWAY_HOOK_*` seconds is taken to be (30 days): an infinite or
larger one would overflow the moment it names, and quietly stop every delivery."""


def _seconds(name: str, default: float) -> float:
    """The environment's `name` as seconds from 0 to MAX_SETTING_S; else `default`."""
    try:
        found = float(os.environ.get(name, default))
    except ValueError:
        return default
    return found if 0 <= found <= MAX_SETTING_S else default


def _lease_s() -> float:
    return _seconds(LEASE_ENV, LEASE_S)


def _window_s() -> float:
    return _seconds(WINDOW_ENV, DEFAULT_WINDOW_S)


def backoff_s(attempts: int, window: float) -> float:
    """Exponential from LANEWAY_HOOK_RETRY_BASE (default 1 s), capped at an hour (or an eighth
    of a shortened window), with jitter so many processes' retries do not line up."""
    base = _seconds(BASE_ENV, 1.0)
    cap = max(base, min(3600.0, window / 8))
    delay: float = min(cap, base * 2.0 ** max(0, attempts - 1))
    return delay * random.uniform(0.5, 1.0)  # jitter, not a secret


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@attrs.frozen
class _Claimed:
    id: str
    hook_id: str
    event_id: int
    type: str
    body: str
    created_at: str
    attempts: int
    url: str
    secret: str | None


def claim_next(store: Store, me: str, busy: set[str], *, only: str | None = None) -> list[_Claimed]:
    """Claim the oldest pending delivery of each hook not in `busy` (or of hook `only`),
    when it is due."""
    query = (
        sa.select(D.c.hook_id, sa.func.min(D.c.event_id))
        .where(D.c.state == "pending")
        .group_by(D.c.hook_id)
    )
    if only is not None:
        query = query.where(D.c.hook_id == only)
    with store.read() as conn:
        heads = conn.execute(query).all()
    claimed: list[_Claimed] = []
    for hook_id, event_id in heads:
        if only is None and (hook_id in busy or len(busy) + len(claimed) >= MAX_IN_FLIGHT):
            continue
        with store.transaction(follow_board=False) as uow:
            found = _claim(uow.conn, me, str(hook_id), int(event_id), ids.now())
        if found is not None:
            claimed.append(found)
    return claimed


def _claim(conn: sa.Connection, me: str, hook_id: str, event_id: int, now: str) -> _Claimed | None:
    """Claim the hook's delivery of `event_id` when it is pending, due and not leased: one
    conditional UPDATE, whose row count decides among processes."""
    won = conn.execute(
        sa.update(D)
        .where(
            D.c.hook_id == hook_id,
            D.c.event_id == event_id,
            D.c.state == "pending",
            D.c.next_at <= now,
            sa.or_(D.c.lease_until.is_(None), D.c.lease_until < now),
        )
        .values(claimed_by=me, lease_until=ids.shift(now, _lease_s()), attempts=D.c.attempts + 1)
    ).rowcount
    if won != 1:
        return None
    row = conn.execute(
        sa.select(D, H.c.url, H.c.secret)
        .join(H, H.c.id == D.c.hook_id)
        .where(D.c.hook_id == hook_id, D.c.event_id == event_id)
    ).first()
    if row is None:
        # the hook is gone (removed by a version that left its deliveries behind): they go
        # too, and the pass goes on to the other hooks
        conn.execute(sa.delete(D).where(D.c.hook_id == hook_id))
        return None
    return _Claimed(
        row.id,
        hook_id,
        event_id,
        row.type,
        row.body,
        row.created_at,
        int(row.attempts),
        row.url,
        row.secret,
    )


def _claim_following(conn: sa.Connection, me: str, hook_id: str, now: str) -> _Claimed | None:
    """In the transaction that recorded a delivery, claim the hook's next one (its queue
    drains at the endpoint's pace, one transaction a delivery rather than two)."""
    head = conn.execute(
        sa.select(sa.func.min(D.c.event_id)).where(D.c.hook_id == hook_id, D.c.state == "pending")
    ).scalar()
    return None if head is None else _claim(conn, me, hook_id, int(head), now)


def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    """POST once: the name's lookup, connecting and each read bounded by TIMEOUT_S, the whole
    send after the lookup by SEND_S (the connection is shut then, whatever it was doing), at
    most READ_LIMIT bytes read, no redirect followed (http.client follows none). Returns the
    status."""
    parts = urllib.parse.urlsplit(url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname or "", parts.port, timeout=TIMEOUT_S)
    # The name is looked up first, bounded: a lookup runs before the connection has a socket,
    # so the whole-send cut below cannot end it, and a resolver that does not answer held the
    # sender for as long as the system resolver retried. The connection then goes to the
    # addresses found, under its own name (Host header, TLS server name and certificate).
    found = _addresses(conn.host, conn.port, TIMEOUT_S)
    conn._create_connection = functools.partial(_connect_to, found)  # type: ignore[attr-defined]
    shut = threading.Event()
    cut = threading.Timer(SEND_S, _shut, (conn, shut))
    cut.daemon = True
    cut.start()
    try:
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        response.read(READ_LIMIT)
    finally:
        cut.cancel()
        conn.close()
    if shut.is_set():
        # what was read ends where the connection was cut: no answer to trust
        raise TimeoutError(f"the receiver took more than {SEND_S:g} s to answer")
    return int(response.status)


Address = tuple[int, Any]
"""A looked-up address: its family and its socket address."""


def _addresses(host: str, port: int, within: float) -> list[Address]:
    """`host`'s addresses for a TCP connection to `port`, looked up on a thread of its own
    and waited for at most `within` seconds (a lookup cannot be interrupted: a late one ends
    by itself on its daemon thread, its answer unused)."""
    answer: list[list[Address] | OSError] = []
    done = threading.Event()

    def look_up() -> None:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            answer.append([(family, address) for family, _t, _p, _c, address in infos])
        except OSError as exc:
            answer.append(exc)
        finally:
            done.set()

    threading.Thread(target=look_up, name="hook-lookup", daemon=True).start()
    if not done.wait(within):
        raise TimeoutError(f"looking up {host} took more than {within:g} s")
    found = answer[0]
    if isinstance(found, OSError):
        raise found
    return found


def _connect_to(
    found: Sequence[Address],
    _address: object,
    timeout: float,
    source: tuple[str, int] | None = None,
) -> socket.socket:
    """`socket.create_connection` over addresses already looked up (numeric: nothing is
    looked up again): each in turn, the first that connects; the last failure when none
    does."""
    failure: OSError = OSError("the name has no address")
    for _family, address in found:
        try:
            return socket.create_connection(address[:2], timeout, source)
        except OSError as exc:
            failure = exc
    raise failure


def _shut(conn: http.client.HTTPConnection, shut: threading.Event) -> None:
    """End `conn` where it stands: a read it blocks in returns at once."""
    shut.set()
    sock = conn.sock
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def send(
    store: Store, me: str, c: _Claimed, *, follow: bool = False
) -> tuple[str, _Claimed | None]:
    """Send one claimed delivery and record the outcome; returns its new state and, with
    `follow` and the delivery delivered, the hook's next delivery, claimed in the same
    transaction (None when there is none due, or another process holds it)."""
    body = c.body.encode()
    headers = {
        "Content-Type": "application/json",
        "X-Laneway-Event": c.type,
        "X-Laneway-Delivery": str(c.event_id),
        "User-Agent": "laneway-webhook",
    }
    if c.secret:
        headers["X-Laneway-Signature"] = sign(c.secret, body)
    status: int | None = None
    error: str | None = None
    try:
        status = post(c.url, body, headers)
        if not 200 <= status < 300:
            error = f"HTTP {status}"
    except Exception as exc:  # noqa: BLE001 - any failure to be answered is a retry
        error = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
    now = ids.now()
    mine = sa.and_(D.c.id == c.id, D.c.claimed_by == me, D.c.state == "pending")

    def release(**outcome: Any) -> sa.Update:
        # every outcome gives the claim back and keeps what the receiver answered
        return (
            sa.update(D)
            .where(mine)
            .values(last_status=status, claimed_by=None, lease_until=None, **outcome)
        )

    with store.transaction() as uow:
        if error is None:
            uow.conn.execute(release(state="delivered", delivered_at=now, last_error=None))
            following = _claim_following(uow.conn, me, c.hook_id, now) if follow else None
            return "delivered", following
        window = _window_s()
        if ids.parse(now) >= ids.parse(ids.shift(c.created_at, window)):
            gave_up = uow.conn.execute(release(state="failed", last_error=error)).rowcount
            if gave_up == 1:
                events.record(uow, "hook.failed", None, hook_id=c.hook_id, delivery_id=c.id)
                logger.bind(hook=c.hook_id, delivery=c.id, error=error).warning(
                    "webhook delivery failed for good"
                )
            return "failed", None
        uow.conn.execute(
            release(last_error=error, next_at=ids.shift(now, backoff_s(c.attempts, window)))
        )
    return "pending", None


class Deliverer:
    """`with Deliverer(store):` takes and sends deliveries in a daemon thread of its own."""

    def __init__(self, store: Store, interval: float = 0.25) -> None:
        self.store = store
        self.interval = interval
        self.me = f"{os.getpid()}:{ids.new_id()}"
        self._stop = threading.Event()
        self._busy: set[str] = set()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(MAX_IN_FLIGHT, thread_name_prefix="laneway-hook")
        self._thread = threading.Thread(target=self._loop, name="laneway-hooks", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        # a send in flight finishes within its timeouts; one cut short is sent again later
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._pass()
            except Exception as exc:  # noqa: BLE001 - the next pass tries again
                logger.bind(cause=f"{type(exc).__name__}: {exc}".splitlines()[0]).debug(
                    "webhook pass failed"
                )
            self._stop.wait(self.interval)

    def _pass(self) -> None:
        with self.store.read() as conn:
            if conn.execute(sa.select(H.c.id).limit(1)).first() is None:
                return
        take(self.store)
        with self._lock:
            busy = set(self._busy)
        for c in claim_next(self.store, self.me, busy):
            with self._lock:
                self._busy.add(c.hook_id)
            self._pool.submit(self._send, c)

    def _send(self, c: _Claimed) -> None:
        """Send `c`, then the hook's next deliveries while they are due (a hook's queue drains
        at the endpoint's pace, not one per pass); the hook stays busy in this process."""
        current: _Claimed | None = c
        try:
            while current is not None:
                stopping = self._stop.is_set()
                state, following = send(self.store, self.me, current, follow=not stopping)
                if state == "pending" or stopping:
                    return  # waiting out its backoff (or stopping): a later pass claims it
                if state == "failed":
                    nxt = claim_next(self.store, self.me, set(), only=current.hook_id)
                    following = nxt[0] if nxt else None
                current = following
        except Exception as exc:  # noqa: BLE001 - the lease runs out; it is sent again
            logger.bind(delivery=c.id, cause=f"{type(exc).__name__}: {exc}").warning(
                "webhook delivery failed to be recorded"
            )
        finally:
            with self._lock:
                self._busy.discard(c.hook_id)
