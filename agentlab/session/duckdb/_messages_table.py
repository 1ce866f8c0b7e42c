"""How a message becomes a row of ``messages``: the INSERT statements and the columns of a bulk insert.

:class:`agentlab.session.duckdb._tree.MessageTree` decides what to store; this module says how, so that the statement an
append runs and the Arrow table a bulk import registers are written in one place.

Invariants:

* A row's ``search_tokens`` are the stemmed tokens of :func:`agentlab.session._messages.message_text` joined by single
  spaces ('' for text without tokens, NULL for no text), and ``search_seq`` is its seq (NULL when not
  indexed): what :class:`agentlab.search._fulltext.MessageIndex` reads back.
* ``created_at`` is the time DuckDB reads from the message's own ``created_at`` text, else the time it was
  stored. Plain ISO 8601 times with a zone are parsed here (both readers agree on them, and the cast costs
  about 0.2 ms to plan); any other text is left to DuckDB's ``TRY_CAST``, in single and bulk inserts alike.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from agentlab.search._postings import arrow_ints, arrow_optional_strings, arrow_strings
from agentlab.search._token_arrays import token_array
from agentlab.search._tokenizer import tokenize
from agentlab.session._messages import message_text

__all__ = ["insert_one", "insert_rows", "plain_time", "search_tokens"]

_INSERT_ONE = """
INSERT INTO messages (seq, id, session_id, parent_id, role, content, created_at, search_tokens, search_seq)
VALUES (?, ?, ?, ?, ?, ?, COALESCE(TRY_CAST(? AS TIMESTAMPTZ), now()), ?, ?)
"""

# The same insert with created_at already a datetime: the COALESCE(TRY_CAST(...)) expression costs about
# 0.2 ms to bind and plan, a tenth of a durable append.
_INSERT_ONE_TIMED = """
INSERT INTO messages (seq, id, session_id, parent_id, role, content, created_at, search_tokens, search_seq)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
"""

# ISO 8601 times with a zone that Python and DuckDB read alike; anything else is left to DuckDB's TRY_CAST.
PLAIN_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:Z|[+-]\d{2}:\d{2})")


def plain_time(text: str) -> datetime | None:
    """``text`` as an aware datetime if it is a plain ISO time with a zone that Python parses, else None."""
    if not PLAIN_TIME.fullmatch(text):
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


_INSERT_BATCH = """
INSERT INTO messages (seq, id, session_id, parent_id, role, content, created_at, search_tokens, search_seq)
SELECT seq, id, session_id, parent_id, role, content, COALESCE(TRY_CAST(created AS TIMESTAMPTZ), now()),
       tokens, CASE WHEN tokens IS NULL THEN NULL ELSE seq END
FROM _agentlab_message_batch
"""


def search_tokens(msg: dict[str, Any]) -> list[str] | None:
    """The tokens a message row carries for search: of its text parts, or None if it has none (not indexed)."""
    text = message_text(msg)
    return tokenize(text) if text else None


def insert_one(seq: int, mid: str, session_id: str, parent: str | None, msg: dict[str, Any], content: str,
               tokens: list[str] | None) -> tuple[str, list[Any]]:
    """The statement and parameters that store one prepared message at ``seq``."""
    when = plain_time(msg["created_at"])
    return (_INSERT_ONE if when is None else _INSERT_ONE_TIMED,
            [seq, mid, session_id, parent, msg["role"], content, msg["created_at"] if when is None else when,
             None if tokens is None else " ".join(tokens), None if tokens is None else seq])


def insert_rows(conn: Any, session_id: str, ids: list[str], parents: list[str | None], stored: list[dict[str, Any]],
                contents: list[str], first: int) -> tuple[list[str], Any]:
    """Insert new rows (seqs ``first``, ``first + 1``, ...) through one Arrow table.

    Returns:
        The rows' roles, and the indexed ones as an Arrow table (doc_id, grp, seq, search_seq, length, tokens,
        content, token_codes) for the search index, or None if no row has text.
    """
    import numpy as np
    import pyarrow as pa

    n = len(ids)
    roles = [m["role"] for m in stored]
    texts = [message_text(m) for m in stored]
    indexed = [i for i, text in enumerate(texts) if text]
    found = token_array([texts[i] for i in indexed])
    if len(indexed) == n:
        tokens = found.joined
    else:  # rows without text get NULL tokens (not indexed)
        joined: list[str | None] = [None] * n
        for i, value in zip(indexed, found.joined.to_pylist()):
            joined[i] = value
        tokens = arrow_optional_strings(joined)
    # Arrow arrays built from buffers: pa.array over Python lists imports pandas on first use (0.5 s).
    batch = pa.table({
        "seq": arrow_ints(np.arange(first, first + n, dtype=np.int64)),
        "id": arrow_strings(ids),
        "session_id": arrow_strings([session_id] * n),
        "parent_id": arrow_optional_strings(parents),
        "role": arrow_strings(roles),
        "content": arrow_strings(contents),
        "created": arrow_strings([m["created_at"] for m in stored]),
        "tokens": tokens,
    })
    conn.register("_agentlab_message_batch", batch)
    try:
        conn.execute(_INSERT_BATCH).fetchall()
    finally:
        conn.unregister("_agentlab_message_batch")
    if not indexed:
        return roles, None
    picked = batch if len(indexed) == n else batch.take(arrow_ints(np.array(indexed, dtype=np.int64)))
    search = pa.table({"doc_id": picked.column("id"), "grp": picked.column("session_id"), "seq": picked.column("seq"),
                       "search_seq": picked.column("seq"), "length": arrow_ints(found.lengths),
                       "tokens": picked.column("tokens"), "content": picked.column("content"),
                       "token_codes": found.coded()})
    return roles, search
