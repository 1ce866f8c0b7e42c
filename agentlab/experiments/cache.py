"""Every Claude request an experiment makes, with its response and usage, in one DuckDB file.

A request is identified by its key: the SHA-256 of its kind, its repetition number and its parameters as
canonical JSON. Before anything is sent, keys that already have a succeeded result are answered from the file,
so re-running an experiment costs nothing for what it has already received; the first 48 hex digits of the key
are the batch ``custom_id``.

Tables (named migrations, applied at open like an agent file's):

* ``requests``: the parameters sent, once per key;
* ``batches`` and ``batch_requests``: every Message Batch created, its last known status and the keys in it,
  written before the batch is polled, so an interrupted run resumes polling instead of paying twice;
* ``results``: every outcome received (``succeeded``, ``errored``, ``expired``, ``canceled``), with the
  message or error body;
* ``usage``: the token counts of every succeeded response and its cost in USD.

Invariants: a key's parameters never change; results are appended, never updated (a retried request has one row
per attempt); only a ``succeeded`` row answers a key.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from agentlab.store import Migration

__all__ = ["MIGRATIONS", "CachedClient", "RequestCache", "default_cache_path", "request_key"]


def _m001_requests(conn: Any) -> None:
    # requests: what was (or will be) sent, keyed by content, so a re-run finds its earlier answers.
    conn.execute("""
        CREATE TABLE requests (
            key        VARCHAR PRIMARY KEY,  -- sha256 of kind, repetition and canonical parameters
            kind       VARCHAR NOT NULL,     -- answer, judge, summary, memory
            model      VARCHAR,
            params     VARCHAR NOT NULL,     -- the Messages API body, JSON
            created_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )""")
    # batches: each Message Batch created, with the cost it reserved against the budget, so a run that was
    # interrupted can resume polling it (and count it) instead of creating it again.
    conn.execute("""
        CREATE TABLE batches (
            batch_id          VARCHAR PRIMARY KEY,
            created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
            processing_status VARCHAR,   -- in_progress, canceling, ended: as last seen
            request_counts    VARCHAR,   -- JSON, as last seen
            raw               VARCHAR,   -- the last MessageBatch object seen, JSON
            reserved_usd      DOUBLE,    -- the upper bound of its cost when it was created
            collected         BOOLEAN NOT NULL DEFAULT false  -- its results are all in the results table
        )""")
    conn.execute("CREATE TABLE batch_requests (batch_id VARCHAR NOT NULL, key VARCHAR NOT NULL)")
    # results: one row per outcome received; a retried request has one row per attempt.
    conn.execute("""
        CREATE TABLE results (
            key         VARCHAR NOT NULL,
            batch_id    VARCHAR,            -- NULL for a direct messages.create call
            result_type VARCHAR NOT NULL,   -- succeeded, errored, expired, canceled
            error_type  VARCHAR,            -- the API's error type for errored results
            body        VARCHAR,            -- the message (succeeded) or the error object, JSON
            received_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )""")
    # usage: the counts of every succeeded response and what it cost, for the budget and the report.
    conn.execute("""
        CREATE TABLE usage (
            key                VARCHAR NOT NULL,
            batch_id           VARCHAR,
            model              VARCHAR,
            input_tokens       BIGINT,
            output_tokens      BIGINT,
            cache_read_tokens  BIGINT,
            cache_write_tokens BIGINT,
            batch              BOOLEAN NOT NULL,  -- priced at the batch discount
            cost_usd           DOUBLE,            -- NULL when the model has no known price
            received_at        TIMESTAMPTZ NOT NULL DEFAULT now()
        )""")


MIGRATIONS = [Migration("experiments001_requests", _m001_requests)]


def default_cache_path() -> Path:
    """``$AGENTLAB_HOME/cache/experiments.duckdb`` (``./agentlab-data/...`` when the variable is unset)."""
    from agentlab.store import resolve_root

    return resolve_root(None) / "cache" / "experiments.duckdb"


def request_key(kind: str, params: Mapping[str, Any], repetition: int = 0) -> str:
    """The key of a request: SHA-256 hex of ``kind``, ``repetition`` and the canonical JSON of ``params``."""
    text = json.dumps({"kind": kind, "repetition": repetition, "params": params}, sort_keys=True,
                      ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class RequestCache:
    """The request store of an experiment (see the module docstring).

    Args:
        path: The DuckDB file (created with its folder), or ``None`` for an in-memory store.
    """

    _open: ClassVar[dict[str, RequestCache]] = {}  # one live cache per file in this process

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        from agentlab.store import Store

        self.path = None if path is None else Path(path)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.store = Store(":memory:" if self.path is None else self.path, migrations=MIGRATIONS)

    @classmethod
    def open(cls, cache: Any = "default") -> RequestCache:
        """A cache from ``"default"`` (:func:`default_cache_path`), a path, ``None`` (memory) or a cache.

        One live cache per file in a process: opening a path twice returns the same object.
        """
        if isinstance(cache, RequestCache):
            return cache
        if cache is None:
            return cls(None)
        path = default_cache_path() if cache == "default" else Path(cache)
        key = os.path.realpath(path)
        live = cls._open.get(key)
        if live is None or live.store.closed:
            live = cls._open[key] = cls(path)
        return live

    def close(self) -> None:
        """Close the file (a later :meth:`open` reopens it)."""
        self.store.close()

    def __repr__(self) -> str:
        return f"RequestCache({str(self.path) if self.path else ':memory:'!r})"

    # -- writes -----------------------------------------------------------------------------------------------

    def add_requests(self, items: Iterable[tuple[str, str, Mapping[str, Any]]]) -> None:
        """Store ``(key, kind, params)`` for keys not stored yet."""
        rows = [(k, kind, p.get("model"), json.dumps(p, ensure_ascii=False, sort_keys=True)) for k, kind, p in items]
        if not rows:
            return
        with self.store.transaction():
            known = self._known([r[0] for r in rows])
            fresh = [r for r in {r[0]: r for r in rows}.values() if r[0] not in known]
            for row in fresh:
                self.store.execute("INSERT INTO requests (key, kind, model, params) VALUES (?, ?, ?, ?)", list(row))

    def _known(self, keys: list[str]) -> set[str]:
        found = self.store.execute("SELECT key FROM requests WHERE key IN (SELECT unnest(?::VARCHAR[]))",
                                   [keys]).fetchall()
        return {r[0] for r in found}

    def add_batch(self, batch: Mapping[str, Any], keys: list[str], reserved_usd: float) -> None:
        """Record a created batch and the keys in it (before it is polled)."""
        with self.store.transaction():
            self.store.execute(
                "INSERT INTO batches (batch_id, processing_status, request_counts, raw, reserved_usd) "
                "VALUES (?, ?, ?, ?, ?)",
                [batch["id"], batch.get("processing_status"), json.dumps(batch.get("request_counts")),
                 json.dumps(batch, default=str), reserved_usd])
            for key in keys:
                self.store.execute("INSERT INTO batch_requests VALUES (?, ?)", [batch["id"], key])

    def update_batch(self, batch: Mapping[str, Any], *, collected: bool = False) -> None:
        """Record the latest status of a batch (and, once its results are stored, that it is collected)."""
        self.store.execute(
            "UPDATE batches SET processing_status = ?, request_counts = ?, raw = ?, collected = collected OR ? "
            "WHERE batch_id = ?",
            [batch.get("processing_status"), json.dumps(batch.get("request_counts")), json.dumps(batch, default=str),
             collected, batch["id"]])

    def add_result(self, key: str, result_type: str, body: Any, *, batch_id: str | None = None,
                   error_type: str | None = None, usage: Mapping[str, Any] | None = None,
                   cost_usd: float | None = None) -> None:
        """Record one outcome (and, for a succeeded one, its usage row) in one transaction."""
        with self.store.transaction():
            self.store.execute(
                "INSERT INTO results (key, batch_id, result_type, error_type, body) VALUES (?, ?, ?, ?, ?)",
                [key, batch_id, result_type, error_type, None if body is None else json.dumps(body, default=str)])
            if result_type == "succeeded":
                u = usage or {}
                self.store.execute(
                    "INSERT INTO usage (key, batch_id, model, input_tokens, output_tokens, cache_read_tokens, "
                    "cache_write_tokens, batch, cost_usd) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [key, batch_id, (body or {}).get("model"), int(u.get("input_tokens") or 0),
                     int(u.get("output_tokens") or 0), int(u.get("cache_read_input_tokens") or 0),
                     int(u.get("cache_creation_input_tokens") or 0), batch_id is not None, cost_usd])

    # -- reads ------------------------------------------------------------------------------------------------

    def succeeded(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """``key -> message body`` for the keys that have a succeeded result."""
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        rows = self.store.execute(
            "SELECT key, any_value(body) FROM results WHERE result_type = 'succeeded' "
            "AND key IN (SELECT unnest(?::VARCHAR[])) GROUP BY key", [wanted]).fetchall()
        return {k: json.loads(b) for k, b in rows}

    def attempts(self, keys: Iterable[str]) -> dict[str, int]:
        """How many outcomes each key has received so far."""
        wanted = list(dict.fromkeys(keys))
        rows = self.store.execute("SELECT key, count(*) FROM results WHERE key IN (SELECT unnest(?::VARCHAR[])) "
                                  "GROUP BY key", [wanted]).fetchall() if wanted else []
        return dict(rows)

    def last_outcomes(self, keys: Iterable[str]) -> dict[str, tuple[str, str | None, Any]]:
        """``key -> (result_type, error_type, body)`` of each key's latest outcome."""
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        rows = self.store.execute(
            "SELECT key, arg_max(result_type, received_at), arg_max(error_type, received_at), "
            "arg_max(body, received_at) FROM results WHERE key IN (SELECT unnest(?::VARCHAR[])) GROUP BY key",
            [wanted]).fetchall()
        return {k: (t, e, None if b is None else json.loads(b)) for k, t, e, b in rows}

    def open_batches(self) -> list[tuple[str, list[str], float]]:
        """``(batch_id, keys, reserved_usd)`` of batches whose results are not all stored yet, oldest first."""
        rows = self.store.execute(
            "SELECT b.batch_id, list(r.key), any_value(b.reserved_usd) FROM batches b JOIN batch_requests r "
            "USING (batch_id) WHERE NOT b.collected GROUP BY b.batch_id, b.created_at ORDER BY b.created_at"
        ).fetchall()
        return [(b, list(keys), float(reserved or 0.0)) for b, keys, reserved in rows]

    def frames(self) -> dict[str, Any]:
        """Every table as a pandas DataFrame (``requests``, ``batches``, ``results``, ``usage``)."""
        return {name: self.store.relation(f"SELECT * FROM {name}").df()
                for name in ("requests", "batches", "batch_requests", "results", "usage")}


class CachedClient:
    """A client for :func:`agentlab.chat._api.call_messages_api` whose ``messages.create`` is cached.

    ``CachedClient(client, cache).messages.create(**body)`` returns the stored response body when the same body
    was answered before, and otherwise calls the real client and stores request, response and usage. It is how
    summaries and memory updates made while replaying cost nothing on a re-run.
    """

    def __init__(self, client: Any, cache: RequestCache, *, kind: str = "summary", model: str | None = None) -> None:
        self.client = client
        self.cache = cache
        self.kind = kind
        self.model = model  # the settings' model, for callers that do not name one (memory designs)
        self.messages = self

    def create(self, **body: Any) -> dict[str, Any]:
        from agentlab.chat import call_messages_api

        from .pricing import cost_of

        key = request_key(self.kind, body)
        found = self.cache.succeeded([key])
        if key in found:
            return found[key]
        self.cache.add_requests([(key, self.kind, body)])
        response = call_messages_api(self.client, dict(body))
        self.cache.add_result(key, "succeeded", response, usage=response.get("usage"),
                              cost_usd=cost_of(response.get("model") or body.get("model"), response.get("usage"),
                                               batch=False))
        return response
