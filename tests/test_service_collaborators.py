"""Issue 37 item 2: services name their collaborators, and no two name each other.

Each service in core/services/ names the services it calls in its constructor (a keyword
parameter typed `Lazy[XService]`); those are the caller -> callee arrows. Two services naming
each other (participants <-> workflows, sessions <-> tasks, workflows <-> workspace, blockers
<-> tasks before this issue) is a circle a reader cannot read top to bottom: the lower one
now reads what it needs through a plain function (`core.services.refs.find_task`,
`find_workflow`, `core.services.workspace.default_workspace`,
`core.services.participants.merged_seats`). Read from the source, so the check needs no host.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

SERVICES = Path(__file__).resolve().parents[1] / "core" / "services"


def _lazy_target(annotation: ast.expr | None) -> str | None:
    """`XService` of a `Lazy[XService]` annotation (a string under `from __future__`)."""
    if annotation is None:
        return None
    text = ast.unparse(annotation).strip("'\"")
    if text.startswith("Lazy[") and text.endswith("]"):
        return text[len("Lazy[") : -1]
    return None


def collaborators(root: Path = SERVICES) -> dict[str, set[str]]:
    """Each service class -> the service classes its constructor names."""
    found: dict[str, set[str]] = {}
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ClassDef) or not node.name.endswith("Service"):
                continue
            named: set[str] = set()
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    params = [*item.args.args, *item.args.kwonlyargs]
                    named |= {t for p in params if (t := _lazy_target(p.annotation))}
            found[node.name] = named
    return found


def pairs(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(caller, callee) for caller, callees in graph.items() for callee in callees}


def mutual(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    arrows = pairs(graph)
    return {frozenset((a, b)) for a, b in arrows if (b, a) in arrows}


def test_issue_37_item_2_no_two_services_name_each_other() -> None:
    graph = collaborators()
    assert {"TaskService", "SessionService", "WorkflowService", "WorkspaceService"} <= set(graph)
    assert pairs(graph), "no caller -> callee arrows found: the constructors' form changed?"
    assert mutual(graph) == set()
    # and no longer circle either: the services read top to bottom
    tuple(graphlib.TopologicalSorter(graph).static_order())


def test_issue_37_item_2_a_planted_mutual_pair_is_found(tmp_path: Path) -> None:
    """The check itself: two services naming each other are reported as one pair."""
    (tmp_path / "a.py").write_text(
        "class AService(Service):\n"
        "    def __init__(self, peers: Peers, *, b: Lazy[BService]) -> None: ...\n"
    )
    (tmp_path / "b.py").write_text(
        "class BService(Service):\n"
        "    def __init__(self, peers: Peers, *, a: 'Lazy[AService]') -> None: ...\n"
    )
    graph = collaborators(tmp_path)
    assert pairs(graph) == {("AService", "BService"), ("BService", "AService")}
    assert mutual(graph) == {frozenset({"AService", "BService"})}
