"""The context of one session: its block configuration, its :class:`~agentlab.context.ContextBlocks`, and
what ties the blocks to the conversation.

A session holds one :class:`SessionContext`; ``session.with_context(...)`` and the other context methods forward to
it and to its blocks. Blocks may be configured in any order before the blocks are first used: the
:class:`ContextBlocks` is created on first use.

Invariants:

* A block with no provider is stored in the agent under ``(session id, label)``, and ``with_cached_prompt()``
  stores the prompt under ``(session id, "_system_prompt")``, so no two sessions share a stored block.
* After a compaction or ``clear_messages()`` the frozen prompt is refreshed, and the loaded-skill set is rebuilt
  from what the model can still see. A skill block added by any path once the blocks exist (``add_context``,
  ``with_context``, ``context.add_context``) has its loaded skills read back from the history at once, as when
  the blocks are first created, so a skill loaded earlier in the conversation is not loaded twice.
* A session on a bare :class:`~agentlab.session.SessionStorage` (no agent, no store) has no default
  provider: a block needs an explicit one, and so does ``with_cached_prompt``; unloaded texts are not archived.
* Every write to a writable block is announced to watchers, and recorded in the memory timeline when the session
  has an agent file (:mod:`agentlab.context._block_history`).
* ``unload_context`` replaces the loaded text in history by a marker; the text itself is archived in
  ``context_unloaded`` and stays readable through :meth:`SessionContext.unloaded_skill_text`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from agentlab.context import (
    AgentContextProvider,
    BlockJournal,
    ContextBlock,
    ContextBlocks,
    ContextConfig,
    SkillProvider,
    context_tool_calls,
    is_loaded_text,
    scan_loaded_skills,
    tool_result_text,
)
from agentlab.errors import ContextError

if TYPE_CHECKING:
    from agentlab.store import Store

__all__ = ["SessionContext"]


class ContextHost(Protocol):
    """What :class:`SessionContext` needs from its session (a :class:`~agentlab.session.Session`)."""

    agent: Any
    store: Store | None
    storage: Any
    session_id: str
    system_prompt_provider: Callable[[], str | None] | None
    context_blocks_provider: Callable[[], list[Any]] | None

    def get_history(self, leaf_id: str | None = None) -> list[dict[str, Any]]: ...

    def update_message(self, message: Mapping[str, Any]) -> None: ...

    def on_compacted(self, listener: Callable[[dict[str, Any]], Any]) -> Callable[[], None]: ...

    def _report(self, exc: BaseException) -> None: ...


class SessionContext:
    """The context blocks of one session, created on first use, and their wiring into the session.

    Attributes:
        configs: Blocks configured before the :class:`ContextBlocks` existed, in order.
        cached_prompt: Whether the frozen prompt is kept across restarts.
    """

    def __init__(self, session: ContextHost) -> None:
        self.session = session
        self.configs: list[ContextConfig] = []
        self.cached_prompt = False
        self.prompt_store: Any = None
        self.wired = False
        self._blocks: ContextBlocks | None = None

    # -- builder -------------------------------------------------------------------------------------------------

    def add(self, label: str, provider: Any = None, description: str | None = None,
            max_tokens: int | None = None) -> None:
        """Add a context block (the session's ``with_context`` builder).

        Args:
            label: The block's name.
            provider: Any provider (:mod:`agentlab.context._providers`); None stores a writable block in the agent.
            description: Shown in the prompt header and the ``set_context`` description.
            max_tokens: Budget enforced on writes.

        Raises:
            ContextError: ``Block "x" already exists``.
        """
        if self._blocks is not None:
            self._blocks.add_context(label, provider, description=description, max_tokens=max_tokens)
        else:
            config = ContextConfig(label, description, max_tokens, provider)
            if any(c.label == label for c in self.configs):
                raise ContextError(f'Block "{label}" already exists')
            self.configs.append(config)
        self.wire()

    def cache_prompt(self, store: Any = None) -> None:
        """Keep the frozen prompt across restarts, in ``store`` or in the agent (the ``with_cached_prompt`` builder)."""
        if store is None and self._owner() is None:
            raise ContextError("with_cached_prompt() needs a provider to keep the prompt in when the session has no "
                               "agent or store: pass one, e.g. with_cached_prompt(my_provider).")
        self.cached_prompt = True
        self.prompt_store = store
        if self._blocks is not None:
            self._blocks.prompt_store = self._prompt_store()
        self.wire()

    def _owner(self) -> Any:
        session = self.session
        return session.agent if session.agent is not None else session.store

    def _journal(self) -> BlockJournal:
        return BlockJournal(self.session.store, self.session.session_id, owner=self.session.storage)

    def _provider(self, label: str) -> AgentContextProvider:
        return AgentContextProvider(self._owner(), label, session_id=self.session.session_id)

    def _prompt_store(self) -> Any:
        if not self.cached_prompt:
            return None
        if self.prompt_store is not None:
            return self.prompt_store
        return self._provider("_system_prompt")

    def wire(self) -> None:
        """Count the blocks in the session's token estimate and refresh the prompt after compaction (once)."""
        if self.wired:
            return
        self.wired = True
        session = self.session
        session.system_prompt_provider = lambda: self.blocks.prompt_for_estimate()

        def loaded_blocks() -> list[ContextBlock]:
            if not self.blocks.loaded:
                self.blocks.load()
            return self.blocks.get_context_blocks()

        session.context_blocks_provider = loaded_blocks
        session.on_compacted(self._after_compaction)

    @property
    def created(self) -> bool:
        """Whether the :class:`ContextBlocks` exist yet (reads that must not load check this)."""
        return self._blocks is not None

    @property
    def blocks(self) -> ContextBlocks:
        """The session's :class:`ContextBlocks` (created on first use)."""
        if self._blocks is None:
            blocks = ContextBlocks(
                self.configs,
                self._prompt_store(),
                default_provider=self._provider if self._owner() is not None else None,
                on_unload=self._unloaded,
                on_error=self.session._report,
                on_add=self._added,
                lock=self.session.storage.lock,
                journal=self._journal(),
            )
            self._blocks = blocks
            labels = [c.label for c in self.configs if isinstance(c.provider, SkillProvider)]
            if labels:
                try:
                    blocks.restore_loaded_skills(self._loaded_in_history(labels))
                except Exception as exc:
                    self.session._report(exc)
        return self._blocks

    def _loaded_in_history(self, labels: list[str]) -> list[str]:
        """The skills of blocks ``labels`` that the conversation has loaded and not unloaded (``"label:key"``)."""
        prefixes = tuple(f"{label}:" for label in labels)
        return [name for name in scan_loaded_skills(self.session.get_history()) if name.startswith(prefixes)]

    def _skill_labels(self, blocks: ContextBlocks) -> list[str]:
        return [label for label in blocks.labels if isinstance(getattr(blocks.config(label), "provider", None),
                                                                SkillProvider)]

    def _added(self, block: ContextBlock) -> None:
        """A block was added after the blocks existed: if it holds skills, mark those the history has loaded."""
        if not block.is_skill or self._blocks is None:
            return
        try:
            found = self._loaded_in_history([block.label])
        except Exception as exc:
            self.session._report(exc)
            return
        if found:
            self._blocks.restore_loaded_skills([*self._blocks.loaded_skills, *found])

    def _after_compaction(self, event: Mapping[str, Any]) -> None:
        blocks = self.blocks
        if event.get("type") == "cleared":
            blocks.restore_loaded_skills([])
        else:
            # Loaded texts hidden by the summary are no longer in the model's view: forget them.
            labels = self._skill_labels(blocks)
            blocks.restore_loaded_skills(self._loaded_in_history(labels) if labels else [])
        blocks.refresh_system_prompt()

    def _unloaded(self, label: str, key: str) -> None:
        """Replace the newest loaded text of ``label:key`` in history by the marker, archiving the text first."""
        try:
            history = self.session.get_history()
            calls = [c for c in context_tool_calls(history)
                     if c.name == "load_context" and c.label == label and c.key == key and is_loaded_text(c)]
            if not calls:
                return
            call = calls[-1]
            message = history[call.message_index]
            parts = list(message["parts"])
            part = parts[call.part_index]
            parts[call.part_index] = {**part, call.field: f"[skill unloaded: {key}]"}
            tool_use_id = part.get("tool_use_id", part.get("toolCallId", f"{message['id']}#{call.part_index}"))
            store = self.session.store
            if store is None:  # no store to archive the text in
                self.session.update_message({**message, "parts": parts})
                return
            with store.transaction():
                store.execute(
                    """
                    INSERT INTO context_unloaded (session_id, message_id, tool_use_id, label, key, content)
                    VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING
                    """,
                    [self.session.session_id, message["id"], str(tool_use_id), label, key,
                     json.dumps(part.get(call.field), ensure_ascii=False)],
                )
                self.session.update_message({**message, "parts": parts})
        except Exception as exc:  # upstream: fire and forget; the skill is unloaded either way
            self.session._report(exc)

    def unloaded_skill_text(self, label: str, key: str) -> str | None:
        """The text that ``unload_context`` last removed from this conversation for ``label:key``, or None."""
        if self.session.store is None:
            return None
        rows = self.session.store.execute(
            """
            SELECT content FROM context_unloaded WHERE session_id = ? AND label = ? AND key = ?
            ORDER BY unloaded_at DESC LIMIT 1
            """,
            [self.session.session_id, label, key],
        ).fetchall()
        return tool_result_text(json.loads(rows[0][0])) if rows else None
