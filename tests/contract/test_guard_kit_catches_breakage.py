"""The guard contract kit catches broken guards, and says which contract each one broke.

Each case writes a small plugin with one guard, `flag` (satisfied once a file named by its
config exists), subclasses the kit's `GuardContract` for it, and runs that suite through
pytester. The correct guard passes every check; each broken variant fails exactly the checks
of the contract it breaks, naming it.
"""

from __future__ import annotations

import textwrap

import pytest

pytest_plugins = ["pytester"]

FLAG = """
from pathlib import Path

import sqlalchemy as sa

from core.plugin.kinds import ConfigError, GuardKind, GuardResult
from core.store import tables
from plugins import hookimpl
from plugins.testing.guard_contract import GuardContract


{validate}


{evaluate}


class Flag:
    @hookimpl
    def laneway_register_guards(self, register):
        register(GuardKind("flag", validate=validate, evaluate=evaluate, feature="office"))


PLUGIN = Flag()


class TestFlag(GuardContract):
    plugin = PLUGIN
    plugin_name = "flag"
    guard = "flag"
    invalid_configs = [{}, {"file": 3}]

    @property
    def valid_config(self):
        return {"file": str(self.tmp_path / "flag")}

    def arrange_open(self, host, board, task):
        (self.tmp_path / "flag").write_text("up")
"""

VALIDATE = """
def validate(config):
    file = config.get("file") if isinstance(config, dict) else None
    if not isinstance(file, str) or not file:
        raise ConfigError("flag needs config.file, a path", field="flag.file")
    return Path(file)
"""

LOOSE_VALIDATE = """
def validate(config):
    return Path(config["file"])  # a KeyError or TypeError, not a ConfigError
"""

EVALUATE = """
def evaluate(ctx, path):
    up = path.exists()
    return GuardResult(up, "" if up else "flag_down", {"file": path.name})
"""

WRITING_EVALUATE = """
def evaluate(ctx, path):
    up = path.exists()
    with ctx.services.store.transaction() as uow:  # a guard that writes as it judges
        uow.conn.execute(
            sa.update(tables.tasks).where(tables.tasks.c.id == ctx.task.id).values(priority="high")
        )
    return GuardResult(up, "" if up else "flag_down")
"""

SILENT_EVALUATE = """
def evaluate(ctx, path):
    up = path.exists()
    return GuardResult(up)  # no reason when it holds a move back
"""


def run_suite(pytester: pytest.Pytester, name: str, validate: str, evaluate: str) -> dict[str, str]:
    source = FLAG.replace("{validate}", textwrap.dedent(validate).strip()).replace(
        "{evaluate}", textwrap.dedent(evaluate).strip()
    )
    pytester.makepyfile(**{f"test_{name}": source})
    recorded = pytester.inline_run("-p", "no:cacheprovider", "-p", "no:randomly")
    reports = [
        r
        for r in recorded.getreports("pytest_runtest_logreport")
        if r.when == "call" or r.outcome != "passed"
    ]
    errors = [r for r in reports if r.when != "call" and r.failed]
    assert not errors, [r.longreprtext for r in errors]
    assert len([r for r in reports if r.when == "call"]) == 6
    return {r.nodeid.rsplit("::", 1)[-1]: r.longreprtext for r in reports if r.failed}


def test_a_correct_guard_passes_every_check(pytester: pytest.Pytester) -> None:
    assert run_suite(pytester, "correct", VALIDATE, EVALUATE) == {}


@pytest.mark.parametrize(
    ("name", "validate", "evaluate", "check", "contract"),
    [
        (
            "loose",
            LOOSE_VALIDATE,
            EVALUATE,
            "test_validate_accepts_the_valid_config_and_refuses_malformed_ones",
            "guard-config-validation",
        ),
        ("writing", VALIDATE, WRITING_EVALUATE, "test_evaluating_writes_nothing",
         "guard-read-only"),
        ("silent", VALIDATE, SILENT_EVALUATE, "test_an_unsatisfied_guard_holds_the_move",
         "guard-holds"),
    ],
)  # fmt: skip
def test_a_broken_guard_fails_its_contract(
    pytester: pytest.Pytester, name: str, validate: str, evaluate: str, check: str, contract: str
) -> None:
    failed = run_suite(pytester, name, validate, evaluate)
    assert check in failed, failed
    assert f"contract '{contract}' broken" in failed[check]
