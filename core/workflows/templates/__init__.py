"""The workflow templates laneway ships, as package data.

Read them through `core.workflows.shipped_templates()`.
"""
