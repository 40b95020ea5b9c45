"""Issue 43 item 4: an agent in a sandbox (`profile --sandbox bwrap [--network off]`) sees only
its own room. A real worker (`laneway worker --once`) runs an exec agent that tries what an
agent must not do (read the board's database and its lock files, write outside its worktree,
list another task's worktree, read the worker's home, reach a TCP listener on the worker's
loopback) and says on stdout what it could do; the same agent without a sandbox can do all of
it, so each refusal is the sandbox's. The turn goes on: it writes its own worktree and home,
and its turn ends well. Real git repository, both databases."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from core.agents import worker
from core.host import Host
from tests.acp.test_real_adapters import adapter
from tests.agents.conftest import enqueue, laneway, laneway_script, plain_workflow, script_env
from tests.agents.test_acp_worker import Board as AcpBoard
from tests.agents.test_worktrees import make_repo
from tests.conftest import open_host

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap (Debian: bubblewrap)"),
]

PROBE = textwrap.dedent(
    """\
    #!/usr/bin/python3
    # Tries what a sandboxed agent must not do; one line per try: `name: ok` or `name: refused`.
    import json, os, socket, sys
    sys.stdin.read()
    probes = json.loads(os.environ["PROBES"])

    def say(name, fn):
        try:
            fn()
        except OSError as exc:
            print(f"{name}: refused ({type(exc).__name__})", flush=True)
        else:
            print(f"{name}: ok", flush=True)

    for path in probes["read"]:
        say("read " + path, lambda: open(path, "rb").read(1))
    for path in probes["list"]:
        say("list " + path, lambda: os.listdir(path) or open(os.path.join(path, "x")))
    for path in probes["write"]:
        say("write " + path, lambda: open(path, "w").write("agent was here"))

    def connect():
        with socket.create_connection(("127.0.0.1", probes["port"]), timeout=5) as s:
            s.recv(1)

    say("connect", connect)
    say("own worktree", lambda: open("mine.txt", "w").write("mine"))
    say("own home", lambda: open(os.path.join(os.environ["HOME"], ".agentrc"), "w").write("1"))
    say("tmp", lambda: open(os.path.join(os.environ.get("TMPDIR", "/tmp"), "t"), "w").write("1"))
    """
)


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP listener on the worker's loopback that answers one byte to every connection."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.sendall(b"!")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield port
    stop.set()
    thread.join()
    server.close()


def _said(url: str, task_id: str) -> dict[str, str]:
    """The probe's lines of the task's sessions' transcripts, `name -> ok|refused`."""
    found: dict[str, str] = {}
    with open_host(url) as host:
        for session in host.sessions.list(task=task_id):
            for item in host.sessions.items(session.id):
                name, sep, verdict = item.text.partition(": ")
                if item.kind == "output" and sep:
                    found[name] = verdict.split(" ")[0]
    return found


def _home_and_probe(tmp_path: Path) -> tuple[Path, Path]:
    """The worker's home with a secret in it, and the probe agent's program."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "secret").write_text("the worker's")
    agents = tmp_path / "agents"
    agents.mkdir()
    probe = agents / "probe.py"
    probe.write_text(PROBE)
    probe.chmod(0o755)
    return home, probe


def test_issue_43_item_4_a_sandboxed_agent_is_refused_what_is_not_its_room(
    db_url: str, tmp_path: Path, listener: int
) -> None:
    repo = make_repo(tmp_path / "repo")
    worktrees = tmp_path / "wt"
    other = worktrees / "another-task"
    other.mkdir(parents=True)
    (other / "x").write_text("another task's work")
    home, probe = _home_and_probe(tmp_path)
    outside = tmp_path / "outside.txt"
    reads = [str(home / "secret"), str(other / "x")]
    if db_url.startswith("sqlite"):
        db = Path(db_url.removeprefix("sqlite:///")).resolve()
        reads.append(str(db))
        epochs = db.with_name(db.name + ".epochs")
        lists = [str(epochs)]
    else:
        lists = []
    probes = {"read": reads, "list": [*lists, str(other)], "write": [str(outside), str(repo / "y")]}
    env = {"LANEWAY_WORKTREES": str(worktrees), "HOME": str(home)}
    with open_host(db_url) as host:
        wf = plain_workflow(host, tmp_path)
        host.workflows.set_repository(wf, str(repo), "main")

        def given(name: str) -> dict[str, Any]:
            writes = [f"{p}-{name}" for p in probes["write"]]
            said = {**probes, "write": writes, "port": listener}
            return {"command": [str(probe)], "env": {"PROBES": json.dumps(said)}}

        boxed = host.profiles.add("boxed", sandbox="bwrap", network="off", **given("boxed"))
        open_ = host.profiles.add("open", **given("open"))
        tasks = {}
        for profile in (boxed, open_):
            task = host.tasks.create(workflow=wf, title=profile.name)
            host.sessions.start(task.id, profile=profile.name, external=False)
            enqueue(host, profile.id, task.id)
            tasks[profile.name] = task.id
    for _ in tasks:
        done = laneway("--db", db_url, "worker", "--once", cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
    # a write outside its room never reaches the machine (it lands in the room's own empty
    # /tmp at most, gone with it); without a sandbox it does
    reached = {n: [Path(f"{p}-{n}").exists() for p in probes["write"]] for n in tasks}
    assert reached == {"boxed": [False, False], "open": [True, True]}

    boxed_said = _said(db_url, tasks["boxed"])
    open_said = _said(db_url, tasks["open"])
    tried = [f"read {p}" for p in reads] + [f"list {p}" for p in probes["list"]]
    tried += ["connect"]
    # without a sandbox the agent has every right of the worker's user
    assert {name: open_said.get(name) for name in tried} == dict.fromkeys(tried, "ok")
    # in one, each of them is refused, and the turn goes on
    assert {name: boxed_said.get(name) for name in tried} == dict.fromkeys(tried, "refused")
    for name in ("own worktree", "own home", "tmp"):
        assert boxed_said[name] == "ok", boxed_said
    with open_host(db_url) as host:
        task = host.tasks.get(tasks["boxed"])
        assert task.workspace is not None
        assert (Path(task.workspace["path"]) / "mine.txt").read_text() == "mine"
        (session,) = host.sessions.list(task=task.id)
        assert session.state == "WAITING_FOR_INPUT"
    assert (worktrees / ".homes" / tasks["boxed"] / ".agentrc").exists()
    assert not (home / ".agentrc").exists() or open_said["own home"] == "ok"
    assert "agent was here" not in (other / "x").read_text()


@pytest.mark.one_database
def test_issue_43_item_4_a_task_without_a_repository_works_in_a_room_of_its_own(
    db_url: str, tmp_path: Path, listener: int
) -> None:
    """A sandboxed turn of a task with no repository ran in the worker's own directory, and
    the room bound that directory over what it hid: a worker started in its home showed the
    agent the whole home. The turn now runs in `LANEWAY_WORKTREES/.rooms/<task>`; the
    worker's home stays hidden, and the agent writes only in its own directory."""
    worktrees = tmp_path / "wt"
    home, probe = _home_and_probe(tmp_path)
    probes = {"read": [str(home / "secret")], "list": [str(home)], "write": [], "port": listener}
    with open_host(db_url) as host:
        wf = plain_workflow(host, tmp_path)  # no repository
        boxed = host.profiles.add(
            "boxed", sandbox="bwrap", command=[str(probe)], env={"PROBES": json.dumps(probes)}
        )
        task = host.tasks.create(workflow=wf, title="no repository")
        host.sessions.start(task.id, profile="boxed", external=False)
        enqueue(host, boxed.id, task.id)
    env = {"LANEWAY_WORKTREES": str(worktrees), "HOME": str(home)}
    done = laneway("--db", db_url, "worker", "--once", cwd=home, env=env)
    assert done.returncode == 0, done.stderr
    said = _said(db_url, task.id)
    assert said[f"read {home / 'secret'}"] == "refused", said
    assert said[f"list {home}"] == "refused", said
    assert said["own worktree"] == "ok", said
    assert (worktrees / ".rooms" / task.id / "mine.txt").read_text() == "mine"
    assert not (home / "mine.txt").exists()


SPAWNER = textwrap.dedent(
    """\
    #!/usr/bin/python3
    # Starts three sleepers carrying MARK on their command line (one in its group, one that
    # left it with setsid, one double-forked away), says so, and waits.
    import os, subprocess, sys, time
    sys.stdin.read()
    cmd = ["/usr/bin/python3", "-c", "import time; time.sleep(600)", os.environ["MARK"]]
    subprocess.Popen(cmd)
    subprocess.Popen(cmd, start_new_session=True)
    if os.fork() == 0:
        if os.fork() == 0:
            os.setsid()
            os.execv(cmd[0], cmd)
        os._exit(0)
    print("started", flush=True)
    time.sleep(600)
    """
)


def _marked(mark: str) -> list[int]:
    """The processes of the machine carrying `mark` on their command line."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if mark.encode() in cmdline and state not in ("Z", "X"):
            found.append(int(name))
    return found


def _until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.one_database
@pytest.mark.parametrize("end", ["turn timeout", "worker killed with -9"])
def test_issue_43_item_4_the_orphan_rules_hold_in_a_sandbox(
    db_url: str, tmp_path: Path, end: str
) -> None:
    """What a sandboxed agent starts (in its group, out of it by setsid, double-forked) dies
    with its turn: when the turn times out (the worker's group kill) and when the worker is
    killed with -9 mid-turn (the parent-death signal, bwrap's --die-with-parent and its PID
    namespace)."""
    repo = make_repo(tmp_path / "repo")
    agents = tmp_path / "agents"
    agents.mkdir()
    spawner = agents / "spawner.py"
    spawner.write_text(SPAWNER)
    spawner.chmod(0o755)
    mark = f"laneway-test-mark-{uuid.uuid4().hex}"
    env = {"LANEWAY_WORKTREES": str(tmp_path / "wt")}
    timeout = 4.0 if end == "turn timeout" else 600.0
    with open_host(db_url) as host:
        wf = plain_workflow(host, tmp_path)
        host.workflows.set_repository(wf, str(repo), "main")
        profile = host.profiles.add(
            "boxed",
            command=[str(spawner)],
            env={"MARK": mark},
            sandbox="bwrap",
            turn_timeout=timeout,
        )
        task = host.tasks.create(workflow=wf, title="spawns")
        host.sessions.start(task.id, profile="boxed", external=False)
        enqueue(host, profile.id, task.id)
    worker = subprocess.Popen(
        [laneway_script(), "--db", db_url, "worker", "--once"],
        cwd=tmp_path,
        env=script_env(env),
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "worker.log").open("w"),
    )
    try:
        _until(lambda: len(_marked(mark)) == 3, 60, "the agent's three sleepers")
        if end == "worker killed with -9":
            worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=60)
        _until(lambda: not _marked(mark), 10, "the sleepers to die with the turn")
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=10)
        for pid in _marked(mark):
            os.kill(pid, signal.SIGKILL)


FAKE = str(Path(__file__).resolve().with_name("fake_acp_agent.py"))

ACP_PROBE = textwrap.dedent(
    """\
    import json, os, socket
    probes = json.loads(os.environ["PROBES"])
    said = []
    for path in probes["read"]:
        try:
            open(path, "rb").read(1)
            said.append(f"read {path}: ok")
        except OSError:
            said.append(f"read {path}: refused")
    try:
        socket.create_connection(("127.0.0.1", probes["port"]), timeout=5).close()
        said.append("connect: ok")
    except OSError:
        said.append("connect: refused")
    open("acp-mine.txt", "w").write("mine")
    result = " | ".join(said)
    """
)


@pytest.mark.one_database
def test_issue_43_item_4_an_acp_agent_and_its_tool_server_in_a_sandbox(
    db_url: str, tmp_path: Path, listener: int
) -> None:
    """An ACP agent (the fake one, SDK side) in a sandbox with `--network off`: it cannot read
    the board's database or the worker's home, nor reach the worker's loopback; the `laneway`
    tool server it starts still reaches the worker's broker (a unix socket) and answers
    `get_task`; it writes its worktree."""
    repo = make_repo(tmp_path / "repo")
    home = tmp_path / "home"
    home.mkdir()
    (home / "secret").write_text("the worker's")
    db = Path(db_url.removeprefix("sqlite:///")).resolve()
    probes = {"read": [str(db), str(home / "secret")], "port": listener}
    script = {"turns": [[{"python": ACP_PROBE}, {"mcp": {"tool": "get_task", "args": {}}}]]}
    env = {"LANEWAY_WORKTREES": str(tmp_path / "wt"), "HOME": str(home)}
    with open_host(db_url) as host:
        wf = plain_workflow(host, tmp_path)
        host.workflows.set_repository(wf, str(repo), "main")
        profile = host.profiles.add(
            "boxed",
            command=[sys.executable, FAKE],
            protocol="acp",
            env={"FAKE_ACP_SCRIPT": json.dumps(script), "PROBES": json.dumps(probes)},
            sandbox="bwrap",
            network="off",
        )
        task = host.tasks.create(workflow=wf, title="acp in a box")
        host.sessions.start(task.id, profile="boxed", external=False)
        enqueue(host, profile.id, task.id)
    done = laneway("--db", db_url, "worker", "--once", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    with open_host(db_url) as host:
        (session,) = host.sessions.list(task=task.id)
        text = "\n".join(i.text for i in host.sessions.items(session.id) if i.kind == "message")
        workspace = host.tasks.get(task.id).workspace
    assert f"read {db}: refused" in text, text
    assert f"read {home / 'secret'}: refused" in text
    assert "connect: refused" in text
    answer = json.loads(text.split("mcp get_task: ", 1)[1].splitlines()[0])
    assert answer["task"]["id"] == task.id  # the tool server reached the worker's broker
    assert workspace is not None
    assert (Path(workspace["path"]) / "acp-mine.txt").read_text() == "mine"


INSTALLED = textwrap.dedent(
    """\
    #!/usr/bin/python3
    # An agent installed in the worker's home (~/.local/bin): it writes its worktree and its
    # own home, and reads a data file installed beside it.
    import os, sys
    sys.stdin.read()
    here = os.path.dirname(os.path.abspath(__file__))
    data = open(os.path.join(here, "agent-data.txt")).read()
    secret = os.path.exists(os.path.join(os.environ["HOME"], "secret"))
    open("installed.txt", "w").write(f"{data}; the worker's secret seen: {secret}")
    open(os.path.join(os.environ["HOME"], ".agent-state"), "w").write("1")
    """
)


def test_issue_43_item_4_an_agent_installed_in_the_workers_home_runs_in_the_sandbox(
    db_url: str, tmp_path: Path
) -> None:
    """The worker's home is hidden (the agent gets a home of its own at its path), yet what the
    agent needs from under it stays visible, read-only: an agent installed in `~/.local/bin`
    (as npm or pip install for a user), or a worker whose Python lives in its home (pyenv's
    `~/.pyenv`: the `laneway` tool server is that Python). It starts, writes its worktree and
    its own home (the task's, under LANEWAY_WORKTREES/.homes), and the worker's home is not
    written; the secret beside the program stays hidden."""
    repo = make_repo(tmp_path / "repo")
    worktrees = tmp_path / "wt"
    home = tmp_path / "home"
    installed = home / ".local" / "bin"
    installed.mkdir(parents=True)
    (home / "secret").write_text("the worker's")
    agent = installed / "agent"
    agent.write_text(INSTALLED)
    agent.chmod(0o755)
    (installed / "agent-data.txt").write_text("installed in the worker's home")
    with open_host(db_url) as host:
        wf = plain_workflow(host, tmp_path)
        host.workflows.set_repository(wf, str(repo), "main")
        profile = host.profiles.add("boxed", command=[str(agent)], sandbox="bwrap")
        task = host.tasks.create(workflow=wf, title="installed")
        host.sessions.start(task.id, profile="boxed", external=False)
        enqueue(host, profile.id, task.id)
    env = {"LANEWAY_WORKTREES": str(worktrees), "HOME": str(home)}
    done = laneway("--db", db_url, "--json", "worker", "--once", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["finished"] == 1, done.stderr
    with open_host(db_url) as host:
        workspace = host.tasks.get(task.id).workspace
    assert workspace is not None
    written = Path(workspace["path"]) / "installed.txt"
    assert written.read_text() == "installed in the worker's home; the worker's secret seen: False"
    assert (worktrees / ".homes" / task.id / ".agent-state").exists()
    assert not (home / ".agent-state").exists()


def test_issue_43_item_4_a_missing_bwrap_is_r2_naming_the_package(
    host: Host, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that cannot find `bwrap` fails a sandboxed profile's turn R2, in one line
    naming the Debian package; the turn's on_agent_error runs as for any R2."""
    wf = plain_workflow(host, tmp_path)
    profile = host.profiles.add("boxed", command=["/bin/true"], sandbox="bwrap")
    task = host.tasks.create(workflow=wf, title="no bwrap here")
    host.sessions.start(task.id, profile="boxed", external=False)
    run_id = enqueue(host, profile.id, task.id)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))

    summary = worker.work(host, once=True)

    assert (summary.claimed, summary.failed) == (1, 1)
    run = host.runs.get(run_id)
    assert run is not None
    assert run.error_message == (
        "the profile's sandbox needs bwrap, which is not installed "
        "(the Debian package 'bubblewrap': apt-get install bubblewrap)"
    )
    (session,) = host.sessions.list(task=task.id)
    assert session.metadata["last_agent_error"]["route"] == "R2"


def test_issue_43_item_4_profile_sandbox_and_network_on_the_command_line(tmp_path: Path) -> None:
    """`profile add|set --sandbox none|bwrap --network on|off`: stored and shown (`--json`:
    `sandbox`, `network`); a value not among them is one line naming it, exit 1."""
    db = f"sqlite:///{tmp_path / 'board.db'}"
    assert laneway("--db", db, "init", cwd=tmp_path).returncode == 0
    add = ("profile", "add", "p", "--command", "true", "--sandbox", "bwrap")
    added = laneway("--db", db, "--json", *add, "--network", "off", cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    assert (json.loads(added.stdout)["sandbox"], json.loads(added.stdout)["network"]) == (
        "bwrap",
        "off",
    )
    changed = laneway("--db", db, "--json", "profile", "set", "p", "--network", "on", cwd=tmp_path)
    assert json.loads(changed.stdout)["network"] == "on"
    assert json.loads(changed.stdout)["sandbox"] == "bwrap"
    (listed,) = json.loads(laneway("--db", db, "--json", "profile", "list", cwd=tmp_path).stdout)
    assert (listed["sandbox"], listed["network"]) == ("bwrap", "on")
    bad = laneway("--db", db, "profile", "set", "p", "--sandbox", "docker", cwd=tmp_path)
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines() == [
        "laneway: profile 'p', sandbox: 'docker' is not one of none, bwrap"
    ]
    # --network off is a sandbox's: refused without one, rather than promised and not kept
    add = ("profile", "add", "q", "--command", "true", "--network", "off")
    bad = laneway("--db", db, *add, cwd=tmp_path)
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines() == [
        (
            "laneway: profile 'q', network: off needs a sandbox (--sandbox bwrap); without one "
            "the agent has the worker's network"
        )
    ]
    laneway("--db", db, "profile", "set", "p", "--network", "off", cwd=tmp_path)
    bad = laneway("--db", db, "profile", "set", "p", "--sandbox", "none", cwd=tmp_path)
    assert bad.returncode == 1
    assert "network: off needs a sandbox" in bad.stderr
    shown = laneway("--db", db, "profile", "list", cwd=tmp_path).stdout
    assert "sandbox=bwrap  network=off  command=true" in shown


@pytest.mark.one_database
def test_issue_43_item_4_the_real_claude_adapter_starts_in_a_sandbox_without_network(
    db_url: str, tmp_path: Path
) -> None:
    """claude-agent-acp (npm, on Debian's node) in `--sandbox bwrap --network off`: it starts,
    initialises, opens a session in its room and offers its modes, writing only
    its own home; with no credentials and no network its turn then fails R3 with its own
    "Authentication required", as it does outside a sandbox (test_acp_real_worker). A scripted
    turn against a model stand-in is not here: no stand-in of the model API is in the tree."""
    home = tmp_path / "home"
    home.mkdir()
    board = AcpBoard(
        db_url,
        tmp_path,
        {},
        command=[adapter("claude-agent-acp")],
        permissions="deny",
        sandbox="bwrap",
        network="off",
    )
    board.work(env={"HOME": str(home), "LANEWAY_RETRY_DELAYS": "0.1"})
    step, session, _items = board.read()
    assert "plan" in session.agent["modes"]
    error = session.metadata["last_agent_error"]
    assert error["route"] == "R3", error
    assert "Authentication required" in error["message"]
    assert step == "Trouble"
    # what it wrote of its own went to the task's home, not the worker's
    assert not (home / ".claude.json").exists()
    homes = home / ".local" / "share" / "laneway" / "worktrees" / ".homes"
    assert (homes / board.task_id / ".claude.json").exists()


COMMITTER = textwrap.dedent(
    """\
    #!/bin/sh
    # Commits in its worktree, then tries to plant a hook and change the repository's config.
    cat > /dev/null
    echo work > work.txt
    git add work.txt && git commit -q -m "agent's work" && echo "commit: ok"
    common=$(git rev-parse --git-common-dir)
    (echo 'echo pwned' > "$common/hooks/post-commit") 2>/dev/null && echo "hook: ok" \\
        || echo "hook: refused"
    git config --file "$common/config" core.hooksPath /tmp 2>/dev/null && echo "config: ok" \\
        || echo "config: refused"
    """
)


@pytest.mark.one_database
def test_issue_43_item_4_a_sandboxed_agent_commits_but_plants_no_hook(
    db_url: str, tmp_path: Path
) -> None:
    """git works in the room (objects, refs, logs and the worktree's own git directory are
    writable): the agent's commit is on the task's branch in the repository; the repository's
    hooks and config stay read-only, so it cannot plant what a person's git would run."""
    repo = make_repo(tmp_path / "repo")
    agents = tmp_path / "agents"
    agents.mkdir()
    committer = agents / "commit.sh"
    committer.write_text(COMMITTER)
    committer.chmod(0o755)
    identity = {
        f"GIT_{who}_{what}": value
        for who in ("AUTHOR", "COMMITTER")
        for what, value in (("NAME", "agent"), ("EMAIL", "agent@example.com"))
    }
    with open_host(db_url) as host:
        wf = plain_workflow(host, tmp_path)
        host.workflows.set_repository(wf, str(repo), "main")
        profile = host.profiles.add(
            "boxed", command=[str(committer)], env=identity, sandbox="bwrap"
        )
        task = host.tasks.create(workflow=wf, title="commits")
        host.sessions.start(task.id, profile="boxed", external=False)
        enqueue(host, profile.id, task.id)
    env = {"LANEWAY_WORKTREES": str(tmp_path / "wt")}
    done = laneway("--db", db_url, "worker", "--once", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    said = _said(db_url, task.id)
    assert (said.get("commit"), said.get("hook"), said.get("config")) == (
        "ok",
        "refused",
        "refused",
    ), said
    branch = f"laneway/{task.id[-8:]}"
    shown = subprocess.run(
        ["git", "log", "-1", "--format=%s", branch],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.strip() == "agent's work"
    assert not (repo / ".git" / "hooks" / "post-commit").exists()
