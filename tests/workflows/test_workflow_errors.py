"""Every refusal is one line naming file, workflow, step and field, and says what is wrong."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.errors import LanewayError
from core.workflows import MAX_FILE_BYTES, WorkflowFileError, load_file, load_text

Doc = dict[str, Any]

TEMPLATE: Doc = {
    "id": "flow",
    "name": "Flow",
    "steps": [
        {
            "id": "a",
            "name": "Alpha",
            "position": 0,
            "is_start_step": True,
            "events": {"on_turn_complete": [{"type": "move_to_step", "config": {"step_id": "b"}}]},
        },
        {"id": "b", "name": "Beta", "position": 1},
    ],
}
PORTABLE: Doc = {
    "version": 1,
    "type": "kandev_workflow",
    "workflows": [
        {
            "name": "Flow",
            "steps": [
                {
                    "name": "Alpha",
                    "position": 0,
                    "is_start_step": True,
                    "events": {
                        "on_turn_complete": [
                            {"type": "move_to_step", "config": {"step_position": 1}}
                        ]
                    },
                },
                {"name": "Beta", "position": 1},
            ],
        }
    ],
}


def _variant(base: Doc, change: Callable[[Doc], Any]) -> str:
    doc = copy.deepcopy(base)
    change(doc)
    return yaml.safe_dump(doc, sort_keys=False)


def template(change: Callable[[Doc], Any]) -> str:
    return _variant(TEMPLATE, change)


def portable(change: Callable[[Doc], Any]) -> str:
    return _variant(PORTABLE, change)


def t_step(i: int) -> Callable[[Doc], Doc]:
    return lambda d: d["steps"][i]


def p_step(i: int) -> Callable[[Doc], Doc]:
    return lambda d: d["workflows"][0]["steps"][i]


def t_move(d: Doc) -> Doc:
    config: Doc = d["steps"][0]["events"]["on_turn_complete"][0]["config"]
    return config


def p_move(d: Doc) -> Doc:
    config: Doc = d["workflows"][0]["steps"][0]["events"]["on_turn_complete"][0]["config"]
    return config


def on_enter(step: Callable[[Doc], Doc], *actions: Any) -> Callable[[Doc], None]:
    return lambda d: step(d).update(events={"on_enter": list(actions)})


ALL_TRIGGERS = (
    "on_enter, on_exit, on_turn_start, on_turn_complete, on_comment, on_blocker_resolved, "
    "on_children_completed, on_approval_resolved, on_heartbeat, on_budget_alert, on_agent_error"
)

CASES = [
    # --- the file itself
    pytest.param(
        "id: flow\nname: [Flow\nsteps: []\n",
        "wf.yml: line 3, column 6: invalid YAML: did not find expected ',' or ']'",
        id="yaml-syntax",
    ),
    pytest.param(
        "id: flow\nname: Flow\nname: Again\nsteps: []\n",
        "wf.yml: line 3, column 1: invalid YAML: duplicate key 'name'",
        id="yaml-duplicate-key",
    ),
    pytest.param(
        "",
        "wf.yml: empty file: expected a workflow template or a portable document",
        id="empty",
    ),
    pytest.param(
        "- a\n- b\n", "wf.yml: expected a mapping at the top level, got a list", id="top-list"
    ),
    pytest.param(
        "hello: world\n",
        "wf.yml: not a workflow file: expected a template (id, name, steps) "
        "or a portable document (version, type, workflows)",
        id="not-a-workflow",
    ),
    pytest.param("#" * (MAX_FILE_BYTES + 1), "wf.yml: file is larger than 1 MiB", id="too-large"),
    # --- template: workflow level
    pytest.param(
        template(lambda d: d.update(colour="red")),
        "wf.yml: workflow 'Flow', colour: unknown key",
        id="t-unknown-top-key",
    ),
    pytest.param(
        template(lambda d: d.pop("id")), "wf.yml: workflow 'Flow', id: required", id="t-no-id"
    ),
    pytest.param(template(lambda d: d.pop("name")), "wf.yml: name: required", id="t-no-name"),
    pytest.param(
        template(lambda d: d.update(steps=[])),
        "wf.yml: workflow 'Flow', steps: expected a non-empty list of steps, got an empty list",
        id="t-no-steps",
    ),
    # --- template: step fields
    pytest.param(
        template(lambda d: t_step(1)(d).update(wip_limit=2)),
        "wf.yml: workflow 'Flow', step 'Beta', wip_limit: unknown key",
        id="t-unknown-step-key",
    ),
    pytest.param(
        template(lambda d: t_step(1)(d).pop("name")),
        "wf.yml: workflow 'Flow', steps[1].name: required",
        id="t-step-no-name",
    ),
    pytest.param(
        template(lambda d: t_step(1)(d).pop("position")),
        "wf.yml: workflow 'Flow', step 'Beta', position: required",
        id="t-step-no-position",
    ),
    pytest.param(
        template(lambda d: t_step(1)(d).update(allow_manual_move="sometimes")),
        "wf.yml: workflow 'Flow', step 'Beta', allow_manual_move: expected true or false, "
        "got a string",
        id="t-step-bool",
    ),
    pytest.param(
        template(lambda d: t_step(1)(d).update(stage_type="qa")),
        "wf.yml: workflow 'Flow', step 'Beta', stage_type: 'qa' is not one of work, review, "
        "approval, custom",
        id="t-stage-type",
    ),
    pytest.param(
        template(lambda d: t_step(1)(d).update(position=0)),
        "wf.yml: workflow 'Flow', step 'Beta', position: duplicate position 0; "
        "step 'Alpha' has it too",
        id="t-duplicate-position",
    ),
    pytest.param(
        template(lambda d: t_step(1)(d).update(id="a")),
        "wf.yml: workflow 'Flow', step 'Beta', id: duplicate step id 'a'; step 'Alpha' has it too",
        id="t-duplicate-id",
    ),
    pytest.param(
        template(lambda d: t_step(1)(d).update(is_start_step=True)),
        "wf.yml: workflow 'Flow', step 'Beta', is_start_step: step 'Alpha' is already the start "
        "step",
        id="t-two-start-steps",
    ),
    # --- template: events
    pytest.param(
        template(lambda d: t_step(1)(d).update(events={"on_arrival": []})),
        f"wf.yml: workflow 'Flow', step 'Beta', events.on_arrival: unknown trigger; "
        f"expected one of {ALL_TRIGGERS}",
        id="t-unknown-trigger",
    ),
    pytest.param(
        template(lambda d: t_step(1)(d).update(events={"on_enter": {"type": "x"}})),
        "wf.yml: workflow 'Flow', step 'Beta', events.on_enter: expected a list of actions, "
        "got a mapping",
        id="t-actions-not-list",
    ),
    pytest.param(
        template(on_enter(t_step(1), "auto_start_agent")),
        "wf.yml: workflow 'Flow', step 'Beta', events.on_enter[0]: expected a mapping with a "
        "'type', got a string",
        id="t-action-not-mapping",
    ),
    pytest.param(
        template(on_enter(t_step(1), {"type": "auto_start_agent"}, {"config": {}})),
        "wf.yml: workflow 'Flow', step 'Beta', events.on_enter[1].type: required",
        id="t-action-no-type",
    ),
    pytest.param(
        template(on_enter(t_step(1), {"type": 7})),
        "wf.yml: workflow 'Flow', step 'Beta', events.on_enter[0].type: expected a string, "
        "got an integer",
        id="t-action-type-not-string",
    ),
    pytest.param(
        template(on_enter(t_step(1), {"type": "queue_run", "config": ["primary"]})),
        "wf.yml: workflow 'Flow', step 'Beta', events.on_enter[0].config: expected a mapping, "
        "got a list",
        id="t-action-config-not-mapping",
    ),
    pytest.param(
        template(on_enter(t_step(1), {"type": "queue_run", "when": "now"})),
        "wf.yml: workflow 'Flow', step 'Beta', events.on_enter[0].when: unknown key; an action "
        "has only 'type' and 'config'",
        id="t-action-unknown-key",
    ),
    pytest.param(
        template(lambda d: t_move(d).update(step_id="zeta")),
        "wf.yml: workflow 'Flow', step 'Alpha', events.on_turn_complete[0].config.step_id: "
        "no step has id 'zeta'",
        id="t-dangling-step-id",
    ),
    pytest.param(
        template(lambda d: t_move(d).pop("step_id")),
        "wf.yml: workflow 'Flow', step 'Alpha', events.on_turn_complete[0].config.step_id: "
        "required: move_to_step needs a target step",
        id="t-move-without-target",
    ),
    pytest.param(
        template(lambda d: t_move(d).update(step_position=1)),
        "wf.yml: workflow 'Flow', step 'Alpha', events.on_turn_complete[0].config.step_position: "
        "a template names the target step with step_id, not step_position",
        id="t-move-by-position",
    ),
    # --- portable: envelope
    pytest.param(
        portable(lambda d: d.update(version=2)),
        "wf.yml: version: unsupported version 2; expected 1",
        id="p-version",
    ),
    pytest.param(
        portable(lambda d: d.update(version=True)),
        "wf.yml: version: unsupported version True; expected 1",
        id="p-version-bool",
    ),
    pytest.param(
        portable(lambda d: d.update(type="workflow")),
        "wf.yml: type: expected 'kandev_workflow', got 'workflow'",
        id="p-type",
    ),
    pytest.param(
        portable(lambda d: d.update(workflows=[])),
        "wf.yml: workflows: expected a non-empty list of workflows, got an empty list",
        id="p-no-workflows",
    ),
    pytest.param(
        portable(lambda d: d.update(exported_at="today")),
        "wf.yml: exported_at: unknown key",
        id="p-unknown-envelope-key",
    ),
    pytest.param(
        portable(lambda d: d["workflows"][0].pop("name")),
        "wf.yml: workflows[0].name: required",
        id="p-workflow-no-name",
    ),
    pytest.param(
        portable(lambda d: d["workflows"][0].update(hidden=True)),
        "wf.yml: workflow 'Flow', hidden: unknown key",
        id="p-unknown-workflow-key",
    ),
    # --- portable: steps
    pytest.param(
        portable(lambda d: p_step(1)(d).update(id="b")),
        "wf.yml: workflow 'Flow', step 'Beta', id: unknown key",
        id="p-unknown-step-key",
    ),
    pytest.param(
        portable(lambda d: p_step(1)(d).update(position=0)),
        "wf.yml: workflow 'Flow', step 'Beta', position: duplicate position 0; "
        "step 'Alpha' has it too",
        id="p-duplicate-position",
    ),
    pytest.param(
        portable(lambda d: p_step(1)(d).update(is_start_step=True)),
        "wf.yml: workflow 'Flow', step 'Beta', is_start_step: step 'Alpha' is already the start "
        "step",
        id="p-two-start-steps",
    ),
    pytest.param(
        portable(lambda d: p_step(1)(d).update(wip_limit=-1)),
        "wf.yml: workflow 'Flow', step 'Beta', wip_limit: must be >= 0, got -1",
        id="p-negative-wip-limit",
    ),
    pytest.param(
        portable(lambda d: p_step(1)(d).update(pull_from_step_position=7)),
        "wf.yml: workflow 'Flow', step 'Beta', pull_from_step_position: no step is at position 7",
        id="p-dangling-pull",
    ),
    pytest.param(
        portable(lambda d: p_step(1)(d).update(pull_from_step_position=1)),
        "wf.yml: workflow 'Flow', step 'Beta', pull_from_step_position: a step cannot pull from "
        "itself",
        id="p-self-pull",
    ),
    pytest.param(
        portable(lambda d: p_step(1)(d).update(stage_type="qa")),
        "wf.yml: workflow 'Flow', step 'Beta', stage_type: 'qa' is not one of work, review, "
        "approval, custom",
        id="p-stage-type",
    ),
    pytest.param(
        portable(lambda d: p_step(1)(d).update(events={"on_budget_overrun": []})),
        f"wf.yml: workflow 'Flow', step 'Beta', events.on_budget_overrun: unknown trigger; "
        f"expected one of {ALL_TRIGGERS}",
        id="p-unknown-trigger",
    ),
    pytest.param(
        portable(lambda d: p_move(d).update(step_position=9)),
        "wf.yml: workflow 'Flow', step 'Alpha', events.on_turn_complete[0].config.step_position: "
        "no step is at position 9",
        id="p-dangling-step-position",
    ),
    pytest.param(
        portable(lambda d: p_move(d).update(step_position="1")),
        "wf.yml: workflow 'Flow', step 'Alpha', events.on_turn_complete[0].config.step_position: "
        "expected a step position (integer), got a string",
        id="p-step-position-not-int",
    ),
    pytest.param(
        portable(lambda d: p_move(d).update(step_id="abc")),
        "wf.yml: workflow 'Flow', step 'Alpha', events.on_turn_complete[0].config.step_id: "
        "the portable format names the target step with step_position, not step_id",
        id="p-move-by-id",
    ),
    pytest.param(
        portable(lambda d: p_step(1)(d).update(agent_profile="claude")),
        "wf.yml: workflow 'Flow', step 'Beta', agent_profile: expected a mapping "
        "(agent_name, model, mode), got a string",
        id="p-agent-profile",
    ),
]


@pytest.mark.parametrize(("text", "message"), CASES)
def test_refusal_is_one_precise_line(text: str, message: str) -> None:
    with pytest.raises(WorkflowFileError) as caught:
        load_text(text, source="wf.yml")

    assert str(caught.value) == message


@pytest.mark.parametrize("base", [TEMPLATE, PORTABLE], ids=["template", "portable"])
def test_the_bases_of_the_refusal_cases_load(base: Doc) -> None:
    [decl] = load_text(yaml.safe_dump(base))

    assert [s.name for s in decl.steps] == ["Alpha", "Beta"]


def test_the_error_keeps_its_parts_and_is_a_user_error() -> None:
    text = portable(lambda d: p_step(1)(d).update(wip_limit=-3))

    with pytest.raises(WorkflowFileError) as caught:
        load_text(text, source="board.yml")

    error = caught.value
    assert (error.file, error.workflow, error.step, error.field, error.problem) == (
        "board.yml",
        "Flow",
        "Beta",
        "wip_limit",
        "must be >= 0, got -3",
    )
    assert isinstance(error, ValueError)
    assert isinstance(error, LanewayError)


def test_names_with_line_breaks_still_give_one_line() -> None:
    text = template(lambda d: t_step(1)(d).update(name="Be\nta", stage_type="qa"))

    with pytest.raises(WorkflowFileError) as caught:
        load_text(text, source="wf.yml")

    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith("wf.yml: workflow 'Flow', step 'Be ta', stage_type:")


def test_load_file_names_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.yml"

    with pytest.raises(WorkflowFileError) as caught:
        load_file(path)

    assert str(caught.value) == f"{path}: cannot read: No such file or directory"


def test_load_file_refuses_a_file_over_one_mib(tmp_path: Path) -> None:
    path = tmp_path / "big.yml"
    path.write_text(yaml.safe_dump(TEMPLATE) + "#" * MAX_FILE_BYTES, encoding="utf-8")

    with pytest.raises(WorkflowFileError) as caught:
        load_file(path)

    assert str(caught.value) == f"{path}: file is larger than 1 MiB"


def test_load_file_accepts_a_file_of_exactly_one_mib(tmp_path: Path) -> None:
    text = yaml.safe_dump(TEMPLATE)
    path = tmp_path / "full.yml"
    path.write_text(text + "#" * (MAX_FILE_BYTES - len(text.encode())), encoding="utf-8")

    [decl] = load_file(path)

    assert decl.name == "Flow"


def test_load_file_refuses_text_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yml"
    path.write_bytes("name: Caf\xe9\n".encode("latin-1"))

    with pytest.raises(WorkflowFileError) as caught:
        load_file(path)

    assert str(caught.value) == f"{path}: not UTF-8 text (invalid continuation byte)"


def test_config_values_must_be_json() -> None:
    text = template(
        on_enter(t_step(1), {"type": "queue_run", "config": {"payload": {"blob": b"\x00"}}})
    )

    with pytest.raises(WorkflowFileError) as caught:
        load_text(text, source="wf.yml")

    assert str(caught.value) == (
        "wf.yml: workflow 'Flow', step 'Beta', events.on_enter[0].config.payload.blob: "
        "expected a JSON value, got bytes"
    )
