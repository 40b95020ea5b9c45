"""One board, one configuration (issue 9 items 6 and 8), on SQLite and PostgreSQL.

- What one process changes, the others see: a workflow imported, a step edited, a profile
  added, the features switched by one process take effect in a host that is already running,
  without a restart, and without re-reading the catalogue on every arrival (the board's
  catalogue version, checked at the start of each transaction and read).
- The features are the board's (`laneway features`, `Host.set_features`); a process with a
  per-process override (`--no-office`, `Host.open(features=...)`) acts with it for its own
  arrivals and does not run the recovery scan; `recover` counts every skip by reason.

The writer changes run in real `laneway` processes while a host of this test process is open.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core import Features, Host
from core.plugin.selection import PluginSelection
from tests.agents.conftest import laneway
from tests.conftest import open_host

pytestmark = pytest.mark.slow

BUILTIN = PluginSelection(allow=frozenset({"kanban", "office"}))
SIMPLE = textwrap.dedent(
    """\
    id: later
    name: Imported later
    steps:
      - {id: a, name: A, position: 0, is_start_step: true, allow_manual_move: true}
      - {id: b, name: B, position: 1, allow_manual_move: true}
    """
)


def _cli(*args: str, db: str, cwd: Path, env: dict[str, str] | None = None) -> Any:
    proc = laneway("--db", db, "--json", *args, cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _reader(url: str) -> Host:
    return Host.open(url, plugins=BUILTIN, upgrade=False, read_only=True)


# -- item 6: what one process changes, the others see ----------------------------------------------


def test_a_running_host_follows_workflows_profiles_and_features_another_process_changes(
    db_url: str, tmp_path: Path
) -> None:
    """Issue 9 item 6: a host already open sees, without a restart, a workflow and a profile
    that `laneway` processes add and the features `laneway features set` switches."""
    _cli("init", db=db_url, cwd=tmp_path)
    first = _cli("workflow", "create", "--template", "simple", db=db_url, cwd=tmp_path)
    with _reader(db_url) as host:
        assert host.workflows.by_id(first["id"]).name == first["name"]  # cached from here
        assert host.features.office is True
        assert host.registry.kind("clear_decisions").executable is True  # type: ignore[union-attr]

        (path := tmp_path / "later.yml").write_text(SIMPLE)
        _cli("workflow", "import", str(path), db=db_url, cwd=tmp_path)
        _cli("profile", "add", "late-bot", "--command", "true", db=db_url, cwd=tmp_path)
        _cli("features", "set", "office=off", db=db_url, cwd=tmp_path)

        assert [s.name for s in host.workflows.get("Imported later").steps] == ["A", "B"]
        assert host.profiles.get("late-bot").command == ("true",)
        assert host.features.office is False
        assert host.registry.kind("clear_decisions").executable is False  # type: ignore[union-attr]
        office = next(p for p in host.plugins.list() if p["name"] == "office")
        assert office["enabled"] is False


_EDIT_STEP = """
import sys
import sqlalchemy as sa
from core import Host, board
from core.store import tables as t
url, step_id = sys.argv[1:3]
with Host.open(url) as host, host.store.transaction() as uow:
    uow.conn.execute(
        sa.update(t.workflow_steps).where(t.workflow_steps.c.id == step_id).values(prompt="edited")
    )
    board.bump(uow)
"""


def test_a_step_edited_by_another_process_is_seen_by_a_running_host(
    db_url: str, tmp_path: Path
) -> None:
    """Issue 9 item 6: a step edited by another process (there is no edit command yet: the
    process writes the row and moves the catalogue version in the same transaction, as any
    writer that changes a step must) replaces the running host's cached declaration."""
    import subprocess

    _cli("init", db=db_url, cwd=tmp_path)
    wf = _cli("workflow", "create", "--template", "simple", db=db_url, cwd=tmp_path)
    step_id = wf["steps"][0]["id"]
    with _reader(db_url) as host:
        assert host.workflows.get(wf["id"]).step(step_id).prompt != "edited"  # type: ignore[union-attr]
        proc = subprocess.run(
            [sys.executable, "-c", _EDIT_STEP, db_url, step_id],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert host.workflows.get(wf["id"]).step(step_id).prompt == "edited"  # type: ignore[union-attr]


def test_arrivals_do_not_re_read_the_catalogue(db_url: str) -> None:
    """Issue 9 item 6: following the board costs one primary-key read of the version per
    transaction, not a read of the catalogue: twenty arrivals after the first read no
    workflow or step rows."""
    with open_host(db_url) as host:
        wf = host.workflows.create_from_template("simple")
        task = host.tasks.create(workflow=wf.id, title="t")
        host.tasks.move(task.id, "Review")
        seen: list[str] = []

        def record(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
            seen.append(statement)

        sa.event.listen(host.store.engine, "before_cursor_execute", record)
        try:
            for n in range(20):
                host.tasks.move(task.id, "In Progress" if n % 2 == 0 else "Review")
        finally:
            sa.event.remove(host.store.engine, "before_cursor_execute", record)
        catalogue = [s for s in seen if "workflow_steps" in s or "FROM workflows" in s]
        assert catalogue == []
        assert host.tasks.get(task.id).workflow_step_id == wf.step("Review").id  # type: ignore[union-attr]


def test_two_writer_hosts_follow_each_others_changes(db_url: str, tmp_path: Path) -> None:
    """Issue 9 items 6 and 8 with two live writers (a worker and another process): features
    switched and a workflow imported by one take effect in the other's next arrival."""
    first = open_host(db_url)
    try:
        second = open_host(db_url)
        try:
            office = first.workflows.create_from_template("office-default")
            task = first.tasks.create(workflow=office.id, title="t")
            second.set_features(office=False)
            (path := tmp_path / "later.yml").write_text(SIMPLE)
            second.workflows.import_file(path)

            first.tasks.move(task.id, "Review")  # Office off on the board: no executor

            assert first.features.office is False
            later = first.tasks.create(workflow="Imported later", title="u")
            assert later.workflow_step_id is not None
            ((_entry, markers),) = first.entries.list(task=task.id)
            assert {m.reason for m in markers} == {"no_executor"}
        finally:
            second.close()
    finally:
        first.close()


# -- item 8: one board, one configuration ---------------------------------------------------------


@pytest.mark.one_database
def test_laneway_features_shows_and_sets_the_boards_switches(db_url: str, tmp_path: Path) -> None:
    """Issue 9 item 8 (CLI.md `features`): `{"office": bool}`, stored in the database, so a
    later process (`features`, `plugins list` without `--no-office`) sees what `features set`
    wrote; bad switches are one-line errors."""
    _cli("init", db=db_url, cwd=tmp_path)
    assert _cli("features", db=db_url, cwd=tmp_path) == {"office": True}
    assert _cli("features", "set", "office=off", db=db_url, cwd=tmp_path) == {"office": False}
    assert _cli("features", db=db_url, cwd=tmp_path) == {"office": False}
    plugins = _cli("plugins", "list", db=db_url, cwd=tmp_path)
    assert next(p for p in plugins if p["name"] == "office")["enabled"] is False
    text = laneway("--db", db_url, "features", cwd=tmp_path)
    assert text.stdout.splitlines() == ["office: off"]
    assert _cli("features", "set", "office=on", db=db_url, cwd=tmp_path) == {"office": True}
    for bad, says in (("office=maybe", "expected NAME=on or NAME=off"), ("turbo=on", "unknown")):
        proc = laneway("--db", db_url, "features", "set", bad, cwd=tmp_path)
        assert proc.returncode == 1
        (line,) = proc.stderr.splitlines()
        assert line.startswith("laneway: ")
        assert says in line
    assert _cli("features", db=db_url, cwd=tmp_path) == {"office": True}


def test_host_set_features_is_the_boards_and_later_hosts_follow_it(db_url: str) -> None:
    """Issue 9 item 8: `Host.set_features` writes the board; a host opened later without
    `features=` acts with the board's switches; one opened with `features=` acts with its
    own (and is told apart by `features_override`)."""
    with Host.open(db_url, plugins=BUILTIN) as host:
        host.set_features(office=False)
        assert host.features == Features(office=False)
    with Host.open(db_url, plugins=BUILTIN) as host:
        assert host.recovery_report is not None
        assert host.features == Features(office=False)
        assert host.features_override is None
        assert host.registry.kind("clear_decisions").executable is False  # type: ignore[union-attr]
    with Host.open(db_url, plugins=BUILTIN, features=Features(office=True)) as host:
        assert host.recovery_report is None  # an override runs no recovery scan
        assert host.features == Features(office=True)
        assert host.features_override == Features(office=True)
        assert host.board_features() == Features(office=False)


def _crashed_review_entry(db: str, cwd: Path) -> str:
    """An Office task whose move into Review committed (entry allocated) but whose process
    died before anything was dispatched (fault point `transition.after_commit`)."""
    _cli("init", db=db, cwd=cwd)
    wf = _cli("workflow", "create", "--template", "office-default", db=db, cwd=cwd)
    task = _cli("task", "create", "--workflow", wf["id"], "--title", "t", db=db, cwd=cwd)["id"]
    crashed = laneway(
        "--db", db, "task", "move", task, "Review", cwd=cwd,
        env={"LANEWAY_FAULT": "transition.after_commit"},
    )  # fmt: skip
    assert crashed.returncode == 99, crashed.stderr
    return str(task)


def test_a_no_office_process_does_not_run_the_recovery_scan(db_url: str, tmp_path: Path) -> None:
    """Issue 9 item 8: a crashed Office entry is not closed as skipped(no_executor) merely
    because the next process to start has Office off for itself (`--no-office`): that process
    runs no recovery scan (and `recover` under `--no-office` is refused in one line); the next
    process following the board (Office on) resumes the entry."""
    task = _crashed_review_entry(db_url, tmp_path)

    _cli("--no-office", "task", "create", "--workflow", "Office Default", "--title", "u",
         db=db_url, cwd=tmp_path)  # fmt: skip
    refused = laneway("--db", db_url, "--no-office", "recover", cwd=tmp_path)
    assert refused.returncode == 1
    assert "--no-office" in refused.stderr

    ((entry,),) = [_cli("entries", "list", "--task", task, db=db_url, cwd=tmp_path)]
    assert entry["terminal"] is False
    assert entry["markers"] == []
    report = _cli("recover", db=db_url, cwd=tmp_path)
    assert report["redispatched"] == 1
    assert report["skipped"] == {}
    (entry,) = _cli("entries", "list", "--task", task, db=db_url, cwd=tmp_path)
    assert entry["terminal"] is True
    assert {m["state"] for m in entry["markers"]} == {"done"}


def test_a_no_office_process_acts_with_its_override_for_its_own_arrivals(
    db_url: str, tmp_path: Path
) -> None:
    """Issue 9 item 8: `--no-office` is Office off for this process's own arrivals, whatever
    the board says: its move into Review skips the Office kinds (no_executor)."""
    _cli("init", db=db_url, cwd=tmp_path)
    wf = _cli("workflow", "create", "--template", "office-default", db=db_url, cwd=tmp_path)
    task = _cli("task", "create", "--workflow", wf["id"], "--title", "t", db=db_url, cwd=tmp_path)
    _cli("--no-office", "task", "move", task["id"], "Review", db=db_url, cwd=tmp_path)
    (entry,) = _cli("entries", "list", "--task", task["id"], db=db_url, cwd=tmp_path)
    assert {(m["state"], m["reason"]) for m in entry["markers"]} == {("skipped", "no_executor")}
    assert _cli("features", db=db_url, cwd=tmp_path) == {"office": True}


def test_recover_counts_every_skip_by_reason(db_url: str, tmp_path: Path) -> None:
    """Issue 9 item 8: the board has Office off when a crashed Office entry is recovered; the
    positions it closes as skipped(no_executor) are counted in the report beside the
    re-dispatch (they used to be hidden behind `"skipped": {}`)."""
    task = _crashed_review_entry(db_url, tmp_path)
    # with --no-office, the process that switches the board runs no scan of its own first
    _cli("--no-office", "features", "set", "office=off", db=db_url, cwd=tmp_path)

    report = _cli("recover", db=db_url, cwd=tmp_path)

    (entry,) = _cli("entries", "list", "--task", task, db=db_url, cwd=tmp_path)
    skipped = [m for m in entry["markers"] if m["state"] == "skipped"]
    assert {m["reason"] for m in skipped} == {"no_executor"}
    assert report["redispatched"] == 1
    assert report["skipped"] == {"no_executor": len(skipped)}
