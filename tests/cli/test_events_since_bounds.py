"""Issue 38 item 10: `events --since 10^23` (and any id or sequence number past what a BIGINT
column holds) is answered in one clear line naming the option and the bound, never with the
database driver's own message: the CLI's `events`/`watch --since` and `session log --after`,
HTTP's `Last-Event-ID` and a transcript's `?after=`, on both databases."""

from __future__ import annotations

from starlette.testclient import TestClient

from core.host import Host
from core.serve.app import build_app
from tests.cli.conftest import Laneway
from tests.conftest import open_host

HUGE = str(10**23)
LARGEST = 2**63 - 1
TOKEN = "events-since-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _one_clear_line(lw: Laneway, args: tuple[str, ...], option: str) -> None:
    said = lw.fails(*args)  # one line on stderr, exit 1, no traceback
    assert said == (
        f"laneway: {option}: {HUGE} is larger than {LARGEST}, the most the database holds"
    )


def test_issue_38_item_10_events_since_past_the_largest_id_is_one_clear_line(
    laneway: Laneway,
) -> None:
    for command in ("events", "watch"):
        _one_clear_line(laneway, (command, "--since", HUGE), "--since")
    _one_clear_line(laneway, ("session", "log", "any", "--after", HUGE), "--after")


def test_issue_38_item_10_http_ids_past_the_largest_are_a_json_400(laneway: Laneway) -> None:
    with open_host(laneway.url) as host:
        _http(host)


def _http(host: Host) -> None:
    with TestClient(build_app(host, token=TOKEN), raise_server_exceptions=False) as client:
        answer = client.get("/api/events", headers={**AUTH, "Last-Event-ID": HUGE})
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"] == f"Last-Event-ID: must be at most {LARGEST}"
        task = host.tasks.create(
            workflow=host.workflows.create_from_template("simple").id, title="t"
        )
        host.profiles.add("p", command=["true"])
        session = host.sessions.start(task.id, profile="p", external=False)
        answer = client.get(
            f"/api/sessions/{session.id}/transcript", params={"after": HUGE}, headers=AUTH
        )
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"] == f"query 'after': must be at most {LARGEST}"
