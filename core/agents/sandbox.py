"""An agent's room: the command line that runs it under bubblewrap (`profile --sandbox bwrap`).

Under `bwrap` the agent (exec or ACP, and the `laneway` tool server it starts) sees the machine
read-only and writes only to its turn's working directory (the task's worktree, with the parts
of the repository's git directory a worktree writes: its own `worktrees/<name>`, `objects`,
`refs`, `logs`), its own home and fresh temporary directories. What it must not see is covered
by an empty tmpfs or, for a single file, by `/dev/null`:

- the worker's home (the agent gets a home of its own at the same path, kept per task under
  `LANEWAY_WORKTREES/.homes/<task id>`, so an ACP agent's saved conversations survive);
- `LANEWAY_WORKTREES` (other tasks' worktrees), but its own;
- the board's SQLite file, its `-wal`, `-shm` and `-journal`, its directory and its
  `<database>.epochs` lock files (a PostgreSQL board: the server's socket directory);
- `/tmp`, `/var/tmp`, `/dev/shm` (other processes' files; the agent gets empty ones).

Mounts are laid out shallow before deep, so a path exposed inside a hidden one (the worktree
under a hidden home) is visible and a path hidden inside an exposed one is not; the database's
files are covered last, whatever holds them. The agent runs with no capabilities (as root
too: it cannot remount or unmount its way out), in its own PID namespace (it sees only its
own processes), and with `--network off` in an empty network namespace (loopback only). No
orphan rule changes: bwrap stays in the agent's process group (no `--new-session`), so the
worker's group kill, stop and sweep reach everything inside, and `--die-with-parent` and the
PID namespace take the inside with bwrap when it dies.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Final, Literal

import attrs
import sqlalchemy as sa
from sqlalchemy.engine import URL

from core import gitwork
from core.errors import LanewayError
from core.logs import logger
from core.model import AgentProfile, Task
from core.services import travel, worktrees
from core.store import dialect, rows
from core.store import tables as t
from core.store.liveness import epochs_dir

if TYPE_CHECKING:
    from core.store.database import Store

PACKAGE: Final = "bubblewrap"
"""The Debian package that installs `bwrap`."""
HOMES: Final = ".homes"
"""Under `LANEWAY_WORKTREES`: a home per task for sandboxed agents."""
ROOMS: Final = ".rooms"
"""Under `LANEWAY_WORKTREES`: the working directory of a sandboxed agent whose task has no
repository (`own_room`)."""
TEMP_DIRS: Final = ("/tmp", "/var/tmp", "/dev/shm")
PG_SOCKETS: Final = ("/run/postgresql", "/var/run/postgresql")

Kind = Literal["hide", "ro", "rw"]


class SandboxUnavailable(LanewayError):
    """The profile asks for a sandbox this machine cannot give (no `bwrap`)."""

    code: ClassVar[str] = "sandbox_unavailable"
    http_status: ClassVar[int] = 503


@attrs.frozen
class Room:
    """Where one agent may look and write; `wrap` makes the command line."""

    cwd: Path
    home: Path
    """The agent's own home (a directory of the worker's), seen at `home_at`."""
    home_at: Path
    network: bool
    hidden: tuple[Path, ...] = ()
    exposed: tuple[tuple[Path, Kind], ...] = ()
    masked: tuple[Path, ...] = ()
    """Files covered by /dev/null (after everything else)."""

    def exposing(self, paths: Iterable[Path], kind: Kind = "ro") -> Room:
        return attrs.evolve(self, exposed=(*self.exposed, *((p, kind) for p in paths)))

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """The agent's environment inside: its own home and temporary directory."""
        return {**env, "HOME": str(self.home_at), "TMPDIR": "/tmp"}

    def wrap(self, command: tuple[str, ...], env: Mapping[str, str]) -> tuple[str, ...]:
        """`command` run in the room: bwrap's command line. Raises SandboxUnavailable when
        bwrap is missing, LanewayError when the command is not found (as exec would say)."""
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise SandboxUnavailable(
                "the profile's sandbox needs bwrap, which is not installed "
                f"(the Debian package {PACKAGE!r}: apt-get install {PACKAGE})"
            )
        if not command:
            raise LanewayError("the agent profile has no command")
        program = _which(command[0], env, self.cwd)
        self.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        args = [
            bwrap,
            "--die-with-parent",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--cap-drop",
            "ALL",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
        ]
        if not self.network:
            args.append("--unshare-net")
        ops: list[tuple[Path, Kind, Path | None]] = [(Path(p), "hide", None) for p in TEMP_DIRS]
        ops += [(p, "hide", None) for p in self.hidden]
        ops += [(p, kind, None) for p, kind in self.exposed]
        # the program and what lies beside it (a script's modules, a venv's python's link)
        ops += [(program.parent, "ro", None), (program.resolve().parent, "ro", None)]
        ops.append((self.home_at, "rw", self.home))
        if self.cwd != Path("/"):  # a worker run from / gives its agents a read-only directory
            ops.append((self.cwd, "rw", None))
        # Shallow before deep; at one path, hiding before exposing (the turn's own directory
        # stays usable even when it is a hidden one: its database files are still covered).
        # bwrap follows a symlink in a destination: every path is named as it resolves
        ops = list({(p.resolve(), k, src): None for p, k, src in ops})
        order = {"hide": 0, "ro": 1, "rw": 2}
        covered = [p for p, kind, _ in ops if kind == "hide"]
        # only a path bound to itself shows what is there: the agent's home is another
        # directory at the worker's home's path, so what lies under the worker's home (a
        # Python, an agent installed in ~/.local) is bound in again, read-only
        writable = [p for p, kind, src in ops if kind == "rw" and src is None]
        for path, kind, source in sorted(ops, key=lambda o: (len(o[0].parts), order[o[1]])):
            if kind == "hide":
                if path.is_dir():
                    args += ["--tmpfs", str(path)]
            elif kind == "ro" and (
                not any(path.is_relative_to(c) for c in covered)
                or any(path.is_relative_to(w) for w in writable)
            ):
                # visible already: read-only as the whole machine is, or writable as its
                # room (the agent's own program in its worktree stays its to change)
                continue
            elif source is not None or path.exists():
                flag = "--bind" if kind == "rw" else "--ro-bind"
                args += [flag, str(source or path), str(path)]
        for path in dict.fromkeys(p.resolve() for p in self.masked):
            if path.is_dir():
                args += ["--tmpfs", str(path)]
            elif path.exists():
                args += ["--ro-bind", "/dev/null", str(path)]
        args += ["--chdir", str(self.cwd), "--", str(program), *command[1:]]
        return tuple(args)


def _which(name: str, env: Mapping[str, str], cwd: Path) -> Path:
    """The program exec would run for `name` (the agent's PATH, its directory), absolute but
    not resolved (a venv's python is known by the link it is called through)."""
    if os.path.dirname(name):
        candidate = Path(os.path.abspath(cwd / name))
        if candidate.is_file():
            return candidate
    else:
        found = shutil.which(name, path=env.get("PATH", os.defpath))
        if found is not None:
            return Path(os.path.abspath(found))
    raise LanewayError(f"cannot start {name!r}: No such file or directory")


def _git_parts(work: gitwork.WorktreeGit | None) -> list[tuple[Path, Kind]]:
    """What git needs of a worktree's repository: its git directory read-only, and writable
    what a commit in this worktree writes (objects, refs, logs, the worktree's own dir).
    Its hooks and config stay read-only: an agent cannot plant a hook a person then runs."""
    if work is None:
        return []
    common, own = work.common.resolve(), work.admin.resolve()
    parts: list[tuple[Path, Kind]] = [(common, "ro")]
    parts += [(common / name, "rw") for name in ("objects", "refs", "logs")]
    return [*parts, (own, "rw")]


def _worktree_git(repo: Path | None, cwd: Path) -> gitwork.WorktreeGit | None:
    """The worktree's git files, found from the repository laneway made it from (`repo`),
    never from the worktree's `.git` file or its `commondir`: the agent writes both, and what
    they named was mounted into its next turn's room (another task's worktree, the worker's
    home). None: no worktree, or one whose git files no longer name it."""
    if repo is None:
        return None
    try:
        return gitwork.worktree_git(repo, cwd)
    except LanewayError as exc:
        # its git files no longer name it (its agent changed them): a room without them
        logger.bind(path=str(cwd), repository=str(repo), error=str(exc)).warning(
            "the worktree's git files are not its repository's; its room has none"
        )
        return None


def own_room(task_id: str) -> Path:
    """The working directory of a sandboxed turn of a task with no repository. Not the
    worker's own directory, where an unsandboxed turn of such a task runs: that is where the
    board's SQLite file and the worker's files may be, and a room binds its working directory
    over whatever it hides (the worker's home, when the worker was started there)."""
    path = worktrees.root() / ROOMS / task_id
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def room(
    profile: AgentProfile,
    cwd: Path,
    task_id: str,
    db: URL,
    worker_env: Mapping[str, str] | None = None,
    *,
    repo: Path | None = None,
) -> Room | None:
    """The room a turn of `profile` runs in (None: no sandbox); `repo`: the repository the
    worktree `cwd` is of (None: no worktree)."""
    if profile.sandbox != "bwrap":
        return None
    env = os.environ if worker_env is None else worker_env
    root = worktrees.root()
    home = Path(env.get("HOME") or Path.home()).resolve()
    hidden = [root]
    if home != Path("/"):
        hidden.append(home)
    else:  # a home that is the whole machine is not hidden: the agent's own goes elsewhere
        home = Path("/tmp/home")
    masked: list[Path] = []
    if dialect.is_sqlite(db):
        path = dialect.sqlite_path(db)
        if path is not None:
            resolved = path.resolve()
            hidden.append(resolved.parent)
            masked += [resolved.with_name(resolved.name + s) for s in ("", "-wal", "-shm")]
            masked.append(resolved.with_name(resolved.name + "-journal"))
            epochs = epochs_dir(db)
            if epochs is not None:
                masked.append(epochs)
    else:
        hidden += [Path(p) for p in PG_SOCKETS]
        socket = db.query.get("host")
        if isinstance(socket, str) and socket.startswith("/"):
            hidden.append(Path(socket))
    # the tool server is this Python with this package: visible wherever they are
    code = Path(__file__).resolve().parents[2]
    prefixes = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    exposed: list[tuple[Path, Kind]] = [(p, "ro") for p in sorted(prefixes)]
    work = _worktree_git(repo, cwd)
    exposed += [(code, "ro"), *_git_parts(work)]
    if work is not None:
        # The worktree's own git directory is writable, and with `extensions.worktreeConfig`
        # git reads its `config.worktree` (laneway's git in the worktree too, outside the
        # room): a filter driver named there and in the agent's `.gitattributes` would run
        # as the worker. It is made, empty, and covered.
        own_config = work.admin.resolve() / "config.worktree"
        with contextlib.suppress(OSError):
            own_config.touch(exist_ok=True)
        masked.append(own_config)
    return Room(
        cwd=cwd.resolve(),
        home=root / HOMES / task_id,
        home_at=home,
        network=profile.network != "off",
        hidden=tuple(hidden),
        exposed=tuple(exposed),
        masked=tuple(masked),
    )


def cleanup_room(
    store: Store, task: Task, path: Path, argv: tuple[str, ...], env: dict[str, str]
) -> tuple[tuple[str, ...], dict[str, str]]:
    """The cleanup's command line and environment: in the room of the task's sandboxed agent
    when it had one (the profile of its sessions that has a sandbox, the one without network
    first). A cleanup such as `make clean` runs the worktree's own files, which that agent
    wrote: run as the worker, outside its room, they would do what the room kept it from."""
    with store.read() as conn:
        found = (
            conn.execute(
                sa.select(t.agent_profiles)
                .where(
                    t.agent_profiles.c.id.in_(
                        sa.select(t.task_sessions.c.agent_profile_id).where(
                            t.task_sessions.c.task_id == task.id
                        )
                    ),
                    t.agent_profiles.c.sandbox == "bwrap",
                )
                .order_by(t.agent_profiles.c.network, t.agent_profiles.c.id)
            )
            .mappings()
            .first()
        )
    if found is None or task.workspace is None:
        return argv, env
    room_ = room(
        rows.profile(found), path, task.id, store.url, repo=travel.checkout(task.workspace)
    )
    if room_ is None:
        return argv, env
    return room_.wrap(argv, env), room_.env(env)
