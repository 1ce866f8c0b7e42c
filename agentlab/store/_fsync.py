"""Flushing a written file, and the folder entries a rename changed, to the disk."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fsync_dir", "fsync_file"]


def fsync_file(path: Path) -> None:
    """Flush a file's data to the disk (a rename must never publish a file whose data is still in memory)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Flush a folder's entries (the names a rename changed); a no-op where folders cannot be synced."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
