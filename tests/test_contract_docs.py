"""Issue 25 item 9: docs/cli.md and docs/http.md, the contracts as laneway ships them, cannot
drift from the code. Every command and option their tables name exists in the `laneway`
command line, every route in the served application, and the other way round: whatever the
code has is named there (the contract's own rows, or the "Beyond the contract" section).

A contract row not built yet is listed below by name, and must really be missing: building
it makes this test say to drop it from the list."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

import click
from starlette.routing import Mount, Route

from core.cli import build_cli
from core.host import Host
from core.plugin.selection import PluginSelection

DOCS = Path(__file__).resolve().parents[1] / "docs"

CLI_NOT_YET: Final[dict[tuple[str, ...], set[str]]] = {
    # phase 4 (CLI.md) beyond issue 38's undo commands and --version: later changes build them
}
"""Contract rows (CLI.md) another change builds: the commands, or a command's options."""

HTTP_NOT_YET: Final[set[tuple[str, str]]] = set()
"""Contract routes (HTTP.md) another change builds."""

_SPAN = re.compile(r"`([^`]+)`")
_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def _rows(text: str, header: str) -> list[str]:
    """The first cell of every row of every table whose header starts with `header`."""
    cells: list[str] = []
    inside = False
    for line in text.splitlines():
        if not line.startswith("|"):
            inside = False
            continue
        first = re.split(r"(?<!\\)\|", line)[1].strip()
        if first == header:
            inside = True
        elif inside and not set(first) <= {"-", ":"}:
            cells.append(first)
    return cells


def _cli() -> click.Group:
    return build_cli(selection=PluginSelection(allow=frozenset({"kanban", "office"})))


def _commands(group: click.Group) -> dict[tuple[str, ...], set[str]]:
    """Every command laneway runs (a path of names), with its long options."""
    ctx = click.Context(group)
    found: dict[tuple[str, ...], set[str]] = {}

    def walk(cmd: click.Command, path: tuple[str, ...]) -> None:
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None, name
                walk(sub, (*path, name))
            if not cmd.invoke_without_command:
                return
        found[path] = {
            o
            for p in cmd.params
            if isinstance(p, click.Option)
            for o in (*p.opts, *p.secondary_opts)
            if o.startswith("--") and o != "--help"
        }

    for name in group.list_commands(ctx):
        sub = group.get_command(ctx, name)
        assert sub is not None, name
        walk(sub, (name,))
    return found


def _documented_commands(
    text: str, known: set[tuple[str, ...]], global_options: set[str]
) -> dict[tuple[str, ...], set[str]]:
    """What docs/cli.md's command tables name: each span's command path and its options (a
    span that is an option alone, `--version` (global), names a global option)."""
    names = {path[:n] for path in (*known, *CLI_NOT_YET) for n in range(1, len(path) + 1)}
    documented: dict[tuple[str, ...], set[str]] = {}
    for cell in _rows(text, "command"):
        for span in _SPAN.findall(cell):
            if span.startswith("--"):
                assert span.split()[0] in global_options, f"docs/cli.md names {span!r}"
                continue
            path: tuple[str, ...] = ()
            for word in span.split():
                if (*path, word) not in names:
                    break
                path = (*path, word)
            assert path in known or path in CLI_NOT_YET, f"docs/cli.md names {span!r}"
            documented.setdefault(path, set()).update(_OPTION.findall(span))
    return documented


def test_docs_cli_md_names_exactly_the_commands_and_options_laneway_has() -> None:
    text = (DOCS / "cli.md").read_text()
    group = _cli()
    code = _commands(group)
    global_options = {o for p in group.params for o in p.opts if o.startswith("--")}
    documented = _documented_commands(text, set(code), global_options)

    for path, options in documented.items():
        missing = CLI_NOT_YET.get(path, set())
        if path in CLI_NOT_YET and not missing:
            assert path not in code, f"`{' '.join(path)}` is built: drop it from CLI_NOT_YET"
            continue
        unknown = options - code[path] - missing
        assert not unknown, f"docs/cli.md: `{' '.join(path)}` has no {sorted(unknown)}"
        built = missing & code[path]
        assert not built, f"`{' '.join(path)}` has {sorted(built)}: drop it from CLI_NOT_YET"
    for path, options in code.items():
        assert path in documented, f"`laneway {' '.join(path)}` is not in docs/cli.md"
        undocumented = options - documented[path]
        assert not undocumented, (
            f"docs/cli.md does not name {sorted(undocumented)} of `{' '.join(path)}`"
        )
    # the global options are the conventions' (and the section beyond them)
    for param in group.params:
        for option in param.opts:
            if option.startswith("--") and option != "--help":
                assert f"`{option}" in text, f"docs/cli.md does not name the global {option}"


def _served(host: Host) -> set[tuple[str, str]]:
    from core.serve.app import build_app

    app = build_app(host, token="t" * 32)
    found: set[tuple[str, str]] = set()
    for route in app.routes:
        if isinstance(route, Mount):
            found.add(("GET", f"{route.path}/{{path}}"))
        elif isinstance(route, Route):
            found |= {(m, route.path) for m in route.methods or () if m != "HEAD"}
    return found


def test_docs_http_md_names_exactly_the_routes_laneway_serves(sqlite_host: Host) -> None:
    text = (DOCS / "http.md").read_text()
    documented: set[tuple[str, str]] = set()
    for cell in _rows(text, "method and path"):
        for span in _SPAN.findall(cell):
            method, _, path = span.partition(" ")
            assert method in {"GET", "POST", "DELETE", "PATCH", "PUT"}, span
            documented.add((method, path.split("?")[0].strip()))
    served = _served(sqlite_host)

    assert documented >= HTTP_NOT_YET
    built = HTTP_NOT_YET & served
    assert not built, f"{sorted(built)} is served: drop it from HTTP_NOT_YET"
    unserved = documented - served - HTTP_NOT_YET
    assert not unserved, f"docs/http.md names routes laneway does not serve: {sorted(unserved)}"
    undocumented = served - documented
    assert not undocumented, f"docs/http.md does not name {sorted(undocumented)}"


def test_the_contract_copies_keep_the_contract_word_for_word(shared_dir: Path) -> None:
    """docs/cli.md and docs/http.md hold the pinned contracts whole (after a comment saying
    what they are, before their own section): a row changed there is a contract changed."""
    for name, contract in (("cli.md", "CLI.md"), ("http.md", "HTTP.md")):
        text = (DOCS / name).read_text()
        comment, sep, rest = text.partition("-->\n\n")
        assert comment.startswith("<!-- The project's pinned"), name
        assert sep, name
        kept, beyond, _ = rest.partition("\n## Beyond the contract\n")
        assert beyond, name
        assert kept.rstrip("\n") == (shared_dir / contract).read_text().rstrip("\n"), name
