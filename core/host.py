"""The host: the one object an embedding application holds.

Opening a host, in order: open the store, bring or check the schema (under a short schema lock),
mint a fresh epoch and take its liveness lock, read the board's features, ensure the default
workspace, load plugins and publish the first bundle, run the recovery scan, then tell plugins
the host started. Any number of hosts, in this process or others, may work one database at once;
each is alive exactly while it holds its epoch's lock (`core.store.liveness`). Nothing is global.

The board's features (`board_settings`) are every process's, unless a process was opened with
a per-process override (`features=...`, the command line's `--no-office`): such a process acts
with its override for its own work and does not run the recovery scan, so that a feature it
turned off for itself never closes another's entries as `skipped(no_executor)`. At the start
of every transaction and read the host compares the board's catalogue version with the one it
last saw; when it moved it forgets its cached workflows and, following the board's features,
publishes a new bundle.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from types import TracebackType
from typing import Any

import attrs
from loguru import logger
from sqlalchemy.engine import Connection

from core import board, observe
from core.arrival import Arrivals
from core.bundle import Bundle, BundleHolder
from core.engine import Engine
from core.errors import DatabaseUnusable, LanewayError, NotInitialised
from core.kernel import Kernel
from core.kinds import Features
from core.operations import Operations
from core.registry import Registry, build_registry
from core.store import dialect, migrate
from core.store.database import Store
from core.store.liveness import EpochKeeper, schema_lock
from core.store.repository import Repository
from plugins.manager import KEEP, Keep, PluginSelection, load_plugins

DEFAULT_URL = "sqlite:///laneway.db"


class Host:
    """A laneway instance on one database. Use `Host.open(...)`, ideally as a context manager."""

    def __init__(
        self,
        store: Store,
        *,
        features: Features,
        selection: PluginSelection,
        keeper: EpochKeeper | None,
        features_override: Features | None = None,
        board_version: int | None = None,
    ) -> None:
        from core.services import (
            DecisionService,
            EntryService,
            ParticipantService,
            PluginService,
            ProfileService,
            RunService,
            SessionService,
            TaskService,
            TurnService,
            WorkflowService,
            WorkspaceService,
        )

        self.store = store
        self.features = features
        """The features this host acts with: the board's, or its per-process override."""
        self.features_override = features_override
        self.selection = selection
        self._keeper = keeper
        self._closed_epoch: str | None = None
        self._holder: BundleHolder | None = None
        self._board_version = board_version
        self._follow_lock = threading.Lock()
        self.recovery_report: Any = None
        self.operations = Operations(store, lambda: self.epoch, self.epoch_is_dead)
        """Durable on_agent_error operation ids; `operations.retention_s` is the window."""
        self.repository = Repository(store)
        self.kernel = Kernel(
            store=store,
            epoch=lambda: self.epoch,
            live_epoch=self.live_epoch,
            bundle=lambda: self.bundle,
            read=self.repository,
            services=self,
        )
        """What the layers below the services get: never the host itself."""
        from core.runtime.arrival import prepare_session

        self.arrivals = Arrivals(self.kernel, lambda arrival: prepare_session(self, arrival))
        """The arrival layer, with the runtime's preparation of an arrival's session."""
        self.workspace = WorkspaceService(self)
        self.profiles = ProfileService(self)
        self.workflows = WorkflowService(self)
        self.tasks = TaskService(self)
        self.participants = ParticipantService(self)
        self.decisions = DecisionService(self)
        self.sessions = SessionService(self)
        self.turns = TurnService(self)
        self.runs = RunService(self)
        self.entries = EntryService(self)
        self.plugins = PluginService(self)
        from core.runtime.runtime import AgentRuntime

        self.runtime = AgentRuntime(self)

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
        """
        missing = _missing_sqlite_file(url)
        if missing is not None and (read_only or not upgrade):
            # Refuse before connecting: connecting would leave an empty file behind.
            raise NotInitialised(f"database {missing} does not exist; run `laneway init`")
        _check_sqlite_file(url, writing=not read_only)
        store = Store(url)
        keeper: EpochKeeper | None = None
        try:
            if upgrade and not read_only:
                with schema_lock(store.url, store.engine):
                    migrate.upgrade(store)
            elif not migrate.is_current(store):
                raise NotInitialised(
                    f"database {store.display_url} is not initialised; run `laneway init`"
                )
            if not read_only:
                keeper = EpochKeeper(store.url, store.engine, store.write_connection)
                store.liveness.follow(lambda: keeper.epoch if keeper is not None else None)
            with store.read() as conn:
                state = board.read(conn)
            host = cls(
                store,
                features=features if features is not None else state.features,
                selection=plugins or PluginSelection.from_env(),
                keeper=keeper,
                features_override=features,
                board_version=state.version,
            )
            store.on_begin = host._follow_board
            store.on_version = host._follow_version
            host.workspace.ensure_default()
            host._holder = BundleHolder(host._build_bundle())
            store.observer = observe.Dispatch(host.current_bundle)
            if recover and not read_only:
                if features is None:
                    host.recovery_report = host.entries.recover()
                else:
                    logger.bind(epoch=host.epoch, features=attrs.asdict(features)).info(
                        "recovery scan not run: this process overrides the board's features"
                    )
            host.bundle.registry.hooks.host_started(host)
        except BaseException:
            if keeper is not None:
                keeper.close()
            store.close()
            raise
        logger.bind(epoch=host.epoch, database=store.display_url).debug("host opened")
        return host

    @property
    def epoch(self) -> str | None:
        """This host's epoch as last checked (its last one, once closed); None for a read-only
        host."""
        return self._keeper.epoch if self._keeper is not None else self._closed_epoch

    def live_epoch(self) -> str:
        """The epoch to claim under: checks the liveness lock still holds, and fences this
        host onto a new epoch when it does not (see `core.store.liveness`)."""
        if self._keeper is None:
            raise NotInitialised("a read-only host claims nothing")
        return self._keeper.current()

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
        assert self._holder is not None
        return self._holder.current()

    def current_bundle(self) -> Bundle | None:
        """The bundle in force, or None before the first one is published."""
        return self._holder.current() if self._holder is not None else None

    @property
    def registry(self) -> Registry:
        return self.bundle.registry

    @property
    def engine(self) -> Engine:
        """The trigger engine of the bundle in force now (`bundle.engine`)."""
        return self.bundle.engine

    def _build_bundle(self) -> Bundle:
        from core import structural

        loaded = load_plugins(self.selection, builtins=[("core", structural)])
        registry = build_registry(loaded, self.features)
        engine = Engine(self.arrivals, registry, self.operations)
        return Bundle(engine=engine, registry=registry, store=self.store)

    def set_features(self, **changes: bool) -> Bundle:
        """Switch the board's features (e.g. ``office=False``): stored in the database, so
        every process following the board acts with them from its next transaction; this host
        follows the board from now on (a per-process override given at open is dropped), and
        publishes a new bundle at once.

        Dispatches already running finish on the bundle they read; later ones see this one.
        """
        if not self.writable:
            raise LanewayError("this host was opened read-only")
        with self.store.transaction() as uow:
            state = board.write_features(uow, **changes)
        with self._follow_lock:
            self.features_override = None
            self.features = state.features
            self._board_version = state.version
            self.workflows.forget()
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
            if self.features_override is None and state.features != self.features:
                self.features = state.features
                if self._holder is not None:
                    self._republish()
                logger.bind(features=attrs.asdict(state.features)).info(
                    "following the board's features"
                )
            self._board_version = state.version

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
        assert self._holder is not None
        return self._holder.publish(self._build_bundle())

    @property
    def writable(self) -> bool:
        return self._keeper is not None


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
