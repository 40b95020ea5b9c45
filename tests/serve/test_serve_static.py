"""The board page's own files, read as shipped (HTTP.md "The board page"; issue 25 item 3):
text from the server goes in as text, never as markup; every script the page loads is one of
its own modules, shipped in the package; and the page has one polite live region, the status
line, not a live board."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.serve.app import static_dir

STATIC = static_dir()
SCRIPTS = sorted(STATIC.glob("*.js"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_no_script_writes_markup(script: Path) -> None:
    """Server text is set through text nodes: no innerHTML, outerHTML, insertAdjacentHTML
    or document.write anywhere in the page's scripts."""
    text = script.read_text()
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write", text)


def test_every_module_the_page_imports_is_shipped_beside_it() -> None:
    """The modules board.js imports (and theirs) are files of the package's static folder,
    which pyproject's package data ships (`static/*.js`)."""
    names = {p.name for p in SCRIPTS}
    assert {"board.js", "api.js", "dom.js"} <= names
    for script in SCRIPTS:
        for wanted in re.findall(r'from "\./([\w.-]+)"', script.read_text()):
            assert wanted in names, f"{script.name} imports {wanted}"


def test_the_page_has_one_polite_status_line_and_no_live_board() -> None:
    """One `aria-live` region, the polite status line; the board itself is not live."""
    html = (STATIC / "index.html").read_text()
    assert re.findall(r"aria-live=\"(\w+)\"", html) == ["polite"]
    assert re.search(r'<p id="status"[^>]*role="status"', html)
    assert not re.search(r"<main[^>]*aria-live", html)
