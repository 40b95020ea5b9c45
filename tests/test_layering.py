"""The dependency rule of DESIGN.md: core never imports a plugin package (plugins reach core
through its public API, and core learns about kinds only from what plugins register)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

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


# -- the import-linter contracts (issue 12 item 7) -----------------------------------------------
#
# Each contract of pyproject.toml [tool.importlinter] is run by `lint-imports` in .ci/run. These
# tests prove that the real tree keeps each one and that each one FAILS when a module that
# breaks it is planted in a copy of the tree: a contract that cannot fail checks nothing.
# A new contract is proven by one more line in PLANTED.

PLANTED: dict[str, list[tuple[str, str]]] = {
    # contract id -> [(module planted in the copy, the import it makes)]
    "core-layers": [
        ("core/store/planted.py", "import core.host\n"),
        ("core/store/planted_up.py", "from core import transition\n"),
    ],
    "core-no-plugin-packages": [
        ("core/planted.py", "import office_plugin.kinds\n"),
        ("core/services/planted.py", "from kanban_plugin import kinds\n"),
        ("core/planted_kit.py", "from plugins.testing import hosts\n"),
    ],
    "plugins-on-public-api": [
        ("office_plugin/planted.py", "from core.agents.failure import payload_of\n"),
        ("kanban_plugin/planted.py", "from core.plugin.kinds import ActionKind\n"),
        ("laneway_notify/planted.py", "from core.model import Task\n"),
        ("office_plugin/planted_manager.py", "from core.plugin.loading import PluginSelection\n"),
    ],
    "plugins-independent": [
        ("kanban_plugin/planted.py", "import office_plugin.quorum\n"),
    ],
    "kit-on-public-surfaces": [
        ("plugins/testing/planted.py", "from core.store import tables\n"),
        ("plugins/testing/planted_entry.py", "from core.entry import redispatch\n"),
        ("plugins/testing/planted_ledger.py", "import core.ledger\n"),
    ],
}
"""The lead adds the core layers contract here, e.g.
``"core-layers": [("core/store/planted.py", "import core.host\\n")],``."""

NOTIFY_SRC = REPO / "docs" / "examples" / "laneway-notify" / "src" / "laneway_notify"
TREES = {
    "core": REPO / "core",
    "plugins": REPO / "plugins",
    "office_plugin": REPO / "office_plugin",
    "kanban_plugin": REPO / "kanban_plugin",
    "laneway_notify": NOTIFY_SRC,
}


def lint_imports(root: Path, contract: str) -> subprocess.CompletedProcess[str]:
    """Run `lint-imports` on the packages under `root` (first on the path), one contract."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache", "--contract", contract],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packages and the contract config, copied: plants never touch the real tree."""
    root = tmp_path_factory.mktemp("tree")
    for name, source in TREES.items():
        shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def test_every_proven_contract_is_configured() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    configured = {c["id"] for c in config["contracts"]}
    assert set(PLANTED) <= configured
    assert configured - set(PLANTED) <= {"core-layers"}  # the lead's, proven when it lands


@pytest.mark.slow  # starts lint-imports: the subprocess tier
@pytest.mark.parametrize("contract", sorted(PLANTED))
def test_the_tree_keeps_the_contract(contract: str, tree_copy: Path) -> None:
    """Issue 12 item 7: the layering rule holds in the code as it stands."""
    result = lint_imports(tree_copy, contract)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout


@pytest.mark.slow  # starts lint-imports: the subprocess tier
@pytest.mark.parametrize(
    ("contract", "planted", "line"),
    [(c, path, line) for c, plants in sorted(PLANTED.items()) for path, line in plants],
)
def test_a_planted_violation_breaks_the_contract(
    contract: str, planted: str, line: str, tree_copy: Path
) -> None:
    """Issue 12 item 7: each contract fails on a module that breaks it, naming the module."""
    module = tree_copy / planted
    module.write_text(line)
    try:
        result = lint_imports(tree_copy, contract)
    finally:
        module.unlink()
    assert result.returncode == 1, result.stdout + result.stderr
    assert "0 kept, 1 broken" in result.stdout
    assert planted.removesuffix(".py").replace("/", ".") in result.stdout


# -- the agent wing's own order (issue 37 item 3) ------------------------------------------------
#
# core-layers orders the wing top to bottom (worker > session > runtime > turns > protocols |
# failure > record | stops | tools | guards > the leaves > values, all above the services and
# below the host). Each rule is proven by an import that breaks it, appended to a module of the
# layer it leaves: an upward one, or a sideways one between `|` siblings.

WING_PLANTS: list[tuple[str, str]] = [
    # (module the import is appended to, the import)
    ("core/agents/worker.py", "import core.host\n"),  # the worker sits below the host
    ("core/agents/worker.py", "import core.runtime\n"),  # below the old names' aliases
    ("core/agents/session.py", "import core.agents.worker\n"),  # session < worker
    ("core/agents/runtime.py", "import core.agents.session\n"),  # runtime < session
    ("core/agents/turns.py", "import core.agents.runtime\n"),  # turns < runtime
    ("core/agents/protocols/exec.py", "import core.agents.turns\n"),  # protocols < turns
    ("core/agents/failure.py", "import core.agents.turns\n"),  # failure < turns
    ("core/agents/failure.py", "import core.agents.protocols.exec\n"),  # protocols | failure
    ("core/agents/protocols/exec.py", "import core.agents.failure\n"),  # failure | protocols
    ("core/agents/record.py", "import core.agents.failure\n"),  # record < failure
    ("core/agents/stops.py", "import core.agents.protocols\n"),  # stops < protocols
    ("core/agents/tools/access.py", "import core.agents.protocols.acp.facade\n"),  # tools <
    ("core/agents/stops.py", "import core.agents.record\n"),  # record | stops
    ("core/agents/guards.py", "import core.agents.stops\n"),  # stops | guards
    ("core/agents/bounds.py", "import core.agents.record\n"),  # the leaves < record
    ("core/agents/feedback.py", "import core.agents.tools.broker\n"),  # the leaves < tools
    ("core/agents/desired.py", "import core.agents.bounds\n"),  # leaves | leaves
    ("core/agents/values.py", "import core.agents.bounds\n"),  # values < the leaves
    ("core/services/runs.py", "import core.agents.values\n"),  # the services < the wing
]


@pytest.mark.slow  # starts lint-imports: the subprocess tier
@pytest.mark.parametrize(("planted", "line"), WING_PLANTS)
def test_issue_37_item_3_each_rule_of_the_wings_order_fails_on_a_planted_import(
    planted: str, line: str, tree_copy: Path
) -> None:
    """Issue 37 item 3: each import rule of the agent wing's layer order breaks core-layers
    when a module breaks it, and the break names that module."""
    module = tree_copy / planted
    original = module.read_text()
    module.write_text(original + line)
    try:
        result = lint_imports(tree_copy, "core-layers")
    finally:
        module.write_text(original)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "0 kept, 1 broken" in result.stdout
    assert planted.removesuffix(".py").replace("/", ".") in result.stdout
