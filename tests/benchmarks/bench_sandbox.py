"""What an agent's sandbox costs a turn (issue 43 item 4): the exec agent `true` with and
without `profile --sandbox bwrap`.

    python -m tests.benchmarks.bench_sandbox              # 30 of each
    python -m tests.benchmarks.bench_sandbox --repeat 100

(a) the process alone: `core.agents.protocols.exec_process.start` + `wait` of `true` as a turn
    starts it (setpriv's parent-death signal, its own process group, the watchdog's tracking,
    the leftovers' sweep), against the same with the command line `core.agents.sandbox` makes
    for a task's worktree (bwrap: namespaces, the read-only root, the tmpfs and bind mounts),
    the room's computing included;
(b) a whole turn: `worker.work(host, once=True)` over one queued run of an exec profile `true`
    whose task works in a worktree of a small repository (claim, prompt, the turn, its end),
    the profile unsandboxed against sandboxed.

Each figure is given as min / median / max in milliseconds, and the sandboxed one over the
plain one as the ratio of the medians (and of the minima). Both are timed in one run, on one
SQLite board in a temporary directory (deleted afterwards), alternating plain and sandboxed so
the machine's load falls on both alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from core.agents import sandbox, worker  # noqa: E402
from core.agents.protocols import exec_process  # noqa: E402
from core.ids import new_id  # noqa: E402
from core.runs import RunRequest  # noqa: E402
from core.services.worktrees import workspace_for  # noqa: E402
from tests.agents.conftest import PLAIN  # noqa: E402
from tests.conftest import open_host  # noqa: E402


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def spawn(command: tuple[str, ...], env: dict[str, str], cwd: Path) -> None:
    proc = exec_process.start(
        command, prompt="", env=env, execution_id=new_id(), on_message=lambda _m: None, cwd=cwd
    )
    result = proc.wait()
    assert result.ok, result.stderr_tail


def line(name: str, times: list[float]) -> str:
    ms = [t * 1000 for t in times]
    return (
        f"{name:<34} min {min(ms):7.1f}  median {statistics.median(ms):7.1f}  max {max(ms):7.1f} ms"
    )


def ratio(name: str, plain: list[float], boxed: list[float]) -> str:
    return (
        f"{name:<34} median {statistics.median(boxed) / statistics.median(plain):5.2f}x  "
        f"min {min(boxed) / min(plain):5.2f}x  max {max(boxed) / max(plain):5.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="laneway-bench-sandbox-") as tmp:
        root = Path(tmp)
        repo = root / "repo"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        (repo / "README").write_text("bench\n")
        git(repo, "add", "-A")
        git(repo, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "one")
        os.environ["LANEWAY_WORKTREES"] = str(root / "worktrees")
        (root / "plain.yml").write_text(PLAIN)
        env = {"PATH": os.environ.get("PATH", os.defpath)}
        with open_host(f"sqlite:///{root / 'board.db'}") as host:
            (wf,) = host.workflows.import_file(root / "plain.yml")
            host.workflows.set_repository(wf.id, str(repo), "main")
            plain_profile = host.profiles.add("plain", command=["true"])
            boxed_profile = host.profiles.add("boxed", command=["true"], sandbox="bwrap")
            task = host.tasks.create(workflow=wf.id, title="bench").id
            cwd = workspace_for(host, task)

            # (a) the process alone
            spawn(("true",), env, cwd)  # warm up both paths once
            room = sandbox.room(boxed_profile, cwd, task, host.store.url, repo=repo)
            assert room is not None
            spawn(room.wrap(("true",), env), room.env(env), cwd)
            plain_a: list[float] = []
            boxed_a: list[float] = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                spawn(("true",), env, cwd)
                plain_a.append(time.perf_counter() - started)
                started = time.perf_counter()
                room = sandbox.room(boxed_profile, cwd, task, host.store.url, repo=repo)
                assert room is not None
                spawn(room.wrap(("true",), env), room.env(env), cwd)
                boxed_a.append(time.perf_counter() - started)

            # (b) a whole turn through the worker
            sessions = {}
            for profile in (plain_profile, boxed_profile):
                made = host.tasks.create(workflow=wf.id, title=profile.name).id
                sessions[profile.id] = made
                host.sessions.start(made, profile=profile.name, external=False)

            def turn(profile_id: str) -> float:
                made = sessions[profile_id]
                host.runs.enqueue(
                    RunRequest(
                        agent_profile_id=profile_id,
                        task_id=made,
                        workflow_step_id=host.tasks.get(made).workflow_step_id,
                        reason="bench",
                        coalesce_exempt=True,
                    )
                )
                started = time.perf_counter()
                summary = worker.work(host, once=True)
                elapsed = time.perf_counter() - started
                assert (summary.claimed, summary.failed) == (1, 0), summary
                return elapsed

            turn(plain_profile.id)
            turn(boxed_profile.id)
            plain_b: list[float] = []
            boxed_b: list[float] = []
            for _ in range(args.repeat):
                plain_b.append(turn(plain_profile.id))
                boxed_b.append(turn(boxed_profile.id))

    version = subprocess.check_output(["bwrap", "--version"], text=True).strip()
    print(f"{args.repeat} of each, {version}")
    print(line("(a) process `true`, plain", plain_a))
    print(line("(a) process `true`, sandboxed", boxed_a))
    print(ratio("(a) sandboxed / plain", plain_a, boxed_a))
    print(line("(b) whole turn, plain", plain_b))
    print(line("(b) whole turn, sandboxed", boxed_b))
    print(ratio("(b) sandboxed / plain", plain_b, boxed_b))


if __name__ == "__main__":
    main()
