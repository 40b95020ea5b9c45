from __future__ import annotations

import sqlalchemy as sa

from core import board, ids
from core.errors import Conflict, LanewayError, NotFound
from core.model import AgentProfile
from core.services.base import Service
from core.store import rows
from core.store import tables as t
from core.text import require_text


class ProfileService(Service):
    """Agent profiles: the command that runs an agent, its env and its role."""

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
    ) -> AgentProfile:
        """A new profile. Its agents see only the base environment (`core.runtime.agent_env`),
        `env`, the worker variables `pass_env` and `requires_env` name, and `env_from`
        (agent variable -> worker variable, read at run time)."""
        self._require_writer()
        if not name.strip():
            raise LanewayError("profile name: must not be empty")
        require_text(name, "profile name", t.column_length(t.agent_profiles.c.name))
        require_text(role, f"profile {name!r}, role", t.column_length(t.agent_profiles.c.role))
        for option, names in (
            ("env", env or {}),
            ("env_from", env_from or {}),
            ("env_from", (env_from or {}).values()),
            ("pass_env", pass_env),
            ("requires_env", requires_env),
        ):
            for var in names:
                if not var or "=" in var or "\x00" in var:
                    raise LanewayError(
                        f"profile {name!r}, {option}: {var!r} is not a variable name"
                    )
        for key, value in (env or {}).items():
            require_text(value, f"profile {name!r}, env {key}")
        if not command:
            raise LanewayError(f"profile {name!r}, command: must not be empty")
        if max_concurrent_sessions < 1:
            raise LanewayError(f"profile {name!r}, max_concurrent_sessions: must be at least 1")
        workspace = self.peers.workspace.get()
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
                    command=rows.dumps(list(command)),
                    role=role,
                    env=rows.dumps(dict(env or {})),
                    requires_env=rows.dumps(list(requires_env)),
                    env_from=rows.dumps(dict(env_from or {})),
                    pass_env=rows.dumps(list(pass_env)),
                    max_concurrent_sessions=max_concurrent_sessions,
                    created_at=ids.now(),
                )
            )
            board.bump(uow)
        return self.get(profile_id)

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
        profiles = self.list()
        for profile in profiles:
            if profile.id == ref:
                return profile
        for profile in profiles:
            if profile.name.casefold() == ref.casefold():
                return profile
        raise NotFound(f"no agent profile {ref!r}")

    def first_with_role(self, role: str) -> AgentProfile | None:
        for profile in self.list():
            if profile.role == role:
                return profile
        return None
