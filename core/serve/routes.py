"""The API of HTTP.md: each route calls the service the matching CLI command calls and answers
the same JSON shape (`core.shapes`). Routes past HTTP.md's table (`/api/board`,
`/api/tasks/{t}/decisions`) only read, and exist so the board page needs few requests."""

from __future__ import annotations

from typing import Any, Final

from starlette.responses import Response
from starlette.routing import Route

from core import actors
from core.model import Decision, Participant
from core.serve import roles
from core.serve.http import Call, Reply, bad, endpoint
from core.services import users
from core.services.refs import check_search
from core.shapes import (
    decision_result_json,
    entry_json,
    item_json,
    plain,
    run_show_json,
    session_json,
    template_json,
    trigger_json,
    workflow_json,
)
from core.store import migrate
from core.workflows import to_yaml

# -- the host and workflows ----------------------------------------------------------------------


def info(call: Call) -> Reply:
    host = call.host
    with host.store.read() as conn:
        revision = migrate.current_revision(conn)
    return Reply(
        {
            "database": host.store.display_url,
            "revision": revision,
            "epoch": host.epoch,
            "plugins": host.plugins.list(),
        }
    )


def workflows_list(call: Call) -> Reply:
    return Reply([workflow_json(wf) for wf in call.host.workflows.list()])


def workflow_templates(call: Call) -> Reply:
    return Reply([template_json(d) for d in call.host.workflows.templates()])


def workflow_create(call: Call) -> Reply:
    wf = call.host.workflows.create_from_template(call.text("template"), name=call.opt_text("name"))
    return Reply(workflow_json(wf), status=201)


def workflow_import(call: Call) -> Reply:
    try:
        text = call.raw.decode("utf-8")
    except UnicodeDecodeError:
        raise bad("body: not UTF-8 text") from None
    if not text.strip():
        raise bad("body: empty; expected a workflow template or a portable document (YAML)")
    imported = call.host.workflows.import_text(text)
    return Reply([workflow_json(wf) for wf in imported], status=201)


def workflow_show(call: Call) -> Reply:
    return Reply(workflow_json(call.host.workflows.get(call.path["w"])))


def workflow_export(call: Call) -> Reply:
    document = call.host.workflows.export(call.path["w"])
    fmt = call.query.get("format", "json")
    if fmt == "yaml":
        return Reply(response=Response(to_yaml(document), media_type="application/yaml"))
    if fmt != "json":
        raise bad(f"query 'format': expected json or yaml, got {fmt!r}")
    return Reply(document)


# -- tasks -----------------------------------------------------------------------------------------


def tasks_list(call: Call) -> Reply:
    found = call.host.tasks.list(
        workflow=call.query.get("workflow"),
        step=call.query.get("step"),
        state=call.query.get("state"),
        search=call.query.get("search"),
    )
    return Reply(found)


def task_create(call: Call) -> Reply:
    created = call.host.tasks.create(
        workflow=call.text("workflow"),
        title=call.text("title"),
        description=call.opt_text("description") or "",
        step=call.opt_text("step"),
        project=call.opt_text("project"),
        repository=call.opt_text("repository"),
        base_branch=call.opt_text("base_branch"),
        parent=call.opt_text("parent"),
    )
    return Reply(created, status=201)


def task_diff(call: Call) -> Reply:
    from core.services import worktrees

    return Reply(worktrees.diff(call.host, call.path["t"]))


def task_show(call: Call) -> Reply:
    return Reply(call.host.tasks.get(call.path["t"]))


def task_move(call: Call) -> Reply:
    return Reply(call.host.tasks.move(call.path["t"], call.text("step")))


def task_start(call: Call) -> Reply:
    step = call.opt_text("step") if call.body is not None else None
    return Reply(call.host.tasks.start(call.path["t"], step=step))


def task_switch_workflow(call: Call) -> Reply:
    switched = call.host.tasks.switch_workflow(
        call.path["t"], workflow=call.text("workflow"), step=call.opt_text("step")
    )
    return Reply(switched)


def task_archive(call: Call) -> Reply:
    return Reply(call.host.tasks.archive(call.path["t"]))


def task_update(call: Call) -> Reply:
    """PATCH: a new title or description, or both (a step moves through /move or /start)."""
    title, description = call.opt_text("title"), call.opt_text("description")
    if title is None and description is None:
        raise bad("body: give 'title' or 'description'")
    return Reply(call.host.tasks.update(call.path["t"], title=title, description=description))


def task_unarchive(call: Call) -> Reply:
    return Reply(call.host.tasks.unarchive(call.path["t"]))


def task_delete(call: Call) -> Reply:
    return Reply({"deleted": call.host.tasks.delete(call.path["t"])})


def task_turn_complete(call: Call) -> Reply:
    session = call.opt_text("session") if call.body is not None else None
    return Reply(trigger_json(call.host.turns.complete(call.path["t"], session)))


ADMIN_ACTOR: Final = actors.user(users.ADMIN_NAME)
"""Who the board's admin token acts as: its scripts may write in another's name."""


def person_named(call: Call, field: str) -> str | None:
    """The name a person's request writes in `field`: their own actor, whatever the body says
    (a body naming anyone else is a 400), since a person must not speak for another; None for
    the admin token (and for no person at all), whose scripts post for others."""
    actor = actors.current()
    if actor == ADMIN_ACTOR or not actor.startswith("user:"):
        return None
    given = call.opt_text(field)
    if given is not None and given not in (actor, actor.removeprefix("user:")):
        raise bad(f"field {field!r}: a person writes as themselves ({actor}), not as {given!r}")
    return actor


def task_comments(call: Call) -> Reply:
    return Reply(call.host.comments.list(call.path["t"]))


def task_comment(call: Call) -> Reply:
    """As `task comment`: `{"body", "author"?, "file"?, "line"?}`; a person's comment is
    theirs (`person_named`)."""
    body = call.text("body")
    author = person_named(call, "author") or call.opt_text("author")
    added = call.host.comments.add(
        call.path["t"],
        body,
        author=author,
        file=call.opt_text("file"),
        line=call.opt_int("line"),
    )
    return Reply(added, status=201)


def task_history(call: Call) -> Reply:
    """As `task history --json`: the task's retained events, each with its actor."""
    from core.services.history import task_history as history

    return Reply(history(call.host, call.path["t"]))


def task_merge(call: Call) -> Reply:
    body = call.body if call.body is not None else {}
    strategy = into = None
    if body:
        strategy, into = call.opt_text("strategy"), call.opt_text("into")
    return Reply(call.host.changes.merge(call.path["t"], strategy=strategy, into=into))


def task_push(call: Call) -> Reply:
    return Reply(call.host.changes.push(call.path["t"]))


def task_entries(call: Call) -> Reply:
    found = call.host.entries.list(task=call.path["t"])
    return Reply([entry_json(e, markers) for e, markers in found])


def entries_list(call: Call) -> Reply:
    found = call.host.entries.list(
        task=call.query.get("task"), non_terminal=call.flag("non_terminal")
    )
    return Reply([entry_json(e, markers) for e, markers in found])


def runs_list(call: Call) -> Reply:
    found = call.host.runs.list(task=call.query.get("task"), status=call.query.get("status"))
    waits = call.host.runs.waits_for_host(found)
    behind = call.host.runs.waits_for_run(found)
    # the CLI's shape: `waits_for_host` (issue 43) and `waits_for_run` beside each row
    return Reply(
        [
            {**plain(r), "waits_for_host": waits.get(r.id), "waits_for_run": behind.get(r.id)}
            for r in found
        ]
    )


# -- decisions and sessions ------------------------------------------------------------------------


def decision_record(call: Call) -> Reply:
    result = call.host.decisions.record(
        call.text("task"),
        call.text("step"),
        call.text("participant"),
        call.text("verdict"),
        comment=call.opt_text("comment") or "",
    )
    return Reply(decision_result_json(result))


def task_decisions(call: Call) -> Reply:
    """The seats at the task's step (or `?step=`), each with its standing verdict, and every
    decision recorded there, oldest first."""
    host = call.host
    task = host.tasks.get(call.path["t"])
    step_ref = call.query.get("step")
    if task.workflow_id is None or (task.workflow_step_id is None and step_ref is None):
        return Reply({"step_id": None, "seats": [], "decisions": [], "earlier": []})
    if step_ref is not None:
        step = host.workflows.step(host.workflows.by_id(task.workflow_id), step_ref)
    else:
        assert task.workflow_step_id is not None
        step = host.workflows.step_by_id(task.workflow_step_id)[1]
    seats = host.participants.seats_at(task.id, step.id)
    every = host.decisions.rounds(task.id, step.id)
    decisions = [d for d in every if not d.cleared]
    # `earlier`: the rounds a new entry cleared, so the panel keeps a reviewer's reasons.
    return Reply(
        {
            "step_id": step.id,
            "seats": _seats(seats, decisions),
            "decisions": decisions,
            "earlier": [d for d in every if d.cleared],
        }
    )


def decisions_list(call: Call) -> Reply:
    """As `decision list --task T [--step S] [--all]`."""
    task = call.query.get("task")
    if not task:
        raise bad("query 'task': GET /api/decisions needs ?task=T")
    return Reply(
        call.host.decisions.for_task(task, call.query.get("step"), all_rounds=call.flag("all"))
    )


def _standing(decisions: list[Decision]) -> dict[str, Decision]:
    return {d.participant_id: d for d in decisions if d.superseded_at is None}


def _seats(seats: list[Participant], decisions: list[Decision]) -> list[dict[str, Any]]:
    standing = _standing(decisions)
    return [
        {**plain(s), "verdict": standing[s.id].decision if s.id in standing else None}
        for s in seats
    ]


def sessions_list(call: Call) -> Reply:
    task = call.query.get("task")
    if not task:
        raise bad("query 'task': required")
    found = call.host.sessions.list(task=task)
    profiles = call.host.profiles.list()
    return Reply([session_json(s, profiles) for s in found])


def session_send(call: Call) -> Reply:
    sent = call.host.sessions.send(call.host.sessions.find(call.path["s"]).id, call.text("text"))
    return Reply(session_json(sent, call.host.profiles.list()))


MAX_ID: Final = 2**63 - 1
"""The largest sequence number or id a query may name (a BIGINT column)."""


def _count(call: Call, name: str, default: int) -> int:
    raw = call.query.get(name)
    if raw is None:
        return default
    try:
        number = int(raw)
    except ValueError:
        raise bad(f"query {name!r}: expected a whole number, got {raw!r}") from None
    if abs(number) > MAX_ID:
        # never handed to the driver: PostgreSQL's BIGINT would refuse it in its own words
        raise bad(f"query {name!r}: must be at most {MAX_ID}")
    return number


def session_transcript(call: Call) -> Reply:
    """As `session log --json`, a page at a time: `?after=SEQ&limit=N` (default 100)."""
    host = call.host
    session = host.sessions.find(call.path["s"])
    run = call.query.get("run")
    items = host.sessions.items(
        session.id,
        run_id=host.runs.find(run).id if run else None,
        after=_count(call, "after", 0),
        limit=_count(call, "limit", 100),
    )
    return Reply([item_json(i) for i in items])


def run_show(call: Call) -> Reply:
    """As `runs show --json`: the run and its transcript."""
    run = call.host.runs.find(call.path["r"])
    return Reply(run_show_json(run, call.host.sessions.run_items(run.id)))


def permissions_list(call: Call) -> Reply:
    """As `permission list`: `?task=T&state=S` narrow it."""
    return Reply(
        call.host.permissions.list(task=call.query.get("task"), state=call.query.get("state"))
    )


def permission_answer(call: Call) -> Reply:
    """As `permission allow|deny`: `{"outcome": "allow"|"deny", "always"?, "by"?}`; a person's
    answer is theirs (`person_named`)."""
    outcome = call.text("outcome")
    if outcome not in ("allow", "deny"):
        raise bad(f"field 'outcome': expected allow or deny, got {outcome!r}")
    always = call.obj().get("always", False)
    if not isinstance(always, bool):
        raise bad("field 'always': expected a boolean")
    by = person_named(call, "by") or call.opt_text("by")
    answered = call.host.permissions.answer(
        call.path["p"], outcome == "allow", always=always, by=by if by is not None else "user"
    )
    return Reply(answered)


def questions_list(call: Call) -> Reply:
    """As `question list`: `?task=T&state=S` narrow it."""
    return Reply(
        call.host.questions.list(task=call.query.get("task"), state=call.query.get("state"))
    )


def question_answer(call: Call) -> Reply:
    """As `question answer`: `{"answer": {name: value}}` or `{"decline": true}`."""
    body = call.obj()
    decline = body.get("decline", False)
    if not isinstance(decline, bool):
        raise bad("field 'decline': expected a boolean")
    answer = body.get("answer")
    if decline and answer is not None:
        raise bad("give either 'answer' or 'decline', not both")
    if not decline and not isinstance(answer, dict):
        raise bad("field 'answer': expected an object of field values (or 'decline': true)")
    answered = call.host.questions.answer(
        call.path["q"], answer, decline=decline, by=actors.current()
    )
    return Reply(answered)


def hooks_list(call: Call) -> Reply:
    """As `hook list`: never a secret. A hook's URL may itself be one (a Slack or Discord
    webhook's path is its credential): only an admin, who adds and removes hooks, reads it
    whole; a viewer or operator sees where it goes, `scheme://host[:port]/***`."""
    from core.services import hooks

    found = [h.as_json() for h in hooks.list_hooks(call.host.store)]
    if not roles.allows(call.role, roles.ADMIN):
        for hook in found:
            hook["url"] = hooks.url_origin(hook["url"])
    return Reply(found)


def hook_add(call: Call) -> Reply:
    """As `hook add`: `{"url", "events"?: [type], "secret"?}` (the secret is stored, never
    answered)."""
    from core.services import hooks

    url = call.text("url")
    types = call.obj().get("events") or []
    if not isinstance(types, list) or not all(isinstance(x, str) for x in types):
        raise bad("field 'events': expected a list of event types")
    secret = call.opt_text("secret")
    made = hooks.add(
        call.host.store, hooks.check_url(url), hooks.parse_events(",".join(types)), secret or None
    )
    return Reply(made.as_json(), status=201)


def hook_remove(call: Call) -> Reply:
    """As `hook remove`."""
    from core.services import hooks

    return Reply(hooks.remove(call.host.store, call.path["h"]).as_json())


def schedules_list(call: Call) -> Reply:
    """As `schedule list`."""
    return Reply([s.as_json() for s in call.host.schedules.list()])


def schedule_add(call: Call) -> Reply:
    """As `schedule add`: `{"workflow", "title", "every", "description"?, "step"?}`."""
    every = call.obj().get("every")
    if every is None or isinstance(every, bool) or not isinstance(every, (int, float, str)):
        raise bad("field 'every': expected a whole number of seconds")
    made = call.host.schedules.add(
        workflow=call.text("workflow"),
        title=call.text("title"),
        every=str(every),
        description=call.opt_text("description") or "",
        step=call.opt_text("step"),
    )
    return Reply(made.as_json(), status=201)


def schedule_remove(call: Call) -> Reply:
    """As `schedule remove`."""
    return Reply({"removed": call.host.schedules.remove(call.path["s"]).id})


def hook_deliveries(call: Call) -> Reply:
    """As `hook deliveries`: `?hook=H&state=S` narrow it."""
    from core.services import hooks

    state = call.query.get("state")
    if state is not None and state not in hooks.STATES:
        raise bad(f"query 'state': expected one of {', '.join(hooks.STATES)}, got {state!r}")
    found = hooks.deliveries(call.host.store, hook_id=call.query.get("hook"), state=state)
    return Reply([d.as_json() for d in found])


def run_cancel(call: Call) -> Reply:
    """As `runs cancel`: a queued run ends now; a running one's worker stops its turn."""
    return Reply(call.host.runs.cancel(call.path["r"]))


def run_retry(call: Call) -> Reply:
    """As `runs retry`: the new attempt (a new run, `retry_of` the old one)."""
    return Reply(call.host.runs.retry(call.path["r"]))


def task_cancel(call: Call) -> Reply:
    """As `task cancel`."""
    task = call.host.tasks.get(call.path["t"])
    return Reply({"cancelled": call.host.runs.cancel_task(task.id)})


def session_cancel_retry(call: Call) -> Reply:
    # As `session cancel-retry`: recorded on the session for whichever process runs the loop,
    # and handed to this process's runtime in case the loop runs here.
    session_id = call.host.sessions.find(call.path["s"]).id
    cancelled = call.host.sessions.request_cancel_retry(session_id)
    call.host.runtime.cancel_retry(cancelled.id)
    return Reply(session_json(cancelled, call.host.profiles.list()))


# -- the board page's one-request view -------------------------------------------------------------


def board(call: Call) -> Reply:
    """A workflow with its tasks, each with the badges a card shows (`GET /api/board`):
    `?step=`, `?q=`, `?limit=` and `?cursor=` narrow it (docs/serve.md)."""
    from core.serve import board_view

    host = call.host
    ref = call.query.get("workflow")
    if not ref:
        raise bad("query 'workflow': required")
    wf = host.workflows.get(ref)
    step_ref = call.query.get("step")
    step_id = host.workflows.step(wf, step_ref).id if step_ref else None
    limit = None
    if call.query.get("limit") is not None:
        limit = _count(call, "limit", 0)
        if not 1 <= limit <= board_view.MAX_LIMIT:
            raise bad(f"query 'limit': expected 1 to {board_view.MAX_LIMIT}, got {limit}")
    after = None
    cursor = call.query.get("cursor")
    if cursor:
        try:
            after = board_view.decode_cursor(cursor)
        except board_view.BadCursor:
            raise bad("query 'cursor': not a cursor this server gave") from None
    counts = call.query.get("counts", "1")
    if counts not in ("0", "1"):
        raise bad(f"query 'counts': expected 0 or 1, got {counts!r}")
    query = board_view.BoardQuery(
        step_id=step_id,
        q=_search(call.query.get("q")),
        limit=limit,
        after=after,
        counts=counts == "1",
    )
    call.check()
    with host.store.read() as conn:
        view = board_view.read(conn, wf, query, call.check)
    over = host.budgets.over_budget_tasks([card["id"] for card in view["tasks"]])
    for card in view["tasks"]:
        card["over_budget"] = card["id"] in over
    return Reply(response=Response(board_view.encode(view), media_type="application/json"))


# -- triggers: blockers, budgets, costs (issue 24) ----------------------------------------------


def task_block(call: Call) -> Reply:
    """As `task block T --by B`: body `{"by"}`."""
    return Reply(call.host.blockers.block(call.path["t"], call.text("by")))


def task_unblock(call: Call) -> Reply:
    """As `task unblock T --by B`: body `{"by"}`."""
    return Reply(call.host.blockers.unblock(call.path["t"], call.text("by")))


def costs(call: Call) -> Reply:
    """As `costs [--task T] [--profile P]`: `?task=T&profile=P`."""
    return Reply(
        call.host.budgets.costs(task=call.query.get("task"), profile=call.query.get("profile"))
    )


def budgets_list(call: Call) -> Reply:
    """As `budget list`."""
    return Reply(call.host.budgets.list())


def budget_set(call: Call) -> Reply:
    """As `budget set`: body `{"scope", "limit_usd", "ref"?, "period"?, "thresholds"?}`."""
    body = call.obj()
    limit = body.get("limit_usd")
    if isinstance(limit, bool) or not isinstance(limit, int | float):
        raise bad("field 'limit_usd': expected a number")
    thresholds = body.get("thresholds")
    if thresholds is not None and (
        not isinstance(thresholds, list)
        or any(isinstance(p, bool) or not isinstance(p, int) for p in thresholds)
    ):
        raise bad("field 'thresholds': expected a list of whole percentages")
    found = call.host.budgets.set(
        scope=call.text("scope"),
        ref=call.opt_text("ref"),
        limit_usd=float(limit),
        period=call.opt_text("period") or "total",
        thresholds=thresholds,
    )
    return Reply(found, status=201)


TRIGGER_ROUTES = [
    Route("/api/tasks/{t}/block", endpoint(task_block), methods=["POST"]),
    Route("/api/tasks/{t}/unblock", endpoint(task_unblock), methods=["POST"]),
    Route("/api/costs", endpoint(costs), methods=["GET"]),
    Route("/api/budgets", endpoint(budgets_list), methods=["GET"]),
    Route("/api/budgets", endpoint(budget_set), methods=["POST"]),
]


ROUTES = [
    Route("/api/info", endpoint(info), methods=["GET"]),
    Route("/api/workflows", endpoint(workflows_list), methods=["GET"]),
    Route("/api/workflows", endpoint(workflow_create), methods=["POST"]),
    Route("/api/workflows/templates", endpoint(workflow_templates), methods=["GET"]),
    Route("/api/workflows/import", endpoint(workflow_import, json_body=False), methods=["POST"]),
    Route("/api/workflows/{w}", endpoint(workflow_show), methods=["GET"]),
    Route("/api/workflows/{w}/export", endpoint(workflow_export), methods=["GET"]),
    Route("/api/tasks", endpoint(tasks_list), methods=["GET"]),
    Route("/api/tasks", endpoint(task_create), methods=["POST"]),
    Route("/api/tasks/{t}", endpoint(task_show), methods=["GET"]),
    Route("/api/tasks/{t}", endpoint(task_delete), methods=["DELETE"]),
    Route("/api/tasks/{t}", endpoint(task_update), methods=["PATCH"]),
    Route("/api/tasks/{t}/move", endpoint(task_move), methods=["POST"]),
    Route("/api/tasks/{t}/start", endpoint(task_start), methods=["POST"]),
    Route("/api/tasks/{t}/switch-workflow", endpoint(task_switch_workflow), methods=["POST"]),
    Route("/api/tasks/{t}/archive", endpoint(task_archive), methods=["POST"]),
    Route("/api/tasks/{t}/unarchive", endpoint(task_unarchive), methods=["POST"]),
    Route("/api/tasks/{t}/cancel", endpoint(task_cancel), methods=["POST"]),
    Route("/api/tasks/{t}/turn-complete", endpoint(task_turn_complete), methods=["POST"]),
    Route("/api/tasks/{t}/comments", endpoint(task_comments), methods=["GET"]),
    Route("/api/tasks/{t}/comments", endpoint(task_comment), methods=["POST"]),
    Route("/api/tasks/{t}/entries", endpoint(task_entries), methods=["GET"]),
    Route("/api/tasks/{t}/decisions", endpoint(task_decisions), methods=["GET"]),
    Route("/api/tasks/{t}/diff", endpoint(task_diff), methods=["GET"]),
    Route("/api/tasks/{t}/history", endpoint(task_history), methods=["GET"]),
    Route("/api/tasks/{t}/merge", endpoint(task_merge), methods=["POST"]),
    Route("/api/tasks/{t}/push", endpoint(task_push), methods=["POST"]),
    Route("/api/entries", endpoint(entries_list), methods=["GET"]),
    Route("/api/runs", endpoint(runs_list), methods=["GET"]),
    Route("/api/runs/{r}", endpoint(run_show), methods=["GET"]),
    Route("/api/permissions", endpoint(permissions_list), methods=["GET"]),
    Route("/api/permissions/{p}", endpoint(permission_answer), methods=["POST"]),
    Route("/api/questions", endpoint(questions_list), methods=["GET"]),
    Route("/api/questions/{q}", endpoint(question_answer), methods=["POST"]),
    Route("/api/hooks", endpoint(hooks_list), methods=["GET"]),
    Route("/api/hooks", endpoint(hook_add), methods=["POST"]),
    Route("/api/hooks/deliveries", endpoint(hook_deliveries), methods=["GET"]),
    Route("/api/hooks/{h}", endpoint(hook_remove), methods=["DELETE"]),
    Route("/api/schedules", endpoint(schedules_list), methods=["GET"]),
    Route("/api/schedules", endpoint(schedule_add), methods=["POST"]),
    Route("/api/schedules/{s}", endpoint(schedule_remove), methods=["DELETE"]),
    Route("/api/runs/{r}/cancel", endpoint(run_cancel), methods=["POST"]),
    Route("/api/runs/{r}/retry", endpoint(run_retry), methods=["POST"]),
    Route("/api/decisions", endpoint(decision_record), methods=["POST"]),
    Route("/api/decisions", endpoint(decisions_list), methods=["GET"]),
    Route("/api/sessions", endpoint(sessions_list), methods=["GET"]),
    Route("/api/sessions/{s}/send", endpoint(session_send), methods=["POST"]),
    Route("/api/sessions/{s}/cancel-retry", endpoint(session_cancel_retry), methods=["POST"]),
    Route("/api/sessions/{s}/transcript", endpoint(session_transcript), methods=["GET"]),
    Route("/api/board", endpoint(board, cancellable=True), methods=["GET"]),
    *TRIGGER_ROUTES,
]


def _search(text: str | None) -> str | None:
    """`?q=`, bounded as `task list --search` is (a 400 past it, not the database's refusal)."""
    return check_search(text) if text else None
