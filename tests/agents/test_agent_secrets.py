"""Agents get only what they need (issue 11, class 3).

An agent's environment is the documented base (PATH, HOME, LANG, TMPDIR, ...), the variables
its profile passes through (`--pass-env`, `--requires-env`), the ones it takes from the worker
at run time (`--env-from KEY=VAR`, never stored), its stored `--env` values and the turn's
`LANEWAY_*` variables. The worker's secrets (`PGPASSWORD`, `AWS_SECRET_ACCESS_KEY`, its own
`LANEWAY_DB`) never reach it.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import sqlalchemy as sa

from core.agents import worker
from core.errors import LanewayError
from core.host import Host
from core.store import tables as t
from tests.agents.conftest import enqueue, laneway, plain_workflow, python_agent
from tests.conftest import open_host

SECRETS = {
    "PGPASSWORD": "pg-secret",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "LANEWAY_DB": "postgresql://laneway:pw@db/board",
}


def _env_dumper(path: Path) -> list[str]:
    return python_agent(
        "import json, os, sys; sys.stdin.read(); "
        f"open({str(path)!r}, 'w').write(json.dumps(dict(os.environ)))"
    )


def _run_once(host: Host, tmp_path: Path, profile: str) -> str:
    workflow = plain_workflow(host, tmp_path)
    task = host.tasks.create(workflow=workflow, title="env")
    enqueue(host, host.profiles.get(profile).id, task.id)
    summary = worker.work(host, once=True)
    assert summary.claimed == 1
    return task.id


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_ac11_3_an_agent_sees_the_base_and_what_its_profile_names_only(
    host: Host, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("API_TOKEN", "token-from-worker")
    monkeypatch.setenv("VAULT_OPENAI", "key-read-at-run-time")
    monkeypatch.setenv("NEEDED", "required-one")
    monkeypatch.setenv("LANG", "C.UTF-8")
    dump = tmp_path / "env.json"
    host.profiles.add(
        "agent",
        command=_env_dumper(dump),
        env={"MODEL": "small"},
        pass_env=["API_TOKEN"],
        env_from={"OPENAI_API_KEY": "VAULT_OPENAI"},
        requires_env=["NEEDED"],
    )

    _run_once(host, tmp_path, "agent")

    seen = json.loads(dump.read_text())
    for secret in SECRETS:
        assert secret not in seen
    assert "VAULT_OPENAI" not in seen
    assert seen["API_TOKEN"] == "token-from-worker"
    assert seen["OPENAI_API_KEY"] == "key-read-at-run-time"
    assert seen["NEEDED"] == "required-one"
    assert seen["MODEL"] == "small"
    assert seen["LANG"] == "C.UTF-8"
    assert seen["PATH"] == os.environ["PATH"]
    extra = set(seen) - {
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "TMPDIR",
        "API_TOKEN",
        "OPENAI_API_KEY",
        "NEEDED",
        "MODEL",
        "LANEWAY_TASK_ID",
        "LANEWAY_STEP_ID",
        "LANEWAY_SESSION_ID",
        "LANEWAY_RUN_ID",
        "LANEWAY_REASON",
        "LANEWAY_EXECUTION_ID",
    }
    # the interpreter itself may add a variable or two (e.g. LC_CTYPE coercion); none of ours
    assert not {k for k in extra if not k.startswith(("LC_", "PYTHON"))}, extra


def test_ac11_3_env_from_stores_the_variable_name_never_the_value(host: Host) -> None:
    host.profiles.add(
        "agent", command=["true"], env_from={"OPENAI_API_KEY": "VAULT_OPENAI"}, pass_env=["X"]
    )

    with host.store.read() as conn:
        row = conn.execute(sa.select(t.agent_profiles)).mappings().one()

    assert json.loads(row["env_from"]) == {"OPENAI_API_KEY": "VAULT_OPENAI"}
    assert json.loads(row["pass_env"]) == ["X"]
    assert json.loads(row["env"]) == {}


def test_ac11_3_a_missing_env_from_variable_fails_the_run_as_missing_credentials(
    host: Host, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VAULT_ABSENT", raising=False)
    dump = tmp_path / "env.json"
    host.profiles.add("agent", command=_env_dumper(dump), env_from={"KEY": "VAULT_ABSENT"})

    task = _run_once(host, tmp_path, "agent")

    assert not dump.exists()  # never launched
    (session,) = host.sessions.list(task=task)
    assert session.metadata["last_agent_error"] == {
        "message": "authentication failed: missing VAULT_ABSENT",
        "route": "R3",
    }


def test_ac11_3_profile_add_refuses_what_is_not_a_variable_name(host: Host) -> None:
    with pytest.raises(LanewayError, match="pass_env: 'A=B' is not a variable name"):
        host.profiles.add("agent", command=["true"], pass_env=["A=B"])
    with pytest.raises(LanewayError, match="longer than 200 characters"):
        host.profiles.add("a" * 201, command=["true"])
    with pytest.raises(LanewayError, match="NUL"):
        host.profiles.add("agent", command=["true"], env={"K": "v\x00"})


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_ac11_3_cli_profile_add_takes_env_from_and_pass_env(
    sqlite_url: str, tmp_path: Path
) -> None:
    assert laneway("--db", sqlite_url, "init", cwd=tmp_path).returncode == 0
    added = laneway(
        "--db",
        sqlite_url,
        "--json",
        "profile",
        "add",
        "bot",
        "--command",
        "my-agent --fast",
        "--env-from",
        "OPENAI_API_KEY=VAULT_OPENAI",
        "--pass-env",
        "HTTPS_PROXY",
        cwd=tmp_path,
    )
    assert added.returncode == 0, added.stderr
    profile = json.loads(added.stdout)
    assert profile["env_from"] == {"OPENAI_API_KEY": "VAULT_OPENAI"}
    assert profile["pass_env"] == ["HTTPS_PROXY"]
    wrong = laneway(
        "--db", sqlite_url, "profile", "add", "x", "--command", "a", "--env-from", "K", cwd=tmp_path
    )
    assert wrong.returncode == 1
    assert wrong.stderr.strip() == "laneway: --env-from 'K': expected KEY=VAR"


# -- private database files --------------------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_ac11_3_the_database_and_its_side_files_are_owner_only(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        db = tmp_path / "board.db"
        with open_host(f"sqlite:///{db}", upgrade=True) as host:
            host.tasks  # noqa: B018 - the host is open: WAL and lock files exist now
            side = [Path(f"{db}{suffix}") for suffix in ("-wal", "-shm", ".lock")]
            present = [p for p in side if p.exists()]
            assert {p.name for p in present} >= {"board.db-wal", "board.db.lock"}
            for path in (db, *present):
                assert _mode(path) == 0o600, path
    finally:
        os.umask(previous)


def test_ac11_3_a_world_readable_database_is_tightened_when_opened(tmp_path: Path) -> None:
    db = tmp_path / "board.db"
    with open_host(f"sqlite:///{db}", upgrade=True):
        pass
    db.chmod(0o644)

    with open_host(f"sqlite:///{db}"):
        assert _mode(db) == 0o600
