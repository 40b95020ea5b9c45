"""Opening a file an agent names, once, confined to its session's working directory.

A check of the resolved path followed by an open of it is a race an agent wins: between the two
it swaps a file for a symlink out of the tree (issue 39 item 5). So the path is resolved by the
kernel in the open itself, beneath a descriptor of the root: `openat2(2)` with
`RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS` (Linux 5.6), which refuses (EXDEV) any `..`, absolute
symlink or symlink whose target leaves the root, at the moment of the open. Where `openat2` is
missing, each component is opened from the previous one's descriptor with `O_NOFOLLOW`, and a
symlink anywhere in the path is refused (stricter: no symlink inside the tree either).
"""

from __future__ import annotations

import ctypes
import errno
import os
import posixpath
import struct
import sys
from pathlib import Path
from typing import Final

_SYS_OPENAT2: Final = 437  # the same number on every Linux architecture (unified since 5.1)
_RESOLVE_NO_MAGICLINKS: Final = 0x02
_RESOLVE_BENEATH: Final = 0x08
_O_PATH: Final = getattr(os, "O_PATH", 0)


class Outside(Exception):
    """The path leaves the root (or cannot be named beneath it)."""


def _syscall() -> object | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall
    except (OSError, AttributeError):
        return None


_SYSCALL = _syscall()
_openat2_works: bool | None = None


def _openat2(dirfd: int, path: str, flags: int, mode: int) -> int:
    """openat2(dirfd, path, {flags, mode, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS}); raises
    OSError (ENOSYS when the kernel has none)."""
    if _SYSCALL is None:
        raise OSError(errno.ENOSYS, "openat2 unavailable")
    how = ctypes.create_string_buffer(
        struct.pack(
            "QQQ",
            flags | os.O_CLOEXEC,
            mode if flags & os.O_CREAT else 0,  # openat2 refuses a mode it would not use
            _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS,
        )
    )
    fd: int = _SYSCALL(  # type: ignore[operator]
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_int(dirfd),
        ctypes.c_char_p(os.fsencode(path)),
        how,
        ctypes.c_size_t(24),
    )
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return fd


def relative(root: Path, path: str) -> str:
    """`path` (absolute, or relative to `root`) as a path beneath `root`, lexically; Outside
    when it is not beneath it. A NUL in it is a ValueError."""
    if "\0" in path:
        raise ValueError("the path contains a NUL character")
    if not os.path.isabs(path):
        rel = path
    else:
        for base in (str(root), os.path.realpath(root)):
            if path == base or path.startswith(base.rstrip("/") + "/"):
                rel = path[len(base) :].lstrip("/")
                break
        else:
            raise Outside(path)
    rel = posixpath.normpath(rel) if rel else "."
    if rel == ".." or rel.startswith(("../", "/")):
        raise Outside(path)
    return rel


def open_beneath(root: Path, rel: str, flags: int, mode: int = 0o666) -> int:
    """An fd of `rel` beneath `root`, opened once with the resolution confined to `root`;
    Outside when it would leave it (a symlink out included)."""
    global _openat2_works
    rootfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if _openat2_works is not False:
            try:
                fd = _openat2(rootfd, rel, flags, mode)
            except OSError as exc:
                if exc.errno == errno.EXDEV or exc.errno == errno.ELOOP:
                    raise Outside(rel) from None
                if exc.errno not in (errno.ENOSYS, errno.EPERM):
                    raise
                _openat2_works = False  # no openat2 (or a seccomp filter refusing it)
            else:
                _openat2_works = True
                return fd
        return _walk(rootfd, rel, flags, mode)
    finally:
        os.close(rootfd)


def _walk(rootfd: int, rel: str, flags: int, mode: int) -> int:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts:
        return os.open(".", flags | os.O_CLOEXEC, mode, dir_fd=rootfd)
    fd = os.dup(rootfd)
    try:
        for part in parts[:-1]:
            try:
                step = os.open(
                    part,
                    _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                    dir_fd=fd,
                )
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(part, fd):
                    raise Outside(rel) from None
                raise
            os.close(fd)
            fd = step
        try:
            return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Outside(rel) from None
            raise
    finally:
        os.close(fd)


def _is_link(name: str, dirfd: int) -> bool:
    try:
        os.readlink(name, dir_fd=dirfd)
    except OSError:
        return False
    return True


def make_parents(root: Path, rel: str) -> None:
    """Create the directories above `rel` beneath `root`, each one opened confined before the
    next is made in it."""
    parts = [p for p in posixpath.dirname(rel).split("/") if p not in ("", ".")]
    for i in range(len(parts)):
        parent = "/".join(parts[:i]) or "."
        fd = open_beneath(root, parent, _O_PATH | os.O_DIRECTORY)
        try:
            os.mkdir(parts[i], dir_fd=fd)
        except FileExistsError:
            pass
        finally:
            os.close(fd)
