"""The store: the database, its tables, units of work and the reads the kernel needs."""
