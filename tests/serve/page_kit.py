"""What the board page's browser test files share: one chromium per module (Debian's, driven
by Playwright through its executable; no browser is ever downloaded) and axe-core, injected
from npm's package (.ci/browser, LANEWAY_AXE) to check a page for accessibility violations."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.serve.conftest import Served, wait_live
from tests.serve.test_serve_page import CHROMIUM

AXE = os.environ.get("LANEWAY_AXE", "")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM:
        if os.environ.get("CI"):
            pytest.fail("CI needs Debian's chromium (.ci/run installs it)")
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def need_axe() -> str:
    """axe.min.js; a skip without it, a failure where it must be there (CI, as the real ACP
    adapters: LANEWAY_ACP_REQUIRED)."""
    if not AXE or not Path(AXE).is_file():
        if os.environ.get("CI") or os.environ.get("LANEWAY_ACP_REQUIRED"):
            pytest.fail(f"LANEWAY_AXE must name axe-core's axe.min.js (.ci/run); got {AXE!r}")
        pytest.skip("no axe-core: (cd .ci/browser && npm ci), then LANEWAY_AXE=.../axe.min.js")
    return AXE


def serious_violations(page: Any) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page as it is now. The page's
    context needs `bypass_csp=True`: the engine goes in as an inline script."""
    if not page.evaluate("typeof window.axe === 'object'"):
        page.add_script_tag(path=need_axe())
    found = page.evaluate("async () => (await axe.run(document)).violations")
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]][:5]}
        for v in found
        if v["impact"] in ("serious", "critical")
    ]


def open_page(browser: Any, served: Served, query: str = "", **context: Any) -> Any:
    """The board page in a fresh context (1440x900 unless told; `context` goes to
    new_context), with the token, once its event stream is live; `page.errors` collects what
    the page threw or logged as an error."""
    ctx = browser.new_context(**({"viewport": {"width": 1440, "height": 900}} | context))
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    # the console's "Failed to load resource: ... 400" names no request: this line does
    page.on(
        "response",
        lambda r: (
            errors.append(f"{r.status} {r.request.method} {r.url}") if r.status >= 400 else None
        ),
    )
    page.goto(f"{served.url}/{query}#token={served.token}")
    wait_live(page, errors)
    page.errors = errors
    return page
