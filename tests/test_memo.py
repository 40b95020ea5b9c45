"""core.memo (issue 14): a derivation of immutable objects is computed once per identity of
its arguments, and again for an equal but different object."""

from __future__ import annotations

from core import memo


def test_issue_14_by_identity_remembers_per_argument_identity() -> None:
    calls: list[tuple[object, ...]] = []

    @memo.by_identity
    def joined(parts: tuple[str, ...], sep: str) -> str:
        calls.append((parts, sep))
        return sep.join(parts)

    parts = ("a", "b")
    assert joined(parts, "-") == "a-b"
    assert joined(parts, "-") == "a-b"
    assert len(calls) == 1
    other = tuple(str(p) for p in parts)  # equal, not the same object
    assert other is not parts
    assert joined(other, "-") == "a-b"
    assert len(calls) == 2
