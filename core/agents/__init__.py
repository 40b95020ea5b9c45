"""The agent wing: the worker, sessions, turns, protocols, failures (docs/architecture.md)."""
