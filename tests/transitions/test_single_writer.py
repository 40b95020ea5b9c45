"""Static check: no module outside core/transition.py and the store writes a task's step fields
(workflow_step_id, wip_admitted, queued_for_step_id)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIELDS = frozenset({"workflow_step_id", "wip_admitted", "queued_for_step_id"})
ALLOWED = {REPO / "core" / "transition.py"}
ALLOWED_DIRS = {REPO / "core" / "store"}
RAW_SQL = re.compile(r"(update|insert\s+into)\s+tasks\b", re.IGNORECASE)
TASK_TABLE_NAMES = frozenset({"tasks", "TASKS"})


def _names_tasks_table(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id in TASK_TABLE_NAMES) or (
        isinstance(node, ast.Attribute) and node.attr in TASK_TABLE_NAMES
    )


def _statement_on_tasks(node: ast.AST) -> bool:
    """Whether `node` is (or is built from) `insert(tasks)` / `update(tasks)`."""
    while isinstance(node, ast.Call | ast.Attribute):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("insert", "update") and node.args and _names_tasks_table(node.args[0]):
                return True
            node = func
        else:
            node = node.value
    return False


def _has_field_key(arg: ast.AST) -> bool:
    return isinstance(arg, ast.Dict) and any(
        isinstance(k, ast.Constant) and k.value in FIELDS for k in arg.keys
    )


def writes_step_fields(source: str) -> list[int]:
    """Line numbers where `source` writes a task step field through SQL."""
    hits: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            if attr == "values" and _statement_on_tasks(node.func.value):
                if any(kw.arg in FIELDS for kw in node.keywords) or any(
                    _has_field_key(a) for a in node.args
                ):
                    hits.append(node.lineno)
            elif (
                attr == "execute"
                and node.args
                and _statement_on_tasks(node.args[0])
                and any(_has_field_key(a) for a in node.args[1:])
            ):
                hits.append(node.lineno)
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and RAW_SQL.search(node.value)
            and any(f in node.value for f in FIELDS)
        ):
            hits.append(node.lineno)
    return hits


def product_modules() -> list[Path]:
    found = []
    for package in ("core", "plugins", "office_plugin", "kanban_plugin"):
        for path in (REPO / package).rglob("*.py"):
            if path in ALLOWED or any(d in path.parents for d in ALLOWED_DIRS):
                continue
            found.append(path)
    return found


def test_the_checker_catches_each_shape_of_write() -> None:
    assert writes_step_fields("sa.update(tasks).values(workflow_step_id='x')") == [1]
    assert writes_step_fields("conn.execute(sa.insert(TASKS), {'wip_admitted': True})") == [1]
    assert writes_step_fields("c.exec_driver_sql('UPDATE tasks SET queued_for_step_id = 1')")
    assert writes_step_fields("x = task.workflow_step_id") == []
    assert writes_step_fields("sa.insert(t.tasks).values(**row, wip_admitted=True)") == [1]
    # another table's column of the same name is not a task step field
    assert writes_step_fields("sa.insert(runs).values(workflow_step_id='x')") == []


def test_only_the_transition_module_writes_step_fields() -> None:
    offenders = {
        str(path.relative_to(REPO)): lines
        for path in product_modules()
        if (lines := writes_step_fields(path.read_text()))
    }
    assert offenders == {}
    assert len(product_modules()) > 20  # the scan really looked at the product
