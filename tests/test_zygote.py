"""The suite's warm `laneway` (tests/zygote.py) runs a command as the installed script would:
the caller's environment and working directory, its exit status (a usage error's, a fault
point's `os._exit`), its two streams, and nothing it did left in the next command."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from core.faults import EXIT_STATUS
from tests import zygote
from tests.conftest import open_host

pytestmark = pytest.mark.slow


def test_a_forked_command_takes_the_callers_environment_cwd_and_exits_as_the_script_would(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANEWAY_")}
    env["LANEWAY_PLUGINS_ALLOW"] = "kanban,office"
    # no --db and no LANEWAY_DB: the board is the working directory's (CLI.md)
    made = zygote.run(["--json", "init"], cwd=tmp_path, env=env, timeout=60)
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "laneway.db").exists(), sorted(os.listdir(tmp_path))
    url = f"sqlite:///{tmp_path / 'laneway.db'}"
    with open_host(url) as host:
        wf = host.workflows.create_from_template("office-default")
        task = host.tasks.create(workflow=wf.id, title="t").id

    # LANEWAY_DB from the caller's environment, and the command's one JSON value on stdout
    listed = zygote.run(["--json", "task", "list"], cwd="/", env={**env, "LANEWAY_DB": url})
    assert listed.returncode == 0, listed.stderr
    assert [t["id"] for t in json.loads(listed.stdout)] == [task]

    # a fault point's os._exit is the status the caller sees, and the comment is not there
    died = zygote.run(
        ["--db", url, "task", "comment", task, "hello"],
        cwd=tmp_path,
        env={**env, "LANEWAY_FAULT": "comment.before_commit"},
    )
    assert died.returncode == EXIT_STATUS, (died.stdout, died.stderr)
    # the next command reads LANEWAY_FAULT afresh (unset): its comment is written
    said = zygote.run(
        ["--db", url, "--json", "task", "comment", task, "again"], cwd=tmp_path, env=env
    )
    assert said.returncode == 0, said.stderr
    with open_host(url, read_only=True) as host:
        assert [c.body for c in host.comments.list(task)] == ["again"]

    # a usage error: click's status 2 and one message on stderr, nothing on stdout
    wrong = zygote.run(["--db", url, "no-such-command"], cwd=tmp_path, env=env)
    assert wrong.returncode == 2
    assert wrong.stdout == ""
    assert "no-such-command" in wrong.stderr
