"""Every command's `--json` output has the shape CLI.md states, and does what the table says.

Commands that write run on SQLite and on PostgreSQL (the `laneway` fixture follows `db_url`);
read-side rendering runs on SQLite only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
import yaml

from core.model import AgentProfile, Decision, Participant, Run, Session, Task, Workspace
from core.store import tables as t
from core.store.migrate import head_revision
from tests.cli.conftest import Laneway
from tests.conftest import open_host

WORKFLOW_KEYS = {
    "id",
    "name",
    "description",
    "hidden",
    "max_step_arrivals",
    "repository",
    "retire_worktrees",
    "remote",
    "setup",
    "cleanup",
    "forge",
    "base_branch",
    "steps",
}
STEP_KEYS = {
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
    "events",
}
ENTRY_KEYS = {
    "id",
    "task_id",
    "step_id",
    "entry_seq",
    "entry_path",
    "declaration_digest",
    "terminal",
    "markers",
}
MARKER_KEYS = {"position", "kind", "state", "epoch", "reason", "cause"}
PLUGIN_KEYS = {"name", "version", "kinds", "guards", "enabled", "error"}


def fields(cls: type) -> set[str]:
    return {f.name for f in attrs.fields(cls)}


def assert_row(
    value: dict[str, Any], cls: type, table: sa.Table, computed: frozenset[str] = frozenset()
) -> None:
    """A row object: the value's fields, every one of them a column of its table (but the
    `computed` ones a contract adds, such as a decision's `round` and `cleared`)."""
    assert set(value) == fields(cls)
    assert set(value) - computed <= {c.name for c in table.columns}


def step_named(workflow: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in workflow["steps"] if s["name"] == name)


def office(lw: Laneway, name: str | None = None) -> dict[str, Any]:
    extra = ["--name", name] if name else []
    result: dict[str, Any] = lw.json("workflow", "create", "--template", "office-default", *extra)
    return result


# -- init, workspace ----------------------------------------------------------------------


def test_init_reports_database_and_revision_and_is_idempotent(db_url: str) -> None:
    lw = Laneway(db_url)
    first = lw.json("init")
    second = lw.json("init")
    assert set(first) == {"database", "revision"}
    assert first == second
    assert first["revision"] == head_revision()
    password = sa.engine.make_url(db_url).password
    if password:
        assert str(password) not in first["database"]


def test_workspace_show_and_set(laneway: Laneway) -> None:
    shown = laneway.json("workspace", "show")
    assert set(shown) == fields(Workspace)
    assert shown["office_workflow_id"] is None
    wf = office(laneway)
    changed = laneway.json(
        "workspace", "set", "--name", "Board", "--office-workflow", "office default"
    )
    assert changed == {"id": shown["id"], "name": "Board", "office_workflow_id": wf["id"]}
    assert laneway.json("workspace", "show") == changed


# -- workflows ----------------------------------------------------------------------------


def test_workflow_templates_lists_hidden_ones_with_step_counts(sqlite_laneway: Laneway) -> None:
    templates = sqlite_laneway.json("workflow", "templates")
    assert all(set(t) == {"id", "name", "steps", "hidden"} for t in templates)
    by_id = {t["id"]: t for t in templates}
    assert by_id["office-default"] == {
        "id": "office-default",
        "name": "Office Default",
        "steps": 5,
        "hidden": True,
    }
    assert by_id["simple"]["hidden"] is False


def test_workflow_create_has_the_workflow_and_step_shapes(laneway: Laneway) -> None:
    wf = office(laneway)
    assert set(wf) == WORKFLOW_KEYS
    assert wf["name"] == "Office Default"
    assert wf["hidden"] is True
    assert [s["name"] for s in wf["steps"]] == ["Backlog", "Work", "Review", "Approval", "Done"]
    for step in wf["steps"]:
        assert set(step) == STEP_KEYS
        assert step["workflow_id"] == wf["id"]
    review, approval, work = (step_named(wf, n) for n in ("Review", "Approval", "Work"))
    assert review["stage_type"] == "review"
    assert work["is_start_step"] is True
    # Events: trigger -> [{type, config}] in declared order, step references rewritten.
    assert [a["type"] for a in review["events"]["on_enter"]] == [
        "clear_decisions",
        "queue_run_for_each_participant",
    ]
    assert all(set(a) == {"type", "config"} for a in review["events"]["on_enter"])
    moves = review["events"]["on_turn_complete"]
    assert [m["config"]["step_id"] for m in moves] == [approval["id"], work["id"]]
    assert moves[0]["config"]["wait_for_quorum"] == {"role": "reviewer", "threshold": "all_approve"}


def test_workflow_create_with_another_name(laneway: Laneway) -> None:
    office(laneway)
    renamed = office(laneway, "Second Board")
    assert renamed["name"] == "Second Board"
    assert [w["name"] for w in laneway.json("workflow", "list")] == [
        "Office Default",
        "Second Board",
    ]


def test_workflow_list_and_show_by_name_or_id(sqlite_laneway: Laneway) -> None:
    wf = office(sqlite_laneway)
    kanban = sqlite_laneway.json("workflow", "create", "--template", "simple")
    listed = sqlite_laneway.json("workflow", "list")
    # Hidden workflows are listed too.
    assert [w["id"] for w in listed] == [wf["id"], kanban["id"]]
    assert listed[0] == wf
    assert sqlite_laneway.json("workflow", "show", "OFFICE default") == wf
    assert sqlite_laneway.json("workflow", "show", wf["id"]) == wf
    text = sqlite_laneway.run("workflow", "show", "office default")
    assert wf["id"] in text.stdout
    assert step_named(wf, "Review")["id"] in text.stdout


def test_workflow_export_is_portable_yaml_and_imports_back(
    laneway: Laneway, tmp_path: Path
) -> None:
    wf = office(laneway)
    text = laneway.run("workflow", "export", "office default")
    assert text.exit_code == 0
    document = yaml.safe_load(text.stdout)
    assert document == laneway.json("workflow", "export", wf["id"])
    assert document["type"] == "kandev_workflow"
    assert [w["name"] for w in document["workflows"]] == ["Office Default"]
    document["workflows"][0]["name"] = "Imported Board"
    path = tmp_path / "export.yml"
    path.write_text(yaml.safe_dump(document))
    imported = laneway.json("workflow", "import", str(path))
    assert len(imported) == 1
    assert set(imported[0]) == WORKFLOW_KEYS
    assert imported[0]["name"] == "Imported Board"
    assert [s["name"] for s in imported[0]["steps"]] == [s["name"] for s in wf["steps"]]
    for before, after in zip(wf["steps"], imported[0]["steps"], strict=True):
        assert _kinds(after) == _kinds(before)


def _kinds(step: dict[str, Any]) -> dict[str, list[str]]:
    return {trigger: [a["type"] for a in acts] for trigger, acts in step["events"].items()}


def test_workflow_import_internal_template(laneway: Laneway, tmp_path: Path) -> None:
    path = tmp_path / "two.yml"
    path.write_text(
        "id: two\nname: Two Steps\nsteps:\n"
        "  - id: a\n    name: A\n    position: 0\n    is_start_step: true\n"
        "    events:\n      on_turn_complete:\n        - type: move_to_step\n"
        "          config: {step_id: b}\n"
        "  - id: b\n    name: B\n    position: 1\n"
    )
    imported = laneway.json("workflow", "import", str(path))
    assert [w["name"] for w in imported] == ["Two Steps"]
    a, b = imported[0]["steps"]
    assert a["events"] == {
        "on_turn_complete": [{"type": "move_to_step", "config": {"step_id": b["id"]}}]
    }


def test_workflow_check_reports_problems_and_exits_1(sqlite_laneway: Laneway) -> None:
    """The whole report is printed, and a problem makes the exit code 1 (issue 38 item 4)."""
    office(sqlite_laneway)
    checked = sqlite_laneway.json("workflow", "check", "office default")
    assert checked["problems"] == []
    assert len(checked["agents"]) == 8  # what the workflow can start (AC-11.5)
    as_json = sqlite_laneway.run("--json", "--no-office", "workflow", "check", "office default")
    assert as_json.exit_code == 1
    off = json.loads(as_json.stdout)
    assert off["problems"]
    assert any("clear_decisions" in p and "no executor" in p for p in off["problems"])
    text = sqlite_laneway.run("--no-office", "workflow", "check", "office default")
    assert text.exit_code == 1
    lines = text.stdout.splitlines()
    assert lines[: len(off["problems"])] == off["problems"]
    # then the warnings (issue 25 item 9), then the agents
    after = len(off["problems"]) + len(off["warnings"])
    assert lines[len(off["problems"]) : after] == [f"warning: {w}" for w in off["warnings"]]
    assert lines[after] == "agents this workflow can start or seat: 8"


# -- profiles -----------------------------------------------------------------------------


def test_profile_add_splits_the_command_like_a_shell(laneway: Laneway) -> None:
    added = laneway.json(
        "profile",
        "add",
        "Rev",
        "--command",
        "claude --prompt 'review this' -v",
        "--role",
        "reviewer",
        "--env",
        "A=1",
        "--env",
        "B=x=y",
        "--requires-env",
        "API_KEY",
    )
    assert_row(added, AgentProfile, t.agent_profiles)
    assert added["name"] == "Rev"
    assert added["command"] == ["claude", "--prompt", "review this", "-v"]
    assert added["env"] == {"A": "1", "B": "x=y"}
    assert added["requires_env"] == ["API_KEY"]
    assert added["role"] == "reviewer"
    assert laneway.json("profile", "list") == [added]


# -- tasks --------------------------------------------------------------------------------


def test_task_create_show_list(laneway: Laneway) -> None:
    wf = office(laneway)
    other = laneway.json("workflow", "create", "--template", "simple")
    created = laneway.json(
        "task",
        "create",
        "--workflow",
        "office default",
        "--title",
        "Git sync",
        "--description",
        "keep in sync",
        "--project",
        "proj-1",
    )
    assert_row(created, Task, t.tasks)
    assert created["workflow_id"] == wf["id"]
    assert created["workflow_step_id"] == step_named(wf, "Work")["id"]
    assert created["description"] == "keep in sync"
    assert created["project_id"] == "proj-1"
    at_step = laneway.json(
        "task", "create", "--workflow", other["id"], "--title", "b", "--step", "DONE"
    )
    assert at_step["workflow_step_id"] == step_named(other, "Done")["id"]
    assert laneway.json("task", "show", created["id"]) == created
    assert [x["id"] for x in laneway.json("task", "list")] == [created["id"], at_step["id"]]
    assert laneway.json("task", "list", "--workflow", other["name"]) == [at_step]


def test_task_move_update_start_by_step_name_or_id(laneway: Laneway) -> None:
    wf = office(laneway)
    task = laneway.json("task", "create", "--workflow", wf["id"], "--title", "t")
    backlog, done = step_named(wf, "Backlog"), step_named(wf, "Done")
    moved = laneway.json("task", "move", task["id"], "backlog")
    assert moved["workflow_step_id"] == backlog["id"]
    moved = laneway.json("task", "move", task["id"], done["id"])
    assert moved["workflow_step_id"] == done["id"]
    updated = laneway.json("task", "update", task["id"], "--step", "BACKLOG")
    assert updated["workflow_step_id"] == backlog["id"]
    started = laneway.json("task", "start", task["id"])
    assert_row(started, Task, t.tasks)
    assert started["workflow_step_id"] == step_named(wf, "Work")["id"]
    assert started["state"] == "IN_PROGRESS"
    restarted = laneway.json("task", "start", task["id"], "--step", "done")
    assert restarted["workflow_step_id"] == done["id"]


def test_task_switch_workflow(laneway: Laneway) -> None:
    office(laneway)
    kanban = laneway.json("workflow", "create", "--template", "simple")
    task = laneway.json("task", "create", "--workflow", "office default", "--title", "t")
    switched = laneway.json(
        "task", "switch-workflow", task["id"], "--workflow", "kanban", "--step", "done"
    )
    assert switched["workflow_id"] == kanban["id"]
    assert switched["workflow_step_id"] == step_named(kanban, "Done")["id"]


def test_task_archive_and_delete(laneway: Laneway) -> None:
    office(laneway)
    task = laneway.json("task", "create", "--workflow", "office default", "--title", "t")
    archived = laneway.json("task", "archive", task["id"])
    assert archived["archived_at"] is not None
    assert laneway.json("task", "delete", task["id"]) == {"deleted": task["id"]}
    assert laneway.json("task", "list") == []
    assert task["id"] in laneway.fails("task", "show", task["id"])


def test_task_update_title_description_and_unarchive(laneway: Laneway) -> None:
    """Issue 25 item 6 (CLI.md `task update`, extended): a new title and description, an empty
    title refused in one line, and `task unarchive` puts an archived task back at its step."""
    wf = office(laneway)
    task = laneway.json("task", "create", "--workflow", "office default", "--title", "old")
    edited = laneway.json(
        "task", "update", task["id"], "--title", "new title", "--description", "why and how"
    )
    assert (edited["title"], edited["description"]) == ("new title", "why and how")
    assert edited["workflow_step_id"] == task["workflow_step_id"]
    assert laneway.json("task", "show", task["id"])["title"] == "new title"
    said = laneway.fails("task", "update", task["id"], "--title", "  ")
    assert said == f"laneway: task {task['id']} title: must not be empty"
    assert "--step, --title or --description" in laneway.fails("task", "update", task["id"], code=2)
    cleared = laneway.json("task", "update", task["id"], "--description", "")
    assert cleared["description"] == ""
    moved = laneway.json("task", "update", task["id"], "--step", "review", "--title", "both")
    assert moved["workflow_step_id"] == step_named(wf, "Review")["id"]
    assert moved["title"] == "both"

    assert laneway.json("task", "archive", task["id"])["archived_at"] is not None
    said = laneway.fails("task", "update", task["id"], "--title", "x")
    assert said == f"laneway: task {task['id']} is archived"
    back = laneway.json("task", "unarchive", task["id"])
    assert back["archived_at"] is None
    assert back["workflow_step_id"] == step_named(wf, "Review")["id"]
    said = laneway.fails("task", "unarchive", task["id"])
    assert said == f"laneway: task {task['id']} is not archived"


# -- seats, sessions, turns, decisions ----------------------------------------------------


def test_participant_add_and_list(laneway: Laneway) -> None:
    wf = office(laneway)
    for name in ("r1", "r2", "w1"):
        laneway.json("profile", "add", name, "--command", "agent")
    review = step_named(wf, "Review")
    seat = laneway.json(
        "participant",
        "add",
        "--step",
        "review",
        "--role",
        "reviewer",
        "--profile",
        "r1",
        "--workflow",
        "office default",
    )
    assert_row(seat, Participant, t.workflow_step_participants)
    assert seat["step_id"] == review["id"]
    assert seat["task_id"] == ""  # a template seat
    assert seat["decision_required"] is True  # reviewers decide by default
    watcher = laneway.json(
        "participant",
        "add",
        "--step",
        review["id"],
        "--role",
        "watcher",
        "--profile",
        "w1",
        "--workflow",
        wf["id"],
        "--position",
        "3",
    )
    assert watcher["decision_required"] is False
    assert watcher["position"] == 3
    task = laneway.json("task", "create", "--workflow", wf["id"], "--title", "t")
    own = laneway.json(
        "participant",
        "add",
        "--step",
        "Review",
        "--role",
        "reviewer",
        "--profile",
        "r2",
        "--task",
        task["id"],
        "--no-decision-required",
    )
    assert own["task_id"] == task["id"]
    assert own["decision_required"] is False
    template = laneway.json("participant", "list", "--step", "review", "--workflow", wf["id"])
    assert {s["id"] for s in template} == {seat["id"], watcher["id"]}
    merged = laneway.json("participant", "list", "--step", "review", "--task", task["id"])
    assert {s["id"] for s in merged} == {seat["id"], watcher["id"], own["id"]}


def test_sessions_and_turns(laneway: Laneway) -> None:
    wf = office(laneway)
    laneway.json("profile", "add", "worker", "--command", "agent")
    task = laneway.json("task", "create", "--workflow", wf["id"], "--title", "t")
    session = laneway.json("session", "start", task["id"], "--profile", "worker")
    assert_row(session, Session, t.task_sessions)
    assert session["task_id"] == task["id"]
    assert session["metadata"] == {}
    assert laneway.json("session", "list", "--task", task["id"]) == [session]

    started = laneway.json("turn", "start", task["id"], "--session", session["id"])
    assert set(started) == {
        "task",
        "transitioned",
        "from_step_id",
        "to_step_id",
        "refusals",
        "halted",
    }  # CLI.md's four keys, extended with why nothing moved
    assert_row(started["task"], Task, t.tasks)
    assert started["transitioned"] is False
    # Work's on_turn_complete moves to Review without a guard.
    completed = laneway.json("turn", "complete", task["id"])
    assert completed["transitioned"] is True
    assert completed["from_step_id"] == step_named(wf, "Work")["id"]
    assert completed["to_step_id"] == step_named(wf, "Review")["id"]
    assert completed["task"]["workflow_step_id"] == completed["to_step_id"]


def test_decision_record_shape(laneway: Laneway) -> None:
    wf = office(laneway)
    laneway.json("profile", "add", "r1", "--command", "agent")
    seat = laneway.json(
        "participant",
        "add",
        "--step",
        "Review",
        "--role",
        "reviewer",
        "--profile",
        "r1",
        "--workflow",
        wf["id"],
    )
    task = laneway.json("task", "create", "--workflow", wf["id"], "--title", "t")
    laneway.json("task", "move", task["id"], "review")
    recorded = laneway.json(
        "decision",
        "record",
        "--task",
        task["id"],
        "--step",
        "review",
        "--participant",
        seat["id"],
        "--verdict",
        "rejected",
        "--comment",
        "not yet",
    )
    # CLI.md's three keys, extended with why nothing moved
    assert set(recorded) == {"decision", "transitioned", "to_step_id", "refusals", "halted"}
    # CLI.md's `[decision]` carries `round` and `cleared` (the review round, issue 22)
    assert_row(
        recorded["decision"],
        Decision,
        t.workflow_step_decisions,
        computed=frozenset({"round", "cleared"}),
    )
    assert (recorded["decision"]["round"], recorded["decision"]["cleared"]) == (1, False)
    assert recorded["decision"]["decision"] == "rejected"
    assert recorded["decision"]["comment"] == "not yet"
    assert recorded["decision"]["participant_id"] == seat["id"]
    # Review's any_reject transition sends the task back to Work at once.
    assert recorded["transitioned"] is True
    assert recorded["to_step_id"] == step_named(wf, "Work")["id"]


# -- runs, entries, recover ----------------------------------------------------------------


def _insert_run(url: str, task: dict[str, Any], profile_id: str, status: str, n: int) -> None:
    # Runs are written by office's fan-out; inserting them directly keeps this test about the
    # command's rendering and filters, independent of the dispatcher.
    with open_host(url) as host, host.store.transaction() as uow:
        uow.conn.execute(
            sa.insert(t.runs).values(
                id=f"run-{n}",
                agent_profile_id=profile_id,
                task_id=task["id"],
                workflow_step_id=task["workflow_step_id"],
                reason="review_started",
                payload=json.dumps({"n": n}),
                idempotency_key=f"key-{n}",
                coalesce_exempt=False,
                status=status,
                coalesced_count=0,
                requested_at=f"2030-01-01T00:00:0{n}Z",
            )
        )


def test_runs_list_filters_by_task_and_status(laneway: Laneway) -> None:
    wf = office(laneway)
    agent = laneway.json("profile", "add", "r1", "--command", "agent")
    one = laneway.json("task", "create", "--workflow", wf["id"], "--title", "one")
    two = laneway.json("task", "create", "--workflow", wf["id"], "--title", "two")
    _insert_run(laneway.url, one, agent["id"], "queued", 1)
    _insert_run(laneway.url, one, agent["id"], "finished", 2)
    _insert_run(laneway.url, two, agent["id"], "queued", 3)
    listed = laneway.json("runs", "list")
    assert [r["id"] for r in listed] == ["run-1", "run-2", "run-3"]
    for run in listed:
        # computed fields beside the row: no worktree, so no host to wait for (issue 43); no
        # claimed run of the same session, so no run to wait for
        assert run.pop("waits_for_host") is None
        assert run.pop("waits_for_run") is None
        assert_row(run, Run, t.runs)
    assert listed[0]["payload"] == {"n": 1}
    assert [r["id"] for r in laneway.json("runs", "list", "--task", one["id"])] == [
        "run-1",
        "run-2",
    ]
    assert [r["id"] for r in laneway.json("runs", "list", "--status", "queued")] == [
        "run-1",
        "run-3",
    ]
    both = laneway.json("runs", "list", "--task", one["id"], "--status", "queued")
    assert [r["id"] for r in both] == ["run-1"]


def test_entries_list_shape_and_filters(laneway: Laneway) -> None:
    wf = office(laneway)
    task = laneway.json("task", "create", "--workflow", wf["id"], "--title", "t")
    other = laneway.json("task", "create", "--workflow", wf["id"], "--title", "u")
    assert laneway.json("entries", "list") == []  # creation is not an arrival
    laneway.json("task", "move", task["id"], "review")
    laneway.json("task", "move", other["id"], "review")
    listed = laneway.json("entries", "list", "--task", task["id"])
    assert len(listed) == 1
    entry = listed[0]
    assert set(entry) == ENTRY_KEYS
    assert entry["task_id"] == task["id"]
    assert entry["step_id"] == step_named(wf, "Review")["id"]
    assert entry["entry_seq"] == 1
    assert entry["entry_path"] == "E2"
    assert len(laneway.json("entries", "list")) == 2

    # Markers written by hand over what the dispatcher left: the command parses a JSON cause
    # and keeps free text as it is.
    stamp = "2030-01-01T00:00:00Z"
    markers = [
        {
            "position": 0,
            "kind": "clear_decisions",
            "state": "failed",
            "reason": None,
            "cause": "database is locked {",
        },
        {
            "position": 1,
            "kind": "queue_run_for_each_participant",
            "state": "done",
            "reason": None,
            "cause": '{"queued": 2, "failed": 0}',
        },
    ]
    with open_host(laneway.url) as host, host.store.transaction() as uow:
        uow.conn.execute(
            sa.delete(t.step_entry_markers).where(t.step_entry_markers.c.entry_id == entry["id"])
        )
        uow.conn.execute(
            sa.update(t.step_entries)
            .where(t.step_entries.c.id == entry["id"])
            .values(terminal=False)
        )
        uow.conn.execute(
            sa.insert(t.step_entry_markers),
            [{**m, "entry_id": entry["id"], "epoch": "e1", "updated_at": stamp} for m in markers],
        )
    entry = laneway.json("entries", "list", "--task", task["id"])[0]
    assert entry["terminal"] is False
    assert [set(m) for m in entry["markers"]] == [MARKER_KEYS] * 2
    assert [m["position"] for m in entry["markers"]] == [0, 1]
    assert entry["markers"][0]["cause"] == "database is locked {"
    assert entry["markers"][0]["state"] == "failed"
    assert entry["markers"][1]["cause"] == {"queued": 2, "failed": 0}
    assert entry["markers"][1]["epoch"] == "e1"
    # The other task's entry ran to its end; only the one rewritten by hand is still open
    # (a read-only command runs no recovery scan that would close it).
    open_entries = laneway.json("entries", "list", "--non-terminal")
    assert [e["id"] for e in open_entries] == [entry["id"]]


def test_recover_reports_the_scan(laneway: Laneway) -> None:
    report = laneway.json("recover")
    assert set(report) == {
        "scanned",
        "redispatched",
        "skipped",
        "errors",
        "runs_requeued",
        "runs_dead",
        "triggers_delivered",
        "hosts_unattended",
    }
    counts = ("scanned", "redispatched", "errors", "runs_requeued", "runs_dead")
    counts += ("triggers_delivered",)
    assert all(isinstance(report[k], int) for k in counts)
    assert isinstance(report["skipped"], dict)
    assert report["hosts_unattended"] == []
    assert report["scanned"] == 0


# -- plugins ------------------------------------------------------------------------------


def _plugins(lw: Laneway, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    listed = lw.json(*args, "plugins", "list", env=env)
    assert all(set(p) == PLUGIN_KEYS for p in listed)
    return {p["name"]: p for p in listed}


def test_plugins_list_shows_office_and_kanban_enabled(sqlite_laneway: Laneway) -> None:
    found = _plugins(sqlite_laneway)
    assert found["office"]["enabled"] is True
    assert found["kanban"]["enabled"] is True
    assert "clear_decisions" in found["office"]["kinds"]
    assert "wait_for_quorum" in found["office"]["guards"]
    assert "auto_start_agent" in found["kanban"]["kinds"]


def test_blocked_office_declares_nothing(sqlite_laneway: Laneway) -> None:
    normal = _plugins(sqlite_laneway)
    office_kinds = set(normal["office"]["kinds"])
    found = _plugins(sqlite_laneway, env={"LANEWAY_PLUGINS_BLOCK": "office"})
    assert found["office"]["enabled"] is False
    assert found["office"]["kinds"] == []
    declared = {k for p in found.values() if p["enabled"] for k in p["kinds"]}
    assert not office_kinds & declared


def test_no_office_lists_office_disabled_with_its_kinds(sqlite_laneway: Laneway) -> None:
    normal = _plugins(sqlite_laneway)
    found = _plugins(sqlite_laneway, "--no-office")
    assert found["office"]["enabled"] is False
    assert found["office"]["kinds"] == normal["office"]["kinds"]
    assert found["kanban"]["enabled"] is True


@pytest.mark.parametrize(
    "args",
    [
        ("workspace", "show"),
        ("workflow", "templates"),
        ("workflow", "list"),
        ("profile", "list"),
        ("task", "list"),
        ("runs", "list"),
        ("entries", "list"),
        ("plugins", "list"),
    ],
)
def test_text_mode_prints_lines_not_json(sqlite_laneway: Laneway, args: tuple[str, ...]) -> None:
    office(sqlite_laneway)
    result = sqlite_laneway.run(*args)
    assert result.exit_code == 0
    assert not result.stdout.lstrip().startswith(("{", "["))
