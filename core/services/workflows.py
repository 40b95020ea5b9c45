from __future__ import annotations

import builtins
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import sqlalchemy as sa

from core import board, ids
from core.errors import Conflict, LanewayError, NotFound
from core.logs import logger
from core.model import AgentProfile, Participant, Step, Workflow
from core.services.base import Lazy, Service
from core.services.participants import merged_seats
from core.services.refs import find_workflow
from core.services.workspace import default_workspace
from core.store import rows
from core.store import tables as t
from core.text import require_text

if TYPE_CHECKING:
    from core.plugin.registry import Registry
    from core.services.peers import Peers
    from core.services.profiles import ProfileService
    from core.workflows import AgentUseAt, WorkflowDecl

# core.workflows (YAML, template loading, checks) is imported by the methods that use it:
# every host builds this service, few commands import or check a workflow.


@attrs.frozen
class AgentReach:
    """An agent a workflow's action can start or seat, and who that is today."""

    at: AgentUseAt
    profiles: tuple[str, ...]
    """The profile names it resolves to now (empty: none, or only known at run time)."""
    unknown_profile: bool
    """The action names a profile (by id or name) that does not exist."""

    def problem(self, workflow: str) -> str:
        from core.workflows import WorkflowFileError

        return str(
            WorkflowFileError(
                f"{self.at.kind} names agent profile '{self.at.use.profile}', which does not exist",
                workflow=workflow,
                step=self.at.step,
                field=self.at.field,
            )
        )

    def line(self, workflow: str) -> str:
        from core.workflows import WorkflowFileError

        use = self.at.use
        who = ", ".join(f"'{p}'" for p in self.profiles)
        if self.unknown_profile:
            who = "no such profile"
        elif not who:
            who = "resolved at run time"
        return str(
            WorkflowFileError(
                f"{self.at.kind} {use.verb} {use.target} ({who})",
                workflow=workflow,
                step=self.at.step,
                field=self.at.field,
            )
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "step": self.at.step,
            "field": self.at.field,
            "kind": self.at.kind,
            "verb": self.at.use.verb,
            "target": self.at.use.target,
            "profile": self.at.use.profile,
            "role": self.at.use.role,
            "resolves_to": list(self.profiles),
            "unknown_profile": self.unknown_profile,
        }


class WorkflowService(Service):
    """Workflows: templates, import, export, lookup.

    The accessor caches declarations, so the transition path reads one without a database
    round trip. The cache follows the board: every transaction that changes a workflow or a
    step moves the board's catalogue version (`core.board.bump`), and the host calls
    `forget()` when it sees the version move (at the start of its next transaction or read),
    in this process or any other.
    """

    def __init__(self, peers: Peers, *, profiles: Lazy[ProfileService]) -> None:
        super().__init__(peers)
        self._profiles = profiles

    def _seats_at(self, step_id: str) -> builtins.list[Participant]:
        # the template seats, read as `ParticipantService.seats_at` does: the participants name
        # the workflows (a seat is at a workflow's step), and one arrow is enough
        with self.peers.store.read() as conn:
            return merged_seats(conn, step_id, "")

    def forget(self) -> None:
        """Drop every cached declaration (the cache is the kernel's repository's)."""
        self.peers.repository.forget()

    # -- templates and import --------------------------------------------------------------

    def templates(self) -> list[WorkflowDecl]:
        from core.workflows import shipped_templates

        return shipped_templates()

    def create_from_template(
        self, template_id: str, *, name: str | None = None, exist_ok: bool = False
    ) -> Workflow:
        """A new workflow from a shipped template (named `name`, default the template's).

        :param exist_ok: when a workflow of that name made from this template exists, return
            it instead of refusing (so a script that sets up its board can run twice).
        """
        from core.workflows import shipped_template, shipped_templates

        decl = shipped_template(template_id)
        if decl is None:
            known = ", ".join(d.template_id or d.name for d in shipped_templates())
            raise NotFound(f"no template {template_id!r} (known: {known})")
        if name:
            require_text(name, "workflow name", t.column_length(t.workflows.c.name))
            decl = attrs.evolve(decl, name=name)
        if exist_ok:
            for existing in self.list():
                same_name = existing.name.casefold() == decl.name.casefold()
                if same_name and existing.template_id == decl.template_id:
                    return existing
        return self._store_decls([decl])[0]

    def import_file(self, path: str | Path) -> builtins.list[Workflow]:
        """Import an internal template file or a portable export; all or nothing."""
        from core.workflows import WorkflowFileError, load_file

        try:
            decls = load_file(Path(path))
        except OSError as exc:
            raise LanewayError(f"{path}: cannot read: {exc.strerror or exc}") from None
        except WorkflowFileError as exc:
            raise LanewayError(str(exc)) from None
        return self._store_decls(decls)

    def import_text(self, text: str, *, source: str = "<request body>") -> builtins.list[Workflow]:
        """Import a template or portable export given as YAML text; all or nothing."""
        from core.workflows import WorkflowFileError, load_text

        try:
            decls = load_text(text, source=source)
        except WorkflowFileError as exc:
            raise LanewayError(str(exc)) from None
        return self._store_decls(decls)

    def _store_decls(self, decls: list[WorkflowDecl]) -> builtins.list[Workflow]:
        from core.workflows import WorkflowFileError, instantiate, validate_with_registry

        self._require_writer()
        registry = self.peers.bundle.registry
        workspace = default_workspace(self.peers.store)
        for decl in decls:
            try:
                validate_with_registry(decl, registry)
            except WorkflowFileError as exc:
                raise LanewayError(str(exc)) from None
        existing = {w.name.casefold() for w in self.list()}
        seen: set[str] = set()
        for decl in decls:
            key = decl.name.casefold()
            if key in existing or key in seen:
                raise Conflict(
                    f"{decl.source}: workflow {decl.name!r} already exists "
                    "(give it another name; nothing was imported)"
                )
            seen.add(key)
        for decl in decls:
            _warn_unknown_kinds(decl, registry)
            for agent in self.agents_of(decl):
                if agent.unknown_profile:
                    logger.bind(
                        file=decl.source,
                        workflow=decl.name,
                        step=agent.at.step,
                        field=agent.at.field,
                        profile=agent.at.use.profile,
                    ).warning("the workflow names an agent profile that does not exist")
        workflows = [instantiate(d, workspace_id=workspace.id) for d in decls]
        with self.peers.store.transaction() as uow:
            for wf in workflows:
                uow.conn.execute(
                    sa.insert(t.workflows).values(
                        id=wf.id,
                        workspace_id=wf.workspace_id,
                        name=wf.name,
                        description=wf.description,
                        prompt=wf.prompt,
                        agent_profile_id=wf.agent_profile_id,
                        hidden=wf.hidden,
                        template_id=wf.template_id,
                        max_step_arrivals=wf.max_step_arrivals,
                        created_at=ids.now(),
                    )
                )
                if wf.steps:
                    uow.conn.execute(
                        sa.insert(t.workflow_steps), [rows.step_values(s) for s in wf.steps]
                    )
            board.bump(uow)
        return [self.get(wf.id) for wf in workflows]

    # -- lookup -----------------------------------------------------------------------------

    def list(self) -> builtins.list[Workflow]:
        with self.peers.store.read() as conn:
            found = conn.execute(
                sa.select(t.workflows.c.id).order_by(t.workflows.c.created_at, t.workflows.c.id)
            ).scalars()
            ids_ = list(found)
        return [self.by_id(i) for i in ids_]

    def by_id(self, workflow_id: str) -> Workflow:
        return self.peers.repository.workflow(workflow_id)

    def get(self, ref: str) -> Workflow:
        """A workflow by id, or by name (case-insensitive), as the board has it now.

        `by_id` and `step_by_id` (the arrival path's) serve the cache as of this thread's last
        transaction or read; this one checks the board's version first."""
        return find_workflow(self.peers, ref)

    def step(self, workflow: Workflow, ref: str) -> Step:
        """A step of `workflow` by id or by name (case-insensitive)."""
        found = workflow.step(ref)
        if found is None:
            raise NotFound(f"workflow {workflow.name!r} has no step {ref!r}")
        return found

    def step_by_id(self, step_id: str) -> tuple[Workflow, Step]:
        """The step and its workflow; served from the accessor's cache once loaded."""
        return self.peers.repository.step(step_id)

    def set_max_step_arrivals(self, ref: str, limit: int) -> Workflow:
        """Set the workflow's runaway-loop limit (0: no limit)."""
        self._require_writer()
        if type(limit) is not int or limit < 0:
            raise LanewayError(f"max_step_arrivals must be an integer >= 0, got {limit!r}")
        wf = self.get(ref)
        with self.peers.store.transaction() as uow:
            uow.conn.execute(
                sa.update(t.workflows)
                .where(t.workflows.c.id == wf.id)
                .values(max_step_arrivals=limit)
            )
        self.peers.repository.forget(wf.id)
        return self.by_id(wf.id)

    def set_repository(self, ref: str, repository: str | None, base_branch: str | None) -> Workflow:
        """Where the workflow's tasks' agents work: a git worktree of `repository` per task,
        from `base_branch` (default: the repository's checked-out branch). Checked now: a
        path that is no repository, or a branch it lacks, is refused naming it. An empty
        repository clears it. Tasks that have a worktree keep theirs."""
        from core.services import worktrees

        self._require_writer()
        wf = self.get(ref)
        if repository is None:
            repository = wf.repository
        repo, branch = worktrees.checked(repository, base_branch)
        with self.peers.store.transaction() as uow:
            uow.conn.execute(
                sa.update(t.workflows)
                .where(t.workflows.c.id == wf.id)
                .values(repository=repo, base_branch=branch)
            )
            board.bump(uow)
        self.peers.repository.forget(wf.id)
        return self.by_id(wf.id)

    def set_retire_worktrees(self, ref: str, retire: bool) -> Workflow:
        """Whether a task arriving at the workflow's terminal step has its worktree retired
        (uncommitted work committed to its branch, the checkout removed, the branch kept)."""
        self._require_writer()
        wf = self.get(ref)
        with self.peers.store.transaction() as uow:
            uow.conn.execute(
                sa.update(t.workflows)
                .where(t.workflows.c.id == wf.id)
                .values(retire_worktrees=bool(retire))
            )
            board.bump(uow)
        self.peers.repository.forget(wf.id)
        return self.by_id(wf.id)

    def set_remote(self, ref: str, remote: str) -> Workflow:
        """The git remote (a name of the workflow's repository's remotes, or a URL) its tasks'
        branches are pushed to (`task push`, `push_branch`); an empty one clears it. A name
        the repository does not know is refused naming it."""
        self._require_writer()
        wf = self.get(ref)
        value = remote.strip() or None
        if value is not None:
            if wf.repository is None:
                raise LanewayError(f"remote {value!r}: workflow {wf.name} has no repository")
            _check_remote(Path(wf.repository), value)
        with self.peers.store.transaction() as uow:
            uow.conn.execute(
                sa.update(t.workflows).where(t.workflows.c.id == wf.id).values(remote=value)
            )
            board.bump(uow)
        self.peers.repository.forget(wf.id)
        return self.by_id(wf.id)

    def set_commands(
        self, ref: str, *, setup: str | None = None, cleanup: str | None = None
    ) -> Workflow:
        """The shell commands run in its tasks' worktrees: `setup` once a worktree is new,
        before its first turn; `cleanup` before a worktree is removed. None keeps one, an
        empty one clears it."""
        self._require_writer()
        wf = self.get(ref)
        values: dict[str, str | None] = {}
        for name, given in (("setup", setup), ("cleanup", cleanup)):
            if given is None:
                continue
            if given.strip():
                require_text(given, f"workflow {wf.name}, {name}")
            values[name] = given if given.strip() else None
        if not values:
            return wf
        with self.peers.store.transaction() as uow:
            uow.conn.execute(sa.update(t.workflows).where(t.workflows.c.id == wf.id).values(values))
            board.bump(uow)
        self.peers.repository.forget(wf.id)
        return self.by_id(wf.id)

    def delete(self, ref: str) -> str:
        """Delete a workflow without tasks, its steps and their seats with it; refused while
        a task (archived ones too) is in it. One conditional DELETE decides: a task created
        in it meanwhile keeps it."""
        self._require_writer()
        wf = self.get(ref)
        tasks = t.tasks
        with self.peers.store.transaction() as uow:
            gone = uow.conn.execute(
                sa.delete(t.workflows)
                .where(
                    t.workflows.c.id == wf.id,
                    ~sa.exists(sa.select(tasks.c.id).where(tasks.c.workflow_id == wf.id)),
                )
                .execution_options(preserve_rowcount=True)
            ).rowcount
            if gone == 1:
                uow.conn.execute(
                    sa.update(t.workspaces)
                    .where(t.workspaces.c.office_workflow_id == wf.id)
                    .values(office_workflow_id=None)
                )
                board.bump(uow)
        if gone != 1:
            with self.peers.store.read() as conn:
                count = conn.execute(
                    sa.select(sa.func.count()).where(tasks.c.workflow_id == wf.id)
                ).scalar_one()
            raise Conflict(
                f"workflow {wf.name!r} still has {count} task{'s' if count != 1 else ''} "
                "(`laneway task delete` them, or `task switch-workflow` them elsewhere)"
            )
        self.peers.repository.forget(wf.id)
        return wf.id

    # -- export and check -------------------------------------------------------------------

    def export(self, ref: str) -> dict[str, Any]:
        from core.workflows import export_document

        return export_document([self.get(ref)])

    def check(self, ref: str) -> builtins.list[str]:
        """Problems: declarations the loaded plugins cannot run, and profile names that
        resolve to no agent profile."""
        from core.workflows import check_workflow

        workflow = self.get(ref)
        problems = check_workflow(workflow, self.peers.bundle.registry)
        for agent in self.agents_of(workflow):
            if agent.unknown_profile:
                problems.append(agent.problem(workflow.name))
        return problems + self._board_sources(workflow)

    def _board_sources(self, workflow: Workflow) -> builtins.list[str]:
        """Declared triggers whose source this board lacks (docs/workflow-format.md, "What
        fires where"): on_budget_alert while no budget is set."""
        from core.workflows.decl import WorkflowFileError

        declaring = [s for s in workflow.steps if s.events.get("on_budget_alert")]
        if not declaring:
            return []
        with self.peers.store.read() as conn:
            if conn.execute(sa.select(t.budgets.c.id).limit(1)).first() is not None:
                return []
        return [
            str(
                WorkflowFileError(
                    "on_budget_alert never fires: no budget is set on this board (budget set)",
                    workflow=workflow.name,
                    step=step.name,
                    field="events.on_budget_alert",
                )
            )
            for step in sorted(declaring, key=lambda s: s.position)
        ]

    def warnings(self, workflow: Workflow) -> builtins.list[str]:
        """What would leave the workflow's tasks waiting for nobody: a step whose
        `auto_start_agent` finds no agent today (no runner seat there, and neither the step nor
        the workflow names a profile), and a board where none of its actions can start any."""
        from core.workflows import WorkflowFileError

        agents = self.agents_of(workflow)
        found: builtins.list[str] = []
        for agent in agents:
            if agent.at.use.target == "primary" and not agent.profiles:
                step = agent.at.step
                found.append(
                    str(
                        WorkflowFileError(
                            f"{agent.at.kind} finds no agent: no runner seat at the step and "
                            "no profile on it or on the workflow (`participant add --step "
                            f"{step!r} --role runner --profile P --workflow {workflow.name!r}`)",
                            workflow=workflow.name,
                            step=step,
                            field=agent.at.field,
                        )
                    )
                )
        for agent in agents:
            why = _unresolved(agent)
            if why is not None:
                found.append(
                    str(
                        WorkflowFileError(
                            f"{agent.at.kind} target {agent.at.use.target} resolves to no agent "
                            f"today: {why}",
                            workflow=workflow.name,
                            step=agent.at.step,
                            field=agent.at.field,
                        )
                    )
                )
        starts = [a for a in agents if a.at.use.verb == "starts"]
        if not self._profiles().list():
            found.append(
                f"workflow {workflow.name!r}: no agent can start on this board: it has no agent "
                "profiles (`laneway profile add NAME --command CMD`)"
            )
        elif not any(a.profiles for a in starts):
            found.append(
                f"workflow {workflow.name!r}: no agent can start on it: "
                + (
                    "none of its actions resolves to an agent profile today"
                    if starts
                    else "none of its actions starts an agent"
                )
            )
        return found

    def _primary(
        self, workflow: Workflow, step_name: str, by_ref: Mapping[str, AgentProfile]
    ) -> builtins.list[str]:
        """Who `auto_start_agent` starts at the step for any task: its first runner seat,
        else the step's profile, else the workflow's (a task's own seats come on top)."""
        step = workflow.step(step_name)
        if step is None:
            return []
        seats = self._seats_at(step.id)
        runner = [s.agent_profile_id for s in seats if s.role == "runner"]
        for ref in (*runner[:1], step.agent_profile_id, workflow.agent_profile_id):
            if ref:
                return [by_ref[ref].name if ref in by_ref else ref]
        return []

    def agents_of(self, declared: Workflow | WorkflowDecl) -> builtins.list[AgentReach]:
        """Every agent `declared` can start or seat, each resolved against today's profiles
        (and, for a stored workflow, its steps' template seats)."""
        from core.workflows import agent_uses

        profiles = self._profiles().list()
        by_ref = {p.id: p for p in profiles} | {p.name.casefold(): p for p in profiles}
        step_ids = {s.name: s.id for s in declared.steps} if isinstance(declared, Workflow) else {}
        found = []
        for at in agent_uses(declared.steps, self.peers.bundle.registry):
            use = at.use
            names: builtins.list[str] = []
            unknown = False
            if use.profile is not None:
                profile = by_ref.get(use.profile) or by_ref.get(use.profile.casefold())
                unknown = profile is None
                names = [] if profile is None else [profile.name]
            elif use.target == "workspace.ceo_agent":
                names = [p.name for p in profiles if p.role == use.role][:1]
            elif use.target == "primary" and isinstance(declared, Workflow):
                names = self._primary(declared, at.step, by_ref)
            elif use.role is not None and at.step in step_ids:
                seats = self._seats_at(step_ids[at.step])
                ids_ = [s.agent_profile_id for s in seats if s.role == use.role]
                names = [by_ref[i].name if i in by_ref else i for i in dict.fromkeys(ids_)]
            found.append(AgentReach(at, tuple(names), unknown))
        return found


def _check_remote(repo: Path, remote: str) -> None:
    """A remote is a name the repository knows, or something git takes for a URL or path."""
    if "/" in remote or ":" in remote:
        return
    from core import gitwork  # here: every command reads workflows, few set a remote

    known = gitwork.git(repo, "remote").stdout.split()
    if remote not in known:
        names = ", ".join(known) or "none"
        raise LanewayError(f"remote {remote!r}: repository {repo} has no such remote ({names})")


def _warn_unknown_kinds(decl: WorkflowDecl, registry: Registry) -> None:
    """A kind no loaded plugin declares is imported (its plugin may come later) but never
    silently: one WARNING per action, naming the kind and the declared one nearest to it."""
    for step in decl.steps:
        for trigger, declared in step.events.items():
            for action in declared:
                if registry.kind(action.kind) is not None:
                    continue
                nearest = registry.nearest_kind(action.kind)
                hint = f"did you mean '{nearest}'?" if nearest else "no declared kind is near it"
                logger.bind(
                    file=decl.source,
                    workflow=decl.name,
                    step=step.name,
                    field=f"events.{trigger}[{action.position}]",
                ).warning(
                    f"kind '{action.kind}' is not declared by any loaded plugin ({hint}); "
                    "imported, but it will not run"
                )


def _unresolved(agent: AgentReach) -> str | None:
    """Why a seat or target other than `primary` (warned about on its own) and a named profile
    (a problem) finds no agent on this board today, or None when it finds one."""
    use = agent.at.use
    if agent.profiles or agent.unknown_profile or use.profile is not None:
        return None
    if use.target == "workspace.ceo_agent":
        return f"no profile has role {use.role or 'ceo'} (`profile add NAME --role ceo ...`)"
    if use.target != "primary" and use.role is not None and use.verb == "starts":
        return (
            f"no seat at the step has role {use.role} (`participant add --step "
            f"{agent.at.step!r} --role {use.role} --profile P --workflow W`; a task's own seat "
            "would also do)"
        )
    return None
