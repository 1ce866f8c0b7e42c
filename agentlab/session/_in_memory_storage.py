"""A session storage in plain Python: the reference the DuckDB storage is checked against, and a light one for tests.

:class:`InMemorySessionStorage` satisfies :class:`~agentlab.session.SessionStorage`,
:class:`~agentlab.session.SearchableStorage` and :class:`~agentlab.session.OutlineStorage` with
dictionaries and lists, written to be read: no caches, no incremental bookkeeping, every answer computed from the
rows. Nothing survives the process.

Invariants:

* Rows are kept as the compact JSON text :func:`~agentlab.session._messages.prepare_message` makes, so a read is a
  fresh parse and the byte sizes are those a DuckDB row would have.
* One counter orders everything (messages, overlays, runs), like the DuckDB store's seq clock.
* Search tokenizes like SQLite FTS5 (``porter unicode61``) and scores with FTS5's ``bm25()`` over this storage's
  messages; a rewritten message counts as indexed last, as FTS5 re-inserts its row.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from agentlab.errors import InvalidMessageError, UnknownMessageError
from agentlab.search import FTS5_BM25, bm25_term, fts5_idf, query_phrases, snippet, tokenize
from agentlab.session._messages import (
    DEFAULT_MAX_DEPTH,
    UNSET,
    Appended,
    CompactionRecord,
    RowStat,
    SearchHit,
    check_search,
    message_text,
    now_iso,
    prepare_message,
    prepare_placed,
)

__all__ = ["InMemorySessionStorage"]


@dataclass
class _Row:
    seq: int
    parent_id: str | None
    role: str
    content: str
    tokens: list[str] | None  # search tokens of the text parts; None when there is no text
    search_seq: int | None


class InMemorySessionStorage:
    """The message tree of one session, held in this process only.

    Args:
        session_id: The session id it reports (``""`` by default); nothing else depends on it.
    """

    def __init__(self, session_id: str = "") -> None:
        self.session_id = session_id
        self.lock = threading.RLock()
        self.generation = 0
        self._rows: dict[str, _Row] = {}  # insertion order is seq order
        self._compactions: list[CompactionRecord] = []
        self._events: list[dict[str, Any]] = []
        self._seq = 0

    def __repr__(self) -> str:
        return f"InMemorySessionStorage({self.session_id!r}, {len(self._rows)} messages)"

    def _next(self) -> int:
        self._seq += 1
        return self._seq

    def after_commit(self, callback: Callable[[], None]) -> None:
        callback()  # every write here is complete when it returns

    # -- reads -------------------------------------------------------------------------------------------------

    def get_message(self, message_id: str) -> dict[str, Any] | None:
        row = self._rows.get(message_id)
        return None if row is None else json.loads(row.content)

    def read(self, ids: Iterable[str]) -> list[dict[str, Any]]:
        with self.lock:
            return [json.loads(self._rows[m].content) for m in ids if m in self._rows]

    def has_message(self, message_id: str) -> bool:
        return message_id in self._rows

    def path_ids(self, leaf_id: str | None = None, *, max_depth: int = DEFAULT_MAX_DEPTH) -> list[str]:
        return self.path(leaf_id, max_depth=max_depth)[0]

    def path(self, leaf_id: str | None = None, *, max_depth: int = DEFAULT_MAX_DEPTH) -> tuple[list[str], bool]:
        with self.lock:
            start = leaf_id if leaf_id else self.latest_leaf_id()
            path: list[str] = []
            while start is not None and start in self._rows:
                if len(path) == max_depth:  # one more ancestor than fits: the path is cut
                    return path[::-1], True
                path.append(start)
                start = self._rows[start].parent_id
            return path[::-1], False

    def read_path(self, leaf_id: str | None = None, *, max_depth: int = DEFAULT_MAX_DEPTH
                  ) -> tuple[list[str], list[dict[str, Any]], bool]:
        with self.lock:
            ids, cut = self.path(leaf_id, max_depth=max_depth)
            return ids, self.read(ids), cut

    def children_ids(self, message_id: str) -> list[str]:
        with self.lock:
            return [m for m, row in self._rows.items() if row.parent_id == message_id]

    def latest_leaf_id(self) -> str | None:
        with self.lock:  # every read that walks the rows holds the lock: a writer may be changing them
            parents = {row.parent_id for row in self._rows.values()}
            leaves = [m for m in self._rows if m not in parents]
            return leaves[-1] if leaves else None

    def row_stats(self, leaf_id: str | None = None, *, max_depth: int = DEFAULT_MAX_DEPTH) -> list[RowStat]:
        with self.lock:
            return [RowStat(m, self._rows[m].role, len(self._rows[m].content.encode("utf-8")))
                    for m in self.path_ids(leaf_id, max_depth=max_depth)]

    def nodes(self) -> list[tuple[str, str | None, str, int]]:
        with self.lock:
            return [(m, row.parent_id, row.role, row.seq) for m, row in self._rows.items()]

    # -- writes ------------------------------------------------------------------------------------------------

    def _parent(self, parent_id: Any, batch: Iterable[str] = ()) -> str | None:
        if parent_id is UNSET:
            return self.latest_leaf_id()
        if parent_id is None:
            return None
        if not isinstance(parent_id, str):
            raise InvalidMessageError(f"parent_id must be a message id, None or omitted; got {parent_id!r}.")
        if parent_id in self._rows or parent_id in batch:
            return parent_id
        raise UnknownMessageError(parent_id, "parent message")

    def _check_cycle(self, mid: str, parent: str | None, pending: Mapping[str, str | None] = {}) -> None:
        # A deleted id appended again may still have children (its orphans): its new parent must not descend from it.
        seen = 0
        while parent is not None and seen <= len(self._rows) + len(pending):
            if parent == mid:
                raise InvalidMessageError(
                    f"Appending {mid!r} would make a cycle: its parent descends from an earlier message with id "
                    f"{mid!r}. Use a new id.")
            row = self._rows.get(parent)
            parent = row.parent_id if row is not None else pending.get(parent)
            seen += 1

    def _store(self, msg: dict[str, Any], content: str, parent: str | None) -> Appended:
        seq = self._next()
        text = message_text(msg)
        tokens = tokenize(text) if text else None
        self._rows[msg["id"]] = _Row(seq, parent, msg["role"], content, tokens, seq if tokens is not None else None)
        return Appended(msg["id"], parent, seq)

    def append(self, message: Mapping[str, Any], parent_id: Any = UNSET) -> tuple[Appended, dict[str, Any]]:
        msg, content = prepare_message(message)
        with self.lock:
            row = self._rows.get(msg["id"])
            if row is not None:
                return Appended(msg["id"], row.parent_id, row.seq, True), msg
            parent = self._parent(parent_id)
            self._check_cycle(msg["id"], parent)
            return self._store(msg, content, parent), msg

    def append_many(self, messages: Iterable[Mapping[str, Any]],
                    parent_id: Any = UNSET) -> tuple[list[Appended], list[dict[str, Any]]]:
        stamp = now_iso()
        with self.lock:
            prev = self._parent(parent_id)
            planned: dict[str, str | None] = {}  # new id -> parent, in order
            plan: list[tuple[str, dict[str, Any] | None, str]] = []  # (id, message if new, content)
            for message in messages:
                msg, content, own = prepare_placed(message, stamp=stamp)
                mid = msg["id"]
                parent = prev if own is UNSET else self._parent(own, planned)
                if mid in self._rows or mid in planned:
                    plan.append((mid, None, ""))
                else:
                    self._check_cycle(mid, parent, planned)
                    planned[mid] = parent
                    plan.append((mid, msg, content))
                prev = mid
            results: list[Appended] = []
            stored: list[dict[str, Any]] = []
            for mid, new, content in plan:
                if new is None:
                    row = self._rows[mid]
                    results.append(Appended(mid, row.parent_id, row.seq, True))
                else:
                    results.append(self._store(new, content, planned[mid]))
                    stored.append(new)
            return results, stored

    def update(self, message: Mapping[str, Any]) -> dict[str, Any]:
        msg, content = prepare_message(message)
        with self.lock:
            row = self._rows.get(msg["id"])
            if row is None:
                raise UnknownMessageError(msg["id"])
            text = message_text(msg)
            row.content, row.tokens = content, (tokenize(text) if text else None)
            row.search_seq = self._next() if row.tokens is not None else None
            self.generation += 1
            return msg

    def delete(self, ids: Iterable[str]) -> list[str]:
        with self.lock:
            doomed = list(dict.fromkeys(m for m in ids if m in self._rows))
            for mid in doomed:
                del self._rows[mid]
            if doomed:
                self.generation += 1
            return doomed

    def clear(self) -> int:
        with self.lock:
            count = len(self._rows)
            self._rows.clear()
            self._compactions.clear()
            self.generation += 1
            return count

    # -- compaction overlays and runs --------------------------------------------------------------------------

    def compactions(self) -> list[CompactionRecord]:
        with self.lock:
            return list(self._compactions)

    def add_compaction(self, summary: str, from_message_id: str, to_message_id: str,
                       **details: Any) -> CompactionRecord:
        with self.lock:
            record = CompactionRecord(
                seq=self._next(), id=uuid.uuid4().hex, session_id=self.session_id, summary=summary,
                from_message_id=from_message_id, to_message_id=to_message_id, leaf_id=details.get("leaf_id"),
                messages_covered=details.get("messages_covered"), tokens_before=details.get("tokens_before"),
                tokens_after=details.get("tokens_after"), trigger=details.get("trigger", "manual"),
                created_at=datetime.now(UTC))
            self._compactions.append(record)
            self.generation += 1
            return record

    def record_compaction_event(self, kind: str, *, trigger: str, leaf_id: str | None = None,
                                tokens_before: int | None = None, error: BaseException | None = None) -> None:
        with self.lock:
            self._events.append({
                "seq": self._next(), "kind": kind, "trigger": trigger, "leaf_id": leaf_id,
                "tokens_before": tokens_before, "error_type": type(error).__name__ if error is not None else None,
                "error": str(error) if error is not None else None, "created_at": datetime.now(UTC)})

    def compaction_events(self) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(e) for e in self._events]

    # -- search ------------------------------------------------------------------------------------------------

    def search(self, query: str, *, mode: str = "phrase", limit: int = 20, role: str | None = None,
               branch: str | None = None, all_sessions: bool = False,
               max_depth: int = DEFAULT_MAX_DEPTH) -> list[SearchHit]:
        if not check_search(query, mode, limit):
            return []
        phrases = query_phrases(query, mode)
        with self.lock:
            docs = sorted(((r.search_seq, m, r.tokens) for m, r in self._rows.items() if r.tokens is not None),
                          key=lambda d: d[0])  # type: ignore[arg-type, return-value]
            if not phrases or not docs:
                return []
            avgdl = sum(len(t) for _, _, t in docs) / len(docs)
            counts = {p: {m: _occurrences(t, p) for _, m, t in docs} for p in dict.fromkeys(phrases)}
            idfs = {p: fts5_idf(len(docs), sum(1 for n in c.values() if n)) for p, c in counts.items()}
            allowed = set(self.path_ids(branch, max_depth=max_depth)) if branch is not None else None
            scored = []
            for order, (_, mid, tokens) in enumerate(docs):
                found = [p for p in counts if counts[p][mid]]
                if not found or (mode != "any" and len(found) < len(counts)):
                    continue
                if (allowed is not None and mid not in allowed) or (role is not None and self._rows[mid].role != role):
                    continue
                score = 0.0
                for phrase in phrases:  # query order, repeats included, as FTS5 sums them
                    if counts[phrase][mid]:
                        tf, length = np.array([counts[phrase][mid]]), np.array([len(tokens)])
                        score += float(bm25_term(idfs[phrase], tf, length, avgdl, FTS5_BM25)[0])
                scored.append((-score, order, mid, score))
            scored.sort()
            current = set(self.path_ids())
            hits = []
            for _, _, mid, score in scored[:limit]:
                message = json.loads(self._rows[mid].content)
                text = message_text(message)
                hits.append(SearchHit(id=mid, role=message["role"], text=text, snippet=snippet(text, query),
                                      score=score, on_current_branch=mid in current, session_id=self.session_id,
                                      created_at=message.get("created_at")))
            return hits


def _occurrences(tokens: list[str], phrase: tuple[str, ...]) -> int:
    """How many times ``phrase`` occurs in ``tokens``, as adjacent tokens in order."""
    n = len(phrase)
    return sum(1 for i in range(len(tokens) - n + 1) if tuple(tokens[i:i + n]) == phrase)
