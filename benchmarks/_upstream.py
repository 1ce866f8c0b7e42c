"""The anchor of the session benchmarks: upstream's SQLite schema for a session's messages and their FTS5 index
(the seed's ``assistant_messages`` and ``assistant_fts``, tokenised ``porter unicode61``)."""

SQLITE_SCHEMA = """
CREATE TABLE assistant_messages (id TEXT PRIMARY KEY, session_id TEXT NOT NULL DEFAULT '', parent_id TEXT,
  role TEXT NOT NULL, content TEXT NOT NULL, created_at DATETIME DEFAULT CURRENT_TIMESTAMP);
CREATE INDEX idx_assistant_msg_parent ON assistant_messages(parent_id);
CREATE INDEX idx_assistant_msg_session ON assistant_messages(session_id);
CREATE VIRTUAL TABLE assistant_fts USING fts5(id UNINDEXED, session_id UNINDEXED, role UNINDEXED, content,
  tokenize='porter unicode61');
"""
