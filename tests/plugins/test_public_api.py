"""The public plugin API (issue 12 item 3): one module a plugin imports everything from, and a
unit of work a plugin takes from its context rather than from the host's store."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import plugins
from plugins import api
from plugins.api import ActionContext, ActionFailed, ActionKind, Outcome, RunRequest, hookimpl
from plugins.testing import Arrivals, HostFactory


def test_every_public_name_resolves_and_plugins_re_exports_it() -> None:
    for name in api.__all__:
        assert getattr(plugins, name) is getattr(api, name), name
    assert plugins.__all__ == api.__all__


def test_an_unknown_name_is_an_attribute_error() -> None:
    # the store is not a plugin's: it takes units of work from its context
    with pytest.raises(AttributeError, match="no attribute 'Store'"):
        _ = api.Store  # type: ignore[attr-defined]


class QueuesThenMaybeFails:
    """A durable kind that enqueues a run inside `ctx.transaction()` and then, when told to,
    raises inside the same unit of work."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail

    def execute(self, ctx: ActionContext, _config: Any) -> Outcome:
        with ctx.transaction():
            ctx.services.runs.enqueue(
                RunRequest(
                    agent_profile_id="agent-x",
                    task_id=ctx.task.id,
                    workflow_step_id=ctx.step.id,
                    reason="public-api-test",
                )
            )
            if self.fail:
                raise ActionFailed("changed my mind")
        return Outcome.done()

    @hookimpl
    def laneway_register_action_kinds(self, register: Callable[[ActionKind], None]) -> None:
        register(ActionKind("queue_in_uow", "durable", execute=self.execute))


@pytest.mark.parametrize("fail", [False, True])
def test_ctx_transaction_commits_or_rolls_back_what_the_executor_wrote(
    laneway_host_factory: HostFactory, laneway_arrivals: Arrivals, fail: bool
) -> None:
    """A plugin gets its unit of work from its context: what it wrote inside commits on a
    normal exit and is rolled back when the block raises."""
    host = laneway_host_factory.open([("queuer", QueuesThenMaybeFails(fail))])
    board = laneway_arrivals.board(host, [{"type": "queue_in_uow"}])
    task = laneway_arrivals.enter(host, board, "E2")

    queued = [r for r in host.runs.list(task=task.id) if r.reason == "public-api-test"]
    assert len(queued) == (0 if fail else 1)
