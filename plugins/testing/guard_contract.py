"""The guard contract: an abstract pytest suite a plugin author subclasses for each guard.

::

    from plugins.testing.guard_contract import GuardContract
    import my_plugin

    class TestMyGuard(GuardContract):
        plugin = my_plugin                  # the module or object with the @hookimpl functions
        plugin_name = "mine"                # its entry-point name
        guard = "my_guard"                  # the guard under test
        valid_config = {"approvals": 2}
        invalid_configs = [{}, {"approvals": "two"}]

        def arrange_open(self, host, board, task):
            ...                             # make the guard pass for `task` at Work

A guard gates a move: ``move_to_next`` from the board's Work step to its Gate step carries
``if: {<guard>: <valid_config>}`` on ``on_turn_complete``. Each check opens a fresh host
(the ``laneway_db_url`` fixture) loading exactly the plugin and ``also_load``, and names the
clause it verifies: a failing check's message starts with ``contract '<name>' broken:``.
`GUARD_CONTRACTS` lists the clauses.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import pytest

from core import harness
from core.host import Host
from plugins import hookimpl
from plugins.api import (
    ConfigError,
    Features,
    GuardContext,
    GuardKind,
    GuardResult,
    LanewayError,
    Task,
    Workflow,
)
from plugins.testing.hosts import HostFactory, PluginSpec
from plugins.testing.instrumented import InstrumentedPlugin, Recorder, _resolve
from plugins.testing.logs import captured

GUARD_CONTRACTS: Final[Mapping[str, str]] = {
    "guard-registration": (
        "the plugin registers a GuardKind under the guard's name, with a validate and an "
        "evaluate callable"
    ),
    "guard-config-validation": (
        "validate accepts the valid config and refuses each malformed one by raising "
        "ConfigError (never another exception) with a one-line message; import refuses a "
        "workflow whose guard config is malformed while the plugin is loaded"
    ),
    "guard-holds": (
        "evaluate returns a GuardResult; while the guard is not satisfied the move it gates "
        "is not taken (the task stays), and the refusal carries a non-empty reason"
    ),
    "guard-releases": (
        "once the state the guard waits for holds (arrange_open), the move it gates is taken"
    ),
    "guard-read-only": (
        "evaluating the guard writes nothing: every table has the same rows before and after"
    ),
    "guard-feature-off": (
        "a guard declaring a feature never passes while that feature is off: the move is not "
        "taken, a WARNING names the guard, and evaluate is not called"
    ),
}


class GuardContractBroken(AssertionError):
    """A check of the guard contract failed; the message names the contract."""

    def __init__(self, contract: str, detail: str) -> None:
        super().__init__(
            f"contract {contract!r} broken: {detail}\n    the contract: {GUARD_CONTRACTS[contract]}"
        )
        self.contract = contract


def require(ok: object, contract: str, detail: str | Callable[[], str]) -> None:
    """Fail the check with a message naming `contract` unless `ok`."""
    __tracebackhide__ = True
    if not ok:
        raise GuardContractBroken(contract, detail() if callable(detail) else detail)


BOARD: Final = """
version: 1
type: kandev_workflow
workflows:
  - name: Guard Contract
    steps:
      - name: Work
        position: 0
        is_start_step: true
        events:
          on_turn_complete:
            - type: move_to_next
              config:
                if: {guards}
      - {{name: Gate, position: 1}}
      - {{name: Done, position: 2}}
"""


class _ObservedGuardPlugin(InstrumentedPlugin):
    """Stands in for the plugin under test: forwards every hook to it, and wraps the evaluate
    of the guard under test so each evaluation is recorded (the plugin is not changed)."""

    def __init__(self, plugin: object, guard: str, calls: list[GuardResult]) -> None:
        super().__init__(plugin, "", Recorder())
        self.guard = guard
        self.calls = calls

    @hookimpl
    def laneway_register_guards(self, register: Any) -> None:
        impl = getattr(self.plugin, "laneway_register_guards", None)
        if impl is None:
            return
        calls = self.calls

        def register_observed(guard: Any) -> None:
            if isinstance(guard, GuardKind) and guard.name == self.guard:
                original = guard.evaluate

                def evaluate(ctx: GuardContext, config: Any) -> GuardResult:
                    result = original(ctx, config)
                    calls.append(result)
                    return result

                guard = attrs.evolve(guard, evaluate=evaluate)
            register(guard)

        impl(register=register_observed)


@attrs.frozen
class GuardBoard:
    """The imported board: Work (its move to Gate guarded), Gate, Done."""

    workflow: Workflow

    @property
    def work(self) -> Any:
        return self.workflow.step("Work")

    @property
    def gate(self) -> Any:
        return self.workflow.step("Gate")


class GuardContract:
    """Subclass as ``class TestMyGuard(GuardContract)`` and set the attributes below."""

    plugin: object = None
    """The plugin: a module, an object with ``@hookimpl`` methods, or a module path."""
    plugin_name: str = ""
    """Its name (the entry-point name it is installed under)."""
    guard: str = ""
    """The guard under test."""
    valid_config: Mapping[str, Any] = {}
    """A config the guard accepts."""
    invalid_configs: Sequence[Any] = ()
    """Configs validate must refuse (empty: the validation check is skipped)."""
    also_load: Sequence[PluginSpec] = ()
    """Other plugins the guard needs on the host, as ``(name, plugin)`` pairs."""
    features: Features = Features()
    """The host's features (the feature-off check turns the guard's own feature off)."""

    tmp_path: Path

    # -- what a subclass may override -----------------------------------------------------------

    def arrange_board(self, host: Host, board: GuardBoard) -> None:
        """Prepare the freshly imported board (e.g. seats at Work)."""

    def arrange_open(self, host: Host, board: GuardBoard, task: Task) -> None:
        """Bring about what the guard waits for, for `task` standing at Work. Not overridden:
        the release check is skipped."""

    # -- the kit's machinery --------------------------------------------------------------------

    @pytest.fixture(autouse=True)
    def _laneway_guard_contract(self, tmp_path: Path, laneway_db_url: str) -> Iterator[None]:
        if self.plugin is None or not self.plugin_name or not self.guard:
            pytest.fail(
                f"{type(self).__name__}: set `plugin`, `plugin_name` and `guard` to use the "
                "guard contract suite"
            )
        self.tmp_path = tmp_path
        self._hosts = HostFactory(laneway_db_url, tmp_path / "guard-contract")
        self._hosts.directory.mkdir(parents=True, exist_ok=True)
        self._calls: list[GuardResult] = []
        self._observed = _ObservedGuardPlugin(_resolve(self.plugin), self.guard, self._calls)
        try:
            yield
        finally:
            self._hosts.close_all()

    def _plugins(self) -> list[PluginSpec]:
        return [(self.plugin_name, self._observed), *self.also_load]

    def open_host(self, features: Features | None = None) -> Host:
        """A host on the check's database loading the plugin and ``also_load``."""
        return self._hosts.open(self._plugins(), features=features or self.features)

    def _declaration(self, host: Host) -> GuardKind:
        registered = host.bundle.registry.guards.get(self.guard)
        require(
            registered is not None and registered.plugin == self.plugin_name,
            "guard-registration",
            lambda: (
                f"plugin {self.plugin_name!r} declares no guard named {self.guard!r} "
                f"(loaded guards: {sorted(host.bundle.registry.guards)})"
            ),
        )
        assert registered is not None
        return registered.guard

    def board(self, host: Host, config: Any = None) -> GuardBoard:
        """Import the board with the guard (given `config`, default the valid one)."""
        guards = json.dumps({self.guard: self.valid_config if config is None else config})
        path = self._hosts.directory / f"guard-board-{len(host.workflows.list())}.yml"
        text = textwrap.dedent(BOARD).format(guards=guards)
        path.write_text(text.replace("Guard Contract", f"Guard Contract {path.stem}"))
        (workflow,) = host.workflows.import_file(path)
        board = GuardBoard(workflow)
        self.arrange_board(host, board)
        return board

    def task_at_work(self, host: Host, board: GuardBoard) -> Task:
        task = host.tasks.create(workflow=board.workflow.id, title="guard contract")
        host.sessions.start(task.id)
        return host.tasks.get(task.id)

    def complete_turn(self, host: Host, task: Task) -> dict[str, Any]:
        return host.turns.complete(task.id)

    # -- the checks -----------------------------------------------------------------------------

    def test_registers_with_name_validate_and_evaluate(self) -> None:
        """guard-registration"""
        declared = self._declaration(self.open_host())
        require(
            isinstance(declared, GuardKind) and declared.name == self.guard,
            "guard-registration",
            f"registered {declared!r}, not a GuardKind named {self.guard!r}",
        )
        require(
            callable(declared.validate) and callable(declared.evaluate),
            "guard-registration",
            "validate and evaluate must both be callables",
        )

    def test_validate_accepts_the_valid_config_and_refuses_malformed_ones(self) -> None:
        """guard-config-validation"""
        host = self.open_host()
        declared = self._declaration(host)
        try:
            declared.validate(self.valid_config)
        except Exception as exc:  # noqa: BLE001 - reported as the broken clause
            pytest.fail(
                f"contract 'guard-config-validation' broken: validate refused the valid "
                f"config {self.valid_config!r}: {type(exc).__name__}: {exc}"
            )
        if not self.invalid_configs:
            pytest.skip("no invalid_configs given: the guard accepts any config")
        for config in self.invalid_configs:
            try:
                declared.validate(config)
            except ConfigError as exc:
                require(
                    "\n" not in str(exc) and str(exc).strip() != "",
                    "guard-config-validation",
                    f"the refusal of {config!r} is not one non-empty line: {str(exc)!r}",
                )
            except Exception as exc:  # noqa: BLE001 - reported as the broken clause
                pytest.fail(
                    f"contract 'guard-config-validation' broken: validate raised "
                    f"{type(exc).__name__} for {config!r}, not ConfigError"
                )
            else:
                pytest.fail(
                    f"contract 'guard-config-validation' broken: validate accepted {config!r}"
                )
        malformed = next((c for c in self.invalid_configs if isinstance(c, Mapping)), None)
        if malformed is not None:
            with pytest.raises(LanewayError) as refused:
                self.board(host, malformed)
            require(
                self.guard in str(refused.value),
                "guard-config-validation",
                f"the import refusal does not name the guard: {refused.value}",
            )

    def test_an_unsatisfied_guard_holds_the_move(self) -> None:
        """guard-holds"""
        host = self.open_host()
        board = self.board(host)
        task = self.task_at_work(host, board)

        result = self.complete_turn(host, task)

        require(
            self._calls and all(isinstance(r, GuardResult) for r in self._calls),
            "guard-holds",
            f"evaluate was not called or returned something else: {self._calls!r}",
        )
        require(
            not result["transitioned"]
            and host.tasks.get(task.id).workflow_step_id == board.work.id,
            "guard-holds",
            "the guarded move was taken before anything the guard waits for happened",
        )
        require(
            all(r.reason.strip() for r in self._calls if not r.satisfied),
            "guard-holds",
            f"an unsatisfied GuardResult carries no reason: {self._calls!r}",
        )
        require(
            any(r["guard"] == self.guard for r in result["refusals"]),
            "guard-holds",
            f"the trigger's result does not report the guard's refusal: {result['refusals']!r}",
        )

    def test_the_move_is_taken_once_the_guard_is_satisfied(self) -> None:
        """guard-releases"""
        if type(self).arrange_open is GuardContract.arrange_open:
            pytest.skip("define arrange_open(host, board, task) to run the release check")
        host = self.open_host()
        board = self.board(host)
        task = self.task_at_work(host, board)
        self.arrange_open(host, board, task)

        self.complete_turn(host, task)

        require(
            host.tasks.get(task.id).workflow_step_id == board.gate.id,
            "guard-releases",
            "arrange_open brought about what the guard waits for, yet the move was not taken",
        )

    def test_evaluating_writes_nothing(self) -> None:
        """guard-read-only"""
        host = self.open_host()
        board = self.board(host)
        task = self.task_at_work(host, board)
        assert task.workflow_id is not None
        registered = host.bundle.registry.guards[self.guard]
        ctx = GuardContext(task, board.work, "on_turn_complete", host, _null_logger())
        before = _snapshot(host)

        registered.guard.evaluate(ctx, registered.guard.validate(self.valid_config))

        require(
            _snapshot(host) == before,
            "guard-read-only",
            "the database changed while the guard was evaluated",
        )

    def test_a_guard_whose_feature_is_off_never_passes(self) -> None:
        """guard-feature-off"""
        probe = self.open_host()
        feature = self._declaration(probe).feature
        self._hosts.close(probe)
        if feature is None:
            pytest.skip("the guard declares no feature")
        host = self.open_host(self.features.switched(**{feature: False}))
        board = self.board(host)
        task = self.task_at_work(host, board)
        if type(self).arrange_open is not GuardContract.arrange_open:
            self.arrange_open(host, board, task)
        self._calls.clear()

        with captured() as records:
            result = self.complete_turn(host, task)

        require(
            not result["transitioned"],
            "guard-feature-off",
            f"the move was taken with feature {feature!r} off",
        )
        require(
            self._calls == [],
            "guard-feature-off",
            "evaluate was called although the guard's feature is off",
        )
        require(
            any(r["level"] == "WARNING" and r["extra"].get("guard") == self.guard for r in records),
            "guard-feature-off",
            "no WARNING names the guard whose feature is off",
        )


def _null_logger() -> Any:
    from loguru import logger

    return logger.bind(laneway_guard_contract=True)


def _snapshot(host: Host) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, sorted (the database as the guard found it)."""
    return harness.snapshot(host)
