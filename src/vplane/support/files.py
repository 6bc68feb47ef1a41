"""Files only their owner can read: created with mode 0600 (directories 0700) from the first byte.

A file written and then ``chmod``-ed is readable by others in between; one opened with its mode never
is. Server processes also set their umask to 077 (``vplane.cli.options``), so files created by code that
does not pass a mode (SQLite's WAL, libraries) are private too.
"""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) with mode 0700; an existing directory is left as it is."""
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    return path


def write_private(path: Path, data: bytes | str) -> None:
    """Replace ``path`` atomically with ``data`` in a file created with mode 0600."""
    private_dir(path.parent)
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)  # a leftover could have another mode; O_EXCL below creates afresh
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(raw)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def others_can_access(mode: int) -> bool:
    """Whether a file mode grants anything to group or others."""
    return bool(mode & 0o077)
