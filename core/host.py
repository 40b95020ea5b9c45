"""The host: the one object an embedding application holds.

Opening a host, in order: open the store, bring or check the schema (under a short schema lock),
mint a fresh epoch and take its liveness lock, read the board's features, ensure the default
workspace, load plugins and publish the first bundle, run the recovery scan, then tell plugins
the host started (a read-only host opened with `start_plugins=False` loads its plugins when
first asked for its bundle, and tells them nothing). Any number of hosts, in this process or
others, may work one database at once; each is alive exactly while it holds its epoch's lock
(`core.store.liveness`). Nothing is global.

The services, the arrival layer and the agent runtime are built when first used (`_Built`), so
a command imports only what it runs. Each is built by its own function below, which hands a
service the services it names in its constructor (each built when that service first calls it).

The board's features (`board_settings`) are every process's, unless a process was opened with
a per-process override (`features=...`, the command line's `--no-office`): such a process acts
with its override for its own work and does not run the recovery scan, so that a feature it
turned off for itself never closes another's entries as `skipped(no_executor)`. At the start
of every transaction and read the host compares the board's catalogue version with the one it
last saw; when it moved it forgets its cached workflows and follows the board's features, and
once that transaction or read has closed it publishes a new bundle (never inside it).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import sqlalchemy as sa

from core import board
from core.errors import DatabaseUnusable, LanewayError, NotInitialised
from core.logs import logger
from core.plugin.features import Features
from core.plugin.selection import KEEP, Keep, PluginSelection
from core.store import dialect
from core.store.database import Store

if TYPE_CHECKING:
    from pathlib import Path

    from sqlalchemy.engine import Connection

    from core.agents.runtime import AgentRuntime
    from core.arrival import Arrivals
    from core.bundle import Bundle, BundleHolder
    from core.engine import Engine
    from core.kernel import Kernel
    from core.model import Task
    from core.operations import Operations
    from core.plugin.loaded import LoadedPlugins
    from core.plugin.registry import Registry
    from core.services import (
        BlockerService,
        BudgetService,
        ChangeService,
        CommentService,
        DecisionService,
        EntryService,
        ParticipantService,
        PermissionService,
        PluginService,
        ProfileService,
        QuestionService,
        RunService,
        ScheduleService,
        SessionService,
        TaskService,
        TriggerService,
        TurnService,
        WorkflowService,
        WorkspaceService,
    )
    from core.store.events import Event
    from core.store.liveness import EpochKeeper
    from core.store.repository import Repository

T = TypeVar("T")


class _Built(Generic[T]):
    """A part of the host built the first time it is used, once (under the host's lock), then
    held as a plain attribute. A command uses a few of the host's parts: building (and
    importing) every service, the runtime and the arrival layer up front cost each command
    tens of milliseconds for parts it never touched."""

    def __init__(self, build: Callable[[Host], T]) -> None:
        self._build = build
        self._name = build.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, host: None, owner: type) -> _Built[T]: ...

    @overload
    def __get__(self, host: Host, owner: type) -> T: ...

    def __get__(self, host: Host | None, owner: type) -> T | _Built[T]:
        if host is None:
            return self
        with host._parts_lock:
            found: T | None = host.__dict__.get(self._name)
            if found is None:
                found = host.__dict__[self._name] = self._build(host)
        return found


DEFAULT_URL = "sqlite:///laneway.db"

_NOTHING_PENDING = object()
"""The recovery scan found nothing pending (its report, empty, is made when asked for)."""


class Host:
    """A laneway instance on one database. Use `Host.open(...)`, ideally as a context manager."""

    def __init__(
        self,
        store: Store,
        *,
        features: Features,
        selection: PluginSelection | None,
        keeper: EpochKeeper | None,
        features_override: Features | None = None,
        board_version: int | None = None,
    ) -> None:
        self.store = store
        self.features = features
        """The features this host acts with: the board's, or its per-process override."""
        self.features_override = features_override
        self._selection = selection
        self._keeper = keeper
        self._closed_epoch: str | None = None
        self._holder: BundleHolder | None = None
        self._board_version = board_version
        self._follow_lock = threading.Lock()
        self._republish_due = False
        """The board's features moved at some BEGIN: a new bundle is published once that
        transaction or read has closed (`_publish_due`), never inside it."""
        self._parts_lock = threading.RLock()
        self._recovery_report: Any = None
        self.loaded_plugins: LoadedPlugins | None = None
        """The plugins of the newest bundle as loaded (before their kinds registered), for
        the command line to take their commands from; None until a bundle is built."""

    # Each part is built on first use (`_Built`); what they are is unchanged.

    @_Built
    def operations(self) -> Operations:
        """Durable on_agent_error operation ids; `operations.retention_s` is the window."""
        from core.operations import Operations

        return Operations(self.store, lambda: self.epoch, self.epoch_is_dead)

    @_Built
    def repository(self) -> Repository:
        from core.store.repository import Repository

        return Repository(self.store)

    @_Built
    def kernel(self) -> Kernel:
        """What the layers below the services get: the host's parts they call, and the host
        only as what a plugin's context reaches (`Kernel.services`, typed `PluginServices`)."""
        from core.kernel import Kernel

        return Kernel(
            store=self.store,
            epoch=lambda: self.epoch,
            live_epoch=self.live_epoch,
            bundle=lambda: self.bundle,
            read=self.repository,
            services=self,
        )

    @_Built
    def arrivals(self) -> Arrivals:
        """The arrival layer, with the runtime's preparation of an arrival's session."""
        from core.agents.session import prepare_session
        from core.arrival import Arrivals

        return Arrivals(self.kernel, lambda arrival: prepare_session(self, arrival))

    @_Built
    def runtime(self) -> AgentRuntime:
        from core.agents.runtime import AgentRuntime

        return AgentRuntime(self)

    @_Built
    def workspace(self) -> WorkspaceService:
        from core.services.workspace import WorkspaceService

        return WorkspaceService(self)

    @_Built
    def profiles(self) -> ProfileService:
        from core.services.profiles import ProfileService

        return ProfileService(self, workspace=lambda: self.workspace)

    @_Built
    def workflows(self) -> WorkflowService:
        from core.services.workflows import WorkflowService

        return WorkflowService(self, profiles=lambda: self.profiles)

    @_Built
    def tasks(self) -> TaskService:
        from core.services.tasks import TaskService

        return TaskService(
            self,
            blockers=lambda: self.blockers,
            runs=lambda: self.runs,
            sessions=lambda: self.sessions,
            triggers=lambda: self.triggers,
            workflows=lambda: self.workflows,
            workspace=lambda: self.workspace,
        )

    @_Built
    def participants(self) -> ParticipantService:
        from core.services.participants import ParticipantService

        return ParticipantService(
            self,
            profiles=lambda: self.profiles,
            tasks=lambda: self.tasks,
            workflows=lambda: self.workflows,
        )

    @_Built
    def decisions(self) -> DecisionService:
        from core.services.decisions import DecisionService

        return DecisionService(
            self,
            participants=lambda: self.participants,
            tasks=lambda: self.tasks,
            workflows=lambda: self.workflows,
        )

    @_Built
    def sessions(self) -> SessionService:
        from core.services.sessions import SessionService

        return SessionService(self, profiles=lambda: self.profiles)

    @_Built
    def turns(self) -> TurnService:
        from core.services.turns import TurnService

        return TurnService(
            self,
            sessions=lambda: self.sessions,
            tasks=lambda: self.tasks,
            triggers=lambda: self.triggers,
        )

    @_Built
    def runs(self) -> RunService:
        from core.services.runs import RunService

        return RunService(
            self,
            blockers=lambda: self.blockers,
            profiles=lambda: self.profiles,
            workflows=lambda: self.workflows,
        )

    @_Built
    def entries(self) -> EntryService:
        from core.services.entries import EntryService

        return EntryService(self, tasks=lambda: self.tasks)

    @_Built
    def plugins(self) -> PluginService:
        from core.services.plugins import PluginService

        return PluginService(self)

    @_Built
    def comments(self) -> CommentService:
        from core.services.comments import CommentService

        return CommentService(
            self,
            sessions=lambda: self.sessions,
            tasks=lambda: self.tasks,
            triggers=lambda: self.triggers,
        )

    @_Built
    def changes(self) -> ChangeService:
        from core.services.changes import ChangeService

        return ChangeService(
            self,
            comments=lambda: self.comments,
            tasks=lambda: self.tasks,
            workflows=lambda: self.workflows,
        )

    @_Built
    def permissions(self) -> PermissionService:
        from core.services.permissions import PermissionService

        return PermissionService(self, tasks=lambda: self.tasks)

    @_Built
    def questions(self) -> QuestionService:
        from core.services.questions import QuestionService

        return QuestionService(self, tasks=lambda: self.tasks)

    @_Built
    def blockers(self) -> BlockerService:
        from core.services.blockers import BlockerService

        return BlockerService(self)

    @_Built
    def budgets(self) -> BudgetService:
        from core.services.budgets import BudgetService

        return BudgetService(
            self,
            profiles=lambda: self.profiles,
            tasks=lambda: self.tasks,
            workspace=lambda: self.workspace,
        )

    @_Built
    def triggers(self) -> TriggerService:
        from core.services.triggers import TriggerService

        return TriggerService(self, sessions=lambda: self.sessions)

    @_Built
    def schedules(self) -> ScheduleService:
        from core.services.schedules import ScheduleService

        return ScheduleService(self, workflows=lambda: self.workflows)

    @property
    def selection(self) -> PluginSelection:
        """Which plugins this host loads (given at open, or read from the environment)."""
        if self._selection is None:
            self._selection = PluginSelection.from_env()
        return self._selection

    @selection.setter
    def selection(self, value: PluginSelection) -> None:
        self._selection = value

    # -- opening and closing -------------------------------------------------------------

    @classmethod
    def open(
        cls,
        url: str = DEFAULT_URL,
        *,
        features: Features | None = None,
        plugins: PluginSelection | None = None,
        upgrade: bool = True,
        read_only: bool = False,
        recover: bool = True,
        start_plugins: bool = True,
    ) -> Host:
        """Open a host on `url`.

        :param features: a per-process override of the board's features. None (the
            default) follows the board's (`board_settings`, `laneway features`); given, this
            host acts with it for its own work, ignores the board's, and does not run the
            recovery scan.
        :param upgrade: create or upgrade the schema; when False a database that is not at
            the current revision is refused with `NotInitialised`.
        :param read_only: mint no epoch and take no lock (inspection only; writes refused).
        :param recover: run the recovery scan before returning (writers following the
            board's features only).
        :param start_plugins: False, for a read-only host only: load no plugin now and call
            no `laneway_host_started`; the bundle (plugins, registry, engine) is built the
            first time something asks for it. For a program that reads the board's data and
            uses no plugin (the command line's read commands). A writer always starts its
            plugins: their observers must see every event it causes.
        """
        if not start_plugins and not read_only:
            raise LanewayError("start_plugins=False is for a read-only host")
        from core import observe
        from core.store import migrate

        missing = _missing_sqlite_file(url)
        if missing is not None and (read_only or not upgrade):
            # Refuse before connecting: connecting would leave an empty file behind.
            raise NotInitialised(f"database {missing} does not exist; run `laneway init`")
        _check_sqlite_file(url, writing=not read_only)
        store = Store(url, read_only=read_only)
        keeper: EpochKeeper | None = None
        try:
            upgrading = upgrade and not read_only
            if upgrading:
                from core.store.liveness import schema_lock

                with schema_lock(store.url, store.engine):
                    migrate.upgrade(store)
            scanning = recover and not read_only and features is None
            state, default_workspace, pending = _first_read(
                store, check_schema=not upgrading, writer=not read_only, probe=scanning
            )
            if not read_only:
                from core.store.liveness import EpochKeeper

                # the epoch's own rows are not the board's: its writes (the mint, a re-mint,
                # the close) do not read the board's version first
                keeper = EpochKeeper(
                    store.url,
                    store.engine,
                    functools.partial(store.write_connection, follow_board=False),
                )
                store.liveness.follow(lambda: keeper.epoch if keeper is not None else None)
            host = cls(
                store,
                features=features if features is not None else state.features,
                selection=plugins,
                keeper=keeper,
                features_override=features,
                board_version=state.version,
            )
            store.on_begin = host._follow_board
            store.on_version = host._follow_version
            store.after_end = host._publish_due
            if not default_workspace:
                host.workspace.ensure_default()
            if start_plugins:
                host._first_bundle()
            store.observer = observe.Dispatch(host.current_bundle)
            if recover and not read_only:
                if features is None:
                    # Nearly always nothing is pending (the first read probed): then the scan's
                    # modules (core.recovery, core.recovery_close) are not imported until the
                    # report is asked for.
                    host._recovery_report = host.entries.recover() if pending else _NOTHING_PENDING
                else:
                    logger.bind(epoch=host.epoch, features=features.as_dict()).info(
                        "recovery scan not run: this process overrides the board's features"
                    )
            if start_plugins:
                host.bundle.registry.hooks.host_started(host)
        except BaseException:
            if keeper is not None:
                keeper.close()
            store.close()
            raise
        logger.bind(epoch=host.epoch, database=store.display_url).debug("host opened")
        return host

    @property
    def recovery_report(self) -> Any:
        """The recovery scan's report (`core.recovery.RecoveryReport`) when this host ran the
        scan at its open, else None."""
        if self._recovery_report is _NOTHING_PENDING:
            from core.recovery import RecoveryReport

            self._recovery_report = RecoveryReport()
        return self._recovery_report

    def recovery_summary(self) -> dict[str, object] | None:
        """`recovery_report.as_dict()`, or None when this host ran no scan; an empty scan's
        summary is given without importing the scan's modules (the command line logs it on
        every write command)."""
        if self._recovery_report is _NOTHING_PENDING:
            return {"scanned": 0, "redispatched": 0, "skipped": {}, "errors": 0}
        report = self._recovery_report
        return None if report is None else dict(report.as_dict())

    @property
    def epoch(self) -> str | None:
        """This host's epoch as last checked (its last one, once closed); None for a read-only
        host."""
        return self._keeper.epoch if self._keeper is not None else self._closed_epoch

    def register_worker(self) -> None:
        """This process claims runs (`laneway worker`): its epoch is recorded as a worker's on
        its host (`core.services.unattended`)."""
        if self._keeper is not None:
            self._keeper.mark_worker()

    def cleanup_room(
        self, task: Task, path: Path, argv: tuple[str, ...], env: dict[str, str]
    ) -> tuple[tuple[str, ...], dict[str, str]]:
        """`Peers.cleanup_room`: the agents' sandbox decides (a layer the services are below)."""
        from core.agents import sandbox

        return sandbox.cleanup_room(self.store, task, path, argv, env)

    def live_epoch(self) -> str:
        """The epoch to claim under: checks the liveness lock still holds, and fences this
        host onto a new epoch when it does not (see `core.store.liveness`)."""
        if self._keeper is None:
            raise NotInitialised("a read-only host claims nothing")
        return self._keeper.current()

    def watch_epoch(self, on_lost: Callable[[str], object]) -> Callable[[], None]:
        """Have `on_lost(old_epoch)` called the moment this host's liveness lock is found lost
        (a watcher thread; `core.store.liveness.EpochKeeper.watch`); returns the watch's stop.
        A worker stops the agents of the runs it claimed under the lost epoch there."""
        if self._keeper is None:
            raise NotInitialised("a read-only host holds no liveness lock")
        return self._keeper.watch(on_lost)

    def close(self) -> None:
        if self._keeper is not None:
            self._closed_epoch = self._keeper.epoch
            self._keeper.close()
            self._keeper = None
        self.store.close()

    def __enter__(self) -> Host:  # noqa: PYI034 - Host is not meant to be subclassed
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the bundle ----------------------------------------------------------------------

    @property
    def bundle(self) -> Bundle:
        """The bundle in force now. Read it once per operation and keep using that one."""
        holder = self._holder
        if holder is None:  # opened with start_plugins=False, and first asked now
            holder = self._first_bundle()
        return holder.current()

    def _first_bundle(self) -> BundleHolder:
        from core.bundle import BundleHolder

        with self._parts_lock:
            if self._holder is None:
                self._holder = BundleHolder(self._build_bundle())
            return self._holder

    def current_bundle(self) -> Bundle | None:
        """The bundle in force, or None before the first one is published."""
        return self._holder.current() if self._holder is not None else None

    @property
    def registry(self) -> Registry:
        return self.bundle.registry

    @property
    def engine(self) -> Engine:
        """The trigger engine of the bundle in force now (`bundle.engine`)."""
        engine = self.bundle.engine
        if engine is None:  # a host builds every bundle with one: never, unless that changes
            raise LanewayError("the host's bundle has no trigger engine")
        return engine

    def _build_bundle(self) -> Bundle:
        from core import structural
        from core.bundle import Bundle
        from core.plugin.loading import load_plugins
        from core.plugin.registry import build_registry

        loaded = load_plugins(self.selection, builtins=[("core", structural)])
        self.loaded_plugins = loaded
        registry = build_registry(loaded, self.features)
        return Bundle(registry=registry, store=self.store, build_engine=self._engine_on)

    def _engine_on(self, registry: Registry) -> Engine:
        """A bundle's engine, built when first asked for (`Bundle.engine`): a command that
        evaluates no trigger, such as a manual move, never imports `core.engine`."""
        from core.engine import Engine

        return Engine(self.arrivals, registry, self.operations)

    def set_features(self, **changes: bool) -> Bundle:
        """Switch the board's features (e.g. ``office=False``, or a feature a loaded plugin
        declares): stored in the database, so
        every process following the board acts with them from its next transaction; this host
        follows the board from now on (a per-process override given at open is dropped), and
        publishes a new bundle at once.

        Dispatches already running finish on the bundle they read; later ones see this one.
        """
        if not self.writable:
            raise LanewayError("this host was opened read-only")
        known = self.registry.declared_features  # read before BEGIN: it may build the bundle
        with self.store.transaction() as uow:
            state = board.write_features(uow, changes, known)
        with self._follow_lock:
            self.features_override = None
            self.features = state.features
            self._board_version = state.version
            self.workflows.forget()
            self._republish_due = False
            return self._republish()

    def board_features(self) -> Features:
        """The board's features as stored (whatever this host's override)."""
        with self.store.read() as conn:
            return board.read(conn).features

    def follow_board(self) -> None:
        """Check the board's catalogue version now (every transaction and read does)."""
        with self.store.read():
            pass

    def _follow_board(self, conn: Connection) -> None:
        """At the start of each transaction and read: one primary-key read of the board's
        version; when it moved, forget cached workflows and follow the board's features."""
        self._follow_version(conn, board.version(conn))

    def _follow_version(self, conn: Connection, version: int) -> None:
        """`_follow_board` with the version already read (a move reads it with its task)."""
        if version == self._board_version:
            return
        state = board.read(conn)
        with self._follow_lock:
            if state.version == self._board_version:
                return
            self.workflows.forget()
            self.profiles.forget()
            if self.features_override is None and state.features != self.features:
                self.features = state.features
                # Building a bundle loads plugins and may take its time: not inside the
                # transaction or read that noticed the change (`Store.after_end` publishes).
                self._republish_due = self._holder is not None
                logger.bind(features=state.features.as_dict()).info(
                    "following the board's features"
                )
            self._board_version = state.version

    def _publish_due(self) -> None:
        """After a transaction or read closed: publish the bundle its BEGIN found due."""
        if not self._republish_due:
            return
        with self._follow_lock:
            if not self._republish_due:
                return
            self._republish_due = False
            self._republish()

    def subscribe(self, callback: Callable[[Event], object]) -> Callable[[], None]:
        """Have `callback` called with each committed board event, after its commit, as the
        `laneway_event` hook is (one thread at a time, in commit order, each call in its own
        guard); returns the function that ends the subscription."""
        from core.observe import Dispatch

        observer = self.store.observer
        if not isinstance(observer, Dispatch):
            raise LanewayError("this host delivers no events")
        return observer.subscribe(callback)

    def epoch_is_dead(self, epoch: str) -> bool:
        """Whether no live process holds `epoch`'s liveness lock (`core.store.liveness`)."""
        return self.store.liveness.is_dead(epoch)

    def set_plugins(
        self, *, allow: Iterable[str] | Keep | None = KEEP, block: Iterable[str] | Keep = KEEP
    ) -> Bundle:
        """Change which plugins load and publish a new bundle. A list not given is kept;
        `allow=None` lifts the allow-list."""
        self.selection = self.selection.with_lists(allow=allow, block=block)
        return self._republish()

    def _republish(self) -> Bundle:
        if self._holder is None:
            return self._first_bundle().current()
        return self._holder.publish(self._build_bundle())

    @property
    def writable(self) -> bool:
        return self._keeper is not None


def _first_read(
    store: Store, *, check_schema: bool, writer: bool, probe: bool
) -> tuple[board.BoardState, bool, bool]:
    """What opening a host reads, in one read transaction before it mints its epoch (so on
    one connection, which the writer then takes; each read after the mint needs one more):
    the schema's revision (unless just upgraded), the board's state, whether the default
    workspace exists (a reader, which creates none, does not ask: True) and, for a writer
    that runs the recovery scan, the scan's probe (True: something is pending, or the probe
    failed, which the scan then reports)."""
    from core.store import migrate

    try:
        try:
            return _read_once(store, check_schema=check_schema, writer=writer, probe=probe)
        except sa.exc.DBAPIError as exc:
            if not exc.connection_invalidated:
                raise
        # A PostgreSQL read runs outside a transaction (`core.store.database`): a server that
        # ends idle sessions (`idle_session_timeout`) may end the pooled connection between two
        # of these statements when the process stalls past its timeout (a loaded machine). The
        # read is taken again, once, on a fresh connection.
        return _read_once(store, check_schema=check_schema, writer=writer, probe=probe)
    except sa.exc.DBAPIError:
        # The version table may be missing (a database laneway never initialised): the
        # check's own path tells that apart from any other failure, raised as it is.
        if check_schema and not migrate.is_current(store):
            raise _not_initialised(store) from None
        raise


def _read_once(
    store: Store, *, check_schema: bool, writer: bool, probe: bool
) -> tuple[board.BoardState, bool, bool]:
    from core.store import migrate

    with store.read() as conn:
        if check_schema and not migrate.recorded_is_current(conn):
            raise _not_initialised(store)
        state = board.read(conn)
        default_workspace = not writer or _has_default_workspace(conn)
        pending = False
        if probe:
            from core.services.entries import anything_pending

            try:
                pending = anything_pending(conn)
            except Exception as exc:  # the scan runs and reports it (rule f)
                if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
                    raise  # the connection is gone, not the probe: the read is taken again
                pending = True
    return state, default_workspace, pending


def _not_initialised(store: Store) -> NotInitialised:
    return NotInitialised(f"database {store.display_url} is not initialised; run `laneway init`")


def _has_default_workspace(conn: Connection) -> bool:
    """`WorkspaceService.ensure_default`'s read, so that a board which has its default
    workspace (every board but a new one) takes no write transaction to learn it."""
    from core.store import tables as t

    found = conn.execute(sa.select(t.workspaces.c.id).where(t.workspaces.c.is_default)).first()
    return found is not None


def _check_sqlite_file(url: str, *, writing: bool) -> None:
    parsed = dialect.normalise_url(url)
    if not dialect.is_sqlite(parsed):
        return
    path = dialect.sqlite_path(parsed)
    problem = dialect.sqlite_file_problem(path, writing=writing) if path is not None else None
    if problem is not None:
        raise DatabaseUnusable(f"database {url}: {problem}")


def _missing_sqlite_file(url: str) -> str | None:
    parsed = dialect.normalise_url(url)
    if not dialect.is_sqlite(parsed):
        return None
    path = dialect.sqlite_path(parsed)
    return str(path) if path is not None and not path.exists() else None
