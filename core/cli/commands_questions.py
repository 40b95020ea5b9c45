"""`laneway question`: what agents asked a person (the tool server's `ask`, ACP
`elicitation/create`), answered from any process; the waiting turn goes on with the answer
(CLI.md `question`)."""

from __future__ import annotations

import json

import click

from core import actors
from core.cli.app import Settings, pass_settings, reader, writer
from core.cli.output import emit
from core.errors import LanewayError
from core.model import QUESTION_STATES, Question


def question_line(q: Question) -> str:
    fields = ",".join(f.name for f in q.fields) or "-"
    answer = f"  answer={json.dumps(dict(q.answer), ensure_ascii=False)}" if q.answer else ""
    by = f"  by={q.answered_by}" if q.answered_by else ""
    message = " ".join(q.message.split())
    return (
        f"{q.id}  {q.state}  task={q.task_id}  run={q.run_id or '-'}  fields={fields}  "
        f"{message}{answer}{by}"
    )


@click.group()
def question() -> None:
    """Questions agents asked a person."""


@question.command("list")
@click.option("--task", "task_ref", metavar="T")
@click.option(
    "--state",
    type=click.Choice(QUESTION_STATES, case_sensitive=False),
    help="Only questions in this state.",
)
@pass_settings
def question_list(settings: Settings, task_ref: str | None, state: str | None) -> None:
    """List questions, oldest first."""
    with reader(settings) as host:
        found = host.questions.list(task=task_ref, state=state.lower() if state else None)
    emit(settings.json, found, [question_line(q) for q in found] or ["no questions"])


@question.command("answer")
@click.argument("ref", metavar="ID")
@click.option(
    "--field",
    "given",
    multiple=True,
    metavar="NAME=VALUE",
    help="A field's value (repeat for each field).",
)
@click.option("--decline", is_flag=True, help="Decline to answer; the agent is told so.")
@pass_settings
def question_answer(settings: Settings, ref: str, given: tuple[str, ...], decline: bool) -> None:
    """Answer a pending question; the waiting turn goes on with the answer."""
    if decline and given:
        raise LanewayError("question answer: give --field values or --decline, not both")
    if not decline and not given:
        raise LanewayError("question answer: give --field NAME=VALUE (one per field) or --decline")
    values: dict[str, str] = {}
    for pair in given:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise LanewayError(f"--field {pair!r}: expected NAME=VALUE")
        if name in values:
            raise LanewayError(f"--field {name!r}: given twice")
        values[name] = value
    with writer(settings) as host:
        answered = host.questions.answer(ref, values, decline=decline, by=actors.current())
    emit(settings.json, answered, [question_line(answered)])


COMMANDS: tuple[click.Command, ...] = (question,)
