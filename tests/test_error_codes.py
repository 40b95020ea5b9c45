"""House issue item 4: every error a user can cause is a LanewayError declaring its own stable
`code` (snake_case) and the HTTP status serve answers it with."""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest

import core
from core.errors import LanewayError, ReadOnly
from tests.conftest import open_host

SNAKE = re.compile(r"[a-z]+(_[a-z]+)*")


def _every_subclass(cls: type[LanewayError]) -> list[type[LanewayError]]:
    found: list[type[LanewayError]] = []
    for sub in cls.__subclasses__():
        found.append(sub)
        found.extend(_every_subclass(sub))
    return found


def test_every_laneway_error_declares_a_snake_case_code_and_an_error_status() -> None:
    """Issue item 4: a code on each class's own body (not inherited by accident), 400..599."""
    for info in pkgutil.walk_packages(core.__path__, "core."):
        importlib.import_module(info.name)
    classes = [LanewayError, *_every_subclass(LanewayError)]
    assert len(classes) > 6  # the walk really imported core's error classes
    missing = []
    for cls in classes:
        name = f"{cls.__module__}.{cls.__qualname__}"
        if "code" not in cls.__dict__:
            missing.append(name)
            continue
        assert SNAKE.fullmatch(cls.code), (name, cls.code)
        assert 400 <= cls.http_status <= 599, (name, cls.http_status)
    assert missing == []


def test_error_codes_are_distinct_per_class() -> None:
    """Issue item 4: a client tells errors apart by code, so two classes never share one."""
    for info in pkgutil.walk_packages(core.__path__, "core."):
        importlib.import_module(info.name)
    owners: dict[str, str] = {}
    for cls in [LanewayError, *_every_subclass(LanewayError)]:
        if "code" not in cls.__dict__:
            continue
        name = f"{cls.__module__}.{cls.__qualname__}"
        assert owners.setdefault(cls.code, name) == name, (cls.code, owners[cls.code], name)


def test_a_write_on_a_read_only_host_is_refused_with_the_read_only_code(db_url: str) -> None:
    """Issue item 4: "this host was opened read-only" is a ReadOnly (`read_only`, 403, as
    HTTP.md's `--read-only` answers), not the base class's 400; a real database, both ends."""
    open_host(db_url).close()  # a writer creates the schema the reader opens
    with open_host(db_url, read_only=True) as reader:
        with pytest.raises(ReadOnly, match="opened read-only") as refused:
            # Refused before the workflow is looked up: the refusal is the host's, not the ref's.
            reader.workflows.set_max_step_arrivals("any", 3)
    assert (refused.value.code, refused.value.http_status) == ("read_only", 403)
