"""Issue 45 item 6: the methods attrs generates are compiled once and kept between processes
(core.attrs_code): a class made again from kept code compiles nothing and behaves as attrs
made it, its hash salted by this process; a class whose fields changed compiles afresh."""

from __future__ import annotations

import builtins
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from core import attrs_code


def _make(extra: bool = False) -> type:
    """A class made at the test module's level (`attrs.make_class`: not a function's local
    class, which is never kept), with or without a third field."""
    fields: dict[str, Any] = {
        "name": attrs.field(),
        "size": attrs.field(validator=attrs.validators.ge(0)),
    }
    if extra:
        fields["colour"] = attrs.field(default="red")
    return attrs.make_class("Value", fields, frozen=True)


def test_issue_45_item_6_a_class_made_inside_a_function_is_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(attrs_code, "_known", {})
    monkeypatch.setattr(attrs_code, "_used", set())

    @attrs.frozen
    class Local:
        name: str

    assert Local("a") == Local("a")
    assert attrs_code._known == {}


def test_issue_45_item_6_attrs_methods_kept_in_a_file_are_not_compiled_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = tmp_path / "attrs-code.bin"
    monkeypatch.setattr(attrs_code, "cache_file", lambda: kept)
    monkeypatch.setattr(attrs_code, "_known", {})
    monkeypatch.setattr(attrs_code, "_used", set())
    monkeypatch.setattr(attrs_code, "_learned", False)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)

    first = _make()
    attrs_code.save()
    assert kept.exists()

    # another process: what the file holds, and a compile that says when attrs' code is built
    attrs_code._known.clear()
    attrs_code._known.update(attrs_code._read(kept))
    compiled: list[str] = []
    real = builtins.compile

    def counting(source: Any, filename: Any, *args: Any, **kwargs: Any) -> Any:
        if str(filename).startswith("<attrs generated"):
            compiled.append(str(filename))
        return real(source, filename, *args, **kwargs)

    monkeypatch.setattr(builtins, "compile", counting)
    again = _make()
    assert compiled == []
    one, same, other = again("a", 1), again("a", 1), again("b", 2)
    assert one == same
    assert one != other
    assert hash(one) == hash(same)
    assert len({one, same, other}) == 2
    assert repr(one).endswith("Value(name='a', size=1)")
    with pytest.raises(ValueError, match="size"):
        again("c", -1)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        one.name = "z"  # type: ignore[misc]
    assert first("a", 1) == first("a", 1)

    # fields changed: compiled afresh, never the kept code of the old fields
    changed = _make(extra=True)
    assert compiled != []
    assert changed("a", 1).colour == "red"
