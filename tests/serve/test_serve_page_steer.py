"""See, steer, stop from the board page (issue 22, the page part; HTTP.md "The board page": the
panel shows the running turn's transcript live, a pending permission request with Allow and
Deny, and Cancel and Retry where a run can be cancelled or retried; a card whose agent waits
for a person says so), in Debian's chromium against a real `laneway serve` and a real
`laneway worker --concurrency 3` running the repo's fake ACP agent and an exec agent that
streams `{"log"}` lines. One serve, one worker and one browser for the module: each test
starts its own task from the page's point of view (the panel is open before the turn starts,
so what it shows arrived live).

`LANEWAY_SCREENSHOT_DIR=docs pytest tests/serve/test_serve_page_steer.py` regenerates
docs/transcript.png."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests.conftest import eventually, open_host
from tests.serve.conftest import LANEWAY, Served, cli_env, laneway, start_serve
from tests.serve.page_kit import browser, open_page, serious_violations
from tests.serve.test_serve_page import _card, _lane

pytestmark = pytest.mark.slow
__all__ = ["browser"]  # the module's browser fixture, used by name

FAKE_ACP = str(Path(__file__).resolve().parents[1] / "agents" / "fake_acp_agent.py")
BOARD = """
id: steer
name: Steer
steps:
  - {id: backlog, name: Backlog, position: 0, allow_manual_move: true}
  - id: work
    name: Work
    position: 1
    is_start_step: true
    allow_manual_move: true
    prompt: "work on it"
    events:
      on_enter: [{"type": "auto_start_agent"}]
      on_turn_complete: [{"type": "move_to_next"}]
  - {id: done, name: Done, position: 2, allow_manual_move: true}
"""
STREAMER = {
    "turns": [
        [
            {"message": "Looking at the flaky login test first."},
            {"tool_call": {"id": "t1", "title": "Read tests/test_login.py", "kind": "read"}},
            {"plan": ["Find where the test waits", "Wait for the server, not a timer", "Run it"]},
            {"sleep": 2.5},
            {"tool_update": {"id": "t1", "status": "completed"}},
            {"message": "It sleeps 50 ms where the server needs 200; waiting on /healthz."},
            {"sleep": 0.5},
        ]
    ]
}
ASKER = {"turns": [[{"permission": {"kind": "edit", "title": "Edit src/login.py"}}]]}
TICKER = (
    "import json, sys, time\n"
    "sys.stdin.read()\n"
    "for n in range(100000):\n"
    "    print(json.dumps({'log': f'tick {n}'}), flush=True)\n"
    "    time.sleep(0.1)\n"
)


@attrs.frozen
class Steer:
    served: Served
    db: str
    tasks: dict[str, str]
    """title -> task id"""


@pytest.fixture(scope="module")
def steer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Steer]:
    """A board with four tasks in Backlog, each seated with its own agent at Work: the fake
    ACP agent streaming a turn, the fake ACP agent asking permission (`--permissions ask`;
    twice: one to allow, one to deny), and an exec agent printing a log line every 0.1 s
    until it is stopped."""
    tmp = tmp_path_factory.mktemp("steer")
    db = f"sqlite:///{tmp / 'board.db'}"
    laneway(db, "init")
    (tmp / "steer.yml").write_text(BOARD)
    tasks: dict[str, str] = {}
    with open_host(db) as host:
        (wf,) = host.workflows.import_file(tmp / "steer.yml")
        agents: dict[str, dict[str, Any]] = {}
        for name, script in (("streamer", STREAMER), ("asker", ASKER), ("denied", ASKER)):
            (tmp / f"{name}.json").write_text(json.dumps(script))
            agents[name] = {
                "command": [sys.executable, FAKE_ACP],
                "protocol": "acp",
                "permissions": "ask",
                "env": {"FAKE_ACP_SCRIPT_FILE": str(tmp / f"{name}.json")},
            }
        agents["ticker"] = {"command": [sys.executable, "-c", TICKER]}
        for (name, spec), title in zip(
            agents.items(),
            (
                "Fix the flaky login test",
                "Tidy the login module",
                "Rename the login flags",
                "Watch the nightly job",
            ),
            strict=True,
        ):
            host.profiles.add(name, **spec)
            task = host.tasks.create(workflow=wf.id, title=title, step="Backlog")
            host.participants.add(step="Work", role="runner", profile=name, task=task.id)
            tasks[title] = task.id
    served = start_serve(db, tmp)
    worker_err = (tmp / "worker.err").open("w")
    worker = subprocess.Popen(
        [LANEWAY, "--db", db, "worker", "--concurrency", "3"],
        cwd=tmp,
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=worker_err,
        text=True,
    )
    try:
        yield Steer(served=served, db=db, tasks=tasks)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        worker_err.close()
        served.stop()


def start(steer: Steer, title: str) -> None:
    with steer.served.client() as c:
        answer = c.post(f"/api/tasks/{steer.tasks[title]}/start", json={})
        assert answer.status_code == 200, answer.text


def runs(steer: Steer, title: str) -> list[dict[str, Any]]:
    with steer.served.client() as c:
        return list(c.get(f"/api/runs?task={steer.tasks[title]}").json())


def kept_lines(steer: Steer, run_id: str) -> int:
    with steer.served.client() as c:
        shown = c.get(f"/api/runs/{run_id}").json()
    return sum(1 for item in shown["items"] if item["kind"] == "log")


def poll(what: str, found: Callable[[], Any], timeout: float = 30.0) -> Any:
    return eventually(found, timeout=timeout, what=what, every=0.1)


def open_panel(browser: Any, steer: Steer, title: str) -> Any:
    page = open_page(browser, steer.served, bypass_csp=True)  # axe goes in as an inline script
    _card(page, title).click()
    page.locator("#detail-title", has_text=title).wait_for(timeout=10_000)
    return page


def test_a_running_turns_messages_tool_calls_and_plan_appear_live_in_the_panel(
    browser: Any, steer: Steer
) -> None:
    """Issue 22 (see): with the panel open, the turn's items arrive as they are kept, each
    drawn once, a tool call's row turning from pending to completed in place, the plan drawn;
    the run then finishes and the task moves on. The screenshot is docs/transcript.png."""
    title = "Fix the flaky login test"
    page = open_panel(browser, steer, title)
    assert page.locator("ol.transcript").count() == 0  # no turn yet
    start(steer, title)
    transcript = page.locator("ol.transcript")
    tool = transcript.locator("li.tool_call", has_text="Read tests/test_login.py")
    tool.wait_for(timeout=20_000)
    # live: the run is still running when its first items are on the page
    assert [r["status"] for r in runs(steer, title)] == ["claimed"]
    assert "running" in page.locator(".transcript-head").inner_text()
    assert tool.locator(".tool-status").inner_text() == "pending"
    assert transcript.locator("li.message", has_text="Looking at the flaky login test").count() == 1
    plan = transcript.locator("li.plan")
    assert plan.locator("ol > li").all_inner_texts()[1].endswith("Wait for the server, not a timer")
    if os.environ.get("LANEWAY_SCREENSHOT_DIR"):  # a live transcript: the turn is under way
        page.screenshot(path=str(Path(os.environ["LANEWAY_SCREENSHOT_DIR"]) / "transcript.png"))
    drawn = tool.element_handle()
    drawn.evaluate("el => { el.seenBefore = true; }")

    said = transcript.locator("li.message", has_text="waiting on /healthz")
    said.wait_for(timeout=10_000)
    assert tool.locator(".tool-status").inner_text() == "completed"
    assert tool.evaluate("el => el.seenBefore === true")  # the same row, patched, not redrawn
    assert transcript.locator("li.tool_call").count() == 1
    assert transcript.locator("li.message").count() == 2

    _lane(page, "Done").locator(f".card[data-task-id='{steer.tasks[title]}']").wait_for(
        timeout=20_000
    )
    page.locator(".transcript-head .run-finished").wait_for(timeout=10_000)
    assert [r["status"] for r in runs(steer, title)] == ["finished"]
    assert transcript.locator("li.message").count() == 2
    assert serious_violations(page) == []  # issue 25 item 3, on a panel with a transcript
    assert page.errors == []
    page.context.close()


def test_allow_on_a_pending_permission_request_lets_the_turn_finish(
    browser: Any, steer: Steer
) -> None:
    """Issue 22 (steer): the card says its agent waits for a person; the panel shows the
    request with Allow and Deny; Allow answers it (the agent gets the allow option) and the
    turn finishes."""
    title = "Tidy the login module"
    page = open_panel(browser, steer, title)
    start(steer, title)
    request = page.locator(".permissions .permission", has_text="Edit src/login.py")
    request.wait_for(timeout=20_000)
    assert request.locator("button", has_text="Deny").count() == 1
    card = _card(page, title)
    card.locator(".badge.person").wait_for(timeout=5_000)
    assert "waits for a person" in card.locator(".waits").inner_text().lower()
    assert page.locator("#detail-body > .waits-person").count() == 1

    request.locator("button", has_text="Allow").click()
    page.locator(".toast.ok", has_text="Permission allowed").wait_for(timeout=5_000)
    page.locator("ol.transcript li.message", has_text="permission: yes").wait_for(timeout=20_000)
    _lane(page, "Done").locator(f".card[data-task-id='{steer.tasks[title]}']").wait_for(
        timeout=20_000
    )
    # the panel redraws after its own read of the board, which can land just after the
    # card's move: the request leaves it
    page.locator(".permissions").wait_for(state="detached", timeout=20_000)
    assert page.locator(".permissions").count() == 0
    assert card.locator(".badge.person").count() == 0
    with steer.served.client() as c:
        (answered,) = c.get(f"/api/permissions?task={steer.tasks[title]}").json()
    assert (answered["state"], answered["option_id"]) == ("allowed", "yes")
    assert [r["status"] for r in runs(steer, title)] == ["finished"]
    assert page.errors == []
    page.context.close()


def test_deny_on_a_pending_permission_request_tells_the_agent_no(
    browser: Any, steer: Steer
) -> None:
    """Issue 22 (steer), HTTP.md `POST /api/permissions/{p}` with deny: Deny answers the
    request with the agent's reject option, the agent hears it (its message says `no`), the
    request leaves the panel and the card's badge goes."""
    title = "Rename the login flags"
    page = open_panel(browser, steer, title)
    start(steer, title)
    request = page.locator(".permissions .permission", has_text="Edit src/login.py")
    request.wait_for(timeout=20_000)
    card = _card(page, title)
    card.locator(".badge.person").wait_for(timeout=5_000)

    request.locator("button", has_text="Deny").click()
    page.locator(".toast.ok", has_text="Permission denied").wait_for(timeout=5_000)
    page.locator("ol.transcript li.message", has_text="permission: no").wait_for(timeout=20_000)
    page.locator(".permissions").wait_for(state="detached", timeout=10_000)
    card.locator(".badge.person").wait_for(state="detached", timeout=10_000)
    with steer.served.client() as c:
        (answered,) = c.get(f"/api/permissions?task={steer.tasks[title]}").json()
    assert (answered["state"], answered["option_id"]) == ("denied", "no")
    assert page.errors == []
    page.context.close()


def test_typing_survives_live_events_then_cancel_stops_the_turn_and_retry_runs_again(
    browser: Any, steer: Steer
) -> None:
    """Issue 22 (stop) and issue 25 item 1: an exec agent's `{"log"}` lines stream into the
    panel; text typed in the message box, and its focus, survive 20 events on the open task;
    Cancel on the running run stops the turn (no more lines); Retry on the cancelled run
    queues a new attempt that the panel follows; a click shows the earlier run's transcript;
    the task's Cancel stops the retry."""
    title = "Watch the nightly job"
    page = open_panel(browser, steer, title)
    start(steer, title)
    ticks = page.locator("ol.transcript li.log")
    ticks.first.wait_for(timeout=20_000)

    box = page.locator("#message-text")
    box.click()
    box.fill("half a thought, not sent")
    seen = ticks.count()
    poll("20 more log lines", lambda: ticks.count() >= seen + 20, timeout=20)
    assert box.input_value() == "half a thought, not sent"
    assert page.evaluate("document.activeElement && document.activeElement.id") == "message-text"
    texts = ticks.all_inner_texts()
    assert len(texts) == len(set(texts))  # each line drawn once

    (first,) = runs(steer, title)
    page.locator(f"li.run[data-run-id='{first['id']}'] button.cancel-run").click()
    page.locator(".toast.ok", has_text="cancelled").wait_for(timeout=5_000)
    poll("the run cancelled", lambda: runs(steer, title)[0]["status"] == "cancelled")
    page.locator(f"li.run[data-run-id='{first['id']}'][data-status='cancelled']").wait_for(
        timeout=10_000
    )
    kept = poll("the page to show every kept line", lambda: kept_lines(steer, first["id"]))
    poll("the page to show every kept line", lambda: ticks.count() == kept)
    stopped = ticks.count()
    time.sleep(0.6)  # six ticks' time: nothing more arrives from a stopped turn
    assert ticks.count() == stopped
    assert kept_lines(steer, first["id"]) == kept

    page.locator(f"li.run[data-run-id='{first['id']}'] button.retry-run").click()
    page.locator(".toast.ok", has_text="Retry queued").wait_for(timeout=5_000)
    retry = poll("the retry", lambda: [r for r in runs(steer, title) if r["retry_of"]])[0]
    assert retry["retry_of"] == first["id"]
    head = page.locator(".transcript-head")
    head.filter(has_text=retry["id"][-8:]).wait_for(timeout=20_000)
    ticks.first.wait_for(timeout=20_000)

    page.locator(f"li.run[data-run-id='{first['id']}'] button.show-transcript").click()
    head.filter(has_text=first["id"][-8:]).wait_for(timeout=5_000)
    assert ticks.count() == stopped

    page.locator("#cancel-task").click()
    page.locator(".toast.ok", has_text="Cancelled 1 run").wait_for(timeout=5_000)
    poll(
        "every run cancelled",
        lambda: {r["status"] for r in runs(steer, title)} == {"cancelled"},
    )
    assert page.errors == []
    page.context.close()
