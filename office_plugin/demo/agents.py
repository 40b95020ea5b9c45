"""The demo's agents, which outlive it: ``python -m office_plugin.demo.agents ROLE``.

`laneway demo` puts these in its profiles' commands (with the Python that ran the demo), so
a later `laneway worker` on the same database runs them too: they live in the installed
package, never in a directory the demo made and deleted. Each reads its prompt from stdin and
answers in the agent protocol (JSON lines on stdout, exit status):

- ``worker`` does the work (a log line) and ends its turn;
- ``reviewer`` / ``approver`` answer ``approved``;
- ``ceo`` acknowledges an escalation and ends its turn.

On the one task named by ``--script-task`` they act out the demo's story: ``worker
--fail-first`` fails terminally on its first run there (exit 1), and a reviewer with
``--verdicts rejected,approved`` gives those verdicts in turn. What they counted is kept in
``--state DIR``, one file per task, made when missing: a later run finds the count or
starts again, never fails for a directory that went away. On any other task they simply do
their job, so the board the demo leaves works for the tasks a person adds.

Standard library only: every agent turn pays for what it imports. The demo runs it by its
path (the same program; `-m` would import the `office_plugin` package first).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROLES = ("worker", "reviewer", "approver", "ceo")


def _say(**message: object) -> None:
    print(json.dumps(message), flush=True)


def _count(state: str | None, key: str) -> int:
    """How many times this agent ran on this task before (and count this run)."""
    if not state:
        return 0
    folder = Path(state)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / key
    seen = int(path.read_text() or 0) if path.exists() else 0
    path.write_text(str(seen + 1))
    return seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m office_plugin.demo.agents")
    parser.add_argument("role", choices=ROLES)
    parser.add_argument("--script-task", help="the task the demo's story is acted on")
    parser.add_argument("--fail-first", action="store_true")
    parser.add_argument("--verdicts", default="approved")
    parser.add_argument("--state", help="a directory for the counts (made when missing)")
    args = parser.parse_args(argv)
    prompt = sys.stdin.read()
    task = os.environ.get("LANEWAY_TASK_ID", "?")
    # per task and script: a task's sessions change (a failed one is replaced), its story not
    key = f"{task}.{args.role}.{args.verdicts}"
    scripted = args.script_task is not None and task == args.script_task
    if args.role == "worker":
        if scripted and args.fail_first and _count(args.state, key) == 0:
            print("worker: the build tool crashed", file=sys.stderr)
            return 1
        _say(log=f"worker finished the work on task {task} ({len(prompt)} chars of prompt)")
        return 0
    if args.role in ("reviewer", "approver"):
        verdicts = [v.strip() for v in args.verdicts.split(",") if v.strip()] or ["approved"]
        if not scripted:
            verdicts = ["approved"]
        turn = _count(args.state, key) if len(verdicts) > 1 else 0
        verdict = verdicts[min(turn, len(verdicts) - 1)]
        _say(decision=verdict, comment=f"{args.role} turn {turn + 1}")
        return 0
    _say(log=f"ceo: escalation received for task {task}; taking it from here")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
