"""The layer contract tells the truth (house issue 26, item 5): docs/architecture.md's layer
block and pyproject's `core-layers` contract list the same layers in the same order, every core
module sits in a layer, and the layers added for the modules that had none are enforced: a
copy of the tree with an upward (or sideways, between `|` siblings) import planted in one of
them breaks the contract, naming the importer."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[1]
ARCHITECTURE = REPO / "docs" / "architecture.md"
HOLDERS = frozenset({"core", "core.plugin", "core.agents"})
"""Packages whose modules sit in different layers: the package itself imports none of them."""


def contract_layers() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["id"] == "core-layers"]
    return [" ".join(layer.split()) for layer in contract["layers"]]


def documented_layers(markdown: str) -> list[str]:
    """The layer expressions of the first fenced block under `## Layers`: each line's text
    before its description (two or more spaces); a line that starts with spaces continues
    the one above with its description."""
    section = markdown.split("\n## Layers\n", 1)[1]
    block = section.split("```\n", 2)[1]
    return [
        " ".join(re.split(r"\s{2,}", line.strip())[0].split())
        for line in block.splitlines()
        if line.strip() and not line.startswith(" ")
    ]


def _members(layer: str) -> list[str]:
    return [f"core.{m.strip()}" for m in re.split(r"[:|]", layer)]


def test_the_docs_block_is_read_as_layers() -> None:
    """The reader sees a continued line as one layer and drops descriptions."""
    text = "## Layers\n\n```\na : b      one\nc | d\n           two\ne   three\n```\n"
    assert documented_layers("x\n" + text) == ["a : b", "c | d", "e"]


def test_the_docs_list_the_contracts_layers_in_its_order() -> None:
    """Issue 26 item 5: docs/architecture.md's layer block equals the `core-layers` contract,
    layer by layer, with the same siblings and the same kind of siblinghood (`:` / `|`)."""
    assert documented_layers(ARCHITECTURE.read_text()) == contract_layers()


def test_every_core_module_sits_in_a_layer() -> None:
    """Issue 26 item 5: no core module is outside the contract (it would be unchecked)."""
    members = [m for layer in contract_layers() for m in _members(layer)]
    graph = grimp.build_graph("core", cache_dir=None)
    outside = sorted(
        module
        for module in graph.modules
        if module not in HOLDERS
        and not any(module == m or module.startswith(m + ".") for m in members)
    )
    assert outside == []


PLANTS: list[tuple[str, str]] = [
    # (module of a layer the contract gained, the import appended to it)
    ("core/plugin/loaded.py", "import core.plugin.loading\n"),  # up: the loader sits higher
    ("core/board.py", "import core.kernel\n"),  # up
    ("core/observe.py", "import core.services\n"),  # up
    ("core/harness.py", "import core.cli.app\n"),  # up: the command line sits above it
    ("core/errors.py", "import core.logs\n"),  # sideways between `|` siblings
    ("core/workflows/planted.py", "import core.plugin.loading\n"),  # sideways, a new module
]


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("layers")
    shutil.copytree(
        REPO / "core", root / "core", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["id"] == "core-layers"]
    layers = ",\n".join(f"    {layer!r}".replace("'", '"') for layer in contract["layers"])
    (root / "pyproject.toml").write_text(
        '[tool.importlinter]\nroot_packages = ["core"]\n\n'
        '[[tool.importlinter.contracts]]\nid = "core-layers"\nname = "core layers"\n'
        f'type = "layers"\ncontainers = ["core"]\nlayers = [\n{layers},\n]\n'
    )
    return root


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow  # starts lint-imports: the subprocess tier
def test_the_copied_contract_holds_on_the_tree(tree_copy: Path) -> None:
    """The copy checks what the real contract checks: it holds on the tree as it is."""
    result = _lint(tree_copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout


@pytest.mark.slow  # starts lint-imports: the subprocess tier
@pytest.mark.parametrize(("planted", "line"), PLANTS)
def test_a_planted_import_in_a_new_layer_breaks_the_contract(
    planted: str, line: str, tree_copy: Path
) -> None:
    """Issue 26 item 5: each layer the contract gained fails on an import that breaks it."""
    module = tree_copy / planted
    original = module.read_text() if module.exists() else None
    module.write_text((original or "") + line)
    try:
        result = _lint(tree_copy)
    finally:
        if original is None:
            module.unlink()
        else:
            module.write_text(original)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "0 kept, 1 broken" in result.stdout
    assert planted.removesuffix(".py").replace("/", ".") in result.stdout
