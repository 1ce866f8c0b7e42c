"""A memory design: what a policy keeps beyond the session's history, and what it puts in the prompt per question.

A :class:`~agentlab.experiments.policies.Policy` with a ``design`` is replayed like any policy (the session's own
appends, compaction and blocks), and the design rides along: :meth:`MemoryDesign.start` gives a :class:`DesignRun`
for one conversation, which

* :meth:`~DesignRun.configure` adds its blocks to the session before the system prompt is first frozen;
* :meth:`~DesignRun.prepare` gets the texts of the questions to come (only to embed them in one batch);
* :meth:`~DesignRun.appended` sees every stored turn (as a :class:`~agentlab.experiments.retrieval.Doc`);
* :meth:`~DesignRun.session_ended` runs after the last turn of each dated session of the dataset (where memory
  writers work, as mem0's ``add`` and Letta's memory edits would after an exchange), before the replay refreshes the
  frozen prompt;
* :meth:`~DesignRun.recall` answers a question with a :class:`Recall`: the text the design puts in the prompt for
  it (what its retrieval found, as a tool result or injected context), with the stored turns it shows verbatim and
  the written items (facts, passages) it shows.

Where an evidence turn is, for a design (:func:`recalled_rank`): shown verbatim in the recall (its message id), or
in a written item *derived* from it: the item names the turn among its sources and at least half of the item's
content words occur in the turn (a fact extracted from the turn passes; a fact that only cites it, or cites it
for words said elsewhere, does not). The match is named ``derived>=0.5`` in the results.

Invariants: a design changes the session only through its public API (blocks, search entries, tools); a recall
never reads evidence or questions' answers; the prompt tokens of a recall are
:func:`agentlab.context.estimate_string_tokens` of its text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentlab.context import estimate_string_tokens

from .memory import transcript_lines
from .retrieval import Doc, Retrieval, Shared

__all__ = [
    "DERIVED_MATCH",
    "DesignRun",
    "MemoryDesign",
    "PointerSummarizer",
    "Recall",
    "ask_claude",
    "doc_of",
    "recalled_rank",
    "render_turns",
    "reply_text",
    "session_lines",
]

DERIVED_MATCH = "derived>=0.5"


@dataclass
class Recall:
    """What a design puts in the prompt for one question (beyond the session's system prompt and history).

    Attributes:
        text: The text as the model reads it ("" when nothing).
        turns: Stored turns shown verbatim: message id -> rank (1 = first found).
        items: Written items shown (facts, passages), best first, with their sources.
    """

    text: str = ""
    turns: dict[str, int] = field(default_factory=dict)
    items: list[Doc] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        """Estimated tokens of :attr:`text`."""
        return estimate_string_tokens(self.text) if self.text else 0


def doc_of(message: dict[str, Any]) -> Doc:
    """A stored turn (a message as :func:`agentlab.eval.importing.turn_message` writes it) as a document."""
    meta = message.get("metadata") or {}
    text = "\n".join(str(p.get("text") or "") for p in message.get("parts") or () if p.get("type") == "text")
    extra = {"blip_caption": meta["blip_caption"]} if meta.get("blip_caption") else {}
    return Doc(str(message["id"]), text, meta.get("speaker"), meta.get("date"), meta.get("session_id"),
               (str(message["id"]),), extra)


def render_turns(docs: Sequence[Doc]) -> list[str]:
    """Stored turns as transcript lines, in the order given, with a ``(date)`` line whenever the date changes."""
    return transcript_lines(docs)


def session_lines(docs: Sequence[Doc]) -> list[str]:
    """A dated session's turns as a model reads them when it writes memory: each with its id in brackets
    (``[D1:3] Caroline: ...``, the last part of the message id) under a ``(date)`` line whenever the date changes."""
    lines: list[str] = []
    date = None
    for doc in docs:
        if doc.date and doc.date != date:
            date = doc.date
            lines.append(f"({date})")
        lines.append(f"[{doc.id.rsplit('/', 1)[-1]}] {doc.speaker or 'unknown'}: {doc.text}")
    return lines


def ask_claude(client: Any, system: str, text: str, *, tools: Sequence[dict[str, Any]] = (), max_tokens: int = 2048,
               model: str | None = None) -> dict[str, Any]:
    """One Messages API request made by a design's writer; returns the response body.

    ``client`` is the replay's client (a caching client whose ``messages.create`` returns the body as a dict, and
    whose ``model`` is the settings' model), or an ``anthropic.Anthropic`` client with ``model`` given.

    Raises:
        ExperimentError: No model named, and the client names none.
    """
    from agentlab.errors import ExperimentError

    model = model or getattr(client, "model", None)
    if not model:
        raise ExperimentError("A design's writer needs a model: pass model=..., or replay with a key set.")
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "system": system,
                            "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}]}
    if tools:
        body["tools"] = list(tools)
    response = client.messages.create(**body)
    return response if isinstance(response, dict) else response.to_dict()


def reply_text(response: dict[str, Any]) -> str:
    """The text blocks of a response, joined by newlines."""
    return "\n".join(b.get("text", "") for b in response.get("content") or () if b.get("type") == "text")


_MATCHER: Any = None


def recalled_rank(recall: Recall, message_id: str, turn_text: str) -> int | None:
    """The rank (1-based) at which ``recall`` shows the evidence turn, or None (see the module docstring)."""
    global _MATCHER
    if message_id in recall.turns:
        return recall.turns[message_id]
    if _MATCHER is None:
        from .matching import FuzzyMatch

        _MATCHER = FuzzyMatch(0.5)
    turn_words: set[str] | None = None
    for rank, item in enumerate(recall.items, 1):
        if message_id not in item.sources:
            continue
        if turn_words is None:
            turn_words = _MATCHER.content_words(turn_text)
        words = _MATCHER.content_words(item.text)
        if words and 2 * len(words & turn_words) >= len(words):
            return rank
    return None


class PointerSummarizer:
    """A compaction "summary" that keeps nothing but a pointer: the turns it replaces stay reachable only through
    the design's own memory. For designs that keep a working memory of recent turns and no summary (mem0, a plain
    search tool); the reference compactor needs a non-empty summary, so the pointer is one line."""

    __name__ = "pointer"
    text = "[Older turns are not shown here; what memory holds about them is added below when it is relevant.]"

    def __call__(self, prompt: str) -> str:
        return self.text


class DesignRun:
    """One design on one conversation (see the module docstring); subclasses override the hooks they need."""

    def __init__(self, design: MemoryDesign, session: Any, *, speakers: Sequence[str] = (),
                 claude: Callable[[], Any] | None = None, shared: Shared | None = None) -> None:
        self.design = design
        self.session = session
        self.speakers = list(speakers)
        self.claude = claude
        self.shared = shared if shared is not None else Shared()

    def configure(self) -> None:
        """Add blocks to the session (before its prompt is frozen)."""

    def prepare(self, questions: Sequence[str]) -> None:
        """The questions that will be asked in this conversation, before any turn is stored (their texts only, so
        that embeddings are computed in one batch; a recall still sees one question at a time)."""

    def appended(self, doc: Doc) -> None:
        """A turn was stored."""

    def session_ended(self, docs: list[Doc]) -> None:
        """The last turn of a dated session was stored (``docs``: that session's turns)."""

    def recall(self, question: str) -> Recall:
        """What goes into the prompt for ``question``."""
        return Recall()


class MemoryDesign:
    """A memory architecture, replayed as part of a policy (see the module docstring).

    Attributes:
        kind: Short name of the architecture (``"turn-search"``, ``"facts"`` ...).
        writer: Who writes its memory: ``"rules"`` (offline, deterministic) or ``"claude"``.
        retrieval: How it ranks at question time.
    """

    kind = "design"
    run_class: type[DesignRun] = DesignRun

    def __init__(self, retrieval: Retrieval | None = None, *, writer: str = "rules") -> None:
        from agentlab.errors import InvalidArgumentError

        if writer not in ("rules", "claude"):
            raise InvalidArgumentError(f"A design's writer is 'rules' or 'claude', not {writer!r}.")
        self.retrieval = retrieval or Retrieval()
        self.writer = writer

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.retrieval.describe()!r}, writer={self.writer!r})"

    @property
    def needs_model(self) -> bool:
        """Whether replaying it needs a Claude client."""
        return self.writer == "claude"

    def describe(self) -> dict[str, Any]:
        """Settings for :meth:`Policy.describe`."""
        return {"design": self.kind, "writer": self.writer, "retrieval": self.retrieval.describe()}

    def start(self, session: Any, *, speakers: Sequence[str] = (), claude: Callable[[], Any] | None = None,
              shared: Shared | None = None) -> DesignRun:
        """A run of this design on ``session`` (one conversation between ``speakers``)."""
        return self.run_class(self, session, speakers=speakers, claude=claude, shared=shared)
