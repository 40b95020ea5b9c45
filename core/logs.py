"""Logging setup. laneway is a library first: it adds no handler and stays silent until the
application (the `laneway` command, or a host's own code) calls `enable`.

Every laneway module that logs takes `logger` from here, not from loguru, so laneway's packages
are silenced before any of them can log. Importing this module does not import loguru (issue
45 item 6: loguru pulls in asyncio, multiprocessing and ssl, a fifth of a short command's
start-up): `logger` is a stand-in that imports loguru when it is first used (a record, a
`bind`), and every attribute it hands out is loguru's own logger's, so a record still names the
module that made it and every sink added with loguru's `logger.add` sees it. The silencing
must still come before anyone can enable a package, whoever imports loguru first (a host, a
test that adds its own sink): so when loguru is not imported yet, this module watches for its
import (one finder on `sys.meta_path`, which answers for the name `loguru` only) and disables
laneway's packages the moment loguru's package has run, as importing this module did before.

loguru builds its default stderr handler when it is first imported (unless `LOGURU_AUTOINIT`
is false), and that handler is its first importer's. The console script, whose process is the
command line's, has loguru imported without it (`without_default_handler`): it would remove
it anyway, and building a handler lists the library folders of every `sysconfig` install
scheme (~3 ms).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import os
import sys
from typing import TYPE_CHECKING, Any, TextIO, cast

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

    from loguru import Logger

__all__ = [
    "PACKAGES",
    "disable",
    "enable",
    "logger",
    "remove_handlers",
    "route",
    "wanted",
    "without_default_handler",
]

PACKAGES = ("core", "plugins", "kanban_plugin", "office_plugin")

_silenced: list[str] = list(PACKAGES)
"""Packages disabled the moment loguru is imported (laneway's, and any a plugin names to
`disable` before loguru is loaded)."""

_autoinit = True
"""False once `without_default_handler` is called: loguru is then imported as
`LOGURU_AUTOINIT=0` would."""

_routes: list[Callable[[], None]] = []
"""What `route` asked for before loguru was loaded: run right after the silencing."""


def _real() -> Logger:
    """loguru's logger, importing loguru (and so running the silencing) if need be."""
    import loguru

    return loguru.logger


_LEVEL_NO = {
    "TRACE": 5,
    "DEBUG": 10,
    "INFO": 20,
    "SUCCESS": 25,
    "WARNING": 30,
    "ERROR": 40,
    "CRITICAL": 50,
}
"""loguru's own levels: the only ones there are before loguru is loaded (a custom level is
added through loguru)."""

_METHOD_LEVEL = {name.lower(): no for name, no in _LEVEL_NO.items()} | {"exception": 40}
_CHAINED = frozenset(("bind", "opt", "patch"))
"""Methods that return a logger: recorded, and replayed on loguru's logger when needed."""

_floor: list[int] = []
"""The levels of the handlers `route` will add when loguru is loaded."""


def _dropped(level: int) -> bool:
    """Whether a record at `level` would reach no handler, known without loguru: only in a
    process whose handlers are laneway's (`without_default_handler`) while loguru is not
    loaded, when the only handlers there will be are `route`'s, all above `level`."""
    return not _autoinit and "loguru" not in sys.modules and level < min(_floor, default=99)


def wanted(level: int) -> bool:
    """Whether a record at `level` (a number) may reach a handler: False only when it surely
    reaches none, so a caller can skip building a costly record. loguru keeps the lowest level
    its handlers want on its core; if that is not where this version keeps it, True."""
    if "loguru" not in sys.modules:
        return not _dropped(level)
    least = getattr(getattr(_real(), "_core", None), "min_level", None)
    return not isinstance(least, (int, float)) or least <= level


def _no_record(*_args: Any, **_kwargs: Any) -> None:
    """What a record that no handler would take costs before loguru is loaded: nothing."""


class _LazyLogger:
    """Stands for loguru's logger until it is needed; then hands out its attributes, on
    loguru's logger with the recorded `bind`/`opt`/`patch` calls replayed. The caller calls
    loguru's method itself, so a record names the caller's module as it always did. A record
    no handler would take (`_dropped`) is not made, and loguru stays unloaded."""

    __slots__ = ("_calls",)

    def __init__(self, calls: tuple[tuple[str, tuple[Any, ...], dict[str, Any]], ...] = ()):
        self._calls = calls

    def _materialised(self) -> Any:
        real: Any = _real()
        for name, args, kwargs in self._calls:
            real = getattr(real, name)(*args, **kwargs)
        return real

    def __getattr__(self, name: str) -> Any:
        if "loguru" not in sys.modules:
            level = _METHOD_LEVEL.get(name)
            if level is not None and _dropped(level):
                return _no_record
            if name in _CHAINED:
                return self._chained(name)
        return getattr(self._materialised(), name)

    def _chained(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> _LazyLogger:
            return _LazyLogger((*self._calls, (name, args, kwargs)))

        return call

    def __repr__(self) -> str:
        if "loguru" in sys.modules:
            return repr(self._materialised())
        return "<laneway logger: loguru not loaded yet>"


logger = cast("Logger", _LazyLogger())


def _silence(real: Logger) -> None:
    for name in _silenced:
        real.disable(name)


class _WatchLoguru(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when `loguru` is about to be imported it wraps the spec the other
    finders give, so that laneway's packages are disabled as soon as loguru's package has run,
    before its importer can add a sink or enable anything."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != "loguru":
            return None
        # it stays on the path until loguru has run (a `find_spec` alone imports nothing)
        for finder in [f for f in sys.meta_path if not isinstance(f, _WatchLoguru)]:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _ThenSilence(spec.loader)
                return cast("ModuleSpec", spec)
        return None


class _ThenSilence(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # the module is loguru's as if no one had watched: its loader is loguru's own
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        saved = os.environ.get("LOGURU_AUTOINIT")
        if not _autoinit:
            os.environ["LOGURU_AUTOINIT"] = "0"
        try:
            self._loader.exec_module(module)
        finally:
            if saved is None:
                os.environ.pop("LOGURU_AUTOINIT", None)
            else:
                os.environ["LOGURU_AUTOINIT"] = saved
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _WatchLoguru)]
        _silence(module.logger)
        started, _routes[:], _floor[:] = list(_routes), [], []
        for start in started:
            start()


if "loguru" in sys.modules:
    _silence(sys.modules["loguru"].logger)
else:
    sys.meta_path.insert(0, _WatchLoguru())


def without_default_handler() -> None:
    """Have loguru, when this module first needs it, imported as if `LOGURU_AUTOINIT` were
    false (the environment left as it was: agents and plugins see the caller's). For the
    console script, whose logging is the command line's; nothing changes if loguru is
    imported already."""
    global _autoinit
    _autoinit = False


def remove_handlers() -> None:
    """Remove every loguru handler, for a process whose logging is laneway's (the console
    script): now if loguru is loaded, else by having it imported without its default one."""
    if "loguru" in sys.modules:
        logger.remove()
    else:
        without_default_handler()


def route(
    *, level: str | int = "WARNING", json: bool = False, stream: TextIO | None = None
) -> Callable[[], None]:
    """`enable`, for a command: now if loguru is loaded, else the moment it is (a command
    that emits no record never imports it). Returns the undo: the handler removed and
    laneway's packages silenced again. A level name is checked at once either way."""
    number = _LEVEL_NO.get(level.strip().upper()) if isinstance(level, str) else level
    if number is None and "loguru" not in sys.modules:
        raise ValueError(f"logging level {level!r}: no such level")
    handlers: list[int] = []
    sink = stream or sys.stderr

    def start() -> None:
        handlers.append(enable(level=level, json=json, stream=sink))

    if "loguru" in sys.modules:
        start()
    else:
        _routes.append(start)
        _floor.append(number or 0)

    def stop() -> None:
        with contextlib.suppress(ValueError):
            _routes.remove(start)
            _floor.remove(number or 0)
        for handler in handlers:
            logger.remove(handler)
            disable()

    return stop


def disable(*names: str) -> None:
    """Silence `names` (laneway's own packages when none is given), as loguru's
    `logger.disable` does, without importing loguru: a package named before loguru is loaded
    is disabled the moment it is (a plugin's recipe for libraries, at import)."""
    chosen = names or PACKAGES
    if "loguru" in sys.modules:
        for name in chosen:
            logger.disable(name)
        return
    _silenced.extend(name for name in chosen if name not in _silenced)


def enable(
    *, level: str | int = "WARNING", json: bool = False, stream: TextIO | None = None
) -> int:
    """Route records at `level` and above to `stream` (stderr); returns the loguru handler id.

    For the application (the `laneway` command): it enables every package's records, so a
    plugin that disabled its own at import, as loguru's library recipe says, is heard too.
    `level` is a level name in any case (`"info"`) or a number. loguru's own default handler,
    which prints everything down to DEBUG on stderr, is removed if it is still installed:
    otherwise it would print what `level` leaves out.
    """
    if isinstance(level, str):
        name = level.strip().upper()
        try:
            logger.level(name)
        except ValueError:
            raise ValueError(f"logging level {level!r}: no such level") from None
        level = name
    with contextlib.suppress(ValueError):
        logger.remove(0)  # loguru's default stderr handler (already gone: nothing to do)
    logger.enable("")
    sink: Any = stream or sys.stderr
    if json:
        return logger.add(sink, level=level, serialize=True)
    return logger.add(sink, level=level, format=_one_line, colorize=False)


_FIRST = ("why", "cause")
"""Fields that say what went wrong: they follow the message, the rest go in brackets."""


def _one_line(record: Any) -> str:
    """`LEVEL: message: why (key=value, ...)` on one line, for a person reading stderr: the
    record's fields as words, not a Python dict (`--log-json` keeps them as fields)."""
    extra = record["extra"]
    text = str(record["message"])
    for key in _FIRST:
        if extra.get(key) not in (None, ""):
            text += f": {extra[key]}"
    rest = [f"{k}={v}" for k, v in extra.items() if k not in _FIRST and not k.startswith("_")]
    if rest:
        text += f" ({', '.join(rest)})"
    extra["_line"] = " ".join(text.split())
    return "{level}: {extra[_line]}\n{exception}"
