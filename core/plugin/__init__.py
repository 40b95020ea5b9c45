"""The plugin wing of core: what plugins declare (`kinds`, `specs`, `views`), how a host loads
them (`selection`, `loading`), calls them (`calls`, the one per-implementation guard) and
registers what they declared (`registry`), and the feature switches their kinds belong to
(`features`). Importing this package imports none of its modules."""
