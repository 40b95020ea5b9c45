"""The in-memory declaration both workflow file formats decode into, and its instantiation.

A declaration names steps by a symbolic *key* (a template's step `id`, or `str(position)` for
the portable format), never by database id: ids are minted only when a declaration becomes a
`core.model.Workflow`. Every `move_to_step` config in a declaration says `{"step_id": <key>}`,
whichever format it came from, so the rest of laneway sees one shape.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final

import attrs

from core import ids
from core.errors import LanewayError
from core.model import DEFAULT_MAX_STEP_ARRIVALS, ActionDecl, Events, Step, Workflow

MOVE_TO_STEP: Final = "move_to_step"
STEP_REF: Final = "step_id"

_LINE_BREAKS = re.compile(r"\s*[\r\n]+\s*")


class WorkflowFileError(LanewayError, ValueError):
    """A workflow file (or declaration) is wrong. Its message is exactly one line:

    ``<file>: workflow '<name>', step '<step name>', <field path>: <problem>``

    Parts that do not apply are left out. The parts stay available as attributes so callers
    (the CLI's JSON output, tests) need not parse the message.
    """

    code: ClassVar[str] = "workflow_file"

    def __init__(
        self,
        problem: str,
        *,
        file: str | None = None,
        workflow: str | None = None,
        step: str | None = None,
        field: str | None = None,
    ) -> None:
        self.problem = problem
        self.file = file
        self.workflow = workflow
        self.step = step
        self.field = field
        super().__init__(_one_line(problem, file, workflow, step, field))


MAX_PART: Final = 240
"""A hostile file's names and keys can be a megabyte long; a message quotes their start."""


def _clip(part: str) -> str:
    return part if len(part) <= MAX_PART else f"{part[:MAX_PART]}..."


def _one_line(
    problem: str, file: str | None, workflow: str | None, step: str | None, field: str | None
) -> str:
    where = []
    if workflow is not None:
        where.append(f"workflow '{_clip(workflow)}'")
    if step is not None:
        where.append(f"step '{_clip(step)}'")
    if field:
        where.append(_clip(field))
    text = ", ".join(where)
    text = f"{text}: {_clip(problem)}" if text else _clip(problem)
    if file is not None:
        text = f"{_clip(file)}: {text}"
    # Names and YAML problems may carry line breaks; the CLI contract is one line.
    return _LINE_BREAKS.sub(" ", text)


@attrs.frozen
class StepDecl:
    """One declared step. `key` is how other steps of the same declaration refer to it."""

    key: str
    name: str
    position: int
    is_start_step: bool = False
    allow_manual_move: bool = True
    wip_limit: int = 0
    pull_from: str | None = None
    """The key of the feeder step, or None."""
    prompt: str = ""
    stage_type: str = "custom"
    color: str = ""
    show_in_command_panel: bool = False
    auto_archive_after_hours: int = 0
    auto_advance_requires_signal: bool = False
    cancel_triggers_turn_complete: bool = False
    events: Events = attrs.field(factory=dict)
    heartbeat_seconds: int | None = None


@attrs.frozen
class WorkflowDecl:
    """One declared workflow, as read from a template or a portable document."""

    name: str
    description: str = ""
    prompt: str = ""
    hidden: bool = False
    template_id: str | None = None
    steps: tuple[StepDecl, ...] = ()
    max_step_arrivals: int = DEFAULT_MAX_STEP_ARRIVALS
    source: str = "<string>"
    """The file it came from, for error messages."""

    def step(self, key: str) -> StepDecl | None:
        for step in self.steps:
            if step.key == key:
                return step
        return None


def instantiate(
    decl: WorkflowDecl, *, workspace_id: str, new_id: Callable[[], str] = ids.new_id
) -> Workflow:
    """A new `Workflow` for `decl`: fresh ids for the workflow and each step, references rewritten.

    `move_to_step` targets (in every trigger) and `pull_from` become the new step ids. Every
    other config key, guards included, is copied as written. A declaration without a start
    step yields a workflow without one (`Workflow.start_step` then falls back to the first).
    """
    workflow_id = new_id()
    step_ids = {s.key: new_id() for s in decl.steps}

    def resolve(key: str, step: StepDecl, field: str) -> str:
        try:
            return step_ids[key]
        except (KeyError, TypeError):
            raise WorkflowFileError(
                f"no step has key '{key}'",
                file=decl.source,
                workflow=decl.name,
                step=step.name,
                field=field,
            ) from None

    def build(s: StepDecl) -> Step:
        def target(key: str, field: str) -> str:
            return resolve(key, s, field)

        return Step(
            id=step_ids[s.key],
            workflow_id=workflow_id,
            name=s.name,
            position=s.position,
            is_start_step=s.is_start_step,
            allow_manual_move=s.allow_manual_move,
            wip_limit=s.wip_limit,
            pull_from_step_id=target(s.pull_from, "pull_from") if s.pull_from is not None else None,
            prompt=s.prompt,
            stage_type=s.stage_type,
            color=s.color,
            show_in_command_panel=s.show_in_command_panel,
            auto_archive_after_hours=s.auto_archive_after_hours,
            auto_advance_requires_signal=s.auto_advance_requires_signal,
            cancel_triggers_turn_complete=s.cancel_triggers_turn_complete,
            events=remap_step_refs(s.events, target),
            heartbeat_seconds=s.heartbeat_seconds,
        )

    steps = tuple(build(s) for s in decl.steps)
    return Workflow(
        id=workflow_id,
        workspace_id=workspace_id,
        name=decl.name,
        description=decl.description,
        prompt=decl.prompt,
        hidden=decl.hidden,
        template_id=decl.template_id,
        steps=steps,
        max_step_arrivals=decl.max_step_arrivals,
    )


def remap_step_refs(events: Events, resolve: Callable[[str, str], Any]) -> Events:
    """`events` with each `move_to_step` target replaced by `resolve(target, field_path)`.

    Configs are deep-copied so the result shares no mutable state with the input. The target
    key keeps its place among the config's keys, so a round trip writes them in the same order.
    """
    remapped: dict[str, tuple[ActionDecl, ...]] = {}
    for trigger, actions in events.items():
        out = []
        for action in actions:
            config = copy.deepcopy(dict(action.config))
            if action.kind == MOVE_TO_STEP and STEP_REF in config:
                field = f"events.{trigger}[{action.position}].config.{STEP_REF}"
                config[STEP_REF] = resolve(config[STEP_REF], field)
            out.append(ActionDecl(action.position, action.kind, config))
        remapped[trigger] = tuple(out)
    return remapped


def rename_key(config: Mapping[str, Any], old: str, new: str, value: Any) -> dict[str, Any]:
    """`config` with key `old` replaced by `new: value`, in the same place among the keys."""
    return {(new if k == old else k): (value if k == old else v) for k, v in config.items()}
