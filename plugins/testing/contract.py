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

The suite lives here; its parts each in their own module: the clauses and their report
(:mod:`plugins.testing.clauses`), the instrumented plugin and the kit's sentinel
(:mod:`plugins.testing.instrumented`), the crash driver (:mod:`plugins.testing.crash`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from core import harness
from core.host import Host
from core.model import Marker, StepEntry
from plugins.api import (
    ActionKind,
    AgentFailure,
    ConfigError,
    Features,
    LanewayError,
    Task,
    accept_any,
)
from plugins.testing.arrivals import (
    ENTRY_PATHS,
    Board,
    action,
    arrive,
    build_board,
    stage,
)
from plugins.testing.clauses import CONTRACTS, ContractBroken, broken, require
from plugins.testing.crash import CRASH_DRIVER, crash_in_child
from plugins.testing.hosts import HostFactory, PluginSpec
from plugins.testing.instrumented import (
    CALL_FIELD,
    DEAD_EPOCH,
    GUARD_WAIT_S,
    SENTINEL_KIND,
    SENTINEL_PLUGIN,
    ExecutorCall,
    InstrumentedPlugin,
    Recorder,
    Sentinel,
    _entry_point,
    _module_of,
    _ref_of,
    _resolve,
    _top,
    watch_guards,
)
from plugins.testing.logs import LogRecord, captured, matching


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
        harness.write_declaration(host, board.target.id, "on_enter", [action(self.kind, config)])
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
        harness.crash_after_effect(host, entry_id, self.kind, position=0)

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
        harness.replay_entry(host, host.tasks.get(task.id), board.target, entry.id)
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
        run = crash_in_child(self._hosts.url, staged.task_id, "Target", refs)
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


__all__ = [
    "CALL_FIELD",
    "CONTRACTS",
    "CRASH_DRIVER",
    "DEAD_EPOCH",
    "SENTINEL_KIND",
    "SENTINEL_PLUGIN",
    "ActionKindContract",
    "ContractBroken",
    "ExecutorCall",
    "InstrumentedPlugin",
    "Recorder",
    "Sentinel",
    "broken",
    "require",
    "watch_guards",
]
