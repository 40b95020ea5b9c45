"""The action-kind contract: an abstract pytest suite that a plugin author subclasses.

::

    from plugins.testing.contract import ActionKindContract
    import my_plugin

    class TestMyKind(ActionKindContract):
        plugin = my_plugin               # the module or object with the @hookimpl functions
        plugin_name = "mine"             # its entry-point name
        kind = "my_kind"                 # the kind under test
        valid_config = {"to": "ops"}
        invalid_configs = [{}, {"to": 3}]
        failing_config = {"to": "nowhere"}   # valid, but the executor fails with it
        supports_replay_key = True       # a replay with the same key repeats no effect

        def effect_probe(self, host, task):
            return count_my_effects(task.id)   # the kind's observable effect, counted

Each check verifies one clause of the contract and names it: a failing check's message starts
with ``contract '<name>' broken:`` followed by what was observed, and the clause itself. A
check that does not apply to the kind (a replay check for a session kind), or needs a
capability the subclass did not declare (no ``effect_probe``, no ``failing_config``), is
skipped with the reason. `CONTRACTS` lists the clauses.

Every check runs on a fresh database (the ``laneway_db_url`` fixture: a SQLite file unless a
conftest overrides it) with a host that loads exactly the plugin under test, the kit's own
``laneway_contract_kit`` plugin (a durable ``contract_sentinel`` kind that shows whether an
entry went on) and ``also_load``. The plugin is wrapped, not changed: the wrapper forwards
every hook and observes each call of the kind's executor (its context, whether a session
guard was held, what it returned), and records logged inside the call are tagged with the
field ``laneway_contract_call``.
"""

from __future__ import annotations

import importlib
import json
import sys
import threading
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, NoReturn, cast

import attrs
import pytest
import sqlalchemy as sa
from loguru import logger

from core import entry as dispatcher
from core import ledger
from core.errors import LanewayError
from core.host import Host
from core.kinds import ActionContext, ActionKind, ConfigError, Features, Outcome, accept_any
from core.model import Marker, StepEntry, Task
from core.runtime.failures import AgentFailure
from core.store import tables
from plugins import hookimpl
from plugins.testing.arrivals import (
    ENTRY_PATHS,
    Board,
    action,
    arrive,
    build_board,
    stage,
)
from plugins.testing.faults import run_with_fault
from plugins.testing.hosts import HostFactory, PluginSpec
from plugins.testing.logs import LogRecord, captured, matching

CONTRACTS: Final[Mapping[str, str]] = {
    "registration": (
        "the plugin registers the kind with its name, an owner ('durable' or 'session'), "
        "an executor and a config validator"
    ),
    "config-validation": (
        "the validator accepts the valid config and refuses each malformed one by raising "
        "ConfigError (never another exception) with a one-line message naming the field; "
        "import refuses the malformed config while the plugin is loaded"
    ),
    "malformed-at-dispatch": (
        "a malformed config that reached a step (imported while the plugin was not loaded) "
        "is skipped(malformed) at dispatch with an ERROR record, and the executor never runs"
    ),
    "entry-paths": (
        "the kind executes once on every entry path E1-E5 it declares (durable kinds: marker "
        "done; session kinds: with the live session), and a 'done' has its observable effect"
    ),
    "replay-idempotent": (
        "a durable kind replayed within one entry (core.entry.redispatch) does not repeat its "
        "effect when it uses the idempotency key it is given"
    ),
    "restart-idempotent": (
        "a durable kind re-run by the recovery scan after a restart does not repeat its effect "
        "when it uses the idempotency key it is given"
    ),
    "crash-at-least-once": (
        "a crash after the effect and before the marker (dispatch.after_effect) is re-run at "
        "most once more on restart and then marked done: at-least-once, exactly once with "
        "the key"
    ),
    "failure-reported": (
        "an executor that cannot do its work reports it (raises ActionFailed or returns "
        "failed(cause)): the action is recorded failed with the cause, and the rest of the "
        "entry continues unless the kind declares halts_entry_on_failure"
    ),
    "session-required": (
        "a session kind is skipped when the task has no live session: no executor call, no "
        "effect, no marker"
    ),
    "no-guard-reentry": (
        "the executor never runs under, and never re-enters, a held session guard (checked on "
        "on_enter and on an on_agent_error dispatch)"
    ),
    "structured-logs": (
        "records the executor writes carry task_id, step_id and action_type as discrete "
        "fields (log through ctx.logger) and do not interpolate ids into the message"
    ),
}

SENTINEL_PLUGIN: Final = "laneway_contract_kit"
SENTINEL_KIND: Final = "contract_sentinel"
DEAD_EPOCH: Final = "contract-kit-dead-epoch"
"""The epoch of a process that is gone (a host mints random hex, never this)."""
CALL_FIELD: Final = "laneway_contract_call"
GUARD_WAIT_S: Final = 20.0

_CRASH_DRIVER = """
import importlib, json, sys
from core import Host
from core.kinds import Features
from plugins.manager import PluginSelection

url, task_id, step, plugins_json = sys.argv[1:5]

def resolve(ref):
    module, _, attr = ref.partition(":")
    found = importlib.import_module(module)
    for part in filter(None, attr.split(".")):
        found = getattr(found, part)
    return found

extra = tuple((name, resolve(ref)) for name, ref in json.loads(plugins_json))
selection = PluginSelection(
    allow=frozenset(name for name, _ in extra), extra=extra, entry_points=False, strict=True
)
with Host.open(url, plugins=selection) as host:  # the board's features, set by the parent
    host.tasks.move(task_id, step)
"""


class ContractBroken(AssertionError):
    """A check of the action-kind contract failed; the message names the contract."""

    def __init__(self, contract: str, detail: str) -> None:
        super().__init__(
            f"contract {contract!r} broken: {detail}\n    the contract: {CONTRACTS[contract]}"
        )
        self.contract = contract


def require(ok: object, contract: str, detail: str | Callable[[], str]) -> None:
    """Fail the check with a message naming `contract` unless `ok`."""
    __tracebackhide__ = True
    if not ok:
        raise ContractBroken(contract, detail() if callable(detail) else detail)


def broken(contract: str, detail: str) -> NoReturn:
    __tracebackhide__ = True
    raise ContractBroken(contract, detail)


# -- observing the plugin ----------------------------------------------------------------------


@attrs.define
class ExecutorCall:
    """One call of the kind's executor, as the wrapper saw it."""

    number: int
    trigger: str
    task_id: str
    step_id: str
    entry_path: str | None
    entry_id: str | None
    entry_seq: int | None
    session_id: str | None
    """The session the context carried (session kinds: the live session)."""
    live_session_id: str | None
    """The task's live session when the call began (whatever the kind's owner)."""
    guard_held: bool | None
    """Whether that session's guard was held when the call began (None: no live session)."""
    outcome: Outcome | None = None
    raised: str | None = None
    finished: bool = False

    @property
    def failed(self) -> bool:
        return self.raised is not None or (
            self.outcome is not None and self.outcome.state == "failed"
        )

    @property
    def state(self) -> str:
        if self.raised is not None:
            return "failed"
        return self.outcome.state if self.outcome is not None else "done"


@attrs.define
class Recorder:
    calls: list[ExecutorCall] = attrs.field(factory=list)
    guard_reentries: list[str] = attrs.field(factory=list)
    executor_modules: set[str] = attrs.field(factory=set)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    def of(self, task_id: str, trigger: str | None = "on_enter") -> list[ExecutorCall]:
        return [
            c
            for c in self.calls
            if c.task_id == task_id and (trigger is None or c.trigger == trigger)
        ]

    def new_call(self, ctx: ActionContext) -> ExecutorCall:
        # the kit opened this host itself: it reads the host's public API, not a plugin's view
        host = cast("Host", ctx.services)
        live = host.sessions.live(ctx.task.id)
        with self._lock:
            call = ExecutorCall(
                number=len(self.calls) + 1,
                trigger=ctx.trigger,
                task_id=ctx.task.id,
                step_id=ctx.step.id,
                entry_path=ctx.entry_path,
                entry_id=ctx.entry_id,
                entry_seq=ctx.entry_seq,
                session_id=ctx.session.id if ctx.session is not None else None,
                live_session_id=live.id if live is not None else None,
                guard_held=host.runtime.guard_held(live.id) if live is not None else None,
            )
            self.calls.append(call)
        return call


def _hookimpl_of(plugin: object, name: str) -> Callable[..., Any] | None:
    found: Callable[..., Any] | None = getattr(plugin, name, None)
    if callable(found) and getattr(found, "laneway_impl", None) is not None:
        return found
    return None


class InstrumentedPlugin:
    """Stands in for the plugin under test: forwards every hook to it, and wraps the
    executor of the kind under test so that each call is observed."""

    def __init__(self, plugin: object, kind: str, recorder: Recorder) -> None:
        self.plugin = plugin
        self.kind = kind
        self.recorder = recorder

    def declarations(self) -> list[ActionKind]:
        """What the plugin declares, asked directly (no host)."""
        declared: list[ActionKind] = []
        impl = _hookimpl_of(self.plugin, "laneway_register_action_kinds")
        if impl is not None:
            impl(register=declared.append)
        return declared

    def _observed(self, execute: Callable[[ActionContext, Any], Outcome | None]) -> Any:
        recorder = self.recorder

        def execute_observed(ctx: ActionContext, config: Any) -> Outcome | None:
            call = recorder.new_call(ctx)
            with logger.contextualize(**{CALL_FIELD: call.number}):
                try:
                    outcome = execute(ctx, config)
                except BaseException as exc:
                    call.raised = f"{type(exc).__name__}: {exc}"
                    call.finished = True
                    raise
            call.outcome = outcome
            call.finished = True
            return outcome

        return execute_observed

    @hookimpl
    def laneway_register_action_kinds(self, register: Callable[[ActionKind], None]) -> None:
        impl = _hookimpl_of(self.plugin, "laneway_register_action_kinds")
        if impl is None:
            return

        def register_observed(kind: ActionKind) -> None:
            if isinstance(kind, ActionKind) and kind.name == self.kind and kind.execute:
                self.recorder.executor_modules.add(getattr(kind.execute, "__module__", ""))
                kind = attrs.evolve(kind, execute=self._observed(kind.execute))
            register(kind)

        impl(register=register_observed)

    @hookimpl
    def laneway_register_guards(self, register: Callable[..., None]) -> None:
        impl = _hookimpl_of(self.plugin, "laneway_register_guards")
        if impl is not None:
            impl(register=register)

    @hookimpl
    def laneway_task_ownership(self, task: Any, workspace: Any) -> str | None:
        impl = _hookimpl_of(self.plugin, "laneway_task_ownership")
        return impl(task=task, workspace=workspace) if impl is not None else None

    @hookimpl
    def laneway_agent_failed(self, host: Any, failure: Any) -> None:
        impl = _hookimpl_of(self.plugin, "laneway_agent_failed")
        if impl is not None:
            impl(host=host, failure=failure)

    @hookimpl
    def laneway_host_started(self, host: Any) -> None:
        impl = _hookimpl_of(self.plugin, "laneway_host_started")
        if impl is not None:
            impl(host=host)

    @hookimpl
    def laneway_cli_commands(self, group: Any) -> None:
        impl = _hookimpl_of(self.plugin, "laneway_cli_commands")
        if impl is not None:
            impl(group=group)


@attrs.define
class Sentinel:
    """The kit's own plugin: a durable kind declared after the kind under test, so a check
    sees whether the rest of the entry ran."""

    calls: list[str] = attrs.field(factory=list)

    def _execute(self, ctx: ActionContext, _config: Any) -> None:
        self.calls.append(ctx.task.id)

    @hookimpl
    def laneway_register_action_kinds(self, register: Callable[[ActionKind], None]) -> None:
        register(
            ActionKind(
                SENTINEL_KIND,
                "durable",
                execute=self._execute,
                description="the contract kit's witness that an entry went on",
            )
        )


def watch_guards(host: Host, recorder: Recorder) -> None:
    """Make this host's session guards report a re-entry instead of deadlocking on it."""
    runtime = host.runtime
    original = runtime.guard
    holders: dict[str, int] = {}

    @contextmanager
    def guard(session_id: str) -> Iterator[None]:
        me = threading.get_ident()
        if holders.get(session_id) == me:
            recorder.guard_reentries.append(session_id)
            raise AssertionError(f"session guard re-entered by the thread holding it: {session_id}")
        with original(session_id):
            holders[session_id] = me
            try:
                yield
            finally:
                holders.pop(session_id, None)

    runtime.guard = guard  # type: ignore[method-assign]


def _resolve(plugin: object) -> object:
    return importlib.import_module(plugin) if isinstance(plugin, str) else plugin


def _module_of(plugin: object) -> str:
    if isinstance(plugin, types.ModuleType):
        return plugin.__name__
    return type(plugin).__module__


def _top(module: str) -> str:
    return module.split(".", 1)[0]


def _ref_of(plugin: object, owner: type | None = None) -> str | None:
    """An import reference ("module" or "module:attr.path") a child process can load."""
    if isinstance(plugin, str):
        return plugin
    if isinstance(plugin, types.ModuleType):
        return plugin.__name__
    module = sys.modules.get(type(plugin).__module__)
    if module is not None:
        for name, value in vars(module).items():
            if value is plugin:
                return f"{module.__name__}:{name}"
    if owner is not None:
        for klass in owner.__mro__:
            for name, value in vars(klass).items():
                if value is plugin:
                    return f"{klass.__module__}:{klass.__qualname__}.{name}"
    return None


# -- the suite -----------------------------------------------------------------------------------


class ActionKindContract:
    """Subclass as ``class TestMyKind(ActionKindContract)`` and set the attributes below.

    ``valid_config``, ``invalid_configs`` and ``failing_config`` may be plain class attributes
    or properties (e.g. to name a file under the check's ``self.tmp_path``).
    """

    plugin: object = None
    """The plugin: a module, an object with ``@hookimpl`` methods, or a module path."""
    plugin_name: str = ""
    """Its name (the entry-point name it is installed under)."""
    kind: str = ""
    """The action kind under test."""

    @property
    def valid_config(self) -> Mapping[str, Any]:
        """A config with which the kind executes and takes effect (default: empty)."""
        return {}

    @property
    def invalid_configs(self) -> Sequence[Mapping[str, Any]]:
        """Configs the validator must refuse. Empty (the default): the kind takes any config,
        and the validation checks are skipped."""
        return ()

    @property
    def failing_config(self) -> Mapping[str, Any] | None:
        """A config that validates but with which the executor cannot do its work. None (the
        default): the failure check is skipped. ``arrange_failure`` may prepare the state that
        makes it fail."""
        return None

    supports_replay_key: bool = False
    """True: replaying the action within one entry (same ``ctx.idempotency_key``) does not
    repeat its effect. False: the kind is at-least-once; the replay checks are skipped."""
    needs_session: bool | None = None
    """True for a session kind (owner ``session``). None: taken from the declaration; when
    set, the declaration must agree."""
    also_load: Sequence[PluginSpec] = ()
    """Other plugins the kind needs on the host: ``(name, plugin)`` pairs, or entry-point
    names of installed plugins."""
    features: Features = Features()
    """The board's features for every check (written to the check's own database, which
    every host of the check then follows)."""
    plugin_ref: str | None = None
    """How a child process imports the plugin ("module" or "module:attribute"); found
    automatically for a module, or an object bound to a module or class attribute."""

    tmp_path: Path

    # -- what a subclass may override -----------------------------------------------------------

    def effect_probe(self, host: Host, task: Task) -> int | None:
        """Count the kind's observable effects for `task` (rows, lines, calls of a fake).

        None (the default): the effect is not observable, and the checks that count effects
        are skipped. For the crash check the count must be readable from another process's
        work (a database row, a file), not from memory.
        """
        return None

    def arrange_board(self, host: Host, board: Board) -> None:
        """Prepare a freshly imported board (e.g. seats at Target) before any task moves."""

    def arrange(self, host: Host, board: Board, task: Task) -> None:
        """Prepare state for `task` before it arrives at Target."""

    def arrange_failure(self, host: Host, board: Board, task: Task) -> None:
        """Prepare the state that makes ``failing_config`` fail, before the task arrives."""

    # -- the kit's machinery --------------------------------------------------------------------

    @pytest.fixture(autouse=True)
    def _laneway_contract(self, tmp_path: Path, laneway_db_url: str) -> Iterator[None]:
        if self.plugin is None or not self.plugin_name or not self.kind:
            pytest.fail(
                f"{type(self).__name__}: set `plugin`, `plugin_name` and `kind` to use the "
                "action-kind contract suite"
            )
        self.tmp_path = tmp_path
        self._recorder = Recorder()
        self._sentinel = Sentinel()
        self._instrumented = InstrumentedPlugin(_resolve(self.plugin), self.kind, self._recorder)
        self._declared = {k.name: k for k in self._instrumented.declarations()}
        self._hosts = HostFactory(laneway_db_url, tmp_path / "contract-files")
        self._board_dir = tmp_path / "contract-files"
        declared = self._declared.get(self.kind)
        packages = {_top(_module_of(self._instrumented.plugin))}
        if declared is not None and declared.execute is not None:
            packages.add(_top(getattr(declared.execute, "__module__", "") or ""))
        self._packages = frozenset(p for p in packages if p)
        with captured(self._packages) as records:
            self._records = records
            try:
                yield
            finally:
                self._hosts.close_all()

    def _plugins(self, *, with_plugin: bool) -> list[PluginSpec]:
        plugins: list[PluginSpec] = [(SENTINEL_PLUGIN, self._sentinel)]
        if with_plugin:
            plugins.append((self.plugin_name, self._instrumented))
        for spec in self.also_load:
            plugins.append(spec if not isinstance(spec, str) else (spec, _entry_point(spec)))
        return plugins

    def open_host(self, *, with_plugin: bool = True, recover: bool = True) -> Host:
        """A host on the check's database loading the plugin (or not), the sentinel and
        ``also_load``."""
        host = self._hosts.open(
            self._plugins(with_plugin=with_plugin), features=self.features, recover=recover
        )
        watch_guards(host, self._recorder)
        return host

    def restart(self, host: Host, *, recover: bool = True) -> Host:
        host = self._hosts.restart(host, recover=recover)
        watch_guards(host, self._recorder)
        return host

    def board(
        self,
        host: Host,
        configs: Sequence[Mapping[str, Any]] | None = None,
        *,
        sentinel: bool = False,
        on_agent_error: bool = False,
    ) -> Board:
        """Import a board whose Target declares the kind (once per config) on on_enter,
        followed by the sentinel when asked, and arrange it."""
        declared = [action(self.kind, c) for c in (configs or [self.valid_config])]
        if sentinel:
            declared.append(action(SENTINEL_KIND))
        board = build_board(
            host,
            self._board_dir,
            declared,
            on_agent_error=[action(self.kind, self.valid_config)] if on_agent_error else (),
        )
        self.arrange_board(host, board)
        return board

    def _declaration(self) -> ActionKind:
        declared = self._declared.get(self.kind)
        require(
            declared is not None,
            "registration",
            lambda: (
                f"plugin {self.plugin_name!r} declares no kind named {self.kind!r} "
                f"(it declares: {sorted(self._declared) or 'nothing'})"
            ),
        )
        assert declared is not None
        return declared

    def _is_session_kind(self) -> bool:
        return self._declaration().owner == "session"

    def _probe(self, host: Host, task_id: str) -> int | None:
        return self.effect_probe(host, host.tasks.get(task_id))

    def _needs_probe(self, check: str) -> None:
        if type(self).effect_probe is ActionKindContract.effect_probe:
            pytest.skip(f"{check} counts effects: define effect_probe(host, task) to run it")

    def _entry(self, host: Host, task_id: str, step_id: str) -> tuple[StepEntry, list[Marker]]:
        found = [(e, m) for e, m in host.entries.list(task=task_id) if e.step_id == step_id]
        assert found, f"the kit found no entry record for task {task_id} at {step_id}"
        return found[-1]

    def _marker(self, host: Host, task_id: str, step_id: str, position: int) -> Marker | None:
        _entry, markers = self._entry(host, task_id, step_id)
        return next((m for m in markers if m.position == position), None)

    def _own_records(self) -> list[LogRecord]:
        """Records the kind's own code wrote while its executor ran."""
        return [
            r
            for r in self._records
            if CALL_FIELD in r["extra"] and _top(r["name"] or "") in self._packages
        ]

    def _staged_arrival(
        self, host: Host, board: Board, path: str, *, session: bool = True
    ) -> tuple[Task, int | None]:
        """Stage a task for `path`, arrange it, count its effects, and bring it in.

        Returns the task as it stands afterwards and the effect count before arrival.
        """
        staged = stage(host, board, path, session=session)
        self.arrange(host, board, host.tasks.get(staged.task_id))
        before = self._probe(host, staged.task_id)
        return arrive(host, staged), before

    # -- registration and config ----------------------------------------------------------------

    def test_registers_with_name_owner_executor_and_validator(self) -> None:
        """registration"""
        declared = self._declaration()
        require(
            declared.owner in ("durable", "session"),
            "registration",
            f"kind {self.kind!r} declares owner {declared.owner!r}; an action kind a plugin "
            "contributes is 'durable' or 'session'",
        )
        require(
            declared.execute is not None,
            "registration",
            f"kind {self.kind!r} declares no executor",
        )
        require(
            callable(declared.validate),
            "registration",
            f"kind {self.kind!r} declares a validator that is not callable",
        )
        require(
            not (self.invalid_configs and declared.validate is accept_any),
            "registration",
            f"kind {self.kind!r} declares no config validator (accept_any) although the suite "
            "lists invalid configs",
        )
        if self.needs_session is not None:
            require(
                self.needs_session == (declared.owner == "session"),
                "registration",
                f"the suite says needs_session={self.needs_session} but kind {self.kind!r} "
                f"declares owner {declared.owner!r}",
            )
        host = self.open_host()
        registered = host.registry.kind(self.kind)
        require(
            registered is not None and registered.plugin == self.plugin_name,
            "registration",
            lambda: (
                f"a host loading plugin {self.plugin_name!r} does not list kind {self.kind!r} "
                f"as its own (registry: {registered})"
            ),
        )
        rows = {row["name"]: row for row in host.plugins.list()}
        require(
            self.kind in rows.get(self.plugin_name, {}).get("kinds", []),
            "registration",
            f"host.plugins.list() does not show {self.kind!r} under {self.plugin_name!r}: "
            f"{rows.get(self.plugin_name)}",
        )

    def test_validator_accepts_the_valid_config(self) -> None:
        """config-validation"""
        declared = self._declaration()
        try:
            declared.validate(dict(self.valid_config))
        except Exception as exc:  # noqa: BLE001 - any refusal of the valid config is the finding
            broken(
                "config-validation",
                f"the validator refused the valid config {dict(self.valid_config)}: "
                f"{type(exc).__name__}: {exc}",
            )
        host = self.open_host()
        self.board(host)  # import validates the config against the loaded plugin

    def test_validator_refuses_each_malformed_config_with_config_error(self) -> None:
        """config-validation"""
        if not self.invalid_configs:
            pytest.skip("invalid_configs is empty: the kind takes any config")
        declared = self._declaration()
        host = self.open_host()
        for config in self.invalid_configs:
            try:
                declared.validate(dict(config))
            except ConfigError as exc:
                message = str(exc).strip()
                require(
                    message and "\n" not in message,
                    "config-validation",
                    f"ConfigError for {dict(config)} has no one-line message: {message!r}",
                )
                require(
                    exc.field or self.kind in message,
                    "config-validation",
                    f"ConfigError for {dict(config)} names neither a field (field=...) nor the "
                    f"kind: {message!r}",
                )
                try:
                    self.board(host, [config])
                except LanewayError as refused:
                    require(
                        self.kind in str(refused)
                        or (exc.field and exc.field.rsplit(".", 1)[-1] in str(refused)),
                        "config-validation",
                        f"import refused {dict(config)} naming neither the kind nor the field: "
                        f"{refused}",
                    )
                else:
                    broken(
                        "config-validation",
                        f"a workflow declaring {dict(config)} imported while the plugin was loaded",
                    )
            except Exception as exc:  # noqa: BLE001 - a non-ConfigError refusal is the finding
                broken(
                    "config-validation",
                    f"the validator raised {type(exc).__name__} for {dict(config)}, not "
                    f"ConfigError (the dispatcher treats only ConfigError as malformed): {exc}",
                )
            else:
                broken("config-validation", f"the validator accepted {dict(config)}")

    def test_malformed_config_is_skipped_at_dispatch(self) -> None:
        """malformed-at-dispatch"""
        if not self.invalid_configs:
            pytest.skip("invalid_configs is empty: the kind takes any config")
        # Imported while the plugin is not loaded: import cannot ask its validator.
        host = self.open_host(with_plugin=False)
        config, board = self._malformed_board(host)
        staged = stage(host, board, "E2")
        task = host.tasks.get(staged.task_id)
        self.arrange(host, board, task)
        self._hosts.close(host)
        host = self.open_host()
        before = self._probe(host, task.id)
        arrive(host, staged)
        require(
            not self._recorder.of(task.id),
            "malformed-at-dispatch",
            f"the executor ran with the malformed config {dict(config)}",
        )
        errors = matching(self._records, "ERROR", task_id=task.id, action_type=self.kind)
        require(
            any("cause" in r["extra"] for r in errors),
            "malformed-at-dispatch",
            f"no ERROR record with a cause for the malformed {self.kind!r} "
            f"(ERROR records: {[r['message'] for r in errors]})",
        )
        if not self._is_session_kind():
            marker = self._marker(host, task.id, board.target.id, 0)
            require(
                marker is not None and (marker.state, marker.reason) == ("skipped", "malformed"),
                "malformed-at-dispatch",
                f"the marker of the malformed {self.kind!r} is {marker}, not skipped(malformed)",
            )
        after = self._probe(host, task.id)
        require(
            after == before,
            "malformed-at-dispatch",
            f"effect_probe went from {before} to {after} although the config was malformed",
        )

    def _malformed_board(self, host: Host) -> tuple[Mapping[str, Any], Board]:
        """A board declaring the first invalid config the file loader lets through (the
        loader itself refuses some, e.g. a set_session_mode without a mode); when it refuses
        them all, the first one is written into the stored declaration, as a sync would."""
        for config in self.invalid_configs:
            try:
                return config, self.board(host, [config])
            except LanewayError:
                continue
        config = self.invalid_configs[0]
        board = self.board(host)
        steps = tables.workflow_steps
        with host.store.transaction() as uow:
            events = json.loads(
                uow.conn.execute(
                    sa.select(steps.c.events).where(steps.c.id == board.target.id)
                ).scalar_one()
            )
            events["on_enter"] = [action(self.kind, config)]
            uow.conn.execute(
                sa.update(steps)
                .where(steps.c.id == board.target.id)
                .values(events=json.dumps(events))
            )
        return config, board

    # -- execution --------------------------------------------------------------------------------

    @pytest.mark.parametrize("path", ENTRY_PATHS)
    def test_executes_on_entry_path(self, path: str) -> None:
        """entry-paths"""
        declared = self._declaration()
        host = self.open_host()
        board = self.board(host)
        task, before = self._staged_arrival(host, board, path)
        calls = self._recorder.of(task.id)
        if declared.owner == "session" and path not in declared.paths:
            require(
                not calls,
                "entry-paths",
                f"kind {self.kind!r} declares no owner on {path} but its executor ran there",
            )
            require(
                matching(self._records, "WARNING", task_id=task.id, action_type=self.kind),
                "entry-paths",
                f"kind {self.kind!r} has no owner on {path}: expected a WARNING naming it",
            )
            return
        require(
            len(calls) == 1,
            "entry-paths",
            f"on {path} the executor ran {len(calls)} times, expected once",
        )
        call = calls[0]
        require(
            call.entry_path == path,
            "entry-paths",
            f"the executor saw entry_path {call.entry_path!r} on {path}",
        )
        require(
            call.state == "done",
            "entry-paths",
            lambda: (
                f"on {path} with the valid config the executor ended {call.state} "
                f"({call.raised or call.outcome})"
            ),
        )
        if declared.owner == "session":
            require(
                call.session_id is not None,
                "entry-paths",
                f"on {path} the session kind ran without the live session",
            )
        else:
            marker = self._marker(host, task.id, board.target.id, 0)
            require(
                marker is not None and marker.state == "done",
                "entry-paths",
                f"on {path} the marker of {self.kind!r} is {marker}, not done",
            )
        after = self._probe(host, task.id)
        if after is not None and before is not None:
            require(
                after - before == 1,
                "entry-paths",
                f"on {path} the action ended done but effect_probe went from {before} to "
                f"{after} (expected exactly one effect)",
            )

    # -- durability ----------------------------------------------------------------------------

    def _durable_replay_applies(self, check: str) -> None:
        declared = self._declaration()
        if declared.owner == "session":
            pytest.skip(f"{check}: session kinds hold no marker and are never replayed")
        if declared.transactional:
            pytest.skip(
                f"{check}: a transactional kind commits its effect with its marker, so no "
                "replay can follow a committed effect"
            )
        if not self.supports_replay_key:
            pytest.skip(
                f"{check}: supports_replay_key is False (the kind is at-least-once on replay)"
            )
        self._needs_probe(check)

    def _reopen(self, host: Host, entry_id: str) -> None:
        """Leave the entry as a crash after the effect leaves it: the kind's marker back to
        in_progress under a dead epoch, the entry non-terminal."""
        markers, entries = tables.step_entry_markers, tables.step_entries
        with host.store.transaction() as uow:
            uow.conn.execute(
                sa.update(markers)
                .where(
                    markers.c.entry_id == entry_id,
                    markers.c.position == 0,
                    markers.c.kind == self.kind,
                )
                .values(state="in_progress", epoch=DEAD_EPOCH, reason=None, cause=None)
            )
            uow.conn.execute(
                sa.update(entries).where(entries.c.id == entry_id).values(terminal=False)
            )

    def _first_arrival(self, host: Host) -> tuple[Board, Task, StepEntry]:
        board = self.board(host)
        task, before = self._staged_arrival(host, board, "E2")
        after = self._probe(host, task.id)
        require(
            before is not None and after is not None and after - before == 1,
            "entry-paths",
            f"the first arrival changed effect_probe from {before} to {after}, expected +1",
        )
        entry, _markers = self._entry(host, task.id, board.target.id)
        return board, task, entry

    def test_replay_within_one_entry_repeats_no_effect(self) -> None:
        """replay-idempotent"""
        self._durable_replay_applies("the replay check")
        host = self.open_host()
        board, task, entry = self._first_arrival(host)
        self._reopen(host, entry.id)
        with host.store.read() as conn:
            reloaded = ledger.load_entry(conn, entry.id)
        assert reloaded is not None
        dispatcher.redispatch(host, host.tasks.get(task.id), board.target, reloaded)
        calls = self._recorder.of(task.id)
        assert len(calls) == 2, (
            f"laneway did not re-run the executor on the replay ({len(calls)} calls): "
            "a laneway problem, not the plugin's"
        )
        require(
            calls[0].entry_seq == calls[1].entry_seq,
            "replay-idempotent",
            "the replay ran under another entry_seq",
        )
        effects = self._probe(host, task.id)
        require(
            effects == 1,
            "replay-idempotent",
            f"replaying the entry (same entry, same position, same ctx.idempotency_key) "
            f"repeated the effect: effect_probe counts {effects} effects, expected 1",
        )
        marker = self._marker(host, task.id, board.target.id, 0)
        require(
            marker is not None and marker.state == "done",
            "replay-idempotent",
            f"after the replay the marker is {marker}, not done",
        )

    def test_replay_after_restart_repeats_no_effect(self) -> None:
        """restart-idempotent"""
        self._durable_replay_applies("the restart check")
        host = self.open_host()
        board, task, entry = self._first_arrival(host)
        self._reopen(host, entry.id)
        host = self.restart(host)  # new epoch; the recovery scan re-dispatches the entry
        calls = self._recorder.of(task.id)
        assert len(calls) == 2, (
            f"laneway's recovery scan did not re-run the executor ({len(calls)} calls): "
            "a laneway problem, not the plugin's"
        )
        effects = self._probe(host, task.id)
        require(
            effects == 1,
            "restart-idempotent",
            f"the recovery scan re-ran the action after a restart and the effect repeated: "
            f"effect_probe counts {effects} effects, expected 1",
        )
        marker = self._marker(host, task.id, board.target.id, 0)
        require(
            marker is not None and marker.state == "done",
            "restart-idempotent",
            f"after recovery the marker is {marker}, not done",
        )

    def test_crash_after_effect_reruns_at_most_once_more(self) -> None:
        """crash-at-least-once"""
        declared = self._declaration()
        if declared.owner == "session":
            pytest.skip("session kinds hold no marker: recovery never re-runs them")
        if declared.transactional:
            pytest.skip("transactional kinds commit effect and marker together: no window")
        self._needs_probe("the crash check")
        refs = self._child_refs()
        host = self.open_host()
        board = self.board(host)
        staged = stage(host, board, "E2")
        self.arrange(host, board, host.tasks.get(staged.task_id))
        self._hosts.close(host)
        run = run_with_fault(
            _CRASH_DRIVER,
            "dispatch.after_effect",
            args=[
                self._hosts.url,
                staged.task_id,
                "Target",
                json.dumps(refs),
            ],
        )
        if not run.crashed:
            if run.returncode == 0:
                broken(
                    "crash-at-least-once",
                    "the child moved the task without reaching dispatch.after_effect: the kind "
                    "did not run as a durable, non-transactional action",
                )
            pytest.fail(f"the crash driver failed before its fault point: {run.describe()}")
        host = self.open_host(recover=False)
        crashed_with = self._probe(host, staged.task_id)
        require(
            crashed_with == 1,
            "crash-at-least-once",
            f"when the process died after the effect, effect_probe counted {crashed_with} "
            "(expected the one effect, visible to another process)",
        )
        host = self.restart(host)
        effects = self._probe(host, staged.task_id)
        expected = (1,) if self.supports_replay_key else (1, 2)
        require(
            effects in expected,
            "crash-at-least-once",
            f"after the crash and a restart effect_probe counts {effects} effects; expected "
            f"{' or '.join(map(str, expected))}"
            + (
                " (supports_replay_key: the re-run must reuse the key)"
                if len(expected) == 1
                else ""
            ),
        )
        marker = self._marker(host, staged.task_id, board.target.id, 0)
        require(
            marker is not None and marker.state == "done",
            "crash-at-least-once",
            f"after recovery the marker is {marker}, not done",
        )

    def _child_refs(self) -> list[tuple[str, str]]:
        refs: list[tuple[str, str]] = []
        own = self.plugin_ref or _ref_of(self.plugin, type(self))
        if own is None:
            pytest.skip(
                "the crash check needs the plugin importable in a child process: set "
                "plugin_ref = 'module:attribute'"
            )
        refs.append((self.plugin_name, own))
        for spec in self.also_load:
            if isinstance(spec, str):
                ep = _entry_point(spec)
                refs.append((spec, _ref_of(ep) or spec))
                continue
            name, plugin = spec
            ref = _ref_of(plugin, type(self))
            if ref is None:
                pytest.skip(f"the crash check cannot import also_load plugin {name!r}")
            refs.append((name, ref))
        return refs

    # -- failure, sessions, guards -----------------------------------------------------------------

    def test_failure_is_recorded_and_the_entry_goes_on(self) -> None:
        """failure-reported"""
        if self.failing_config is None:
            pytest.skip(
                "failing_config is None: declare a config with which the executor fails to "
                "check how it reports failure"
            )
        declared = self._declaration()
        host = self.open_host()
        board = self.board(host, [self.failing_config], sentinel=True)
        staged = stage(host, board, "E2")
        task = host.tasks.get(staged.task_id)
        self.arrange(host, board, task)
        self.arrange_failure(host, board, task)
        arrive(host, staged)
        calls = self._recorder.of(task.id)
        require(calls, "failure-reported", "the executor never ran with failing_config")
        call = calls[0]
        require(
            call.failed,
            "failure-reported",
            lambda: (
                f"with failing_config the executor reported {call.state} "
                f"({call.outcome}): a failure it swallowed is recorded as success"
            ),
        )
        errors = matching(self._records, "ERROR", task_id=task.id, action_type=self.kind)
        if declared.owner == "durable":
            marker = self._marker(host, task.id, board.target.id, 0)
            require(
                marker is not None and marker.state == "failed" and marker.cause,
                "failure-reported",
                f"the marker is {marker}, not failed with a cause",
            )
        if not declared.logs_own_failures:
            require(
                any(r["extra"].get("cause") for r in errors),
                "failure-reported",
                "no ERROR record with a cause for the failed action",
            )
        ran_on = task.id in self._sentinel.calls
        if declared.halts_entry_on_failure:
            require(
                not ran_on,
                "failure-reported",
                "the kind declares halts_entry_on_failure but the entry went on after it failed",
            )
        else:
            require(
                ran_on,
                "failure-reported",
                "the action after the failed one never ran: the failure stopped the entry",
            )

    def test_session_kind_is_skipped_without_a_live_session(self) -> None:
        """session-required"""
        if not self._is_session_kind():
            pytest.skip("a durable kind runs with or without a session")
        host = self.open_host()
        board = self.board(host)
        task, before = self._staged_arrival(host, board, "E2", session=False)
        require(
            not self._recorder.of(task.id),
            "session-required",
            "the session kind's executor ran although the task has no live session",
        )
        after = self._probe(host, task.id)
        require(
            after == before,
            "session-required",
            f"effect_probe went from {before} to {after} without a live session",
        )
        entries = [e for e, _m in host.entries.list(task=task.id) if e.step_id == board.target.id]
        require(not entries, "session-required", "a session kind allocated an entry record")
        require(
            not matching(self._records, "ERROR", task_id=task.id),
            "session-required",
            "an ERROR was logged for a session kind skipped without a session",
        )

    def test_never_runs_under_or_reenters_a_held_session_guard(self) -> None:
        """no-guard-reentry"""
        declared = self._declaration()
        host = self.open_host()
        board = self.board(host, on_agent_error=declared.trigger_ok("on_agent_error"))
        path = "E2" if "E2" in declared.paths else min(declared.paths)
        task, _before = self._staged_arrival(host, board, path)
        session = host.sessions.live(task.id)
        assert session is not None
        failure = AgentFailure(
            task_id=task.id, session_id=session.id, route="R1", error_message="contract check"
        )
        errors: list[BaseException] = []

        def fail() -> None:
            try:
                host.runtime.fail_and_dispatch(failure)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        worker = threading.Thread(target=fail, name="contract-agent-failure", daemon=True)
        worker.start()
        worker.join(GUARD_WAIT_S)
        require(
            not worker.is_alive(),
            "no-guard-reentry",
            f"the on_agent_error dispatch did not return within {GUARD_WAIT_S:.0f}s: the "
            "executor waits on a session guard",
        )
        require(
            not self._recorder.guard_reentries,
            "no-guard-reentry",
            f"the executor re-entered the held guard of session(s) "
            f"{self._recorder.guard_reentries}",
        )
        assert not errors, f"the agent failure could not be handled: {errors[0]!r}"
        calls = self._recorder.of(task.id, trigger=None)
        triggers = {c.trigger for c in calls}
        require(
            "on_enter" in triggers,
            "no-guard-reentry",
            "the executor never ran on entry, so its guard use could not be observed",
        )
        if declared.trigger_ok("on_agent_error"):
            require(
                "on_agent_error" in triggers,
                "no-guard-reentry",
                "the executor never ran on the on_agent_error dispatch",
            )
        held = [c for c in calls if c.guard_held]
        require(
            not held,
            "no-guard-reentry",
            f"the executor ran while the guard of session {session.id} was held "
            f"(on {sorted({c.trigger for c in held})})",
        )

    # -- diagnostics -----------------------------------------------------------------------------

    def test_diagnostics_carry_discrete_fields(self) -> None:
        """structured-logs"""
        host = self.open_host()
        board = self.board(host)
        task, _before = self._staged_arrival(host, board, "E2")
        tasks = [(task, board)]
        if self.failing_config is not None:
            failing = self.board(host, [self.failing_config])
            staged = stage(host, failing, "E2")
            self.arrange(host, failing, host.tasks.get(staged.task_id))
            self.arrange_failure(host, failing, host.tasks.get(staged.task_id))
            tasks.append((arrive(host, staged), failing))
        own = self._own_records()
        if not own:
            pytest.skip(f"the kind's code ({sorted(self._packages)}) logged nothing while it ran")
        by_task = {t.id: (t, b) for t, b in tasks}
        calls = {c.number: c for c in self._recorder.calls}
        for record in own:
            call = calls[record["extra"][CALL_FIELD]]
            expected = {"task_id": call.task_id, "step_id": call.step_id, "action_type": self.kind}
            missing = {k: v for k, v in expected.items() if record["extra"].get(k) != v}
            require(
                not missing,
                "structured-logs",
                f"record {record['message']!r} ({record['level']}, from {record['name']}) "
                f"lacks the discrete fields {sorted(missing)}: log through ctx.logger (or bind "
                f"them); its fields are {sorted(k for k in record['extra'] if k != CALL_FIELD)}",
            )
            _subject, its_board = by_task.get(call.task_id, (task, board))
            ids = {
                "task_id": call.task_id,
                "step_id": call.step_id,
                "workflow_id": its_board.workflow.id,
                "entry_id": call.entry_id,
                "session_id": call.live_session_id,
            }
            leaked = sorted(
                k for k, v in ids.items() if v and len(v) >= 8 and v in record["message"]
            )
            require(
                not leaked,
                "structured-logs",
                f"record {record['message']!r} interpolates {', '.join(leaked)} into its "
                "message: bind ids as fields and keep the message constant",
            )


def _entry_point(name: str) -> object:
    from importlib.metadata import entry_points

    from plugins.manager import GROUP

    found = [ep for ep in entry_points(group=GROUP) if ep.name == name]
    if not found:
        pytest.skip(f"plugin {name!r} is not installed (no {GROUP!r} entry point)")
    return found[0].load()
