"""A read cache of stored message JSON, so that reading a long branch again costs one parse and no query.

A chat turn reads its whole branch every time, and DuckDB's join of thousands of ``seq`` values against the
``messages`` table (about 30 ms at depth 10,000 in 100,000 rows) costs more than parsing the result. The cache
keeps the stored text of rows already known to be messages, by seq, so a read of cached rows joins strings in
Python and parses them once.

Invariants:

* It holds only texts that are exactly what the file holds for that seq, and only of rows that parsed to a
  message (so a read made only of cached texts needs no check). It is derived data: losing it loses nothing.
* :class:`agentlab.tree.MessageTree` owns one, changes it inside the write that changes the row, and empties
  it whenever its map goes stale (after a rollback), so it never outlives a change the file does not have.
* It is bounded by :data:`CONTENT_CACHE_CHARS` characters: when a new text would pass the bound, everything
  is dropped and filling starts again, which costs nothing per hit (no recency bookkeeping).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["CONTENT_CACHE_CHARS", "ContentCache"]

CONTENT_CACHE_CHARS = 64 * 1024 * 1024
"""Default bound of one agent's cache, in characters of stored JSON (about 64 MB of ASCII text)."""


class ContentCache:
    """``seq -> stored JSON text`` for rows that are messages, bounded by total characters."""

    def __init__(self, limit: int = CONTENT_CACHE_CHARS) -> None:
        self.limit = limit
        self._texts: dict[int, str] = {}
        self._chars = 0

    def __len__(self) -> int:
        return len(self._texts)

    @property
    def chars(self) -> int:
        """Characters held now."""
        return self._chars

    def lookup(self, seqs: Sequence[int]) -> list[str | None]:
        """The cached text of each seq, ``None`` where it is not cached."""
        get = self._texts.get
        return [get(s) for s in seqs]

    def put(self, seq: int, text: str) -> None:
        """Remember the text stored for ``seq`` (replacing an older one)."""
        old = self._texts.pop(seq, None)
        if old is not None:
            self._chars -= len(old)
        if self._chars + len(text) > self.limit:
            self.clear()
            if len(text) > self.limit:
                return
        self._texts[seq] = text
        self._chars += len(text)

    def put_many(self, pairs: Iterable[tuple[int, str]]) -> None:
        for seq, text in pairs:
            self.put(seq, text)

    def discard(self, seqs: Iterable[int]) -> None:
        """Forget these seqs (deleted rows)."""
        for seq in seqs:
            old = self._texts.pop(seq, None)
            if old is not None:
                self._chars -= len(old)

    def clear(self) -> None:
        self._texts.clear()
        self._chars = 0
