"""The built-in commands: where each is defined and its short help, read without importing
the command modules (`core.cli.app.LanewayGroup` imports one when it runs)."""

from __future__ import annotations

BUILTIN_COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("commands_setup", "init"),
    "workspace": ("commands_setup", "workspace"),
    "plugins": ("commands_setup", "plugins"),
    "recover": ("commands_setup", "recover"),
    "features": ("commands_setup", "features"),
    "workflow": ("commands_workflow", "workflow"),
    "profile": ("commands_workflow", "profile"),
    "task": ("commands_task", "task"),
    "participant": ("commands_task", "participant"),
    "session": ("commands_task", "session"),
    "turn": ("commands_task", "turn"),
    "decision": ("commands_task", "decision"),
    "runs": ("commands_ledger", "runs"),
    "entries": ("commands_ledger", "entries"),
    "permission": ("commands_permissions", "permission"),
    "question": ("commands_questions", "question"),
    "budget": ("commands_budget", "budget"),
    "costs": ("commands_budget", "costs"),
    "agent": ("commands_agents", "agent"),
    "worker": ("commands_agents", "worker_command"),
    "serve": ("commands_serve", "serve"),
    "watch": ("commands_watch", "watch"),
    "events": ("commands_watch", "events_command"),
    "prune": ("commands_prune", "prune"),
    "hook": ("commands_hooks", "hook"),
    "schedule": ("commands_schedules", "schedule"),
    "user": ("commands_users", "user"),
}
"""Each built-in command: its module under `core.cli` and the attribute holding it. A command
imports its module (and what that needs) only when it runs; `--help` reads `BUILTIN_HELP`."""

BUILTIN_HELP: dict[str, str] = {
    "init": "Create or upgrade the schema (idempotent).",
    "workspace": "The default workspace.",
    "plugins": "Plugins and what they declare.",
    "recover": (
        "Open the host (which runs the recovery scan), put runs claimed by dead workers "
        "back in the queue, and report what was done."
    ),
    "features": (
        "The board's feature switches, stored in the database and followed by every process."
    ),
    "workflow": "Workflows: templates, import, export, checks.",
    "profile": "Agent profiles.",
    "task": "Tasks and the routes that move them.",
    "participant": "Seats at a step: template seats and per-task seats.",
    "session": "Agent sessions.",
    "turn": "Turn boundaries: they fire on_turn_start and on_turn_complete.",
    "decision": "Participant verdicts.",
    "runs": "The runs queue.",
    "entries": "The entry ledger.",
    "permission": "Permission requests of ACP agents, answered by a person.",
    "question": "Questions agents asked a person.",
    "budget": "Spending limits: on_budget_alert fires as a scope's spending crosses them.",
    "costs": "What agents reported they spent.",
    "agent": "Agents that run outside laneway.",
    "worker": "Claim and execute queued runs.",
    "serve": "Serve the HTTP API, the event stream and the board page until SIGINT/SIGTERM.",
    "watch": "Tail the board's events in the terminal (alias: `events`).",
    "events": (
        "An alias of `watch`: tail the board's events. It is `watch` under the event "
        "stream's own name; `laneway watch --help` says the rest."
    ),
    "prune": "Delete old transcript items, and nothing else.",
    "hook": "Outbound webhooks: board events POSTed to a URL, signed, retried, never lost.",
    "schedule": "Tasks created by themselves, once per slot of N seconds.",
    "user": "People of the board: their roles and tokens (for `serve`).",
}
"""Each built-in command's short help, as `laneway --help` lists it without importing the
command modules (`tests/cli/test_cli_lazy.py` keeps it equal to the commands' own)."""
