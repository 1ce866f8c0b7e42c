"""What a replay returns, and the analyses of it: prompt size against evidence kept, by category and distance.

:class:`ReplayResults` holds four tidy frames:

* ``per_question``: one row per policy x question: ``policy``, ``conversation_id``, ``question_id``,
  ``category``, ``asked_after`` (the turn after which it was asked), ``prompt_tokens`` (the session estimate at
  that point: system prompt with its blocks, plus the visible history), ``history_messages``,
  ``evidence_total`` (evidence turns said by then), ``evidence_verbatim``, ``evidence_in_summary`` (hidden but
  carried by a summary, by the method named in ``summary_match``), ``evidence_searchable`` (ranked within
  ``search_k`` by ``session.search`` in ``search_mode``), ``evidence_kept`` (verbatim + in summary),
  ``evidence_reachable`` (kept, in a block, retrieved or searchable), ``evidence_unseen`` (said after the question),
  ``compactions`` (stored by then) and ``compaction_errors``; then, for policies with blocks or a memory design,
  ``evidence_in_block`` (carried by the blocks of the system prompt, by the method in ``block_match``),
  ``evidence_retrieved`` (put in the prompt by the design's own retrieval: the turn itself, or a written item
  derived from it by the method in ``item_match``), ``evidence_in_prompt`` (verbatim, in a summary, in a block or
  retrieved: what the model reads without calling a tool) and ``retrieval_tokens`` (what the design added to the
  prompt for this question, included in ``prompt_tokens``). For a design, ``evidence_searchable`` counts what its own
  retrieval found (``search_mode`` and ``search_k`` are its method and ``k``);
* ``evidence``: one row per policy x question x evidence turn, with its ``status`` (``verbatim``, ``summary``,
  ``block``, ``retrieved``, ``lost``), ``search_rank`` (for a design: the rank of what showed it) and its distance
  from the question (``distance_turns``, ``distance_tokens``);
* ``compactions``: one row per compaction run of each (policy, conversation), with the session's own figures
  for it (``tokens_before``, ``tokens_after``, ``messages_covered``; ``summary_tokens`` and
  ``compression_ratio`` from ``session.compactions_df()``) and how many evidence turns it hid, kept in its
  summary, lost, and dropped from an earlier summary;
* ``drops``: one row per (compaction, evidence turn) whose state it changed: which facts each summary lost.

Shares are per question (evidence kept / evidence total, questions without evidence left out) and averaged
over questions, with percentile bootstrap intervals over questions (:func:`agentlab.eval.metrics.summarize`).
``kept`` is verbatim or in a summary; ``in_prompt`` adds blocks and what a design retrieved: what the model can read
without a tool call; ``reachable`` adds what the search tool finds. For a design, ``reachable`` equals ``in_prompt``
(its retrieval's results are in the prompt and in its ``prompt_tokens``); for the compaction ladder, ``reachable``
counts search hits the model would still have to ask for, whose tokens ``prompt_tokens`` leaves out.

Invariant: every analysis is computed from these frames; nothing here reads a session again.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from .policies import Policy

__all__ = ["SHARES", "ReplayResults"]

SHARES = {"verbatim": "evidence_verbatim", "in_summary": "evidence_in_summary",
          "searchable": "evidence_searchable", "kept": "evidence_kept", "reachable": "evidence_reachable",
          "in_block": "evidence_in_block", "retrieved": "evidence_retrieved", "in_prompt": "evidence_in_prompt"}
"""Share name -> the count column it divides by ``evidence_total``."""

_QUESTION_COLUMNS = [
    "policy", "conversation_id", "question_id", "category", "asked_after", "prompt_tokens", "history_messages",
    "evidence_total", "evidence_verbatim", "evidence_in_summary", "summary_match", "evidence_searchable",
    "search_mode", "search_k", "evidence_kept", "evidence_reachable", "evidence_unseen", "compactions",
    "compaction_errors", "evidence_in_block", "evidence_retrieved", "evidence_in_prompt", "retrieval_tokens",
    "block_match", "item_match",
]
_EVIDENCE_COLUMNS = ["policy", "conversation_id", "question_id", "category", "turn_id", "dataset_session",
                     "distance_turns", "distance_tokens", "status", "search_rank", "searchable"]
_COMPACTION_COLUMNS = ["policy", "conversation_id", "compaction", "compaction_id", "appended_turns",
                       "tokens_before", "tokens_after", "messages_covered", "summary_tokens", "compression_ratio",
                       "history_messages", "evidence_hidden",
                       "evidence_kept_in_summary", "evidence_lost", "evidence_dropped_from_summary"]
_DROP_COLUMNS = ["policy", "conversation_id", "compaction", "compaction_id", "appended_turns", "turn_id",
                 "before", "after", "cited_by", "text"]


def _frame(rows: list[dict[str, Any]], columns: list[str]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(rows, columns=columns) if rows else pd.DataFrame(columns=columns)


@dataclass
class ReplayResults:
    """What :func:`~agentlab.experiments.replay` returns (see the module docstring for the frames).

    Attributes:
        per_question, evidence, compactions, drops: The frames.
        policies: The policies replayed, in order.
        seconds: Wall time per policy.
        dataset: The dataset's name.
        contexts: With ``keep_prompts=True``: ``(policy, conversation_id, asked_after) -> context`` (system
            prompt, visible messages, prompt tokens), which :func:`~agentlab.experiments.answer` sends.
        questions: ``(conversation_id, question_id) -> Question``.
        speakers: ``conversation_id -> speakers``.
    """

    per_question: pd.DataFrame
    evidence: pd.DataFrame
    compactions: pd.DataFrame
    drops: pd.DataFrame
    policies: list[Policy]
    seconds: dict[str, float] = field(default_factory=dict)
    dataset: str = ""
    contexts: dict[Any, Any] | None = None
    questions: dict[tuple[str, str], Any] = field(default_factory=dict)
    speakers: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def build(cls, dataset: Any, policies: list[Policy], rows: list[dict[str, Any]],
              evidence_rows: list[dict[str, Any]], compaction_rows: list[dict[str, Any]],
              drop_rows: list[dict[str, Any]], seconds: dict[str, float], contexts: dict[Any, Any] | None
              ) -> ReplayResults:
        """Assemble the frames (used by :func:`~agentlab.experiments.replay`)."""
        questions = {(c.id, q.id): q for c in dataset.conversations for q in c.questions}
        speakers = {c.id: list(c.speakers) for c in dataset.conversations}
        return cls(_frame(rows, _QUESTION_COLUMNS), _frame(evidence_rows, _EVIDENCE_COLUMNS),
                   _frame(compaction_rows, _COMPACTION_COLUMNS), _frame(drop_rows, _DROP_COLUMNS), list(policies),
                   seconds, getattr(dataset, "name", ""), contexts, questions, speakers)

    def __repr__(self) -> str:
        names = [p.name for p in self.policies]
        return (f"ReplayResults(dataset={self.dataset!r}, policies={names}, rows={len(self.per_question)}, "
                f"compactions={len(self.compactions)})")

    def only(self, conversations: Iterable[str]) -> ReplayResults:
        """The same results restricted to these conversations (e.g. those held out from a choice of settings).

        Raises:
            ValueError: None of the ids is a conversation of these results.
        """
        wanted = set(conversations)
        known = set(self.per_question["conversation_id"])
        if not wanted & known:
            raise ValueError(f"None of {sorted(wanted)} is a conversation of these results; they have "
                             f"{', '.join(sorted(known)[:5])}{' ...' if len(known) > 5 else ''}.")

        def keep(frame: pd.DataFrame) -> pd.DataFrame:
            return frame[frame["conversation_id"].isin(wanted)].reset_index(drop=True)

        contexts = None if self.contexts is None else {k: v for k, v in self.contexts.items() if k[1] in wanted}
        return replace(self, per_question=keep(self.per_question), evidence=keep(self.evidence),
                       compactions=keep(self.compactions), drops=keep(self.drops), contexts=contexts,
                       questions={k: v for k, v in self.questions.items() if k[0] in wanted},
                       speakers={k: v for k, v in self.speakers.items() if k in wanted})

    # -- settings ---------------------------------------------------------------------------------------------

    def settings(self) -> pd.DataFrame:
        """One row per policy: its settings (threshold, tail budget, summarizer, search ...)."""
        import pandas as pd

        return pd.DataFrame([p.describe() for p in self.policies])

    def _baseline(self) -> str | None:
        """The first policy that never compacts: prompt sizes are given relative to it."""
        return next((p.name for p in self.policies if p.compaction is None), None)

    # -- shares with intervals --------------------------------------------------------------------------------

    def shares(self) -> pd.DataFrame:
        """``per_question`` with one share column per entry of :data:`SHARES` (questions with evidence only)."""
        frame = self.per_question[self.per_question["evidence_total"] > 0].copy()
        for share, column in SHARES.items():
            frame[share] = frame[column] / frame["evidence_total"]
        return frame

    def summary(self, by: str | None = "category", *, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
        """Mean share kept per policy (and ``by`` group), with 95% bootstrap intervals over questions.

        Returns:
            ``policy``, ``by`` (with an ``"overall"`` row), ``metric`` (a share of :data:`SHARES`, or
            ``prompt_tokens``), ``n``, ``mean``, ``ci_low``, ``ci_high``.
        """
        import pandas as pd

        from agentlab.eval.metrics import summarize

        frame = self.shares()
        metrics = [*SHARES, "prompt_tokens"]
        parts = []
        for policy in self.policies:
            part = frame[frame["policy"] == policy.name]
            if len(part):
                data = part.assign(category=part["category"].astype(str)) if by == "category" else part
                summary = summarize(data, by=by, metrics=metrics, n_boot=n_boot, seed=seed)
                summary.insert(0, "policy", policy.name)
                parts.append(summary)
        label = by or "group"
        columns = ["policy", label, "metric", "n", "mean", "ci_low", "ci_high"]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)

    def table(self, by: str | None = "category") -> pd.DataFrame:
        """Means as a wide table: one row per (policy, group), prompt tokens (and relative to ``none``), shares."""
        summary = self.summary(by)
        label = by or "group"
        wide = summary.pivot_table(index=["policy", label], columns="metric", values="mean", sort=False)
        wide.insert(0, "n", summary.groupby(["policy", label], sort=False)["n"].first())
        baseline = self._baseline()
        if baseline is not None and baseline in wide.index.get_level_values(0):
            base = wide.xs(baseline, level=0)["prompt_tokens"]
            groups = wide.index.get_level_values(1)
            wide.insert(2, "tokens_vs_none", wide["prompt_tokens"].to_numpy() / base.reindex(groups).to_numpy())
        return wide[[c for c in ["n", "prompt_tokens", "tokens_vs_none", *SHARES] if c in wide.columns]]

    def frontier(self, kept: str = "kept", *, category: Any = None, n_boot: int = 1000, seed: int = 0
                 ) -> pd.DataFrame:
        """One row per policy: mean prompt tokens and mean share ``kept``, each with its 95% interval.

        Args:
            kept: Which share (a key of :data:`SHARES`: ``"kept"``, ``"verbatim"``, ``"reachable"`` ...).
            category: Only the questions of this category (all when None).

        Raises:
            ValueError: ``kept`` is not a share name, or no question has that category.
        """
        import pandas as pd

        if kept not in SHARES:
            raise ValueError(f"kept must be one of {list(SHARES)}, not {kept!r}.")
        if category is None:
            summary = self.summary(None, n_boot=n_boot, seed=seed)
        else:
            summary = self.summary("category", n_boot=n_boot, seed=seed)
            known = sorted(set(summary["category"]) - {"overall"})
            if str(category) not in known:
                raise ValueError(f"No question of category {category!r}; the categories are {', '.join(known)}.")
            summary = summary[summary["category"] == str(category)]
        rows = []
        for policy in self.policies:
            part = summary[summary["policy"] == policy.name].set_index("metric")
            if part.empty:
                continue
            tokens, share = part.loc["prompt_tokens"], part.loc[kept]
            rows.append({"policy": policy.name, "category": "overall" if category is None else str(category),
                         "n": int(share["n"]), "prompt_tokens": tokens["mean"],
                         "tokens_low": tokens["ci_low"], "tokens_high": tokens["ci_high"], "share": kept,
                         "kept": share["mean"], "kept_low": share["ci_low"], "kept_high": share["ci_high"]})
        return pd.DataFrame(rows)

    # -- where evidence is lost -------------------------------------------------------------------------------

    def survival_by_category(self) -> pd.DataFrame:
        """Share of evidence kept verbatim, in a summary, searchable, per policy and category (means)."""
        return self.table("category")[list(SHARES)]

    def survival_by_distance(self, bins: Sequence[int] = (0, 50, 100, 200, 400, 800), *,
                             unit: str = "turns") -> pd.DataFrame:
        """Evidence turns by how far before the question they were said, and what became of them.

        Args:
            bins: Left edges of the distance bins (the last bin is open-ended).
            unit: ``"turns"`` (turns said after the evidence turn, up to the question) or ``"tokens"``.

        Returns:
            One row per (policy, distance bin): ``n`` evidence turns and the shares ``verbatim``,
            ``in_summary``, ``in_block``, ``retrieved``, ``lost`` and ``searchable``.
        """
        import numpy as np
        import pandas as pd

        if unit not in ("turns", "tokens"):
            raise ValueError(f"unit must be 'turns' or 'tokens', not {unit!r}.")
        edges = sorted({int(b) for b in bins})
        if not edges or edges[0] > 0:
            edges = [0, *edges]
        frame = self.evidence.copy()
        distance = frame[f"distance_{unit}"].to_numpy(dtype=float)
        index = np.searchsorted(np.array(edges), distance, side="right") - 1
        labels = [f"{a}-{b - 1}" for a, b in itertools.pairwise(edges)] + [f"{edges[-1]}+"]
        frame["distance"] = pd.Categorical([labels[i] for i in index], categories=labels, ordered=True)
        frame["verbatim"] = frame["status"] == "verbatim"
        frame["in_summary"] = frame["status"] == "summary"
        frame["in_block"] = frame["status"] == "block"
        frame["retrieved"] = frame["status"] == "retrieved"
        frame["lost"] = frame["status"] == "lost"
        frame["policy"] = pd.Categorical(frame["policy"], [p.name for p in self.policies], ordered=True)
        grouped = frame.groupby(["policy", "distance"], observed=True)
        out = grouped[["verbatim", "in_summary", "in_block", "retrieved", "lost", "searchable"]].mean()
        out.insert(0, "n", grouped.size())
        return out

    def dropped(self, policy: str | None = None, *, conversation: str | None = None,
                lost_only: bool = True) -> pd.DataFrame:
        """Which evidence each compaction took out of the model's reach: the facts its summary lost.

        Args:
            policy, conversation: Filter to one policy / conversation.
            lost_only: Only changes to ``lost`` (hidden and not in the summary, or dropped from an earlier
                summary); ``False`` also lists turns a summary kept.
        """
        frame = self.drops
        if policy is not None:
            frame = frame[frame["policy"] == policy]
        if conversation is not None:
            frame = frame[frame["conversation_id"] == conversation]
        if lost_only:
            frame = frame[frame["after"] == "lost"]
        return frame.reset_index(drop=True)

    # -- files ------------------------------------------------------------------------------------------------

    def to_parquet(self, path: str | os.PathLike[str], *, frame: str = "per_question") -> Path:
        """Write one frame (default ``per_question``) to Parquet; the policies' settings go in its metadata.

        Returns:
            The path written.
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        if frame not in ("per_question", "evidence", "compactions", "drops"):
            raise ValueError(f"frame must be per_question, evidence, compactions or drops, not {frame!r}.")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = getattr(self, frame).copy()
        if "category" in data.columns:
            data["category"] = data["category"].astype(str)  # mixed int/str categories upset Arrow
        table = pa.Table.from_pandas(data, preserve_index=False)
        meta = dict(table.schema.metadata or {})
        meta[b"agentlab.policies"] = json.dumps([p.describe() for p in self.policies]).encode()
        meta[b"agentlab.dataset"] = self.dataset.encode()
        pq.write_table(table.replace_schema_metadata(meta), path)
        return path
