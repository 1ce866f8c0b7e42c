"""The default session storage: one session's view of the agent's message tree in its DuckDB file.

:class:`DuckDBSessionStorage` satisfies :class:`~agentlab.session.SessionStorage`,
:class:`~agentlab.session.SearchableStorage` and :class:`~agentlab.session.OutlineStorage` by
binding a session id to the store's one :class:`MessageTree`
(:func:`tree_of`), which keeps the parent map in memory and writes the ``messages`` and
``compactions`` tables.

Invariants:

* Every call first checks that the store is open, so a closed or destroyed agent raises its typed error
  (:class:`~agentlab.errors.AgentClosedError`, :class:`~agentlab.errors.AgentDestroyedError`) instead of answering
  from the tree's in-memory caches.
* Several storages (and sessions) may share one store; the tree, and so every cache, is the store's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agentlab.session._messages import DEFAULT_MAX_DEPTH, UNSET, Appended, CompactionRecord, RowStat, SearchHit
from agentlab.session.duckdb._compactions_table import load_events, record_event
from agentlab.session.duckdb._search import search_tree
from agentlab.session.duckdb._tree import MessageTree, tree_of
from agentlab.store import Store

__all__ = ["DuckDBSessionStorage", "resolve_owner"]


class DuckDBSessionStorage:
    """The messages of session ``session_id`` in ``store`` (an agent's DuckDB file).

    Args:
        store: The agent's :class:`~agentlab.store.Store`.
        session_id: The session (``""`` is the default one).
    """

    def __init__(self, store: Store, session_id: str = "") -> None:
        self.store = store
        self.session_id = session_id
        self.lock = store.lock
        self.tree: MessageTree = tree_of(store)

    def __repr__(self) -> str:
        return f"DuckDBSessionStorage({self.store.path!r}, {self.session_id!r})"

    def _open(self) -> MessageTree:
        if self.store.closed:
            self.store.conn  # noqa: B018 - raises the store's typed closed (or destroyed) error
        return self.tree

    @property
    def generation(self) -> int:
        return self._open().generation

    def after_commit(self, callback: Callable[[], None]) -> None:
        self.store.after_commit(callback)

    # -- reads -------------------------------------------------------------------------------------------------

    def get_message(self, message_id: str) -> dict[str, Any] | None:
        return self._open().get(self.session_id, message_id)

    def read(self, ids: Iterable[str]) -> list[dict[str, Any]]:
        return self._open().read(list(ids))

    def has_message(self, message_id: str) -> bool:
        return self._open().visible(self.session_id, message_id)

    def path_ids(self, leaf_id: str | None = None, *, max_depth: int = DEFAULT_MAX_DEPTH) -> list[str]:
        return self._open().path_ids(self.session_id, leaf_id, max_depth=max_depth)

    def path(self, leaf_id: str | None = None, *, max_depth: int = DEFAULT_MAX_DEPTH) -> tuple[list[str], bool]:
        return self._open().path(self.session_id, leaf_id, max_depth=max_depth)

    def read_path(self, leaf_id: str | None = None, *, max_depth: int = DEFAULT_MAX_DEPTH
                  ) -> tuple[list[str], list[dict[str, Any]], bool]:
        tree = self._open()
        with self.lock:  # by seq: the path's rows are read without looking their ids up again
            ids, seqs, cut = tree.path_rows(self.session_id, leaf_id, max_depth=max_depth)
            return ids, tree.read_seqs(seqs), cut

    def children_ids(self, message_id: str) -> list[str]:
        return self._open().children_ids(self.session_id, message_id)

    def latest_leaf_id(self) -> str | None:
        return self._open().latest_leaf_id(self.session_id)

    def row_stats(self, leaf_id: str | None = None, *, max_depth: int = DEFAULT_MAX_DEPTH) -> list[RowStat]:
        return self._open().row_stats(self.session_id, leaf_id, max_depth=max_depth)

    def nodes(self) -> list[tuple[str, str | None, str, int]]:
        return self._open().nodes(self.session_id)

    # -- writes ------------------------------------------------------------------------------------------------

    def append(self, message: Mapping[str, Any], parent_id: Any = UNSET) -> tuple[Appended, dict[str, Any]]:
        return self._open().append(self.session_id, message, parent_id)

    def append_many(self, messages: Iterable[Mapping[str, Any]],
                    parent_id: Any = UNSET) -> tuple[list[Appended], list[dict[str, Any]]]:
        return self._open().append_many(self.session_id, messages, parent_id)

    def update(self, message: Mapping[str, Any]) -> dict[str, Any]:
        return self._open().update(self.session_id, message)

    def delete(self, ids: Iterable[str]) -> list[str]:
        return self._open().delete(self.session_id, ids)

    def clear(self) -> int:
        return self._open().clear(self.session_id)

    # -- compaction overlays and runs --------------------------------------------------------------------------

    def compactions(self) -> list[CompactionRecord]:
        return self._open().compactions(self.session_id)

    def add_compaction(self, summary: str, from_message_id: str, to_message_id: str,
                       **details: Any) -> CompactionRecord:
        return self._open().add_compaction(self.session_id, summary, from_message_id, to_message_id, **details)

    def record_compaction_event(self, kind: str, *, trigger: str, leaf_id: str | None = None,
                                tokens_before: int | None = None, error: BaseException | None = None) -> None:
        self._open()
        record_event(self.store, self.session_id, kind, trigger=trigger, leaf_id=leaf_id,
                     tokens_before=tokens_before, error=error)

    def compaction_events(self) -> list[dict[str, Any]]:
        self._open()
        with self.store.lock:
            return load_events(self.store, self.session_id)

    # -- search ------------------------------------------------------------------------------------------------

    def search(self, query: str, *, mode: str = "phrase", limit: int = 20, role: str | None = None,
               branch: str | None = None, all_sessions: bool = False,
               max_depth: int = DEFAULT_MAX_DEPTH) -> list[SearchHit]:
        scope = None if all_sessions and branch is None else self.session_id
        return search_tree(self._open(), scope, query, mode=mode, limit=limit, role=role, branch=branch,
                           max_depth=max_depth)


def resolve_owner(owner: Any, session_id: str) -> tuple[Any, Store | None, Any]:
    """``(agent, store, storage)`` for a session built on ``owner``: an Agent, a Store or a SessionStorage.

    Raises:
        TypeError: ``owner`` is none of these.
        ValueError: A storage of another session than ``session_id``.
    """
    from agentlab.session._storage_contract import SessionStorage

    if isinstance(owner, Store):
        return None, owner, DuckDBSessionStorage(owner, session_id)
    if isinstance(owner, SessionStorage):
        if session_id and session_id != owner.session_id:
            raise ValueError(f"This storage holds session {owner.session_id!r}, not {session_id!r}.")
        return None, None, owner
    store = getattr(owner, "store", None)
    if isinstance(store, Store):
        return owner, store, DuckDBSessionStorage(store, session_id)
    raise TypeError(f"Session needs an Agent, a Store or a SessionStorage, not {type(owner).__name__}.")
