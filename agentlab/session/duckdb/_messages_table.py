"""The ``messages`` table's SQL: how a message becomes a row, and every statement that reads or changes rows.

:class:`agentlab.session.duckdb._tree.MessageTree` decides what to store, the tree index, the parent map, the
message index and the frames decide what to read; this module says how. It is the only module of the package
that names the table, so a change of its columns is made here (the schema itself is the store's migrations).

Invariants:

* A row's ``search_tokens`` are the stemmed tokens of :func:`agentlab.session._messages.message_text` joined by single
  spaces ('' for text without tokens, NULL for no text), and ``search_seq`` is its seq (NULL when not
  indexed): what :class:`agentlab.session.duckdb._message_index.MessageIndex` reads back.
* ``created_at`` is the time DuckDB reads from the message's own ``created_at`` text, else the time it was
  stored. Plain ISO 8601 times with a zone are parsed here (both readers agree on them, and the cast costs
  about 0.2 ms to plan); any other text is left to DuckDB's ``TRY_CAST``, in single and bulk inserts alike.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from agentlab.search import arrow_ints, arrow_optional_strings, arrow_strings, token_array, tokenize
from agentlab.session._messages import message_text
from agentlab.session.duckdb._frame_columns import PARTS, PARTS_SCHEMA, TEXT_NULL, TOOL_SCHEMA, json_text

__all__ = [
    "COUNT",
    "INDEX_COLUMNS",
    "INDEX_FINGERPRINTS",
    "INDEX_HASHES",
    "INDEX_ROWS_BETWEEN",
    "MANY_MESSAGES_FRAME",
    "MESSAGES_FRAME",
    "ROLES",
    "ROW_LINKS",
    "SEQS_PARAM",
    "STRUCTURE",
    "TOOL_CALLS",
    "content_in",
    "contents",
    "contents_between",
    "count_indexed",
    "delete_seqs",
    "delete_session",
    "insert_one",
    "insert_rows",
    "parent_ids",
    "plain_time",
    "rewrite",
    "roles_and_sizes",
    "search_tokens",
]

# A list of seqs bound as one parameter: ``seq IN (SEQS_PARAM)``.
SEQS_PARAM = "SELECT unnest(?::BIGINT[])"

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


def rewrite(conn: Any, seq: int, content: str, tokens: list[str] | None, search_seq: int | None) -> None:
    """Replace the content (and search tokens) of the row at ``seq``."""
    conn.execute("UPDATE messages SET content = ?, search_tokens = ?, search_seq = ? WHERE seq = ?",
                 [content, None if tokens is None else " ".join(tokens), search_seq, seq]).fetchall()


def delete_seqs(conn: Any, seqs: list[int]) -> None:
    """Delete the rows at ``seqs``."""
    conn.execute(f"DELETE FROM messages WHERE seq IN ({SEQS_PARAM})", [seqs]).fetchall()


def delete_session(conn: Any, session_id: str) -> None:
    """Delete every row of ``session_id``."""
    conn.execute("DELETE FROM messages WHERE session_id = ?", [session_id]).fetchall()


# -- reads ---------------------------------------------------------------------------------------

# The messages frame's query: the row columns plus one struct per part. There is no ORDER BY: sorting the wide
# rows cost a third of the query, and the rows come back in insertion order, which View checks is seq order.
MESSAGES_FRAME = """
WITH m AS (
    SELECT session_id, seq, id, parent_id, role, created_at, content,
           json_transform(content, '{schema}').parts AS parts
    FROM messages WHERE {where}
)
SELECT session_id, seq, id, parent_id, role, created_at, {parts} AS _parts, {text_null} AS _text_null
FROM m
""".replace("{schema}", PARTS_SCHEMA).replace("{parts}", PARTS).replace("{text_null}", TEXT_NULL)

# Tool calls: Anthropic tool_use blocks joined with the first later tool_result answering them, and AI-SDK tool
# parts, which carry their own output. The duration is read where a chat layer may record it (result metadata).
TOOL_CALLS = f"""
WITH m AS (
    SELECT session_id, seq, id, created_at, json_transform(content, '{TOOL_SCHEMA}') AS j
    FROM messages WHERE {{where}}
),
p AS (
    SELECT session_id, seq, id AS message_id, created_at, j.metadata AS metadata,
           unnest(j.parts) AS p, generate_subscripts(j.parts, 1) - 1 AS part_index
    FROM m
),
calls AS (  -- Anthropic tool_use blocks, and AI-SDK tool parts (which carry their own output)
    SELECT session_id, seq, message_id, part_index, created_at,
           CASE WHEN p.type = 'tool_use' THEN p.id ELSE p.toolCallId END AS tool_use_id,
           CASE WHEN p.type = 'tool_use' THEN p.name WHEN p.type = 'dynamic-tool' THEN p.toolName
                ELSE substr(p.type, 6) END AS tool_name,
           p.input AS input,
           CASE WHEN p.type <> 'tool_use' THEN coalesce(p.output, p.result) END AS sdk_output,
           CASE WHEN p.type <> 'tool_use' THEN p.errorText END AS sdk_error,
           p.state AS state
    FROM p
    WHERE p.type = 'tool_use' OR p.type = 'dynamic-tool' OR (starts_with(p.type, 'tool-') AND p.type <> 'tool-result')
),
results AS (
    SELECT seq AS result_seq, message_id AS result_message_id, metadata,
           coalesce(p.tool_use_id, p.toolCallId) AS call_id, coalesce(p.content, p.result) AS content,
           p.is_error AS is_error
    FROM p WHERE p.type IN ('tool_result', 'tool-result')
)
SELECT c.session_id, c.seq, c.message_id, c.part_index, c.created_at, c.tool_use_id, c.tool_name,
       CAST(c.input AS VARCHAR) AS input,
       {json_text('coalesce(r.content, c.sdk_output)')} AS result,
       CASE WHEN r.call_id IS NOT NULL THEN coalesce(r.is_error, false)
            WHEN c.sdk_error IS NOT NULL OR c.state = 'output-error' THEN true
            WHEN c.sdk_output IS NOT NULL THEN false END AS is_error,
       c.sdk_error AS error_text,
       r.result_message_id,
       TRY_CAST(r.metadata->'tool_durations_ms'->>c.tool_use_id AS DOUBLE) AS duration_ms
FROM calls c LEFT JOIN results r ON r.call_id = c.tool_use_id AND r.result_seq > c.seq
QUALIFY row_number() OVER (PARTITION BY c.seq, c.part_index ORDER BY r.result_seq) = 1
ORDER BY c.seq, c.part_index
"""


# No ORDER BY: rows lie in seq order as appended (the parent map checks), and DuckDB's sort would hold, and its
# allocator keep, several times the columns' size.
ROW_LINKS = "SELECT seq, id, parent_id, session_id FROM messages"
ROLES = "SELECT seq, role FROM messages ORDER BY seq"
COUNT = "SELECT count(*) FROM messages"
STRUCTURE = "SELECT session_id, seq, id, parent_id, created_at FROM messages WHERE {where}"

# What the message index reads: the documents (a WHERE clause follows) and their fingerprints.
INDEX_COLUMNS = """
SELECT id AS doc_id, session_id AS grp, seq, search_seq,
       CASE WHEN search_tokens = '' THEN 0
            ELSE length(search_tokens) - length(replace(search_tokens, ' ', '')) + 1 END AS length,
       search_tokens AS tokens, content, hash(id, session_id, search_tokens, content) AS hash
FROM messages
"""
INDEX_ROWS_BETWEEN = INDEX_COLUMNS + """
WHERE search_tokens IS NOT NULL AND search_seq BETWEEN ? AND ? ORDER BY search_seq
"""
INDEX_FINGERPRINTS = """
SELECT search_seq, hash(id, session_id, search_tokens, content) AS hash FROM messages WHERE search_tokens IS NOT NULL
"""
INDEX_HASHES = """
SELECT search_seq, hash(id, session_id, search_tokens, content) AS hash FROM messages
WHERE search_tokens IS NOT NULL AND search_seq BETWEEN ? AND ?
"""

# The messages frame over many attached files (a ``messages`` view with ``agent``, ``agent_class`` and
# ``_alias`` columns), ordered by agent, file and seq.
MANY_MESSAGES_FRAME = f"""
WITH m AS (
    SELECT agent, agent_class, _alias, session_id, seq, id, parent_id, role, created_at, content,
           json_transform(content, '{PARTS_SCHEMA}').parts AS parts
    FROM messages
)
SELECT agent, agent_class, _alias, session_id, seq, id, parent_id, role, created_at,
       {PARTS} AS _parts, {TEXT_NULL} AS _text_null
FROM m ORDER BY agent, _alias, seq
"""


def content_in(db: Any, alias: str, seq: int) -> str:
    """The stored JSON of the row at ``seq`` of the attached file ``alias`` (of the many-files view)."""
    return str(db.execute("SELECT content FROM messages WHERE _alias = ? AND seq = ?", [alias, seq]).fetchone()[0])


def contents(db: Any, seqs: list[int]) -> dict[int, str]:
    """The stored JSON of the rows at ``seqs`` (missing rows left out), by seq."""
    return dict(db.execute(f"SELECT seq, content FROM messages WHERE seq IN ({SEQS_PARAM})", [seqs]).fetchall())


def contents_between(db: Any, lo: int, hi: int) -> list[tuple[int, str]]:
    """(seq, stored JSON) of every row with ``lo <= seq <= hi``: a range scan, for mostly consecutive seqs."""
    return db.execute("SELECT seq, content FROM messages WHERE seq BETWEEN ? AND ?", [lo, hi]).fetchall()


def parent_ids(db: Any, seqs: list[int]) -> dict[int, Any]:
    """The parent id (None for a root) of the rows at ``seqs``, by seq."""
    return dict(db.execute(f"SELECT seq, parent_id FROM messages WHERE seq IN ({SEQS_PARAM})", [seqs]).fetchall())


def roles_and_sizes(db: Any, seqs: list[int]) -> dict[int, tuple[str, int]]:
    """(role, length of the stored JSON) of the rows at ``seqs``, by seq, without reading the contents."""
    return {seq: (role, size) for seq, role, size in db.execute(
        f"SELECT seq, role, strlen(content) FROM messages WHERE seq IN ({SEQS_PARAM})", [seqs]).fetchall()}


def count_indexed(store: Any, session_id: str | None = None) -> int:
    """Number of rows with search tokens (of one session if given)."""
    if session_id is None:
        return int(store.scalar("SELECT count(*) FROM messages WHERE search_tokens IS NOT NULL"))
    return int(store.scalar("SELECT count(*) FROM messages WHERE search_tokens IS NOT NULL AND session_id = ?",
                            [session_id]))
