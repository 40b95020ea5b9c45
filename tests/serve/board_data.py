"""A board that looks like a working day, for the page test and the README's screenshot:
tasks at every step of Office Default, a review half-way through its votes, an agent at work,
one whose session failed."""

from __future__ import annotations

from tests.conftest import open_host
from tests.serve.conftest import OfficeBoard


def populate(office: OfficeBoard) -> None:
    with open_host(office.db) as host:
        wf = office.workflow_id

        def task(title: str, description: str = "") -> str:
            return host.tasks.create(workflow=wf, title=title, description=description).id

        for title in ("Rotate the staging API keys", "Write the 2.4 release notes"):
            host.tasks.move(task(title), "Backlog")
        running = task("Fix the flaky login test", "Fails about one run in twenty on CI.")
        host.tasks.move(running, "Work")
        session = host.sessions.start(running)
        host.sessions.set_state(session.id, "RUNNING")
        dead = task("Move CI to the new runners")
        host.tasks.move(dead, "Work")
        failed = host.sessions.start(dead)
        host.sessions.set_state(failed.id, "FAILED", error="agent exited with status 2")
        # the demo's task: in review, one of two reviewers has approved
        host.tasks.move(office.task_id, "Review")
        host.decisions.record(
            office.task_id, "Review", office.seats["reviewer-1"], "approved", comment="looks good"
        )
        upgraded = task("Upgrade PostgreSQL to 17", "Minor-version first, then pg_upgrade.")
        host.tasks.move(upgraded, "Review")
        for seat in ("reviewer-1", "reviewer-2"):
            host.decisions.record(upgraded, "Review", office.seats[seat], "approved")
        done = task("Nightly backup report")
        host.tasks.move(done, "Done")
