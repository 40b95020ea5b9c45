"""The `github` forge: pull requests through GitHub's REST API (urllib, no client library).

A workflow names it with `laneway workflow set W --forge github --forge-repo OWNER/NAME
--forge-token-env VAR [--forge-url URL]` (URL: a GitHub Enterprise API root, or a stand-in;
default https://api.github.com). The token is read from the worker's environment when an
action runs and sent as a bearer token; it is never stored.
"""

from __future__ import annotations

import functools
import json
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, Final, ParamSpec, TypeVar

from plugins.api import Forge, ForgeConfig, LanewayError, PullRequest, ReviewComment

P = ParamSpec("P")
R = TypeVar("R")

API: Final = "https://api.github.com"
TIMEOUT_S: Final = 10.0


class _Refused(Exception):
    """GitHub answered with an error status (`status`): inside this module only (a reopen it
    refuses is answered by opening anew); a caller gets it as the LanewayError it always was."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def _plain(call: Callable[P, R]) -> Callable[P, R]:
    """`call`, GitHub's refusals raised as the one-line LanewayError callers know."""

    @functools.wraps(call)
    def plain(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return call(*args, **kwargs)
        except _Refused as refused:
            raise LanewayError(str(refused)) from None

    return plain


MAX_ANSWER: Final = 16 * 1024 * 1024
"""The largest answer read, in bytes: a larger one is refused, not read on."""
MAX_PAGES: Final = 100
"""The most pages of one list read (100 items each): a pull request's 10,000 review comments."""


def _root(config: ForgeConfig) -> str:
    return (config.url or API).rstrip("/")


def _call(
    config: ForgeConfig, method: str, path: str, body: Mapping[str, Any] | None = None
) -> Any:
    return _request(config, method, _root(config) + path, body)[0]


def _pages(config: ForgeConfig, path: str) -> list[Mapping[str, Any]]:
    """Every item of a paginated list, following GitHub's `Link: <...>; rel="next"` (only to
    the API root the token is meant for: a link elsewhere is refused, not followed)."""
    items: list[Mapping[str, Any]] = []
    url: str | None = _root(config) + path
    for _page in range(MAX_PAGES):
        if url is None:
            return items
        found, link = _request(config, "GET", url)
        items.extend(_listed(config, found))
        url = _next(config, link)
    if url is not None:
        raise LanewayError(f"github {config.repo}: {path} has more than {MAX_PAGES} pages")
    return items


def _next(config: ForgeConfig, link: str) -> str | None:
    for part in link.split(","):
        target, _semi, params = part.partition(";")
        if 'rel="next"' not in params.replace(" ", ""):
            continue
        url = target.strip().removeprefix("<").removesuffix(">")
        root = urllib.parse.urlsplit(_root(config))
        there = urllib.parse.urlsplit(url)
        if (there.scheme, there.netloc) != (root.scheme, root.netloc) or not there.path.startswith(
            root.path
        ):
            raise LanewayError(f"github {config.repo}: a next page outside {_root(config)}: {url}")
        return url
    return None


def _request(
    config: ForgeConfig, method: str, url: str, body: Mapping[str, Any] | None = None
) -> tuple[Any, str]:
    """The answer's JSON and its `Link` header."""
    # urllib.request brings http.client, email and ssl: imported by the call that talks to
    # GitHub, not by every command that loads the plugin (issue 45 item 6)
    import urllib.error
    import urllib.request

    shown = url.removeprefix(_root(config)) or url
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Accept", "application/vnd.github+json")
    request.add_header("X-GitHub-Api-Version", "2022-11-28")
    request.add_header("Authorization", f"Bearer {config.token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
            raw = answer.read(MAX_ANSWER + 1)
            link = answer.headers.get("Link") or ""
    except urllib.error.HTTPError as exc:
        said = _message(exc.read(MAX_ANSWER))
        tail = f": {said}" if said else ""
        raise _Refused(
            f"github {config.repo}: {method} {shown} answered {exc.code}{tail}", exc.code
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        why = getattr(exc, "reason", exc)
        raise LanewayError(f"github {config.repo}: cannot reach {url}: {why}") from None
    if len(raw) > MAX_ANSWER:
        raise LanewayError(f"github {config.repo}: {method} {shown}: over {MAX_ANSWER} bytes")
    try:
        return (json.loads(raw) if raw else None), link
    except ValueError:
        raise LanewayError(f"github {config.repo}: {method} {shown} answered no JSON") from None


def _message(raw: bytes) -> str:
    try:
        found = json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace").strip()[:200]
    if not isinstance(found, Mapping):
        return ""
    message = str(found.get("message", ""))
    errors = found.get("errors")
    if isinstance(errors, list) and errors:
        first = errors[0]
        detail = first.get("message") if isinstance(first, Mapping) else first
        message = f"{message} ({detail})" if detail else message
    return " ".join(message.split())


def _pull(config: ForgeConfig, found: Any) -> PullRequest:
    if not isinstance(found, Mapping) or not isinstance(found.get("number"), int):
        raise LanewayError(f"github {config.repo}: the answer is not a pull request")
    head = str((found.get("head") or {}).get("ref", ""))
    number, url = int(found["number"]), str(found.get("html_url", ""))
    if found.get("merged") or found.get("merged_at"):
        return PullRequest(number, url, "merged", head)
    if found.get("state") == "open":
        return PullRequest(number, url, "open", head)
    return PullRequest(number, url, "closed", head)


def _listed(config: ForgeConfig, found: Any) -> list[Mapping[str, Any]]:
    if found is None:
        return []
    if not isinstance(found, list):
        raise LanewayError(f"github {config.repo}: expected a list, got {type(found).__name__}")
    return [each for each in found if isinstance(each, Mapping)]


@_plain
def open_or_update(
    config: ForgeConfig, head: str, base: str, title: str, body: str, draft: bool
) -> PullRequest:
    """The branch's open pull request, updated; else its last one closed unmerged, reopened
    (its review kept); else a new one. A branch whose pull request was merged and that comes
    back for more work gets a new one: a merged pull request cannot take more commits, and
    updating it would leave the card waiting on a review nobody can give."""
    owner = config.repo.split("/", 1)[0]
    query = urllib.parse.urlencode({"head": f"{owner}:{head}", "state": "all"})
    existing = _listed(config, _call(config, "GET", f"/repos/{config.repo}/pulls?{query}"))
    change = {"title": title, "body": body}
    numbered = [p for p in existing if isinstance(p.get("number"), int)]
    for found in numbered:
        if found.get("state") == "open":
            path = f"/repos/{config.repo}/pulls/{found['number']}"
            return _pull(config, _call(config, "PATCH", path, change))
    for found in numbered:
        if not (found.get("merged") or found.get("merged_at")):
            path = f"/repos/{config.repo}/pulls/{found['number']}"
            try:
                reopened = _call(config, "PATCH", path, {**change, "state": "open"})
            except _Refused as refused:
                if refused.status != 422:
                    raise
                break  # GitHub will not reopen it (its branch was deleted or replaced): a new one
            return _pull(config, reopened)
    opened = _call(
        config,
        "POST",
        f"/repos/{config.repo}/pulls",
        {"title": title, "head": head, "base": base, "body": body, "draft": draft},
    )
    return _pull(config, opened)


REVIEW_STATES: Final = {"CHANGES_REQUESTED": "Changes requested", "APPROVED": "Approved"}
"""A review's verdict, said before its summary (a plain comment's review says none)."""


UNSAID: Final = ("PENDING", "DISMISSED")
"""Reviews whose summary is not brought back: a draft only its author sees, and a review a
maintainer dismissed (a summary brought back before its dismissal stays on the task)."""


def _login(found: Mapping[str, Any]) -> str:
    user = found.get("user")
    return str(user.get("login", "someone") if isinstance(user, Mapping) else "someone")


def _by_bot(found: Mapping[str, Any]) -> bool:
    user = found.get("user")
    return isinstance(user, Mapping) and user.get("type") == "Bot"


def _said(found: Mapping[str, Any], key: str) -> str:
    """The item's time (ISO 8601, which sorts as text); "" when GitHub gave none."""
    return str(found.get(key) or "")


@_plain
def review_comments(config: ForgeConfig, number: int) -> list[ReviewComment]:
    """What reviewers said, oldest first: comments on lines of the diff; each submitted review's
    summary, its verdict first (the review a reviewer writes without line comments is nothing
    but its summary); and the pull request's conversation. A bot's summary or conversation
    comment (a preview link, a coverage report) is left out: it would wake the agent for
    nothing. Line comments keep GitHub's id as theirs (what earlier syncs keyed them by);
    the others' ids say which list they come from, GitHub numbering each list on its own."""
    repo = f"/repos/{config.repo}"
    said: list[tuple[str, ReviewComment]] = []
    for c in _pages(config, f"{repo}/pulls/{number}/comments?per_page=100"):
        line = c.get("line") or c.get("original_line") or 1
        if c.get("id") is None or not isinstance(line, int):
            continue  # not a review comment of GitHub's shape: nothing to key it by
        comment = ReviewComment(
            str(c["id"]), str(c.get("path", "")), max(line, 1), str(c.get("body", "")), _login(c)
        )
        said.append((_said(c, "created_at"), comment))
    for r in _pages(config, f"{repo}/pulls/{number}/reviews?per_page=100"):
        body = str(r.get("body") or "").strip()
        if r.get("id") is None or not body or r.get("state") in UNSAID or _by_bot(r):
            continue  # no summary (its line comments came above), a draft, dismissed, a bot's
        verdict = REVIEW_STATES.get(str(r.get("state")))
        text = f"{verdict}: {body}" if verdict else body
        summary = ReviewComment(f"review-{r['id']}", "", 0, text, _login(r))
        said.append((_said(r, "submitted_at"), summary))
    for c in _pages(config, f"{repo}/issues/{number}/comments?per_page=100"):
        if c.get("id") is None or _by_bot(c):
            continue
        spoken = ReviewComment(f"conversation-{c['id']}", "", 0, str(c.get("body", "")), _login(c))
        said.append((_said(c, "created_at"), spoken))
    # stable: items without a time keep the order they were read in
    return [comment for _at, comment in sorted(said, key=lambda each: each[0])]


@_plain
def pull_request(config: ForgeConfig, number: int) -> PullRequest:
    return _pull(config, _call(config, "GET", f"/repos/{config.repo}/pulls/{number}"))


GITHUB = Forge("github", open_or_update, review_comments, pull_request)
