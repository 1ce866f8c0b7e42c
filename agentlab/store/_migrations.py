"""The schema of an agent's DuckDB file, as an append-only list of named migrations.

Invariants:

* A migration that has shipped is never edited or removed; schema changes are new entries at the
  end of :data:`MIGRATIONS`.
* :class:`agentlab.store.Store` applies each pending migration at open, inside one explicit
  transaction together with its row in ``_agentlab_migrations``: either both land or neither.
* Each migration says, in comments, why each table and column exists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Migration:
    """One named schema step. ``apply`` receives the open DuckDB connection inside a transaction."""

    name: str
    apply: Callable[[Any], None]


def _m001_agent(conn: Any) -> None:
    # agent_meta: facts about the file itself. The agent's name is stored so that opening a file
    # under a different name (a hash collision, or a file copied by hand) is detected, not mixed up.
    conn.execute(
        """
        CREATE TABLE agent_meta (
            key   VARCHAR PRIMARY KEY,
            value VARCHAR NOT NULL
        )
        """
    )
    # agent_state: the single row holding the agent's JSON state (upstream: cf_agents_state with id
    # "cf_state_row_id"). The row's presence is what marks state as set, so 0, "" and null are valid.
    # updated_at and source say when and by whom it last changed, for widgets and exports.
    conn.execute(
        """
        CREATE TABLE agent_state (
            id         VARCHAR PRIMARY KEY,
            state      VARCHAR NOT NULL,   -- JSON text, exactly as serialised
            source     VARCHAR NOT NULL,   -- "server" or a connection id
            updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )


def _m010_fulltext(conn: Any) -> None:
    # fulltext_docs: the durable truth of full-text search (agentlab.search._fulltext), one row per indexed
    # document. The inverted index is rebuilt in memory from these rows, so a write is one small
    # INSERT in the caller's transaction and a search right after it needs no rebuild.
    # No primary key: DuckDB's ART index made each single-row write several times slower; the writer
    # keeps (namespace, doc_id) unique by deleting before it inserts.
    conn.execute(
        """
        CREATE TABLE fulltext_docs (
            namespace VARCHAR NOT NULL,            -- one index each ("messages", "knowledge", ...)
            doc_id    VARCHAR NOT NULL,            -- the caller's id (message id, entry key)
            grp       VARCHAR NOT NULL DEFAULT '', -- filter inside a namespace (session id, block label)
            seq       BIGINT  NOT NULL,            -- insertion order: ties in ranking go to the earlier
            length    INTEGER NOT NULL,            -- tokens in the document, for BM25 length normalisation
            tokens    VARCHAR NOT NULL             -- stemmed tokens joined by single spaces, in order;
                                                   -- derived by agentlab.search._tokenizer: re-index if it changes
        )
        """
    )


MIGRATIONS: list[Migration] = [
    Migration("m001_agent", _m001_agent),
    Migration("m010_fulltext", _m010_fulltext),
]


# --- m030_vectors (agentlab/vectors.py) ---------------------------------------------------------


def _m030_vectors(conn: Any) -> None:
    # vector_namespaces: one row per VectorStore namespace. model_id and dimension pin the vector
    # space, so an embedder from another model is refused instead of mixing incomparable vectors.
    # generation changes on every write that alters the namespace's vectors; an in-memory FAISS index
    # remembers the generation it was built at and is rebuilt when the two differ.
    conn.execute(
        """
        CREATE TABLE vector_namespaces (
            namespace  VARCHAR PRIMARY KEY,
            model_id   VARCHAR NOT NULL,
            dimension  INTEGER NOT NULL,
            generation BIGINT NOT NULL,    -- a value from vector_generations, never reused
            created_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )
    # Generations come from one sequence, not a per-namespace counter, so a namespace that is dropped
    # and recreated can never return to a generation a stale cache already holds.
    conn.execute("CREATE SEQUENCE vector_generations START 1")
    # vector_entries: the stored entries. id is the int64 FAISS id, from its own sequence so ids are
    # never reused after a delete. content_hash (sha256 hex of content) links to the embedding.
    # metadata is JSON text. An update keeps the row (and id) and changes content/hash/metadata.
    conn.execute("CREATE SEQUENCE vector_entry_ids START 1")
    conn.execute(
        """
        CREATE TABLE vector_entries (
            id           BIGINT PRIMARY KEY,
            namespace    VARCHAR NOT NULL,
            key          VARCHAR NOT NULL,
            content      VARCHAR NOT NULL,
            content_hash VARCHAR NOT NULL,
            metadata     VARCHAR,             -- JSON object text, or NULL
            updated_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
            UNIQUE (namespace, key)
        )
        """
    )
    # vector_embeddings: each (model, content) is embedded once, whatever key or namespace holds
    # it, so re-adding unchanged content or copying it elsewhere never calls the model again.
    # Rows outlive the entries that used them (a cache of paid-for work).
    conn.execute(
        """
        CREATE TABLE vector_embeddings (
            model_id     VARCHAR NOT NULL,
            content_hash VARCHAR NOT NULL,
            vector       FLOAT[] NOT NULL,    -- float32, length = the model's dimension
            PRIMARY KEY (model_id, content_hash)
        )
        """
    )


MIGRATIONS.append(Migration("m030_vectors", _m030_vectors))


def _m020_messages(conn: Any) -> None:
    # session_seq: one counter for every row the session layer writes (messages, compactions,
    # compaction events, sessions). Upstream timestamps resolve to the second and break ties by
    # SQLite rowid; here ties are always broken by seq, and a single counter lets a fork compare
    # "created before the fork" across tables (a fork's own seq is its point in time).
    conn.execute("CREATE SEQUENCE session_seq START 1")
    # messages: the tree. One row per message; parent_id points at another row by id (no foreign
    # key: deleting a message leaves its children pointing at it, as upstream). id is unique across
    # the whole agent, as upstream's primary key. content is the whole message as compact JSON,
    # exactly what was appended, so Anthropic thinking blocks round-trip byte for byte. role is
    # copied out of content for filters; created_at is the message's own time when it parses,
    # else the time it was stored. No index on parent_id or session_id: the parent map is kept in
    # memory (DuckDB walks recursive CTEs slowly), and every ART index costs on insert.
    conn.execute(
        """
        CREATE TABLE messages (
            seq        BIGINT PRIMARY KEY DEFAULT nextval('session_seq'),
            id         VARCHAR NOT NULL UNIQUE,
            session_id VARCHAR NOT NULL DEFAULT '',
            parent_id  VARCHAR,
            role       VARCHAR NOT NULL,
            content    VARCHAR NOT NULL,
            created_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )
    # compactions: non-destructive overlays, applied on every read. Besides upstream's columns,
    # each row records what it did, for exports and widgets: the leaf whose path was compacted,
    # how many stored messages the range covers, the estimate before and after, and whether a
    # person or the automatic threshold asked for it.
    conn.execute(
        """
        CREATE TABLE compactions (
            seq              BIGINT PRIMARY KEY DEFAULT nextval('session_seq'),
            id               VARCHAR NOT NULL UNIQUE,
            session_id       VARCHAR NOT NULL DEFAULT '',
            summary          VARCHAR NOT NULL,
            from_message_id  VARCHAR NOT NULL,
            to_message_id    VARCHAR NOT NULL,
            leaf_id          VARCHAR,
            messages_covered INTEGER,
            tokens_before    BIGINT,
            tokens_after     BIGINT,
            trigger          VARCHAR NOT NULL DEFAULT 'manual' CHECK (trigger IN ('manual', 'automatic')),
            created_at       TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )
    # compaction_events: compactions that did not happen. 'error' rows record an exception from
    # the summarize function (upstream swallowed it; we keep a trace), 'noop' rows a run that had
    # nothing to compact. Successful runs are the compactions rows themselves.
    conn.execute(
        """
        CREATE TABLE compaction_events (
            seq           BIGINT PRIMARY KEY DEFAULT nextval('session_seq'),
            session_id    VARCHAR NOT NULL DEFAULT '',
            kind          VARCHAR NOT NULL CHECK (kind IN ('error', 'noop')),
            trigger       VARCHAR NOT NULL CHECK (trigger IN ('manual', 'automatic')),
            leaf_id       VARCHAR,
            tokens_before BIGINT,
            error_type    VARCHAR,
            error         VARCHAR,
            created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )
    # sessions: named conversations in one agent (upstream assistant_sessions). The default
    # session '' needs no row. parent_session_id alone is lineage (e.g. a split); with
    # fork_message_id set, the session is a fork: it reads its parent's path up to that message
    # (rows are shared, not copied) plus its own rows, and its parent's overlays older than seq.
    # The usage columns follow upstream.
    conn.execute(
        """
        CREATE TABLE sessions (
            id                VARCHAR PRIMARY KEY,
            seq               BIGINT NOT NULL DEFAULT nextval('session_seq'),
            name              VARCHAR NOT NULL,
            parent_session_id VARCHAR,
            fork_message_id   VARCHAR,
            model             VARCHAR,
            source            VARCHAR,
            input_tokens      BIGINT NOT NULL DEFAULT 0,
            output_tokens     BIGINT NOT NULL DEFAULT 0,
            estimated_cost    DOUBLE NOT NULL DEFAULT 0,
            end_reason        VARCHAR,
            created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
            updated_at        TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )


MIGRATIONS.append(Migration("m020_messages", _m020_messages))


def _m040_context(conn: Any) -> None:
    # context_blocks: the text of writable context blocks stored in the agent (upstream
    # cf_agents_context_blocks), and the frozen system prompts of with_cached_prompt(). Labels are
    # namespaced by name only ("memory_<session id>", "_system_prompt_<session id>"), as upstream.
    conn.execute(
        """
        CREATE TABLE context_blocks (
            label      VARCHAR PRIMARY KEY,
            content    VARCHAR NOT NULL,
            updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )
    # context_skills: documents of the DuckDB-backed skill provider, one row per (block label, key).
    # description is the one-line summary listed in the prompt; NULL lists the key alone.
    conn.execute(
        """
        CREATE TABLE context_skills (
            label       VARCHAR NOT NULL,
            key         VARCHAR NOT NULL,
            content     VARCHAR NOT NULL,
            description VARCHAR,
            created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
            updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
            PRIMARY KEY (label, key)
        )
        """
    )
    # context_entries: entries of full-text searchable blocks (upstream cf_agents_search_entries).
    # The postings live in the full-text index's own tables; this row is the text it returns.
    # metadata is JSON object text or NULL. Vector and hybrid blocks keep entries in vector_entries.
    conn.execute(
        """
        CREATE TABLE context_entries (
            label      VARCHAR NOT NULL,
            key        VARCHAR NOT NULL,
            content    VARCHAR NOT NULL,
            metadata   VARCHAR,
            created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            PRIMARY KEY (label, key)
        )
        """
    )
    # context_unloaded: what unload_context removed from the conversation. Upstream overwrites the
    # loaded text in history and loses it; here the tool result's original content (JSON text, a
    # string or a list of content blocks) is kept so that a researcher can still read it.
    conn.execute(
        """
        CREATE TABLE context_unloaded (
            session_id  VARCHAR NOT NULL,
            message_id  VARCHAR NOT NULL,
            tool_use_id VARCHAR NOT NULL,
            label       VARCHAR NOT NULL,
            key         VARCHAR NOT NULL,
            content     VARCHAR NOT NULL,
            unloaded_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            PRIMARY KEY (session_id, tool_use_id)
        )
        """
    )


MIGRATIONS.append(Migration("m040_context", _m040_context))


# --- m050_usage (agentlab/usage.py) -----------------------------------------------------------------


def _m050_usage(conn: Any) -> None:
    # chat_usage: one row per successful Messages API call, written in the same transaction as the
    # messages that call produced, so usage and history never disagree. The four token counts are
    # what the API reported: input_tokens excludes cached tokens; cache_read_tokens were served from
    # the prompt cache and cache_write_tokens were written to it (billed differently, so kept apart).
    # turn_id groups the calls of one ask()/retry(); step is the call's position in that turn.
    # purpose tells turn calls from summarizer calls (compaction). response_id is the API's "msg_..."
    # id and message_id the stored assistant message (NULL for summarizer calls).
    conn.execute("CREATE SEQUENCE chat_usage_seq START 1")
    conn.execute(
        """
        CREATE TABLE chat_usage (
            seq                BIGINT PRIMARY KEY DEFAULT nextval('chat_usage_seq'),
            session_id         VARCHAR NOT NULL DEFAULT '',
            turn_id            VARCHAR,
            step               INTEGER,
            purpose            VARCHAR NOT NULL DEFAULT 'turn' CHECK (purpose IN ('turn', 'compaction', 'other')),
            model              VARCHAR,
            response_id        VARCHAR,
            message_id         VARCHAR,
            stop_reason        VARCHAR,
            input_tokens       BIGINT NOT NULL DEFAULT 0,
            output_tokens      BIGINT NOT NULL DEFAULT 0,
            cache_read_tokens  BIGINT NOT NULL DEFAULT 0,
            cache_write_tokens BIGINT NOT NULL DEFAULT 0,
            created_at         TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )


MIGRATIONS.append(Migration("m050_usage", _m050_usage))


# --- m060_message_search (agentlab/tree.py, agentlab/fulltext.py, agentlab/seqs.py) -----------------


def _m060_message_search(conn: Any) -> None:
    # messages is rebuilt (DuckDB cannot drop constraints in place) so that an append is one INSERT into
    # one table with no index to maintain: each extra table written in a commit costs about a millisecond,
    # and each ART index about 0.15 ms per single-row commit and 1.2 us per row in bulk.
    # - No PRIMARY KEY on seq and no UNIQUE on id any more: the agent is the file's only writer (DuckDB's
    #   lock) and keeps both unique itself (agentlab.store._clock hands out seqs, the in-memory map checks ids
    #   before every insert), as fulltext_docs already did. Reads go by seq through that map.
    # - seq has no DEFAULT: every writer takes it from agentlab.store._clock.SeqClock, the one session clock.
    # - search_tokens: the stemmed tokens (agentlab.search._tokenizer) of the message's text parts, joined by single
    #   spaces; '' for text without tokens (still a document, as an FTS5 row counts toward N), NULL for a
    #   message with no text part (not indexed, as upstream). The postings that lived in fulltext_docs
    #   (namespace 'messages') move here, so the message and its index entry are one row. Derived: re-index
    #   if the tokenizer changes.
    # - search_seq: the document's position in the index's insertion order, which breaks ranking ties as
    #   FTS5 rowids do: the message's seq when appended, a new seq when its content is updated.
    conn.execute(
        """
        CREATE TABLE messages_m060 (
            seq           BIGINT  NOT NULL,
            id            VARCHAR NOT NULL,
            session_id    VARCHAR NOT NULL DEFAULT '',
            parent_id     VARCHAR,
            role          VARCHAR NOT NULL,
            content       VARCHAR NOT NULL,
            created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
            search_tokens VARCHAR,
            search_seq    BIGINT
        )
        """
    )
    # Rows indexed before this migration keep their tokens; their tie order among themselves becomes the
    # message order (seq), which differs from the old index order only for messages updated after storing.
    conn.execute(
        """
        INSERT INTO messages_m060
        SELECT m.seq, m.id, m.session_id, m.parent_id, m.role, m.content, m.created_at,
               d.tokens, CASE WHEN d.tokens IS NULL THEN NULL ELSE m.seq END
        FROM messages AS m
        LEFT JOIN fulltext_docs AS d ON d.namespace = 'messages' AND d.doc_id = m.id
        ORDER BY m.seq
        """
    )
    conn.execute("DROP TABLE messages")
    conn.execute("ALTER TABLE messages_m060 RENAME TO messages")
    conn.execute("DELETE FROM fulltext_docs WHERE namespace = 'messages'")


def adopt_old_message_postings(conn: Any) -> None:
    """Move the message postings an export from before m060 kept in ``fulltext_docs`` into the rows, as m060 does."""
    conn.execute(
        """
        UPDATE messages SET search_tokens = d.tokens, search_seq = messages.seq
        FROM fulltext_docs AS d
        WHERE d.namespace = 'messages' AND d.doc_id = messages.id AND messages.search_tokens IS NULL
        """
    )
    conn.execute("DELETE FROM fulltext_docs WHERE namespace = 'messages'")


MIGRATIONS.append(Migration("m060_message_search", _m060_message_search))


# --- m070_context_block_sessions (agentlab/providers.py) ---------------------------------------------


_KNOWN_SESSIONS_SQL = """
SELECT id FROM sessions
UNION SELECT session_id FROM messages
UNION SELECT session_id FROM compactions
UNION SELECT session_id FROM compaction_events
UNION SELECT session_id FROM chat_usage
UNION SELECT session_id FROM context_unloaded
"""


def _m070_context_block_sessions(conn: Any) -> None:
    # context_blocks gets the session as a column of its own. Until now a session's block was stored under
    # the name f"{label}_{session_id}" (the frozen prompt under f"_system_prompt_{session_id}"), so two
    # sessions could write one row: session "b" with block "memory_a" and session "a_b" with block "memory"
    # both meant "memory_a_b". The key is now (session_id, label), with '' for the default session, whose
    # labels were always stored plain.
    # session_id NULL marks a legacy row: its label is a name stored the old way whose owner cannot be told
    # from the name alone. A session that has no row of its own for a label reads the legacy row named
    # f"{label}_{session_id}" (or label, in the default session): exactly the sessions that read that row
    # before. Its first write makes its own row, so from then on no other session sees its text. Exports
    # made before this migration have no session_id column; their rows are imported as legacy rows the same
    # way.
    conn.execute(
        """
        CREATE TABLE context_blocks_m070 (
            session_id VARCHAR,            -- '' default session; NULL legacy row named the old way
            label      VARCHAR NOT NULL,   -- the block's label (for a legacy row, its old stored name)
            content    VARCHAR NOT NULL,
            updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            UNIQUE (session_id, label)
        )
        """
    )
    # How existing rows move, without guessing an owner:
    # 1. A name with no underscore that has text on both sides cannot be f"{label}_{session_id}" with a
    #    non-empty session id and label, so it was the default session's: it becomes ('', name).
    # 2. Every other name stays as a legacy row, so that every session that could read it still can.
    # 3. It is also copied to (S, label) for every session S known from the file (a sessions row, or
    #    messages, overlays, compaction events, usage or unloaded skills under its id) for which the name is
    #    f"{label}_{S}": the block shows under its session in SQL and exports, and that session's writes
    #    go to its own row. When two known sessions match ("memory_a_b" with sessions "b" and "a_b"), each
    #    gets a copy: before this migration they shared the text, and neither is preferred. A session that
    #    left no trace, or the default session with a label like "notes_main", reads the legacy row (2).
    known = {r[0] for r in conn.execute(_KNOWN_SESSIONS_SQL).fetchall() if r[0]}
    rows = conn.execute("SELECT label, content, updated_at FROM context_blocks ORDER BY label").fetchall()
    moved: list[tuple[str | None, str, str, Any]] = []
    for name, content, updated_at in rows:
        if "_" not in name[1:-1]:
            moved.append(("", name, content, updated_at))
            continue
        moved.append((None, name, content, updated_at))
        for cut in range(1, len(name) - 1):  # every split into a non-empty label and session id
            if name[cut] == "_" and name[cut + 1:] in known:
                moved.append((name[cut + 1:], name[:cut], content, updated_at))
    if moved:
        conn.executemany("INSERT INTO context_blocks_m070 VALUES (?, ?, ?, ?)", moved)
    conn.execute("DROP TABLE context_blocks")
    conn.execute("ALTER TABLE context_blocks_m070 RENAME TO context_blocks")


MIGRATIONS.append(Migration("m070_context_block_sessions", _m070_context_block_sessions))


# --- m080_block_history (agentlab/context/_block_history.py) ------------------------------------------------


def _m080_block_history(conn: Any) -> None:
    # context_block_history: the memory timeline. context_blocks keeps only a block's latest text; this table
    # keeps one row per write to a writable block, inserted in the write's own transaction (a write that rolls
    # back leaves no row), so a researcher can see how the model's memory changed, who changed it and when.
    # Rows are only ever inserted. No index: it is read per session, and an ART index slows every write.
    conn.execute(
        """
        CREATE TABLE context_block_history (
            seq         BIGINT NOT NULL,       -- the store's clock: orders writes among messages and overlays
            session_id  VARCHAR NOT NULL,      -- the session whose block was written ('' default session)
            label       VARCHAR NOT NULL,      -- the block's label
            writer      VARCHAR NOT NULL,      -- 'tool' (a set_context call), 'python' or 'client'
            writer_id   VARCHAR,               -- the tool_use id or the connection id, when known
            old_content VARCHAR NOT NULL,      -- the text before the write ('' for a block never written)
            new_content VARCHAR NOT NULL,      -- the text after it
            written_at  TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )


MIGRATIONS.append(Migration("m080_block_history", _m080_block_history))


# --- m090_message_compression (agentlab/session/duckdb/_messages_table.py) -------------------------------------------


def _m090_message_compression(conn: Any) -> None:
    # messages is rebuilt so that its two long text columns, content and search_tokens, are stored with ZSTD.
    # DuckDB otherwise picks dictionary + FSST for them, whose per-segment analysis at each commit was most of
    # a bulk import's time with the small blocks new files use (16 KiB): 30,000 messages took 2.6 s to write
    # against 0.8 s with ZSTD, and the file came out larger (32 MB against 24 MB). DuckDB has no ALTER for a
    # column's compression, hence the copy; it keeps every row and its order. Other columns keep DuckDB's choice.
    conn.execute(
        """
        CREATE TABLE messages_m090 (
            seq           BIGINT  NOT NULL,
            id            VARCHAR NOT NULL,
            session_id    VARCHAR NOT NULL DEFAULT '',
            parent_id     VARCHAR,
            role          VARCHAR NOT NULL,
            content       VARCHAR NOT NULL USING COMPRESSION zstd,
            created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
            search_tokens VARCHAR USING COMPRESSION zstd,
            search_seq    BIGINT
        )
        """
    )
    conn.execute(
        """
        INSERT INTO messages_m090
        SELECT seq, id, session_id, parent_id, role, content, created_at, search_tokens, search_seq
        FROM messages ORDER BY seq
        """
    )
    conn.execute("DROP TABLE messages")
    conn.execute("ALTER TABLE messages_m090 RENAME TO messages")


MIGRATIONS.append(Migration("m090_message_compression", _m090_message_compression))
