"""Context providers: where a context block's text comes from, and what the model may do with it.

A provider's *kind* is recognised by what it implements (upstream's duck typing), written here as
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
* The search providers (:mod:`agentlab.context._search_providers`): keyed entries found by meaning, by BM25, or
  by both fused.

Invariants: ``get`` never writes; every write is one transaction; a search provider's ``search`` returns ``None``
when nothing matches (never ``""``), and otherwise shows each hit's key and score.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from agentlab.errors import ContextError
from agentlab.store import Store

if TYPE_CHECKING:
    pass

__all__ = [
    "AgentContextProvider",
    "AgentSkillProvider",
    "FolderSkillProvider",
    "ReadonlyProvider",
    "SearchProvider",
    "SkillProvider",
    "WritableProvider",
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
        keys: An allow-list; other files are neither listed nor loadable. None or empty allows every file (as
            upstream's ``keys?.length``).

    Raises:
        FileNotFoundError: ``path`` is not a folder (raised on first use, so a session can still be built).
    """

    def __init__(self, path: str | Path, *, keys: Iterable[str] | None = None) -> None:
        self.path = Path(path)
        allowed = frozenset(keys) if keys is not None else frozenset()
        self.keys_allowed = allowed or None

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
