"""An exec agent's line that starts like a message but is JSON nested past the parser's depth
(a log an agent printed, a hostile one) is text of its transcript, as any line that is not a
message is: it failed the run with a RecursionError and a traceback on the worker's stderr,
and the agent's lines after it were lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.agents import worker
from core.host import Host
from tests.agents.conftest import enqueue, plain_workflow, python_agent

pytestmark = pytest.mark.slow  # it starts an agent process: the subprocess tier

DEEP = python_agent(
    "import sys\n"
    "sys.stdin.read()\n"
    "print('{\"log\": ' + '[' * 100000 + ']' * 100000 + '}', flush=True)\n"
    "print('still here', flush=True)\n"
)


def test_a_line_nested_past_the_parsers_depth_is_text_and_the_turn_goes_on(
    host: Host, tmp_path: Path
) -> None:
    wf = plain_workflow(host, tmp_path)
    agent = host.profiles.add("deep", command=DEEP).id
    task = host.tasks.create(workflow=wf, title="deep").id
    enqueue(host, agent, task)
    summary = worker.work(host, once=True)
    assert summary.as_dict() == {"claimed": 1, "finished": 1, "failed": 0}
    (session,) = host.sessions.list(task=task)
    texts = [item.text for item in host.sessions.items(session.id)]
    assert "still here" in texts
    assert any(t.startswith('{"log": [[[') for t in texts)
