"""Issue 39 item 1: an agent of the worker's user cannot read the worker's secrets or another
run's tool capability through /proc, and a capability it finds anyway does not act for it
(docs/operations.md, "What an agent of the same user can and cannot reach").

A real `laneway worker` process with secrets in its environment and the database URL (with a
password) on its command line, exec and ACP agents (tests/agents/fake_acp_agent.py) probing
`/proc/$PPID/environ`, `/proc/$PPID/cmdline`, another run's MCP tool server's environ, and the
broker with that run's key and token; both databases. Run as root, the worker is started
without capabilities (`setpriv --bounding-set=-all`): root's CAP_SYS_PTRACE reads every
process's /proc whatever it does, as the docs say; a same-user process has no such power.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.agents.conftest import enqueue, laneway_script, plain_workflow, script_env
from tests.agents.test_acp_worker import FAKE
from tests.conftest import eventually, open_host

pytestmark = pytest.mark.slow

SECRETS = {"PGPASSWORD": "pg-secret-39", "AWS_SECRET_ACCESS_KEY": "aws-secret-39"}
PASSWORD = "url-password-39"

CAPLESS = (
    ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--"]
    if os.geteuid() == 0 and shutil.which("setpriv")
    else []
)


def _secret_url(db_url: str) -> str:
    """The URL the worker is given: PostgreSQL's with a password in it (the test server
    trusts local connections, so it is not checked, only carried)."""
    if db_url.startswith("postgresql://postgres@"):
        return db_url.replace("postgres@", f"postgres:{PASSWORD}@", 1)
    return db_url


def _worker(url: str, tmp_path: Path, *args: str, joined: bool = False) -> subprocess.Popen[str]:
    db = [f"--db={url}"] if joined else ["--db", url]
    return subprocess.Popen(
        [*CAPLESS, laneway_script(), *db, "worker", "--once", *args],
        cwd=tmp_path,
        env=script_env(SECRETS),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _ran(*workers: subprocess.Popen[str]) -> None:
    for worker in workers:
        _out, err = worker.communicate(timeout=180)
        assert worker.returncode == 0, err


PROBE = textwrap.dedent(
    """\
    def probe(pid):
        import os
        out = {}
        for name in ("environ", "cmdline", "mem"):
            try:
                with open(f"/proc/{pid}/{name}", "rb") as f:
                    out[name] = f.read(1 << 20).decode(errors="replace")
            except OSError as exc:
                out[name] = "refused: " + str(exc.strerror)
        return out
    """
)


def _assert_worker_closed(seen: dict[str, str], url: str) -> None:
    assert seen["environ"].startswith("refused"), seen["environ"][:200]
    assert seen["mem"].startswith("refused"), seen["mem"][:200]
    cmdline = seen["cmdline"]
    assert "worker" in cmdline  # it did read the worker's command line
    assert "--db" in cmdline
    assert url not in cmdline
    assert PASSWORD not in cmdline
    if url.startswith("sqlite:///"):
        assert url.removeprefix("sqlite:///") not in cmdline
    for value in SECRETS.values():
        assert value not in seen["environ"]
        assert value not in cmdline


@pytest.mark.parametrize("joined", [False, True], ids=["--db URL", "--db=URL"])
def test_issue_39_item_1_an_exec_agent_reads_nothing_secret_of_its_worker(
    db_url: str, tmp_path: Path, joined: bool
) -> None:
    out = tmp_path / "probe.json"
    code = PROBE + (
        "import json, os, sys\n"
        "sys.stdin.read()\n"
        f"open({str(out)!r}, 'w').write(json.dumps(probe(os.getppid())))\n"
    )
    with open_host(db_url) as host:
        workflow = plain_workflow(host, tmp_path)
        agent = host.profiles.add("agent", command=[sys.executable, "-c", code])
        task = host.tasks.create(workflow=workflow, title="probe")
        enqueue(host, agent.id, task.id)
    url = _secret_url(db_url)

    _ran(_worker(url, tmp_path, joined=joined))

    _assert_worker_closed(json.loads(out.read_text()), url)


ACP_YAML = textwrap.dedent(
    """\
    id: acp
    name: ACP
    steps:
      - id: backlog
        name: Backlog
        position: 0
        allow_manual_move: true
      - id: work
        name: Work
        position: 1
        is_start_step: true
        allow_manual_move: true
        prompt: "work on it"
        events:
          on_enter: [{"type": "auto_start_agent"}]
      - id: done
        name: Done
        position: 2
        allow_manual_move: true
    """
)

# Both runs' agents run this at once. The victim starts its `laneway` tool server as an agent
# does, waits until it answered `initialize` (it is running, past its start), and hands the
# test's attacker the server's pid and - standing for any way of finding it - its capability;
# the attacker probes the worker's and the server's /proc and calls the broker with the
# victim's capability, in the victim's name.
TURN = PROBE + textwrap.dedent(
    """\
    import json, os, subprocess, time
    from pathlib import Path
    shared = Path(SHARED)
    if os.environ.get("LANEWAY_TASK_ID") == (shared / "victim_task").read_text():
        (server,) = [s for s in servers if s["name"] == "laneway"]
        proc = subprocess.Popen(
            [server["command"], *server["args"]], env=server["env"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "victim", "version": "1"}}}
        proc.stdin.write((json.dumps(hello) + "\\n").encode()); proc.stdin.flush()
        proc.stdout.readline()
        (shared / "victim.json").write_text(json.dumps({"pid": proc.pid, "env": server["env"]}))
        deadline = time.monotonic() + 60
        while not (shared / "attacker.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.kill(); proc.wait()
        result = "victim done"
    else:
        deadline = time.monotonic() + 60
        while not (shared / "victim.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        victim = json.loads((shared / "victim.json").read_text())
        out = {"worker": probe(os.getppid()), "server": probe(victim["pid"])}
        from core.agents.tools.server import Channel
        env = victim["env"]
        channel = Channel(env["LANEWAY_TOOL_SOCKET"], bytes.fromhex(env["LANEWAY_TOOL_KEY"]),
                          env["LANEWAY_TOOL_TOKEN"])
        for tool, args in (("comment", {"text": "stolen"}), ("complete_step", {})):
            try:
                out[tool] = {"ok": channel.call(tool, args)}
            except Exception as exc:
                out[tool] = {"error": str(exc)}
        (shared / "attacker.json").write_text(json.dumps(out))
        result = "attacker done"
    """
)


@pytest.mark.parametrize("workers", [1, 2])
def test_issue_39_item_1_an_acp_agent_reads_nothing_secret_and_a_stolen_capability_is_refused(
    db_url: str, tmp_path: Path, workers: int
) -> None:
    """The victim's and the attacker's runs on one worker (`--concurrency 2`), or one on each
    of two workers."""
    shared = tmp_path / "shared"
    shared.mkdir()
    script = tmp_path / "script.json"
    code = f"SHARED = {str(shared)!r}\n" + TURN
    script.write_text(json.dumps({"turns": [[{"python": code}]]}))
    with open_host(db_url) as host:
        path = tmp_path / "acp.yml"
        path.write_text(ACP_YAML)
        (workflow,) = host.workflows.import_file(path)
        host.profiles.add(
            "fake",
            command=[sys.executable, FAKE],
            protocol="acp",
            env={"FAKE_ACP_SCRIPT_FILE": str(script)},
            max_concurrent_sessions=2,
        )
        host.participants.add(step="Work", role="runner", profile="fake", workflow=workflow.id)
        tasks = {}
        for role in ("victim", "attacker"):
            task = host.tasks.create(workflow=workflow.id, title=role, step="Backlog")
            tasks[role] = task.id
        (shared / "victim_task").write_text(tasks["victim"])
        for task_id in tasks.values():
            host.tasks.start(task_id)
    url = _secret_url(db_url)

    if workers == 1:
        _ran(_worker(url, tmp_path, "--concurrency", "2"))
    else:
        _ran(*[_worker(url, tmp_path, "--max-runs", "1") for _ in range(workers)])

    if not (shared / "attacker.json").exists():
        with open_host(db_url, read_only=True) as host:
            said = [
                (i.kind, i.text[:300])
                for t in tasks.values()
                for s in host.sessions.list(task=t)
                for i in host.sessions.items(s.id, limit=100)
            ]
        pytest.fail(f"the attacker did not finish: {said}")
    seen: dict[str, Any] = json.loads((shared / "attacker.json").read_text())
    _assert_worker_closed(seen["worker"], url)
    server = seen["server"]
    assert "core.agents.tools" in server["cmdline"]  # it found the victim's server
    assert server["environ"].startswith("refused"), server["environ"][:300]
    assert server["mem"].startswith("refused")
    for tool in ("comment", "complete_step"):
        assert "error" in seen[tool], seen[tool]
        assert "another run" in seen[tool]["error"]
    with open_host(db_url, read_only=True) as host:
        assert host.comments.list(tasks["victim"]) == []
        (session,) = host.sessions.list(task=tasks["victim"])
        assert not session.metadata.get("pending_step_signal")


def test_issue_39_item_1_serve_leaves_neither_url_nor_token_in_its_command_line(
    db_url: str, tmp_path: Path
) -> None:
    """`laneway serve` holds the URL and its bearer token: both gone from its cmdline (what
    any process may read) once it runs, and its environ closed to capability-less readers."""
    with open_host(db_url):
        pass  # the board exists
    url, token = _secret_url(db_url), "serve-token-39"
    serve = subprocess.Popen(
        [*CAPLESS, laneway_script(), "--db", url, "serve", "--port", "0", "--token", token],
        cwd=tmp_path,
        env=script_env(SECRETS),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        probe = (
            PROBE + f"import json; print(json.dumps(probe({serve.pid})))\n"
        )  # a capability-less reader, as an agent is
        seen: dict[str, str] = {}

        def scrubbed() -> bool:
            done = subprocess.run(
                [*CAPLESS, sys.executable, "-c", probe], capture_output=True, text=True, check=True
            )
            seen.update(json.loads(done.stdout))
            return "*" in seen["cmdline"]

        eventually(scrubbed, timeout=30, what="serve to be running")
        assert token not in seen["cmdline"]
        assert url not in seen["cmdline"]
        assert seen["environ"].startswith("refused")
    finally:
        serve.terminate()
        serve.communicate(timeout=30)
