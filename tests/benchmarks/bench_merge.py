"""`task merge` of a 1,000-file change against `git merge` of the same branch by hand
(issue 40's benchmark).

    python -m tests.benchmarks.bench_merge                 # 1,000 changed files of 2,000, 5 of each
    python -m tests.benchmarks.bench_merge --changed 5000 --files 10000 --repeat 3

One repository (a fresh SQLite board in a temporary directory, deleted afterwards): `main`
with `--files` files, and a task whose worktree branch changes `--changed` of them (committed),
while main gained one commit of its own meanwhile (so every figure is a real three-way merge).
Between repetitions main is put back where it was (`update-ref`), so each merge is a fresh one.

- `git merge --no-ff` by hand: in a checkout of main, as a person would; git also writes the
  merged files into that checkout;
- laneway, in process: `host.changes.merge(task, strategy=...)` for merge, squash and rebase
  (merge-tree + commit-tree + update-ref; rebase replays in a scratch worktree, which checks
  out every file once);
- laneway, the command: `laneway task merge T` as a subprocess (Python's start and the host's
  opening included).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from core.services.worktrees import workspace_for  # noqa: E402
from tests.agents.conftest import PLAIN  # noqa: E402
from tests.conftest import open_host  # noqa: E402

IDENT = ("-c", "user.name=b", "-c", "user.email=b@b")


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def make_repo(path: Path, files: int) -> None:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    for i in range(files):
        sub = path / f"d{i // 500:03}"
        sub.mkdir(exist_ok=True)
        (sub / f"f{i:06}.txt").write_text(f"file {i}\n" * 4)
    (path / "MAIN.txt").write_text("main\n")
    git(path, "add", "-A")
    git(path, *IDENT, "commit", "-q", "-m", "files")


def timed(repeat: int, reset: Callable[[], None], work: Callable[[], object]) -> list[float]:
    found = []
    for _ in range(repeat):
        reset()
        start = time.perf_counter()
        work()
        found.append(time.perf_counter() - start)
    return found


def line(name: str, times: list[float], base: float | None = None) -> str:
    med = statistics.median(times)
    ratio = f"  ({med / base:.2f}x git merge)" if base else ""
    return f"{name:<38} median {med * 1000:8.1f} ms  min {min(times) * 1000:8.1f} ms{ratio}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2_000)
    parser.add_argument("--changed", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="laneway-bench-merge-") as tmp:
        root = Path(tmp)
        repo = root / "repo"
        make_repo(repo, args.files)
        os.environ["LANEWAY_WORKTREES"] = str(root / "laneway")
        url = f"sqlite:///{root / 'board.db'}"
        with open_host(url) as host:
            (root / "plain.yml").write_text(PLAIN)
            (wf,) = host.workflows.import_file(root / "plain.yml")
            host.workflows.set_repository(wf.id, str(repo), None)
            task = host.tasks.create(workflow=wf.id, title="a large change").id
            path = workspace_for(host, task)
        for i in range(args.changed):
            target = path / f"d{i // 500:03}" / f"f{i:06}.txt"
            target.write_text(target.read_text() + f"changed by the agent {i}\n")
        git(path, "add", "-A")
        git(path, *IDENT, "commit", "-q", "-m", "the agent's change")
        branch = git(path, "branch", "--show-current")
        # main moves on meanwhile: every merge is a three-way one
        (repo / "MAIN.txt").write_text("main, later\n")
        git(repo, "add", "-A")
        git(repo, *IDENT, "commit", "-q", "-m", "main moves on")
        start = git(repo, "rev-parse", "main")

        by_hand = root / "by-hand"
        git(root, "clone", "-q", str(repo), str(by_hand))
        git(by_hand, "fetch", "-q", "origin", f"{branch}:{branch}")

        def reset_by_hand() -> None:
            git(by_hand, "reset", "-q", "--hard", start)

        def reset_repo() -> None:
            git(repo, "update-ref", "refs/heads/main", start)

        figures = {
            "git merge --no-ff (by hand)": timed(
                args.repeat,
                reset_by_hand,
                lambda: git(by_hand, *IDENT, "merge", "-q", "--no-ff", "-m", "m", branch),
            )
        }
        with open_host(url) as host:
            for strategy in ("merge", "squash", "rebase"):
                figures[f"laneway merge, {strategy} (in process)"] = timed(
                    args.repeat,
                    reset_repo,
                    lambda s=strategy: host.changes.merge(task, strategy=s),
                )
        laneway = str(Path(sys.executable).with_name("laneway"))
        figures["laneway task merge (the command)"] = timed(
            args.repeat,
            reset_repo,
            lambda: subprocess.run(
                [laneway, "--db", url, "task", "merge", task],
                check=True,
                capture_output=True,
                env={**os.environ, "LANEWAY_PLUGINS_ALLOW": "kanban,office"},
            ),
        )
        base = statistics.median(figures["git merge --no-ff (by hand)"])
        print(f"{args.changed} files changed of {args.files}; {args.repeat} of each")
        for name, times in figures.items():
            print(line(name, times, None if name.startswith("git") else base))


if __name__ == "__main__":
    main()
