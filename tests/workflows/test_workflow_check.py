"""`check_workflow` and `validate_with_registry` against a small, hand-made plugin set."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from core.plugin.kinds import (
    ActionContext,
    ActionKind,
    ConfigError,
    Features,
    GuardContext,
    GuardKind,
    GuardResult,
    Outcome,
)
from core.plugin.loading import load_plugins
from core.plugin.registry import Registry, build_registry
from core.plugin.selection import PluginSelection
from core.workflows import (
    WorkflowFileError,
    check_workflow,
    instantiate,
    load_text,
    shipped_template,
    validate_with_registry,
)
from plugins import hookimpl


def _run(ctx: ActionContext, config: Any) -> Outcome | None:
    return None


def _needs_name(config: Mapping[str, Any]) -> Mapping[str, Any]:
    if not isinstance(config.get("name"), str):
        raise ConfigError("name must be a string", field="name")
    return config


def _strict_lookup(config: Mapping[str, Any]) -> Mapping[str, Any]:
    # A validator that trips over user input without raising ConfigError.
    config["required_key"]
    return config


def _quorum_config(config: Any) -> Any:
    if config.get("threshold") not in ("all_approve", "any_reject"):
        raise ConfigError(f"unknown threshold {config.get('threshold')!r}", field="threshold")
    return config


def _never(ctx: GuardContext, config: Any) -> GuardResult:
    return GuardResult(False)


class FakePlugin:
    @hookimpl
    def laneway_register_action_kinds(self, register: Callable[[ActionKind], None]) -> None:
        register(ActionKind("greet", "session", execute=_run, validate=_needs_name))
        register(ActionKind("office_fanout", "durable", execute=_run, feature="office"))
        register(ActionKind("declared_only", "durable"))
        register(ActionKind("strict", "durable", execute=_run, validate=_strict_lookup))
        register(
            ActionKind(
                "move_to_step",
                "structural",
                execute=_run,
                trigger_ok=lambda trigger: trigger != "on_enter",
            )
        )

    @hookimpl
    def laneway_register_guards(self, register: Callable[[GuardKind], None]) -> None:
        register(GuardKind("quorum", _quorum_config, _never, feature="office"))
        register(GuardKind("clock", lambda c: c, _never))


def _registry(office: bool = True) -> Registry:
    loaded = load_plugins(PluginSelection(entry_points=False, extra=(("fake", FakePlugin()),)))
    return build_registry(loaded, Features(office=office))


def alpha(field: str, problem: str) -> str:
    """One problem line about the first step of the test board."""
    return f"workflow 'Board', step 'Alpha', {field}: {problem}"


def _workflow_text(events: str, extra_step: str = "") -> str:
    return f"""
id: t
name: Board
steps:
  - id: a
    name: Alpha
    position: 0
    events:
{events}
  - {{id: b, name: Beta, position: 1}}
{extra_step}"""


def _check(events: str, *, office: bool = True) -> list[str]:
    [decl] = load_text(_workflow_text(events), source="board.yml")
    return check_workflow(instantiate(decl, workspace_id="ws"), _registry(office))


def test_a_workflow_every_plugin_covers_has_no_problems() -> None:
    problems = _check(
        """
      on_enter: [{type: greet, config: {name: hi}}, {type: office_fanout}]
      on_turn_complete:
        - type: move_to_step
          config: {step_id: b, if: {quorum: {threshold: all_approve}, clock: {}}}
"""
    )

    assert problems == []


def test_reports_kinds_nobody_declares() -> None:
    problems = _check("      on_comment: [{type: greet, config: {name: x}}, {type: teleport}]")

    assert problems == [
        alpha("events.on_comment[1]", "kind 'teleport' is not declared by any loaded plugin")
    ]


def test_reports_kinds_without_an_executor_and_why() -> None:
    problems = _check(
        "      on_enter: [{type: office_fanout}, {type: declared_only}]", office=False
    )

    assert problems == [
        alpha(
            "events.on_enter[0]", "kind 'office_fanout' has no executor (feature 'office' is off)"
        ),
        alpha(
            "events.on_enter[1]",
            "kind 'declared_only' has no executor (plugin 'fake' declares no executor)",
        ),
    ]


def test_reports_kinds_a_trigger_cannot_run() -> None:
    problems = _check("      on_enter: [{type: move_to_step, config: {step_id: b}}]")

    assert problems == [alpha("events.on_enter[0]", "kind 'move_to_step' cannot run on on_enter")]


def test_reports_config_errors_with_the_field() -> None:
    problems = _check("      on_comment: [{type: greet, config: {name: 3}}, {type: strict}]")

    assert problems == [
        alpha(
            "events.on_comment[0].config.name",
            "invalid config for kind 'greet': name must be a string",
        ),
        alpha(
            "events.on_comment[1].config",
            "invalid config for kind 'strict': KeyError: 'required_key'",
        ),
    ]


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ("{step_id: b, if: {votes: {n: 2}}}", "config.if.votes"),
        ("{step_id: b, votes: {n: 2}}", "config.votes"),
    ],
    ids=["if-form", "legacy-form"],
)
def test_reports_guards_nobody_declares_in_either_form(config: str, field: str) -> None:
    problems = _check(f"      on_turn_complete: [{{type: move_to_step, config: {config}}}]")

    assert problems == [
        alpha(
            f"events.on_turn_complete[0].{field}",
            "guard 'votes' on kind 'move_to_step' is not declared by any loaded plugin",
        )
    ]


def test_reports_disabled_guards_and_guard_config_errors() -> None:
    problems = _check(
        """
      on_turn_complete:
        - type: move_to_step
          config: {step_id: b, quorum: {threshold: all_approve}}
        - type: move_to_next
          config: {if: {quorum: {threshold: most}}}
""",
        office=False,
    )

    assert problems == [
        alpha(
            "events.on_turn_complete[0].config.quorum",
            "guard 'quorum' on kind 'move_to_step' never passes (feature 'office' is off)",
        ),
        alpha(
            "events.on_turn_complete[1]", "kind 'move_to_next' is not declared by any loaded plugin"
        ),
        alpha(
            "events.on_turn_complete[1].config.if.quorum",
            "guard 'quorum' on kind 'move_to_next' never passes (feature 'office' is off)",
        ),
        alpha(
            "events.on_turn_complete[1].config.if.quorum.threshold",
            "invalid config for guard 'quorum' on kind 'move_to_next': unknown threshold 'most'",
        ),
    ]


def test_mapping_configs_of_other_kinds_are_not_guards() -> None:
    problems = _check("      on_enter: [{type: greet, config: {name: x, payload: {a: 1}}}]")

    assert problems == []


def test_a_malformed_if_is_reported() -> None:
    problems = _check(
        "      on_turn_complete: [{type: move_to_step, config: {step_id: b, if: [quorum]}}]"
    )

    assert problems == [
        alpha(
            "events.on_turn_complete[0].config.if",
            "kind 'move_to_step': 'if' must map guard names to their configs",
        )
    ]


def test_office_default_without_the_office_plugin_names_each_missing_piece() -> None:
    decl = shipped_template("office-default")
    assert decl is not None

    problems = check_workflow(instantiate(decl, workspace_id="ws"), _registry())

    unknown = "is not declared by any loaded plugin"
    guard = f"guard 'wait_for_quorum' on kind 'move_to_step' {unknown}"
    expected = [
        ("Work", "events.on_enter[0]", f"kind 'auto_start_agent' {unknown}"),
        ("Work", "events.on_comment[0]", f"kind 'queue_run' {unknown}"),
        ("Work", "events.on_blocker_resolved[0]", f"kind 'queue_run' {unknown}"),
        ("Work", "events.on_children_completed[0]", f"kind 'queue_run' {unknown}"),
        ("Work", "events.on_agent_error[0]", f"kind 'queue_run' {unknown}"),
    ]
    for step in ("Review", "Approval"):
        expected += [
            (step, "events.on_enter[0]", f"kind 'clear_decisions' {unknown}"),
            (step, "events.on_enter[1]", f"kind 'queue_run_for_each_participant' {unknown}"),
            (step, "events.on_turn_complete[0].config.wait_for_quorum", guard),
            (step, "events.on_turn_complete[1].config.wait_for_quorum", guard),
        ]
    expected.append(("Done", "events.on_comment[0]", f"kind 'queue_run' {unknown}"))
    assert problems == [
        f"workflow 'Office Default', step '{step}', {field}: {what}"
        for step, field, what in expected
    ]


# --- validate_with_registry -----------------------------------------------------------------


def _decl(events: str) -> Any:
    [decl] = load_text(_workflow_text(events), source="board.yml")
    return decl


def test_import_refuses_a_config_a_loaded_plugin_rejects() -> None:
    decl = _decl("      on_enter: [{type: greet, config: {name: [1]}}]")

    with pytest.raises(WorkflowFileError) as caught:
        validate_with_registry(decl, _registry())

    assert str(caught.value) == (
        "board.yml: workflow 'Board', step 'Alpha', events.on_enter[0].config.name: "
        "invalid config for kind 'greet': name must be a string"
    )


def test_import_refuses_a_bad_config_of_a_registered_guard_even_when_disabled() -> None:
    decl = _decl(
        "      on_turn_complete: [{type: move_to_step, "
        "config: {step_id: b, quorum: {threshold: 3}}}]"
    )

    with pytest.raises(WorkflowFileError) as caught:
        validate_with_registry(decl, _registry(office=False))

    assert str(caught.value) == (
        "board.yml: workflow 'Board', step 'Alpha', events.on_turn_complete[0].config.quorum."
        "threshold: invalid config for guard 'quorum' on kind 'move_to_step': "
        "unknown threshold 3"
    )


def test_import_accepts_what_only_check_reports() -> None:
    decl = _decl(
        """
      on_enter:
        - {type: teleport, config: {anywhere: true}}
        - {type: declared_only}
        - {type: office_fanout}
        - {type: move_to_step, config: {step_id: b, votes: {n: 1}}}
"""
    )
    registry = _registry(office=False)

    validate_with_registry(decl, registry)

    assert len(check_workflow(instantiate(decl, workspace_id="ws"), registry)) == 5


def test_validate_a_stored_workflow_names_no_file() -> None:
    wf = instantiate(_decl("      on_enter: [{type: greet}]"), workspace_id="ws")

    with pytest.raises(WorkflowFileError) as caught:
        validate_with_registry(wf, _registry())

    assert str(caught.value) == (
        alpha(
            "events.on_enter[0].config.name",
            "invalid config for kind 'greet': name must be a string",
        )
    )
