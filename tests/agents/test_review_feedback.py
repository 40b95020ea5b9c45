"""Issue 22 item 5, feedback reaches the worker: a review round's verdicts stay readable after a
new entry clears them (CLI.md `decision list --task T [--step S] [--all]`, HTTP.md
`GET /api/decisions?task=T&all=true`), the quorum counts only the current round (AC-A3, AC-F3:
the clear is one statement over the pair), and the prompt of a run that follows a round carries
that round's verdicts and the task's new comments (docs/agents.md, "Stdin: the prompt")."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from core.agents.feedback import HEADER
from core.agents.session import prompt_for
from core.agents.tools.broker import ToolBroker, mcp_server
from core.host import Host
from core.model import Decision
from office_plugin.demo import agent_command
from tests.agents.conftest import enqueue, laneway, set_run, stamp
from tests.conftest import open_host
from tests.tools.board import call, review_board, reviewer_grant


def _rounds(found: list[Decision]) -> list[tuple[int, bool, str, str]]:
    return [(d.round, d.cleared, d.decision, d.comment) for d in found]


def _seat(host: Host, task: str, profile: str) -> str:
    wanted = host.profiles.get(profile).id
    (seat,) = [
        s for s in host.participants.list(step="Review", task=task) if s.agent_profile_id == wanted
    ]
    return seat.id


def test_a_new_entry_keeps_the_cleared_round_readable_and_the_quorum_counts_only_the_current(
    host: Host,
) -> None:
    """AC-A3 with issue 22: re-entering Review clears round 1 from the quorum (all_approve
    needs both reviewers again) while `--all` still lists it, numbered and flagged cleared."""
    board = review_board(host, reviewers=2)
    task = board.task.id
    r1, r2 = _seat(host, task, "r1"), _seat(host, task, "r2")
    host.decisions.record(task, "Review", r1, "approved", comment="fine by me")
    back = host.decisions.record(task, "Review", r2, "rejected", comment="no test")
    assert (back["transitioned"], back["to_step_id"]) == (True, board.step("Work"))
    host.tasks.move(task, "Review")  # a new entry: clear_decisions closes round 1

    assert host.decisions.for_task(task, "Review") == []
    assert _rounds(host.decisions.for_task(task, "Review", all_rounds=True)) == [
        (1, True, "approved", "fine by me"),
        (1, True, "rejected", "no test"),
    ]
    # round 1's approval by r1 no longer counts: r2's approval alone does not meet all_approve
    second = host.decisions.record(task, "Review", r2, "approved", comment="test added")
    assert not second["transitioned"]
    assert second["decision"].round == 2
    assert host.tasks.get(task).workflow_step_id == board.step("Review")
    last = host.decisions.record(task, "Review", r1, "approved")
    assert (last["transitioned"], last["to_step_id"]) == (True, board.step("Approval"))
    assert _rounds(host.decisions.for_task(task, "Review", all_rounds=True)) == [
        (1, True, "approved", "fine by me"),
        (1, True, "rejected", "no test"),
        (2, False, "approved", "test added"),
        (2, False, "approved", ""),
    ]
    assert _rounds(host.decisions.for_task(task, "Review")) == [
        (2, False, "approved", "test added"),
        (2, False, "approved", ""),
    ]


def test_a_first_run_gets_no_feedback_and_the_next_carries_the_rounds_verdicts_and_comments(
    host: Host,
) -> None:
    """The feedback block (docs/agents.md, exact format): after the worker's last turn, the
    rejecting verdict with its comment and a person's comment; the agent's own comment and
    anything before its last turn are left out."""
    board = review_board(host)
    task = board.task.id
    worker = host.profiles.get("worker").id
    host.tasks.move(task, "Work")
    first = enqueue(host, worker, task)
    plain = prompt_for(host, host.runs.find(first))
    assert HEADER not in plain
    host.comments.add(task, "seen already", author="alice")
    set_run(host, first, status="finished", claimed_at=stamp(0), finished_at=stamp(1))
    host.comments.add(task, "I changed the parser", author="worker")  # its own: left out
    host.tasks.move(task, "Review")
    seat = _seat(host, task, "r1")
    host.decisions.record(task, "Review", seat, "rejected", comment="the test is missing\nand docs")
    host.comments.add(task, "please hurry", author="alice")
    second = enqueue(host, worker, task)

    prompt = prompt_for(host, host.runs.find(second))
    block = [
        HEADER,
        "",
        "Verdicts at Review (round 1):",
        "- rejected by reviewer: the test is missing",
        "  and docs",
        "",
        "Comments:",
        "- alice: please hurry",
    ]
    assert prompt == plain + "\n\n" + "\n".join(block)


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_get_task_lists_the_steps_previous_rounds_and_the_feedback(host: Host) -> None:
    """AGENTS.md `get_task`: "the verdicts and comments of the step's previous rounds" — a
    cleared round is listed with its round number and `cleared`."""
    board = review_board(host)
    task = board.task.id
    seat = _seat(host, task, "r1")
    host.decisions.record(task, "Review", seat, "rejected", comment="round one")
    host.tasks.move(task, "Review")
    with ToolBroker(host) as broker:
        (answer,) = call(mcp_server(reviewer_grant(broker, host, board)), ("get_task", {}))
    got = json.loads(answer.text)
    assert [(d["round"], d["cleared"], d["comment"]) for d in got["decisions"]] == [
        (1, True, "round one")
    ]


@pytest.mark.one_database
@pytest.mark.slow
def test_a_rejecting_reviewers_comment_reaches_the_workers_next_prompt(
    db_url: str, tmp_path: Path
) -> None:
    """Issue 22 test "a rejecting reviewer's comment appears in the worker's next prompt; two
    rounds' verdicts are listed by `decision list --all`", through a real `laneway worker`
    process on Office Default: the worker writes each prompt it gets to a file."""
    prompts = tmp_path / "prompts.jsonl"
    dumper = [
        sys.executable,
        "-c",
        (
            "import json, sys\n"
            f"open({str(prompts)!r}, 'a').write(json.dumps(sys.stdin.read()) + '\\n')\n"
        ),
    ]
    with open_host(db_url) as host:
        wf = host.workflows.create_from_template("office-default")
        host.workspace.set(office_workflow=wf.id)
        host.profiles.add("worker", command=dumper, role="worker")
        host.participants.add(step="Work", role="runner", profile="worker", workflow=wf.id)
        host.profiles.add(
            "rev",
            command=agent_command(
                "reviewer", "--verdicts", "rejected,approved", "--state", str(tmp_path / "rev")
            ),
            role="reviewer",
        )
        host.participants.add(step="Review", role="reviewer", profile="rev", workflow=wf.id)
        host.profiles.add("appr", command=agent_command("approver"), role="approver")
        host.participants.add(step="Approval", role="approver", profile="appr", workflow=wf.id)
        task = host.tasks.create(workflow=wf.id, title="Git sync", description="Sync it.")
        host.tasks.start(task.id)

    ran = laneway("--db", db_url, "--json", "worker", "--once", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    first, second = [json.loads(line) for line in prompts.read_text().splitlines()]
    assert "Sync it." in first
    assert HEADER not in first
    assert second.startswith(first + "\n\n" + HEADER + "\n")
    assert "Verdicts at Review (round 1):\n- rejected by reviewer: reviewer turn 1" in second

    # the task named by the last 8 characters of its id, as the board page shows it
    listed = laneway(
        "--db", db_url, "--json", "decision", "list", "--task", task.id[-8:], "--step", "Review",
        "--all", cwd=tmp_path,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert [(d["round"], d["cleared"], d["decision"]) for d in json.loads(listed.stdout)] == [
        (1, True, "rejected"),
        (2, False, "approved"),
    ]
    current = laneway(
        "--db", db_url, "--json", "decision", "list", "--task", "Git sync", "--step", "Review",
        cwd=tmp_path,
    )  # fmt: skip
    assert current.returncode == 0, current.stderr
    assert [(d["round"], d["cleared"]) for d in json.loads(current.stdout)] == [(2, False)]
