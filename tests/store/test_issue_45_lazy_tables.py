"""Issue 45 item 6: each table of `core.store.tables` is built the first time a process names
it, and `metadata` is still the whole schema (the migrations are compared against it, and
`create_all` builds from it). A fresh process's side (nothing
built at import, a move building only what it reads) is in tests/cli/test_issue_45_startup.py."""

from __future__ import annotations

import pytest

from core.store import tables


def test_issue_45_item_6_metadata_holds_every_table_and_names_resolve_to_them() -> None:
    every = tables.metadata.tables
    assert set(every) == set(tables._BUILDERS)
    assert len(every) == len(tables._BUILDERS) > 30
    for name in tables._BUILDERS:
        assert getattr(tables, name) is every[name]
    # the index declared beside its table is there too
    assert "ix_step_entries_pending" in {i.name for i in tables.step_entries.indexes}


def test_issue_45_item_6_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'no_such_table'"):
        tables.no_such_table  # noqa: B018 - the access is the test
