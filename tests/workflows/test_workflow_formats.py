"""Both file formats, instantiation, export, and the round trip between them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.model import TRIGGERS, Workflow
from core.workflows import (
    WorkflowDecl,
    export_document,
    instantiate,
    load_file,
    load_text,
    shipped_templates,
    to_yaml,
)

# The example from the reference's section 8.3, verbatim in shape.
PORTABLE_EXAMPLE = """
version: 1
type: kandev_workflow
workflows:
  - name: Triage Loop
    steps:
      - {name: Inbox, position: 0, color: bg-neutral-400, events: {},
         is_start_step: false, show_in_command_panel: false, allow_manual_move: true}
      - name: Fix
        position: 1
        color: bg-blue-500
        is_start_step: true
        show_in_command_panel: true
        allow_manual_move: true
        wip_limit: 1
        pull_from_step_position: 0
        prompt: "Resolve: {{task_prompt}}"
        agent_profile: {agent_name: Claude, model: opus, mode: default}
        events:
          on_enter: [{type: auto_start_agent}]
          on_turn_complete: [{type: move_to_step, config: {step_position: 2}}]
      - {name: Done, position: 2, color: bg-green-500, events: {},
         is_start_step: false, show_in_command_panel: false, allow_manual_move: true}
"""


def _portable_step_with_every_trigger() -> str:
    events = "\n".join(
        f"          {t}: [{{type: move_to_step, config: {{step_position: 1, note: {t}}}}}]"
        for t in TRIGGERS
    )
    return f"""
version: 1
type: kandev_workflow
workflows:
  - name: Everything
    steps:
      - name: First
        position: 0
        events:
{events}
      - {{name: Second, position: 1}}
"""


def test_portable_example_loads_with_positions_as_keys() -> None:
    [decl] = load_text(PORTABLE_EXAMPLE, source="triage.yml")

    assert decl.name == "Triage Loop"
    assert decl.template_id is None
    assert [(s.key, s.name, s.position) for s in decl.steps] == [
        ("0", "Inbox", 0),
        ("1", "Fix", 1),
        ("2", "Done", 2),
    ]
    fix = decl.steps[1]
    assert (fix.is_start_step, fix.wip_limit, fix.pull_from, fix.prompt) == (
        True,
        1,
        "0",
        "Resolve: {{task_prompt}}",
    )
    assert [(a.kind, dict(a.config)) for a in fix.events["on_turn_complete"]] == [
        ("move_to_step", {"step_id": "2"})
    ]
    assert [a.kind for a in fix.events["on_enter"]] == ["auto_start_agent"]


def test_portable_format_keeps_all_eleven_triggers() -> None:
    [decl] = load_text(_portable_step_with_every_trigger())

    first = decl.steps[0]

    assert list(first.events) == list(TRIGGERS)
    for trigger in TRIGGERS:
        assert [dict(a.config) for a in first.events[trigger]] == [
            {"step_id": "1", "note": trigger}
        ]


def test_portable_document_may_hold_several_workflows() -> None:
    text = """
version: 1
type: kandev_workflow
workflows:
  - {name: One, steps: [{name: A, position: 0}]}
  - {name: Two, description: second, prompt: "be brief", steps: [{name: B, position: 5}]}
"""
    decls = load_text(text, source="two.yml")

    assert [(d.name, d.description, d.prompt, d.source) for d in decls] == [
        ("One", "", "", "two.yml"),
        ("Two", "second", "be brief", "two.yml"),
    ]
    assert decls[1].steps[0].key == "5"


def test_template_steps_are_ordered_by_position() -> None:
    text = """
id: t
name: Flow
steps:
  - {id: late, name: Late, position: 2}
  - {id: early, name: Early, position: 0}
"""
    [decl] = load_text(text)

    assert [s.key for s in decl.steps] == ["early", "late"]


def test_unknown_action_kinds_are_accepted_at_load() -> None:
    text = """
id: t
name: Flow
steps:
  - id: a
    name: A
    position: 0
    events:
      on_enter: [{type: summon_a_plugin_kind, config: {anything: [1, 2]}}]
      on_heartbeat: [{type: another_future_kind}]
"""
    [decl] = load_text(text)

    events = decl.steps[0].events
    assert [(a.kind, dict(a.config)) for a in events["on_enter"]] == [
        ("summon_a_plugin_kind", {"anything": [1, 2]})
    ]
    assert [a.kind for a in events["on_heartbeat"]] == ["another_future_kind"]


def test_both_guard_forms_and_switch_workflow_are_kept_as_written() -> None:
    text = """
version: 1
type: kandev_workflow
workflows:
  - name: Guarded
    steps:
      - name: A
        position: 0
        events:
          on_turn_complete:
            - type: move_to_step
              config:
                step_position: 1
                if: {wait_for_quorum: {role: reviewer, threshold: all_approve}}
            - type: move_to_next
              config: {wait_for_quorum: {role: approver, threshold: "n_approve:2"}}
            - type: switch_workflow
              config: {workflow: Other, step: "1"}
      - {name: B, position: 1}
"""
    [decl] = load_text(text)

    configs = [dict(a.config) for a in decl.steps[0].events["on_turn_complete"]]
    assert configs == [
        {
            "step_id": "1",
            "if": {"wait_for_quorum": {"role": "reviewer", "threshold": "all_approve"}},
        },
        {"wait_for_quorum": {"role": "approver", "threshold": "n_approve:2"}},
        {"workflow": "Other", "step": "1"},
    ]


def test_date_like_config_values_stay_text() -> None:
    text = """
id: t
name: Flow
steps:
  - id: a
    name: A
    position: 0
    events:
      on_heartbeat: [{type: queue_run, config: {payload: {since: 2024-01-31}}}]
"""
    [decl] = load_text(text)

    assert decl.steps[0].events["on_heartbeat"][0].config == {"payload": {"since": "2024-01-31"}}


def test_empty_triggers_declare_nothing() -> None:
    text = """
id: t
name: Flow
steps:
  - {id: a, name: A, position: 0, events: {on_enter: [], on_exit: null}}
"""
    [decl] = load_text(text)

    assert decl.steps[0].events == {}


def test_load_file_reads_the_path_it_is_given(tmp_path: Path) -> None:
    path = tmp_path / "triage.yml"
    path.write_text(PORTABLE_EXAMPLE, encoding="utf-8")

    [decl] = load_file(path)

    assert decl.source == str(path)
    assert decl.name == "Triage Loop"


# --- instantiate ----------------------------------------------------------------------------

LOOP = """
id: loop
name: Loop
steps:
  - id: a
    name: A
    position: 0
    events:
      on_enter: [{type: move_to_step, config: {step_id: c}}]
      on_agent_error: [{type: move_to_step, config: {step_id: b}}]
  - id: b
    name: B
    position: 1
    events:
      on_turn_complete:
        - type: move_to_step
          config: {step_id: c, wait_for_quorum: {role: reviewer, threshold: all_approve}}
        - type: move_to_step
          config: {if: {wait_for_quorum: {role: reviewer, threshold: any_reject}}, step_id: a}
  - {id: c, name: C, position: 2}
"""


def test_instantiate_mints_ids_and_rewrites_every_step_reference(
    sequential_ids: Callable[[], str],
) -> None:
    [decl] = load_text(LOOP)

    wf = instantiate(decl, workspace_id="ws-1", new_id=sequential_ids)

    assert (wf.id, wf.workspace_id, wf.name, wf.template_id) == ("id-1", "ws-1", "Loop", "loop")
    assert [(s.id, s.workflow_id, s.name, s.position) for s in wf.steps] == [
        ("id-2", "id-1", "A", 0),
        ("id-3", "id-1", "B", 1),
        ("id-4", "id-1", "C", 2),
    ]
    a, b, _ = wf.steps
    assert dict(a.actions("on_enter")[0].config) == {"step_id": "id-4"}
    assert dict(a.actions("on_agent_error")[0].config) == {"step_id": "id-3"}
    assert [dict(x.config) for x in b.actions("on_turn_complete")] == [
        {"step_id": "id-4", "wait_for_quorum": {"role": "reviewer", "threshold": "all_approve"}},
        {
            "if": {"wait_for_quorum": {"role": "reviewer", "threshold": "any_reject"}},
            "step_id": "id-2",
        },
    ]


def test_instantiate_twice_gives_independent_workflows() -> None:
    [decl] = load_text(LOOP)

    first = instantiate(decl, workspace_id="ws")
    second = instantiate(decl, workspace_id="ws")

    assert first.id != second.id
    assert not {s.id for s in first.steps} & {s.id for s in second.steps}
    # The declaration itself still names steps by key.
    assert dict(decl.steps[0].events["on_enter"][0].config) == {"step_id": "c"}


def test_instantiate_without_a_start_step_marks_none(sequential_ids: Callable[[], str]) -> None:
    [decl] = load_text(LOOP)

    wf = instantiate(decl, workspace_id="ws", new_id=sequential_ids)

    assert not any(s.is_start_step for s in wf.steps)
    assert wf.start_step is not None
    assert wf.start_step.name == "A"


def test_instantiate_sets_the_feeder_step(sequential_ids: Callable[[], str]) -> None:
    [decl] = load_text(PORTABLE_EXAMPLE)

    wf = instantiate(decl, workspace_id="ws", new_id=sequential_ids)

    inbox, fix, done = wf.steps
    assert fix.pull_from_step_id == inbox.id
    assert (fix.wip_limit, inbox.pull_from_step_id) == (1, None)
    assert dict(fix.actions("on_turn_complete")[0].config) == {"step_id": done.id}


# --- export and round trip ------------------------------------------------------------------


def test_export_writes_positions_not_ids(sequential_ids: Callable[[], str]) -> None:
    [decl] = load_text(PORTABLE_EXAMPLE)
    wf = instantiate(decl, workspace_id="ws", new_id=sequential_ids)

    doc = export_document([wf])

    assert (doc["version"], doc["type"]) == (1, "kandev_workflow")
    [exported] = doc["workflows"]
    fix = exported["steps"][1]
    assert fix["pull_from_step_position"] == 0
    assert fix["events"]["on_turn_complete"] == [
        {"type": "move_to_step", "config": {"step_position": 2}}
    ]
    assert fix["events"]["on_enter"] == [{"type": "auto_start_agent"}]
    assert "id-" not in to_yaml(doc)


def test_export_keeps_every_trigger_and_stage_type() -> None:
    office = next(d for d in shipped_templates() if d.template_id == "office-default")
    wf = instantiate(office, workspace_id="ws")

    doc = export_document([wf])

    work = doc["workflows"][0]["steps"][1]
    assert work["stage_type"] == "work"
    assert list(work["events"]) == [
        "on_enter",
        "on_turn_complete",
        "on_comment",
        "on_blocker_resolved",
        "on_children_completed",
        "on_agent_error",
    ]


def test_to_yaml_writes_prompts_as_blocks_and_no_anchors() -> None:
    shared = {"role": "reviewer", "threshold": "all_approve"}
    doc = {"workflows": [{"prompt": "line one\nline two"}, {"a": shared, "b": shared}]}

    text = to_yaml(doc)

    assert "prompt: |-\n    line one\n    line two" in text
    assert "&id" not in text
    assert "*id" not in text
    assert yaml.safe_load(text) == doc


def _modulo_ids(wf: Workflow) -> list[dict[str, Any]]:
    """A workflow's steps with every step id replaced by that step's position."""
    position = {s.id: s.position for s in wf.steps}

    def config(kind: str, cfg: Any) -> dict[str, Any]:
        out: dict[str, Any] = dict(cfg)
        if kind == "move_to_step":
            out["step_id"] = position[out["step_id"]]
        return out

    return [
        {
            "name": s.name,
            "position": s.position,
            "is_start_step": s.is_start_step,
            "allow_manual_move": s.allow_manual_move,
            "wip_limit": s.wip_limit,
            "pull_from": position.get(s.pull_from_step_id) if s.pull_from_step_id else None,
            "prompt": s.prompt,
            "stage_type": s.stage_type,
            "color": s.color,
            "show_in_command_panel": s.show_in_command_panel,
            "auto_archive_after_hours": s.auto_archive_after_hours,
            "auto_advance_requires_signal": s.auto_advance_requires_signal,
            "cancel_triggers_turn_complete": s.cancel_triggers_turn_complete,
            "events": {
                t: [(a.position, a.kind, config(a.kind, a.config)) for a in actions]
                for t, actions in s.events.items()
            },
        }
        for s in sorted(wf.steps, key=lambda s: s.position)
    ]


def _round_trip(decl: WorkflowDecl) -> tuple[Workflow, Workflow]:
    original = instantiate(decl, workspace_id="ws")
    [again] = load_text(to_yaml(export_document([original])), source="export.yml")
    return original, instantiate(again, workspace_id="ws")


@pytest.mark.parametrize("decl", shipped_templates(), ids=lambda d: d.template_id)
def test_round_trip_of_every_shipped_template(decl: WorkflowDecl) -> None:
    original, copy = _round_trip(decl)

    assert copy.name == original.name
    assert copy.description == original.description
    assert _modulo_ids(copy) == _modulo_ids(original)
    assert not {s.id for s in original.steps} & {s.id for s in copy.steps}


def test_round_trip_of_every_reference_template(reference_template: Path) -> None:
    [decl] = load_file(reference_template)

    original, copy = _round_trip(decl)

    assert _modulo_ids(copy) == _modulo_ids(original)


def test_round_trip_keeps_every_trigger_and_the_feeder() -> None:
    [decl] = load_text(_portable_step_with_every_trigger())
    [example] = load_text(PORTABLE_EXAMPLE)

    for d in (decl, example):
        original, copy = _round_trip(d)
        assert _modulo_ids(copy) == _modulo_ids(original)
