"""`plugins.app` (house issue 26, item 1): what a plugin's own commands use to open and drive a
board lives there; `plugins.api` only re-exports declarations, contexts, views and values, and
hands out no host."""

from __future__ import annotations

import subprocess
import sys

import pytest

import plugins
from plugins import api, app

DRIVING = ("Event", "Host", "Settings", "emit", "parse_time", "plain", "scripted", "worker")


def test_plugins_app_holds_what_a_command_drives_a_host_with() -> None:
    """Every name of `plugins.app` resolves, `writer` opens a `Host`, and the names are the
    host's own objects (a plugin's command and laneway's share one `Settings`)."""
    from core.cli.app import Settings
    from core.host import Host

    assert set(DRIVING) | {"writer"} == set(app.__all__)
    for name in app.__all__:
        assert getattr(app, name) is not None, name
    assert app.Host is Host
    assert app.Settings is Settings


@pytest.mark.parametrize("name", [*DRIVING, "writer"])
def test_plugins_api_hands_out_no_host(name: str) -> None:
    """Issue 26: `plugins.api` (and `plugins`, which re-exports it) lists none of them and
    resolves none of them."""
    assert name not in api.__all__
    assert name not in plugins.__all__
    with pytest.raises(AttributeError, match=f"no attribute '{name}'"):
        getattr(api, name)


@pytest.mark.slow  # it starts a process: the subprocess tier
def test_importing_the_api_loads_no_host() -> None:
    """A plugin module that imports `plugins.api` (every one does, at `laneway --help`) loads
    neither the host nor the command line's app; `plugins.app` does."""
    probe = (
        "import sys, plugins, plugins.api; "
        "print(sorted(m for m in ('core.host', 'core.cli.app') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"
    out = subprocess.run(
        [sys.executable, "-c", probe.replace("plugins.api;", "plugins.api, plugins.app;")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == "['core.cli.app', 'core.host']"
