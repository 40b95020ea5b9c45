"""Reading workflow files: the internal template format and the portable export format.

Both decode into `WorkflowDecl`. Decoding is strict (an unknown key is an error, as in the
reference's `KnownFields(true)`) and stops at the first problem with a one-line message that
names the file, workflow, step and field. What is *not* checked here, on purpose:

- which kinds a trigger may declare (the reference's per-trigger allow-lists are not ours);
- whether an action kind exists (a plugin may provide it later: `laneway workflow check`
  reports it);
- guard configs, in either the ``if: {<guard>: {...}}`` form or the legacy top-level
  ``<guard>: {...}`` form (the plugin that declares the guard validates them).
"""

from __future__ import annotations

import functools
import importlib.resources
import os
from collections.abc import Iterable, Mapping
from typing import Any, Final, NoReturn

import attrs
import yaml

from core.model import DEFAULT_MAX_STEP_ARRIVALS, STAGE_TYPES, TRIGGERS
from core.store import tables
from core.store.rows import decode_events
from core.text import check_text
from core.workflows import bounded
from core.workflows.decl import (
    MOVE_TO_STEP,
    STEP_REF,
    StepDecl,
    WorkflowDecl,
    WorkflowFileError,
    rename_key,
)

MAX_FILE_BYTES: Final = 1024 * 1024
"""The reference's import limit; larger files are refused before they are parsed."""


# Lengths come from the schema so that SQLite (which does not enforce them) accepts exactly the
# files PostgreSQL accepts.
MAX_NAME: Final = tables.column_length(tables.workflows.c.name)
MAX_STEP_NAME: Final = tables.column_length(tables.workflow_steps.c.name)
MAX_TEMPLATE_ID: Final = tables.column_length(tables.workflows.c.template_id)
MAX_COLOR: Final = tables.column_length(tables.workflow_steps.c.color)
MAX_KIND: Final = tables.column_length(tables.step_entry_markers.c.kind)
"""An action's kind is a key of its entry markers."""
COLUMN_INT_MIN: Final = -(2**31)
COLUMN_INT_MAX: Final = 2**31 - 1
"""Integer step fields are 32-bit columns on PostgreSQL."""

PORTABLE_VERSION: Final = 1
PORTABLE_TYPE: Final = "kandev_workflow"
PORTABLE_STEP_REF: Final = "step_position"

_ENVELOPE_KEYS: Final = ("version", "type", "workflows")
_ACTION_KEYS: Final = ("type", "config")
_COMMON_STEP_KEYS: Final = (
    "name",
    "position",
    "color",
    "prompt",
    "stage_type",
    "is_start_step",
    "show_in_command_panel",
    "allow_manual_move",
    "auto_archive_after_hours",
    "auto_advance_requires_signal",
    "cancel_triggers_turn_complete",
    "events",
)


@attrs.frozen
class _Format:
    """What differs between the two file formats."""

    template: bool
    workflow_keys: tuple[str, ...]
    step_keys: tuple[str, ...]
    ref_key: str
    """The `move_to_step` config key that names the target step in this format."""
    foreign_ref_key: str


_TEMPLATE: Final = _Format(
    template=True,
    workflow_keys=("id", "name", "description", "hidden", "max_step_arrivals", "steps"),
    step_keys=("id", *_COMMON_STEP_KEYS),
    ref_key=STEP_REF,
    foreign_ref_key=PORTABLE_STEP_REF,
)
_PORTABLE: Final = _Format(
    template=False,
    workflow_keys=("name", "description", "prompt", "agent_profile", "max_step_arrivals", "steps"),
    # stage_type is ours: the reference's export drops it, which is lossy (section 11.9).
    step_keys=(*_COMMON_STEP_KEYS, "agent_profile", "wip_limit", "pull_from_step_position"),
    ref_key=PORTABLE_STEP_REF,
    foreign_ref_key=STEP_REF,
)


@attrs.frozen
class _At:
    """Where the decoder is, for error messages. `prefix` stands in for a name not yet known."""

    file: str
    workflow: str | None = None
    step: str | None = None
    prefix: str = ""

    def fail(self, field: str | None, problem: str) -> NoReturn:
        raise WorkflowFileError(
            problem,
            file=self.file,
            workflow=self.workflow,
            step=self.step,
            field=_join(self.prefix, field),
        )


def _join(prefix: str, field: str | None) -> str | None:
    if not field:
        return prefix or None
    if not prefix:
        return field
    return f"{prefix}{field}" if field.startswith("[") else f"{prefix}.{field}"


# --- entry points ---------------------------------------------------------------------------


def load_file(path: str | os.PathLike[str]) -> list[WorkflowDecl]:
    """The workflows declared in the file at `path` (either format)."""
    source = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            # One byte past the limit is enough to know the file is too large.
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise WorkflowFileError(f"cannot read: {exc.strerror or exc}", file=source) from exc
    if len(data) > MAX_FILE_BYTES:
        raise WorkflowFileError("file is larger than 1 MiB", file=source)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkflowFileError(f"not UTF-8 text ({exc.reason})", file=source) from exc
    return load_text(text, source=source)


def load_text(text: str, source: str = "<string>") -> list[WorkflowDecl]:
    """The workflows declared in `text` (either format); `source` names it in errors."""
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        line = text.count("\n", 0, exc.start) + 1
        column = exc.start - text.rfind("\n", 0, exc.start)
        raise WorkflowFileError(
            f"text contains a lone surrogate (U+{ord(text[exc.start]):04X})",
            file=source,
            field=f"line {line}, column {column}",
        ) from None
    if size > MAX_FILE_BYTES:
        raise WorkflowFileError("file is larger than 1 MiB", file=source)
    return decode_document(_parse_yaml(text, source), source)


def decode_document(data: Any, source: str = "<string>") -> list[WorkflowDecl]:
    """The workflows in an already-parsed document (e.g. a JSON body), detecting its format."""
    at = _At(source)
    if data is None:
        at.fail(None, "empty file: expected a workflow template or a portable document")
    if not isinstance(data, dict):
        at.fail(None, f"expected a mapping at the top level, got {_kind(data)}")
    if any(key in data for key in _ENVELOPE_KEYS):
        return _portable(data, at)
    if "steps" in data:
        return [_workflow(data, at, _TEMPLATE)]
    at.fail(
        None,
        "not a workflow file: expected a template (id, name, steps) "
        "or a portable document (version, type, workflows)",
    )


# --- shipped templates ----------------------------------------------------------------------


@functools.cache
def _shipped() -> tuple[WorkflowDecl, ...]:
    folder = importlib.resources.files("core.workflows.templates")
    decls: list[WorkflowDecl] = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yml"):
            text = entry.read_text(encoding="utf-8")
            decls.extend(load_text(text, source=f"templates/{entry.name}"))
    return tuple(decls)


def shipped_templates() -> list[WorkflowDecl]:
    """The templates laneway ships, hidden ones included, ordered by file name."""
    return list(_shipped())


def shipped_template(template_id: str) -> WorkflowDecl | None:
    """The shipped template with this id, or None."""
    for decl in _shipped():
        if decl.template_id == template_id:
            return decl
    return None


# --- YAML -----------------------------------------------------------------------------------


class _Loader(bounded.PARSER):  # type: ignore[misc]
    """SafeLoader that refuses duplicate keys and keeps timestamps as strings.

    A duplicate key (two `on_enter:` in one step) would otherwise silently drop the first
    list. A date-looking value (`payload: {since: 2024-01-01}`) would become a `date`, which
    the store cannot encode as JSON; the author meant the text. Integers are range-checked
    (`bounded.construct_int`).
    """


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        # Merge keys (`<<: *base`) may legitimately be overridden; only literal keys count.
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    mapping: dict[Any, Any] = loader.construct_mapping(node, deep=True)
    return mapping


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor("tag:yaml.org,2002:int", bounded.construct_int)


def _parse_yaml(text: str, source: str) -> Any:
    try:
        # Limits first, on the event stream: nothing is built for a file that crosses one.
        bounded.scan(text)
        # _Loader derives from SafeLoader: no arbitrary object construction.
        return yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "malformed"
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else None
        what = problem if isinstance(exc, bounded.LimitError) else f"invalid YAML: {problem}"
        raise WorkflowFileError(what, file=source, field=where) from exc
    except yaml.YAMLError as exc:
        raise WorkflowFileError(f"invalid YAML: {exc}", file=source) from exc


# --- documents ------------------------------------------------------------------------------


def _portable(data: Mapping[Any, Any], at: _At) -> list[WorkflowDecl]:
    _reject_unknown(at, data, _ENVELOPE_KEYS)
    version = data.get("version")
    if version is None:
        at.fail("version", "required")
    # `type(...) is int`: YAML `true` would otherwise pass as 1.
    if type(version) is not int or version != PORTABLE_VERSION:
        at.fail("version", f"unsupported version {version!r}; expected {PORTABLE_VERSION}")
    kind = data.get("type")
    if kind != PORTABLE_TYPE:
        at.fail("type", f"expected '{PORTABLE_TYPE}', got {_show(kind)}")
    workflows = data.get("workflows")
    if not isinstance(workflows, list) or not workflows:
        at.fail("workflows", f"expected a non-empty list of workflows, got {_show(workflows)}")
    return [
        _workflow(raw, attrs.evolve(at, prefix=f"workflows[{i}]"), _PORTABLE)
        for i, raw in enumerate(workflows)
    ]


def _workflow(raw: Any, at: _At, fmt: _Format) -> WorkflowDecl:
    if not isinstance(raw, dict):
        at.fail(None, f"expected a mapping, got {_kind(raw)}")
    name = _required_str(at, raw, "name", MAX_NAME)
    at = _At(at.file, workflow=name)
    _reject_unknown(at, raw, fmt.workflow_keys)
    if fmt.template:
        template_id: str | None = _required_str(at, raw, "id", MAX_TEMPLATE_ID)
        prompt = ""
        hidden = _bool(at, raw, "hidden", False)
    else:
        template_id = None
        prompt = _str(at, raw, "prompt", "")
        hidden = False
        _agent_profile(at, raw)
    description = _str(at, raw, "description", "")
    steps = raw.get("steps")
    if not isinstance(steps, list) or not steps:
        at.fail("steps", f"expected a non-empty list of steps, got {_show(steps)}")
    parsed = [_step(item, i, at, fmt) for i, item in enumerate(steps)]
    return WorkflowDecl(
        name=name,
        description=description,
        prompt=prompt,
        hidden=hidden,
        template_id=template_id,
        steps=_link(parsed, fmt),
        max_step_arrivals=_int(at, raw, "max_step_arrivals", DEFAULT_MAX_STEP_ARRIVALS, minimum=0),
        source=at.file,
    )


@attrs.frozen
class _ParsedStep:
    """A step whose own fields are valid; references to other steps are not resolved yet."""

    at: _At
    fields: dict[str, Any]
    key: str
    position: int
    is_start_step: bool
    pull_from: int | None
    actions: dict[str, list[dict[str, Any]]]


def _step(raw: Any, index: int, wf_at: _At, fmt: _Format) -> _ParsedStep:
    at = attrs.evolve(wf_at, prefix=f"steps[{index}]")
    if not isinstance(raw, dict):
        at.fail(None, f"expected a mapping, got {_kind(raw)}")
    name = _required_str(at, raw, "name", MAX_STEP_NAME)
    at = attrs.evolve(wf_at, step=name)
    _reject_unknown(at, raw, fmt.step_keys)
    position = _int(at, raw, "position", None, minimum=0)
    key = _required_str(at, raw, "id", MAX_NAME) if fmt.template else str(position)
    stage_type = _str(at, raw, "stage_type", "") or "custom"
    if stage_type not in STAGE_TYPES:
        at.fail("stage_type", f"'{stage_type}' is not one of {', '.join(STAGE_TYPES)}")
    prompt = _str(at, raw, "prompt", "")
    is_start_step = _bool(at, raw, "is_start_step", False)
    fields: dict[str, Any] = {
        "name": name,
        "position": position,
        "is_start_step": is_start_step,
        "allow_manual_move": _bool(at, raw, "allow_manual_move", True),
        "wip_limit": _int(at, raw, "wip_limit", 0, minimum=0),
        # The reference trims template prompts (a `|` block ends in a newline).
        "prompt": prompt.strip() if fmt.template else prompt,
        "stage_type": stage_type,
        "color": _str(at, raw, "color", "", MAX_COLOR),
        "show_in_command_panel": _bool(at, raw, "show_in_command_panel", False),
        "auto_archive_after_hours": _int(at, raw, "auto_archive_after_hours", 0, minimum=0),
        "auto_advance_requires_signal": _bool(at, raw, "auto_advance_requires_signal", False),
        "cancel_triggers_turn_complete": _bool(at, raw, "cancel_triggers_turn_complete", False),
    }
    pull_from = None
    if raw.get("pull_from_step_position") is not None:
        pull_from = _int(at, raw, "pull_from_step_position", None)
    if not fmt.template:
        _agent_profile(at, raw)
    return _ParsedStep(
        at=at,
        fields=fields,
        key=key,
        position=position,
        is_start_step=is_start_step,
        pull_from=pull_from,
        actions=_events(at, raw.get("events"), fmt),
    )


def _link(parsed: list[_ParsedStep], fmt: _Format) -> tuple[StepDecl, ...]:
    """Cross-step rules, then every reference turned into a step key."""
    by_position: dict[int, _ParsedStep] = {}
    by_key: dict[str, _ParsedStep] = {}
    by_name: dict[str, _ParsedStep] = {}
    start: _ParsedStep | None = None
    for step in parsed:
        # Steps are found by name, case-insensitively (`task move T Review`): two steps with
        # one name would make one of them unreachable.
        name = step.fields["name"].casefold()
        other = by_name.get(name)
        if other is not None:
            step.at.fail(
                "name",
                f"duplicate step name; the step at position {other.position} is called "
                f"'{other.fields['name']}'",
            )
        by_name[name] = step
        other = by_position.get(step.position)
        if other is not None:
            step.at.fail(
                "position",
                f"duplicate position {step.position}; step '{other.fields['name']}' has it too",
            )
        by_position[step.position] = step
        other = by_key.get(step.key)
        if other is not None and fmt.template:
            step.at.fail(
                "id", f"duplicate step id '{step.key}'; step '{other.fields['name']}' has it too"
            )
        by_key[step.key] = step
        if step.is_start_step:
            if start is not None:
                step.at.fail(
                    "is_start_step", f"step '{start.fields['name']}' is already the start step"
                )
            start = step

    def target(step: _ParsedStep, field: str, ref: Any) -> str:
        found = by_key.get(ref) if fmt.template else by_position.get(ref)
        if found is None:
            what = f"has id '{ref}'" if fmt.template else f"is at position {ref}"
            step.at.fail(field, f"no step {what}")
        return found.key

    decls = []
    for step in parsed:
        pull_from = None
        if step.pull_from is not None:
            if step.pull_from == step.position:
                step.at.fail("pull_from_step_position", "a step cannot pull from itself")
            pull_from = target(step, "pull_from_step_position", step.pull_from)
        raw_events: dict[str, list[dict[str, Any]]] = {}
        for trigger, actions in step.actions.items():
            raw_events[trigger] = []
            for i, action in enumerate(actions):
                config = action["config"]
                if action["type"] == MOVE_TO_STEP:
                    field = f"events.{trigger}[{i}].config.{fmt.ref_key}"
                    key = target(step, field, config[fmt.ref_key])
                    config = rename_key(config, fmt.ref_key, STEP_REF, key)
                raw_events[trigger].append({"type": action["type"], "config": config})
        decls.append(
            StepDecl(
                key=step.key, pull_from=pull_from, events=decode_events(raw_events), **step.fields
            )
        )
    return tuple(sorted(decls, key=lambda s: s.position))


# --- events ---------------------------------------------------------------------------------


def _events(at: _At, raw: Any, fmt: _Format) -> dict[str, list[dict[str, Any]]]:
    """Trigger -> actions as `{type, config}` mappings; triggers with no actions are left out."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        at.fail("events", f"expected a mapping of trigger to actions, got {_kind(raw)}")
    events: dict[str, list[dict[str, Any]]] = {}
    for trigger, actions in raw.items():
        field = f"events.{trigger}"
        if trigger not in TRIGGERS:
            at.fail(field, f"unknown trigger; expected one of {', '.join(TRIGGERS)}")
        if actions is None:
            continue
        if not isinstance(actions, list):
            at.fail(field, f"expected a list of actions, got {_kind(actions)}")
        parsed = [_action(at, f"{field}[{i}]", action, fmt) for i, action in enumerate(actions)]
        if parsed:
            events[trigger] = parsed
    return events


def _action(at: _At, path: str, raw: Any, fmt: _Format) -> dict[str, Any]:
    if not isinstance(raw, dict):
        at.fail(path, f"expected a mapping with a 'type', got {_kind(raw)}")
    for key in raw:
        if key not in _ACTION_KEYS:
            at.fail(f"{path}.{key}", "unknown key; an action has only 'type' and 'config'")
    kind = raw.get("type")
    if kind is None:
        at.fail(f"{path}.type", "required")
    if not isinstance(kind, str):
        at.fail(f"{path}.type", f"expected a string, got {_kind(kind)}")
    if not kind.strip():
        at.fail(f"{path}.type", "must not be empty")
    _text(at, f"{path}.type", kind, MAX_KIND)
    config = raw.get("config")
    if config is None:
        config = {}
    if not isinstance(config, dict):
        at.fail(f"{path}.config", f"expected a mapping, got {_kind(config)}")
    _plain(at, f"{path}.config", config)
    if kind == MOVE_TO_STEP:
        _move_target(at, f"{path}.config", config, fmt)
    return {"type": kind, "config": config}


def _move_target(at: _At, path: str, config: Mapping[str, Any], fmt: _Format) -> None:
    if fmt.foreign_ref_key in config:
        where = "a template" if fmt.template else "the portable format"
        at.fail(
            f"{path}.{fmt.foreign_ref_key}",
            f"{where} names the target step with {fmt.ref_key}, not {fmt.foreign_ref_key}",
        )
    ref = config.get(fmt.ref_key)
    if ref is None:
        at.fail(f"{path}.{fmt.ref_key}", "required: move_to_step needs a target step")
    if fmt.template and not isinstance(ref, str):
        at.fail(f"{path}.{fmt.ref_key}", f"expected a step id (string), got {_kind(ref)}")
    if not fmt.template and type(ref) is not int:
        at.fail(f"{path}.{fmt.ref_key}", f"expected a step position (integer), got {_kind(ref)}")


def _plain(at: _At, path: str, value: Any, depth: int = 0) -> None:
    """Configs are stored as JSON, so they may hold only what JSON can say, and only text
    every database stores. A document parsed elsewhere (a JSON body) was not scanned by
    `bounded`, so depth and integer range are checked here too."""
    if depth > bounded.MAX_DEPTH:
        at.fail(path, f"nested deeper than {bounded.MAX_DEPTH} levels (limit)")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                at.fail(path, f"keys must be strings, got {_kind(key)} {key!r}")
            _text(at, path, key)
            _plain(at, f"{path}.{key}", item, depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _plain(at, f"{path}[{i}]", item, depth + 1)
    elif isinstance(value, str):
        _text(at, path, value)
    elif isinstance(value, int) and not isinstance(value, bool):
        if not bounded.INT_MIN <= value <= bounded.INT_MAX:
            at.fail(path, f"integer out of range ({bounded.INT_MIN}..{bounded.INT_MAX})")
    elif value is not None and not isinstance(value, float | bool):
        at.fail(path, f"expected a JSON value, got {type(value).__name__}")


# --- fields ---------------------------------------------------------------------------------


def _reject_unknown(at: _At, raw: Mapping[Any, Any], known: Iterable[str]) -> None:
    allowed = set(known)
    for key in raw:
        if key not in allowed:
            at.fail(str(key), "unknown key")


def _required_str(at: _At, raw: Mapping[Any, Any], key: str, max_length: int) -> str:
    value = raw.get(key)
    if value is None:
        at.fail(key, "required")
    if not isinstance(value, str):
        at.fail(key, f"expected a string, got {_kind(value)}")
    if not value.strip():
        at.fail(key, "must not be empty")
    return _text(at, key, value, max_length)


def _str(
    at: _At, raw: Mapping[Any, Any], key: str, default: str, max_length: int | None = None
) -> str:
    value = raw.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        at.fail(key, f"expected a string, got {_kind(value)}")
    return _text(at, key, value, max_length)


def _text(at: _At, key: str, value: str, max_length: int | None = None) -> str:
    """`value`, if every database can store it (in a column of `max_length`)."""
    problem = check_text(value)
    if problem is not None:
        at.fail(key, problem)
    if max_length is not None and len(value) > max_length:
        at.fail(key, f"longer than {max_length} characters ({len(value)})")
    return value


def _bool(at: _At, raw: Mapping[Any, Any], key: str, default: bool) -> bool:
    value = raw.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        at.fail(key, f"expected true or false, got {_kind(value)}")
    return value


def _int(
    at: _At, raw: Mapping[Any, Any], key: str, default: int | None, *, minimum: int | None = None
) -> int:
    """An integer field; `default` None makes it required."""
    value = raw.get(key)
    if value is None:
        if default is None:
            at.fail(key, "required")
        return default
    if type(value) is not int:
        at.fail(key, f"expected an integer, got {_kind(value)}")
    if minimum is not None and value < minimum:
        at.fail(key, f"must be >= {minimum}, got {value}")
    if not COLUMN_INT_MIN <= value <= COLUMN_INT_MAX:
        at.fail(key, f"out of range ({COLUMN_INT_MIN}..{COLUMN_INT_MAX}), got {value}")
    return value


def _agent_profile(at: _At, raw: Mapping[Any, Any]) -> None:
    """Accepted for compatibility; matching it to a local profile is not done on import."""
    value = raw.get("agent_profile")
    if value is not None and not isinstance(value, dict):
        at.fail(
            "agent_profile", f"expected a mapping (agent_name, model, mode), got {_kind(value)}"
        )


def _kind(value: Any) -> str:
    """A value's type in YAML's words, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _show(value: Any) -> str:
    """A short rendering of a scalar, or its kind for anything bigger."""
    if isinstance(value, str):
        return f"'{value}'"
    if value is None or isinstance(value, bool | int | float):
        return _kind(value) if value is None else repr(value)
    if isinstance(value, list | dict) and not value:
        return f"an empty {_kind(value).removeprefix('a ')}"
    return _kind(value)
