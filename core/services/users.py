"""People of the board (issue 44; CLI.md `user ...`): a name, a role, and the sha256 of the
person's token.

A token is 32 random bytes (`secrets.token_urlsafe`), printed once by `add` and `token` and
never stored: the table keeps its sha256, and a request's token is found by the hash of what
it presents (an indexed lookup, then `hmac.compare_digest` on the hash), so no comparison runs
over names and nothing about one person's token tells anything about another's. Every request
asks the database, so `remove` and `token` take a token away at once from every `serve` of the
board, whichever process made the change (correctness first; the benchmark in
tests/benchmarks/bench_users.py measures what the lookup costs).

Every change is one statement whose row count decides (a duplicate name is the primary key's
refusal, a missing one an update or delete that touched nothing).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import TYPE_CHECKING, Any, Final

import attrs
import sqlalchemy as sa

from core import ids
from core.errors import Conflict, LanewayError, NotFound
from core.store import tables as t

if TYPE_CHECKING:
    from core.store.database import Store

U = t.users
ROLES: Final = ("viewer", "operator", "admin")
RANK: Final = {role: n for n, role in enumerate(ROLES)}
ADMIN_NAME: Final = "admin"
"""Who `serve --token` is: its requests act as `user:admin`, so no person may take the name."""
MAX_TOKEN: Final = 512
"""As long as `serve --token` may be; a longer bearer token is refused unread."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,59}")


@attrs.frozen
class User:
    name: str
    role: str
    created_at: str

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role, "created_at": self.created_at}


def check_role(role: str) -> str:
    if role not in ROLES:
        raise LanewayError(f"role {role!r}: expected one of {', '.join(ROLES)}")
    return role


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        shown = name if len(name) <= 80 else name[:80] + "..."
        raise LanewayError(
            f"user name {shown!r}: 1 to 60 letters, digits or . _ @ -, starting with a "
            "letter or digit"
        )
    if name == ADMIN_NAME:
        raise LanewayError(
            f"user name {name!r}: reserved for the board's admin token (`serve --token`)"
        )
    return name


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


def add(store: Store, name: str, role: str) -> tuple[User, str]:
    """The new person and their token (shown once)."""
    check_name(name)
    check_role(role)
    token = new_token()
    user = User(name=name, role=role, created_at=ids.now())
    try:
        with store.transaction() as uow:
            uow.conn.execute(
                sa.insert(U).values(
                    name=name, role=role, token_hash=hash_token(token), created_at=user.created_at
                )
            )
    except sa.exc.IntegrityError:
        raise Conflict(f"user {name!r} already exists") from None
    return user, token


def list_users(store: Store) -> list[User]:
    with store.read() as conn:
        found = conn.execute(sa.select(U.c.name, U.c.role, U.c.created_at).order_by(U.c.name))
        return [User(name=r.name, role=r.role, created_at=r.created_at) for r in found]


def get(store: Store, name: str) -> User:
    with store.read() as conn:
        row = conn.execute(
            sa.select(U.c.name, U.c.role, U.c.created_at).where(U.c.name == name)
        ).first()
    if row is None:
        raise NotFound(f"no user {name!r}")
    return User(name=row.name, role=row.role, created_at=row.created_at)


def _changed(store: Store, statement: Any, name: str) -> None:
    with store.transaction() as uow:
        count = uow.conn.execute(statement.execution_options(preserve_rowcount=True)).rowcount
    if count != 1:
        raise NotFound(f"no user {name!r}")


def set_role(store: Store, name: str, role: str) -> User:
    check_role(role)
    _changed(store, sa.update(U).where(U.c.name == name).values(role=role), name)
    return get(store, name)


def remove(store: Store, name: str) -> str:
    """Remove the person; their token stops working with this commit."""
    _changed(store, sa.delete(U).where(U.c.name == name), name)
    return name


def reissue(store: Store, name: str) -> str:
    """A new token for the person; the old one stops working with this commit."""
    token = new_token()
    _changed(store, sa.update(U).where(U.c.name == name).values(token_hash=hash_token(token)), name)
    return token


def token_problem(token: str) -> str | None:
    """What is wrong with a presented token's form (None: nothing), before any lookup."""
    if len(token) > MAX_TOKEN:
        return f"bearer token: longer than {MAX_TOKEN} characters"
    if not token.isprintable() or not token.isascii():
        return "bearer token: only printable ASCII characters"
    return None


def authenticate(store: Store, token: str) -> User | None:
    """The person whose token this is, or None (unknown, revoked, or removed)."""
    digest = hash_token(token)
    with store.read() as conn:
        row = conn.execute(
            sa.select(U.c.name, U.c.role, U.c.created_at, U.c.token_hash).where(
                U.c.token_hash == digest
            )
        ).first()
    if row is None or not hmac.compare_digest(str(row.token_hash), digest):
        return None
    return User(name=row.name, role=row.role, created_at=row.created_at)


def authenticate_name(store: Store, name: str) -> User | None:
    """The person a trusted proxy named (serve `--user-header`), or None."""
    if not _NAME.fullmatch(name):
        return None
    with store.read() as conn:
        row = conn.execute(
            sa.select(U.c.name, U.c.role, U.c.created_at).where(U.c.name == name)
        ).first()
    if row is None:
        return None
    return User(name=row.name, role=row.role, created_at=row.created_at)
