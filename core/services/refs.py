"""Naming a row as CLI.md allows: by its id, or by a unique suffix of at least 6 characters of
it (the board page shows the last 8)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from core.errors import LanewayError, NotFound

if TYPE_CHECKING:
    from core.model import Task, Workflow
    from core.services.peers import Peers
    from core.store.database import Store
    from core.store.repository import Repository

MAX_REF: Final = 64
"""The longest id (the columns' length): a longer reference is no id's suffix, and is not
searched for as one (SQLite refuses a LIKE pattern past 50,000 characters)."""
MAX_SEARCH: Final = 10_000
"""The longest search text (`task list --search`, the board's `?q=`): SQLite refuses a LIKE
pattern past 50,000 characters, with an error that reads like the database's fault."""
MIN_SUFFIX: Final = 6


def resolve_id(conn: Connection, id_column: sa.Column[Any], ref: str, what: str) -> str:
    """The id `ref` names in `id_column`'s table: an exact id, else the one id ending in it.

    NotFound when none does; a LanewayError when the suffix is shorter than MIN_SUFFIX or
    more than one id ends in it (naming a few of them)."""
    exact = conn.execute(sa.select(id_column).where(id_column == ref)).scalar()
    if exact is not None:
        return str(exact)
    if len(ref) < MIN_SUFFIX:
        raise NotFound(f"no {what} {ref!r} (a suffix names one with {MIN_SUFFIX}+ characters)")
    if len(ref) > MAX_REF:
        raise NotFound(f"no {what} {shown(ref)}")
    # LIKE with the suffix's wildcards escaped: an id is letters and digits, but a ref is input
    pattern = "%" + ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    found = [
        str(v)
        for v in conn.execute(
            sa.select(id_column).where(id_column.like(pattern, escape="\\")).limit(3)
        ).scalars()
    ]
    if not found:
        raise NotFound(f"no {what} {ref!r}")
    if len(found) > 1:
        raise LanewayError(f"{what} {ref!r} is ambiguous: {', '.join(found)}, ...")
    return found[0]


def resolve_task(conn: Connection, tasks: sa.Table, ref: str) -> str:
    """The task `ref` names (CLI.md): its id, else the one id ending in it (6+ characters),
    else the one task whose title is exactly `ref`.

    NotFound when none does; a LanewayError, saying how many match, when several ids end in it
    or several tasks have that title."""
    id_column = tasks.c.id
    exact = conn.execute(sa.select(id_column).where(id_column == ref)).scalar()
    if exact is not None:
        return str(exact)
    if MIN_SUFFIX <= len(ref) <= MAX_REF:
        pattern = "%" + ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        by_suffix = _ids(conn, sa.select(id_column).where(id_column.like(pattern, escape="\\")))
        if len(by_suffix) == 1:
            return by_suffix[0]
        if by_suffix:
            raise LanewayError(
                f"task {ref!r} is ambiguous: {len(by_suffix)} task ids end in it "
                "(give more of the id)"
            )
    by_title = _ids(conn, sa.select(id_column).where(tasks.c.title == ref))
    if len(by_title) == 1:
        return by_title[0]
    if by_title:
        raise LanewayError(
            f"task {ref!r} is ambiguous: {len(by_title)} tasks have that title (name one by id)"
        )
    if len(ref) < MIN_SUFFIX:
        raise NotFound(
            f"no task {ref!r} (an id suffix names one with {MIN_SUFFIX}+ characters, "
            "or give the exact title)"
        )
    raise NotFound(f"no task {shown(ref)}")


def _ids(conn: Connection, query: sa.Select[Any]) -> list[str]:
    # Counting needs no more than a handful: the message says how many, never lists them all.
    return [str(v) for v in conn.execute(query.limit(1000)).scalars()]


def find_task(store: Store, repository: Repository, ref: str) -> Task:
    """The task `ref` names (`resolve_task`), read: `TaskService.get`, and what a service
    that names no task service (the runs) reads a task by."""
    from core.store.tables import tasks

    try:
        # an id, as nearly every caller gives: one read, as before names were accepted
        return repository.task(ref)
    except NotFound:
        pass
    with store.read() as conn:
        task_id = resolve_task(conn, tasks, ref)
    return repository.task(task_id)


def find_workflow(peers: Peers, ref: str) -> Workflow:
    """A workflow by id, or by name (case-insensitive), as the board has it now:
    `WorkflowService.get`, and what the workspace names its office workflow by (it names no
    workflow service: the workflows read the workspace).

    The repository serves the cache as of this thread's last transaction or read; this checks
    the board's version first."""
    from core.store.tables import workflows

    if not peers.store.in_transaction:
        peers.follow_board()
    try:
        return peers.repository.workflow(ref)
    except NotFound:
        pass
    with peers.store.read() as conn:
        found = list(
            conn.execute(
                sa.select(workflows.c.id).order_by(workflows.c.created_at, workflows.c.id)
            ).scalars()
        )
    wanted = ref.casefold()
    matches = [w for w in map(peers.repository.workflow, found) if w.name.casefold() == wanted]
    if not matches:
        raise NotFound(f"no workflow {ref!r}")
    if len(matches) > 1:
        raise LanewayError(f"workflow name {ref!r} is ambiguous; use its id")
    return matches[0]


def shown(ref: str) -> str:
    """`ref` as an error names it: quoted, and cut when long (a pasted file is no reference)."""
    return repr(ref) if len(ref) <= 80 else f"{ref[:60]!r}... ({len(ref)} characters)"


def check_search(text: str) -> str:
    """`text` as search text, or a one-line LanewayError when it is longer than MAX_SEARCH."""
    if len(text) > MAX_SEARCH:
        raise LanewayError(f"search text: at most {MAX_SEARCH} characters, got {len(text)}")
    return text
