"""The command line of real agents over ACP (issue 29): `profile add`/`profile set` with the
options AGENTS.md "Profiles" pins, a session's `agent` in `session list --json`, `runs show`
and `session log` (CLI.md "Agents, runs, people")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.agents.conftest import session_with_run
from tests.cli.conftest import Laneway
from tests.conftest import open_host

AGENT_KEYS = {
    "protocol",
    "acp_session_id",
    "modes",
    "mode",
    "config_options",
    "model",
    "plan_mode",
    "continued_by",
    "desired",
}


def test_profile_add_takes_the_acp_options_and_prints_them(laneway: Laneway) -> None:
    """AGENTS.md profiles: --protocol, --permissions, --auto-allow, --turn-timeout,
    --idle-timeout."""
    added = laneway.json(
        "profile", "add", "claude", "--command", "claude-code-acp", "--protocol", "acp",
        "--permissions", "allow", "--auto-allow", "read, search", "--turn-timeout", "120",
        "--idle-timeout", "30",
    )  # fmt: skip
    assert added["protocol"] == "acp"
    assert added["permissions"] == "allow"
    assert added["auto_allow"] == ["read", "search"]
    assert added["turn_timeout"] == 120.0
    assert added["idle_timeout"] == 30.0
    assert laneway.json("profile", "list") == [added]


def test_profile_add_defaults_are_exec_ask_and_the_pinned_timeouts(laneway: Laneway) -> None:
    """AGENTS.md profiles: exec is the default protocol, ask the default permissions,
    3600 s and 900 s the default timeouts."""
    added = laneway.json("profile", "add", "plain", "--command", "agent.sh")
    assert (added["protocol"], added["permissions"], added["auto_allow"]) == ("exec", "ask", [])
    assert (added["turn_timeout"], added["idle_timeout"]) == (3600.0, 900.0)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--protocol", "http"), "profile 'p', protocol: 'http' is not one of exec, acp"),
        (("--permissions", "maybe"), "profile 'p', permissions: 'maybe' is not one of"),
        (("--auto-allow", "read,launch"), "profile 'p', auto_allow: 'launch' is not one of"),
        (("--turn-timeout", "0"), "profile 'p', turn_timeout: must be a positive number"),
        (("--idle-timeout", "-5"), "profile 'p', idle_timeout: must be a positive number"),
        # issue 38 item 9: refused where it is typed, naming the option
        (("--idle-timeout", "inf"), "--idle-timeout: 'inf' is not a finite number"),
    ],
)
def test_profile_option_mistakes_are_one_line_naming_option_and_profile(
    sqlite_laneway: Laneway, args: tuple[str, ...], says: str
) -> None:
    """AGENTS.md profiles; CLI.md: a user mistake prints one line and exits 1."""
    line = sqlite_laneway.fails("profile", "add", "p", "--command", "x", *args)
    assert says in line
    assert sqlite_laneway.json("profile", "list") == []
    sqlite_laneway.json("profile", "add", "p", "--command", "x")
    assert says in sqlite_laneway.fails("profile", "set", "p", *args)


def test_profile_set_changes_what_it_is_given_and_keeps_the_rest(laneway: Laneway) -> None:
    """AGENTS.md: `profile set NAME [any option of profile add but NAME]`; env options
    given replace the stored ones."""
    laneway.json(
        "profile", "add", "agent", "--command", "old --flag", "--env", "A=1", "--env", "B=2",
        "--pass-env", "HOME_DIR", "--auto-allow", "read",
    )  # fmt: skip
    changed = laneway.json(
        "profile", "set", "AGENT", "--protocol", "acp", "--permissions", "deny", "--env", "C=3",
        "--turn-timeout", "5", "--command", "new-agent --acp",
    )  # fmt: skip
    assert changed["name"] == "agent"
    assert changed["protocol"] == "acp"
    assert changed["permissions"] == "deny"
    assert changed["env"] == {"C": "3"}
    assert changed["command"] == ["new-agent", "--acp"]
    assert changed["turn_timeout"] == 5.0
    # not given: kept
    assert changed["pass_env"] == ["HOME_DIR"]
    assert changed["auto_allow"] == ["read"]
    assert changed["idle_timeout"] == 900.0
    assert changed["role"] == "worker"
    assert laneway.json("profile", "list") == [changed]

    cleared = laneway.json("profile", "set", changed["id"], "--auto-allow", "")
    assert cleared["auto_allow"] == []
    assert cleared["protocol"] == "acp"


def test_profile_set_of_an_unknown_profile_is_one_line(sqlite_laneway: Laneway) -> None:
    assert "no agent profile 'ghost'" in sqlite_laneway.fails(
        "profile", "set", "ghost", "--role", "r"
    )


def _board(lw: Laneway, tmp_path: Path) -> dict[str, str]:
    with open_host(lw.url) as host:
        task, session, run = session_with_run(host, tmp_path, profile="coder", title="build it")
    return {"task": task, "session": session, "run": run}


def test_session_list_shows_the_agent_reported_and_desired(
    laneway: Laneway, tmp_path: Path
) -> None:
    """AGENTS.md "A session is one conversation": `session list --json` shows both halves
    under `agent`; None and [] where the agent has said nothing yet."""
    ids = _board(laneway, tmp_path)
    (before,) = laneway.json("session", "list", "--task", ids["task"])
    assert set(before["agent"]) == AGENT_KEYS
    assert before["agent"]["protocol"] == "acp"
    assert before["agent"]["acp_session_id"] is None
    assert before["agent"]["modes"] == []
    assert before["agent"]["config_options"] == []
    assert before["agent"]["desired"] == {
        "mode": None,
        "plan_mode": False,
        "model": None,
        "config_options": {},
        "fresh": False,
    }

    with open_host(laneway.url) as host:
        # what the session kinds record (kanban_plugin/kinds.py), then what the agent says
        host.sessions.record_effect(ids["session"], session_mode="architect", plan_mode=True)
        host.sessions.record_effect(
            ids["session"],
            configured=[
                {"agent_name": "coder", "operation": "set", "model": "big",
                 "config_options": {"effort": "high"}},
                {"agent_name": "someone-else", "operation": "set", "model": "small",
                 "config_options": {}},
            ],
            context_resets=[{"step_id": "s", "entry_path": "E1"}],
        )  # fmt: skip
        host.sessions.record_agent(
            ids["session"], acp_session_id="acp-42", modes=["code", "architect"], mode="code"
        )
    (after,) = laneway.json("session", "list", "--task", ids["task"])
    agent: dict[str, Any] = after["agent"]
    assert agent["acp_session_id"] == "acp-42"
    assert agent["modes"] == ["code", "architect"]
    assert agent["mode"] == "code"
    assert agent["desired"] == {
        "mode": "architect",
        "plan_mode": True,
        "model": "big",
        "config_options": {"effort": "high"},
        "fresh": True,
    }


def test_runs_show_prints_the_run_and_its_transcript(laneway: Laneway, tmp_path: Path) -> None:
    """CLI.md: `runs show R` prints `{"run": run, "items": [item]}`; R by a unique suffix."""
    ids = _board(laneway, tmp_path)
    with open_host(laneway.url) as host:
        host.sessions.append_items(
            ids["session"],
            [("prompt", "build it", {}), ("message", "built", {})],
            run_id=ids["run"],
        )
        host.sessions.append_items(ids["session"], [("log", "not this run", {})])
        host.runs.record_usage(ids["run"], {"cost_usd": 0.1, "input_tokens": 3})

    shown = laneway.json("runs", "show", ids["run"][-8:])
    assert shown["run"]["id"] == ids["run"]
    assert shown["run"]["usage"] == {"cost_usd": 0.1, "input_tokens": 3, "output_tokens": 0}
    assert [
        {k: i[k] for k in ("seq", "session_id", "run_id", "kind", "text", "data")}
        for i in shown["items"]
    ] == [
        {"seq": 1, "session_id": ids["session"], "run_id": ids["run"], "kind": "prompt",
         "text": "build it", "data": {}},
        {"seq": 2, "session_id": ids["session"], "run_id": ids["run"], "kind": "message",
         "text": "built", "data": {}},
    ]  # fmt: skip
    assert set(shown["items"][0]) == {"seq", "session_id", "run_id", "kind", "text", "data", "at"}
    text = laneway.run("runs", "show", ids["run"])
    assert text.exit_code == 0
    assert "#2" in text.stdout
    assert "built" in text.stdout
    assert "no run 'zzzzzzzz'" in laneway.fails("runs", "show", "zzzzzzzz")


def test_session_log_lists_items_by_run_and_after(laneway: Laneway, tmp_path: Path) -> None:
    """CLI.md: `session log S [--run R] [--after SEQ]` prints `[item]`."""
    ids = _board(laneway, tmp_path)
    with open_host(laneway.url) as host:
        host.sessions.append_items(ids["session"], [("log", "before", {})])
        host.sessions.append_items(
            ids["session"], [("prompt", "p", {}), ("thought", "t", {})], run_id=ids["run"]
        )

    every = laneway.json("session", "log", ids["session"][-6:])
    assert [(i["seq"], i["kind"]) for i in every] == [(1, "log"), (2, "prompt"), (3, "thought")]
    by_run = laneway.json("session", "log", ids["session"], "--run", ids["run"])
    assert [i["seq"] for i in by_run] == [2, 3]
    assert [i["seq"] for i in laneway.json("session", "log", ids["session"], "--after", "2")] == [3]
    assert laneway.fails("session", "log", "nothere", code=1).startswith("laneway: no session")


def test_issue_41_item_3_profile_add_and_set_take_the_mode(laneway: Laneway) -> None:
    """CLI.md/AGENTS.md "Phase 4" `profile add|set NAME --mode M`; `--mode ''` on set: the
    agent's own starting mode again."""
    added = laneway.json(
        "profile", "add", "claude", "--command", "claude-agent-acp", "--protocol", "acp",
        "--mode", "default",
    )  # fmt: skip
    assert added["mode"] == "default"
    changed = laneway.json("profile", "set", "claude", "--mode", "acceptEdits")
    assert changed["mode"] == "acceptEdits"
    assert laneway.json("profile", "set", "claude", "--mode", "")["mode"] is None
