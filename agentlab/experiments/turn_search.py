"""A search tool over the whole history: at question time, the stored turns that the retrieval ranks best.

Compaction never deletes a stored message, so the turns a summary lost are still in the agent's file; this design
finds them again. :class:`TurnMemory` indexes every stored turn with the design's
:class:`~agentlab.experiments.retrieval.Retrieval` (a dated session at a time, as it ends) and answers a question
with the best ``k`` turns, each with ``neighbours`` turns on either side from its dated session, shown in
conversation order as the result of one ``search_history`` call with the question. Letta's ``conversation_search``
(its *recall memory*, ``letta/functions/function_sets/base.py``) is this tool; LangMem's pattern of searching the
memory store and putting what it finds into the prompt before the model answers is the "injected" reading of it.

Invariants: every stored turn is searchable from the end of its dated session (and before any question); a turn
is shown at most once per recall, with the rank of the first hit that brought it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .memory_design import DesignRun, MemoryDesign, Recall, render_turns
from .retrieval import Doc, Retrieval, Shared, make_index

__all__ = ["TurnMemory", "TurnSearch"]


class TurnMemory:
    """The stored turns of one conversation, indexed for retrieval (see the module docstring).

    Args:
        session: The run's session.
        retrieval: The ranking, ``k`` and ``neighbours``.
        shared: The replay's shared embedder and caches.
        label: The search block's label (when the ranking is a provider's).
        tool: The tool name shown in the recall's header.
    """

    def __init__(self, session: Any, retrieval: Retrieval, shared: Shared, *, label: str = "history",
                 tool: str = "search_history") -> None:
        self.retrieval = retrieval
        self.tool = tool
        self.index = make_index(retrieval, session, label=label, shared=shared, turns=True,
                                description="Every turn of this conversation, including those no longer shown; "
                                            "searched with the question when one is asked.")
        self.index.reset()
        self.order: list[Doc] = []
        self.position: dict[str, int] = {}
        self._pending: list[Doc] = []

    def add(self, doc: Doc) -> None:
        """A turn was stored (indexed at the next :meth:`flush`)."""
        self.position[doc.id] = len(self.order)
        self.order.append(doc)
        self._pending.append(doc)

    def flush(self) -> None:
        """Index the turns stored since the last flush (one batch)."""
        if self._pending:
            self.index.add(self._pending)
            self._pending = []

    def found(self, query: str, k: int | None = None) -> dict[str, int]:
        """Message id -> rank of the hit that brought it: the best ``k`` turns and their neighbours."""
        self.flush()
        shown: dict[str, int] = {}
        width = self.retrieval.neighbours
        for rank, hit in enumerate(self.index.rank(query, k), 1):
            at = self.position.get(hit)
            if at is None:
                continue
            session_id = self.order[at].session_id
            for j in range(max(0, at - width), min(len(self.order), at + width + 1)):
                if self.order[j].session_id == session_id:
                    shown.setdefault(self.order[j].id, rank)
        return shown

    def recall(self, query: str, k: int | None = None) -> Recall:
        """The turns found for ``query``, rendered as one ``search_history`` result in conversation order."""
        shown = self.found(query, k)
        if not shown:
            return Recall(f"[{self.tool}: nothing found for this question]", {}, [])
        docs = sorted((self.order[self.position[i]] for i in shown), key=lambda d: self.position[d.id])
        text = "\n".join([f"[{self.tool} found these earlier turns for the question]", *render_turns(docs),
                          f"[end of {self.tool} results]"])
        return Recall(text, shown, [])


class _TurnSearchRun(DesignRun):
    def configure(self) -> None:
        self.turns = TurnMemory(self.session, self.design.retrieval, self.shared)

    def prepare(self, questions: Sequence[str]) -> None:
        self.turns.index.prepare(questions)

    def appended(self, doc: Doc) -> None:
        self.turns.add(doc)

    def session_ended(self, docs: list[Doc]) -> None:
        self.turns.flush()

    def recall(self, question: str) -> Recall:
        return self.turns.recall(question)


class TurnSearch(MemoryDesign):
    """A search tool over every stored turn, its results put in the prompt at question time (the module docstring).

    Nothing is written, so there is no model-written variant; a policy pairs it with a compaction that keeps a
    pointer (a plain search tool) or a summary (compaction plus retrieval).
    """

    kind = "turn-search"
    run_class = _TurnSearchRun
