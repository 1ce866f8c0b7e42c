"""One live store per file in a process (two stores on one file would hand out the same seqs), and the files this
process closed cleanly.

A store that closes a file fully checkpointed records the file's stamp (:mod:`agentlab.store.stamp`) and the
migrations it had. Opening the file again while its stamp is the same proves nothing was written to it since, by
anyone: its schema is the one recorded, so the open may skip the migration checks and use a spare instance. A
hibernated agent is woken this way.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from agentlab.errors import StoreInUseError

__all__ = ["claim", "clean_identity", "closed_clean", "forget_clean", "release", "remember_clean"]

# The live store of each file, keyed by the file's real path.
_open_files: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
_lock = threading.Lock()
# Real path -> (stamp at a clean close, names of the migrations the file had then, the store's identity then).
_clean: dict[str, tuple[str, tuple[str, ...], str | None]] = {}


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


def remember_clean(path: str, stamp: str, migrations: tuple[str, ...], identity: str | None = None) -> None:
    """``path`` was closed with every commit checkpointed, its stamp ``stamp`` and ``migrations`` applied, and
    ``identity`` (:attr:`Store.identity <agentlab.store.Store.identity>`) verified against it."""
    with _lock:
        _clean[_key(path)] = (stamp, migrations, identity)


def closed_clean(path: str, stamp: str | None, migrations: tuple[str, ...]) -> bool:
    """Whether this process closed ``path`` cleanly with ``migrations`` applied, and its stamp is ``stamp`` still."""
    if stamp is None:
        return False
    with _lock:
        known = _clean.get(_key(path))
        return known is not None and known[:2] == (stamp, migrations)


def clean_identity(path: str) -> str | None:
    """The identity recorded at the clean close of ``path`` (None if none was, or no clean close is known)."""
    with _lock:
        known = _clean.get(_key(path))
        return None if known is None else known[2]


def forget_clean(path: str) -> None:
    """Forget a clean close of ``path`` (it is open again, or gone)."""
    with _lock:
        _clean.pop(_key(path), None)
