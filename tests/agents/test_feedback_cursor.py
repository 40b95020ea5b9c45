"""Issue 45 item 1: a live conversation's turn reads only what was given since the agent's last
turn (the cursor: that turn's start, and whether anything lies past it, in one statement), and
the cursor never skips a comment or a round.

- a comment written during a turn, by another process (the agent's own turn runs `laneway task
  comment` as alice), reaches the next turn of the same live conversation, once;
- two review rounds within one turn both reach the next prompt;
- a turn after which nothing was said gets no block, and one after a comment of the agent's
  own gets none either.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from core import faults
from core.agents import feedback, worker
from core.agents.feedback import HEADER
from core.agents.session import prompt_for
from core.host import Host
from core.runs import RunRequest
from core.store import tables as t
from tests.agents.conftest import enqueue, laneway_script, set_run, stamp
from tests.conftest import one_step_workflow
from tests.tools.board import review_board

FAKE = str(Path(__file__).resolve().with_name("fake_acp_agent.py"))


def _live_board(host: Host, db_url: str, tmp_path: Path) -> tuple[str, str, str]:
    """A plain workflow's task and an ACP profile whose agent, in its first turn, has alice
    comment on the task from a process of its own (the `laneway` CLI), then echoes each
    prompt; the agent can neither load nor resume, so its process is the live conversation."""
    wf = one_step_workflow(host, tmp_path, prompt="Do it.")
    task = host.tasks.create(workflow=wf.id, title="live", description="A task.")
    comment = (
        "import subprocess\n"
        f"subprocess.run([{laneway_script()!r}, 'task', 'comment', {task.id!r},"
        " 'written during the turn', '--author', 'alice'], check=True, capture_output=True)\n"
        "result = 'commented'\n"
    )
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [[{"python": comment}], []]}))
    profile = host.profiles.add(
        "live",
        command=[sys.executable, FAKE],
        protocol="acp",
        env={"FAKE_ACP_SCRIPT_FILE": str(script), "LANEWAY_DB": db_url},
    )
    return profile.id, task.id, str(task.workflow_step_id)


def _turn(host: Host, agent: str, task: str, step: str, watch: worker.CancelWatch) -> str:
    """One run of the agent on the task, as a worker runs it (`execute` finishes it); the
    prompt the agent echoed."""
    host.runs.enqueue(
        RunRequest(
            agent_profile_id=agent,
            task_id=task,
            workflow_step_id=step,
            reason="test",
            coalesce_exempt=True,
        )
    )
    run = worker.claim_next(host)
    assert run is not None
    assert run.agent_profile_id == agent
    outcome = worker.execute(host, run, watch)
    assert outcome.ok, outcome
    assert host.runs.find(run.id).status == "finished"
    items = t.transcript_items
    with host.store.read() as conn:
        said = conn.execute(
            sa.select(items.c.text)
            .where(items.c.run_id == run.id, items.c.kind == "message")
            .order_by(items.c.seq)
        ).scalars()
        echoed = [s for s in said if s.startswith("echo: ")]
    assert len(echoed) == 1, echoed
    # `echo: PROMPT (previous: THE PREVIOUS PROMPT)`
    return echoed[0].removeprefix("echo: ").split(" (previous: ")[0]


@pytest.mark.slow  # it starts the fake ACP agent and the laneway CLI: the subprocess tier
def test_issue_45_item_1_a_comment_written_during_a_turn_reaches_the_next_turn_once(
    host: Host, db_url: str, tmp_path: Path
) -> None:
    agent, task, step = _live_board(host, db_url, tmp_path)
    host.comments.add(task, "before the first turn", author="bob")
    watch = worker.CancelWatch(host)
    try:
        first = _turn(host, agent, task, step, watch)
        assert [c.body for c in host.comments.list(task)] == [
            "before the first turn",
            "written during the turn",
        ]
        second = _turn(host, agent, task, step, watch)
        third = _turn(host, agent, task, step, watch)
    finally:
        watch.close()
        host.runtime.close()
    # a first run has no last turn: no block (as before the cursor)
    assert HEADER not in first
    # the comment alice wrote while the first turn ran, from another process, is past the
    # cursor: the next turn of the same conversation carries it, and the one before it not
    assert HEADER in second
    assert "- alice: written during the turn" in second
    assert "before the first turn" not in second
    # nothing was said since: the third turn gets no block
    assert HEADER not in third


def test_issue_45_item_1_two_rounds_within_one_turn_both_reach_the_next_prompt(
    host: Host,
) -> None:
    """While the worker's turn ran, the reviewer rejected, the task re-entered Review (a new
    round) and the reviewer rejected again: the next prompt lists both rounds' verdicts."""
    board = review_board(host)
    task = board.task.id
    worker_id = host.profiles.get("worker").id
    host.tasks.move(task, "Work")
    first = enqueue(host, worker_id, task)
    set_run(host, first, status="finished", claimed_at=stamp(-5), finished_at=stamp(5))
    r1 = host.profiles.get("r1").id
    (seat,) = [
        s for s in host.participants.list(step="Review", task=task) if s.agent_profile_id == r1
    ]
    host.tasks.move(task, "Review")
    host.decisions.record(task, "Review", seat.id, "rejected", comment="round one")
    host.tasks.move(task, "Review")  # a new entry: a new round
    host.decisions.record(task, "Review", seat.id, "rejected", comment="round two")
    second = enqueue(host, worker_id, task)

    prompt = prompt_for(host, host.runs.find(second))
    assert "Verdicts at Review (round 1):\n- rejected by reviewer: round one" in prompt
    assert "Verdicts at Review (round 2):\n- rejected by reviewer: round two" in prompt
    set_run(host, second, status="finished", claimed_at=stamp(10), finished_at=stamp(11))
    # nothing since the second turn began: the third prompt has no block
    third = enqueue(host, worker_id, task)
    assert HEADER not in prompt_for(host, host.runs.find(third))


def test_issue_45_item_1_the_agents_own_comment_after_its_turn_gives_no_block(
    host: Host,
) -> None:
    """The cursor's check leaves out what the agent wrote itself, as the block does."""
    board = review_board(host)
    task = board.task.id
    worker_id = host.profiles.get("worker").id
    host.tasks.move(task, "Work")
    first = enqueue(host, worker_id, task)
    set_run(host, first, status="finished", claimed_at=stamp(-5), finished_at=stamp(5))
    host.comments.add(task, "my own note", author="worker")
    second = enqueue(host, worker_id, task)
    assert HEADER not in prompt_for(host, host.runs.find(second))
    host.comments.add(task, "and mine", author="carol")
    assert prompt_for(host, host.runs.find(second)).endswith("Comments:\n- carol: and mine")


def test_issue_45_item_1_a_comment_stamped_before_a_claim_but_committed_after_is_given(
    host: Host,
) -> None:
    """The feedback cursor's hole: a comment whose time was taken before a run's claim but
    whose transaction committed after that run read its feedback was behind the next run's
    cursor (the claim's time) and given to no turn. Forced here: the comment's writer stops
    at `comment.before_commit` (its time taken, not yet committed) while another thread
    claims the next run and builds its prompt, as a worker does; then the comment goes on.
    It must reach the claimed run's prompt or the one after it, exactly once."""
    board = review_board(host)
    task = board.task.id
    worker_id = host.profiles.get("worker").id
    host.tasks.move(task, "Work")
    first = enqueue(host, worker_id, task)
    set_run(host, first, status="finished", claimed_at=stamp(-5), finished_at=stamp(-4))
    second = enqueue(host, worker_id, task)

    pause = faults.pause_at("comment.before_commit")
    writer = threading.Thread(
        target=lambda: host.comments.add(task, "said while claimed", author="carol")
    )
    writer.start()
    assert pause.reached.wait(30)
    claimed: list[str] = []

    def claim_and_prompt() -> None:
        run = worker.claim_next(host, [worker_id])
        assert run is not None
        assert run.id == second
        claimed.append(prompt_for(host, run))

    claimer = threading.Thread(target=claim_and_prompt)
    claimer.start()
    # the claim either completes (the comment's order is not yet decided) or waits for the
    # comment's commit; either way the comment then goes on
    claimer.join(1.0)
    pause.release()
    writer.join(30)
    claimer.join(30)
    assert not writer.is_alive()
    assert not claimer.is_alive()
    (second_prompt,) = claimed
    set_run(host, second, status="finished", finished_at=stamp(1))
    third = enqueue(host, worker_id, task)
    third_prompt = prompt_for(host, host.runs.find(third))
    given = [p for p in (second_prompt, third_prompt) if "- carol: said while claimed" in p]
    assert len(given) == 1, (second_prompt, third_prompt)


def _runs_visited(host: Host, run: str, agent: str, task: str) -> int:
    """The rows of `runs` the cursor's statement reads, by the database's own account: SQLite's
    plan must search the runs by task, agent and claim time (the index's last entry answers the
    max); PostgreSQL's executed plan counts what each runs node returned and filtered away."""
    params = {"task_id": task, "agent": agent, "run_id": run}
    with host.store.read() as conn:
        compiled = feedback._NEWS.compile(dialect=conn.dialect)
        sql, values = str(compiled), compiled.construct_params(params)
        if conn.dialect.name == "sqlite":
            args = tuple(values[name] for name in compiled.positiontup or ())
            plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, args).all()
            on_runs = [row[3] for row in plan if " runs " in f" {row[3]} "]
            assert on_runs, plan
            # a search that names the agent and the claim time reads one entry of the index
            assert all("agent_profile_id=?" in detail for detail in on_runs), on_runs
            return 1
        conn.exec_driver_sql("ANALYZE runs")
        (doc,) = conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, values).one()
    plan = doc[0]["Plan"] if isinstance(doc, list) else json.loads(doc)[0]["Plan"]
    seen, nodes = 0, [plan]
    while nodes:
        node = nodes.pop()
        nodes.extend(node.get("Plans", ()))
        if node.get("Relation Name") == "runs":
            loops = node.get("Actual Loops", 1)
            seen += (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)) * loops
    return seen


def test_issue_45_item_1_the_cursor_reads_the_last_turn_start_not_the_tasks_history(
    host: Host,
) -> None:
    """A long review loop leaves a task with many runs: the cursor (the agent's last turn
    start) is read at every run, and read through the task's runs one by one it made each turn
    slower than the last (a quarter of a live turn after 1,000 runs). With 2,000 past runs of
    two agents, the cursor is the newest claim of this agent's, and the read visits a handful
    of rows, not the history."""
    board = review_board(host)
    task = board.task.id
    worker_id = host.profiles.get("worker").id
    other = host.profiles.get("r1").id
    host.tasks.move(task, "Work")
    base = stamp(-5000)
    with host.store.transaction() as uow:
        uow.conn.execute(
            sa.insert(t.runs),
            [
                {
                    "id": f"past-{n}",
                    "agent_profile_id": worker_id if n % 2 else other,
                    "task_id": task,
                    "reason": "test",
                    "status": "finished",
                    "requested_at": base,
                    "claimed_at": stamp(-4000 + n),
                    "finished_at": stamp(-4000 + n),
                }
                for n in range(2000)
            ],
        )
    host.comments.add(task, "after the last turn", author="carol")
    run = enqueue(host, worker_id, task)
    prompt = prompt_for(host, host.runs.find(run))
    assert prompt.endswith("Comments:\n- carol: after the last turn")
    assert _runs_visited(host, run, worker_id, task) <= 4
