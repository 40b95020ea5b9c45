from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from core import board, ids
from core.errors import Conflict, LanewayError, NotFound
from core.model import (
    NETWORKS,
    PERMISSION_MODES,
    PROTOCOLS,
    SANDBOXES,
    TOOL_KINDS,
    AgentProfile,
)
from core.services.base import Lazy, Service
from core.store import prepared, rows
from core.store import tables as t
from core.text import require_text

if TYPE_CHECKING:
    from core.services.peers import Peers
    from core.services.workspace import WorkspaceService

SETTABLE = (
    "command",
    "role",
    "env",
    "requires_env",
    "max_concurrent_sessions",
    "env_from",
    "pass_env",
    "protocol",
    "permissions",
    "auto_allow",
    "turn_timeout",
    "idle_timeout",
    "mode",
    "sandbox",
    "network",
)
"""The options of a profile `set` may change: all of `add`'s but the name."""

_BY_ID = sa.select(t.agent_profiles).where(
    t.agent_profiles.c.id == sa.bindparam("ref", type_=sa.String)
)
"""A profile by id: once per run (prepared driver SQL, core.store.prepared)."""
_LIVE_RUNS = ("queued", "claimed")
"""Run statuses that still need their profile."""


def _users(profile_id: str) -> sa.Select[tuple[int]]:
    """Whatever still uses the profile: a live run, a seat, a step's or a workflow's agent."""
    return (
        sa.union_all(
            sa.select(sa.literal(1)).where(
                t.runs.c.agent_profile_id == profile_id, t.runs.c.status.in_(_LIVE_RUNS)
            ),
            sa.select(sa.literal(1)).where(
                t.workflow_step_participants.c.agent_profile_id == profile_id
            ),
            sa.select(sa.literal(1)).where(t.workflow_steps.c.agent_profile_id == profile_id),
            sa.select(sa.literal(1)).where(t.workflows.c.agent_profile_id == profile_id),
        )
        .subquery()
        .select()
    )


_JSON_OPTIONS = frozenset({"command", "env", "requires_env", "env_from", "pass_env", "auto_allow"})


def _one_of(name: str, option: str, value: Any, allowed: Iterable[str]) -> None:
    choices = tuple(allowed)
    if value not in choices:
        raise LanewayError(
            f"profile {name!r}, {option}: {value!r} is not one of {', '.join(choices)}"
        )


def _seconds(name: str, option: str, value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise LanewayError(f"profile {name!r}, {option}: must be a positive number of seconds")
    return float(value)


def _checked(name: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """`options` (any of SETTABLE) checked, as the column values to store; a bad one is a
    LanewayError naming the profile and the option."""
    unknown = sorted(set(options) - set(SETTABLE))
    if unknown:
        raise LanewayError(f"profile {name!r}: no option {unknown[0]!r}")
    if "role" in options:
        require_text(
            options["role"], f"profile {name!r}, role", t.column_length(t.agent_profiles.c.role)
        )
    env = options.get("env") or {}
    env_from = options.get("env_from") or {}
    for option, names in (
        ("env", env),
        ("env_from", env_from),
        ("env_from", env_from.values()),
        ("pass_env", options.get("pass_env", ())),
        ("requires_env", options.get("requires_env", ())),
    ):
        for var in names:
            if not var or "=" in var or "\x00" in var:
                raise LanewayError(f"profile {name!r}, {option}: {var!r} is not a variable name")
    for key, value in env.items():
        require_text(value, f"profile {name!r}, env {key}")
    if "command" in options and not options["command"]:
        raise LanewayError(f"profile {name!r}, command: must not be empty")
    if "max_concurrent_sessions" in options and options["max_concurrent_sessions"] < 1:
        raise LanewayError(f"profile {name!r}, max_concurrent_sessions: must be at least 1")
    if "protocol" in options:
        _one_of(name, "protocol", options["protocol"], PROTOCOLS)
    if "permissions" in options:
        _one_of(name, "permissions", options["permissions"], PERMISSION_MODES)
    if "sandbox" in options:
        _one_of(name, "sandbox", options["sandbox"], SANDBOXES)
    if "network" in options:
        _one_of(name, "network", options["network"], NETWORKS)
    for kind in options.get("auto_allow", ()):
        _one_of(name, "auto_allow", kind, TOOL_KINDS)
    if options.get("mode") is not None:
        require_text(options["mode"], f"profile {name!r}, mode", 200)
    values: dict[str, Any] = {}
    for option, value in options.items():
        if option in ("turn_timeout", "idle_timeout"):
            values[option] = _seconds(name, option, value)
        elif option in ("env", "env_from"):
            values[option] = rows.dumps(dict(value or {}))
        elif option == "mode":
            values[option] = value or None  # `--mode ''`: the agent's own starting mode
        elif option == "auto_allow":
            values[option] = rows.dumps(list(dict.fromkeys(value)))
        elif option in _JSON_OPTIONS:
            values[option] = rows.dumps(list(value))
        else:
            values[option] = value
    return values


def _room_checked(name: str, sandbox: str, network: str) -> None:
    """`--network off` is a sandbox's: without one it would promise what nothing keeps."""
    if network == "off" and sandbox == "none":
        raise LanewayError(
            f"profile {name!r}, network: off needs a sandbox (--sandbox bwrap); "
            "without one the agent has the worker's network"
        )


class ProfileService(Service):
    """Agent profiles: the command that runs an agent, its env and its role."""

    def __init__(self, peers: Peers, *, workspace: Lazy[WorkspaceService]) -> None:
        super().__init__(peers)
        self._workspace = workspace
        self._kept: dict[str, AgentProfile] = {}

    def forget(self) -> None:
        """Drop the profiles `current` kept (the host calls it when the board's catalogue
        version moved). A new dict, not a cleared one: a read that began before this call
        fills the dict it started with, which nobody reads any more."""
        self._kept = {}

    def current(self, profile_id: str) -> AgentProfile:
        """A profile by id, kept in this process until the board's catalogue version moves
        (every change of a profile moves it; the host follows it at the start of each
        transaction and read). For a turn whose run's claim followed the board a moment ago:
        its agent's profile without a read of its own (issue 45: one a live turn)."""
        kept = self._kept
        found = kept.get(profile_id)
        if found is None:
            found = kept[profile_id] = self.get(profile_id)
        return found

    def add(
        self,
        name: str,
        *,
        command: list[str] | tuple[str, ...],
        role: str = "worker",
        env: dict[str, str] | None = None,
        requires_env: list[str] | tuple[str, ...] = (),
        max_concurrent_sessions: int = 1,
        env_from: dict[str, str] | None = None,
        pass_env: list[str] | tuple[str, ...] = (),
        protocol: str = "exec",
        permissions: str = "ask",
        auto_allow: list[str] | tuple[str, ...] = (),
        turn_timeout: float = 3600.0,
        idle_timeout: float = 900.0,
        mode: str | None = None,
        sandbox: str = "none",
        network: str = "on",
    ) -> AgentProfile:
        """A new profile. Its agents see only the base environment (`core.agents.environment`),
        `env`, the worker variables `pass_env` and `requires_env` name, and `env_from`
        (agent variable -> worker variable, read at run time).

        `protocol` is how laneway talks to the agent (`exec` or `acp`); `permissions`,
        `auto_allow`, `turn_timeout` and `idle_timeout` are AGENTS.md's "Profiles"; `sandbox`
        and `network` the agent's room (`core.agents.sandbox`)."""
        self._require_writer()
        if not name.strip():
            raise LanewayError("profile name: must not be empty")
        require_text(name, "profile name", t.column_length(t.agent_profiles.c.name))
        values = _checked(
            name,
            {
                "command": command,
                "role": role,
                "env": env,
                "requires_env": requires_env,
                "max_concurrent_sessions": max_concurrent_sessions,
                "env_from": env_from,
                "pass_env": pass_env,
                "protocol": protocol,
                "permissions": permissions,
                "auto_allow": auto_allow,
                "turn_timeout": turn_timeout,
                "idle_timeout": idle_timeout,
                "mode": mode,
                "sandbox": sandbox,
                "network": network,
            },
        )
        _room_checked(name, sandbox, network)
        workspace = self._workspace().get()
        profile_id = ids.new_id()
        with self.peers.store.transaction() as uow:
            exists = uow.conn.execute(
                sa.select(t.agent_profiles.c.id).where(
                    t.agent_profiles.c.workspace_id == workspace.id,
                    t.agent_profiles.c.name == name,
                )
            ).first()
            if exists is not None:
                raise Conflict(f"profile {name!r} already exists")
            uow.conn.execute(
                sa.insert(t.agent_profiles).values(
                    id=profile_id,
                    workspace_id=workspace.id,
                    name=name,
                    created_at=ids.now(),
                    **values,
                )
            )
            board.bump(uow)
        return self.get(profile_id)

    def set(self, ref: str, **changes: Any) -> AgentProfile:
        """Change any option of `add` but the name (SETTABLE); options not given are kept.

        One UPDATE of the profile's row, which must still be there: a profile removed
        meanwhile is NotFound, not a silent no-op."""
        self._require_writer()
        profile = self.get(ref)
        values = _checked(profile.name, changes)
        if not values:
            return profile
        _room_checked(
            profile.name,
            values.get("sandbox", profile.sandbox),
            values.get("network", profile.network),
        )
        with self.peers.store.transaction() as uow:
            changed = uow.conn.execute(
                sa.update(t.agent_profiles)
                .where(t.agent_profiles.c.id == profile.id)
                .values(**values)
                .execution_options(preserve_rowcount=True)
            ).rowcount
            if changed != 1:
                raise NotFound(f"no agent profile {ref!r}")
            board.bump(uow)
        return self.get(profile.id)

    def remove(self, ref: str) -> str:
        """Remove a profile no one uses: refused, naming the first user, while it has queued
        or running runs, a seat at a step, or is a step's or workflow's agent. Its budgets go
        with it (they limit nothing once it is gone); its finished runs keep their history.

        One conditional DELETE decides: a run queued for it meanwhile keeps it."""
        self._require_writer()
        profile = self.get(ref)
        with self.peers.store.transaction() as uow:
            gone = uow.conn.execute(
                sa.delete(t.agent_profiles)
                .where(t.agent_profiles.c.id == profile.id, ~sa.exists(_users(profile.id)))
                .execution_options(preserve_rowcount=True)
            ).rowcount
            if gone == 1:
                uow.conn.execute(
                    sa.delete(t.budgets).where(
                        t.budgets.c.scope == "profile", t.budgets.c.ref == profile.id
                    )
                )
                board.bump(uow)
        if gone != 1:
            raise Conflict(f"profile {profile.name!r} is still in use: {self._user(profile.id)}")
        return profile.id

    def _user(self, profile_id: str) -> str:
        """What keeps a profile from being removed, in words."""
        with self.peers.store.read() as conn:
            run = conn.execute(
                sa.select(t.runs.c.id, t.runs.c.status).where(
                    t.runs.c.agent_profile_id == profile_id,
                    t.runs.c.status.in_(_LIVE_RUNS),
                )
            ).first()
            if run is not None:
                state = "queued" if run.status == "queued" else "running"
                return f"run {run.id} is {state} (cancel it, or let it finish)"
            seat = conn.execute(
                sa.select(t.workflow_step_participants.c.id).where(
                    t.workflow_step_participants.c.agent_profile_id == profile_id
                )
            ).scalar()
            if seat is not None:
                return f"participant {seat} seats it (`laneway participant remove {seat}`)"
            step = conn.execute(
                sa.select(t.workflow_steps.c.name, t.workflows.c.name.label("workflow"))
                .join(t.workflows, t.workflows.c.id == t.workflow_steps.c.workflow_id)
                .where(t.workflow_steps.c.agent_profile_id == profile_id)
            ).first()
            if step is not None:
                return f"it is the agent of step {step.name!r} of workflow {step.workflow!r}"
            workflow = conn.execute(
                sa.select(t.workflows.c.name).where(t.workflows.c.agent_profile_id == profile_id)
            ).scalar()
            if workflow is not None:
                return f"it is the agent of workflow {workflow!r}"
        return "it was put to use meanwhile; try again"

    def list(self) -> list[AgentProfile]:
        with self.peers.store.read() as conn:
            result = conn.execute(
                sa.select(t.agent_profiles).order_by(
                    t.agent_profiles.c.created_at, t.agent_profiles.c.id
                )
            ).mappings()
            return [rows.profile(r) for r in result]

    def get(self, ref: str) -> AgentProfile:
        """A profile by id, or by name (case-insensitive)."""
        with self.peers.store.read() as conn:
            # by id first: a run names its profile so, and a board may have dozens of seats
            found = prepared.execute(conn, _BY_ID, {"ref": ref}).mapping()
        if found is not None:
            return rows.profile(found)
        profiles = self.list()
        for profile in profiles:
            if profile.name.casefold() == ref.casefold():
                return profile
        raise NotFound(f"no agent profile {ref!r}")

    def first_with_role(self, role: str) -> AgentProfile | None:
        for profile in self.list():
            if profile.role == role:
                return profile
        return None
