"""The `github` forge: pull requests through GitHub's REST API (urllib, no client library).

A workflow names it with `laneway workflow set W --forge github --forge-repo OWNER/NAME
--forge-token-env VAR [--forge-url URL]` (URL: a GitHub Enterprise API root, or a stand-in;
default https://api.github.com). The token is read from the worker's environment when an
action runs and sent as a bearer token; it is never stored.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from typing import Any, Final

from plugins.api import Forge, ForgeConfig, LanewayError, PullRequest, ReviewComment

API: Final = "https://api.github.com"
TIMEOUT_S: Final = 10.0


def _call(
    config: ForgeConfig, method: str, path: str, body: Mapping[str, Any] | None = None
) -> Any:
    # urllib.request brings http.client, email and ssl: imported by the call that talks to
    # GitHub, not by every command that loads the plugin (issue 45 item 6)
    import urllib.error
    import urllib.request

    url = (config.url or API).rstrip("/") + path
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Accept", "application/vnd.github+json")
    request.add_header("X-GitHub-Api-Version", "2022-11-28")
    request.add_header("Authorization", f"Bearer {config.token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
            raw = answer.read()
    except urllib.error.HTTPError as exc:
        said = _message(exc.read())
        tail = f": {said}" if said else ""
        raise LanewayError(
            f"github {config.repo}: {method} {path} answered {exc.code}{tail}"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        why = getattr(exc, "reason", exc)
        raise LanewayError(f"github {config.repo}: cannot reach {url}: {why}") from None
    return json.loads(raw) if raw else None


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


def _pull(found: Mapping[str, Any]) -> PullRequest:
    head = str((found.get("head") or {}).get("ref", ""))
    number, url = int(found["number"]), str(found.get("html_url", ""))
    if found.get("merged") or found.get("merged_at"):
        return PullRequest(number, url, "merged", head)
    if found.get("state") == "open":
        return PullRequest(number, url, "open", head)
    return PullRequest(number, url, "closed", head)


def open_or_update(
    config: ForgeConfig, head: str, base: str, title: str, body: str, draft: bool
) -> PullRequest:
    owner = config.repo.split("/", 1)[0]
    query = urllib.parse.urlencode({"head": f"{owner}:{head}", "state": "all"})
    existing = _call(config, "GET", f"/repos/{config.repo}/pulls?{query}") or []
    if existing:
        number = int(existing[0]["number"])
        updated = _call(
            config, "PATCH", f"/repos/{config.repo}/pulls/{number}", {"title": title, "body": body}
        )
        return _pull(updated)
    opened = _call(
        config,
        "POST",
        f"/repos/{config.repo}/pulls",
        {"title": title, "head": head, "base": base, "body": body, "draft": draft},
    )
    return _pull(opened)


def review_comments(config: ForgeConfig, number: int) -> list[ReviewComment]:
    found = _call(config, "GET", f"/repos/{config.repo}/pulls/{number}/comments?per_page=100")
    comments = []
    for c in found or []:
        line = c.get("line") or c.get("original_line") or 1
        comments.append(
            ReviewComment(
                str(c["id"]),
                str(c.get("path", "")),
                int(line),
                str(c.get("body", "")),
                str((c.get("user") or {}).get("login", "someone")),
            )
        )
    return comments


def pull_request(config: ForgeConfig, number: int) -> PullRequest:
    return _pull(_call(config, "GET", f"/repos/{config.repo}/pulls/{number}"))


GITHUB = Forge("github", open_or_update, review_comments, pull_request)
