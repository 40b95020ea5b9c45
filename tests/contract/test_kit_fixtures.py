"""The kit's pytest plugin (`plugins.testing`, entry point `pytest11: laneway`): its fixtures
do what they say, installed plugins never leak into its hosts, and loading it costs nothing a
test did not ask for."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import Any

import attrs
import pytest

from core.plugin.kinds import ActionContext, ActionKind
from plugins import hookimpl
from plugins.testing import Arrivals, FaultRun, HostFactory
from plugins.testing.hosts import PluginSpec
from plugins.testing.logs import LogRecord, matching

CORE_KINDS = {"move_to_next", "move_to_previous", "move_to_step", "switch_workflow"}


@attrs.define
class Witness:
    """Plugin `witness`: a durable kind recording the entry path of each run."""

    paths: list[str | None] = attrs.field(factory=list)

    def _execute(self, ctx: ActionContext, _config: Any) -> None:
        self.paths.append(ctx.entry_path)

    @hookimpl
    def laneway_register_action_kinds(self, register: Callable[[ActionKind], None]) -> None:
        register(ActionKind("witness", "durable", execute=self._execute))


def test_the_pytest11_entry_point_is_this_kit() -> None:
    (found,) = [ep for ep in entry_points(group="pytest11") if ep.name == "laneway"]
    assert found.value == "plugins.testing"
    module = found.load()
    assert {"laneway_logs", "laneway_host_factory", "laneway_arrivals", "laneway_fault"} <= set(
        vars(module)
    )


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_loading_the_plugin_imports_none_of_the_kit() -> None:
    probe = (
        "import sys, plugins.testing\n"
        "heavy = [m for m in ('plugins.testing.contract', 'plugins.testing.hosts', "
        "'plugins.testing.arrivals', 'sqlalchemy') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == ""


def test_a_kit_host_loads_only_core_unless_plugins_are_named(laneway_host: Any) -> None:
    # kanban, office (and whatever else is installed) are entry points, but not named here
    assert set(laneway_host.registry.kinds) == CORE_KINDS
    assert [p.name for p in laneway_host.registry.plugins if p.enabled] == ["core"]


@pytest.mark.parametrize(
    ("plugins", "expected"),
    [
        (["kanban"], {"kanban"}),
        (["kanban", "office"], {"kanban", "office"}),
        ([("witness", Witness())], {"witness"}),
        (["office", ("witness", Witness())], {"office", "witness"}),
    ],
)
def test_a_kit_host_loads_exactly_the_plugins_named(
    laneway_host_factory: HostFactory, plugins: Sequence[PluginSpec], expected: set[str]
) -> None:
    host = laneway_host_factory.open(plugins)
    enabled = {p.name for p in host.registry.plugins if p.enabled}
    assert enabled == {"core"} | expected


def test_restart_gives_a_new_epoch_and_runs_recovery(laneway_host_factory: HostFactory) -> None:
    first = laneway_host_factory.open(["kanban"])
    second = laneway_host_factory.restart(first)
    assert second.epoch != first.epoch
    assert second.recovery_report is not None
    assert set(second.registry.kinds) == set(first.registry.kinds)


@pytest.mark.parametrize("path", ["E1", "E2", "E3", "E4", "E5"])
def test_arrivals_enter_target_through_each_path(
    laneway_host_factory: HostFactory,
    laneway_arrivals: Arrivals,
    laneway_logs: list[LogRecord],
    path: str,
) -> None:
    witness = Witness()
    host = laneway_host_factory.open([("witness", witness)])
    board = laneway_arrivals.board(host, [{"type": "witness"}])
    task = laneway_arrivals.enter(host, board, path)
    assert task.workflow_step_id == board.target.id
    assert witness.paths == [path]
    ((entry, markers),) = [
        (e, m) for e, m in host.entries.list(task=task.id) if e.step_id == board.target.id
    ]
    assert (entry.entry_path, [(m.kind, m.state) for m in markers]) == (path, [("witness", "done")])
    arrivals = matching(laneway_logs, "INFO", task_id=task.id, event="arrival")
    assert [r["extra"]["entry_path"] for r in arrivals][-1] == path


MOVE = """
import sys
from plugins.testing.hosts import open_host
url, task_id = sys.argv[1:3]
with open_host(url, []) as host:
    host.tasks.move(task_id, "Target")
"""


def test_fault_runs_a_child_that_stops_at_its_fault_point(
    laneway_host_factory: HostFactory,
    laneway_arrivals: Arrivals,
    laneway_fault: Callable[..., FaultRun],
) -> None:
    host = laneway_host_factory.open()
    board = laneway_arrivals.board(host, [])
    staged = laneway_arrivals.stage(host, board, "E2")
    laneway_host_factory.close(host)

    crashed = laneway_fault(
        MOVE, "transition.after_commit", args=[laneway_host_factory.url, staged.task_id]
    )
    assert crashed.crashed, crashed.describe()
    assert crashed.returncode == 99

    host = laneway_host_factory.open()
    assert host.tasks.get(staged.task_id).workflow_step_id == board.target.id  # it committed
    laneway_host_factory.close(host)
    unarmed = laneway_fault(MOVE, None, args=[laneway_host_factory.url, staged.task_id])
    assert (unarmed.returncode, unarmed.crashed) == (0, False)


def test_fault_refuses_a_point_that_does_not_exist(
    laneway_fault: Callable[..., FaultRun],
) -> None:
    with pytest.raises(ValueError, match="unknown fault point"):
        laneway_fault("pass", "dispatch.after_lunch")
