"""Who may make which request (issue 44; HTTP.md "People"): one table from every API route
(method and path, as the app declares it) to the least role it needs, and the lookup the
guard (`core.serve.app.Guard`) makes for each request.

A viewer reads (every GET, the event stream); an operator also works the board (moves,
creates, starts, cancels, retries, comments, verdicts, answers to permission requests and
questions); an admin also changes the board itself (workflows, hooks, budgets, schedules,
merges and pushes, deleting tasks). A route missing from the table needs `admin` (closed by
default), and tests/serve/test_serve_roles.py fails until it is added.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from starlette.routing import BaseRoute, Match, Route
from starlette.types import Scope

from core.services.users import RANK

VIEWER: Final = "viewer"
OPERATOR: Final = "operator"
ADMIN: Final = "admin"

RULES: Final[dict[tuple[str, str], str]] = {
    # reading: everything a GET answers, and the stream
    ("GET", "/api/info"): VIEWER,
    ("GET", "/api/me"): VIEWER,
    ("GET", "/api/events"): VIEWER,
    ("GET", "/api/workflows"): VIEWER,
    ("GET", "/api/workflows/templates"): VIEWER,
    ("GET", "/api/workflows/{w}"): VIEWER,
    ("GET", "/api/workflows/{w}/export"): VIEWER,
    ("GET", "/api/tasks"): VIEWER,
    ("GET", "/api/tasks/{t}"): VIEWER,
    ("GET", "/api/tasks/{t}/comments"): VIEWER,
    ("GET", "/api/tasks/{t}/entries"): VIEWER,
    ("GET", "/api/tasks/{t}/decisions"): VIEWER,
    ("GET", "/api/tasks/{t}/diff"): VIEWER,
    ("GET", "/api/tasks/{t}/history"): VIEWER,
    ("GET", "/api/entries"): VIEWER,
    ("GET", "/api/runs"): VIEWER,
    ("GET", "/api/runs/{r}"): VIEWER,
    ("GET", "/api/permissions"): VIEWER,
    ("GET", "/api/hooks"): VIEWER,
    ("GET", "/api/hooks/deliveries"): VIEWER,
    ("GET", "/api/schedules"): VIEWER,
    ("GET", "/api/decisions"): VIEWER,
    ("GET", "/api/sessions"): VIEWER,
    ("GET", "/api/sessions/{s}/transcript"): VIEWER,
    ("GET", "/api/board"): VIEWER,
    ("GET", "/api/costs"): VIEWER,
    ("GET", "/api/budgets"): VIEWER,
    # working the board
    ("POST", "/api/tasks"): OPERATOR,
    ("PATCH", "/api/tasks/{t}"): OPERATOR,
    ("POST", "/api/tasks/{t}/move"): OPERATOR,
    ("POST", "/api/tasks/{t}/start"): OPERATOR,
    ("POST", "/api/tasks/{t}/switch-workflow"): OPERATOR,
    ("POST", "/api/tasks/{t}/archive"): OPERATOR,
    ("POST", "/api/tasks/{t}/unarchive"): OPERATOR,
    ("POST", "/api/tasks/{t}/cancel"): OPERATOR,
    ("POST", "/api/tasks/{t}/turn-complete"): OPERATOR,
    ("POST", "/api/tasks/{t}/comments"): OPERATOR,
    ("POST", "/api/tasks/{t}/block"): OPERATOR,
    ("POST", "/api/tasks/{t}/unblock"): OPERATOR,
    ("POST", "/api/runs/{r}/cancel"): OPERATOR,
    ("POST", "/api/runs/{r}/retry"): OPERATOR,
    ("POST", "/api/decisions"): OPERATOR,
    ("POST", "/api/permissions/{p}"): OPERATOR,
    ("POST", "/api/sessions/{s}/send"): OPERATOR,
    ("POST", "/api/sessions/{s}/cancel-retry"): OPERATOR,
    # questions (HTTP.md)
    ("GET", "/api/questions"): VIEWER,
    ("POST", "/api/questions/{q}"): OPERATOR,
    # changing the board itself
    ("POST", "/api/workflows"): ADMIN,
    ("POST", "/api/workflows/import"): ADMIN,
    ("DELETE", "/api/tasks/{t}"): ADMIN,
    ("POST", "/api/tasks/{t}/merge"): ADMIN,
    ("POST", "/api/tasks/{t}/push"): ADMIN,
    ("POST", "/api/hooks"): ADMIN,
    ("DELETE", "/api/hooks/{h}"): ADMIN,
    ("POST", "/api/schedules"): ADMIN,
    ("DELETE", "/api/schedules/{s}"): ADMIN,
    ("POST", "/api/budgets"): ADMIN,
}


def allows(role: str, needed: str) -> bool:
    return RANK.get(role, -1) >= RANK[needed]


class Table:
    """The app's API routes, each with the role it needs."""

    def __init__(self, routes: Iterable[BaseRoute]) -> None:
        self._routes = [r for r in routes if isinstance(r, Route) and r.path.startswith("/api")]

    def needed(self, scope: Scope) -> str | None:
        """The role the request needs; None when no route takes it (the router answers 404
        or 405, which any signed-in person may hear)."""
        for route in self._routes:
            match, _child = route.matches(scope)
            if match is Match.FULL:
                method = "GET" if scope.get("method") == "HEAD" else str(scope.get("method"))
                return RULES.get((method, route.path), ADMIN)
        return None

    def declared(self) -> list[tuple[str, str]]:
        """Every (method, path) the app serves under /api (HEAD aside)."""
        return sorted(
            (method, r.path)
            for r in self._routes
            for method in (r.methods or ())
            if method != "HEAD"
        )
