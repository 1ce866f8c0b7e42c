"""Context providers: where a context block's text comes from, and what the model may do with it.

A provider's *kind* is recognised by what it implements (upstream duck typing, spec section 7), written here as
small ``typing.Protocol`` classes so that a user provider is a few lines with no base class:

======================  ==========================  ============  ===========================================
implements              kind                        tag           tools
======================  ==========================  ============  ===========================================
``get``                 :class:`ReadonlyProvider`   [readonly]    none
``get`` + ``set``       :class:`WritableProvider`   [writable]    ``set_context`` (replace/append)
``get`` + ``load``      :class:`SkillProvider`      [loadable]    ``load_context``/``unload_context`` (+ keyed
                                                                  ``set_context`` with ``set``)
``get`` + ``search``    :class:`SearchProvider`     [searchable]  ``search_context`` (+ keyed ``set_context``)
======================  ==========================  ============  ===========================================

Any provider may also have ``init(label)``, called before every ``get()``.

Built-in providers, all storing in the agent's DuckDB file:

* :class:`AgentContextProvider`: one writable text per (session, label) (``context_blocks``); also the durable
  prompt store.
* :class:`AgentSkillProvider`: keyed documents with descriptions (``context_skills``); :class:`FolderSkillProvider`
  reads a folder of Markdown files instead (read-only).
* :class:`VectorSearchProvider`, :class:`FullTextSearchProvider`, :class:`HybridSearchProvider`: keyed entries
  found by meaning (FAISS over DuckDB), by BM25, or by both fused with reciprocal rank fusion. All three support
  ``set`` (insert or update) and ``delete``.

Invariants: ``get`` never writes; every write is one transaction; a search provider's ``search`` returns ``None``
when nothing matches (never ``""``), and otherwise shows each hit's key and score.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from agentlab._checks import check_amount, check_count
from agentlab.errors import ContextError, InvalidSearchError
from agentlab.search.fusion import rrf
from agentlab.store.database import Store

if TYPE_CHECKING:
    from agentlab.search.embedders import Embedder
    from agentlab.search.vectors import VectorStore

__all__ = [
    "AgentContextProvider",
    "AgentSkillProvider",
    "FolderSkillProvider",
    "FullTextSearchProvider",
    "HybridSearchProvider",
    "ReadonlyProvider",
    "SearchHit",
    "SearchProvider",
    "SkillProvider",
    "VectorSearchProvider",
    "WritableProvider",
    "format_hits",
    "legacy_block_name",
    "provider_kind",
]

ProviderKind = Literal["readonly", "writable", "skill", "search"]


# -- the four kinds --------------------------------------------------------------------------------------------


@runtime_checkable
class ReadonlyProvider(Protocol):
    """A block whose text the model reads but cannot change."""

    def get(self) -> str | None:
        """The block's text, or None for empty."""
        ...


@runtime_checkable
class WritableProvider(Protocol):
    """A block the model may replace or append to with ``set_context``."""

    def get(self) -> str | None: ...

    def set(self, content: str) -> None:
        """Store the block's new text durably."""
        ...


@runtime_checkable
class SkillProvider(Protocol):
    """A collection of documents the model lists in the prompt and loads by key on demand.

    ``get`` returns the catalogue (typically ``- key: description`` lines). A skill provider that also has
    ``set(key, content, description=None)`` accepts keyed writes.
    """

    def get(self) -> str | None: ...

    def load(self, key: str) -> str | None:
        """The document under ``key``, or None if there is none."""
        ...


@runtime_checkable
class SearchProvider(Protocol):
    """A searchable collection; ``get`` summarises it, ``search`` answers a query as text.

    A search provider that also has ``set(key, content)`` accepts keyed writes.
    """

    def get(self) -> str | None: ...

    def search(self, query: str) -> str | None:
        """Matching entries as text, or None when nothing matches."""
        ...


def provider_kind(provider: Any) -> ProviderKind:
    """The kind of ``provider`` by what it implements: search > skill > writable > readonly (the prompt tag order).

    Raises:
        TypeError: ``provider`` has no callable ``get``.
    """
    if not isinstance(provider, ReadonlyProvider):
        raise TypeError(f"{provider!r} is not a context provider: it needs a get() method returning str or None.")
    if isinstance(provider, SearchProvider):
        return "search"
    if isinstance(provider, SkillProvider):
        return "skill"
    if isinstance(provider, WritableProvider):
        return "writable"
    return "readonly"


def _store_of(agent: Any) -> Store:
    # Looked up on every call, so that a closed agent raises AgentClosedError instead of using a dead connection.
    if isinstance(agent, Store):
        return agent
    store = getattr(agent, "store", None)
    if isinstance(store, Store):
        return store
    raise TypeError(f"Expected an Agent (or a Store), got {type(agent).__name__}.")


class _Labelled:
    """Shared ``init(label)`` handling: a label given to the constructor wins over the block's label."""

    label: str | None

    def init(self, label: str) -> None:
        """Adopt the block's label unless one was given to the constructor."""
        if self.label is None:
            self.label = label

    def _label(self) -> str:
        if not self.label:
            raise ContextError(
                f"{type(self).__name__} has no label yet; pass label=... or add it to a session with with_context()."
            )
        return self.label


# -- plain blocks ------------------------------------------------------------------------------------------------


def _block_texts(store: Store) -> dict[tuple[str, str], str | None]:
    # Texts of context_blocks rows already read, by (session id, label): the frozen prompt is read before every
    # model call, and only AgentContextProvider.set writes the table. Derived data: emptied after SQL from
    # outside, and a key is dropped while a write to it is uncommitted.
    return store.derived("context_block_texts", dict, reset=dict.clear)


def legacy_block_name(session_id: str, label: str) -> str:
    """The name a block was stored under before blocks had a session column: ``label`` plus ``_session_id``.

    Rows from that time whose owner could not be told apart keep this name with a NULL ``session_id`` (see
    migration ``m070_context_block_sessions``); a session reads such a row until it writes its own.
    """
    return f"{label}_{session_id}" if session_id else label


_READ_BLOCK = """
SELECT content FROM context_blocks
WHERE (session_id = ? AND label = ?) OR (session_id IS NULL AND label = ?)
ORDER BY session_id IS NULL  -- the session's own row wins over a legacy row
LIMIT 1
"""

_WRITE_BLOCK = """
INSERT INTO context_blocks (session_id, label, content) VALUES (?, ?, ?)
ON CONFLICT (session_id, label) DO UPDATE SET content = excluded.content, updated_at = now()
"""


class AgentContextProvider(_Labelled):
    """A writable block stored in the agent's DuckDB file (upstream ``AgentContextProvider``), one row per
    ``(session_id, label)``.

    Sessions create one per block without a provider, with their own session id (``""`` for the default
    session), and one labelled ``"_system_prompt"`` for ``with_cached_prompt()``. Two sessions never share a
    row, whatever their ids and labels. A session without a row of its own reads the row stored, before blocks
    had a session column, under :func:`legacy_block_name` (if the file has one); its first write makes its own.

    Args:
        agent: The :class:`~agentlab.agent.Agent` (or a :class:`~agentlab.store.Store`).
        label: The storage name; when None, the block's label given to :meth:`init`.
        session_id: The session the text belongs to (``""``: the default session, upstream's plain label).
    """

    def __init__(self, agent: Any, label: str | None = None, *, session_id: str = "") -> None:
        if not isinstance(session_id, str):
            raise TypeError(f"session_id must be a str ('' for the default session), not {session_id!r}.")
        self._agent = agent
        self.label = label
        self.session_id = session_id

    def __repr__(self) -> str:
        session = f", session_id={self.session_id!r}" if self.session_id else ""
        return f"AgentContextProvider(label={self.label!r}{session})"

    @property
    def storage_key(self) -> tuple[str, str]:
        """``(session_id, label)``: the key of this block's row in ``context_blocks``."""
        return self.session_id, self._label()

    def get(self) -> str | None:
        """The stored text, or None if the block was never written."""
        store = _store_of(self._agent)
        key = self.storage_key
        with store.lock:
            texts = _block_texts(store)
            if key in texts:
                return texts[key]
            rows = store.execute(_READ_BLOCK, [*key, legacy_block_name(*key)]).fetchall()
            text = rows[0][0] if rows else None
            if not store.in_transaction:  # inside one, the row may hold a write that could still roll back
                texts[key] = text
            return text

    def set(self, content: str) -> None:
        """Insert or replace the text (and move ``updated_at``)."""
        if not isinstance(content, str):
            raise TypeError(f"Block content must be a string, not {type(content).__name__}.")
        store = _store_of(self._agent)
        key = self.storage_key
        with store.transaction():
            texts = _block_texts(store)
            texts.pop(key, None)
            store.execute(_WRITE_BLOCK, [*key, content])
            store.after_commit(lambda: texts.__setitem__(key, content))


# -- skills ------------------------------------------------------------------------------------------------------


def _catalogue(items: Iterable[tuple[str, str | None]]) -> str | None:
    # Upstream's listing: "- key" or "- key: description", one per line, None when empty.
    lines = [f"- {key}: {desc}" if desc else f"- {key}" for key, desc in items]
    return "\n".join(lines) if lines else None


class AgentSkillProvider(_Labelled):
    """A writable skill collection stored in the agent's DuckDB file (``context_skills``).

    ``get`` lists ``- key: description`` in key order; ``load(key)`` returns a document; ``set`` inserts or replaces
    one (a ``description`` of None keeps the stored one).

    Args:
        agent: The :class:`~agentlab.agent.Agent` (or a :class:`~agentlab.store.Store`).
        label: The collection's storage name; when None, the block's label.
    """

    def __init__(self, agent: Any, label: str | None = None) -> None:
        self._agent = agent
        self.label = label

    def __repr__(self) -> str:
        return f"AgentSkillProvider(label={self.label!r})"

    def get(self) -> str | None:
        """The catalogue, or None when the collection is empty."""
        rows = _store_of(self._agent).execute(
            "SELECT key, description FROM context_skills WHERE label = ? ORDER BY key", [self._label()]
        ).fetchall()
        return _catalogue(rows)

    def load(self, key: str) -> str | None:
        """The document under ``key``, or None."""
        rows = _store_of(self._agent).execute(
            "SELECT content FROM context_skills WHERE label = ? AND key = ?", [self._label(), key]
        ).fetchall()
        return rows[0][0] if rows else None

    def set(self, key: str, content: str, description: str | None = None) -> None:
        """Insert or replace the document under ``key``."""
        if not isinstance(key, str) or not key:
            raise ValueError(f"A skill key must be a non-empty string, got {key!r}.")
        if not isinstance(content, str):
            raise TypeError(f"Skill content must be a string, not {type(content).__name__}.")
        store = _store_of(self._agent)
        with store.transaction():
            store.execute(
                """
                INSERT INTO context_skills (label, key, content, description) VALUES (?, ?, ?, ?)
                ON CONFLICT (label, key) DO UPDATE SET content = excluded.content,
                    description = coalesce(excluded.description, context_skills.description), updated_at = now()
                """,
                [self._label(), key, content, description],
            )

    def delete(self, key: str) -> bool:
        """Delete the document under ``key``; returns whether there was one."""
        store = _store_of(self._agent)
        with store.transaction():
            rows = store.execute(
                "DELETE FROM context_skills WHERE label = ? AND key = ? RETURNING key", [self._label(), key]
            ).fetchall()
        return bool(rows)

    def keys(self) -> list[str]:
        """Every key, in order."""
        rows = _store_of(self._agent).execute(
            "SELECT key FROM context_skills WHERE label = ? ORDER BY key", [self._label()]
        ).fetchall()
        return [r[0] for r in rows]


_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*(?:\r?\n|\Z)", re.S | re.M)
_DESCRIPTION = re.compile(r"^description[ \t]*:[ \t]*(.*?)[ \t]*$", re.M)


def _split_front_matter(text: str) -> tuple[str | None, str]:
    """``(description from front matter or None, body without the front matter)``."""
    match = _FRONT_MATTER.match(text)
    if not match:
        return None, text
    found = _DESCRIPTION.search(match.group(1))
    description = None
    if found:
        description = found.group(1)
        if len(description) >= 2 and description[0] == description[-1] and description[0] in "'\"":
            description = description[1:-1]
        description = description or None
    return description, text[match.end():]


def _first_line(body: str) -> str | None:
    for line in body.splitlines():
        line = line.strip().lstrip("#").strip()
        if line:
            return line
    return None


class FolderSkillProvider:
    """A read-only skill collection: a folder of Markdown files, one skill per ``.md`` file.

    The key is the file's path relative to the folder without ``.md`` (``"deploy"``, ``"api/auth"``). The
    description is ``description:`` from a front matter block (``---`` lines at the top), else the first non-blank
    line with any leading ``#`` removed. ``load`` returns the file's text without its front matter. The folder is
    read on every call, so edited files show up at the next prompt refresh.

    Args:
        path: The folder.
        keys: An allow-list; other files are neither listed nor loadable.

    Raises:
        FileNotFoundError: ``path`` is not a folder (raised on first use, so a session can still be built).
    """

    def __init__(self, path: str | Path, *, keys: Iterable[str] | None = None) -> None:
        self.path = Path(path)
        self.keys_allowed = None if keys is None else frozenset(keys)

    def __repr__(self) -> str:
        return f"FolderSkillProvider({str(self.path)!r})"

    def _files(self) -> dict[str, Path]:
        if not self.path.is_dir():
            raise FileNotFoundError(f"No skill folder at {self.path}; create it or pass another path.")
        found = {}
        for file in sorted(self.path.rglob("*.md")):
            if file.is_file():
                key = file.relative_to(self.path).with_suffix("").as_posix()
                if self.keys_allowed is None or key in self.keys_allowed:
                    found[key] = file
        return found

    def keys(self) -> list[str]:
        """Every loadable key, in order."""
        return list(self._files())

    def get(self) -> str | None:
        """The catalogue ``- key: description``, or None for an empty folder."""
        items = []
        for key, file in self._files().items():
            description, body = _split_front_matter(file.read_text(encoding="utf-8"))
            items.append((key, description or _first_line(body)))
        return _catalogue(items)

    def load(self, key: str) -> str | None:
        """The skill's text without front matter, or None for a key that is not a listed file."""
        # Only keys found by the scan: a key like "../secret" can never name a file outside the folder.
        file = self._files().get(key)
        if file is None:
            return None
        return _split_front_matter(file.read_text(encoding="utf-8"))[1].lstrip("\r\n")


# -- search ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchHit:
    """One search result: the entry's key, its score (higher is better), text and metadata."""

    key: str
    score: float
    content: str
    metadata: dict[str, Any] = field(default_factory=dict)


def format_hits(hits: Sequence[SearchHit]) -> str | None:
    """The ``search_context`` text: ``[key] (score s)`` then the content, per hit, separated by blank lines.

    Upstream writes ``[key]\\ncontent``; the score is added so the model (and a researcher reading the transcript)
    can tell a strong match from a weak one.
    """
    if not hits:
        return None
    return "\n\n".join(f"[{h.key}] (score {h.score:.4f})\n{h.content}" for h in hits)


def _entry_count_text(n: int) -> str | None:
    return f"{n} entries indexed." if n else None  # upstream's wording, "1 entries" included


class _SearchBase(_Labelled):
    """What the three search providers share: label handling, ``get``, ``search`` and argument checks."""

    limit: int

    def __repr__(self) -> str:
        return f"{type(self).__name__}(label={self.label!r})"

    @property
    def namespace(self) -> str:
        """The name under which this block's entries are stored (``"context:<label>"``)."""
        return f"context:{self._label()}"

    def get(self) -> str | None:
        """``"N entries indexed."``, or None when the block is empty."""
        return _entry_count_text(self.count())

    def search(self, query: str) -> str | None:
        """The best ``limit`` entries for ``query`` as text (see :func:`format_hits`), or None."""
        return format_hits(self.hits(query))

    def set(self, key: str, content: str, metadata: Mapping[str, Any] | None = None) -> None:
        """Insert the entry ``key``, or update it in place."""
        self.set_many([(key, content, metadata)])

    def count(self) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def hits(self, query: str, limit: int | None = None) -> list[SearchHit]:  # pragma: no cover - overridden
        raise NotImplementedError

    def set_many(self, items: Iterable[tuple[Any, ...]], *, progress: bool = False) -> int:  # pragma: no cover
        raise NotImplementedError


def _check_items(items: Iterable[tuple[Any, ...]]) -> list[tuple[str, str, dict[str, Any] | None]]:
    out = []
    for item in items:
        if not isinstance(item, tuple | list) or len(item) not in (2, 3):
            raise TypeError(f"Each entry must be (key, content) or (key, content, metadata), got {item!r}.")
        key, content, metadata = item if len(item) == 3 else (*item, None)
        if not isinstance(key, str) or not key:
            raise ValueError(f"Entry keys must be non-empty strings, got {key!r}.")
        if not isinstance(content, str):
            raise TypeError(f"Content of entry {key!r} must be a string, not {type(content).__name__}.")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise TypeError(f"Metadata of entry {key!r} must be a dict or None, not {type(metadata).__name__}.")
        out.append((key, content, None if metadata is None else dict(metadata)))
    return out


class VectorSearchProvider(_SearchBase):
    """Entries found by meaning: embeddings in DuckDB, searched through a FAISS cache (:class:`VectorStore`).

    Each content is embedded once per model (unchanged content is never re-embedded); a bad embedder output raises
    :class:`~agentlab.errors.EmbedderError` and stores nothing.

    Args:
        agent: The :class:`~agentlab.agent.Agent` (or a :class:`~agentlab.store.Store`).
        embedder: Any :class:`~agentlab.search.embedders.Embedder`; default all-MiniLM-L6-v2 (loaded on first use).
        label: Storage label; when None, the block's label.
        limit: Hits returned by :meth:`search`.
    """

    def __init__(self, agent: Any, embedder: Embedder | None = None, *, label: str | None = None,
                 limit: int = 10) -> None:
        self._agent = agent
        self._embedder = embedder
        self.label = label
        self.limit = check_count("limit", limit)
        self._vectors: VectorStore | None = None
        self._seen_entries = False

    @property
    def embedder(self) -> Embedder:
        """The embedder (created on first access when none was given)."""
        if self._embedder is None:
            from agentlab.search.embedders import MiniLMEmbedder

            self._embedder = MiniLMEmbedder()
        return self._embedder

    @property
    def vectors(self) -> VectorStore:
        """The underlying :class:`~agentlab.search.vectors.VectorStore` (namespace ``"context:<label>"``)."""
        store = _store_of(self._agent)
        if self._vectors is None or self._vectors.store is not store or self._vectors.namespace != self.namespace:
            from agentlab.search.vectors import VectorStore

            self._vectors = VectorStore(store, self.namespace, self.embedder)
        return self._vectors

    def count(self) -> int:
        """Number of entries."""
        return self.vectors.count()

    def keys(self) -> list[str]:
        """Every key, in order of first insertion."""
        return self.vectors.keys()

    def _has_entries(self) -> bool:
        # LIMIT 1 stops at the first row; count(*) would scan the namespace on every search.
        return bool(_store_of(self._agent).execute(
            "SELECT 1 FROM vector_entries WHERE namespace = ? LIMIT 1", [self.namespace]
        ).fetchall())

    def entry(self, key: str) -> SearchHit | None:
        """The stored entry ``key`` (score 0), or None."""
        found = self.vectors.get(key)
        return None if found is None else SearchHit(found.key, 0.0, found.content, found.metadata)

    def set_many(self, items: Iterable[tuple[Any, ...]], *, progress: bool = False) -> int:
        """Insert or update many entries in one transaction; returns how many changed.

        Raises:
            EmbedderError: Wrong dimension, NaN or infinite vectors; nothing is stored.
        """
        return self.vectors.add_many(_check_items(items), progress=progress)

    def delete(self, key: str) -> bool:
        """Delete the entry ``key``; returns whether there was one."""
        return self.vectors.delete(key) > 0

    def hits(self, query: str, limit: int | None = None) -> list[SearchHit]:
        """The entries closest in meaning to ``query`` (cosine for normalised embedders), best first."""
        if not query or not query.strip():
            return []
        if not self._seen_entries:
            # An empty block answers without loading the model. Once entries were seen the check is skipped
            # (a block emptied later still answers [] from the empty index, after embedding the query).
            if not self._has_entries():
                return []
            self._seen_entries = True
        found = self.vectors.search(query, self.limit if limit is None else limit)
        return [SearchHit(h.key, h.score, h.content, h.metadata) for h in found]


def _fulltext(store: Store, namespace: str) -> Any:
    from agentlab.search.fulltext import FullTextIndex

    return FullTextIndex(store, namespace)


def _metadata_text(metadata: dict[str, Any] | None) -> str | None:
    return json.dumps(metadata, ensure_ascii=False, allow_nan=False) if metadata else None


_UPSERT_ENTRIES = """
INSERT INTO context_entries (label, key, content, metadata)
SELECT ?, key, content, metadata FROM _agentlab_context_batch
ON CONFLICT (label, key) DO UPDATE SET content = excluded.content, metadata = excluded.metadata, updated_at = now()
"""


class FullTextSearchProvider(_SearchBase):
    """Entries found by words: BM25 over a porter-stemmed index (upstream ``AgentSearchProvider``).

    Entries live in ``context_entries``; the index (:class:`agentlab.search.fulltext.FullTextIndex`, namespace
    ``"context:<label>"``) is updated in the same transaction, so a search right after ``set`` finds the entry.

    Args:
        agent: The :class:`~agentlab.agent.Agent` (or a :class:`~agentlab.store.Store`).
        label: Storage label; when None, the block's label.
        limit: Hits returned by :meth:`search` (upstream: 10).
        mode: ``"all"`` (every word, upstream), ``"any"`` (ranked OR) or ``"phrase"``.
    """

    def __init__(self, agent: Any, *, label: str | None = None, limit: int = 10, mode: str = "all") -> None:
        from agentlab.search.fulltext import MODES

        if mode not in MODES:
            raise InvalidSearchError(f"Unknown search mode {mode!r}; use one of {', '.join(MODES)}.")
        self._agent = agent
        self.label = label
        self.limit = check_count("limit", limit)
        self.mode = mode

    @property
    def index(self) -> Any:
        """The full-text index of this block's entries."""
        return _fulltext(_store_of(self._agent), self.namespace)

    def count(self) -> int:
        """Number of entries."""
        rows = _store_of(self._agent).execute(
            "SELECT count(*) FROM context_entries WHERE label = ?", [self._label()]
        ).fetchall()
        return int(rows[0][0])

    def keys(self) -> list[str]:
        """Every key, oldest first."""
        rows = _store_of(self._agent).execute(
            "SELECT key FROM context_entries WHERE label = ? ORDER BY created_at, key", [self._label()]
        ).fetchall()
        return [r[0] for r in rows]

    def entry(self, key: str) -> SearchHit | None:
        """The stored entry ``key`` (score 0), or None."""
        found = self._entries([key])
        return found.get(key)

    def _entries(self, keys: list[str]) -> dict[str, SearchHit]:
        rows = _store_of(self._agent).execute(
            "SELECT key, content, metadata FROM context_entries "
            "WHERE label = ? AND key IN (SELECT unnest(?::VARCHAR[]))",
            [self._label(), keys],
        ).fetchall()
        return {k: SearchHit(k, 0.0, c, json.loads(m) if m else {}) for k, c, m in rows}

    def set_many(self, items: Iterable[tuple[Any, ...]], *, progress: bool = False) -> int:
        """Insert or update many entries in one transaction; returns how many were written."""
        import pyarrow as pa

        batch = {key: (content, _metadata_text(meta)) for key, content, meta in _check_items(items)}
        if not batch:
            return 0
        store = _store_of(self._agent)
        table = pa.table({"key": list(batch), "content": [v[0] for v in batch.values()],
                          "metadata": pa.array([v[1] for v in batch.values()], pa.string())})
        with store.transaction() as conn:
            # Bulk rows go through Arrow: DuckDB takes ~1,000 single-row inserts/s but ~400,000 rows/s this way.
            conn.register("_agentlab_context_batch", table)
            try:
                store.execute(_UPSERT_ENTRIES, [self._label()])
            finally:
                conn.unregister("_agentlab_context_batch")
            self.index.index_many([(key, content, "") for key, (content, _) in batch.items()])
        return len(batch)

    def delete(self, key: str) -> bool:
        """Delete the entry ``key``; returns whether there was one."""
        store = _store_of(self._agent)
        with store.transaction():
            rows = store.execute(
                "DELETE FROM context_entries WHERE label = ? AND key = ? RETURNING key", [self._label(), key]
            ).fetchall()
            if rows:
                self.index.remove([key])
        return bool(rows)

    def hits(self, query: str, limit: int | None = None) -> list[SearchHit]:
        """The best entries for ``query`` by BM25 (higher is better), best first."""
        if not query or not query.strip():
            return []
        found = self.index.search(query, mode=self.mode, limit=self.limit if limit is None else limit)
        entries = self._entries([h.doc_id for h in found])
        return [_with_score(entries[h.doc_id], h.score) for h in found if h.doc_id in entries]


def _with_score(hit: SearchHit, score: float) -> SearchHit:
    """``hit`` with another score."""
    return SearchHit(hit.key, float(score), hit.content, hit.metadata)


class HybridSearchProvider(_SearchBase):
    """Entries found by meaning and by words, fused with reciprocal rank fusion.

    Each side returns its best ``candidates``; an entry scores ``sum(1 / (rrf_k + rank))`` over the lists it is
    in (rank 1 = best), so agreement between the two rankings wins, and raw scores never need comparing. Entries
    are stored once (in the vector store); the word index follows them in the same transaction.

    Args:
        agent: The :class:`~agentlab.agent.Agent` (or a :class:`~agentlab.store.Store`).
        embedder: As :class:`VectorSearchProvider` (default all-MiniLM-L6-v2).
        label: Storage label; when None, the block's label.
        rrf_k: The fusion constant; larger values flatten the difference between ranks (60 is the usual choice).
        limit: Hits returned by :meth:`search`.
        candidates: How deep each side's list is before fusion.
    """

    def __init__(self, agent: Any, embedder: Embedder | None = None, *, label: str | None = None, rrf_k: float = 60,
                 limit: int = 10, candidates: int = 50) -> None:
        self._agent = agent
        self.label = label
        self.rrf_k = check_amount("rrf_k", rrf_k)  # NaN would make every fused score NaN
        self.limit = check_count("limit", limit)
        self.candidates = check_count("candidates", candidates)
        self.vector = VectorSearchProvider(agent, embedder, label=label, limit=candidates)

    def init(self, label: str) -> None:
        """Adopt the block's label (for both sides) unless one was given."""
        super().init(label)
        self.vector.init(self.label or label)

    @property
    def index(self) -> Any:
        """The full-text side's index."""
        return _fulltext(_store_of(self._agent), self.namespace)

    def count(self) -> int:
        """Number of entries."""
        return self.vector.count()

    def keys(self) -> list[str]:
        """Every key, in order of first insertion."""
        return self.vector.keys()

    def entry(self, key: str) -> SearchHit | None:
        """The stored entry ``key`` (score 0), or None."""
        return self.vector.entry(key)

    def set_many(self, items: Iterable[tuple[Any, ...]], *, progress: bool = False) -> int:
        """Insert or update many entries (vectors and words) in one transaction.

        Raises:
            EmbedderError: Bad embedder output; nothing is stored on either side.
        """
        checked = _check_items(items)
        store = _store_of(self._agent)
        with store.transaction():
            changed = self.vector.set_many(checked, progress=progress)
            self.index.index_many([(key, content, "") for key, content, _ in checked])
        return changed

    def delete(self, key: str) -> bool:
        """Delete the entry ``key`` from both sides; returns whether there was one."""
        store = _store_of(self._agent)
        with store.transaction():
            deleted = self.vector.delete(key)
            self.index.remove([key])
        return deleted

    def hits(self, query: str, limit: int | None = None) -> list[SearchHit]:
        """The fused ranking, best first; ``score`` is the RRF sum."""
        if not query or not query.strip():
            return []
        by_meaning = self.vector.hits(query, self.candidates)
        by_words = self.index.search(query, mode="any", limit=self.candidates)
        fused = rrf([[h.key for h in by_meaning], [h.doc_id for h in by_words]], k=self.rrf_k)
        best = fused[: self.limit if limit is None else limit]
        known = {h.key: h for h in by_meaning}
        known.update(self._entries([key for key, _ in best if key not in known]))
        return [_with_score(known[key], score) for key, score in best if key in known]

    def _entries(self, keys: list[str]) -> dict[str, SearchHit]:
        # One query for the entries found by words only (the vector side already returned its own texts).
        if not keys:
            return {}
        rows = _store_of(self._agent).execute(
            "SELECT key, content, metadata FROM vector_entries "
            "WHERE namespace = ? AND key IN (SELECT unnest(?::VARCHAR[]))",
            [self.vector.namespace, keys],
        ).fetchall()
        return {k: SearchHit(k, 0.0, c, json.loads(m) if m else {}) for k, c, m in rows}
