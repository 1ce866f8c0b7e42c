"""Context blocks: the labelled texts that make up a session's system prompt, and the writes the model may make.

:class:`ContextBlocks` re-creates upstream's ``ContextBlocks``: configured blocks are loaded from their providers
in configured order, rendered into the system prompt (:func:`agentlab.context.render_prompt`), and written
through the same paths the tools use (:mod:`agentlab.context._tools`). A session holds one and forwards its builder
(``with_context``, ``with_cached_prompt``) and context methods to it.

Invariants:

* Loading never writes. ``get_context_block(s)`` do not load: they return None / [] until something has loaded
  (``tools()``, ``freeze_system_prompt()``, any write), as upstream.
* Writes reach the provider before the in-memory block changes, so a failed write leaves both as they were.
  ``max_tokens`` is checked on every plain write (the combined text on append), never on loaded content or keyed
  entries; the error texts are upstream's.
* The prompt is frozen on first use (and persisted when a prompt store is set). Only :meth:`refresh_system_prompt`
  re-renders it; writes, ``add_context`` and ``remove_context`` never do, which keeps the model's prefix cache warm.
* A provider whose ``get`` raises is left out of the prompt, reported in :attr:`ContextBlocks.errors` (and to
  ``on_error``), and refuses writes until a reload succeeds, so a model never overwrites text it could not see.
* With a ``journal`` (sessions give one), every plain write is recorded with the text before and after it, in the
  write's transaction (:mod:`agentlab.context._block_history`), and watchers hear of every write after it committed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from agentlab.context._block_history import BlockJournal, writing_as
from agentlab.context._config import ContextConfig, block_for
from agentlab.context._prompt import ContextBlock, render_prompt
from agentlab.context._tokens import estimate_string_tokens
from agentlab.context._tools import context_tools, run_tool
from agentlab.errors import BlockBudgetError, BlockNotFoundError, BlockReadonlyError, ContextError, ContextProviderError

__all__ = ["ContextBlocks", "ContextConfig"]


class ContextBlocks:
    """The configured blocks of one session, their loaded text, the frozen prompt and the loaded skills.

    Args:
        configs: Blocks in prompt order (:class:`ContextConfig` or dicts with the same keys).
        prompt_store: A writable provider (``get``/``set``) that keeps the frozen prompt across restarts.
        default_provider: Makes the provider of a block configured without one (sessions store such blocks in the
            agent); without it such a block is an empty read-only block, as upstream without an agent.
        on_unload: Called with ``(label, key)`` after a skill is unloaded (the session rewrites its history).
        on_error: Called with a :class:`~agentlab.errors.ContextProviderError` when a provider's ``get`` raises.
        on_add: Called with the loaded block after :meth:`add_context` added one (the session restores the skills
            its history has loaded).
        lock: The re-entrant lock guarding the blocks (a session passes its store's lock); a new one by default.
        journal: Records plain writes in the memory timeline and tells watchers of every write (sessions pass
            one; see :class:`~agentlab.context._block_history.BlockJournal`).
    """

    def __init__(
        self,
        configs: Iterable[ContextConfig | Mapping[str, Any]] = (),
        prompt_store: Any = None,
        *,
        default_provider: Callable[[str], Any] | None = None,
        on_unload: Callable[[str, str], None] | None = None,
        on_error: Callable[[ContextProviderError], None] | None = None,
        on_add: Callable[[ContextBlock], None] | None = None,
        lock: Any = None,
        journal: BlockJournal | None = None,
    ) -> None:
        self.prompt_store = prompt_store
        self.journal = journal
        self.default_provider = default_provider
        self.on_unload = on_unload
        self.on_error = on_error
        self.on_add = on_add
        # A session passes its store's lock: providers write through the store, and the store's commit hooks
        # (compaction after an append) refresh the prompt, so one lock keeps one order.
        self._lock = lock if lock is not None else threading.RLock()
        self._configs: dict[str, ContextConfig] = {}
        self._blocks: dict[str, ContextBlock] = {}
        self._failed: dict[str, ContextProviderError] = {}
        self._loaded = False
        self._snapshot: str | None = None
        self._skills: dict[str, None] = {}  # "label:key", insertion-ordered
        for config in configs:
            self._add_config(config)

    def __repr__(self) -> str:
        return f"ContextBlocks({list(self._configs)!r}, loaded={self._loaded})"

    def _add_config(self, config: ContextConfig | Mapping[str, Any]) -> ContextConfig:
        if not isinstance(config, ContextConfig):
            config = ContextConfig(**dict(config))
        if config.label in self._configs:
            raise ContextError(f'Block "{config.label}" already exists')
        if config.provider is None and self.default_provider is not None:
            config = replace(config, provider=self.default_provider(config.label))
        self._configs[config.label] = config
        return config

    # -- loading -------------------------------------------------------------------------------------------------

    @property
    def labels(self) -> list[str]:
        """Configured labels, in prompt order."""
        return list(self._configs)

    @property
    def loaded(self) -> bool:
        """Whether the blocks have been loaded since the last refresh."""
        return self._loaded

    @property
    def errors(self) -> dict[str, ContextProviderError]:
        """Blocks whose provider failed at the last load, by label."""
        with self._lock:
            return dict(self._failed)

    def config(self, label: str) -> ContextConfig | None:
        """The configuration of ``label``, or None."""
        return self._configs.get(label)

    def load(self) -> list[ContextBlock]:
        """(Re)load every block from its provider, in configured order; returns the loaded blocks."""
        with self._lock:
            self._failed.clear()
            for config in self._configs.values():
                self._load_block(config)
            self._loaded = True
            return self.get_context_blocks()

    def _load_block(self, config: ContextConfig) -> None:
        provider = config.provider
        try:
            if provider is None:
                content = ""
            else:
                init = getattr(provider, "init", None)
                if callable(init):
                    init(config.label)
                content = provider.get()
                if content is None:
                    content = ""
                elif not isinstance(content, str):
                    raise TypeError(f"get() returned {type(content).__name__}, not str or None")
        except Exception as exc:
            error = ContextProviderError(config.label, exc)
            self._failed[config.label] = error
            self._blocks.pop(config.label, None)
            if self.on_error is not None:
                try:
                    self.on_error(error)
                except Exception:  # a broken reporter must not break the prompt
                    pass
            return
        self._failed.pop(config.label, None)
        self._blocks[config.label] = block_for(config, content)

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self.load()

    def get_context_block(self, label: str) -> ContextBlock | None:
        """The loaded block ``label``, or None (not loaded yet, unknown, or its provider failed). Never loads."""
        return self._blocks.get(label)

    def get_context_blocks(self) -> list[ContextBlock]:
        """The loaded blocks in configured order (empty until something loads). Never loads."""
        with self._lock:
            return [self._blocks[label] for label in self._configs if label in self._blocks]

    def block_spec(self, label: str) -> ContextBlock | None:
        """What the tools know of ``label``: the loaded block, or an empty stand-in when its provider failed."""
        with self._lock:
            self._ensure_loaded()
            if label in self._blocks:
                return self._blocks[label]
            config = self._configs.get(label)
            return None if config is None else block_for(config, "")

    def _spec_list(self) -> list[ContextBlock]:
        specs = (self.block_spec(label) for label in self._configs)
        return [spec for spec in specs if spec is not None]

    def _writable_block(self, label: str) -> ContextBlock:
        self._ensure_loaded()
        if label in self._failed:
            raise self._failed[label]
        block = self._blocks.get(label)
        if block is None or not block.writable:
            raise BlockReadonlyError(f'Block "{label}" is readonly')
        return block

    # -- plain writes --------------------------------------------------------------------------------------------

    def set_block(self, label: str, content: str) -> ContextBlock:
        """Replace a writable block's text (upstream ``setBlock`` / ``replaceContextBlock``).

        Returns:
            The updated block.

        Raises:
            BlockReadonlyError: ``Block "x" is readonly`` (unknown or read-only label).
            ContextError: ``Block "x" is a keyed provider. ...`` for skill and search blocks.
            BlockBudgetError: ``Block "x" exceeds maxTokens: n > max``; nothing is written.
            ContextProviderError: The block's provider failed to load; nothing is written.
        """
        if not isinstance(content, str):
            raise TypeError(f"Block content must be a string, not {type(content).__name__}.")
        with self._lock:
            block = self._writable_block(label)
            if block.is_skill or block.is_searchable:
                raise ContextError(
                    f'Block "{label}" is a keyed provider. Use setSkill() or setSearchEntry() instead.'
                )
            tokens = estimate_string_tokens(content)
            if block.max_tokens is not None and tokens > block.max_tokens:
                raise BlockBudgetError(f'Block "{label}" exceeds maxTokens: {tokens} > {block.max_tokens}')
            provider = self._configs[label].provider
            if self.journal is not None:
                self.journal.write(label, block.content, content, lambda: provider.set(content))
            else:
                provider.set(content)
            updated = replace(block, content=content, tokens=tokens)
            self._blocks[label] = updated
            return updated

    def append_to_block(self, label: str, content: str) -> ContextBlock:
        """Append to a writable block, on a new line unless ``content`` starts with one; the sum is budget-checked.

        Raises:
            BlockNotFoundError: ``Block "x" not found``.
            BlockReadonlyError, BlockBudgetError, ContextError: As :meth:`set_block`.
        """
        if not isinstance(content, str):
            raise TypeError(f"Block content must be a string, not {type(content).__name__}.")
        with self._lock:
            self._ensure_loaded()
            if label in self._failed:
                raise self._failed[label]
            block = self._blocks.get(label)
            if block is None:
                raise BlockNotFoundError(f'Block "{label}" not found')
            existing = block.content
            joiner = "\n" if existing and not content.startswith("\n") else ""
            return self.set_block(label, existing + joiner + content)

    # -- keyed writes --------------------------------------------------------------------------------------------

    def _keyed(self, label: str, kind: str) -> tuple[ContextBlock, Any]:
        self._ensure_loaded()
        if label in self._failed:
            raise self._failed[label]
        block = self._blocks.get(label)
        if block is None:
            raise BlockNotFoundError(f'Block "{label}" not found')
        is_kind = block.is_skill if kind == "skill" else block.is_searchable
        if not is_kind:
            raise ContextError(f'Block "{label}" is not a {kind} block')
        if not block.writable:
            raise BlockReadonlyError(f'Block "{label}" is readonly')
        return block, self._configs[label].provider

    def set_skill(self, label: str, key: str, content: str, description: str | None = None) -> ContextBlock:
        """Store a skill document in a writable skill block; the block's catalogue is re-read from the provider.

        Raises:
            BlockNotFoundError, BlockReadonlyError, ContextError: Unknown label, no ``set``, not a skill block.
        """
        with self._lock:
            block, provider = self._keyed(label, "skill")
            provider.set(key, content, description)
            self._touched(label)
            catalogue = provider.get()
            if catalogue is not None:
                block = replace(block, content=catalogue, tokens=estimate_string_tokens(catalogue))
                self._blocks[label] = block
            return block

    def set_search_entry(self, label: str, key: str, content: str) -> ContextBlock:
        """Store an entry in a writable search block; the block's summary is re-read from the provider.

        Raises:
            BlockNotFoundError, BlockReadonlyError, ContextError: Unknown label, no ``set``, not a search block.
        """
        with self._lock:
            block, provider = self._keyed(label, "search")
            provider.set(key, content)
            self._touched(label)
            summary = provider.get() or ""
            block = replace(block, content=summary, tokens=estimate_string_tokens(summary))
            self._blocks[label] = block
            return block

    def delete_entry(self, label: str, key: str) -> bool:
        """Delete a keyed entry from a skill or search block whose provider has ``delete``; returns whether it existed.

        The skill is also dropped from the loaded set. Like every write, the frozen prompt is not refreshed.
        """
        with self._lock:
            self._ensure_loaded()
            config = self._configs.get(label)
            if config is None:
                raise BlockNotFoundError(f'Block "{label}" not found')
            delete = getattr(config.provider, "delete", None)
            if not callable(delete):
                raise BlockReadonlyError(f'Block "{label}" is readonly')
            deleted = bool(delete(key))
            self._touched(label)
            self._skills.pop(f"{label}:{key}", None)
            if label in self._blocks:
                content = config.provider.get() or ""
                self._blocks[label] = replace(self._blocks[label], content=content,
                                              tokens=estimate_string_tokens(content))
            return deleted

    def _touched(self, label: str) -> None:
        if self.journal is not None:
            self.journal.touched(label)

    # -- skills and search ---------------------------------------------------------------------------------------

    def _labels_where(self, flag: str) -> list[str]:
        return [b.label for b in self._spec_list() if getattr(b, flag)]

    def _skill_provider(self, label: str) -> Any:
        spec = self.block_spec(label)
        if spec is None or not spec.is_skill:
            skills = ", ".join(self._labels_where("is_skill"))
            raise ContextError(f'"{label}" is not a skill block. Skill blocks: {skills}')
        return self._configs[label].provider

    @property
    def loaded_skills(self) -> list[str]:
        """Loaded skills as ``"label:key"``, in load order."""
        return list(self._skills)

    def is_loaded(self, label: str, key: str) -> bool:
        """Whether ``key`` of skill block ``label`` is loaded."""
        return f"{label}:{key}" in self._skills

    def restore_loaded_skills(self, names: Iterable[str]) -> None:
        """Replace the loaded set (``"label:key"`` names), e.g. after scanning a conversation."""
        with self._lock:
            self._skills = dict.fromkeys(names)

    def load_skill(self, label: str, key: str) -> str | None:
        """The skill document, marking it loaded when found; None if the provider has no such key.

        Raises:
            ContextError: ``"x" is not a skill block. Skill blocks: a, b``.
        """
        with self._lock:
            content = self._skill_provider(label).load(key)
            if content is not None:
                self._skills[f"{label}:{key}"] = None
            return content

    def unload_skill(self, label: str, key: str) -> bool:
        """Mark a skill unloaded and call ``on_unload``; False if it was not loaded.

        Raises:
            ContextError: ``label`` is not a skill block.
        """
        with self._lock:
            self._skill_provider(label)
            name = f"{label}:{key}"
            if name not in self._skills:
                return False
            del self._skills[name]
        if self.on_unload is not None:
            self.on_unload(label, key)
        return True

    def search(self, label: str, query: str) -> str | None:
        """Ask a searchable block's provider; its text, or None for no results.

        Raises:
            ContextError: ``"x" is not searchable. Searchable blocks: a, b``.
        """
        spec = self.block_spec(label)
        if spec is None or not spec.is_searchable:
            labels = ", ".join(self._labels_where("is_searchable"))
            raise ContextError(f'"{label}" is not searchable. Searchable blocks: {labels}')
        return self._configs[label].provider.search(query)

    # -- adding and removing blocks ------------------------------------------------------------------------------

    def add_context(self, label: str, provider: Any = None, *, description: str | None = None,
                    max_tokens: int | None = None) -> ContextBlock | None:
        """Add a block and load it now. The frozen prompt is not refreshed.

        Returns:
            The loaded block (None if its provider failed; see :attr:`errors`).

        Raises:
            ContextError: ``Block "x" already exists``, or no provider and no agent to store the block in.
        """
        with self._lock:
            if label in self._configs:
                raise ContextError(f'Block "{label}" already exists')
            if provider is None and self.default_provider is None:
                raise ContextError(
                    f'add_context("{label}") requires an explicit provider when the session has no agent to store '
                    "blocks in"
                )
            config = self._add_config(ContextConfig(label, description, max_tokens, provider))
            self._load_block(config)
            block = self._blocks.get(label)
        if block is not None and self.on_add is not None:
            self.on_add(block)
        return block

    def remove_context(self, label: str) -> bool:
        """Remove a block and forget its loaded skills (no unload callback). The frozen prompt is not refreshed."""
        with self._lock:
            if self._configs.pop(label, None) is None:
                return False
            self._blocks.pop(label, None)
            self._failed.pop(label, None)
            prefix = f"{label}:"
            self._skills = {name: None for name in self._skills if not name.startswith(prefix)}
            return True

    # -- the system prompt ---------------------------------------------------------------------------------------

    def render(self) -> str:
        """Render the blocks as they are now (loading them first if needed); freezes nothing."""
        with self._lock:
            self._ensure_loaded()
            return render_prompt(self.get_context_blocks())

    def to_system_prompt(self) -> str:
        """The in-memory snapshot, rendering and keeping it if there is none."""
        with self._lock:
            if self._snapshot is None:
                self._snapshot = self.render()
            return self._snapshot

    def freeze_system_prompt(self) -> str:
        """The frozen prompt: the stored one if a prompt store has it, else the snapshot (persisted if a store is
        set)."""
        with self._lock:
            if self.prompt_store is not None:
                stored = self.prompt_store.get()
                if stored is not None:
                    return stored
            first = self._snapshot is None
            prompt = self.to_system_prompt()
            if self.prompt_store is not None:
                self.prompt_store.set(prompt)
                first = True
            if first:
                self._touched("")
            return prompt

    def refresh_system_prompt(self) -> str:
        """Reload every provider, re-render, replace the snapshot and the stored prompt; returns the new prompt."""
        with self._lock:
            self._loaded = False
            self.load()
            self._snapshot = render_prompt(self.get_context_blocks())
            if self.prompt_store is not None:
                self.prompt_store.set(self._snapshot)
            self._touched("")
            return self._snapshot

    def frozen_prompt(self) -> str | None:
        """The prompt frozen so far (the stored one, else the in-memory snapshot), or None; never renders or freezes."""
        with self._lock:
            if self.prompt_store is not None:
                stored = self.prompt_store.get()
                if stored is not None:
                    return stored
            return self._snapshot

    def prompt_for_estimate(self) -> str:
        """The prompt a token estimate counts: the snapshot, else the stored prompt, else a fresh render (not kept)."""
        with self._lock:
            if self._snapshot is not None:
                return self._snapshot
            if self.prompt_store is not None:
                stored = self.prompt_store.get()
                if stored is not None:
                    return stored
            return self.render()

    # -- tools ---------------------------------------------------------------------------------------------------

    def tools(self) -> list[dict[str, Any]]:
        """Anthropic tool definitions for these blocks (see :func:`agentlab.context._tools.context_tools`)."""
        with self._lock:
            return context_tools(self._spec_list(), self._skills)

    def run_tool(self, name: str, input: Any) -> str:
        """Execute a context tool call; never raises (see :func:`agentlab.context._tools.run_tool`). Its writes are
        recorded as the ``"tool"`` writer's."""
        with writing_as("tool"):
            return run_tool(self, name, input)
