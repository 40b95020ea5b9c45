"""The JSON shapes of CLI.md, in one place: what `laneway --json` prints and what `laneway
serve` answers are written by these functions, so the two can never drift apart.

A task, run, session, participant, decision or profile is its attrs value as a dict (field
names already match the table columns); a workflow and a step have the explicit shapes CLI.md
spells out, so a column added to the model does not silently change the contract.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from core.model import AgentProfile, Item, Marker, Run, Session, Step, StepEntry, Workflow
from core.store.rows import encode_events

STEP_KEYS = (
    "id",
    "workflow_id",
    "name",
    "position",
    "is_start_step",
    "allow_manual_move",
    "wip_limit",
    "pull_from_step_id",
    "agent_profile_id",
    "prompt",
    "stage_type",
)


_AS_IS: frozenset[type] = frozenset({str, int, bool, type(None)})
"""What JSON holds as it is: `plain` returns these without a look (a board's page of cards is
mostly these, tens of thousands of values)."""


def plain(value: Any) -> Any:
    """`value` with attrs instances, mappings and tuples made JSON-ready, recursively."""
    kind = type(value)
    if kind in _AS_IS:
        return value
    if kind is dict:
        # The common case first, each value that is already JSON taken without a call: a
        # board page's 200 cards went through this 12,000 times (issue 45 item 5).
        return {
            k if type(k) is str else str(k): v if type(v) in _AS_IS else plain(v)
            for k, v in value.items()
        }
    if kind is list:
        return [v if type(v) in _AS_IS else plain(v) for v in value]
    if attrs.has(kind):
        return {k: plain(v) for k, v in attrs.asdict(value, recurse=False).items()}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no such number (one stored before laneway refused them)
    return value


def step_json(step: Step) -> dict[str, Any]:
    out = {key: getattr(step, key) for key in STEP_KEYS}
    out["events"] = encode_events(step.events)
    return out


def workflow_json(workflow: Workflow) -> dict[str, Any]:
    return {
        "id": workflow.id,
        "name": workflow.name,
        "description": workflow.description,
        "hidden": workflow.hidden,
        "max_step_arrivals": workflow.max_step_arrivals,
        "repository": workflow.repository,
        "base_branch": workflow.base_branch,
        "retire_worktrees": workflow.retire_worktrees,
        "remote": workflow.remote,
        "setup": workflow.setup,
        "cleanup": workflow.cleanup,
        "forge": dict(workflow.forge) if workflow.forge is not None else None,
        "steps": [step_json(s) for s in sorted(workflow.steps, key=lambda s: s.position)],
    }


def _cause(raw: str | None) -> Any:
    # Kinds record structured accounting (e.g. the fan-out's counts) as JSON text; a reader
    # wants the object, but a free-text cause must survive as the string it is.
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def entry_json(entry: StepEntry, markers: Iterable[Marker]) -> dict[str, Any]:
    return {
        "id": entry.id,
        "task_id": entry.task_id,
        "step_id": entry.step_id,
        "entry_seq": entry.entry_seq,
        "entry_path": entry.entry_path,
        "declaration_digest": entry.declaration_digest,
        "terminal": entry.terminal,
        "markers": [
            {
                "position": m.position,
                "kind": m.kind,
                "state": m.state,
                "epoch": m.epoch,
                "reason": m.reason,
                "cause": _cause(m.cause),
            }
            for m in markers
        ],
    }


def trigger_json(result: Mapping[str, Any]) -> dict[str, Any]:
    """A turn's result: `{"task", "transitioned", "from_step_id", "to_step_id"}`, plus
    `refusals` (`[{"guard", "reason"}]`: the guards that kept a move back) and `halted` (the
    runaway-loop limit kept it back)."""
    return {
        "task": plain(result["task"]),
        "transitioned": bool(result["transitioned"]),
        "from_step_id": result["from_step_id"],
        "to_step_id": result["to_step_id"],
        "refusals": list(result.get("refusals", ())),
        "halted": bool(result.get("halted", False)),
    }


def decision_result_json(result: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded verdict: `{"decision", "transitioned", "to_step_id"}`, plus `refusals` and
    `halted` as for a turn."""
    return {
        "decision": plain(result["decision"]),
        "transitioned": bool(result["transitioned"]),
        "to_step_id": result["to_step_id"],
        "refusals": list(result.get("refusals", ())),
        "halted": bool(result.get("halted", False)),
    }


def template_json(decl: Any) -> dict[str, Any]:
    """A shipped template as `workflow templates` lists it."""
    return {
        "id": decl.template_id,
        "name": decl.name,
        "steps": len(decl.steps),
        "hidden": decl.hidden,
    }


AGENT_KEYS = (
    "acp_session_id",
    "modes",
    "mode",
    "config_options",
    "model",
    "plan_mode",
    "continued_by",
)
"""What an agent reported of its conversation, as a session's `agent` shows it (AGENTS.md);
`continued_by` says how the agent process now holding it took it up: `new`, `resume` or `load`
(issue 41 item 5)."""
_LISTS = frozenset({"modes", "config_options"})


def desired_of(
    metadata: Mapping[str, Any], profile_name: str | None, resets_applied: int = 0
) -> dict[str, Any]:
    """What the workflow wants of the conversation, from the effects the session kinds
    recorded in the session's metadata: `mode` (set_session_mode), `plan_mode`
    (enable/disable_plan_mode), `model` and `config_options` (the configure_session rules for
    the profile's name, in order: `set` changes, `restore_original` drops what was set,
    `keep` leaves it), and `fresh`: a reset_agent_context not yet applied (the runtime
    records the resets it applied as the agent's `resets_applied`)."""
    model: str | None = None
    options: dict[str, Any] = {}
    for rule in metadata.get("configured") or ():
        if not isinstance(rule, Mapping) or rule.get("agent_name") != profile_name:
            continue
        if rule.get("operation") == "set":
            model = rule.get("model") or model
            options.update(rule.get("config_options") or {})
        elif rule.get("operation") == "restore_original":
            model, options = None, {}
    return {
        "mode": metadata.get("session_mode"),
        "plan_mode": bool(metadata.get("plan_mode", False)),
        "model": model,
        "config_options": options,
        "fresh": len(metadata.get("context_resets") or ()) > resets_applied,
    }


def agent_json(session: Session, profile: AgentProfile | None) -> dict[str, Any]:
    """A session's `agent`: the profile's protocol, what the agent reported (None or [] when
    it has not said) and what the workflow wants (`desired`)."""
    reported = session.agent
    out: dict[str, Any] = {"protocol": profile.protocol if profile is not None else None}
    for key in AGENT_KEYS:
        value = reported.get(key)
        out[key] = plain(value) if value is not None else ([] if key in _LISTS else None)
    applied = reported.get("resets_applied", 0)
    out["desired"] = desired_of(
        session.metadata,
        profile.name if profile is not None else None,
        applied if isinstance(applied, int) else 0,
    )
    return out


def session_json(session: Session, profiles: Iterable[AgentProfile]) -> dict[str, Any]:
    """A session row with its `agent` as agent_json shows it; `profiles` holds (at least)
    the session's profile."""
    by_id = {p.id: p for p in profiles}
    out: dict[str, Any] = plain(session)
    out["agent"] = agent_json(session, by_id.get(session.agent_profile_id or ""))
    return out


def item_json(item: Item) -> dict[str, Any]:
    """A transcript item: `{"seq", "session_id", "run_id", "kind", "text", "data", "at"}`."""
    return {
        "seq": item.seq,
        "session_id": item.session_id,
        "run_id": item.run_id,
        "kind": item.kind,
        "text": item.text,
        "data": plain(item.data),
        "at": item.at,
    }


def run_show_json(run: Run, items: Iterable[Item]) -> dict[str, Any]:
    """`runs show`: `{"run": run, "items": [item]}`."""
    return {"run": plain(run), "items": [item_json(i) for i in items]}
