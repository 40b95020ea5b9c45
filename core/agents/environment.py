"""The environment an agent process gets: only what it needs, never the worker's whole one.

A worker's environment holds the database URL and password, cloud credentials and whatever
else its operator had set; an agent is a program laneway did not write, started for a
workflow someone else may have written. So an agent sees, in this order (later wins):

1. the base: ``PATH``, ``HOME``, ``LANG``, ``TMPDIR`` (and ``LC_ALL``/``LC_CTYPE``), taken from
   the worker when set there;
2. the variables its profile names to pass through (``--pass-env VAR``, and every
   ``--requires-env VAR``: a credential the profile requires must reach the agent);
3. the variables its profile takes from the worker at run time under another name
   (``--env-from KEY=VAR``: the value is read when the turn starts and never stored);
4. the profile's stored ``--env KEY=VALUE`` pairs;
5. the turn's ``LANEWAY_*`` variables (task, step, session, run, reason; an exec turn's
   ``LANEWAY_EXECUTION_ID``, added as it starts), which nothing overrides. The worker's own
   ``LANEWAY_*`` variables (``LANEWAY_DB``, ...) are not passed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import attrs

from core.model import AgentProfile

BASE_VARS: Final = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR")


@attrs.frozen
class AgentEnv:
    env: dict[str, str]
    missing: tuple[str, ...]
    """Variables the profile requires or takes from the worker that the worker does not have."""


def agent_env(
    profile: AgentProfile, worker: Mapping[str, str], turn: Mapping[str, str]
) -> AgentEnv:
    """The agent's environment for one turn of `profile`, from the `worker`'s environment."""
    env = {name: worker[name] for name in BASE_VARS if name in worker}
    missing: list[str] = []
    for name in (*profile.pass_env, *profile.requires_env):
        if name in worker:
            env[name] = worker[name]
    for key, source in profile.env_from.items():
        if source in worker:
            env[key] = worker[source]
        else:
            missing.append(source)
    env.update(profile.env)
    missing += [n for n in profile.requires_env if n not in env]
    env.update(turn)
    return AgentEnv(env, tuple(dict.fromkeys(missing)))
