"""The dependency rule of DESIGN.md: core never imports a plugin package (plugins reach core
through its public API, and core learns about kinds only from what plugins register)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLUGIN_PACKAGES = frozenset({"kanban_plugin", "office_plugin"})


def imported_packages(source: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_the_check_sees_both_import_forms() -> None:
    assert imported_packages("import office_plugin.kinds\nfrom kanban_plugin import x") == {
        "office_plugin",
        "kanban_plugin",
    }


def test_core_never_imports_a_plugin_package() -> None:
    offenders = {
        str(path.relative_to(REPO)): sorted(used & PLUGIN_PACKAGES)
        for path in (REPO / "core").rglob("*.py")
        if (used := imported_packages(path.read_text())) & PLUGIN_PACKAGES
    }
    assert offenders == {}
