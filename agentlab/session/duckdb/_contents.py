"""Stored message JSON kept in memory, and reading it back as messages.

A chat turn reads its whole branch every time, and DuckDB's join of thousands of ``seq`` values against the
``messages`` table (about 30 ms at depth 10,000 in 100,000 rows) costs more than parsing the result. So
:class:`ContentCache` keeps the stored text of rows already known to be messages, by seq, and
:meth:`ContentCache.read` asks DuckDB only for the rows it lacks. Up to :data:`HEADS` long branches read
recently are also kept parsed, each as one ``marshal`` blob (a head): loading that is about twice as fast as
parsing the same messages from JSON, and a branch that grew by a turn reads as its head plus a few parsed rows.

Invariants:

* It holds only texts that are exactly what the file holds for that seq, and only of rows that parsed to a
  message (so a read made only of cached texts needs no check). It is derived data: losing it loses nothing.
* :class:`MessageTree` owns one, changes it inside the write that changes the row, and empties
  it whenever its map goes stale (after a rollback or SQL from outside), so it never outlives a change the
  file does not have. Any change to a stored text, and any deletion, drops every head.
* Every read returns new objects (the head is loaded, never shared), so callers may change what they get.
* It is bounded by :data:`CONTENT_CACHE_CHARS` characters: when a new text would pass the bound, everything
  is dropped and filling starts again, which costs nothing per hit (no recency bookkeeping).
* ``marshal`` is used only for this in-memory head, made here from parsed JSON values; nothing marshalled is
  ever written to disk or read from elsewhere.
"""

from __future__ import annotations

import gc
import json
import marshal
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from agentlab.session._messages import keep_messages

__all__ = ["CONTENT_CACHE_CHARS", "ContentCache", "gc_paused"]

CONTENT_CACHE_CHARS = 64 * 1024 * 1024
"""Default bound of one agent's cache, in characters of stored JSON (about 64 MB of ASCII text)."""

HEAD_MIN_ROWS = 256
"""Branches shorter than this are parsed from JSON every time (a head would save little)."""

HEAD_SLACK = 64
"""Rows a branch may grow past its head before the head is made again from the whole branch."""

HEADS = 4
"""Heads kept at once (the newest), so that reading two or three branches in turn does not remake them."""


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a block that allocates many acyclic objects.

    Parsing a long branch or importing thousands of messages allocates tens of thousands of dicts, lists and
    strings, which triggers collections that walk every object of the process (measured: a 20 ms parse took up
    to 200 ms, and a bulk import ran at 60% of its speed). JSON values and the rows built from them cannot
    form cycles, so nothing is left for the collector to find.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _parse_array(texts: list[str], *, check: bool = False) -> Any:
    """Parse stored texts as one JSON array (about 3x faster than one parse per row).

    With ``check``, return None unless every text is exactly one message value; without it, the texts must
    be cached ones (known messages).
    """
    if not texts:
        return []
    try:
        with gc_paused():
            parsed = json.loads("[" + ",".join(texts) + "]")
    except ValueError:
        if check:
            return None
        raise
    if check and (len(parsed) != len(texts) or len(keep_messages(parsed)) != len(parsed)):
        return None
    return parsed


def _parse_one(text: str) -> dict[str, Any] | None:
    """One stored text as a message, or None if it does not parse to one."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if keep_messages([value]) else None


class ContentCache:
    """``seq -> stored JSON text`` for rows that are messages, bounded by total characters."""

    def __init__(self, limit: int = CONTENT_CACHE_CHARS) -> None:
        self.limit = limit
        self._texts: dict[int, str] = {}
        self._chars = 0
        self._heads: list[tuple[list[int], bytes]] = []  # (seqs, marshal of their parsed messages), newest last

    def __len__(self) -> int:
        return len(self._texts)

    @property
    def chars(self) -> int:
        """Characters held now."""
        return self._chars

    # -- texts ---------------------------------------------------------------------------------

    def lookup(self, seqs: Sequence[int]) -> list[str | None]:
        """The cached text of each seq, ``None`` where it is not cached."""
        get = self._texts.get
        return [get(s) for s in seqs]

    def put(self, seq: int, text: str) -> None:
        """Remember the text stored for ``seq`` (replacing an older one)."""
        old = self._texts.pop(seq, None)
        if old is not None:
            self._chars -= len(old)
            if old != text:
                self._heads = []
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
        self._heads = []

    def clear(self) -> None:
        self._texts.clear()
        self._chars = 0
        self._heads = []

    # -- reading -------------------------------------------------------------------------------

    def read(self, seqs: list[int], fetch: Callable[[list[int]], dict[int, str]]) -> list[dict[str, Any]]:
        """The messages stored at ``seqs``, in that order, skipping rows that are missing or not messages.

        Args:
            seqs: Rows to read (a branch, root first, or any list).
            fetch: Returns ``{seq: stored text}`` for the seqs it is given that exist in the file.
        """
        if len(seqs) < HEAD_MIN_ROWS:
            return self._read_texts(seqs, fetch)
        for head_seqs, blob in reversed(self._heads):
            if len(head_seqs) <= len(seqs) <= len(head_seqs) + HEAD_SLACK and seqs[:len(head_seqs)] == head_seqs:
                with gc_paused():
                    front = marshal.loads(blob)
                return front + self._read_texts(seqs[len(head_seqs):], fetch)
        messages = self._read_texts(seqs, fetch)
        if len(messages) == len(seqs):  # every row a message, so the list lines up with seqs
            kept = [h for h in self._heads if h[0] != seqs][-(HEADS - 1):]
            self._heads = [*kept, (list(seqs), marshal.dumps(messages))]
        return messages

    def _read_texts(self, seqs: list[int], fetch: Callable[[list[int]], dict[int, str]]) -> list[dict[str, Any]]:
        texts = self.lookup(seqs)
        missing = [s for s, t in zip(seqs, texts) if t is None]
        if not missing:  # every text is cached, so every one is known to be a message
            return _parse_array(texts)  # type: ignore[arg-type]
        fetched = fetch(missing)
        texts = [fetched.get(s) if t is None else t for s, t in zip(seqs, texts)]
        kept = [(s, t) for s, t in zip(seqs, texts) if t is not None]
        parsed = _parse_array([t for _, t in kept], check=True)
        if parsed is not None:
            self.put_many((s, fetched[s]) for s in missing if s in fetched)
            return parsed
        # Some row does not parse or is not a message (skipped): judge the fetched rows one by one.
        out: list[dict[str, Any]] = []
        for seq, text in kept:
            if seq in fetched:
                value = _parse_one(text)
                if value is None:
                    continue
                self.put(seq, text)
                out.append(value)
            else:
                out.extend(_parse_array([text]))
        return out
