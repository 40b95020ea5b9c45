from __future__ import annotations

import builtins
import threading
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from core import ids
from core.errors import Conflict, LanewayError, NotFound
from core.model import Step, Workflow
from core.services.base import Service
from core.store import rows
from core.store import tables as t
from core.workflows import (
    WorkflowDecl,
    WorkflowFileError,
    check_workflow,
    export_document,
    instantiate,
    load_file,
    load_text,
    shipped_template,
    shipped_templates,
    validate_with_registry,
)


class WorkflowService(Service):
    """Workflows: templates, import, export, lookup.

    A workflow's declaration never changes after it is stored (there is no edit API), so the
    accessor caches it: the transition path reads a declaration once per arrival without a
    database round trip.
    """

    def __init__(self, host: Any) -> None:
        super().__init__(host)
        self._cache: dict[str, Workflow] = {}
        self._step_owner: dict[str, str] = {}
        self._cache_lock = threading.Lock()

    # -- templates and import --------------------------------------------------------------

    def templates(self) -> list[WorkflowDecl]:
        return shipped_templates()

    def create_from_template(self, template_id: str, *, name: str | None = None) -> Workflow:
        decl = shipped_template(template_id)
        if decl is None:
            known = ", ".join(d.template_id or d.name for d in shipped_templates())
            raise NotFound(f"no template {template_id!r} (known: {known})")
        if name:
            import attrs

            decl = attrs.evolve(decl, name=name)
        return self._store_decls([decl])[0]

    def import_file(self, path: str | Path) -> builtins.list[Workflow]:
        """Import an internal template file or a portable export; all or nothing."""
        try:
            decls = load_file(Path(path))
        except OSError as exc:
            raise LanewayError(f"{path}: cannot read: {exc.strerror or exc}") from None
        except WorkflowFileError as exc:
            raise LanewayError(str(exc)) from None
        return self._store_decls(decls)

    def import_text(self, text: str, *, source: str = "<request body>") -> builtins.list[Workflow]:
        """Import a template or portable export given as YAML text; all or nothing."""
        try:
            decls = load_text(text, source=source)
        except WorkflowFileError as exc:
            raise LanewayError(str(exc)) from None
        return self._store_decls(decls)

    def _store_decls(self, decls: list[WorkflowDecl]) -> builtins.list[Workflow]:
        self._require_writer()
        registry = self.host.bundle.registry
        workspace = self.host.workspace.get()
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
        workflows = [instantiate(d, workspace_id=workspace.id) for d in decls]
        with self.host.store.transaction() as uow:
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
                        created_at=ids.now(),
                    )
                )
                if wf.steps:
                    uow.conn.execute(
                        sa.insert(t.workflow_steps), [rows.step_values(s) for s in wf.steps]
                    )
        return [self.get(wf.id) for wf in workflows]

    # -- lookup -----------------------------------------------------------------------------

    def list(self) -> builtins.list[Workflow]:
        with self.host.store.read() as conn:
            found = conn.execute(
                sa.select(t.workflows.c.id).order_by(t.workflows.c.created_at, t.workflows.c.id)
            ).scalars()
            ids_ = list(found)
        return [self.by_id(i) for i in ids_]

    def by_id(self, workflow_id: str) -> Workflow:
        cached = self._cache.get(workflow_id)
        if cached is not None:
            return cached
        with self.host.store.read() as conn:
            wf = rows.load_workflow(conn, workflow_id)
        if wf is None:
            raise NotFound(f"no workflow {workflow_id!r}")
        with self._cache_lock:
            self._cache[workflow_id] = wf
            for step in wf.steps:
                self._step_owner[step.id] = wf.id
        return wf

    def get(self, ref: str) -> Workflow:
        """A workflow by id, or by name (case-insensitive)."""
        try:
            return self.by_id(ref)
        except NotFound:
            pass
        matches = [w for w in self.list() if w.name.casefold() == ref.casefold()]
        if not matches:
            raise NotFound(f"no workflow {ref!r}")
        if len(matches) > 1:
            raise LanewayError(f"workflow name {ref!r} is ambiguous; use its id")
        return matches[0]

    def step(self, workflow: Workflow, ref: str) -> Step:
        """A step of `workflow` by id or by name (case-insensitive)."""
        found = workflow.step(ref)
        if found is None:
            raise NotFound(f"workflow {workflow.name!r} has no step {ref!r}")
        return found

    def step_by_id(self, step_id: str) -> tuple[Workflow, Step]:
        """The step and its workflow; served from the accessor's cache once loaded."""
        workflow_id = self._step_owner.get(step_id)
        if workflow_id is None:
            with self.host.store.read() as conn:
                workflow_id = conn.execute(
                    sa.select(t.workflow_steps.c.workflow_id).where(
                        t.workflow_steps.c.id == step_id
                    )
                ).scalar()
        if workflow_id is None:
            raise NotFound(f"no step {step_id!r}")
        wf = self.by_id(workflow_id)
        step = wf.step(step_id)
        assert step is not None
        return wf, step

    # -- export and check -------------------------------------------------------------------

    def export(self, ref: str) -> dict[str, Any]:
        return export_document([self.get(ref)])

    def check(self, ref: str) -> builtins.list[str]:
        return check_workflow(self.get(ref), self.host.bundle.registry)
