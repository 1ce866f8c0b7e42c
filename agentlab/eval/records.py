"""Datasets from your own tables: turns and questions as DataFrames, lists of dicts or record files.

:func:`load_records` builds the same :class:`~agentlab.eval.datasets.Dataset` the benchmark loaders build,
so strategies, metrics and the runner treat your data like LoCoMo. It is re-exported as
``agentlab.eval.load_records``.

Invariants (on top of those of :mod:`agentlab.eval.datasets`):

- row order is kept: sessions appear in the order of their first turn row, turns in row order;
- every value read from a file or frame is a plain Python value, and a missing cell is ``None``,
  never ``NaN``;
- an evidence id that names no turn of its conversation is an error, unless the caller asks for it
  to be dropped into ``metadata["dropped_evidence"]``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentlab.errors import DatasetError
from agentlab.eval.datasets import Conversation, Dataset, DialogueSession, DialogueTurn, Question, _read_json

__all__ = ["QUESTION_COLUMNS", "TURN_COLUMNS", "load_records"]

TURN_COLUMNS = ("conversation_id", "session_id", "speaker", "text")
QUESTION_COLUMNS = ("conversation_id", "question")


def load_records(
    turns: Any, questions: Any = None, *, name: str = "custom", unknown_evidence: str = "error"
) -> Dataset:
    """Build a dataset from your own tables.

    Turn rows need ``conversation_id``, ``session_id``, ``speaker`` and ``text``; ``turn_id`` and
    ``session_date`` are optional (a missing turn id becomes ``f"{session_id}_{n}"``, n 1-based in
    the session). Question rows need ``conversation_id`` and ``question``; ``question_id``,
    ``answer``, ``category`` and ``evidence`` (a list, or a string of ids separated by ``;``) are
    optional. Other columns go to the ``metadata`` of the turn or question. Row order is kept.
    Categories written as digit strings (as from CSV) become ints.

    Args:
        turns: a pandas DataFrame, a list of dicts, or a path to ``.jsonl``, ``.json`` (a list of
            objects) or ``.csv``.
        questions: the same kinds of input for the questions, or ``None`` for no questions.
        name: the dataset name.
        unknown_evidence: ``"error"`` (default) raises on an evidence id that is not a turn of the
            question's conversation; ``"drop"`` drops it into ``metadata["dropped_evidence"]``.

    Raises:
        DatasetError: a missing file or column, a duplicated turn id, a question about an unknown
            conversation, or an unknown evidence id with ``unknown_evidence="error"``.
    """
    if unknown_evidence not in ("error", "drop"):
        raise ValueError(f"unknown_evidence must be 'error' or 'drop', not {unknown_evidence!r}.")
    conversations: dict[str, Conversation] = {}
    sessions: dict[tuple[str, str], DialogueSession] = {}
    seen: dict[str, set[str]] = {}
    for n, row in enumerate(_rows(turns, "turns")):
        _check_columns(row, TURN_COLUMNS, f"turn row #{n}")
        cid, sid = str(row["conversation_id"]), str(row["session_id"])
        conv = conversations.setdefault(cid, Conversation(cid, [], [], []))
        session = sessions.get((cid, sid))
        if session is None:
            session = sessions[(cid, sid)] = DialogueSession(sid, _text_or_none(row.get("session_date")), [])
            conv.sessions.append(session)
        index = len(session.turns)
        tid = _text_or_none(row.get("turn_id")) or f"{sid}_{index + 1}"
        if tid in seen.setdefault(cid, set()):
            raise DatasetError(f"Turn id {tid!r} appears twice in conversation {cid!r}; turn ids must be unique there.")
        seen[cid].add(tid)
        speaker = str(row["speaker"])
        if speaker not in conv.speakers:
            conv.speakers.append(speaker)
        extras = {k: v for k, v in row.items() if k not in (*TURN_COLUMNS, "turn_id", "session_date") and v is not None}
        session.turns.append(DialogueTurn(tid, speaker, str(row["text"]), sid, index, session.date, extras))
    for n, row in enumerate(_rows(questions, "questions") if questions is not None else []):
        _check_columns(row, QUESTION_COLUMNS, f"question row #{n}")
        cid = str(row["conversation_id"])
        if cid not in conversations:
            raise DatasetError(f"Question row #{n} is about conversation {cid!r}, which has no turns.")
        conv = conversations[cid]
        qid = _text_or_none(row.get("question_id")) or f"{cid}/q{len(conv.questions)}"
        evidence, dropped = [], []
        for tid in _evidence_list(row.get("evidence")):
            if tid not in seen[cid]:
                if unknown_evidence == "error":
                    raise DatasetError(f"Question {qid!r} cites evidence {tid!r}, which is not a turn id of "
                                       f"conversation {cid!r}. Fix the id, or pass unknown_evidence='drop'.")
                dropped.append(tid)
            elif tid not in evidence:
                evidence.append(tid)
        extras = {k: v for k, v in row.items()
                  if k not in ("conversation_id", "question_id", "question", "answer", "category", "evidence")
                  and v is not None}
        category = row.get("category")
        if isinstance(category, str) and category.strip().isdigit():
            category = int(category)
        conv.questions.append(Question(qid, str(row["question"]), _text_or_none(row.get("answer")), category,
                                       evidence, {**extras, "dropped_evidence": dropped}))
    return Dataset(name=name, conversations=list(conversations.values()))


def _rows(source: Any, what: str) -> list[dict[str, Any]]:
    # Everything becomes a list of plain dicts with Python scalars and None for missing values.
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise DatasetError(f"The {what} file {path} does not exist.")
        suffix = path.suffix.lower()
        if suffix in (".jsonl", ".ndjson"):
            records = []
            for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if line.strip():
                    try:
                        records.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise DatasetError(f"{path} line {line_no} is not valid JSON: {exc}.") from exc
        elif suffix == ".json":
            records = _read_json(path, what)
        elif suffix == ".csv":
            import pandas as pd

            # dtype=str keeps ids such as "007" intact; empty cells become None below.
            records = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""]).to_dict("records")
        else:
            raise DatasetError(f"Cannot read {what} from {path}: use .jsonl, .json or .csv, or pass a DataFrame.")
    elif hasattr(source, "to_dict") and hasattr(source, "columns"):
        records = source.to_dict("records")
    else:
        records = source
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise DatasetError(f"The {what} should be a DataFrame, a list of dicts or a file of records.")
    return [{str(k): _plain(v) for k, v in r.items()} for r in records]


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()  # numpy scalar or array
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if type(value).__name__ in ("NAType", "NaTType"):
        return None
    return value


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _check_columns(row: dict[str, Any], required: Iterable[str], where: str) -> None:
    missing = [c for c in required if row.get(c) is None]
    if missing:
        raise DatasetError(f"The {where} has no value for {missing[0]!r} (required: {', '.join(required)}).")


def _evidence_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                return [str(v) for v in json.loads(text)]
            except json.JSONDecodeError:
                pass
        return [piece.strip() for piece in text.split(";") if piece.strip()]
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    raise DatasetError(f"Evidence should be a list of turn ids or a ';'-separated string, not {value!r}.")
