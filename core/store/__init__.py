"""The store: tables, the unit of work, dialect differences, migrations, liveness locks, and
the kernel's reads (`repository`)."""
