"""Issue 38 item 9: no number that is not finite comes in anywhere. Every numeric option of
every command (found by walking the click tree, so a new option is covered without a
change here), every JSON body and numeric query of every route (walked from the route
table), and every numeric field of a workflow file (found by watching the decoder read a
full template) refuse `inf`, `nan` and `1e999` in one line naming where; `-0` is `0`.
`budget set --limit-usd inf` is refused, and a non-finite limit already in the database
(written before laneway refused them) never makes `--json budget list` print `Infinity` nor
`GET /api/budgets` answer 500."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import sqlalchemy as sa
from starlette.routing import Route
from starlette.testclient import TestClient

from core.cli import build_cli
from core.host import Host
from core.serve import routes
from core.serve.app import build_app
from core.store import tables as t
from core.workflows import WorkflowFileError, formats, load
from tests.cli.conftest import Laneway

BAD = ("inf", "nan", "1e999", "-inf", "Infinity", "NaN")
TOKEN = "finite-numbers-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _numeric_params() -> Iterator[tuple[list[str], click.Parameter]]:
    """(command path, parameter) for every int or float parameter of every command."""

    root = build_cli(plugin_commands=False)
    ctx = click.Context(root)

    def walk(
        command: click.Command, path: list[str]
    ) -> Iterator[tuple[list[str], click.Parameter]]:
        for param in command.params:
            if isinstance(param.type, click.types.IntParamType | click.types.FloatParamType):
                yield path, param
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None:
                    yield from walk(sub, [*path, name])

    yield from walk(root, [])


def test_issue_38_item_9_every_numeric_option_refuses_non_finite_numbers(
    sqlite_laneway: Laneway,
) -> None:
    found = list(_numeric_params())
    names = {(" ".join(path), p.opts[0]) for path, p in found}
    # the walk reaches the options the issue names (so it is not walking nothing)
    assert {("budget set", "--limit-usd"), ("worker", "--grace")} <= names
    for path, param in found:
        assert isinstance(param, click.Option), f"{path}: a numeric argument: walk it here"
        floats = isinstance(param.type, click.types.FloatParamType)
        for bad in BAD:
            if floats:  # a user mistake: one line naming the option, exit 1
                said = sqlite_laneway.fails(*path, f"{param.opts[0]}={bad}")
                assert said == f"laneway: {param.opts[0]}: '{bad}' is not a finite number"
                continue
            result = sqlite_laneway.run(*path, f"{param.opts[0]}={bad}")
            said = result.output
            assert result.exit_code == 2, (path, param.opts, bad, said)  # not a whole number
            assert "Traceback" not in said
            assert f"'{bad}' is not a valid integer" in said, (path, param.opts, said)
        if isinstance(param.type, click.IntRange) and param.type.max is not None:
            assert param.type.max <= 2**63 - 1, (path, param.opts)
        else:
            assert not isinstance(param.type, click.types.IntParamType), (
                f"{path} {param.opts}: a whole number with no upper bound reaches the driver"
            )
        # -0 is 0, never a negative zero; a range that excludes 0 refuses it as out of range
        ctx = click.Context(click.Command("x"))
        zero: Any = None
        refused = ""
        try:
            zero = param.type.convert("-0", param, ctx)
        except click.BadParameter as exc:
            refused = str(exc)
        if refused:
            assert "not in the range" in refused, (path, param.opts, refused)
        else:
            assert zero == 0, (path, param.opts, zero)
            assert math.copysign(1, zero) == 1, (path, param.opts, zero)


def test_issue_38_item_9_budget_limit_inf_is_refused_and_a_stored_one_is_never_infinity(
    laneway: Laneway,
) -> None:
    said = laneway.fails("budget", "set", "--scope", "workspace", "--limit-usd", "inf")
    assert said == "laneway: --limit-usd: 'inf' is not a finite number"
    laneway.json("budget", "set", "--scope", "workspace", "--limit-usd", "5")
    zero = laneway.run("--json", "budget", "set", "--scope", "workspace", "--limit-usd", "-0")
    assert zero.exit_code == 1
    assert json.loads(zero.stdout or zero.stderr)["error"] == (
        "budget limit: must be more than 0, got 0.0"
    )
    # a limit written before laneway refused them
    from tests.conftest import open_host

    with open_host(laneway.url) as host, host.store.transaction() as uow:
        uow.conn.execute(sa.update(t.budgets).values(limit_usd=float("inf")))
    listed = laneway.run("--json", "budget", "list")
    assert listed.exit_code == 0, listed.output
    (budget,) = json.loads(listed.stdout, parse_constant=_no_constant)
    assert budget["limit_usd"] is None
    with open_host(laneway.url) as host:
        with TestClient(build_app(host, token=TOKEN), raise_server_exceptions=False) as client:
            answer = client.get("/api/budgets", headers=AUTH)
    assert answer.status_code == 200, answer.text
    assert json.loads(answer.text, parse_constant=_no_constant)[0]["limit_usd"] is None


def _no_constant(name: str) -> Any:
    raise AssertionError(f"{name} is not JSON")


def _path(route: Route, task: str) -> str:
    """The route's path with a real task (and a made-up id for anything else)."""
    path = route.path.replace("{t}", task)
    for name in route.param_convertors:
        path = path.replace("{" + name + "}", "01a0000000000000")
    return path


def test_issue_38_item_9_every_route_refuses_non_finite_numbers(host: Host, tmp_path: Path) -> None:
    """Every POST/PATCH/DELETE route with non-finite numbers in its body, every GET route
    with them in its query: a JSON 4xx naming the field, never a 500."""
    from core.workflows import reading  # noqa: F401 - loaded before the app

    (tmp_path / "wf.yml").write_text(
        "id: p\nname: P\nsteps:\n  - {id: a, name: A, position: 0, is_start_step: true}\n"
    )
    (workflow,) = host.workflows.import_file(tmp_path / "wf.yml")
    task = host.tasks.create(workflow=workflow.id, title="t").id
    table = [r for r in routes.ROUTES if isinstance(r, Route)]
    assert any(r.path == "/api/budgets" and "POST" in (r.methods or ()) for r in table)
    with TestClient(build_app(host, token=TOKEN), raise_server_exceptions=False) as client:
        for route in table:
            path = _path(route, task)
            for method in sorted((route.methods or set()) - {"HEAD"}):
                if method == "GET":
                    for bad in BAD:
                        query = {k: bad for k in ("after", "limit", "since", "step", "days")}
                        answer = client.get(path, params=query, headers=AUTH)
                        assert answer.status_code < 500, (path, bad, answer.text)
                    continue
                for bad in ("Infinity", "-Infinity", "NaN", "1e999", "-1e999"):
                    body = (
                        '{"limit_usd": 1, "scope": "workspace", "nested": {"n": [1, ' + bad + "]}}"
                    )
                    answer = client.request(
                        method,
                        path,
                        content=body,
                        headers={**AUTH, "Content-Type": "application/json"},
                    )
                    assert 400 <= answer.status_code < 500, (method, path, bad, answer.text)
                    error = answer.json()["error"]
                    if path.endswith("/import"):  # a workflow file, read as YAML or JSON
                        continue
                    assert error == f"field 'nested.n[1]': {bad} is not a finite number", (
                        method,
                        path,
                        error,
                    )
        # -0 is 0: refused by the limit's own rule, said as 0
        answer = client.post(
            "/api/budgets", content='{"scope": "workspace", "limit_usd": -0.0}', headers=AUTH
        )
        assert answer.json()["error"] == "budget limit: must be more than 0, got 0.0"


TEMPLATE = {
    "id": "full",
    "name": "Full",
    "max_step_arrivals": 5,
    "steps": [
        {
            "id": "a",
            "name": "A",
            "position": 0,
            "is_start_step": True,
            "auto_archive_after_hours": 1,
            "heartbeat_seconds": 60,
            "events": {"on_enter": [{"type": "add_comment", "config": {"body": "x", "n": 1.5}}]},
        },
        {"id": "b", "name": "B", "position": 1},
    ],
}
PORTABLE = {
    "version": 1,
    "type": "kandev_workflow",
    "workflows": [
        {
            "name": "Portable",
            "max_step_arrivals": 5,
            "steps": [
                {
                    "name": "A",
                    "position": 0,
                    "is_start_step": True,
                    "wip_limit": 2,
                    "pull_from_step_position": 1,
                    "auto_archive_after_hours": 1,
                    "heartbeat_seconds": 60,
                },
                {"name": "B", "position": 1},
            ],
        }
    ],
}


def _holder(doc: Any, key: str) -> dict[str, Any]:
    """The first mapping in `doc` that has `key`."""
    if isinstance(doc, dict):
        if key in doc:
            return doc
        children = list(doc.values())
    elif isinstance(doc, list):
        children = doc
    else:
        children = []
    for child in children:
        found = _holder(child, key)
        if found:
            return found
    return {}


@pytest.mark.parametrize("document", [TEMPLATE, PORTABLE], ids=["template", "portable"])
def test_issue_38_item_9_every_numeric_field_of_a_workflow_file_refuses_non_finite_numbers(
    monkeypatch: pytest.MonkeyPatch, document: dict[str, Any]
) -> None:
    seen: set[str] = set()
    original = formats.integer

    def spy(at: Any, raw: Any, key: str, *args: Any, **kwargs: Any) -> Any:
        seen.add(key)
        return original(at, raw, key, *args, **kwargs)

    monkeypatch.setattr(formats, "integer", spy)
    assert load.decode_document(json.loads(json.dumps(document)))
    monkeypatch.setattr(formats, "integer", original)
    assert {"position", "max_step_arrivals", "heartbeat_seconds"} <= seen
    for key in sorted(k for k in seen if _holder(document, k)):  # the ones this format has
        for bad in (math.inf, -math.inf, math.nan, float("1e999")):
            doc = json.loads(json.dumps(document))
            _holder(doc, key)[key] = bad
            with pytest.raises(WorkflowFileError) as raised:
                load.decode_document(doc)
            assert key in str(raised.value), (key, raised.value)
            assert "\n" not in str(raised.value)
    # a number in an action's config: the same rule, and in YAML as in JSON
    for bad in (".inf", "-.inf", ".nan", "1.0e+999"):
        text = (
            "id: y\nname: Y\nsteps:\n  - id: a\n    name: A\n    position: 0\n"
            "    is_start_step: true\n    events:\n      on_enter:\n"
            f"        - {{type: add_comment, config: {{body: x, n: {bad}}}}}\n"
        )
        with pytest.raises(WorkflowFileError) as raised:
            load.load_text(text, "y.yml")
        assert "is not a finite number" in str(raised.value), raised.value
        assert "config.n" in str(raised.value)
