"""Issue 14 target 1 (command startup): a command imports what it runs. Built-in commands load
when looked up, `--help` lists them from `BUILTIN_HELP`, and the schema check needs no alembic.
The timing itself is `tests/benchmarks/bench_commands.py`; these tests keep the structure that
makes it fast, and the help a user reads, from drifting."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from core import host
from core.cli import app, build_cli
from core.plugin.selection import PluginSelection
from plugins import hookimpl

pytestmark = pytest.mark.slow  # its tests start `laneway` or `python`: the subprocess tier

LANEWAY = Path(sys.executable).with_name("laneway")

# Runs the console script's own function, then reports which modules the process imported.
PROBE = """
import atexit, json, sys
atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))
from core.cli import main
main(sys.argv[1:])
"""


def _probed(probe: str, *args: str, env: dict[str, str] | None = None) -> tuple[str, Any]:
    """Run `probe` (Python source) with `args` as its command line; its output, and the JSON
    it printed last on stderr (what the probe reports)."""
    done = subprocess.run(
        [sys.executable, "-c", probe, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, json.loads(done.stderr.splitlines()[-1])


def _modules_after(*args: str, env: dict[str, str] | None = None) -> tuple[str, set[str]]:
    out, modules = _probed(PROBE, *args, env=env)
    return out, set(modules)


@pytest.fixture
def current_board(sqlite_url: str) -> str:
    for args in (
        ["init"],
        ["workflow", "create", "--template", "simple"],
        ["task", "create", "--workflow", "Kanban", "--title", "probe"],
    ):
        done = subprocess.run(
            [str(LANEWAY), "--db", sqlite_url, *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    return sqlite_url


def test_task_list_on_a_current_database_does_not_import_alembic(current_board: str) -> None:
    """AC issue-14/1: checking the schema revision reads the version table; alembic (and mako,
    pygments behind it) is for `init` and out-of-date schemas only."""
    out, modules = _modules_after("--db", current_board, "task", "list")
    assert "'probe'" in out
    assert "alembic" not in modules
    assert "mako" not in modules
    out, modules = _modules_after("--db", current_board, "--json", "task", "list")
    (task,) = json.loads(out)
    moved, modules = _modules_after("--db", current_board, "task", "move", task["id"], "Review")
    assert "to Review" in moved
    assert "alembic" not in modules


def test_a_command_imports_only_its_own_module(current_board: str) -> None:
    """AC issue-14/1: `task list` does not import the server, the worker or the demo."""
    _out, modules = _modules_after("--db", current_board, "task", "list")
    assert "core.cli.commands_task" in modules
    for other in ("core.cli.commands_serve", "core.cli.commands_agents", "core.demo"):
        assert other not in modules


def test_task_list_loads_no_plugin_and_no_write_path(current_board: str) -> None:
    """AC issue-14/1: a command that only reads the board starts no plugin (no pluggy, no
    plugin package, no entry-point scan) and imports neither the arrival layer, the engine, the
    runtime nor, on SQLite, the PostgreSQL dialect."""
    out, modules = _modules_after("--db", current_board, "task", "list")
    assert "'probe'" in out
    for absent in (
        "pluggy",
        "core.plugin.loading",
        "kanban_plugin",
        "office_plugin",
        "laneway_notify",
        "core.arrival",
        "core.engine",
        "core.plugin.registry",
        "core.agents.runtime",
        "core.runs",
        "sqlalchemy.dialects.postgresql",
        "core.plugin.kinds",  # kind classes: a reader needs only features
    ):
        assert absent not in modules, absent


def test_task_move_starts_the_plugins_but_not_the_runtime(current_board: str) -> None:
    """AC issue-14/1: a write command still loads every installed plugin (their observers
    must see its events); a manual move that starts no agent does not import the agent
    runtime, nor (issue 14) the trigger engine, which its bundle builds when first asked
    for, and SQLite never imports the PostgreSQL dialect."""
    out, _modules = _modules_after("--db", current_board, "--json", "task", "list")
    (task,) = json.loads(out)
    moved, modules = _modules_after("--db", current_board, "task", "move", task["id"], "Review")
    assert "to Review" in moved
    for present in ("pluggy", "kanban_plugin", "office_plugin", "core.arrival", "core.bundle"):
        assert present in modules, present
    for absent in (
        "core.agents.runtime",
        "core.agents.protocols.exec_process",
        "sqlalchemy.dialects.postgresql",
        "core.engine",
        "core.operations",
    ):
        assert absent not in modules, absent


def test_a_manual_move_registers_the_plugins_kinds_without_their_executors(
    current_board: str,
) -> None:
    """AC issue-14/1: a write command loads every plugin and registers every kind, but a move
    that runs no Office kind does not import Office's executors, nor laneway-notify's file
    port (each is imported when its kind first runs: tests/on_enter runs them)."""
    out, _modules = _modules_after("--db", current_board, "--json", "task", "list")
    (task,) = json.loads(out)
    moved, modules = _modules_after("--db", current_board, "task", "move", task["id"], "Review")
    assert "to Review" in moved
    assert {"office_plugin", "office_plugin.kinds", "office_plugin.quorum"} <= modules
    assert "office_plugin.executors" not in modules
    if "laneway_notify" in modules:  # the example plugin, when installed
        assert "laneway_notify.kind" in modules
        assert "laneway_notify.port" not in modules


def test_a_broken_plugin_is_reported_by_a_write_command(current_board: str, tmp_path: Path) -> None:
    """A plugin that fails to load is named on stderr by a command that writes (its host
    loads the plugins); `task list`, which loads none, is not held up by it. The plugin is
    a real installed distribution (on PYTHONPATH) whose entry point names a missing module."""
    info = tmp_path / "site" / "ghost_dist-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ghost_dist\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[laneway.plugins]\nghost = no_such_module_for_laneway\n"
    )
    env = {
        **os.environ,
        "LANEWAY_PLUGINS_ALLOW": "kanban,office,ghost",
        "PYTHONPATH": str(tmp_path / "site"),
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", PROBE, "--db", current_board, *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
        )

    listed = run("--json", "task", "list")
    assert listed.returncode == 0, listed.stderr
    (task,) = json.loads(listed.stdout)
    moved = run("task", "move", task["id"], "Review")
    assert moved.returncode == 0, moved.stderr
    assert "to Review" in moved.stdout
    assert "plugin 'ghost' failed to load" in moved.stderr


# Records the cyclic collector's state while the host opens and while the command works.
COLLECTOR_PROBE = """
import atexit, gc, json, sys
import core.services.tasks as tasks
import core.store.migrate as migrate
seen = {"before_main": gc.isenabled()}
is_current = migrate.recorded_is_current
def probe_open(conn):
    seen["while_opening"] = gc.isenabled()
    return is_current(conn)
migrate.recorded_is_current = probe_open
move = tasks.TaskService.manual_move
def probe_move(self, *args, **kwargs):
    seen["while_working"] = gc.isenabled()
    seen["frozen_while_working"] = gc.get_freeze_count()
    return move(self, *args, **kwargs)
tasks.TaskService.manual_move = probe_move
def report():
    seen["at_exit"] = gc.isenabled()
    seen["frozen_at_exit"] = gc.get_freeze_count()
    print(json.dumps(seen), file=sys.stderr)
atexit.register(report)
from core.cli import main
main(sys.argv[1:])
"""


def test_a_command_starts_without_the_cyclic_collector_and_works_with_it(
    current_board: str,
) -> None:
    """Issue 14 target 1: the console script pauses Python's cyclic garbage collector while
    a command starts (imports, opening the host: nothing it allocates there is garbage) and
    freezes what it built once the host is open, so the collector never walks it; the
    command's own work (and a long-running command such as `serve` or `worker`) runs with
    the collector on. Before this, the collector took tens of milliseconds of every command."""
    out, _modules = _modules_after("--db", current_board, "--json", "task", "list")
    (task,) = json.loads(out)
    move = ["--db", current_board, "task", "move", task["id"], "Review"]
    moved, seen = _probed(COLLECTOR_PROBE, *move)
    assert "to Review" in moved
    assert seen["before_main"] is True  # importing the command line changes nothing
    assert seen["while_opening"] is False
    assert seen["while_working"] is True
    assert seen["frozen_while_working"] > 10_000  # the modules, classes and tables
    assert seen["at_exit"] is True


def test_build_cli_leaves_the_collector_alone(sqlite_url: str) -> None:
    """Issue 14 target 1: only the console script (`main`) pauses the collector; a program
    that runs the group itself (click's test runner here) keeps its own settings."""
    import gc

    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    result = CliRunner().invoke(
        build_cli(plugin_commands=False), ["--db", sqlite_url, "--json", "init"]
    )
    assert result.exit_code == 0, result.stderr
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen


# Counts the plugin loads (fresh plugin managers) and the plugins' observed events.
LOADS_PROBE = """
import atexit, json, sys
import core.plugin.loading as manager
loads = []
load_plugins = manager.load_plugins
def counted(*args, **kwargs):
    loads.append(1)
    return load_plugins(*args, **kwargs)
manager.load_plugins = counted
atexit.register(lambda: print(json.dumps(len(loads)), file=sys.stderr))
from core.cli import main
main(sys.argv[1:])
"""


def test_a_write_command_loads_its_plugins_once(current_board: str) -> None:
    """Issue 14 target 1: a write command's plugins are loaded once, by its host; the command
    line takes their commands (and their failures, to name them) from the host's load
    instead of building a plugin manager of its own first. A read command loads none."""
    out, _modules = _modules_after("--db", current_board, "--json", "task", "list")
    (task,) = json.loads(out)

    def loads(*args: str) -> tuple[str, int]:
        out, count = _probed(LOADS_PROBE, "--db", current_board, *args)
        return out, int(count)

    moved, count = loads("task", "move", task["id"], "Review")
    assert "to Review" in moved
    assert count == 1
    assert loads("task", "list")[1] == 0


def test_the_table_definitions_load_no_dialect() -> None:
    """AC issue-14/1: declaring the tables imports no database dialect (a SQLite-only keyword
    once made PostgreSQL boards import SQLite's dialect on every command)."""
    probe = (
        "import sys; import core.store.tables; "
        "print(sorted(m for m in sys.modules if m.startswith('sqlalchemy.dialects.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "[]"


def test_help_needs_no_database_code() -> None:
    """AC issue-14/1: `laneway --help` lists every command without importing SQLAlchemy or a
    command module."""
    out, modules = _modules_after("--help")
    for name in app.BUILTIN_COMMANDS:
        assert f"\n  {name} " in out
    assert "sqlalchemy" not in modules
    assert not any(m.startswith("core.cli.commands_") for m in modules)


class _Greeter:
    @hookimpl
    def laneway_cli_commands(self, group: click.Group) -> None:
        @click.command("greet")
        def greet() -> None:
            """Say hello from a plugin."""

        group.add_command(greet)


def test_help_lists_plugin_commands_beside_the_builtin_ones() -> None:
    cli = build_cli(selection=PluginSelection(extra=(("greeter", _Greeter()),), entry_points=False))
    result = CliRunner().invoke(cli, ["--help"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "greet  " in result.stdout
    assert "Say hello from a plugin." in result.stdout
    assert "task  " in result.stdout


def test_builtin_table_names_every_command_of_the_command_modules() -> None:
    declared: dict[str, click.Command] = {}
    for module_name in {module for module, _attr in app.BUILTIN_COMMANDS.values()}:
        module = importlib.import_module(f"core.cli.{module_name}")
        for command in module.COMMANDS:
            assert command.name is not None
            declared[command.name] = command
    assert set(declared) == set(app.BUILTIN_COMMANDS) == set(app.BUILTIN_HELP)
    cli = build_cli(plugin_commands=False)
    for name, command in declared.items():
        assert cli.get_command(click.Context(cli), name) is command


@pytest.mark.parametrize("limit", [20, 45, 74, 200])
def test_help_table_shortens_like_the_commands_own_help(limit: int) -> None:
    """What `laneway --help` prints for a built-in command is what its own help says."""
    cli = build_cli(plugin_commands=False)
    for name, text in app.BUILTIN_HELP.items():
        command = cli.get_command(click.Context(cli), name)
        assert command is not None
        shown = click.Command(name, help=text).get_short_help_str(limit)
        assert shown == command.get_short_help_str(limit), name


def test_session_group_keeps_its_agent_commands() -> None:
    cli = build_cli(plugin_commands=False)
    result = CliRunner().invoke(cli, ["session", "--help"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "send" in result.stdout
    assert "cancel-retry" in result.stdout


def test_the_default_database_url_is_the_hosts() -> None:
    assert app.DEFAULT_URL == host.DEFAULT_URL


def test_opening_a_current_board_checks_its_schema_in_one_statement(db_url: str) -> None:
    """Issue 14 target 1: opening a host on an initialised board reads the version table and
    nothing else to check the schema (no catalogue lookup for the table first), and on
    PostgreSQL the driver's first connection does not ask for the hstore type: each was a
    round trip of every command. A database laneway never initialised is still refused."""
    import sqlalchemy as sa
    from sqlalchemy.engine import Engine

    from core.errors import NotInitialised
    from core.host import Host

    Host.open(db_url).close()  # initialise
    statements: list[str] = []

    def record(*args: object) -> None:
        statements.append(str(args[2]))

    sa.event.listen(Engine, "before_cursor_execute", record)
    try:
        Host.open(db_url, upgrade=False, read_only=True, start_plugins=False).close()
    finally:
        sa.event.remove(Engine, "before_cursor_execute", record)
    schema = [s for s in statements if "laneway_alembic_version" in s]
    assert len(schema) == 1, schema
    assert schema[0].lstrip().upper().startswith("SELECT")
    assert not [s for s in statements if "hstore" in s or "pg_class" in s]

    engine = sa.create_engine(db_url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE laneway_alembic_version")
    engine.dispose()
    with pytest.raises(NotInitialised):
        Host.open(db_url, upgrade=False, read_only=True, start_plugins=False)


def test_service_argument_checks_read_annotations_at_first_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 14 target 1: a service's argument checks resolve a method's annotations when it
    is first called, not when the class is defined (a command calls a few of the methods of
    the services it imports); the check itself is unchanged."""
    from core.errors import LanewayError
    from core.services import base

    planned: list[str] = []
    real = base._plan

    def plan(fn: Any) -> Any:
        planned.append(fn.__name__)
        return real(fn)

    monkeypatch.setattr(base, "_plan", plan)

    class ProbeService(base.Service):
        def greet(self, name: str) -> str:
            return name

        def count(self, n: int) -> int:
            return n

    assert planned == []
    service = ProbeService(None)  # type: ignore[arg-type]
    assert service.greet("ada") == "ada"
    with pytest.raises(LanewayError, match=r"probes\.greet: argument 'name' must be str, got int"):
        service.greet(1)  # type: ignore[arg-type]
    assert planned == ["greet"]


# Runs the installed console script's own entry (`core.console.main`, what `laneway` runs) and
# records, for every collection the cyclic collector makes, whether the command line had been
# imported and dispatched yet; at exit, the collections, the environment and the modules.
ENTRY_PROBE = """
import atexit, gc, json, os, sys
collections = []
started = []
def seen(phase, info):
    if phase == "start" and started:
        collections.append("core.cli.commands_task" in sys.modules)
gc.callbacks.append(seen)
def report():
    print(json.dumps({
        "before_dispatch": collections.count(False),
        "modules": sorted(sys.modules),
    }), file=sys.stderr)
atexit.register(report)
import core.console  # imports no command line (compiled from source under some setups)
gc.collect()  # what the probe itself allocated is not the command's
started.append(True)
core.console.main(sys.argv[1:])
"""


def _entry(*args: str) -> tuple[str, dict[str, Any]]:
    out, seen = _probed(ENTRY_PROBE, *args)
    return out, dict(seen)


def test_the_console_script_enters_before_the_command_line_is_imported() -> None:
    """Issue 14 target 1: the installed `laneway` script runs `core.console:main`, which imports
    no command line (nor click, nor SQLAlchemy): it pauses the collector before those load."""
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "laneway"]
    assert script.value == "core.console:main"
    done = subprocess.run(
        [sys.executable, "-c", "import sys, core.console; print(sorted(sys.modules))"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    for heavy in ("'core.cli'", "'click'", "'sqlalchemy'"):
        assert heavy not in done.stdout, heavy


def test_issue_14_the_collector_never_runs_while_the_command_line_is_imported(
    current_board: str,
) -> None:
    """Issue 14 target 1: the console script's entry pauses the cyclic collector before it
    imports the command line (`core.cli.main` alone could only pause it after its own import,
    and the collector ran ~40 times while `core.cli` was imported); the command still works and
    leaves the collector on for its own work (`test_a_command_starts_without_the_cyclic_...`
    covers `main`'s part)."""
    out, seen = _entry("--db", current_board, "--json", "task", "list")
    (task,) = json.loads(out)
    assert seen["before_dispatch"] == 0
    moved, seen = _entry("--db", current_board, "task", "move", task["id"], "Review")
    assert "to Review" in moved
    assert seen["before_dispatch"] == 0


def test_issue_14_the_console_script_logs_as_asked_and_a_library_keeps_its_handler(
    current_board: str,
) -> None:
    """Issue 14 target 1: entering through `core.console` changes nothing of logging: the
    console script logs what `--log-json` asks for, and a program that imports `core` itself
    keeps loguru's default handler (a library user's records still print)."""
    done = subprocess.run(
        [str(LANEWAY), "--db", current_board, "--log-json", "task", "list"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line)["record"] for line in done.stderr.splitlines()]
    assert [r for r in records if {"command", "database", "recovery"} <= set(r["extra"])]
    library = subprocess.run(
        [sys.executable, "-c", "import core.cli; from loguru import logger; logger.error('mine')"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "mine" in library.stderr


def test_issue_14_a_write_command_imports_no_recovery_code_when_nothing_is_pending(
    current_board: str,
) -> None:
    """Issue 14 target 1: a writer's recovery scan probes the pending index; when nothing is
    pending, its modules (`core.recovery`, `core.recovery_close`) are not imported, and the
    report (`Host.recovery_report`, `laneway recover`, the `host opened` record) is the empty
    scan's, as before."""
    from core.recovery import RecoveryReport

    out, _seen = _entry("--db", current_board, "--json", "task", "list")
    (task,) = json.loads(out)
    moved, seen = _entry("--db", current_board, "task", "move", task["id"], "Review")
    assert "to Review" in moved
    assert "core.recovery" not in seen["modules"]
    assert "core.recovery_close" not in seen["modules"]
    out, seen = _entry("--db", current_board, "--json", "recover")
    assert json.loads(out)["scanned"] == 0
    with host.Host.open(current_board) as opened:
        assert opened.recovery_summary() == RecoveryReport().as_dict()
        assert opened.recovery_report == RecoveryReport()
        assert opened.recovery_summary() == RecoveryReport().as_dict()


# Counts the connections a command opens and the statements it sends, per connection.
ROUND_TRIPS_PROBE = """
import atexit, json, sys
import sqlalchemy as sa
from sqlalchemy.pool import Pool
connections = []
statements = []
sa.event.listen(Pool, "connect", lambda dbapi, record: connections.append(id(dbapi)))
def sent(conn, cursor, statement, *args):
    statements.append(statement.split()[0].upper())
sa.event.listen(sa.engine.Engine, "before_cursor_execute", sent)
atexit.register(lambda: print(json.dumps([len(connections), statements]), file=sys.stderr))
from core.console import main
main(sys.argv[1:])
"""


def test_issue_14_a_task_list_on_postgresql_opens_one_connection(
    pg_database: str | None,
) -> None:
    """Issue 14 target 1: each PostgreSQL connection is a server process started for it, so a
    read command opens one, and a write command at most three (its reads, its writer, its
    epoch's liveness lock, which is the host's liveness and is not shared). A manual move
    (issue 14) opens two: the host's opening reads what it needs before it takes its writer,
    and the move reads the task in its own transaction, so no read needs a connection of
    its own."""
    if pg_database is None:
        pytest.skip("no PostgreSQL server: set LANEWAY_TEST_PG_URL (.ci/run does)")
    from tests.conftest import _reset_postgres

    _reset_postgres(pg_database)
    url = pg_database
    for args in (["init"], ["workflow", "create", "--template", "simple"]):
        subprocess.run([str(LANEWAY), "--db", url, *args], check=True, capture_output=True)

    def run(*args: str) -> tuple[str, int, list[str]]:
        out, (connections, statements) = _probed(ROUND_TRIPS_PROBE, "--db", url, *args)
        return out, connections, statements

    made, connections, _ = run("--json", "task", "create", "--workflow", "Kanban", "--title", "p")
    assert connections == 3
    out, connections, statements = run("--json", "task", "list")
    assert [t["title"] for t in json.loads(out)] == ["p"]
    assert connections == 1
    assert statements.count("SELECT") == len(statements)  # reads only, not even a BEGIN
    moved, connections, _ = run("task", "move", json.loads(made)["id"], "Review")
    assert "to Review" in moved
    assert connections == 2


def test_issue_14_a_manual_move_on_sqlite_uses_one_connection(current_board: str) -> None:
    """Issue 14 target 1: opening a writer reads the schema's revision, the board, the default
    workspace and the recovery probe in one read, before the writer takes that connection;
    the move reads the task in its own transaction: one SQLite connection in all, four
    transactions (that read, the epoch's row, the move, the epoch's close)."""
    out, _modules = _modules_after("--db", current_board, "--json", "task", "list")
    (task,) = json.loads(out)
    for step, line in (("Review", "to Review"), ("Review", "already at Review")):
        moved, (connections, statements) = _probed(
            ROUND_TRIPS_PROBE, "--db", current_board, "task", "move", task["id"], step
        )
        assert line in moved
        assert connections == 1
        assert statements.count("SELECT") >= 4  # the first read: version, board, workspace, probe


def test_issue_14_a_move_prints_the_step_its_own_read_found(current_board: str) -> None:
    """Issue 14 target 1: `task move` names the step the task left from the move's own read
    (no read before it): the line and the JSON are the move's, as CLI.md gives them, and a
    task that does not exist is refused as before."""
    runner = CliRunner()
    cli = build_cli(plugin_commands=False)
    listed = runner.invoke(cli, ["--db", current_board, "--json", "task", "list"])
    (task,) = json.loads(listed.output)
    done = runner.invoke(cli, ["--db", current_board, "task", "move", task["id"], "Review"])
    assert done.exit_code == 0, done.output
    assert done.output == f"task {task['id']}: moved from In Progress to Review\n"
    again = runner.invoke(
        build_cli(plugin_commands=False),
        ["--db", current_board, "--json", "task", "move", task["id"], "Review"],
    )
    assert again.exit_code == 0, again.output
    shown = runner.invoke(
        build_cli(plugin_commands=False),
        ["--db", current_board, "--json", "task", "show", task["id"]],
    )
    assert json.loads(again.output) == json.loads(shown.output)
    missing = runner.invoke(
        build_cli(plugin_commands=False), ["--db", current_board, "task", "move", "nope", "Review"]
    )
    assert missing.exit_code == 1
    assert "no task 'nope'" in missing.output


# Imports `core` and reports what it left of loguru to whoever imports it next.
LIBRARY_LOGURU_PROBE = """
import json, sys
import core
report = {"imported_by_core": "loguru" in sys.modules}
from loguru import logger
seen = []
logger.add(lambda message: seen.append(message.record["message"]), level="DEBUG")
import core.logs  # what every laneway module that logs imports first
exec("from core.logs import logger; logger.error('laneway')", {"__name__": "core.probe"})
logger.error("mine")
report.update(default_handler=0 in logger._core.handlers, seen=seen)
print(json.dumps(report), file=sys.stderr)
"""


def test_issue_14_import_core_leaves_loguru_and_its_default_handler_to_the_host() -> None:
    """Issue 14 target 1: `import core` no longer imports loguru; whoever imports it first
    gets loguru's default handler as loguru builds it, and laneway's packages are silenced by
    `core.logs`, which every laneway module that logs imports first (a library's records stay
    off until `logs.enable`)."""
    _out, report = _probed(LIBRARY_LOGURU_PROBE)
    assert report == {"imported_by_core": False, "default_handler": True, "seen": ["mine"]}


def test_issue_14_the_console_script_builds_no_default_loguru_handler() -> None:
    """Issue 14 target 1: the console script, whose logging is the command line's, imports
    loguru as `LOGURU_AUTOINIT=0` would (no default handler to build and then remove), and
    leaves the environment as it found it; laneway's packages are still silenced."""
    probe = (
        "import json, os, sys\n"
        "import core.console\n"
        "before = 'loguru' in sys.modules\n"
        "core.console.import_loguru_without_default_handler()\n"
        "from core.logs import logger\n"
        "print(json.dumps([before, len(logger._core.handlers), os.environ.get('LOGURU_AUTOINIT'),"
        " [n for n, on in logger._core.activation_list if not on]]), file=sys.stderr)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "LOGURU_AUTOINIT"}
    _out, report = _probed(probe, env=env)
    assert report == [False, 0, None, ["core.", "plugins.", "kanban_plugin.", "office_plugin."]]
    _out, report = _probed(probe, env={**env, "LOGURU_AUTOINIT": "1"})
    assert report[1:3] == [0, "1"]
