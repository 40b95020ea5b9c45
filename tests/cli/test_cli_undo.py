"""Issue 38 item 18: setup can be undone. CLI.md phase 4 `participant remove ID` / `profile
remove NAME` / `budget remove ID` / `workflow delete W` (`--json`: `{"removed": id}`; refused
in one line while something still uses it), and the global `--version` (`{"version"}`)."""

from __future__ import annotations

from importlib.metadata import version

from core import runs
from tests.cli.conftest import Laneway
from tests.conftest import open_host


def test_issue_38_item_18_a_duplicate_seat_and_then_its_profile_can_be_removed(
    laneway: Laneway,
) -> None:
    laneway.json("workflow", "create", "--template", "office-default")
    laneway.json("profile", "add", "rev", "--command", "true", "--role", "reviewer")
    seat_args = ("participant", "add", "--workflow", "Office Default", "--step", "Review")
    first = laneway.json(*seat_args, "--role", "reviewer", "--profile", "rev")
    twin = laneway.json(*seat_args, "--role", "reviewer", "--profile", "rev")
    budget = laneway.json("budget", "set", "--scope", "profile", "--ref", "rev", "--limit-usd", "3")
    with open_host(laneway.url) as host:
        wf = host.workflows.get("Office Default")
        task = host.tasks.create(workflow=wf.id, title="t")
        queued = host.runs.enqueue(
            runs.RunRequest(host.profiles.get("rev").id, task.id, wf.step("Review").id, "x")
        ).run_id

    # a queued run still needs its profile: one line naming it, nothing removed
    refused = laneway.fails("profile", "remove", "rev")
    assert "'rev'" in refused
    assert queued in refused
    assert "queued" in refused
    laneway.json("runs", "cancel", queued)
    # a seat still names it
    refused = laneway.fails("profile", "remove", "rev")
    assert "participant" in refused
    assert "participant remove" in refused

    # the duplicate seat goes alone: the other stays
    assert laneway.json("participant", "remove", twin["id"]) == {"removed": twin["id"]}
    seats = laneway.json("participant", "list", "--workflow", "Office Default", "--step", "Review")
    assert [s["id"] for s in seats] == [first["id"]]
    assert twin["id"] in laneway.fails("participant", "remove", twin["id"])
    text = laneway.run("participant", "remove", first["id"])
    assert text.exit_code == 0
    assert first["id"] in text.stdout

    profile_id = laneway.json("profile", "list")[0]["id"]
    assert laneway.json("profile", "remove", "rev") == {"removed": profile_id}
    assert laneway.json("profile", "list") == []
    # its budget limited nothing any more: it went with it
    assert budget["id"] not in [b["id"] for b in laneway.json("budget", "list")]
    assert "rev" in laneway.fails("profile", "remove", "rev")


def test_issue_38_item_18_a_workflow_is_deleted_once_it_has_no_tasks(laneway: Laneway) -> None:
    wf = laneway.json("workflow", "create", "--template", "office-default")
    laneway.json("workspace", "set", "--office-workflow", wf["id"])
    task = laneway.json("task", "create", "--workflow", wf["name"], "--title", "keeps it")
    laneway.json("task", "archive", task["id"])

    refused = laneway.fails("workflow", "delete", wf["name"])
    assert "1 task" in refused
    assert wf["name"] in refused
    assert [w["id"] for w in laneway.json("workflow", "list")] == [wf["id"]]

    laneway.json("task", "delete", task["id"])
    assert laneway.json("workflow", "delete", wf["name"]) == {"removed": wf["id"]}
    assert laneway.json("workflow", "list") == []
    assert laneway.json("workspace", "show")["office_workflow_id"] is None
    assert "no workflow" in laneway.fails("workflow", "delete", wf["name"])
    # the name is free again
    again = laneway.json("workflow", "create", "--template", "office-default")
    assert again["name"] == wf["name"]
    assert again["id"] != wf["id"]


def test_issue_38_item_18_a_budget_is_removed(laneway: Laneway) -> None:
    made = laneway.json("budget", "set", "--scope", "workspace", "--limit-usd", "5")
    assert laneway.json("budget", "remove", made["id"]) == {"removed": made["id"]}
    assert laneway.json("budget", "list") == []
    assert made["id"] in laneway.fails("budget", "remove", made["id"])


def test_issue_38_item_18_laneway_version(laneway: Laneway) -> None:
    installed = version("laneway")
    assert laneway.json("--version") == {"version": installed}
    plain = laneway.run("--version")
    assert (plain.exit_code, plain.stdout) == (0, f"laneway {installed}\n")
    # a bare `laneway --json` is still a usage error, not a version
    assert laneway.run("--json").exit_code == 2


def test_issue_38_item_18_a_session_of_a_removed_profile_refuses_a_message(
    laneway: Laneway,
) -> None:
    """Its session stays with the task; a message to it would queue a run no worker can claim,
    so it is refused in one line instead."""
    laneway.json("workflow", "create", "--template", "simple")
    laneway.json("profile", "add", "coder", "--command", "true")
    seat = laneway.json(
        "participant", "add", "--workflow", "Kanban", "--step", "In Progress",
        "--role", "runner", "--profile", "coder",
    )  # fmt: skip
    task = laneway.json(
        "task", "create", "--workflow", "Kanban", "--title", "X", "--step", "Backlog"
    )
    laneway.json("task", "start", task["id"])
    (run,) = laneway.json("runs", "list", "--task", task["id"])
    (session,) = laneway.json("session", "list", "--task", task["id"])
    laneway.json("runs", "cancel", run["id"])
    laneway.json("participant", "remove", seat["id"])
    laneway.json("profile", "remove", "coder")

    refused = laneway.fails("session", "send", session["id"], "hello")
    assert "agent profile was removed" in refused
    assert [r["id"] for r in laneway.json("runs", "list", "--task", task["id"])] == [run["id"]]
