"""A task's worktree re-created from the remote on another machine vs `git worktree add` of the
same branch (issue 43's benchmark, item 2: "branches travel through the remote").

    python -m tests.benchmarks.bench_travel                  # 2,000 files, 7 of each
    python -m tests.benchmarks.bench_travel --files 20000 --repeat 5

One repository in a temporary directory (deleted afterwards): `main` with `--files` files, and a
task branch `laneway/bench0001` changing a tenth of them, pushed to a bare remote (a local path:
no network in the figures). Timed, each on a path removed before the next repetition:

- `git worktree add` of the branch in the person's repository (what a worker on the machine
  that holds the branch does: the baseline);
- laneway, cold: `core.gittravel.recreate` into a fresh laneway repository (a machine that
  never saw the remote: its bare repository made, the branch's history fetched, the worktree
  added);
- laneway, warm: the same into a laneway repository that already holds the objects (a later
  turn on that machine: the fetch brings only what is new, here nothing).

Each line gives min / median / max, and the ratio to `git worktree add` at each.
"""

from __future__ import annotations

import argparse
import shutil
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

from core import gittravel  # noqa: E402

IDENT = ("-c", "user.name=b", "-c", "user.email=b@b")
BRANCH = "laneway/bench0001"


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
    git(path, "add", "-A")
    git(path, *IDENT, "commit", "-q", "-m", "files")
    git(path, "branch", BRANCH)
    scratch = path.parent / "scratch"
    git(path, "worktree", "add", "-q", str(scratch), BRANCH)
    for i in range(0, files, 10):
        target = scratch / f"d{i // 500:03}" / f"f{i:06}.txt"
        target.write_text(target.read_text() + "changed by the agent\n")
    git(scratch, "add", "-A")
    git(scratch, *IDENT, "commit", "-q", "-m", "the agent's turn")
    git(path, "worktree", "remove", str(scratch))


def timed(repeat: int, reset: Callable[[], None], work: Callable[[], object]) -> list[float]:
    found = []
    for _ in range(repeat):
        reset()
        start = time.perf_counter()
        work()
        found.append(time.perf_counter() - start)
    return found


def line(name: str, times: list[float], base: list[float] | None) -> str:
    low, med, high = min(times), statistics.median(times), max(times)
    shown = f"{name:<34} min {low * 1000:8.1f}  median {med * 1000:8.1f}  max {high * 1000:8.1f} ms"
    if base:
        ratios = (low / min(base), med / statistics.median(base), high / max(base))
        shown += "   ratio min/median/max " + " / ".join(f"{r:.2f}x" for r in ratios)
    return shown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="laneway-bench-travel-") as tmp:
        root = Path(tmp)
        repo = root / "repo"
        make_repo(repo, args.files)
        bare = root / "remote.git"
        git(root, "init", "-q", "--bare", str(bare))
        git(repo, "push", "-q", str(bare), "main", BRANCH)
        path = root / "worktree"
        here = root / "beta"

        def clean_add() -> None:
            if path.exists():
                git(repo, "worktree", "remove", "--force", str(path))
            git(repo, "worktree", "prune")

        def clean_cold() -> None:
            shutil.rmtree(here, ignore_errors=True)

        def clean_warm() -> None:
            if path.exists():
                mirror = gittravel.mirror(here, str(bare))
                gittravel.set_aside((repo, mirror), path, "refs/laneway/left/bench")

        def recreate() -> None:
            mirror = gittravel.mirror(here, str(bare))
            gittravel.recreate(mirror, str(bare), path, BRANCH, "refs/laneway/left/bench")

        add = timed(
            args.repeat, clean_add, lambda: git(repo, "worktree", "add", "-q", str(path), BRANCH)
        )
        clean_add()
        cold = timed(args.repeat, lambda: (clean_warm(), clean_cold()), recreate)
        warm = timed(args.repeat, clean_warm, recreate)
        clean_warm()
        print(f"{args.files} files, a branch changing {len(range(0, args.files, 10))} of them")
        print(line("git worktree add (baseline)", add, None))
        print(line("re-created from the remote, cold", cold, add))
        print(line("re-created from the remote, warm", warm, add))


if __name__ == "__main__":
    main()
