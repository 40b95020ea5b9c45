"""Issue 24 item 4, CLI.md: `heartbeat_seconds: N` on a step, in the internal template
format and the portable format alike: a positive whole number, kept through instantiation,
exported and read back; anything else refused with one line naming the step and field. And
item 6: `workflow check` names a declared on_heartbeat its step cannot fire."""

from __future__ import annotations

import pytest

from core.plugin.features import Features
from core.plugin.loading import load_plugins
from core.plugin.registry import Registry, build_registry
from core.plugin.selection import PluginSelection
from core.workflows import (
    WorkflowFileError,
    check_workflow,
    export_document,
    instantiate,
    load_text,
    to_yaml,
)

TEMPLATE = """
id: watch
name: Watch
steps:
  - id: todo
    name: Todo
    position: 0
    is_start_step: true
  - id: watch
    name: Watching
    position: 1
    heartbeat_seconds: {value}
    events:
      on_heartbeat:
        - type: queue_run
          config: {{target: primary, task_id: this, reason: heartbeat}}
  - id: done
    name: Done
    position: 2
"""

PORTABLE = """
version: 1
type: kandev_workflow
workflows:
  - name: Watch
    steps:
      - {{name: Todo, position: 0, is_start_step: true}}
      - name: Watching
        position: 1
        heartbeat_seconds: {value}
        events: {{on_heartbeat: [{{type: queue_run}}]}}
"""


@pytest.mark.parametrize("text", [TEMPLATE, PORTABLE], ids=["template", "portable"])
def test_heartbeat_seconds_is_read_kept_and_exported(text: str) -> None:
    [decl] = load_text(text.format(value=30), source="w.yml")
    wf = instantiate(decl, workspace_id="ws")
    assert {s.name: s.heartbeat_seconds for s in wf.steps}["Watching"] == 30
    assert {s.name: s.heartbeat_seconds for s in wf.steps}["Todo"] is None
    document = export_document([wf])
    exported = {s["name"]: s for s in document["workflows"][0]["steps"]}
    assert exported["Watching"]["heartbeat_seconds"] == 30
    assert "heartbeat_seconds" not in exported["Todo"]
    [again] = load_text(to_yaml(document), source="export.yml")
    assert {s.name: s.heartbeat_seconds for s in again.steps}["Watching"] == 30


@pytest.mark.parametrize("text", [TEMPLATE, PORTABLE], ids=["template", "portable"])
@pytest.mark.parametrize(
    ("value", "says"),
    [("0", "must be >= 1"), ("-5", "must be >= 1"), ("ten", "expected an integer"),
     ("1.5", "expected an integer")],
)  # fmt: skip
def test_heartbeat_seconds_must_be_a_positive_whole_number(
    text: str, value: str, says: str
) -> None:
    with pytest.raises(WorkflowFileError) as caught:
        load_text(text.format(value=value), source="w.yml")
    line = str(caught.value)
    assert "\n" not in line
    assert "Watching" in line
    assert "heartbeat_seconds" in line
    assert says in line


def _registry() -> Registry:
    return build_registry(load_plugins(PluginSelection(entry_points=False)), Features())


def test_check_names_a_heartbeat_trigger_without_heartbeat_seconds() -> None:
    """Item 6: on_heartbeat on a step with no heartbeat_seconds never fires; a heartbeat
    with nothing declared for it fires nothing. Both are named by `workflow check`."""
    without = TEMPLATE.replace("    heartbeat_seconds: {value}\n", "").replace("{{", "{")
    [decl] = load_text(without.replace("}}", "}"), source="w.yml")
    problems = check_workflow(instantiate(decl, workspace_id="ws"), _registry())
    assert any(
        "Watching" in p and "events.on_heartbeat" in p and "no heartbeat_seconds" in p
        for p in problems
    ), problems
    idle = TEMPLATE.format(value=5).split("    events:")[0] + "  - id: done\n    name: Done\n"
    idle += "    position: 2\n"
    [decl] = load_text(idle, source="w.yml")
    problems = check_workflow(instantiate(decl, workspace_id="ws"), _registry())
    assert any("heartbeat_seconds" in p and "fires nothing" in p for p in problems), problems
