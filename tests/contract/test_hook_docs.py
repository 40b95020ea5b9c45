"""docs/hooks.md documents exactly the hooks of plugins/hookspecs.py, each with exactly its
argument names (datasette's hook-documentation drift test, for our hooks).

A hook is documented by a level-2 heading ``## `laneway_name(arg, arg)` ``. The check fails
when a hookspec has no heading, when a heading names a hook that is not a hookspec, when the
arguments differ (names or order), and when a ``firstresult`` hook's section does not say so.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from plugins import hookspecs

HOOKS_MD = Path(__file__).resolve().parents[2] / "docs" / "hooks.md"
HEADING = re.compile(r"^## `(?P<name>\w+)\((?P<args>[^)]*)\)`\s*$", re.MULTILINE)


@attrs.frozen
class Documented:
    args: tuple[str, ...]
    text: str


def specs() -> dict[str, Callable[..., Any]]:
    """Every hookspec in plugins.hookspecs (functions carrying pluggy's spec marker)."""
    return {
        name: func
        for name, func in vars(hookspecs).items()
        if callable(func) and getattr(func, "laneway_spec", None) is not None
    }


def documented(markdown: str) -> dict[str, Documented]:
    """Each hook heading: its argument names and the text of its section."""
    found: dict[str, Documented] = {}
    matches = list(HEADING.finditer(markdown))
    for match, following in zip(matches, [*matches[1:], None], strict=True):
        end = following.start() if following is not None else len(markdown)
        args = tuple(a.strip() for a in match["args"].split(",") if a.strip())
        assert match["name"] not in found, f"{match['name']} is documented twice"
        found[match["name"]] = Documented(args, markdown[match.end() : end])
    return found


def drift(markdown: str) -> list[str]:
    """Every disagreement between `markdown` and the hookspecs, one line each."""
    problems = []
    declared = specs()
    docs = documented(markdown)
    for name, func in sorted(declared.items()):
        args = tuple(inspect.signature(func).parameters)
        if name not in docs:
            problems.append(f"{name}{args} is a hookspec but is not documented")
            continue
        if docs[name].args != args:
            problems.append(
                f"{name} is documented with arguments {docs[name].args}, the hookspec has {args}"
            )
        firstresult = getattr(func, "laneway_spec", {}).get("firstresult")
        if firstresult and "firstresult" not in docs[name].text:
            problems.append(f"{name} is a firstresult hook; its section does not say so")
    for name in sorted(set(docs) - set(declared)):
        problems.append(f"{name} is documented but is not a hookspec")
    return problems


def test_every_hookspec_is_documented_with_exactly_its_arguments() -> None:
    assert specs(), "no hookspecs found: the marker attribute changed?"
    assert drift(HOOKS_MD.read_text()) == []


# -- the check itself catches drift ---------------------------------------------------------------


@pytest.fixture
def reference() -> str:
    return HOOKS_MD.read_text()


def test_an_undocumented_hook_is_reported(reference: str) -> None:
    edited = reference.replace("## `laneway_host_started(host)`", "## Host started")
    assert drift(edited) == ["laneway_host_started('host',) is a hookspec but is not documented"]


def test_wrong_argument_names_are_reported(reference: str) -> None:
    edited = reference.replace(
        "## `laneway_task_ownership(task, workspace)`", "## `laneway_task_ownership(task)`"
    )
    expected = (
        "laneway_task_ownership is documented with arguments ('task',), "
        "the hookspec has ('task', 'workspace')"
    )
    assert drift(edited) == [expected]


def test_reordered_arguments_are_reported(reference: str) -> None:
    edited = reference.replace(
        "## `laneway_agent_failed(host, failure, case)`",
        "## `laneway_agent_failed(failure, host, case)`",
    )
    assert len(drift(edited)) == 1


def test_a_documented_hook_that_does_not_exist_is_reported(reference: str) -> None:
    edited = reference + "\n## `laneway_task_created(task)`\n\nNot a hook.\n"
    assert drift(edited) == ["laneway_task_created is documented but is not a hookspec"]


def test_a_firstresult_hook_must_say_so(reference: str) -> None:
    start = reference.index("## `laneway_task_ownership")
    end = reference.index("## `laneway_agent_failed")
    section = reference[start:end].replace("firstresult", "first-come")
    edited = reference[:start] + section + reference[end:]
    assert drift(edited) == [
        "laneway_task_ownership is a firstresult hook; its section does not say so"
    ]
