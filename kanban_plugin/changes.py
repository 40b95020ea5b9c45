"""`merge_branch` and `push_branch`: a task's branch leaving the board as durable entry actions
(CLI.md phase 4, docs/workspaces.md "From card to merged change").

Each runs behind a ledger marker, once per arrival whatever crashes: the effect is git's,
outside the database, so the executor names its claim to the service, which checks it just
before a ref moves (a fenced process moves none), and the service recognises an effect already
made (the base holds the branch, or a commit with this entry's `Laneway-Entry:` trailer; the
remote holds the commit) so recovery completes the marker instead of merging or pushing again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from plugins import api
from plugins.api import (
    ActionContext,
    ActionKind,
    Claim,
    ConfigError,
    LanewayError,
    Outcome,
    fault_point,
)

# `api.MERGE_STRATEGIES` and `api.MergeConflict` are read where used: the API loads git's
# merge machinery on first use, so loading this plugin (every command does) does not.


@attrs.frozen
class MergeConfig:
    strategy: str | None = None
    into: str | None = None
    on_conflict_step: str | None = None


def _optional_text(config: Mapping[str, Any], key: str) -> str | None:
    value = config.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"config.{key} must be a non-empty string", field=f"config.{key}")
    return value


def validate_merge(config: Mapping[str, Any]) -> MergeConfig:
    unknown = sorted(set(config) - {"strategy", "into", "on_conflict_step"})
    if unknown:
        raise ConfigError(f"merge_branch: unknown config {', '.join(unknown)}", field="config")
    strategy = _optional_text(config, "strategy")
    if strategy is not None and strategy not in api.MERGE_STRATEGIES:
        raise ConfigError(
            f"config.strategy must be one of {', '.join(api.MERGE_STRATEGIES)}",
            field="config.strategy",
        )
    return MergeConfig(
        strategy, _optional_text(config, "into"), _optional_text(config, "on_conflict_step")
    )


def validate_push(config: Mapping[str, Any]) -> None:
    if config:
        raise ConfigError("push_branch takes no config", field="config")


def _claim(ctx: ActionContext, kind: str) -> Claim | None:
    if ctx.entry_id is None or ctx.epoch is None:
        return None
    return Claim(ctx.entry_id, ctx.position, kind, ctx.epoch)


def merge_branch(ctx: ActionContext, config: MergeConfig) -> Outcome:
    changes = ctx.services.changes
    try:
        merged = changes.merge(
            ctx.task.id,
            strategy=config.strategy,
            into=config.into,
            claim=_claim(ctx, "merge_branch"),
        )
    except api.MergeConflict as conflict:
        if config.on_conflict_step is None:
            return Outcome.failed(str(conflict))
        into = config.into or (ctx.task.workspace or {}).get("base_branch") or "the base"
        step = changes.conflict_back(
            ctx.task.id, config.on_conflict_step, conflict.paths, str(into)
        )
        fault_point("merge.before_marker")
        return Outcome.done(
            cause=f"conflicts in {', '.join(conflict.paths)}; task sent back to {step}"
        )
    except LanewayError as exc:
        return Outcome.failed(str(exc))
    fault_point("merge.before_marker")
    return Outcome.done(cause=f"merged into {merged['into']} as {merged['commit'][:12]}")


def push_branch(ctx: ActionContext, _config: None) -> Outcome:
    try:
        pushed = ctx.services.changes.push(ctx.task.id, claim=_claim(ctx, "push_branch"))
    except LanewayError as exc:
        return Outcome.failed(str(exc))
    fault_point("push.before_marker")
    return Outcome.done(cause=f"pushed {pushed['commit'][:12]} to {pushed['remote']}")


@attrs.frozen
class PullRequestConfig:
    title: str | None = None
    body: str | None = None
    draft: bool = False


def validate_pull_request(config: Mapping[str, Any]) -> PullRequestConfig:
    unknown = sorted(set(config) - {"title", "body", "draft"})
    if unknown:
        raise ConfigError(f"open_pull_request: unknown config {', '.join(unknown)}", field="config")
    draft = config.get("draft", False)
    if not isinstance(draft, bool):
        raise ConfigError("config.draft must be true or false", field="config.draft")
    body = config.get("body")
    if body is not None and not isinstance(body, str):
        raise ConfigError("config.body must be a string", field="config.body")
    return PullRequestConfig(_optional_text(config, "title"), body, draft)


def _filled(template: str | None, ctx: ActionContext) -> str | None:
    """A title or body template: `{title}`, `{description}`, `{branch}` filled in."""
    if template is None:
        return None
    branch = (ctx.task.workspace or {}).get("branch", "")
    return (
        template.replace("{title}", ctx.task.title)
        .replace("{description}", ctx.task.description)
        .replace("{branch}", str(branch))
    )


def open_pull_request(ctx: ActionContext, config: PullRequestConfig) -> Outcome:
    try:
        opened = ctx.services.changes.pull_request(
            ctx.task.id,
            title=_filled(config.title, ctx),
            body=_filled(config.body, ctx),
            draft=config.draft,
            claim=_claim(ctx, "open_pull_request"),
        )
    except LanewayError as exc:
        return Outcome.failed(str(exc))
    fault_point("pull_request.before_marker")
    return Outcome.done(cause=f"pull request #{opened['number']} {opened['url']}")


@attrs.frozen
class SyncConfig:
    on_merged_step: str | None = None
    on_closed_step: str | None = None


def validate_sync(config: Mapping[str, Any]) -> SyncConfig:
    unknown = sorted(set(config) - {"on_merged_step", "on_closed_step"})
    if unknown:
        raise ConfigError(f"sync_pull_request: unknown config {', '.join(unknown)}", field="config")
    return SyncConfig(
        _optional_text(config, "on_merged_step"), _optional_text(config, "on_closed_step")
    )


def sync_pull_request(ctx: ActionContext, config: SyncConfig) -> Outcome:
    steps = {"merged": config.on_merged_step, "closed": config.on_closed_step}
    try:
        # the service moves the task before it records the new state: a sync that dies
        # between the two leaves the change for the next one, never a move lost
        synced = ctx.services.changes.sync_pull_request(
            ctx.task.id, moves={state: step for state, step in steps.items() if step}
        )
    except LanewayError as exc:
        return Outcome.failed(str(exc))
    return Outcome.done(
        cause=f"pull request {synced['state']}; {synced['comments_added']} new comment(s)"
    )


KINDS = (
    ActionKind(
        "merge_branch",
        "durable",
        execute=merge_branch,
        validate=validate_merge,
        description="merge the task's branch into its base branch, once per arrival",
    ),
    ActionKind(
        "push_branch",
        "durable",
        execute=push_branch,
        validate=validate_push,
        description="push the task's branch to its workflow's remote, once per arrival",
    ),
    ActionKind(
        "open_pull_request",
        "durable",
        execute=open_pull_request,
        validate=validate_pull_request,
        description="push the branch and open (or update) its pull request, once per arrival",
    ),
    ActionKind(
        "sync_pull_request",
        "durable",
        execute=sync_pull_request,
        validate=validate_sync,
        description="read the pull request's review comments and state back onto the task",
    ),
)
