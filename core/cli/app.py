"""The `laneway` group: global options, logging, opening the host, and turning errors into
one line (how they read is `core.cli.failures`'; the built-in commands' index is
`core.cli.catalogue`, the collector's handling `core.cli.collector`).

Error handling lives in the group's `invoke`, not only around `main`, so that click's test
runner and the installed console script behave the same: a user mistake becomes one line on
stderr and exit 1, a usage error stays click's exit 2, and anything unexpected becomes one
`internal error` line (with the traceback only under `-v`).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import attrs
import click

from core.cli.catalogue import BUILTIN_COMMANDS, BUILTIN_HELP
from core.cli.collector import (
    collector_paused_by_caller,
    freeze_for_exit,
    pause_collector,
    resume_collector,
)
from core.cli.failures import CommandFailed, code_of, one_line, user_message

if TYPE_CHECKING:
    from core.host import Host
    from core.plugin.features import Features
    from core.plugin.loaded import LoadedPlugins
    from core.plugin.selection import PluginSelection

DEFAULT_URL = "sqlite:///laneway.db"
"""`core.host.DEFAULT_URL`, repeated so that building the group does not import the host."""


def installed_version() -> str:
    """The installed distribution's version (`laneway --version`)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("laneway")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


@attrs.frozen
class Settings:
    """The global options, as every command reads them from `ctx.obj`."""

    db: str = DEFAULT_URL
    json: bool = False
    no_office: bool = False
    log_json: bool = False
    verbose: bool = False

    @property
    def features(self) -> Features | None:
        """This process's override of the board's features (`--no-office`), or None: the
        board's, as `laneway features` shows them."""
        from core.plugin.features import Features

        return Features(office=False) if self.no_office else None


class LanewayGroup(click.Group):
    """The top-level group. It turns errors into one line and keeps plugins from replacing
    the built-in commands (a plugin may add commands, never shadow `task` or `init`).

    Built-in commands are imported when they are looked up (`BUILTIN_COMMANDS`); plugins are
    asked for their commands (`laneway_cli_commands`) when a name is not a built-in one, when
    the commands are listed (`--help`), and, to report a broken plugin, once a command that
    writes has opened its host (`writer`, from the plugins that host loaded).
    """

    def __init__(
        self,
        *args: Any,
        selection: PluginSelection | None = None,
        plugin_commands: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.sealed: frozenset[str] = frozenset(BUILTIN_COMMANDS)
        self.startup_warnings: list[str] = []
        self._selection = selection
        self._plugins_pending = plugin_commands

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        name = name or cmd.name
        if name in self.sealed:
            self.startup_warnings.append(
                f"a plugin tried to replace the built-in command {name!r}; ignored"
            )
            return
        super().add_command(cmd, name)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in BUILTIN_COMMANDS:
            return self.builtin(cmd_name)
        self.load_plugin_commands()
        return self.commands.get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self.load_plugin_commands()
        return sorted(set(BUILTIN_COMMANDS) | set(self.commands))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's listing, but a built-in command not yet imported shows `BUILTIN_HELP`."""
        names = self.list_commands(ctx)
        rows: list[tuple[str, str]] = []
        limit = formatter.width - 6 - max(len(name) for name in names)
        for name in names:
            loaded = self.commands.get(name)
            if loaded is None and name in BUILTIN_HELP:
                # A bare command with the same help shortens it exactly as the real one would.
                stand_in = click.Command(name, help=BUILTIN_HELP[name])
                rows.append((name, stand_in.get_short_help_str(limit)))
                continue
            cmd = loaded or self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def builtin(self, name: str) -> click.Command:
        """The built-in command `name`, importing its module the first time."""
        found = self.commands.get(name)
        if found is not None:
            return found
        module_name, attribute = BUILTIN_COMMANDS[name]
        module = importlib.import_module(f"core.cli.{module_name}")
        command: click.Command = getattr(module, attribute)
        click.Group.add_command(self, command, name)
        return command

    def load_plugin_commands(self, loaded: LoadedPlugins | None = None) -> None:
        """Ask the plugins for their commands, once: those of `loaded` (a writer's host has
        loaded them already: `writer` hands them over, so a write command loads its plugins
        once), else loaded here. A broken plugin must not take the whole command line down
        with it: whatever goes wrong here is remembered and logged once logging is set up
        (after the global options)."""
        if not self._plugins_pending:
            return
        self._plugins_pending = False
        from core.plugin.calls import Hooks
        from core.plugin.loading import load_plugins

        try:
            if loaded is None:
                from core.plugin.selection import PluginSelection

                loaded = load_plugins(self._selection or PluginSelection.from_env())
            self.startup_warnings.extend(
                Hooks(loaded.manager, strict=loaded.strict).cli_commands(self)
            )
        except Exception as exc:  # noqa: BLE001 - any plugin failure is reported, never fatal
            self.startup_warnings.append(
                f"plugin commands not loaded: {type(exc).__name__}: {one_line(str(exc))}"
            )
            return
        for info in loaded.infos:
            if info.error:
                self.startup_warnings.append(f"plugin {info.name!r} failed to load: {info.error}")

    def report_startup_warnings(self) -> None:
        """Log what went wrong loading plugin commands so far, once (logging must be set up)."""
        if not self.startup_warnings:
            return
        from core.logs import logger

        for warning in self.startup_warnings:
            logger.warning(warning)
        self.startup_warnings.clear()

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return self._invoke(ctx)
        except CommandFailed as exc:
            settings = ctx.obj if isinstance(ctx.obj, Settings) else None
            exc.as_json = settings is not None and settings.json
            raise

    def _invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except BrokenPipeError:
            # `laneway workflow export W | head`: click's main quiets a closed stdout itself.
            raise
        except Exception as exc:
            message = user_message(exc)
            if message is not None:
                details = getattr(exc, "details", None)
                extra = details() if callable(details) else None
                raise CommandFailed(message, code_of(exc), extra) from exc
            settings = ctx.obj if isinstance(ctx.obj, Settings) else None
            if settings is not None and settings.verbose:
                click.echo(traceback.format_exc().rstrip(), err=True)
            message = f"internal error: {type(exc).__name__}: {exc}"
            raise CommandFailed(message, "internal") from exc


pass_settings = click.make_pass_decorator(Settings)

PROCESSES_OF_THE_BOARD = frozenset({"worker", "serve"})
"""Commands whose process works for the board, not for the person who started it: what a
worker or `serve` does by itself is the `system`'s (serve's requests name their own actor)."""


# -- opening the host ----------------------------------------------------------------------


def _check_url(url: str, *, must_exist: bool) -> None:
    """Refuse, in one line, a database laneway cannot open, before anything touches it.

    - only SQLite and PostgreSQL are supported, and PostgreSQL needs its driver;
    - with `must_exist`, a SQLite file that does not exist is not initialised: opening a
      store connects, SQLite creates the file on connect (and the schema lock creates
      `<db>.lock`), so a mistyped `--db` would leave empty databases behind. Only `init`
      may create one.
    """
    from core.errors import DatabaseUrlRefused, NotInitialised
    from core.store.dialect import is_sqlite, normalise_url, shown, sqlite_path

    if url.startswith("sqlite://") and url != "sqlite://" and not url.startswith("sqlite:///"):
        raise DatabaseUrlRefused(
            f"database URL {url}: a SQLite URL has three slashes before a relative path "
            "(sqlite:///board.db) and four before an absolute one (sqlite:////srv/board.db)"
        )
    if url in ("sqlite://", "sqlite:///:memory:"):
        raise DatabaseUrlRefused(
            f"database URL {url}: an in-memory database lasts one command; name a file, "
            "e.g. sqlite:///board.db"
        )
    parsed = normalise_url(url)
    display = shown(parsed)
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise DatabaseUrlRefused(f"database URL {display}: laneway supports sqlite and postgresql")
    if backend == "postgresql" and importlib.util.find_spec("psycopg") is None:
        raise DatabaseUrlRefused(
            f"database URL {display}: the PostgreSQL driver is missing; install laneway[postgresql]"
        )
    if not must_exist or not is_sqlite(parsed):
        return
    path = sqlite_path(parsed)
    if path is not None and not Path(path).exists():
        raise NotInitialised(f"database {display} is not initialised; run `laneway init`")


def _opened(host: Host, command: str) -> None:
    from core.logs import logger

    logger.bind(
        command=command,
        database=host.store.display_url,
        epoch=host.epoch,
        recovery=host.recovery_summary(),
    ).info("host opened")


@contextmanager
def writer(settings: Settings, *, init: bool = False) -> Iterator[Host]:
    """A writer host: epoch minted and its liveness lock held, recovery scan run, plugins
    started (a broken plugin is reported here, from the plugins the host loaded)."""
    from core.host import Host
    from core.plugin.selection import PluginSelection

    _check_url(settings.db, must_exist=not init)
    ctx = click.get_current_context()
    group = ctx.find_root().command
    with Host.open(
        settings.db,
        features=settings.features,
        plugins=PluginSelection.from_env(),
        upgrade=init,
    ) as host:
        resume_collector()
        if isinstance(group, LanewayGroup):
            # The plugins the host loaded (its first bundle's) are the command line's too:
            # a broken plugin, or one that tries to replace a built-in command, is named by
            # every write command without loading the plugins a second time.
            group.load_plugin_commands(host.loaded_plugins)
            group.report_startup_warnings()
        _opened(host, ctx.command_path)
        yield host


@contextmanager
def reader(settings: Settings) -> Iterator[Host]:
    """A host for inspection: no lock, no epoch, no recovery; the schema must be current.
    Its plugins are loaded only if the command asks for the bundle (`start_plugins=False`):
    reading tasks, runs or entries needs none. In strict mode (`LANEWAY_PLUGINS_STRICT`)
    they start as a writer's do, so that a broken plugin fails every command."""
    from core.host import Host
    from core.plugin.selection import PluginSelection

    _check_url(settings.db, must_exist=True)
    ctx = click.get_current_context()
    selection = PluginSelection.from_env()
    with Host.open(
        settings.db,
        features=settings.features,
        plugins=selection,
        upgrade=False,
        read_only=True,
        start_plugins=selection.strict,
    ) as host:
        resume_collector()
        _opened(host, ctx.command_path)
        yield host


# -- logging -------------------------------------------------------------------------------


def _start_logging(settings: Settings) -> Callable[[], None]:
    """Route laneway's records to stderr for this invocation; returns the undo."""
    from core import logs

    # --json promises machine-readable progress on stderr too, so it serialises records
    # as well; --log-json additionally lowers the threshold to INFO.
    if settings.log_json:
        level = "DEBUG" if settings.verbose else "INFO"
    else:
        level = "DEBUG" if settings.verbose else "WARNING"
    # loguru is imported only when a record is made (core.logs): most commands make none
    return logs.route(level=level, json=settings.log_json or settings.json, stream=sys.stderr)


# -- the group -----------------------------------------------------------------------------


def build_cli(
    *, plugin_commands: bool = True, selection: PluginSelection | None = None
) -> LanewayGroup:
    """A fresh `laneway` group: the built-in commands, then those plugins add; each is
    imported when first looked up (`LanewayGroup`).

    :param plugin_commands: call the plugins' `laneway_cli_commands` hook.
    :param selection: which plugins to ask (default: `PluginSelection.from_env()`).
    """

    @click.group(
        cls=LanewayGroup,
        name="laneway",
        selection=selection,
        plugin_commands=plugin_commands,
        context_settings={"help_option_names": ["-h", "--help"]},
        # `laneway --version` runs the group alone; a bare `laneway` still shows the help
        invoke_without_command=True,
        no_args_is_help=True,
    )
    @click.option(
        "--db",
        envvar="LANEWAY_DB",
        default=DEFAULT_URL,
        show_default=True,
        metavar="URL",
        help="Database URL (env LANEWAY_DB).",
    )
    @click.option("--json", "as_json", is_flag=True, help="Print one JSON value on stdout.")
    @click.option(
        "--no-office",
        is_flag=True,
        help="Office off for this process only (no recovery scan); see `features set`.",
    )
    @click.option("--log-json", is_flag=True, help="Log records as JSON lines on stderr.")
    @click.option("-v", "--verbose", is_flag=True, help="More logging; tracebacks on errors.")
    # Not click's eager version option: that prints before `--json` is read when it comes first.
    @click.option("--version", "version", is_flag=True, help="Print the installed version.")
    @click.pass_context
    def group(
        ctx: click.Context,
        db: str,
        as_json: bool,
        no_office: bool,
        log_json: bool,
        verbose: bool,
        version: bool,
    ) -> None:
        """laneway: a workflow orchestrator for task boards worked by AI agents."""
        if ctx.invoked_subcommand is None:
            if not version:
                raise click.UsageError("Missing command.", ctx)
            shown = installed_version()
            click.echo(json.dumps({"version": shown}) if as_json else f"laneway {shown}")
            return
        settings = Settings(
            db=db, json=as_json, no_office=no_office, log_json=log_json, verbose=verbose
        )
        ctx.obj = settings
        if ctx.invoked_subcommand not in PROCESSES_OF_THE_BOARD:
            # a person at the command line: what this command writes names them (CLI.md);
            # undone when the command ends, for a caller that runs several in one process
            from core import actors

            ctx.with_resource(actors.acting(actors.cli_user()))
        ctx.call_on_close(_start_logging(settings))
        # A plugin that fails, or tries to replace a built-in command, is reported by every
        # command that loads plugins: a plugin's command, `--help`, and every command that
        # writes (`writer`, whose host loads the same plugins). A command that only reads the
        # board loads none.
        cli.report_startup_warnings()

    cli = group
    assert isinstance(cli, LanewayGroup)
    if selection is not None:
        # A caller that names its plugins (an embedding application, a test) gets their
        # commands at once, in `cli.commands`; the console script asks only when it must.
        cli.load_plugin_commands()
    return cli


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """The console script: run `laneway` and exit; never a traceback."""
    pause_collector()
    try:
        _main(argv)
    finally:
        freeze_for_exit()


def _main(argv: Sequence[str] | None) -> NoReturn:
    # laneway owns this process: drop loguru's default DEBUG handler so only the handler the
    # global options ask for prints.
    from core import logs

    logs.remove_handlers()
    verbose = any(a in ("-v", "--verbose") for a in (argv if argv is not None else sys.argv))
    try:
        cli = build_cli()
        cli.main(args=list(argv) if argv is not None else None, prog_name="laneway")
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - the last resort: one line, never a traceback
        if isinstance(exc, KeyboardInterrupt):
            click.echo("laneway: interrupted", err=True)
            sys.exit(130)
        if verbose:
            click.echo(traceback.format_exc().rstrip(), err=True)
        click.echo(f"laneway: internal error: {type(exc).__name__}: {one_line(str(exc))}", err=True)
        sys.exit(1)
    sys.exit(0)


__all__ = [
    "BUILTIN_COMMANDS",
    "BUILTIN_HELP",
    "DEFAULT_URL",
    "CommandFailed",
    "LanewayGroup",
    "Settings",
    "build_cli",
    "collector_paused_by_caller",
    "main",
    "one_line",
    "pass_settings",
    "reader",
    "resume_collector",
    "writer",
]

_user_message = user_message
"""`core.cli.failures.user_message` by its former name."""
