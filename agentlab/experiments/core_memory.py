"""Letta / MemGPT's memory: core memory blocks always in the prompt, plus recall and archival memory searched on demand.

MemGPT splits an agent's memory in three (``letta/functions/function_sets/base.py``): *core memory*, labelled blocks
of the system prompt that the agent edits with ``core_memory_append`` / ``core_memory_replace`` (a ``human`` block
about the user and a ``persona`` block, 2,000 characters each in MemGPT's ``constants.py``); *recall memory*, the
whole message history, searched with ``conversation_search``; and *archival memory*, passages the agent stores with
``archival_memory_insert`` and finds by meaning with ``archival_memory_search``. Messages that overflow the context
are summarised recursively.

Here, for a conversation between several people:

* core memory is one writable block per speaker (``human-<name>``, at most 500 estimated tokens, about MemGPT's
  2,000 characters), written with the session's blocks (``set_block``, or ``set_context`` from Claude);
* recall memory is a :class:`~agentlab.experiments.turn_search.TurnMemory` over every stored turn
  (``conversation_search``), archival memory a search block of passages (``archival_memory_search``); at question
  time each is searched once with the question, for half of the retrieval's ``k`` each (recall gets the odd one),
  and both results go into the prompt;
* the policy's compaction is the recursive summary.

Who writes it:

* ``writer="rules"`` (offline): each turn's facts (:func:`~agentlab.experiments.fact_memory.extract_facts`) are inserted
  in archival memory; keyed facts about the speaker ("my job is ...", "I moved to ...") replace that attribute's
  line in the speaker's core block, a negated one ("I quit my job") removes it, and when a block is over its
  budget its oldest lines leave it (they stay in archival memory);
* ``writer="claude"``: after each dated session, one request shows Claude the core blocks and the session's turns
  (with their ids) and offers ``set_context`` (the session's own tool, for the core blocks) and
  ``archival_memory_insert(content, turns)``; every call is run, none is answered (no tool loop).

Invariants: core blocks change only at the end of a dated session (then the replay refreshes the frozen prompt);
archival passages name the turns they came from (rules: always; Claude: the ids it gives).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from agentlab.context import estimate_string_tokens

from .fact_memory import extract_facts
from .memory_design import DesignRun, MemoryDesign, Recall, ask_claude, session_lines
from .retrieval import Doc, make_index
from .turn_search import TurnMemory

__all__ = ["ARCHIVAL_TOOL", "CORE_INSTRUCTIONS", "CORE_TOKENS", "CoreArchival"]

CORE_TOKENS = 500
"""Budget of each core block in estimated tokens (about MemGPT's 2,000 characters)."""

CORE_INSTRUCTIONS = (
    "You manage the memory of an assistant that follows a long conversation between people. Your core memory "
    "blocks (below) are always in view: keep in them what matters most about each person (who they are, family, "
    "work, home, plans, what they care about), replacing what is out of date, within each block's budget. Store "
    "everything else worth finding later (events with their dates, details, opinions) in archival memory with "
    "archival_memory_insert, one self-contained passage per call, with the ids of the turns it comes from. Below "
    "is the latest session; each turn starts with its id. Call set_context once per core block you change, with "
    "the block's complete new text."
)

ARCHIVAL_TOOL = {
    "name": "archival_memory_insert",
    "description": "Store a self-contained passage in archival memory, searchable later by meaning and words.",
    "input_schema": {
        "type": "object",
        "properties": {
            "content": {"type": "string", "description": "The passage; name the people and give dates."},
            "turns": {"type": "array", "items": {"type": "string"},
                      "description": "Ids of the turns it comes from, e.g. D3:7."},
        },
        "required": ["content"],
    },
}


def _label(speaker: str) -> str:
    return "human-" + (re.sub(r"[^a-z0-9]+", "-", speaker.lower()).strip("-") or "someone")


class _CoreArchivalRun(DesignRun):
    design: CoreArchival

    def configure(self) -> None:
        self.labels = {s: _label(s) for s in self.speakers}
        for speaker, label in self.labels.items():
            self.session.with_context(label, description=f"Core memory: what matters most about {speaker}",
                                      max_tokens=CORE_TOKENS)
        for label in self.labels.values():
            self.session.set_block(label, "")  # a block kept in an agent file from an earlier run starts empty
        retrieval = self.design.retrieval
        self.recall_k = retrieval.k - retrieval.k // 2
        self.turns = TurnMemory(self.session, retrieval, self.shared, label="recall", tool="conversation_search")
        self.archival = make_index(retrieval, self.session, label="archival", shared=self.shared, turns=False,
                                   description="Archival memory: passages stored about this conversation; "
                                               "searched with the question when one is asked.")
        self.archival.reset()
        self.lines: dict[str, dict[str, str]] = {s: {} for s in self.labels}  # speaker -> attribute -> sentence
        self.pending: list[Doc] = []
        self.count = 0
        self.client: Any = None
        if self.design.writer == "claude":
            if self.claude is None:  # pragma: no cover - the replay's client factory raised already
                from agentlab.errors import ExperimentError

                raise ExperimentError("The core-archival design writes with Claude; set ANTHROPIC_API_KEY.")
            self.client = self.claude()

    def prepare(self, questions: Sequence[str]) -> None:
        self.turns.index.prepare(questions)
        self.archival.prepare(questions)

    def appended(self, doc: Doc) -> None:
        self.turns.add(doc)
        if self.client is not None:
            return
        for fact in extract_facts(doc):
            self.pending.append(Doc(f"{doc.id}#a{self.count}", fact.text, fact.subject, fact.date, doc.session_id,
                                    fact.sources))
            self.count += 1
            lines = self.lines.setdefault(doc.speaker or "", {})
            if fact.attribute:
                lines.pop(fact.attribute, None)  # replaced lines move to the end: the oldest leave first
                if fact.holds:
                    lines[fact.attribute] = fact.text

    def session_ended(self, docs: list[Doc]) -> None:
        self.turns.flush()
        if self.client is not None:
            self._claude(docs)
        else:
            self._write_core()
        if self.pending:
            self.archival.add(self.pending)
            self.pending = []

    def _write_core(self) -> None:
        for speaker, label in self.labels.items():
            lines = self.lines.get(speaker, {})
            text = "\n".join(f"- {a}: {s}" for a, s in lines.items())
            while lines and estimate_string_tokens(text) > CORE_TOKENS:
                lines.pop(next(iter(lines)))  # the oldest line leaves core memory; archival memory keeps it
                text = "\n".join(f"- {a}: {s}" for a, s in lines.items())
            block = self.session.get_context_block(label)
            if block is None or block.content != text:
                self.session.set_block(label, text)

    def _claude(self, docs: list[Doc]) -> None:
        ids = {d.id.rsplit("/", 1)[-1]: d.id for d in docs}
        response = ask_claude(self.client, CORE_INSTRUCTIONS + "\n\n" + self.session.system_prompt,
                              "\n".join(session_lines(docs)), tools=[*self.session.tools(), ARCHIVAL_TOOL])
        for block in response.get("content") or ():
            if block.get("type") != "tool_use":
                continue
            data = block.get("input") or {}
            if block.get("name") == "set_context" and data.get("label") in self.labels.values():
                self.session.run_tool("set_context", data)
            elif block.get("name") == "archival_memory_insert" and str(data.get("content") or "").strip():
                turns = tuple(dict.fromkeys(ids[t] for t in data.get("turns") or () if isinstance(t, str) and t in ids))
                self.pending.append(Doc(f"{docs[0].id}#a{self.count}", str(data["content"]), None, docs[-1].date,
                                        docs[-1].session_id, turns))
                self.count += 1

    def recall(self, question: str) -> Recall:
        found = self.turns.recall(question, self.recall_k)
        keys = self.archival.rank(question, self.design.retrieval.k - self.recall_k)
        items = [self.archival.docs[k] for k in keys]
        archival = ["[archival_memory_search found these passages for the question]",
                    *(f"- {d.key_text}" for d in items), "[end of archival_memory_search results]"] if items else \
            ["[archival_memory_search: nothing found for this question]"]
        return Recall("\n".join([found.text, *archival]), found.turns, items)


class CoreArchival(MemoryDesign):
    """Core blocks per person, recall search over the turns and archival passages (see the module docstring)."""

    kind = "core-archival"
    run_class = _CoreArchivalRun
