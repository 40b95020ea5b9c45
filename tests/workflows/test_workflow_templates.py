"""Template files: the reference's templates load unmodified; ours declare the same things."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml

from core.workflows import (
    StepDecl,
    WorkflowDecl,
    instantiate,
    load_file,
    shipped_template,
    shipped_templates,
)

SHIPPED = {
    "simple": "kanban.yml",
    "office-default": "office-default.yml",
    "standard": "plan-and-build.yml",
}


def _events_as_written(raw_step: dict[str, Any]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """A raw template step's events, read with plain PyYAML, empty triggers left out."""
    events = raw_step.get("events") or {}
    return {
        trigger: [(a["type"], a.get("config") or {}) for a in actions]
        for trigger, actions in events.items()
        if actions
    }


def _events_of(step: StepDecl) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    return {t: [(a.kind, dict(a.config)) for a in actions] for t, actions in step.events.items()}


def test_every_reference_template_loads_unmodified(reference_template: Path) -> None:
    raw = yaml.safe_load(reference_template.read_text(encoding="utf-8"))

    [decl] = load_file(reference_template)

    assert decl.template_id == raw["id"]
    assert decl.name == raw["name"]
    assert decl.description == raw.get("description", "")
    assert decl.hidden == raw.get("hidden", False)
    assert decl.source == str(reference_template)
    assert [s.key for s in decl.steps] == [s["id"] for s in raw["steps"]]
    for raw_step, step in zip(raw["steps"], decl.steps, strict=True):
        assert step.name == raw_step["name"]
        assert step.position == raw_step["position"]
        assert step.is_start_step == raw_step.get("is_start_step", False)
        assert step.allow_manual_move == raw_step.get("allow_manual_move", True)
        assert step.show_in_command_panel == raw_step.get("show_in_command_panel", False)
        assert step.cancel_triggers_turn_complete == raw_step.get(
            "cancel_triggers_turn_complete", False
        )
        assert step.stage_type == raw_step.get("stage_type", "custom")
        assert step.color == raw_step["color"]
        assert step.prompt == (raw_step.get("prompt") or "").strip()
        # Templates already say step_id=<symbolic id>, so every config (guards included)
        # must come through exactly as written.
        assert _events_of(step) == _events_as_written(raw_step)


def test_reference_office_default_keeps_its_legacy_quorum_guards(reference_dir: Path) -> None:
    [decl] = load_file(reference_dir / "office-default.yml")
    review = decl.step("review")
    assert review is not None

    moves = review.events["on_turn_complete"]

    assert [(a.kind, dict(a.config)) for a in moves] == [
        (
            "move_to_step",
            {
                "step_id": "approval",
                "wait_for_quorum": {"role": "reviewer", "threshold": "all_approve"},
            },
        ),
        (
            "move_to_step",
            {"step_id": "work", "wait_for_quorum": {"role": "reviewer", "threshold": "any_reject"}},
        ),
    ]


def _structure(decl: WorkflowDecl) -> list[dict[str, Any]]:
    """Everything about the steps except the prose."""
    return [
        {**attrs.asdict(s, recurse=False), "prompt": None, "events": _events_of(s)}
        for s in decl.steps
    ]


@pytest.mark.parametrize(("template_id", "file_name"), SHIPPED.items())
def test_shipped_template_declares_what_the_reference_declares(
    reference_dir: Path, template_id: str, file_name: str
) -> None:
    [reference] = load_file(reference_dir / file_name)

    ours = shipped_template(template_id)

    assert ours is not None
    assert (ours.template_id, ours.name, ours.hidden) == (
        reference.template_id,
        reference.name,
        reference.hidden,
    )
    assert _structure(ours) == _structure(reference)
    # Steps with a prompt in the reference have one of ours (in our own words).
    assert [bool(s.prompt) for s in ours.steps] == [bool(s.prompt) for s in reference.steps]


def test_shipped_templates_are_listed_by_file_name_with_hidden_ones() -> None:
    listed = [(d.template_id, d.name, d.hidden) for d in shipped_templates()]

    assert listed == [
        ("code-and-merge", "Code & Merge", False),
        ("code-and-pull-request", "Code & Pull Request", False),
        ("simple", "Kanban", False),
        ("office-default", "Office Default", True),
        ("standard", "Plan & Build", False),
    ]


def test_shipped_template_unknown_id_is_none() -> None:
    assert shipped_template("nope") is None


def test_office_default_uses_the_legacy_guard_form_and_all_its_triggers() -> None:
    decl = shipped_template("office-default")
    assert decl is not None
    work, review, approval = decl.step("work"), decl.step("review"), decl.step("approval")
    assert work is not None
    assert review is not None
    assert approval is not None

    assert set(work.events) == {
        "on_enter",
        "on_comment",
        "on_blocker_resolved",
        "on_children_completed",
        "on_agent_error",
        "on_turn_complete",
    }
    assert dict(work.events["on_agent_error"][0].config) == {
        "target": "workspace.ceo_agent",
        "task_id": "this",
        "reason": "agent_error",
    }
    for step, role, forward in ((review, "reviewer", "approval"), (approval, "approver", "done")):
        assert [a.kind for a in step.events["on_enter"]] == [
            "clear_decisions",
            "queue_run_for_each_participant",
        ]
        assert [dict(a.config) for a in step.events["on_turn_complete"]] == [
            {"step_id": forward, "wait_for_quorum": {"role": role, "threshold": "all_approve"}},
            {"step_id": "work", "wait_for_quorum": {"role": role, "threshold": "any_reject"}},
        ]


def test_shipped_templates_instantiate_with_their_start_step() -> None:
    starts = {}
    for decl in shipped_templates():
        wf = instantiate(decl, workspace_id="ws")
        assert wf.start_step is not None
        starts[decl.template_id] = wf.start_step.name

    assert starts == {
        "code-and-merge": "In Progress",
        "code-and-pull-request": "In Progress",
        "simple": "In Progress",
        "office-default": "Work",
        "standard": "Plan",
    }
