"""`import core.ledger` loads neither click nor the plugin loader (house issue 26, "Done when"):
the ledger side names a loaded plugin set (`core.plugin.loaded`) without pluggy or the
entry-point loop, so only a host that loads plugins pays for them. Measured in a fresh
interpreter with ``-X importtime``, which lists every module the import ran."""

from __future__ import annotations

import subprocess
import sys

import pytest

ABSENT = ("click", "pluggy", "core.plugin.loading")


def _imported_by(statement: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    # each line: "import time: <self> | <cumulative> | <indented module name>"
    return {
        line.rsplit("|", 1)[1].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }


@pytest.mark.subprocess  # starts a real agent or interpreter (tier audit)
def test_the_measure_sees_the_plugin_loader() -> None:
    """The check can fail: importing the loader itself lists pluggy and the loader."""
    modules = _imported_by("import core.plugin.loading")
    assert {"pluggy", "core.plugin.loading"} <= modules


@pytest.mark.subprocess  # starts a real agent or interpreter (tier audit)
@pytest.mark.parametrize("absent", ABSENT)
def test_importing_the_ledger_loads_no_click_nor_plugin_loader(absent: str) -> None:
    """Issue 26 item 1: `import core.ledger` loads neither click nor the plugin loader."""
    modules = _imported_by("import core.ledger")
    assert "core.ledger" in modules
    assert not {m for m in modules if m == absent or m.startswith(absent + ".")}
