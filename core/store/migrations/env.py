"""alembic environment: always runs on a connection handed in by `core.store.migrate`."""

from __future__ import annotations

from alembic import context

from core.store.migrate import VERSION_TABLE
from core.store.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("laneway migrations run through core.store.migrate, with a connection")

context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=VERSION_TABLE,
    render_as_batch=True,  # SQLite cannot ALTER most things; batch mode copies the table
    transactional_ddl=True,
)
context.run_migrations()
