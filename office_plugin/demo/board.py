"""The demo's board: Office Default with scripted agents in its seats, and one task."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Final

import attrs

from office_plugin.demo import agents as demo_agents
from plugins.api import LanewayError, Workflow
from plugins.app import scripted

if TYPE_CHECKING:
    from plugins.app import Host


TEMPLATE: Final = "office-default"
TITLE: Final = "Sync the git mirror"
DESCRIPTION: Final = "Mirror the main repository to the backup remote every night."


class DemoFailed(LanewayError):
    """The walk did not reach Done; the message says where it stopped and why."""

    code: ClassVar[str] = "demo_failed"


@attrs.frozen
class Board:
    """What the demo built: ids, and the names it prints them by."""

    workflow: Workflow
    task_id: str
    profiles: Mapping[str, str]
    """Agent profile id -> name."""
    state_dir: Path
    seats: Mapping[tuple[str, str], int] = attrs.field(factory=dict)
    """(step id, role) -> how many seats the demo put there."""

    def seats_at(self, step_id: str, role: str) -> int:
        return self.seats.get((step_id, role), 0)

    def step_name(self, step_id: str | None) -> str | None:
        if step_id is None:
            return None
        step = self.workflow.step(step_id)
        return step.name if step is not None else step_id

    def agent_name(self, profile_id: str | None) -> str | None:
        if profile_id is None:
            return None
        return self.profiles.get(profile_id, profile_id)


def agent_command(role: str, *args: str) -> tuple[str, ...]:
    """A `core.agents.scripted` agent's command line (tests of the agent runtime).

    The script is run by its path rather than with `-m core.agents.scripted`: `-m` imports
    the `core` package first (the host, SQLAlchemy, alembic), which costs about a second per
    agent turn; the script itself needs only the standard library.
    """
    return (sys.executable, str(Path(scripted.__file__).resolve()), role, *args)


def demo_agent_command(role: str, *args: str) -> tuple[str, ...]:
    """The command of one of the demo's profiles: its agent, a module of the installed package
    (:mod:`office_plugin.demo.agents`), run by the Python that ran the demo, so the profile
    outlives the demo.

    By the module's path, which runs the same program as ``python -m
    office_plugin.demo.agents``: `-m` imports the `office_plugin` package first (the plugin,
    loguru, the plugin API), about a third of a second on every agent turn.
    """
    return (sys.executable, str(Path(demo_agents.__file__).resolve()), role, *args)


def _free_name(taken: set[str], base: str) -> str:
    """`base`, or `base-2`, `base-3`, ... when that name is taken (a reused --db)."""
    name, n = base, 1
    while name.casefold() in taken:
        n += 1
        name = f"{base}-{n}"
    taken.add(name.casefold())
    return name


def build_board(host: Host, state_dir: Path) -> Board:
    """Office Default with scripted agents in its seats, and one task (not started yet)."""
    why = host.registry.unavailable("queue_run_for_each_participant")
    if not host.features.office or why is not None:
        raise DemoFailed(
            "the demo needs the office plugin with its feature on "
            f"({why or 'the office feature is off'}: drop --no-office, turn "
            "the board's office on with `laneway features set office=on`, and allow the "
            "office plugin)"
        )
    workflows = {w.name.casefold() for w in host.workflows.list()}
    workflow = host.workflows.create_from_template(
        TEMPLATE, name=_free_name(workflows, "Office Default")
    )
    host.workspace.set(office_workflow=workflow.id)
    # the task first: the agents act out the demo's story on this task alone
    task = host.tasks.create(workflow=workflow.id, title=TITLE, description=DESCRIPTION)
    taken = {p.name.casefold() for p in host.profiles.list()}
    state = ("--script-task", task.id, "--state", str(state_dir))
    plan = [
        ("worker", "worker", ("worker", *state, "--fail-first")),
        ("reviewer-1", "reviewer", ("reviewer", *state, "--verdicts", "rejected,approved")),
        ("reviewer-2", "reviewer", ("reviewer",)),
        ("approver", "approver", ("approver",)),
        ("ceo", "ceo", ("ceo",)),
    ]
    made: dict[str, str] = {}
    names: dict[str, str] = {}
    for base, role, command in plan:
        profile = host.profiles.add(
            _free_name(taken, base), command=demo_agent_command(*command), role=role
        )
        made[base] = profile.id
        names[profile.id] = profile.name
    seats = [
        ("Work", "runner", "worker"),
        ("Review", "reviewer", "reviewer-1"),
        ("Review", "reviewer", "reviewer-2"),
        ("Approval", "approver", "approver"),
    ]
    for step, role, base in seats:
        host.participants.add(step=step, role=role, profile=made[base], workflow=workflow.id)
    built = host.workflows.by_id(workflow.id)
    by_name = {s.name: s.id for s in built.steps}
    counts: dict[tuple[str, str], int] = {}
    for step, role, _base in seats:
        counts[(by_name[step], role)] = counts.get((by_name[step], role), 0) + 1
    return Board(built, task.id, names, state_dir, counts)
