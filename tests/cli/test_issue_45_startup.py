"""Issue 45 item 6 (start-up): loguru, and what it pulls in (multiprocessing; asyncio and ssl
beyond what SQLAlchemy imports itself), is imported only by a command that makes a record; a
plugin's GitHub client (urllib.request, http.client) only by a call to GitHub. The timing is
`tests/benchmarks/bench_startup.py`; these tests keep the structure, and that every record
still reaches every sink, from drifting."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # its tests start `laneway` or `python`: the subprocess tier

LANEWAY = Path(sys.executable).with_name("laneway")

# The console script's own entry point, reporting on stderr which modules the process imported.
CONSOLE_PROBE = """
import atexit, json, sys
atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))
from core.console import main
main(sys.argv[1:])
"""

HEAVY = (
    "loguru",
    "multiprocessing",
    "http.client",
    "urllib.request",
    "asyncio",
    "ssl",
    "getpass",
    "termios",
)


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, check=False, env=env
    )


def _modules_of_sqlalchemy() -> set[str]:
    done = _run("-c", "import json, sys, sqlalchemy; print(json.dumps(sorted(sys.modules)))")
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


@pytest.fixture
def board(sqlite_url: str) -> tuple[str, str]:
    """A current SQLite board with one task in Backlog: (url, task id)."""
    made: dict[str, Any] = {}
    for args in (
        ["init"],
        ["workflow", "create", "--template", "simple"],
        ["--json", "task", "create", "--workflow", "Kanban", "--title", "probe"],
        ["task", "move", "<id>", "Backlog"],
    ):
        args = [made.get("id", a) if a == "<id>" else a for a in args]
        done = subprocess.run(
            [str(LANEWAY), "--db", sqlite_url, *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        if "create" in args and "task" in args:
            made = json.loads(done.stdout)
    return sqlite_url, str(made["id"])


def test_issue_45_item_6_task_move_imports_no_loguru_when_it_makes_no_record(
    board: tuple[str, str],
) -> None:
    """A manual move at the default level (WARNING) makes no record a handler takes: the
    process never imports loguru, multiprocessing or an HTTP client, and no asyncio or ssl
    beyond what `import sqlalchemy` brings itself (SQLAlchemy 2 imports asyncio)."""
    url, task_id = board
    done = _run("-c", CONSOLE_PROBE, "--db", url, "task", "move", task_id, "Review")
    assert done.returncode == 0, done.stderr
    assert "moved from Backlog to Review" in done.stdout
    modules = set(json.loads(done.stderr.splitlines()[-1]))
    floor = _modules_of_sqlalchemy()
    assert [m for m in HEAVY if m in modules and m not in floor] == []


TABLES_PROBE = """
import atexit, json, sys
def built():
    from core.store import tables
    return sorted(n for n in tables._BUILDERS if n in vars(tables))
atexit.register(lambda: print(json.dumps(built()), file=sys.stderr))
from core.console import main
main(sys.argv[1:])
"""


def test_issue_45_item_6_task_move_builds_only_the_tables_it_reads(
    board: tuple[str, str],
) -> None:
    """Each table is built the first time a process names it: a manual move builds the
    tables it reads and writes (and those its modules' fixed statements name), not the
    schema's 31 - no runs, schedules, hooks, budgets, users, outbox or seats."""
    url, task_id = board
    done = _run("-c", TABLES_PROBE, "--db", url, "task", "move", task_id, "Review")
    assert done.returncode == 0, done.stderr
    assert "moved from Backlog to Review" in done.stdout
    built = set(json.loads(done.stderr.splitlines()[-1]))
    assert {"tasks", "workflows", "workflow_steps", "board_events", "host_epochs"} <= built
    never = {
        "runs",
        "schedules",
        "hooks",
        "hook_deliveries",
        "budgets",
        "users",
        "trigger_outbox",
        "task_blockers",
        "workflow_step_participants",
        "transcript_items",
        "comments",
    }
    assert built & never == set()
    assert len(built) <= 12


def test_issue_45_item_6_a_fresh_import_builds_no_table_until_one_is_named() -> None:
    """Importing `core.store.tables` builds nothing; naming one table builds it alone, and
    `metadata` builds the rest (what the migrations and `create_all` read)."""
    probe = (
        "from core.store import tables as t\n"
        "built = lambda: sorted(n for n in t._BUILDERS if n in vars(t))\n"
        "print(built())\n"
        "t.tasks\n"
        "print(built())\n"
        "print(len(t.metadata.tables), len(built()), len(t._BUILDERS))\n"
    )
    done = _run("-c", probe)
    assert done.returncode == 0, done.stderr
    empty, alone, counts = done.stdout.split("\n")[:3]
    assert (empty, alone) == ("[]", "['tasks']")
    every, built, declared = map(int, counts.split())
    assert every == built == declared > 30


def test_issue_45_item_6_threads_naming_a_table_first_at_once_get_one_table() -> None:
    """A worker's or serve's threads may name a table for the first time together: one
    builds it, every one gets that table (a second build on the same `MetaData` would be
    refused as already defined)."""
    probe = (
        "import sys, threading\n"
        "sys.setswitchinterval(1e-6)\n"
        "from core.store import tables as t\n"
        "names = ['runs', 'schedules', 'hooks', 'budgets', 'comments', 'questions']\n"
        "gate = threading.Barrier(8)\n"
        "seen, failed = [], []\n"
        "def name_them():\n"
        "    gate.wait()\n"
        "    try:\n"
        "        seen.append([id(getattr(t, n)) for n in names])\n"
        "    except Exception as exc:\n"
        "        failed.append(repr(exc))\n"
        "threads = [threading.Thread(target=name_them) for _ in range(8)]\n"
        "[th.start() for th in threads]\n"
        "[th.join() for th in threads]\n"
        "print(len(failed), len(seen), len({tuple(s) for s in seen}))\n"
        "print(failed[:1])\n"
    )
    for _ in range(5):
        done = _run("-c", probe)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split("\n")[0] == "0 8 1", done.stdout


def test_issue_45_item_6_a_record_still_reaches_stderr_when_one_is_made(
    board: tuple[str, str],
) -> None:
    """Behaviour unchanged: with `--log-json` the same move makes its INFO records, loguru is
    imported for them, and each is a JSON line on stderr with its discrete fields, named for
    the module that made it."""
    url, task_id = board
    done = _run("-c", CONSOLE_PROBE, "--db", url, "--log-json", "task", "move", task_id, "Review")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert "loguru" in json.loads(lines[-1])
    records = [json.loads(line)["record"] for line in lines[:-1] if line.startswith("{")]
    opened = [r for r in records if r["message"] == "host opened"]
    assert opened, done.stderr
    assert opened[0]["extra"]["command"]
    assert opened[0]["name"] == "core.cli.app"


# A host that imports laneway first and loguru later, and adds its own list sink.
LIST_SINK_PROBE = """
import json, sys
import core.logs
assert "loguru" not in sys.modules
AS_CORE = {"__name__": "core.probe"}
import importlib.util
assert importlib.util.find_spec("loguru") is not None  # looked up, not imported: still watched
assert "loguru" not in sys.modules
from loguru import logger as real
exec("from core.logs import logger; logger.bind(k=1).info('before enable')", AS_CORE)
seen = []
real.add(lambda m: seen.append([m.record["name"], m.record["message"], m.record["extra"]]))
exec("from core.logs import logger; logger.info('silenced')", AS_CORE)
real.enable("core")
exec("from core.logs import logger; logger.bind(k=2).warning('heard')", AS_CORE)
exec("from core.logs import logger; logger.opt(lazy=True).debug('lazy {}', lambda: 3)", AS_CORE)
print(json.dumps(seen))
"""


def test_issue_45_item_6_the_lazy_logger_feeds_sinks_added_through_loguru() -> None:
    """`from core.logs import logger` keeps working for every caller: laneway's packages are
    silenced the moment loguru is imported (by whoever imports it), a sink added through
    loguru's own `logger.add` sees every record once the package is enabled, bound fields
    and `opt` included, and each record names the module that made it."""
    done = _run("-c", LIST_SINK_PROBE)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        ["core.probe", "heard", {"k": 2}],
        ["core.probe", "lazy 3", {}],
    ]


@pytest.mark.parametrize(
    "env",
    [
        {"LOGNAME": "ada", "USER": "bob"},
        {"USER": "bob"},
        {"LNAME": "cy"},
        {"USERNAME": "dee"},
        {},
    ],
)
def test_issue_45_item_6_the_cli_person_is_the_login_name_getpass_would_give(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Behaviour unchanged without `getpass` imported: with no LANEWAY_USER the command line's
    person is the login name `getpass.getuser()` finds, from the environment's LOGNAME, USER,
    LNAME or USERNAME in that order, else the password database."""
    import getpass

    from core import actors

    for variable in ("LANEWAY_USER", "LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(variable, raising=False)
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    assert actors._login_name() == getpass.getuser()
    assert actors.cli_user() == actors.user(getpass.getuser())


def test_issue_45_item_6_the_whole_schema_imports_no_database_dialect() -> None:
    """Every table built (what a worker names, and more) imports no SQLAlchemy dialect: a
    dialect's options on a table or index (`postgresql_where=`) make SQLAlchemy import that
    dialect to validate them, and the PostgreSQL one was 30 ms of every SQLite worker's start.
    A partial index's predicate lives in its migration instead."""
    done = _run(
        "-c",
        "import json, sys\n"
        "from core.store import tables\n"
        "print(len(tables.metadata.tables))\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('sqlalchemy.dialects.'))))",
    )
    assert done.returncode == 0, done.stderr
    count, dialects = done.stdout.splitlines()
    assert int(count) >= 31
    assert json.loads(dialects) == []
