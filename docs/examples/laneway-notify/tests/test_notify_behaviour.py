"""`notify` through the kit's fixtures, and its pieces on their own.

The fixtures come from laneway's pytest plugin (registered through ``pytest11``, so nothing is
imported here to get them): ``laneway_host_factory`` opens hosts loading exactly the plugins
named, ``laneway_arrivals`` builds a board and moves tasks into its Target step through the
entry paths E1-E5, ``laneway_logs`` collects log records as dicts.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from plugins.api import ConfigError
from plugins.testing import Arrivals, HostFactory, captured

import laneway_notify
from laneway_notify.kind import ENV_FILE, NotifyConfig, validate
from laneway_notify.port import FileNotifier, Notification, read_notifications


@pytest.fixture
def notify_logs() -> Iterator[list[dict[str, Any]]]:
    """Like `laneway_logs`, with this plugin's package enabled too (it disables itself)."""
    with captured(["laneway_notify"]) as records:
        yield records


def notification(key: str | None, task_id: str = "t1") -> Notification:
    return Notification(key, task_id, "s1", "Review", "E2", "ready")


def test_the_entry_point_names_the_plugin_notify() -> None:
    (found,) = importlib.metadata.entry_points(group="laneway.plugins", name="notify")
    assert found.load() is laneway_notify


def test_installed_plugin_loads_by_its_entry_point_name(
    laneway_host_factory: HostFactory,
) -> None:
    host = laneway_host_factory.open(["notify"])  # the installed distribution, by name
    registered = host.registry.kind("notify")
    assert registered is not None
    assert (registered.plugin, registered.kind.owner, registered.executable) == (
        "notify",
        "durable",
        True,
    )


@pytest.mark.parametrize("path", ["E1", "E2", "E3", "E4", "E5"])
def test_each_arrival_writes_one_line_from_the_environment_file(
    laneway_host_factory: HostFactory,
    laneway_arrivals: Arrivals,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    notify_logs: list[dict[str, Any]],
    path: str,
) -> None:
    target = tmp_path / "from-env.jsonl"
    monkeypatch.setenv(ENV_FILE, str(target))
    host = laneway_host_factory.open([("notify", laneway_notify)])
    declared = [{"type": "notify", "config": {"message": "arrived"}}]
    # two boards: Target admits one task at a time (WIP limit 1, which E3 needs)
    first, second = (
        laneway_arrivals.enter(host, laneway_arrivals.board(host, declared), path) for _ in range(2)
    )

    written = read_notifications(target)
    assert [(n["task_id"], n["entry_path"], n["message"]) for n in written] == [
        (first.id, path, "arrived"),
        (second.id, path, "arrived"),
    ]
    assert written[0]["key"] != written[1]["key"]
    infos = [r for r in notify_logs if r["message"] == "notification written"]
    assert [r["extra"]["task_id"] for r in infos] == [first.id, second.id]
    assert all(r["extra"]["notify_file"] == str(target) for r in infos)


def test_without_a_file_anywhere_the_action_fails_with_the_reason(
    laneway_host_factory: HostFactory,
    laneway_arrivals: Arrivals,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENV_FILE, raising=False)
    host = laneway_host_factory.open([("notify", laneway_notify)])
    board = laneway_arrivals.board(host, [{"type": "notify", "config": {"message": "x"}}])
    task = laneway_arrivals.enter(host, board, "E2")
    ((_entry, markers),) = host.entries.list(task=task.id)
    assert [(m.kind, m.state) for m in markers] == [("notify", "failed")]
    assert markers[0].cause == f"no notification file: set config.file or {ENV_FILE}"


def test_validate_returns_the_config_the_executor_uses() -> None:
    assert validate({"message": "  ready  "}) == NotifyConfig("ready", None)
    assert validate({"message": "ready", "file": "/tmp/n"}) == NotifyConfig("ready", "/tmp/n")


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({}, "config.message"),
        ({"message": "x" * 501}, "config.message"),
        ({"message": "ok", "file": 3}, "config.file"),
        ({"message": "ok", "to": "ops"}, "config.to"),
    ],
)
def test_validate_names_the_offending_field(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as refused:
        validate(config)
    assert refused.value.field == field


def test_the_file_adapter_delivers_a_key_once(tmp_path: Path) -> None:
    notifier = FileNotifier(tmp_path / "n.jsonl")
    assert notifier.send(notification("k1")) is True
    assert notifier.send(notification("k1")) is False
    assert notifier.send(notification("k2")) is True
    assert notifier.send(notification(None)) is True
    assert notifier.send(notification(None)) is True
    assert [n["key"] for n in read_notifications(tmp_path / "n.jsonl")] == [
        "k1",
        "k2",
        None,
        None,
    ]
