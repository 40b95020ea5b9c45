"""Issue 43 items 1 and 2, second proof ("two real network namespaces ... with their own UTS
names"): two machines made of Linux namespaces instead of `LANEWAY_HOST`.

Each "machine" is a network namespace (`ip netns`) joined to the root namespace by a veth
pair, and its workers run in a UTS namespace of their own (`unshare --uts` + `hostname`), so
laneway learns its host from the host name alone (LANEWAY_HOST is unset). The board is the
shared PostgreSQL server in the root namespace: it listens on 127.0.0.1 only, which another
network namespace cannot reach, so the test relays TCP from each veth's root-side address to
it (the workers reach the board over a real network link, as from another machine). The
files (the repository, the bare remote, each machine's `LANEWAY_WORKTREES`) are on the one
filesystem, as a shared path would be.

Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2 (.ci/run installs it); skipped saying
why elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from tests.agents.conftest import enqueue, laneway_script, python_agent, script_env
from tests.agents.test_branches_travel import remote_files
from tests.agents.test_worktrees import board, git, make_repo
from tests.conftest import open_host

pytestmark = [
    pytest.mark.slow,  # real worker processes: the subprocess tier
    # the board must be reachable over the network from the other namespaces: PostgreSQL
    pytest.mark.parametrize("db_url", ["postgresql"], indirect=True),
]


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


def _must(*args: str) -> None:
    done = _ip(*args)
    assert done.returncode == 0, f"ip {' '.join(args)}: {done.stderr.strip()}"


class Relay:
    """Forwards every TCP connection to `listen` on to `target` (a thread per direction)."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.server = socket.create_server(listen)
        self.target = target
        self.port: int = self.server.getsockname()[1]
        self.stopped = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                conn.close()
                continue
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.server.close()
        self.thread.join(timeout=5)


class Machine:
    """A network namespace joined to the root one by a veth pair, with a host name for its
    workers' UTS namespaces."""

    def __init__(self, tag: str, name: str, subnet: str) -> None:
        self.netns = f"lw-{tag}-{name}"
        self.hostname = f"{name}-{tag}"
        self.outside = f"lw{tag}{name[0]}0"  # interface names: at most 15 characters
        self.inside = f"lw{tag}{name[0]}1"
        self.gateway = f"{subnet}.1"
        self.address = f"{subnet}.2"

    def create(self) -> None:
        """The veth pair and its addresses (the namespace is made already)."""
        _must("link", "add", self.outside, "type", "veth", "peer", "name", self.inside)
        _must("link", "set", self.inside, "netns", self.netns)
        _must("addr", "add", f"{self.gateway}/30", "dev", self.outside)
        _must("link", "set", self.outside, "up")
        for args in (
            ("addr", "add", f"{self.address}/30", "dev", self.inside),
            ("link", "set", self.inside, "up"),
            ("link", "set", "lo", "up"),
        ):
            _must("-n", self.netns, *args)

    def remove(self) -> None:
        _ip("link", "del", self.outside)  # takes its peer with it
        _ip("netns", "del", self.netns)

    def worker(self, url: str, cwd: Path, worktrees: Path) -> dict[str, Any]:
        """`laneway worker --once` in this machine's namespaces, as JSON."""
        env = script_env({"LANEWAY_WORKTREES": str(worktrees)})
        env.pop("LANEWAY_HOST", None)
        # its own network namespace, then its own UTS namespace named for it
        inside = ["ip", "netns", "exec", self.netns, "unshare", "--uts", "--"]
        named = ["sh", "-c", 'hostname "$0" && exec "$@"', self.hostname]
        command = [laneway_script(), "--db", url, "--json", "worker", "--once"]
        done = subprocess.run(
            [*inside, *named, *command],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        found: dict[str, Any] = json.loads(done.stdout)
        return found


@pytest.fixture
def machines() -> Iterator[tuple[Machine, Machine]]:
    """alpha and beta, removed afterwards whatever happened; skipped where namespaces cannot
    be made (not root, no CAP_NET_ADMIN, no iproute2 or util-linux's unshare)."""
    for tool in ("ip", "unshare", "hostname"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool!r} is not installed (Debian: iproute2, util-linux, hostname)")
    if os.geteuid() != 0:
        pytest.skip("network and UTS namespaces need root (CAP_NET_ADMIN, CAP_SYS_ADMIN)")
    tag = uuid.uuid4().hex[:6]
    # RFC 2544's benchmarking range (198.18.0.0/15): no real network uses it; a /30 each
    b, c = random.choice((18, 19)), 2 * random.randint(0, 127)
    alpha, beta = Machine(tag, "alpha", f"198.{b}.{c}"), Machine(tag, "beta", f"198.{b}.{c + 1}")
    made: list[Machine] = []
    try:
        for m in (alpha, beta):
            added = _ip("netns", "add", m.netns)
            if added.returncode != 0:
                pytest.skip(f"ip netns is not permitted here: {added.stderr.strip()}")
            made.append(m)
            m.create()
        yield alpha, beta
    finally:
        for m in made:
            m.remove()


HOST_AGENT = python_agent(
    "import os, socket, sys; sys.stdin.read()\n"
    "me = socket.gethostname()\n"
    "log = os.environ['VISITS']\n"
    "n = len(open(log).read().splitlines()) if os.path.exists(log) else 0\n"
    "seen = sorted(p for p in os.listdir('.') if p.endswith('.txt'))\n"
    "open(log, 'a').write(me + ' saw ' + ','.join(seen) + '\\n')\n"
    "open(me + '-' + str(n) + '.txt', 'w').write(me)\n"
)
"""Logs `<its host name> saw <files>` and writes `<host name>-<n>.txt` in its worktree."""


def test_issue_43_items_1_2_two_network_namespaces_with_their_own_host_names(
    db_url: str, tmp_path: Path, machines: tuple[Machine, Machine]
) -> None:
    """alpha and beta are namespaces with their own host names (no LANEWAY_HOST), their
    workers on PostgreSQL over veth links. Without a remote, beta's worker never claims the
    run of alpha's task and nothing fails; alpha's worker runs it. With a remote (a bare
    repository on the shared path), alpha's turn pushes the task's branch and the next turn
    runs on beta, re-creating the worktree from the remote: it sees alpha's files."""
    alpha, beta = machines
    pg = make_url(db_url)
    relays = [Relay((m.gateway, 0), (pg.host or "127.0.0.1", pg.port or 5432)) for m in machines]
    try:
        urls = {
            m.hostname: pg.set(host=m.gateway, port=r.port).render_as_string(hide_password=False)
            for m, r in zip(machines, relays, strict=True)
        }
        log = tmp_path / "visits.log"
        wt = {m.hostname: tmp_path / f"worktrees-{m.hostname}" for m in machines}

        def work(m: Machine) -> dict[str, Any]:
            return m.worker(urls[m.hostname], tmp_path, wt[m.hostname])

        repo = make_repo(tmp_path / "repo")
        bare = tmp_path / "remote.git"
        git(tmp_path, "clone", "-q", "--bare", str(repo), str(bare))
        git(repo, "remote", "add", "origin", str(bare))
        with open_host(db_url) as host:
            wf = board(host, tmp_path, repo)
            task = host.tasks.create(workflow=wf, title="card").id
            agent = host.profiles.add("v", command=HOST_AGENT, env={"VISITS": str(log)}).id

            # no remote: the task's worktree is alpha's, only alpha's workers take its runs
            enqueue(host, agent, task)
            assert work(alpha)["finished"] == 1
            record = host.tasks.get(task).workspace
            assert record is not None
            assert record["host"] == alpha.hostname  # the UTS name, not LANEWAY_HOST
            assert Path(record["path"]) == wt[alpha.hostname] / task
            second = enqueue(host, agent, task)
            assert work(beta)["claimed"] == 0
            run = host.runs.get(second)
            assert run is not None
            assert run.status == "queued"
            assert host.runs.list(status="failed") == []
            assert work(alpha)["finished"] == 1

            # with a remote: alpha's next turn pushes the branch, beta takes the one after
            host.workflows.set_remote(wf, "origin")
            enqueue(host, agent, task)
            assert work(alpha)["finished"] == 1
            branch = record["branch"]
            assert remote_files(bare, branch) == [
                "README.md", f"{alpha.hostname}-0.txt", f"{alpha.hostname}-1.txt",
                f"{alpha.hostname}-2.txt",
            ]  # fmt: skip
            fourth = enqueue(host, agent, task)
            on_beta = work(beta)
            assert (on_beta["claimed"], on_beta["finished"], on_beta["failed"]) == (1, 1, 0)
            run = host.runs.get(fourth)
            assert run is not None
            assert run.status == "finished"
            moved = host.tasks.get(task).workspace
            assert moved is not None
            assert (moved["host"], moved["home_host"]) == (beta.hostname, alpha.hostname)
            assert Path(moved["path"]) == wt[beta.hostname] / task
            assert host.runs.list(status="failed") == []
        a = alpha.hostname
        assert log.read_text().splitlines() == [
            f"{a} saw ",
            f"{a} saw {a}-0.txt",
            f"{a} saw {a}-0.txt,{a}-1.txt",
            f"{beta.hostname} saw {a}-0.txt,{a}-1.txt,{a}-2.txt",
        ]
    finally:
        for r in relays:
            r.close()
