"""Shared fixtures. Store-facing tests run on a real SQLite file and, when a server is
reachable (LANEWAY_TEST_PG_URL, set by .ci/run), on PostgreSQL too."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa

from core import Host
from core.model import Workflow
from core.plugin.selection import PluginSelection
from core.store import dialect
from core.store.database import Store
from tests import zygote

T = TypeVar("T")

PG_URL = os.environ.get("LANEWAY_TEST_PG_URL")
REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def _pg_engine(url: str) -> sa.Engine:
    return sa.create_engine(
        url.replace("postgresql://", "postgresql+psycopg://", 1), isolation_level="AUTOCOMMIT"
    )


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str | None]:
    """A database of this test process's own on the server, so parallel runs never collide."""
    if not PG_URL:
        yield None
        return
    admin = _pg_engine(PG_URL)
    name = f"laneway_t{os.getpid()}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    yield PG_URL.rsplit("/", 1)[0] + f"/{name}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    admin.dispose()


IDLE_SESSION_TIMEOUT = "400ms"
"""Shorter than the second between a worker's scheduler passes, which would otherwise keep its
writer from ever sitting idle that long, and than the half second between an idle worker's looks
at the queue: a writer the server ends in the very moment it is used again is a connection lost
(waited out, with a WARNING); one it ended a while before is replaced unseen.

Longer than `core.store.dialect.PING_AFTER_S` (a connection used that recently goes out
unpinged) by more than a loaded machine's pause between a checkout and its first statement:
the test's own process pings after `IDLE_PING_AFTER_S` instead of 0.25 s. With the product's
quarter second the margin was 150 ms (50 ms at a 300 ms timeout), and under CI's load the
server twice ended a connection just handed out (test_idle_timeout's own read of the board,
then test_idle_session's opening of its host). A real server's timeout is minutes, the
quarter second nothing beside it; the processes a test starts keep the product's."""
IDLE_PING_AFTER_S = 0.05


@pytest.fixture
def idle_timeout_db(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A database of this test's own whose sessions end after `IDLE_SESSION_TIMEOUT` idle."""
    if not PG_URL:
        pytest.skip("no PostgreSQL server: set LANEWAY_TEST_PG_URL (.ci/run does)")
    monkeypatch.setattr(dialect, "PING_AFTER_S", IDLE_PING_AFTER_S)
    name = f"laneway_idle{os.getpid()}"
    admin = _pg_engine(PG_URL)
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
        conn.exec_driver_sql(
            f"ALTER DATABASE {name} SET idle_session_timeout = '{IDLE_SESSION_TIMEOUT}'"
        )
    try:
        yield PG_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.dispose()


_reset_engines: dict[str, sa.Engine] = {}


def _reset_postgres(url: str) -> None:
    # one engine (and pooled connection) a database for the whole run: a server process
    # started per reset was a few ms of the server's CPU for each of ~1,500 tests
    engine = _reset_engines.get(url)
    if engine is None:
        engine = _reset_engines[url] = _pg_engine(url)
    try:
        _drop_and_create_schema(engine)
    except sa.exc.OperationalError:  # a test ended the server's sessions, this one's too
        engine.dispose()
        _drop_and_create_schema(engine)


def _drop_and_create_schema(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        conn.exec_driver_sql("DROP SCHEMA public CASCADE")
        conn.exec_driver_sql("CREATE SCHEMA public")


_MIGRATION_MODULES = frozenset(
    {"test_store_migrations.py", "test_store_revision_check.py", "test_store_arrival_pages.py"}
)
_sqlite_template: list[Path] = []
_pg_script: list[tuple[str, Any, bool]] = []
"""The statements the migrations ran on the first fresh PostgreSQL board of this process."""


@pytest.fixture(autouse=True)
def _fresh_boards_from_a_template(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A fresh board in this process gets the schema the migrations built on the first fresh
    board of the same process, instead of running every migration through alembic again: on
    SQLite its pages are copied (sqlite3's backup API: AUTOINCREMENT and all), on PostgreSQL
    the statements the migrations sent are sent again, in one transaction. Only
    `migrate.upgrade` to head on a database with no tables at all takes the copy; the
    migration tests themselves, every other shape (an older revision, a non-empty database)
    and every process a test starts (`laneway ...`) run alembic for real.
    LANEWAY_TEST_NO_TEMPLATE=1 turns the copy off."""
    if request.node.path.name in _MIGRATION_MODULES or os.environ.get("LANEWAY_TEST_NO_TEMPLATE"):
        return
    from core.store import migrate

    real = migrate.upgrade

    def upgrade(store: Any, revision: str = "head") -> str:
        if revision != "head" or not _empty(store):
            return real(store, revision)
        if store.is_sqlite:
            path = dialect.sqlite_path(store.url)
            if path is None:
                return real(store, revision)
            _copy_sqlite_template(real, Path(path), tmp_path_factory)
        elif _pg_script:
            with store.transaction() as uow:
                # the statements without parameters (all but 4 of ~150) in a few strings, one
                # round trip each (psycopg sends a query without parameters as a simple query,
                # which may hold several): a third of a fresh PostgreSQL board's wall time
                raw = uow.conn.connection.driver_connection
                for statement, parameters in _pg_batches():
                    if parameters:
                        uow.conn.exec_driver_sql(statement, parameters)
                    else:
                        raw.execute(statement)
        else:
            return _record_pg_migration(real, store)
        return migrate.HEAD_REVISION

    monkeypatch.setattr(migrate, "upgrade", upgrade)


def _copy_sqlite_template(real: Any, path: Path, factory: pytest.TempPathFactory) -> None:
    if not _sqlite_template:
        template = factory.mktemp("template") / "board.db"
        built = Store(f"sqlite:///{template}")
        try:
            real(built)
        finally:
            built.close()
        _sqlite_template.append(template)
    source = sqlite3.connect(_sqlite_template[0])
    target = sqlite3.connect(path)
    try:
        source.backup(target)
    finally:
        target.close()
        source.close()


def _pg_batches() -> list[tuple[str, Any]]:
    """`_pg_script` with each run of statements that take no parameters joined into one."""
    batches: list[tuple[str, Any]] = []
    plain: list[str] = []
    for statement, parameters, _many in _pg_script:
        if parameters:
            if plain:
                batches.append((";\n".join(plain), None))
                plain = []
            batches.append((statement, parameters))
        else:
            plain.append(statement)
    if plain:
        batches.append((";\n".join(plain), None))
    return batches


def _record_pg_migration(real: Any, store: Any) -> str:
    seen: list[tuple[str, Any, bool]] = []

    def keep(
        _conn: Any, _cursor: Any, statement: str, parameters: Any, _ctx: Any, many: bool
    ) -> None:
        seen.append((statement, parameters, many))

    sa.event.listen(store.engine, "before_cursor_execute", keep)
    try:
        revision: str = real(store)
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", keep)
    _pg_script.extend(seen)
    return revision


def _empty(store: Any) -> bool:
    with store.read() as conn:
        return not sa.inspect(conn).get_table_names()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path, pg_database: str | None) -> str:
    """A fresh, empty database URL: a SQLite file, or a reset PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'board.db'}"
    if pg_database is None:
        pytest.skip("no PostgreSQL server: set LANEWAY_TEST_PG_URL (.ci/run does)")
    _reset_postgres(pg_database)
    return pg_database


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'board.db'}"


def one_step_workflow(host: Host, tmp_path: Path, *, prompt: str | None = None) -> Workflow:
    """A workflow of one start step, `todo` (with `prompt` when given), imported to `host`."""
    path = tmp_path / "plain.yml"
    path.write_text(
        "id: plain\nname: Plain\nsteps:\n  - id: todo\n    name: Todo\n    position: 0\n"
        "    is_start_step: true\n" + (f"    prompt: {prompt}\n" if prompt else "")
    )
    (workflow,) = host.workflows.import_file(path)
    return workflow


def board_office(host: Host, office: bool) -> Host:
    """Make the board's Office switch `office` (a test's board is the test's own); the host
    follows the board, as every process without a per-process override does."""
    if host.features.office != office:
        host.set_features(office=office)
    return host


def open_host(url: str, *, office: bool = True, **kwargs: object) -> Host:
    """A host with exactly the built-in plugins (nothing installed elsewhere leaks in),
    following the board's features, with the board's Office switch set to `office`."""
    selection = PluginSelection(allow=frozenset({"kanban", "office"}))
    return board_office(Host.open(url, plugins=selection, **kwargs), office)  # type: ignore[arg-type]


@pytest.fixture
def host(db_url: str) -> Iterator[Host]:
    with open_host(db_url) as h:
        yield h


@pytest.fixture
def sqlite_host(sqlite_url: str) -> Iterator[Host]:
    with open_host(sqlite_url) as h:
        yield h


@pytest.fixture
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"reference material not present at {SHARED}")
    return SHARED


def wait_for_dead_processes(url: str, timeout: float = 15.0) -> None:
    """After killing a laneway child on PostgreSQL, wait until the server has noticed: its
    backend (and so its epoch's advisory lock) goes when the server reads the dropped socket,
    which can lag the child's exit a little. Hosts of this test process are left alone."""
    if not url.startswith("postgresql"):
        return
    import time

    engine = _pg_engine(url)
    mine = f"laneway pid {os.getpid()}"
    deadline = time.monotonic() + timeout
    try:
        while True:
            with engine.connect() as conn:
                others = conn.exec_driver_sql(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND application_name LIKE 'laneway pid %%' AND application_name <> %s",
                    (mine,),
                ).scalar_one()
            if others == 0 or time.monotonic() > deadline:
                return
            time.sleep(0.05)
    finally:
        engine.dispose()


# -- test tiers ---------------------------------------------------------------------------------
# Every test gets exactly one tier marker, so the suite can be run (and timed) a tier at a time
# and each tier with the parallelism it allows (.ci/test). A test's tier follows from what it
# uses, not from a list kept by hand:
#   browser     - drives Debian's chromium (a `browser` fixture)
#   subprocess  - starts a process of any kind: a `laneway` command, a worker, an agent (exec or
#                 ACP), `lint-imports`, git, a crash (`slow` or `subprocess` on the test, its
#                 class or module; tests/multiprocess; a fixture in `PROCESS_FIXTURES`),
#                 whatever other fixtures it uses (issue 37 item 6)
#   store       - runs on a real database, both SQLite and PostgreSQL (`db_url` and the like)
#   unit        - everything else: in-process, no database file of its own
# What a test really starts is watched while it runs (`_ProcessWatch`): a unit or store test
# that starts a process is named at the end of the run, and fails with
# LANEWAY_TIER_STRICT=1, so a misfiled test cannot hide in a tier that says it starts nothing.
TIERS = ("unit", "store", "subprocess", "browser")
_STORE_FIXTURES = frozenset(
    {"db_url", "sqlite_url", "pg_database", "host", "sqlite_host", "idle_timeout_db"}
)
PROCESS_FIXTURES = frozenset(
    {"start", "started", "sleepers", "current_board", "holder", "pytester", "laneway_fault"}
)
"""Fixtures that start a process, or hand the test what it starts them with: an ACP agent
(tests/acp), the agents a test starts (tests/agents), the `laneway` commands that make a board
(tests/cli/test_cli_startup.py), a liveness holder (tests/store/test_liveness.py), a pytest
run of its own (`pytester`: the contract kit's own tests), the kit's fault child."""
KIT_CHILD_TESTS = frozenset({"test_crash_after_effect_reruns_at_most_once_more"})
"""The contract kit's checks that start a child process (plugins/testing/contract.py): the kit
is what plugin authors run, so it cannot carry this suite's tier marks; they are named here."""


def tier_of(item: pytest.Item) -> str:
    fixtures = frozenset(getattr(item, "fixturenames", ()))
    if "browser" in fixtures:
        return "browser"
    if (
        item.get_closest_marker("slow") is not None
        or item.get_closest_marker("subprocess") is not None
        or "multiprocess" in item.path.parts
        or fixtures & PROCESS_FIXTURES
        or getattr(item, "originalname", item.name) in KIT_CHILD_TESTS
    ):
        return "subprocess"
    if fixtures & _STORE_FIXTURES:
        return "store"
    return "unit"


class _ProcessWatch:
    """Counts the processes this test process starts (every `subprocess` start, asyncio's
    included, goes through `Popen._execute_child`; `multiprocessing` forks)."""

    def __init__(self) -> None:
        self.started: list[str] = []
        real_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]
        real_fork = os.fork
        watch = self

        def execute_child(popen: Any, args: Any, *rest: Any, **named: Any) -> Any:
            first = args if isinstance(args, str | bytes) else next(iter(args), "")
            watch.started.append(os.path.basename(os.fsdecode(first)).split()[0])
            return real_child(popen, args, *rest, **named)

        def fork() -> int:
            watch.started.append("fork")
            return real_fork()

        subprocess.Popen._execute_child = execute_child  # type: ignore[attr-defined]
        os.fork = fork


_WATCH = _ProcessWatch()
# a command forked from the warm `laneway` (tests/zygote.py) is a process this test started too
zygote.on_start.append(_WATCH.started.append)
_MISFILED: list[str] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    _WATCH.started.clear()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    result = yield
    started = sorted(set(_WATCH.started))
    if started and tier_of(item) in ("unit", "store"):
        line = f"{item.nodeid} started {', '.join(started)}"
        item.user_properties.append(("started_processes", line))
        audit = os.environ.get("LANEWAY_TIER_AUDIT")
        if audit:
            with open(audit, "a") as out:
                out.write(line + "\n")
        if os.environ.get("LANEWAY_TIER_STRICT") == "1":
            pytest.fail(
                f"this {tier_of(item)}-tier test started a process ({', '.join(started)}): "
                "mark it `slow` (the subprocess tier; tests/conftest.py)"
            )
    return result


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        _MISFILED.extend(v for k, v in report.user_properties if k == "started_processes")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _MISFILED:
        terminalreporter.section("tests outside the subprocess tier that started a process")
        for line in sorted(set(_MISFILED)):
            terminalreporter.line(line)


@pytest.hookimpl(tryfirst=True)  # before the fixture's own params are applied
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # `one_database`: what the test proves is the agent's protocol, a file's shape, a prompt's
    # text - the same whichever database keeps the board - so it runs on SQLite alone. What two
    # processes, a crash or a notification across processes decide stays on both.
    if "db_url" in metafunc.fixturenames and metafunc.definition.get_closest_marker("one_database"):
        metafunc.definition.add_marker(pytest.mark.parametrize("db_url", ["sqlite"], indirect=True))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(getattr(pytest.mark, tier_of(item)))


def eventually(
    probe: Callable[[], T | None], *, timeout: float = 60.0, what: str = "", every: float = 0.1
) -> T:
    """Poll `probe` every `every` seconds until it returns something truthy; fail after
    `timeout` seconds (a wait on a condition, never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what or probe}")
        time.sleep(every)
