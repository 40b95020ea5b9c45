"""The `laneway` group: global options, logging, opening the host, one-line errors.

Error handling lives in the group's `invoke`, not only around `main`, so that click's test
runner and the installed console script behave the same: a user mistake becomes one line on
stderr and exit 1, a usage error stays click's exit 2, and anything unexpected becomes one
`internal error` line (with the traceback only under `-v`).
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, NoReturn

import attrs
import click
import sqlalchemy as sa
from loguru import logger

from core import logs
from core.errors import LanewayError, NotInitialised
from core.host import DEFAULT_URL, Host
from core.kinds import Features
from core.store.dialect import is_sqlite, normalise_url, sqlite_path
from plugins.manager import Hooks, PluginSelection, load_plugins

USER_ERRORS: tuple[type[Exception], ...] = (LanewayError,)
"""Exceptions whose message is meant for the user as it stands (plugin and registry errors
derive from LanewayError too)."""


def one_line(message: str) -> str:
    return re.sub(r"\s*[\r\n]+\s*", " ", message).strip()


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
        return Features(office=False) if self.no_office else None


class CommandFailed(click.ClickException):
    """A command ended on an error the user should read: `laneway: <message>`, exit 1; with
    `--json`, one JSON object `{"error": "<message>"}` instead (CLI.md)."""

    exit_code = 1
    as_json = False

    def show(self, file: IO[Any] | None = None) -> None:
        if self.as_json:
            text = json.dumps({"error": one_line(self.message)}, ensure_ascii=False)
        else:
            text = f"laneway: {one_line(self.message)}"
        click.echo(text, err=True, file=file)


class LanewayGroup(click.Group):
    """The top-level group. It turns errors into one line and keeps plugins from replacing
    the built-in commands (a plugin may add commands, never shadow `task` or `init`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sealed: frozenset[str] = frozenset()
        self.startup_warnings: list[str] = []

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        name = name or cmd.name
        if name in self.sealed:
            self.startup_warnings.append(
                f"a plugin tried to replace the built-in command {name!r}; ignored"
            )
            return
        super().add_command(cmd, name)

    def seal(self) -> None:
        self.sealed = frozenset(self.commands)

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
        except USER_ERRORS as exc:
            raise CommandFailed(str(exc)) from exc
        except sa.exc.ArgumentError as exc:
            # A malformed --db URL or a missing database driver: the user's to fix.
            raise CommandFailed(f"database URL: {exc}") from exc
        except sa.exc.OperationalError as exc:
            # The database is unreachable or refuses us: an environment problem, not a bug.
            raise CommandFailed(f"database error: {exc.orig or exc}") from exc
        except Exception as exc:
            settings = ctx.obj if isinstance(ctx.obj, Settings) else None
            if settings is not None and settings.verbose:
                click.echo(traceback.format_exc().rstrip(), err=True)
            raise CommandFailed(f"internal error: {type(exc).__name__}: {exc}") from exc


pass_settings = click.make_pass_decorator(Settings)


# -- opening the host ----------------------------------------------------------------------


def _check_url(url: str, *, must_exist: bool) -> None:
    """Refuse, in one line, a database laneway cannot open, before anything touches it.

    - only SQLite and PostgreSQL are supported, and PostgreSQL needs its driver;
    - with `must_exist`, a SQLite file that does not exist is not initialised: opening a
      store connects, SQLite creates the file on connect (and the schema lock creates
      `<db>.lock`), so a mistyped `--db` would leave empty databases behind. Only `init`
      may create one.
    """
    if url.startswith("sqlite://") and url != "sqlite://" and not url.startswith("sqlite:///"):
        raise LanewayError(
            f"database URL {url}: a SQLite URL has three slashes before a relative path "
            "(sqlite:///board.db) and four before an absolute one (sqlite:////srv/board.db)"
        )
    if url in ("sqlite://", "sqlite:///:memory:"):
        raise LanewayError(
            f"database URL {url}: an in-memory database lasts one command; name a file, "
            "e.g. sqlite:///board.db"
        )
    parsed = normalise_url(url)
    shown = parsed.render_as_string(hide_password=True)
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise LanewayError(f"database URL {shown}: laneway supports sqlite and postgresql")
    if backend == "postgresql" and importlib.util.find_spec("psycopg") is None:
        raise LanewayError(
            f"database URL {shown}: the PostgreSQL driver is missing; install laneway[postgresql]"
        )
    if not must_exist or not is_sqlite(parsed):
        return
    path = sqlite_path(parsed)
    if path is not None and not Path(path).exists():
        raise NotInitialised(f"database {shown} is not initialised; run `laneway init`")


def _opened(host: Host, command: str) -> None:
    logger.bind(
        command=command,
        database=host.store.display_url,
        epoch=host.epoch,
        recovery=host.recovery_report.as_dict() if host.recovery_report else None,
    ).info("host opened")


@contextmanager
def writer(settings: Settings, *, init: bool = False) -> Iterator[Host]:
    """A writer host: epoch minted and its liveness lock held, recovery scan run."""
    _check_url(settings.db, must_exist=not init)
    ctx = click.get_current_context()
    with Host.open(
        settings.db,
        features=settings.features,
        plugins=PluginSelection.from_env(),
        upgrade=init,
    ) as host:
        _opened(host, ctx.command_path)
        yield host


@contextmanager
def reader(settings: Settings) -> Iterator[Host]:
    """A host for inspection: no lock, no epoch, no recovery; the schema must be current."""
    _check_url(settings.db, must_exist=True)
    ctx = click.get_current_context()
    with Host.open(
        settings.db,
        features=settings.features,
        plugins=PluginSelection.from_env(),
        upgrade=False,
        read_only=True,
    ) as host:
        _opened(host, ctx.command_path)
        yield host


# -- logging -------------------------------------------------------------------------------


def _start_logging(settings: Settings) -> Callable[[], None]:
    """Route laneway's records to stderr for this invocation; returns the undo."""
    # --json promises machine-readable progress on stderr too, so it serialises records
    # as well; --log-json additionally lowers the threshold to INFO.
    if settings.log_json:
        level = "DEBUG" if settings.verbose else "INFO"
    else:
        level = "DEBUG" if settings.verbose else "WARNING"
    handler = logs.enable(level=level, json=settings.log_json or settings.json, stream=sys.stderr)

    def stop() -> None:
        logger.remove(handler)
        logs.disable()

    return stop


# -- the group -----------------------------------------------------------------------------


def build_cli(
    *, plugin_commands: bool = True, selection: PluginSelection | None = None
) -> LanewayGroup:
    """A fresh `laneway` group: the built-in commands, then those plugins add.

    :param plugin_commands: call the plugins' `laneway_cli_commands` hook.
    :param selection: which plugins to ask (default: `PluginSelection.from_env()`).
    """
    from core.cli import (
        commands_agents,
        commands_ledger,
        commands_serve,
        commands_setup,
        commands_task,
        commands_workflow,
    )

    @click.group(
        cls=LanewayGroup,
        name="laneway",
        context_settings={"help_option_names": ["-h", "--help"]},
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
    @click.pass_context
    def group(
        ctx: click.Context,
        db: str,
        as_json: bool,
        no_office: bool,
        log_json: bool,
        verbose: bool,
    ) -> None:
        """laneway: a workflow orchestrator for task boards worked by AI agents."""
        settings = Settings(
            db=db, json=as_json, no_office=no_office, log_json=log_json, verbose=verbose
        )
        ctx.obj = settings
        ctx.call_on_close(_start_logging(settings))
        for warning in cli.startup_warnings:
            logger.warning(warning)

    cli = group
    assert isinstance(cli, LanewayGroup)
    for module in (
        commands_setup,
        commands_workflow,
        commands_task,
        commands_ledger,
        commands_agents,
        commands_serve,
    ):
        for command in module.COMMANDS:
            cli.add_command(command)
    for command in commands_agents.SESSION_COMMANDS:
        commands_task.session.add_command(command)
    cli.seal()
    if plugin_commands:
        _add_plugin_commands(cli, selection or PluginSelection.from_env())
    return cli


def _add_plugin_commands(cli: LanewayGroup, selection: PluginSelection) -> None:
    # A broken plugin must not take the whole command line down with it: whatever goes wrong
    # here is remembered and logged once logging is set up (after the global options).
    try:
        loaded = load_plugins(selection)
        cli.startup_warnings.extend(Hooks(loaded.manager, strict=loaded.strict).cli_commands(cli))
    except Exception as exc:  # noqa: BLE001 - any plugin failure is reported, never fatal
        cli.startup_warnings.append(
            f"plugin commands not loaded: {type(exc).__name__}: {one_line(str(exc))}"
        )
        return
    for info in loaded.infos:
        if info.error:
            cli.startup_warnings.append(f"plugin {info.name!r} failed to load: {info.error}")


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """The console script: run `laneway` and exit; never a traceback."""
    # laneway owns this process: drop loguru's default DEBUG handler so only the handler the
    # global options ask for prints.
    logger.remove()
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
