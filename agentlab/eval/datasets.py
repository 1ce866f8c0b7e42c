"""Conversation datasets for retrieval evaluation, all in one in-memory form.

A :class:`Dataset` holds :class:`Conversation` objects. A conversation has dated :class:`DialogueSession`
objects made of :class:`DialogueTurn` objects, and :class:`Question` objects whose ``evidence`` lists the
ids of the turns that answer them. The loaders read LoCoMo, LongMemEval, a user's own tables and
the small bundled dataset into this form, so retrieval strategies and metrics see one shape.

Invariants every loader guarantees:

- a turn id is unique within its conversation (not across conversations: LoCoMo reuses ``D1:1``);
- sessions and turns keep their source order, which is chronological;
- every id in ``Question.evidence`` names a turn of the same conversation, and appears once;
  evidence ids that could not be matched are listed in ``question.metadata["dropped_evidence"]``;
- ``Question.answer`` is a ``str``, or ``None`` when the question has no answer to give
  (LoCoMo's adversarial category 5).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentlab.errors import DatasetError

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "Conversation",
    "Dataset",
    "DialogueSession",
    "DialogueTurn",
    "Question",
    "load_bundled",
    "load_locomo",
    "load_longmemeval",
    "normalize_locomo_evidence",
    "parse_date",
]

BUNDLED_PATH = Path(__file__).parent.parent / "data" / "agentlab-mini.json"

# LoCoMo category ids as they appear in the data. The paper's prose numbers them
# differently; these are the ids the file uses.
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


@dataclass
class DialogueTurn:
    """One utterance. ``index`` is its 0-based position in its session; ``date`` is the session's."""

    id: str
    speaker: str
    text: str
    session_id: str
    index: int
    date: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class DialogueSession:
    """A dated run of turns. ``date`` is kept as the source wrote it; see :func:`parse_date`."""

    id: str
    date: str | None
    turns: list[DialogueTurn] = field(default_factory=list)


@dataclass
class Question:
    """A question with its gold answer and the ids of the turns that support it."""

    id: str
    question: str
    answer: str | None
    category: int | str | None
    evidence: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Conversation:
    """Sessions between the same speakers, and the questions asked about them.

    ``metadata`` keeps source extras that are not turns, such as LoCoMo's observations and session
    summaries, for retrieval strategies that index those instead of raw turns.
    """

    id: str
    speakers: list[str]
    sessions: list[DialogueSession]
    questions: list[Question]
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def turns(self) -> list[DialogueTurn]:
        """All turns in conversation order."""
        return [turn for session in self.sessions for turn in session.turns]

    def turn(self, turn_id: str) -> DialogueTurn:
        """Return the turn with this id, or raise ``KeyError``."""
        for turn in self.turns:
            if turn.id == turn_id:
                return turn
        raise KeyError(turn_id)


@dataclass
class Dataset:
    """A named list of conversations, with counting and DataFrame helpers.

    ``category_names`` maps category ids to names where the source defines them (LoCoMo's 1-5: multi-hop,
    temporal, open-domain, single-hop, adversarial); tables print both.
    """

    name: str
    conversations: list[Conversation]
    category_names: dict[Any, str] = field(default_factory=dict)

    def category_label(self, category: Any) -> str:
        """``"1 multi-hop"`` where the category has a name, else the category as written."""
        name = self.category_names.get(category)
        return f"{category} {name}" if name else str(category)

    def conversation(self, conversation_id: str) -> Conversation:
        """Return the conversation with this id, or raise ``KeyError``."""
        for conversation in self.conversations:
            if conversation.id == conversation_id:
                return conversation
        raise KeyError(conversation_id)

    def iter_turns(self) -> Iterator[tuple[Conversation, DialogueTurn]]:
        """Yield ``(conversation, turn)`` for every turn, in order."""
        for conversation in self.conversations:
            for turn in conversation.turns:
                yield conversation, turn

    def iter_questions(
        self, categories: Iterable[int | str] | None = None, *, with_evidence: bool = False
    ) -> Iterator[tuple[Conversation, Question]]:
        """Yield ``(conversation, question)`` pairs.

        Args:
            categories: keep only these categories (all when ``None``).
            with_evidence: skip questions whose evidence is empty. With ``categories=(1, 2, 3, 4)``
                this gives LoCoMo's 1,536 scoreable questions.
        """
        wanted = None if categories is None else set(categories)
        for conversation in self.conversations:
            for question in conversation.questions:
                if wanted is not None and question.category not in wanted:
                    continue
                if with_evidence and not question.evidence:
                    continue
                yield conversation, question

    def category_counts(self) -> dict[int | str | None, int]:
        """Number of questions per category, sorted by category."""
        counts = Counter(q.category for _, q in self.iter_questions())
        return {c: counts[c] for c in sorted(counts, key=_category_sort_key)}

    def questions_df(self) -> pd.DataFrame:
        """One row per question; metadata keys become extra columns after the fixed ones."""
        return _frame(
            ({"conversation_id": c.id, "question_id": q.id, "category": q.category, "question": q.question,
             "answer": q.answer, "evidence": list(q.evidence), "n_evidence": len(q.evidence)}, q.metadata)
            for c, q in self.iter_questions()
        )

    def turns_df(self) -> pd.DataFrame:
        """One row per turn; metadata keys (such as ``blip_caption``) become extra columns."""
        return _frame(
            ({"conversation_id": c.id, "session_id": t.session_id, "turn_id": t.id, "index": t.index,
             "date": t.date, "speaker": t.speaker, "text": t.text}, t.metadata)
            for c, t in self.iter_turns()
        )


def _frame(rows: Iterable[tuple[dict[str, Any], dict[str, Any]]]) -> pd.DataFrame:
    # Columns come out in first-seen order: the fixed ones, then metadata keys that do not clash.
    import pandas as pd

    return pd.DataFrame([fixed | {k: v for k, v in meta.items() if k not in fixed} for fixed, meta in rows])


def _category_sort_key(category: Any) -> tuple[int, Any]:
    # Numbers first, then strings, then None, so mixed categories still sort.
    if isinstance(category, (int, float)):
        return (0, category)
    return (1, str(category)) if category is not None else (2, "")


def parse_date(text: str | None) -> datetime | None:
    """Parse a LoCoMo (``"1:56 pm on 8 May, 2023"``) or LongMemEval (``"2023/05/30 (Tue) 23:40"``) date.

    Returns ``None`` for ``None`` or a string in neither format (user data may use anything).
    """
    if not text:
        return None
    for fmt in ("%I:%M %p on %d %B, %Y", "%Y/%m/%d (%a) %H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"):
        try:
            return datetime.strptime(text.strip(), fmt)
        except ValueError:
            continue
    return None


def _read_json(path: str | Path, what: str) -> Any:
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{what} file not found: {path}. Check the path (it must be a JSON file).")
    try:
        with path.open(encoding="utf-8") as handle:
            return json.load(handle)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{what} file {path} is not valid JSON: {exc}.") from exc


def _require(item: Any, keys: Iterable[str], where: str) -> None:
    if not isinstance(item, dict):
        raise DatasetError(f"{where} should be a JSON object, got {type(item).__name__}.")
    missing = [k for k in keys if k not in item]
    if missing:
        raise DatasetError(f"{where} has no {missing[0]!r} key (keys present: {sorted(item)[:12]}).")


# --- LoCoMo ----------------------------------------------------------------------------------------

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_EVIDENCE_SPLIT = re.compile(r"[;,\s]+")
_DOUBLE_COLON = re.compile(r"^D:(\d+):")
_DIA_ID = re.compile(r"D(\d+):(\d+)")


def normalize_locomo_evidence(raw: Iterable[Any], known: Iterable[str]) -> tuple[list[str], list[str]]:
    """Clean a LoCoMo evidence list and split it into kept and dropped ids.

    Each string is split on ``[;,\\s]+``; parentheses are stripped; ``D:11:26`` becomes ``D11:26``;
    ``D<s>:<t>`` is re-written from its integers (``D30:05`` becomes ``D30:5``); ids not in
    ``known`` are dropped; the rest are deduplicated in order.

    Args:
        raw: the question's ``evidence`` list as stored.
        known: the dia_ids of the question's own conversation.

    Returns:
        ``(kept, dropped)``; ``dropped`` holds the unmatched pieces as written (e.g. ``"D"``).
    """
    known_ids = set(known)
    kept: list[str] = []
    dropped: list[str] = []
    for item in raw:
        for piece in _EVIDENCE_SPLIT.split(str(item)):
            piece = piece.replace("(", "").replace(")", "")
            if not piece:
                continue
            match = _DIA_ID.fullmatch(_DOUBLE_COLON.sub(r"D\1:", piece))
            candidate = f"D{int(match[1])}:{int(match[2])}" if match else piece
            if candidate not in known_ids:
                dropped.append(piece)
            elif candidate not in kept:
                kept.append(candidate)
    return kept, dropped


def load_locomo(path: str | Path, *, name: str = "locomo") -> Dataset:
    """Load a LoCoMo file (``locomo10.json``, or anything in its format such as the bundled set).

    Sessions come from the ``session_<n>`` keys (conv-26 has date keys for sessions that do not
    exist). Evidence is cleaned by :func:`normalize_locomo_evidence`; the original list is kept in
    ``metadata["raw_evidence"]`` and unmatched ids in ``metadata["dropped_evidence"]``. Category-5
    (adversarial) questions get ``answer=None`` with ``metadata["adversarial_answer"]``; the two that
    also carry an ``answer`` keep it as ``metadata["locomo_answer"]``. Integer answers become
    strings. Question ids are ``"<sample_id>/q<i>"``, ``i`` being the 0-based position in ``qa``.

    Args:
        path: the JSON file.
        name: the dataset name.

    Raises:
        DatasetError: the file is missing, not JSON, or not in LoCoMo's shape (the message names
            the sample and key).
    """
    data = _read_json(path, "LoCoMo")
    if not isinstance(data, list):
        raise DatasetError(f"LoCoMo file {path} should hold a JSON list of samples, got {type(data).__name__}.")
    conversations = [_locomo_conversation(sample, i) for i, sample in enumerate(data)]
    return Dataset(name=name, conversations=conversations, category_names=dict(LOCOMO_CATEGORIES))


def _locomo_conversation(sample: Any, position: int) -> Conversation:
    _require(sample, ("sample_id", "conversation", "qa"), f"LoCoMo sample #{position}")
    cid = str(sample["sample_id"])
    conv = sample["conversation"]
    _require(conv, ("speaker_a", "speaker_b"), f"LoCoMo sample {cid}: 'conversation'")
    numbers = sorted(int(m[1]) for key in conv if (m := _SESSION_KEY.match(key)))
    sessions = []
    for n in numbers:
        sid, date = f"session_{n}", conv.get(f"session_{n}_date_time")
        turns = []
        for index, raw in enumerate(conv[sid]):
            _require(raw, ("speaker", "dia_id", "text"), f"LoCoMo sample {cid}: {sid} turn #{index}")
            extras = {k: v for k, v in raw.items() if k not in ("speaker", "dia_id", "text")}
            turns.append(DialogueTurn(str(raw["dia_id"]), str(raw["speaker"]), str(raw["text"]), sid, index, date,
                                      extras))
        sessions.append(DialogueSession(sid, date, turns))
    known = [t.id for s in sessions for t in s.turns]
    if len(set(known)) != len(known):
        duplicate = next(k for k, c in Counter(known).items() if c > 1)
        raise DatasetError(f"LoCoMo sample {cid} has the dia_id {duplicate!r} on more than one turn.")

    questions = []
    for i, raw in enumerate(sample["qa"]):
        _require(raw, ("question", "category"), f"LoCoMo sample {cid}: qa #{i}")
        evidence, dropped = normalize_locomo_evidence(raw.get("evidence") or [], known)
        meta = {k: v for k, v in raw.items() if k not in ("question", "answer", "category", "evidence")}
        meta.update(qa_index=i, raw_evidence=list(raw.get("evidence") or []), dropped_evidence=dropped)
        answer = raw.get("answer")
        if raw["category"] == 5:
            if answer is not None:
                meta["locomo_answer"] = str(answer)
            answer = None
        questions.append(Question(f"{cid}/q{i}", str(raw["question"]), None if answer is None else str(answer),
                                  raw["category"], evidence, meta))
    extras = {k: sample[k] for k in ("observation", "session_summary", "event_summary") if k in sample}
    return Conversation(cid, [str(conv["speaker_a"]), str(conv["speaker_b"])], sessions, questions, extras)


def load_bundled() -> Dataset:
    """Load ``agentlab-mini``: 3 invented conversations, 14 sessions, 245 turns, 40 questions.

    It ships with the package, in LoCoMo's format, so notebooks and tests run offline. Each
    question's ``metadata["style"]`` says whether its wording overlaps the evidence (``"lexical"``)
    or paraphrases it (``"paraphrase"``). See ``datasets/README.md``.
    """
    return load_locomo(BUNDLED_PATH, name="agentlab-mini")


# --- LongMemEval -----------------------------------------------------------------------------------


def load_longmemeval(path: str | Path, *, name: str = "longmemeval") -> Dataset:
    """Load a LongMemEval file (oracle, S or M).

    Each question has its own haystack, so each becomes one :class:`Conversation` (id = the
    question id) holding one question. Turn ids are ``f"{session_id}_{turn_index+1}"``, counting
    assistant turns too. Evidence is the user turns with ``has_answer`` true (a missing key counts
    as false), as in the official turn-level protocol. Question metadata keeps ``question_type``,
    ``question_date``, ``answer_session_ids``, ``evidence_session_ids`` (the answer sessions that
    have a user-side ``has_answer`` turn: the official session-level gold) and ``abstention``
    (the id ends with ``_abs``). The category is the ``question_type``.

    Raises:
        DatasetError: missing file, bad JSON, a missing key, parallel lists of different lengths,
            or a session id repeated within one haystack.
    """
    data = _read_json(path, "LongMemEval")
    if not isinstance(data, list):
        raise DatasetError(f"LongMemEval file {path} should hold a JSON list of questions, got {type(data).__name__}.")
    return Dataset(name=name, conversations=[_longmemeval_instance(item, i) for i, item in enumerate(data)])


def _longmemeval_instance(item: Any, position: int) -> Conversation:
    keys = ("question_id", "question", "answer", "haystack_session_ids", "haystack_sessions")
    _require(item, keys, f"LongMemEval item #{position}")
    qid = str(item["question_id"])
    session_ids = [str(s) for s in item["haystack_session_ids"]]
    raw_sessions = item["haystack_sessions"]
    dates = item.get("haystack_dates") or [None] * len(session_ids)
    if not len(session_ids) == len(raw_sessions) == len(dates):
        raise DatasetError(
            f"LongMemEval question {qid}: haystack_session_ids ({len(session_ids)}), haystack_sessions "
            f"({len(raw_sessions)}) and haystack_dates ({len(dates)}) should have the same length."
        )
    if len(set(session_ids)) != len(session_ids):
        raise DatasetError(f"LongMemEval question {qid}: a session id appears twice in haystack_session_ids.")
    sessions, evidence, answered = [], [], set()
    for sid, date, raw_turns in zip(session_ids, dates, raw_sessions):
        turns = []
        for j, raw in enumerate(raw_turns):
            _require(raw, ("role", "content"), f"LongMemEval question {qid}: session {sid} turn #{j}")
            has_answer = raw.get("has_answer") is True
            extras = {k: v for k, v in raw.items() if k not in ("role", "content", "has_answer")}
            turn = DialogueTurn(f"{sid}_{j + 1}", str(raw["role"]), str(raw["content"]), sid, j, date,
                        {"has_answer": has_answer, **extras})
            if has_answer and turn.speaker == "user":
                evidence.append(turn.id)
                answered.add(sid)
            turns.append(turn)
        sessions.append(DialogueSession(sid, date, turns))
    answer_sessions = [str(s) for s in item.get("answer_session_ids") or []]
    meta = {
        "question_type": item.get("question_type"),
        "question_date": item.get("question_date"),
        "answer_session_ids": answer_sessions,
        "evidence_session_ids": [s for s in answer_sessions if s in answered],
        "abstention": qid.endswith("_abs"),
        "dropped_evidence": [],
    }
    answer = item["answer"]
    question = Question(qid, str(item["question"]), None if answer is None else str(answer),
                        item.get("question_type"), evidence, meta)
    return Conversation(qid, ["user", "assistant"], sessions, [question])
