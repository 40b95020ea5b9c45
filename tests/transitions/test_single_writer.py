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
WRITE_CALLS = frozenset({"values", "update", "insert", "execute", "exec_driver_sql"})


def writes_step_fields(source: str) -> list[int]:
    """Line numbers where `source` writes a task step field through SQL."""
    hits: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr not in WRITE_CALLS:
                continue
            for kw in node.keywords:
                if kw.arg in FIELDS:
                    hits.append(node.lineno)
            for arg in node.args:
                if isinstance(arg, ast.Dict) and any(
                    isinstance(k, ast.Constant) and k.value in FIELDS for k in arg.keys
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
    assert writes_step_fields("conn.execute(sa.insert(tasks), {'wip_admitted': True})") == [1]
    assert writes_step_fields("c.exec_driver_sql('UPDATE tasks SET queued_for_step_id = 1')")
    assert writes_step_fields("x = task.workflow_step_id") == []


def test_only_the_transition_module_writes_step_fields() -> None:
    offenders = {
        str(path.relative_to(REPO)): lines
        for path in product_modules()
        if (lines := writes_step_fields(path.read_text()))
    }
    assert offenders == {}
    assert len(product_modules()) > 20  # the scan really looked at the product
