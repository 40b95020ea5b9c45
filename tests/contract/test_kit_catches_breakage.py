"""The contract kit catches broken executors, and says which contract each one broke.

Each case writes a small plugin with one durable kind, `stamp` (it appends a line to a file,
deduplicated on `ctx.idempotency_key`), into a scratch project, subclasses the kit's
`ActionKindContract` for it, and runs that suite through pytester. A correct `stamp` passes
every check that applies to it; each broken variant fails exactly the checks of the contract
it breaks, and each failure's message names that contract.
"""

from __future__ import annotations

import textwrap

import pytest

pytest_plugins = ["pytester"]

STAMP = """
from pathlib import Path

from loguru import logger

from core.plugin.kinds import ActionFailed, ActionKind, ConfigError, Outcome
from plugins import hookimpl
from plugins.testing.contract import ActionKindContract


def validate(config):
    unknown = sorted(set(config) - {"file"})
    if unknown:
        raise ConfigError(f"stamp: unknown key {unknown[0]}", field=f"config.{unknown[0]}")
    file = config.get("file")
    if not isinstance(file, str) or not file:
        raise ConfigError("stamp needs config.file, a path", field="config.file")
    return Path(file)


def lines(path):
    return path.read_text().splitlines() if path.exists() else []


def append(ctx, path, dedupe=True):
    key = ctx.idempotency_key("stamp")
    if dedupe and key is not None and any(line.endswith(" " + key) for line in lines(path)):
        return
    with path.open("a") as out:
        out.write(f"{ctx.task.id} {key}\\n")


{executor}


class Stamp:
    @hookimpl
    def laneway_register_action_kinds(self, register):
        register(ActionKind("stamp", "durable", execute=execute, validate=validate))


PLUGIN = Stamp()


class TestStamp(ActionKindContract):
    plugin = PLUGIN
    plugin_name = "stamp"
    kind = "stamp"
    invalid_configs = [{}, {"file": 3}, {"file": "x", "colour": "red"}]
    supports_replay_key = True

    @property
    def valid_config(self):
        return {"file": str(self.tmp_path / "stamps.txt")}

    @property
    def failing_config(self):
        return {"file": str(self.tmp_path / "no-such-dir" / "stamps.txt")}

    def effect_probe(self, host, task):
        return sum(1 for line in lines(self.tmp_path / "stamps.txt") if line.startswith(task.id))
"""

CORRECT = """
def execute(ctx, path):
    try:
        append(ctx, path)
    except OSError as exc:
        raise ActionFailed(f"cannot write {path.name}: {exc.strerror}") from None
    ctx.logger.bind(file=path.name).info("stamped")
"""

DOUBLE_EFFECT = """
def execute(ctx, path):
    # ignores the idempotency key: a replay stamps again
    try:
        append(ctx, path, dedupe=False)
    except OSError as exc:
        raise ActionFailed(f"cannot write {path.name}: {exc.strerror}") from None
    ctx.logger.bind(file=path.name).info("stamped")
"""

SWALLOWED_FAILURE = """
def execute(ctx, path):
    # catches its own failure and reports success: nothing was written
    try:
        append(ctx, path)
    except OSError:
        ctx.logger.bind(file=path.name).debug("stamp skipped")
        return Outcome.done()
    ctx.logger.bind(file=path.name).info("stamped")
"""

UNBOUND_LOG = """
def execute(ctx, path):
    try:
        append(ctx, path)
    except OSError as exc:
        raise ActionFailed(f"cannot write {path.name}: {exc.strerror}") from None
    # the module logger, ids formatted into the text: nothing to filter or join on
    logger.info(f"stamped task {ctx.task.id} at step {ctx.step.id}")
"""

INTERPOLATED_LOG = """
def execute(ctx, path):
    try:
        append(ctx, path)
    except OSError as exc:
        raise ActionFailed(f"cannot write {path.name}: {exc.strerror}") from None
    # bound fields are there, but the id is also interpolated into the message
    ctx.logger.info(f"stamped task {ctx.task.id}")
"""

REPLAY = "test_replay_within_one_entry_repeats_no_effect"
RESTART = "test_replay_after_restart_repeats_no_effect"
CRASH = "test_crash_after_effect_reruns_at_most_once_more"
FAILURE = "test_failure_is_recorded_and_the_entry_goes_on"
LOGS = "test_diagnostics_carry_discrete_fields"


def run_suite(pytester: pytest.Pytester, name: str, executor: str) -> dict[str, str]:
    """Run the contract suite against `stamp` with `executor`; returns {check: failure text}
    for every failed check, after asserting nothing errored and the suite really ran."""
    source = STAMP.replace("{executor}", textwrap.dedent(executor).strip())
    pytester.makepyfile(**{f"test_{name}": source})
    recorded = pytester.inline_run("-p", "no:cacheprovider", "-p", "no:randomly")
    reports = [
        r
        for r in recorded.getreports("pytest_runtest_logreport")
        if r.when == "call" or r.outcome != "passed"
    ]
    errors = [r for r in reports if r.when != "call" and r.failed]
    assert not errors, [r.longreprtext for r in errors]
    passed = [r for r in reports if r.passed and r.when == "call"]
    assert len(passed) >= 8, f"the suite barely ran: {[r.nodeid for r in reports]}"
    return {r.nodeid.rsplit("::", 1)[-1]: r.longreprtext for r in reports if r.failed}


def test_a_correct_kind_passes_every_check(pytester: pytest.Pytester) -> None:
    """The control: the same plugin, correct, fails nothing (so each failure below is the
    breakage, not the kit)."""
    assert run_suite(pytester, "correct", CORRECT) == {}


def test_a_kind_that_ignores_its_idempotency_key_fails_the_replay_contracts(
    pytester: pytest.Pytester,
) -> None:
    failed = run_suite(pytester, "double_effect", DOUBLE_EFFECT)
    assert set(failed) == {REPLAY, RESTART, CRASH}
    assert "contract 'replay-idempotent' broken" in failed[REPLAY]
    assert "effect_probe counts 2 effects, expected 1" in failed[REPLAY]
    assert "contract 'restart-idempotent' broken" in failed[RESTART]
    assert "contract 'crash-at-least-once' broken" in failed[CRASH]


def test_a_kind_that_swallows_its_failure_fails_the_failure_contract(
    pytester: pytest.Pytester,
) -> None:
    failed = run_suite(pytester, "swallowed_failure", SWALLOWED_FAILURE)
    assert set(failed) == {FAILURE}
    assert "contract 'failure-reported' broken" in failed[FAILURE]
    assert "a failure it swallowed is recorded as success" in failed[FAILURE]


@pytest.mark.parametrize(
    ("name", "executor", "finding"),
    [
        (
            "unbound_log",
            UNBOUND_LOG,
            "lacks the discrete fields ['action_type', 'step_id', 'task_id']",
        ),
        ("interpolated_log", INTERPOLATED_LOG, "interpolates task_id into its message"),
    ],
)
def test_a_kind_with_unstructured_logs_fails_the_logging_contract(
    pytester: pytest.Pytester, name: str, executor: str, finding: str
) -> None:
    failed = run_suite(pytester, name, executor)
    assert set(failed) == {LOGS}
    assert "contract 'structured-logs' broken" in failed[LOGS]
    assert finding in failed[LOGS]
