"""The host: the one object an embedding application holds.

Opening a host, in order: open the store, bring or check the schema (under a short schema lock),
mint a fresh epoch and take its liveness lock, ensure the default workspace, load plugins and
publish the first bundle, run the recovery scan, then tell plugins the host started. Any number
of hosts, in this process or others, may work one database at once; each is alive exactly while
it holds its epoch's lock (`core.store.liveness`). Nothing is global.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from types import TracebackType
from typing import Any

import attrs
from loguru import logger

from core.bundle import Bundle, BundleHolder
from core.errors import NotInitialised
from core.kinds import Features
from core.registry import Registry, build_registry
from core.store import dialect, migrate
from core.store.database import Store
from core.store.liveness import EpochKeeper, schema_lock
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
        self.selection = selection
        self._keeper = keeper
        self._closed_epoch: str | None = None
        self._holder: BundleHolder | None = None
        self.recovery_report: Any = None
        self.applied_operations: tuple[set[str], threading.Lock] = (set(), threading.Lock())
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

        :param upgrade: create or upgrade the schema; when False a database that is not at
            the current revision is refused with `NotInitialised`.
        :param read_only: mint no epoch and take no lock (inspection only; writes refused).
        :param recover: run the recovery scan before returning (writers only).
        """
        missing = _missing_sqlite_file(url)
        if missing is not None and (read_only or not upgrade):
            # Refuse before connecting: connecting would leave an empty file behind.
            raise NotInitialised(f"database {missing} does not exist; run `laneway init`")
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
            host = cls(
                store,
                features=features or Features(),
                selection=plugins or PluginSelection.from_env(),
                keeper=keeper,
            )
            host.workspace.ensure_default()
            host._holder = BundleHolder(host._build_bundle())
            if recover and not read_only:
                host.recovery_report = host.entries.recover()
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

    def _build_bundle(self) -> Bundle:
        from core import structural
        from core.engine import Engine

        loaded = load_plugins(self.selection, builtins=[("core", structural)])
        registry = build_registry(loaded, self.features)
        return Bundle(engine=Engine(self, registry), registry=registry, store=self.store)

    def set_features(self, **changes: bool) -> Bundle:
        """Switch host features (e.g. ``office=False``) and publish a new bundle.

        Dispatches already running finish on the bundle they read; later ones see this one.
        """
        self.features = attrs.evolve(self.features, **changes)
        return self._republish()

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


def _missing_sqlite_file(url: str) -> str | None:
    parsed = dialect.normalise_url(url)
    if not dialect.is_sqlite(parsed):
        return None
    path = dialect.sqlite_path(parsed)
    return str(path) if path is not None and not path.exists() else None
