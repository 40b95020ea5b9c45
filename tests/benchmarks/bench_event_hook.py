"""What the `laneway_event` hook costs a writer, on SQLite.

    python tests/benchmarks/bench_event_hook.py [--seconds N]

Not a pytest module. Manual moves (entry path E2) back and forth between two steps of the
`simple` template, each its own transaction recording one `task.moved` event, on a SQLite file
of its own per case:

(a) no plugin implements `laneway_event`: the store inserts events as it always did (no
    RETURNING, no queue, no delivery);
(b) one plugin implements it with an empty body: RETURNING ids, the queue, one delivery per
    event in its guard.

Prints moves per second for each and the difference per move.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from core import Host  # noqa: E402
from core.plugin.selection import PluginSelection  # noqa: E402
from core.store.events import Event  # noqa: E402
from plugins import hookimpl  # noqa: E402


class Quiet:
    delivered = 0

    @hookimpl
    def laneway_event(self, event: Event) -> None:
        Quiet.delivered += 1


def moves_per_second(folder: Path, seconds: float, *, observed: bool) -> float:
    extra = (("quiet", Quiet()),) if observed else ()
    allow = frozenset({"kanban", "office", *(name for name, _ in extra)})
    url = f"sqlite:///{folder / ('observed.db' if observed else 'plain.db')}"
    with Host.open(url, plugins=PluginSelection(allow=allow, extra=extra)) as host:
        workflow = host.workflows.create_from_template("simple")
        steps = [s.name for s in host.workflows.by_id(workflow.id).steps[:2]]
        task = host.tasks.create(workflow=workflow.id, title="bench")
        for name in steps * 20:  # warm up
            host.tasks.move(task.id, name)
        count = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            host.tasks.move(task.id, steps[count % 2])
            count += 1
        return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        plain = moves_per_second(folder, args.seconds, observed=False)
        observed = moves_per_second(folder, args.seconds, observed=True)
    print(f"(a) no laneway_event implementation: {plain:8.1f} moves/s")
    print(f"(b) one empty implementation:        {observed:8.1f} moves/s")
    print(
        f"    cost per move: {(1 / observed - 1 / plain) * 1e6:+.0f} us "
        f"({Quiet.delivered} events delivered in (b))"
    )


if __name__ == "__main__":
    main()
