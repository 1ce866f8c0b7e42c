"""One live store per file in a process: two stores on one file would hand out the same seqs."""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from agentlab.errors import StoreInUseError

__all__ = ["claim", "release"]

# The live store of each file, keyed by the file's real path.
_open_files: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
_lock = threading.Lock()


def _key(path: str) -> str:
    return os.path.realpath(os.path.abspath(path))


def claim(path: str, store: Any) -> None:
    """Make ``store`` the live store of ``path``.

    Raises:
        StoreInUseError: Another store of this process has ``path`` open.
    """
    with _lock:
        other = _open_files.get(_key(path))
        if other is not None and not other.closed:
            raise StoreInUseError(path)
        _open_files[_key(path)] = store


def release(path: str, store: Any) -> None:
    """``store`` let go of ``path`` (nothing happens if another store holds it now)."""
    with _lock:
        if _open_files.get(_key(path)) is store:
            del _open_files[_key(path)]
