"""The clauses of the action-kind contract, and how a broken one is reported.

`CONTRACTS` names each clause the suite (:mod:`plugins.testing.contract`) checks; a failing
check raises `ContractBroken`, whose message starts with ``contract '<name>' broken:``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final, NoReturn

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
