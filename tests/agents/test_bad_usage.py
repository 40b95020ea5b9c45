"""Issue 39 item 4: a usage report that is not a finite, non-negative number (`Infinity`, as
`json.dumps(float("inf"))` writes it, `NaN`, `1e999`, `-1`) is a WARNING, and the turn's own
end stands: a turn that exits 0 completes (its on_turn_complete runs), one that fails runs
on_agent_error, the session is never left RUNNING, and nothing is logged as an ERROR. What
else the line says is kept."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from loguru import logger

from core import logs as logs_module
from core.agents import worker
from core.store import tables as t
from tests.agents.conftest import enqueue, python_agent
from tests.agents.test_acp_worker import Board
from tests.conftest import open_host

pytestmark = pytest.mark.slow

FLOW = """\
id: usage
name: Usage
steps:
  - id: work
    name: Work
    position: 0
    is_start_step: true
    allow_manual_move: true
    events:
      on_turn_complete: [{type: move_to_next}]
      on_agent_error: [{type: move_to_step, config: {step_id: trouble}}]
  - id: done
    name: Done
    position: 1
    allow_manual_move: true
  - id: trouble
    name: Trouble
    position: 2
    allow_manual_move: true
"""

LINES = [
    '{"usage": {"cost_usd": Infinity, "input_tokens": 5}}',
    '{"usage": {"cost_usd": NaN}}',
    '{"usage": {"output_tokens": 1e999}}',
    '{"usage": {"cost_usd": -Infinity, "output_tokens": -1}}',
]


@pytest.fixture
def logs() -> Iterator[list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []
    logger.enable("core")  # laneway is silent until its application enables it (core.logs)
    handler = logger.add(lambda m: seen.append(m.record), level="DEBUG")
    try:
        yield seen
    finally:
        logger.remove(handler)
        logs_module.disable()


@pytest.mark.parametrize(("code", "step"), [(0, "Done"), (1, "Trouble")], ids=["ok", "fails"])
def test_issue_39_item_4_bad_exec_usage_is_a_warning_and_the_turn_ends_as_it_does(
    db_url: str, tmp_path: Path, logs: list[dict[str, Any]], code: int, step: str
) -> None:
    path = tmp_path / "usage.yml"
    path.write_text(FLOW)
    agent_code = (
        "import sys\nsys.stdin.read()\n"
        + "".join(f"print({line!r})\n" for line in LINES)
        + f"sys.exit({code})\n"
    )
    with open_host(db_url) as host:
        (wf,) = host.workflows.import_file(path)
        agent = host.profiles.add("spender", command=python_agent(agent_code)).id
        task = host.tasks.create(workflow=wf.id, title="spend").id
        session = host.sessions.start(task, profile="spender", external=False).id
        run = enqueue(host, agent, task)
        summary = worker.work(host, once=True)
        assert summary.as_dict()["claimed"] == 1
        found = host.tasks.get(task)
        assert host.workflows.step_by_id(found.workflow_step_id)[1].name == step
        assert host.sessions.get(session).state != "RUNNING"
        with host.store.read() as conn:
            usage = conn.execute(sa.select(t.runs.c.usage).where(t.runs.c.id == run)).scalar()
    assert json.loads(usage)["input_tokens"] == 5  # the rest of the line is kept
    assert json.loads(usage)["cost_usd"] == 0
    assert json.loads(usage)["output_tokens"] == 0
    warned = [r for r in logs if r["message"].startswith("agent usage not recorded")]
    assert len(warned) == len(LINES)
    assert all(r["level"].name == "WARNING" for r in warned)
    assert {k for r in warned for k in r["extra"]["usage"]} == {
        "cost_usd",
        "output_tokens",
    }
    assert not [r for r in logs if r["level"].no >= 40], [r["message"] for r in logs]


@pytest.mark.parametrize("cost", [float("inf"), float("nan")], ids=["Infinity", "NaN"])
def test_issue_39_item_4_bad_acp_usage_is_a_warning_and_the_turn_completes(
    db_url: str, tmp_path: Path, cost: float
) -> None:
    """The fake ACP agent sends a usage update whose cost is not finite."""
    board = Board(
        db_url, tmp_path, {"turns": [[{"usage": {"used": 10, "size": 100, "cost": cost}}], []]}
    )
    err = board.work()
    step, session, items = board.read()
    assert step == "Done", err
    assert session.state != "RUNNING"
    assert "Traceback" not in err
    assert "ERROR" not in err
    for found in items:
        json.dumps(found["data"], allow_nan=False)  # every kept item is JSON


RAW_AGENT = """\
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    method, ident = message.get("method"), message.get("id")
    if ident is None:
        continue
    if method == "initialize":
        result = {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}
    elif method == "session/new":
        result = {"sessionId": "s1"}
    elif method == "session/prompt":
        result = None
    else:
        result = {}
    if result is None:
        # json.dumps writes float("inf") as Infinity: what a careless agent sends
        answer = {"stopReason": "end_turn", "usage": {"inputTokens": float("inf"),
                  "outputTokens": float("nan"), "totalTokens": 1}}
        text = json.dumps({"jsonrpc": "2.0", "id": ident, "result": answer})
    else:
        text = json.dumps({"jsonrpc": "2.0", "id": ident, "result": result})
    sys.stdout.write(text + "\\n")
    sys.stdout.flush()
"""


def test_issue_39_item_4_a_prompt_answer_with_infinite_usage_ends_its_turn_as_said(
    db_url: str, tmp_path: Path
) -> None:
    """An ACP agent answering session/prompt with `usage` counts of Infinity and NaN: the
    turn ends as the agent ended it (end_turn: the card moves on), with a WARNING and a `log`
    item saying the usage was not recorded (the SDK dropped it without a word before)."""
    agent = tmp_path / "raw_agent.py"
    agent.write_text(RAW_AGENT)
    board = Board(db_url, tmp_path, {}, command=(sys.executable, str(agent)))
    err = board.work()
    step, session, items = board.read()
    assert step == "Done", err
    assert session.state != "RUNNING"
    assert "Traceback" not in err
    assert "ERROR" not in err
    assert "agent usage not recorded" in err
    assert any("agent usage not recorded" in i["text"] for i in items)
