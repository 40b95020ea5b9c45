"""Files laneway keeps beside its bytecode between processes (`__pycache__`): what a process
would otherwise work out again at every start (attrs' generated methods, the installed
plugins' entry points). Written only where bytecode is (`PYTHONDONTWRITEBYTECODE`, a read-only
install: nothing), atomically (a reader sees the old file or the new one), never failing the
process. Imports only the standard library."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path


def beside(module_file: str, name: str) -> Path:
    """The kept file `name` of the package holding `module_file`, tagged by the interpreter
    (its bytecode tag), as the bytecode beside it is."""
    tag = sys.implementation.cache_tag or "python"
    return Path(module_file).with_name("__pycache__") / f"{name}.{tag}.bin"


def write(path: Path, data: bytes) -> None:
    """Replace `path` with `data`; nothing where bytecode is not written, or on any error."""
    if sys.dont_write_bytecode:
        return
    import tempfile

    with contextlib.suppress(OSError):
        path.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-")
        try:
            os.fchmod(fd, 0o644)  # as the bytecode beside it
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
