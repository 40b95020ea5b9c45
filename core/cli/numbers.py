"""Number options that are finite (core.numbers): `inf`, `nan` and `1e999` are refused where
they are typed, in one line naming the option (exit 1, as any user mistake); `-0` is `0`.
A whole number past what its database column holds is refused alike."""

from __future__ import annotations

from typing import Any, NoReturn

import click

from core.numbers import NOT_FINITE, finite


def _refuse(param: click.Parameter | None, problem: str) -> NoReturn:
    """A user mistake, not a usage error: one line naming the option (CLI.md)."""
    from core.cli.app import CommandFailed  # the app is loaded by the time options are read

    where = param.opts[0] if param is not None and param.opts else "value"
    raise CommandFailed(f"{where}: {problem}")


class FiniteFloat(click.FloatRange):
    """A float option, within the bounds given (none by default), never infinite or NaN."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        checked = finite(number)
        if checked is None:
            _refuse(param, f"{value!r} {NOT_FINITE}")
        return super().convert(checked, param, ctx)

    def __repr__(self) -> str:
        return f"FiniteFloat({self.min!r}, {self.max!r})"


FINITE = FiniteFloat()

INT64_MAX = 2**63 - 1
"""The largest id or count a database column holds (PostgreSQL's BIGINT): a bigger one is
refused as out of range, never handed to the driver."""
INT32_MAX = 2**31 - 1
"""The largest value of an INTEGER column (positions, limits)."""


class Whole(click.IntRange):
    """A whole-number option no larger than its database column holds; past it, one line
    says so (never the driver's error). Its help shows only the bound a person chose."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.INT.convert(value, param, ctx)
        if self.max is not None and number > self.max and self.max in (INT64_MAX, INT32_MAX):
            _refuse(param, f"{number} is larger than {self.max}, the most the database holds")
        return super().convert(number, param, ctx)

    def _describe_range(self) -> str:
        if self.max in (INT64_MAX, INT32_MAX):
            return f"x>={self.min}" if self.min is not None and self.min > -INT32_MAX - 1 else ""
        return super()._describe_range()


def whole(minimum: int | None, maximum: int = INT64_MAX) -> click.IntRange:
    """A whole-number option within what the database holds."""
    return Whole(minimum, maximum)
