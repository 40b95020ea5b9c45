"""A task's worktree against a plain `git worktree add`, on a repository of 10,000 files
(issue 23's benchmark).

    python -m tests.benchmarks.bench_worktrees            # 10,000 files, 5 of each
    python -m tests.benchmarks.bench_worktrees --files 50000 --repeat 3

Both are timed in the same run on the same repository (a fresh SQLite board in a temporary
directory, deleted afterwards). The baseline is git alone: `git worktree add -b BRANCH PATH
main`. laneway's figure is `core.services.worktrees.workspace_for` on a task's first turn: the
conditional update that records the worktree, the per-task lock, git's own checks
(`worktree list`, `show-ref`, `prune`) and the same `git worktree add`. A later turn's call
(the worktree already there) is shown too. The cost laneway adds is a few git invocations and
one transaction, so the ratio should stay under 1.5 and the reuse under 0.1 s.
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

from core.services.worktrees import workspace_for  # noqa: E402
from tests.agents.conftest import PLAIN  # noqa: E402
from tests.conftest import open_host  # noqa: E402


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def make_repo(path: Path, files: int) -> None:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    for i in range(files):
        sub = path / f"d{i // 500:03}"
        sub.mkdir(exist_ok=True)
        (sub / f"f{i:06}.txt").write_text(f"file {i}\n" * 4)
    git(path, "add", "-A")
    git(path, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "files")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="laneway-bench-wt-") as tmp:
        root = Path(tmp)
        repo = root / "repo"
        make_repo(repo, args.files)
        os.environ["LANEWAY_WORKTREES"] = str(root / "laneway")
        plain, first, again = [], [], []
        (root / "plain.yml").write_text(PLAIN)
        with open_host(f"sqlite:///{root / 'board.db'}") as host:
            (wf,) = host.workflows.import_file(root / "plain.yml")
            host.workflows.set_repository(wf.id, str(repo), "main")
            for n in range(args.repeat):
                started = time.perf_counter()
                git(
                    repo,
                    "worktree",
                    "add",
                    "-q",
                    "-b",
                    f"bench/{n}",
                    str(root / f"plain-{n}"),
                    "main",
                )
                plain.append(time.perf_counter() - started)
                task = host.tasks.create(workflow=wf.id, title=f"t{n}").id
                started = time.perf_counter()
                workspace_for(host, task)
                first.append(time.perf_counter() - started)
                started = time.perf_counter()
                workspace_for(host, task)
                again.append(time.perf_counter() - started)
    base, made, reuse = (statistics.median(x) for x in (plain, first, again))
    print(f"repository: {args.files:,} files; median of {args.repeat}")
    print(f"  git worktree add            {base:8.3f} s")
    print(f"  laneway, first turn         {made:8.3f} s   ({made / base:.2f}x git)")
    print(f"  laneway, a later turn       {reuse:8.3f} s")


if __name__ == "__main__":
    main()
