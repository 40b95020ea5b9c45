"""Small scripted agents, shipped for `laneway demo` and for tests of the agent runtime.

Run as ``python -m core.agents.scripted ROLE [options]``. Each reads its prompt from stdin
and answers in the agent protocol (JSON lines on stdout, exit status):

- ``worker``: does the work (a log line) and ends its turn. ``--fail-first FILE``: the first
  run (while FILE does not exist) creates FILE and fails terminally (exit 1).
- ``reviewer`` / ``approver``: answers with the next verdict of ``--verdicts a,b,...``
  (default ``approved``), one per invocation, counted in ``--state FILE``.
- ``ceo``: acknowledges an escalation and ends its turn.
- ``transient``: fails transiently (exit 75) ``--times N`` times (counted in ``--state``), then
  succeeds. ``exit``: exits with ``--status N``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def _say(**message: object) -> None:
    print(json.dumps(message), flush=True)


def _count(state: str | None) -> int:
    """How many times this agent ran before (and count this run)."""
    if not state:
        return 0
    path = Path(state)
    seen = int(path.read_text()) if path.exists() else 0
    path.write_text(str(seen + 1))
    return seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m core.agents.scripted")
    parser.add_argument(
        "role", choices=["worker", "reviewer", "approver", "ceo", "transient", "exit"]
    )
    parser.add_argument("--fail-first")
    parser.add_argument("--verdicts", default="approved")
    parser.add_argument("--state")
    parser.add_argument("--times", type=int, default=1)
    parser.add_argument("--status", type=int, default=1)
    args = parser.parse_args(argv)
    prompt = sys.stdin.read()
    task = os.environ.get("LANEWAY_TASK_ID", "?")
    if args.role == "worker":
        if args.fail_first and not Path(args.fail_first).exists():
            Path(args.fail_first).write_text("failed once")
            print("worker: the build tool crashed", file=sys.stderr)
            return 1
        _say(log=f"worker finished the work on task {task} ({len(prompt)} chars of prompt)")
        return 0
    if args.role in ("reviewer", "approver"):
        verdicts = [v.strip() for v in args.verdicts.split(",") if v.strip()]
        turn = _count(args.state)
        verdict = verdicts[min(turn, len(verdicts) - 1)]
        _say(decision=verdict, comment=f"{args.role} turn {turn + 1}")
        return 0
    if args.role == "ceo":
        _say(log=f"ceo: escalation received for task {task}; taking it from here")
        return 0
    if args.role == "transient":
        if _count(args.state) < args.times:
            print("transient: provider overloaded", file=sys.stderr)
            return 75
        _say(log="transient: recovered")
        return 0
    return int(args.status)


if __name__ == "__main__":
    raise SystemExit(main())
