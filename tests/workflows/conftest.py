"""Fixtures shared by the workflow-file tests."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

# The reference templates live beside the repository, in the project's shared folder.
REFERENCE_TEMPLATES = (
    Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "kandev-templates"
)
_ABSENT = f"reference templates not found at {REFERENCE_TEMPLATES} (shared/ is absent)"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test asking for `reference_template` runs once per reference file (or is skipped)."""
    if "reference_template" not in metafunc.fixturenames:
        return
    paths = sorted(REFERENCE_TEMPLATES.glob("*.yml")) if REFERENCE_TEMPLATES.is_dir() else []
    params = [pytest.param(p, id=p.stem) for p in paths] or [
        pytest.param(None, id="absent", marks=pytest.mark.skip(reason=_ABSENT))
    ]
    metafunc.parametrize("reference_template", params)


@pytest.fixture
def reference_dir() -> Path:
    if not REFERENCE_TEMPLATES.is_dir():
        pytest.skip(_ABSENT)
    return REFERENCE_TEMPLATES


@pytest.fixture
def sequential_ids() -> Callable[[], str]:
    """Predictable ids, so tests can say which id went where."""
    counter = itertools.count(1)
    return lambda: f"id-{next(counter)}"
