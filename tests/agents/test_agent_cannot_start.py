"""Issue 25 item 8: a worker whose agent command cannot start says so in one WARNING line per
profile (with the profile's fields), and each of its runs fails with a one-line error; no
traceback, and the worker goes on with the other runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.agents import worker
from core.host import Host
from core.logs import logger
from tests.agents.conftest import enqueue, plain_workflow


@pytest.fixture
def warnings() -> Iterator[list[dict[str, Any]]]:
    found: list[dict[str, Any]] = []

    def sink(message: Any) -> None:
        record = message.record
        found.append(
            {"message": record["message"], "exception": record["exception"], **record["extra"]}
        )

    handler = logger.add(sink, level="WARNING")
    logger.enable("core")
    try:
        yield found
    finally:
        logger.remove(handler)


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_a_command_that_cannot_start_is_one_warning_per_profile(
    host: Host, tmp_path: Path, warnings: list[dict[str, Any]]
) -> None:
    workflow = plain_workflow(host, tmp_path)
    ghost = host.profiles.add("ghost", command=[str(tmp_path / "gone" / "agent"), "--flag"])
    other = host.profiles.add("other-ghost", command=[str(tmp_path / "gone" / "other")])
    runs = []
    for n in range(3):
        task = host.tasks.create(workflow=workflow, title=f"t{n}")
        runs += [enqueue(host, ghost.id, task.id), enqueue(host, other.id, task.id)]

    summary = worker.work(host, once=True)

    assert (summary.claimed, summary.failed) == (6, 6)
    said = [w for w in warnings if "cannot start" in w["message"]]
    assert sorted(w["profile"] for w in said) == ["ghost", "other-ghost"]
    by_name = {w["profile"]: w for w in said}
    assert by_name["ghost"]["agent_profile_id"] == ghost.id
    assert by_name["ghost"]["command"] == [str(tmp_path / "gone" / "agent"), "--flag"]
    assert all(w["exception"] is None for w in warnings)  # no traceback anywhere
    assert "\n" not in by_name["ghost"]["message"]
    for run_id in runs:
        run = host.runs.get(run_id)
        assert run is not None
        assert run.status == "failed"
        assert run.error_message is not None
        assert "\n" not in run.error_message
        assert run.error_message.startswith("cannot start ")
