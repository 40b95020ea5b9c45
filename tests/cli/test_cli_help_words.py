"""Issue 38 item 19: help speaks words. Every command's `--help` is free of the specs' internal
codes (E2, E5, R1, R3, R6, AC-...) and of `AGENTS.md` (not a file of this repository: the docs
point to docs/agents.md); no summary is cut at an abbreviation ("e.g."); `events` and `watch`
differ and say which is the alias; plain `task show` prints the task's details."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from core.cli import build_cli
from core.plugin.selection import PluginSelection
from core.services.worktrees import workspace_for
from tests.agents.test_worktrees import make_repo
from tests.cli.conftest import Laneway
from tests.conftest import open_host

REPO = Path(__file__).resolve().parents[2]
INTERNAL = re.compile(r"\b(?:E[1-9]|R[1-9]|AC-[A-Z]+[0-9]+)\b|AGENTS\.md")
ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "cf.", "vs.")


def _cli() -> click.Group:
    return build_cli(selection=PluginSelection(allow=frozenset({"kanban", "office"})))


def _every_command() -> list[tuple[str, ...]]:
    group = _cli()
    ctx = click.Context(group)
    found: list[tuple[str, ...]] = [()]

    def walk(cmd: click.Command, path: tuple[str, ...]) -> None:
        found.append(path)
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None
                walk(sub, (*path, name))

    for name in group.list_commands(ctx):
        sub = group.get_command(ctx, name)
        assert sub is not None
        walk(sub, (name,))
    return found


def _help(*path: str) -> str:
    result = CliRunner().invoke(_cli(), [*path, "--help"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_issue_38_item_19_no_help_speaks_an_internal_code_or_cuts_a_summary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LANEWAY_PLUGINS_ALLOW", "kanban,office")
    paths = _every_command()
    assert len(paths) > 60
    group = _cli()
    ctx = click.Context(group)
    for path in paths:
        text = _help(*path)
        codes = INTERNAL.findall(text)
        assert not codes, f"`laneway {' '.join(path)} --help` says {codes}"
        cmd: click.Command = group
        for name in path:
            assert isinstance(cmd, click.Group)
            found = cmd.get_command(ctx, name)
            assert found is not None
            cmd = found
        # the summary `--help` lists a command with, at any width: a sentence, not a stump
        summary = cmd.get_short_help_str(limit=1000)
        assert not summary.endswith(ABBREVIATIONS), f"`{' '.join(path)}`: {summary!r}"


def test_issue_38_item_19_events_is_an_alias_of_watch_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LANEWAY_PLUGINS_ALLOW", "kanban,office")
    watch, events = _help("watch"), _help("events")
    assert watch != events
    assert "alias: `events`" in watch
    assert "An alias of `watch`" in events
    listing = {
        line.split()[0]: line
        for line in _help().splitlines()
        if line.startswith("  ") and line.split()
    }
    assert "alias" in listing["watch"]
    assert "alias" in listing["events"]


def test_issue_38_item_19_docs_point_to_docs_agents_md_not_a_missing_agents_md() -> None:
    assert not (REPO / "AGENTS.md").exists()
    for path in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        text = path.read_text()
        if path.name == "cli.md":
            # the pinned contract names the shared AGENTS.md; what laneway adds says where to read
            _contract, _, beyond = text.partition("\n## Beyond the contract\n")
            assert "[agents.md](agents.md)" in beyond
            text = beyond
        assert "AGENTS.md" not in text, f"{path.relative_to(REPO)} points to AGENTS.md"


@pytest.mark.subprocess  # git makes the repository and the worktree
def test_issue_38_item_19_plain_task_show_prints_description_parent_blockers_branch(
    sqlite_laneway: Laneway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANEWAY_WORKTREES", str(tmp_path / "worktrees"))
    lw = sqlite_laneway
    lw.json("workflow", "create", "--template", "simple")
    lw.json("workflow", "set", "Kanban", "--repository", str(make_repo(tmp_path / "repo")))
    parent = lw.json("task", "create", "--workflow", "Kanban", "--title", "Epic")
    blocker = lw.json("task", "create", "--workflow", "Kanban", "--title", "Schema first")
    task = lw.json(
        "task", "create", "--workflow", "Kanban", "--title", "Login page",
        "--description", "Build the form.\nThen wire it up.", "--parent", parent["id"],
    )  # fmt: skip
    lw.json("task", "block", task["id"], "--by", blocker["id"])
    with open_host(lw.url) as host:
        workspace_for(host, task["id"])

    place = lw.json("task", "show", task["id"])["workspace"]
    shown = lw.run("task", "show", task["id"])
    assert shown.exit_code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"{task['id']}  'Login page'")
    assert lines[1:] == [
        "  description: Build the form.",
        "    Then wire it up.",
        f"  parent: {parent['id']} 'Epic' ({parent['state']})",
        f"  blocked by: {blocker['id']} 'Schema first' ({blocker['state']})",
        f"  its agent does not start until {blocker['id']} is finished",
        "  subtasks: none",
        f"  branch: laneway/{task['id'][-8:]}  worktree: {place['path']}",
        f"  base: {place['base_branch']} at {place['base_commit'][:12]}",
    ]
    bare = lw.run("task", "show", parent["id"]).stdout.splitlines()
    assert bare[1:] == [
        "  description: -",
        "  parent: -",
        "  blocked by: nothing",
        f"  subtasks: {task['id']} 'Login page' ({task['state']})",
        "  branch: - (no worktree yet)",
    ]
