"""Number options that are finite (core.numbers): `inf`, `nan` and `1e999` are refused where
they are typed, naming the option; `-0` is `0`."""

from __future__ import annotations

from typing import Any

import click

from core.numbers import NOT_FINITE, finite


class FiniteFloat(click.FloatRange):
    """A float option, within the bounds given (none by default), never infinite or NaN."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        checked = finite(number)
        if checked is None:
            self.fail(f"{value!r} {NOT_FINITE}", param, ctx)
        return super().convert(checked, param, ctx)

    def __repr__(self) -> str:
        return f"FiniteFloat({self.min!r}, {self.max!r})"


FINITE = FiniteFloat()
